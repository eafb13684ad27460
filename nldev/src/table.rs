//! The devices the answers describe, and their text form: `rnic exec`
//! puts it in [`ENV`] for the netlink shim of the program it starts.

use serde::{Deserialize, Serialize};

/// The environment variable holding the table ([`encode`]'s text).
pub const ENV: &str = "SOFTRNIC_NLDEV";

/// A device as `RDMA_NLDEV_CMD_GET` and `RDMA_NLDEV_CMD_PORT_GET` show
/// it. softrnic devices have one port, port 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// `RDMA_NLDEV_ATTR_DEV_INDEX`: its place in the drop-in's device
    /// list (its `uverbsN`).
    pub index: u32,
    pub name: String,
    /// The node GUID as the kernel puts it (`be64_to_cpu` of the GUID's
    /// bytes); also the system image GUID.
    pub node_guid: u64,
    /// `fw_ver`, as `ibv_query_device` and the view's sysfs file say it.
    pub fw: String,
    /// The device's capability flags (`ibv_query_device`'s
    /// `device_cap_flags`, the kernel's bits).
    pub cap_flags: u64,
    /// Port 1's state (`enum ib_port_state`: 1 DOWN, 4 ACTIVE).
    pub port_state: u8,
    /// Port 1's physical state (3 Disabled, 5 LinkUp).
    pub phys_state: u8,
    /// The netdev, when the device has one in the program's network
    /// namespace.
    pub netdev: Option<Netdev>,
}

/// A kernel interface: its name and index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Netdev {
    pub name: String,
    pub index: u32,
}

/// Why [`decode`] refused a table.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("SOFTRNIC_NLDEV: not a device table: {0}")]
    Json(#[from] serde_json::Error),
}

/// The table's text form.
pub fn encode(devs: &[Device]) -> String {
    // a Vec of plain structs always serialises
    serde_json::to_string(devs).unwrap_or_else(|_| "[]".into())
}

/// The table from its text form.
pub fn decode(text: &str) -> Result<Vec<Device>, TableError> {
    Ok(serde_json::from_str(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_survives_its_text_form() {
        let devs = vec![
            Device {
                index: 0,
                name: "t0".into(),
                node_guid: 0x0053_52ff_fe00_0001,
                fw: "softrnic 0.1.0".into(),
                cap_flags: 0x0102_1800,
                port_state: 4,
                phys_state: 5,
                netdev: Some(Netdev {
                    name: "a,b;c\"".into(),
                    index: 1,
                }),
            },
            Device {
                index: 3,
                name: "x".into(),
                node_guid: u64::MAX,
                fw: String::new(),
                cap_flags: 0,
                port_state: 1,
                phys_state: 3,
                netdev: None,
            },
        ];
        assert_eq!(decode(&encode(&devs)).unwrap(), devs);
        assert!(decode("[{").is_err());
        assert!(decode("{}").is_err());
    }
}
