//! The devices in the socket directory and what a device shows as a RoCE
//! device does: the node GUID and the GID table. The libibverbs drop-in
//! answers its queries from these, and `rnic exec`'s view of
//! `/sys/class/infiniband` writes the same.

use super::{sock_dir, DeviceInfo};
use std::path::{Path, PathBuf};
use wire::Gid;

/// A device's control socket in the socket directory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceSocket {
    /// The device's name: the socket's file name without `.sock`.
    pub name: String,
    pub path: PathBuf,
}

/// The devices whose sockets (`<name>.sock`, a name of 1 to 63 bytes) are
/// in [`sock_dir`] now, sorted by name: the libibverbs drop-in's device
/// list, and the order it numbers them in ([`uverbs_name`]).
pub fn device_sockets() -> Vec<DeviceSocket> {
    device_sockets_in(&sock_dir())
}

/// [`device_sockets`] of the socket directory `dir`.
pub fn device_sockets_in(dir: &Path) -> Vec<DeviceSocket> {
    use std::os::unix::fs::FileTypeExt;
    let mut v: Vec<DeviceSocket> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let path = e.path();
                    let name = path.file_stem()?.to_str()?.to_string();
                    let is_sock = e.file_type().ok()?.is_socket();
                    (is_sock && path.extension()? == "sock" && !name.is_empty() && name.len() < 64)
                        .then_some(DeviceSocket { name, path })
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The name of the `index`th device's verbs node, as the kernel names
/// them (`/dev/infiniband/uverbsN`, `/sys/class/infiniband_verbs/uverbsN`):
/// what the libibverbs drop-in reports as `dev_name` and `rnic exec`'s
/// view shows.
pub fn uverbs_name(index: usize) -> String {
    format!("uverbs{index}")
}

/// The RoCE version of a GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    /// RoCE v1 (the GRH on Ethernet; shown as "IB/RoCE v1").
    RoceV1,
    /// RoCE v2 (IP/UDP 4791).
    RoceV2,
}

/// The GID index softrnic sends from (RoCE v2, the device's address).
pub const ROCE_V2_GID_INDEX: usize = 3;
/// The GID table entries softrnic fills ([`DeviceInfo::gid_table`]).
pub const GID_TABLE_LEN: usize = 4;
/// The port's GID table length (`gid_tbl_len`), as Linux rxe's: the
/// entries past [`GID_TABLE_LEN`] are empty, as a RoCE port's free slots
/// are (programs probe them: rdma-core's `ibv_query_gid_ex` bad flow).
pub const PORT_GID_TBL_LEN: usize = 1024;

impl DeviceInfo {
    /// The node GUID made from the MAC as for an Ethernet RDMA device
    /// (EUI-64: the MAC with ff:fe in the middle and the U/L bit flipped),
    /// most significant byte first.
    pub fn node_guid(&self) -> [u8; 8] {
        let m = self.mac.0;
        [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
    }

    /// The GID table a RoCE netdev with one address shows (as Linux rxe
    /// and mlx5 fill it): index 0 the link-local IPv6 GID from the MAC as
    /// RoCE v1, 1 the same as RoCE v2, 2 the device's address
    /// (IPv4-mapped for IPv4) as RoCE v1, 3 the same as RoCE v2
    /// ([`ROCE_V2_GID_INDEX`], the one softrnic sends from).
    pub fn gid_table(&self) -> [(Gid, GidType); GID_TABLE_LEN] {
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[8..16].copy_from_slice(&self.node_guid());
        [
            (Gid(ll), GidType::RoceV1),
            (Gid(ll), GidType::RoceV2),
            (self.gid, GidType::RoceV1),
            (self.gid, GidType::RoceV2),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::EthernetAddress;

    #[test]
    fn gid_table_of_a_device() {
        let d = DeviceInfo {
            name: "t0".into(),
            gid: Gid::from_ipv4("127.0.0.1".parse().unwrap()),
            mac: EthernetAddress([0x02, 0x53, 0x52, 0, 0, 1]),
            mtu: 4096,
            max_qp_wr: 1,
            max_cqe: 1,
            max_sge: 1,
            netdev: Some("lo".into()),
        };
        assert_eq!(d.node_guid(), [0, 0x53, 0x52, 0xff, 0xfe, 0, 0, 1]);
        let t = d.gid_table();
        assert_eq!(
            t[0].0 .0,
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x53, 0x52, 0xff, 0xfe, 0, 0, 1]
        );
        assert_eq!((t[1].0, t[1].1), (t[0].0, GidType::RoceV2));
        assert_eq!(t[ROCE_V2_GID_INDEX], (d.gid, GidType::RoceV2));
        assert_eq!(t[2], (d.gid, GidType::RoceV1));
    }
}
