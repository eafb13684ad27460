//! The files of the view: what `/sys/class/infiniband`,
//! `/sys/class/infiniband_verbs` and `/dev/infiniband` hold for softrnic
//! devices, as the kernel writes them for an rxe device on the same
//! netdev. Pure: a list of paths and contents that [`super::mount`] lays
//! out.

use softrnic::client::{uverbs_name, GidType};
use softrnic::{DeviceInfo, PortInfo, PORT_ACTIVE};
use std::path::PathBuf;

/// One entry of a tree, relative to the folder it is laid out in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Dir,
    /// A read-only file and its contents.
    File(String),
    Link(PathBuf),
}

/// A device as the view shows it: its place in the drop-in's device list
/// (its `uverbsN`), and what its daemon answered.
#[derive(Clone, Debug)]
pub struct Shown {
    pub index: usize,
    pub info: DeviceInfo,
    pub port: PortInfo,
}

/// `fw_ver`, as `ibv_query_device` reports it.
pub const FW_VERSION: &str = concat!("softrnic ", env!("CARGO_PKG_VERSION"));

/// A port's state and physical state: the numbers (`enum ib_port_state`,
/// the IBA PortPhysicalState) and the names sysfs gives them.
pub struct Link {
    pub state: u8,
    pub state_name: &'static str,
    pub phys_state: u8,
    pub phys_name: &'static str,
}

/// The states ibv_query_port reports: ACTIVE and LinkUp, or DOWN and
/// Disabled.
pub fn link(port: &PortInfo) -> Link {
    if port.state == PORT_ACTIVE {
        Link {
            state: 4,
            state_name: "ACTIVE",
            phys_state: 5,
            phys_name: "LinkUp",
        }
    } else {
        Link {
            state: 1,
            state_name: "DOWN",
            phys_state: 3,
            phys_name: "Disabled",
        }
    }
}

/// `ib_verbs`'s user ABI version (`IB_USER_VERBS_ABI_VERSION`), as
/// `/sys/class/infiniband_verbs/abi_version` shows it.
const UVERBS_ABI_VERSION: u32 = 6;

/// A GID or GUID as sysfs prints it: groups of four hex digits (eight
/// for a GID, four for a GUID).
fn hex_groups(b: &[u8]) -> String {
    let groups: Vec<String> = b
        .chunks(2)
        .map(|c| c.iter().map(|x| format!("{x:02x}")).collect())
        .collect();
    groups.join(":")
}

/// `ports/N/rate`: "<Gb/s> Gb/sec (<lanes>X<speed>)" from the width and
/// speed codes `ibv_query_port` reports.
fn rate_text(width: u8, speed: u8) -> String {
    let lanes: u32 = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        _ => 2,
    };
    // per lane, in tenths of Gb/s
    let (tenths, name) = match speed {
        1 => (25, ""),
        2 => (50, " DDR"),
        4 => (100, " QDR"),
        8 => (100, " FDR10"),
        16 => (140, " FDR"),
        32 => (250, " EDR"),
        64 => (500, " HDR"),
        _ => (1000, " NDR"),
    };
    let t = tenths * lanes;
    let frac = if t.is_multiple_of(10) {
        String::new()
    } else {
        format!(".{}", t % 10)
    };
    format!("{}{frac} Gb/sec ({lanes}X{name})", t / 10)
}

fn file(v: &mut Vec<(PathBuf, Node)>, path: String, text: impl Into<String>) {
    let mut t = text.into();
    t.push('\n');
    v.push((PathBuf::from(path), Node::File(t)));
}

fn dir(v: &mut Vec<(PathBuf, Node)>, path: String) {
    v.push((PathBuf::from(path), Node::Dir));
}

/// Port 1 of a device, under `infiniband/DEV/ports/1/`.
fn port_tree(v: &mut Vec<(PathBuf, Node)>, base: &str, d: &Shown) {
    let p = format!("{base}/ports/1");
    dir(v, format!("{base}/ports"));
    dir(v, p.clone());
    let l = link(&d.port);
    file(
        v,
        format!("{p}/state"),
        format!("{}: {}", l.state, l.state_name),
    );
    file(
        v,
        format!("{p}/phys_state"),
        format!("{}: {}", l.phys_state, l.phys_name),
    );
    let (w, s) = d.port.width_speed();
    file(v, format!("{p}/rate"), rate_text(w, s));
    file(v, format!("{p}/link_layer"), "Ethernet");
    // a RoCE port has no LID, no SM; its capabilities are
    // ibv_query_port's port_cap_flags (IP-based GIDs)
    file(v, format!("{p}/lid"), "0x0");
    file(v, format!("{p}/sm_lid"), "0x0");
    file(v, format!("{p}/sm_sl"), "0");
    file(v, format!("{p}/lid_mask_count"), "0");
    file(
        v,
        format!("{p}/cap_mask"),
        format!("0x{:08x}", verbs_abi::IBV_PORT_IP_BASED_GIDS),
    );
    dir(v, format!("{p}/pkeys"));
    // the one P_Key, the default full member (IBA 10.9.1.2)
    file(v, format!("{p}/pkeys/0"), "0xffff");
    dir(v, format!("{p}/gids"));
    dir(v, format!("{p}/gid_attrs"));
    dir(v, format!("{p}/gid_attrs/types"));
    if d.info.netdev.is_some() {
        dir(v, format!("{p}/gid_attrs/ndevs"));
    }
    for (i, (gid, ty)) in d.info.gid_table().iter().enumerate() {
        file(v, format!("{p}/gids/{i}"), hex_groups(&gid.0));
        let ty = match ty {
            GidType::RoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        };
        file(v, format!("{p}/gid_attrs/types/{i}"), ty);
        if let Some(n) = &d.info.netdev {
            file(v, format!("{p}/gid_attrs/ndevs/{i}"), n.as_str());
        }
    }
    // the table's empty entries: the zero GID, and no type or netdev (the
    // kernel refuses to read those)
    for i in softrnic::client::GID_TABLE_LEN..softrnic::client::PORT_GID_TBL_LEN {
        file(v, format!("{p}/gids/{i}"), hex_groups(&[0; 16]));
    }
}

/// What the view shows under `/sys/class`: `infiniband/DEV/...` and
/// `infiniband_verbs/uverbsN/...` for each device.
pub fn class_tree(devs: &[Shown]) -> Vec<(PathBuf, Node)> {
    let mut v = Vec::new();
    dir(&mut v, "infiniband".into());
    dir(&mut v, "infiniband_verbs".into());
    file(
        &mut v,
        "infiniband_verbs/abi_version".into(),
        UVERBS_ABI_VERSION.to_string(),
    );
    for d in devs {
        let name = &d.info.name;
        let base = format!("infiniband/{name}");
        dir(&mut v, base.clone());
        file(&mut v, format!("{base}/node_type"), "1: CA");
        let guid = hex_groups(&d.info.node_guid());
        file(&mut v, format!("{base}/node_guid"), guid.clone());
        file(&mut v, format!("{base}/sys_image_guid"), guid);
        file(&mut v, format!("{base}/node_desc"), "softrnic");
        file(&mut v, format!("{base}/fw_ver"), FW_VERSION);
        dir(&mut v, format!("{base}/device"));
        if let Some(n) = &d.info.netdev {
            // rxe's own attribute: the netdev it is bound to
            file(&mut v, format!("{base}/parent"), n.as_str());
            dir(&mut v, format!("{base}/device/net"));
            v.push((
                PathBuf::from(format!("{base}/device/net/{n}")),
                Node::Link(PathBuf::from(format!("/sys/class/net/{n}"))),
            ));
        }
        port_tree(&mut v, &base, d);
        let uverbs = format!("infiniband_verbs/{}", uverbs_name(d.index));
        dir(&mut v, uverbs.clone());
        file(&mut v, format!("{uverbs}/ibdev"), name.as_str());
        file(
            &mut v,
            format!("{uverbs}/abi_version"),
            UVERBS_ABI_VERSION.to_string(),
        );
    }
    v
}

/// The nodes the view shows under `/dev/infiniband`: `uverbsN` of each
/// device and `rdma_cm` (each a character device the program may read
/// and write: `/dev/null`'s).
pub fn dev_nodes(devs: &[Shown]) -> Vec<String> {
    let mut v: Vec<String> = devs.iter().map(|d| uverbs_name(d.index)).collect();
    v.push("rdma_cm".into());
    v
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use wire::{EthernetAddress, Gid};

    /// t0 of a mem-pair: on lo, port ACTIVE, the first in the list.
    pub(crate) fn t0() -> Shown {
        Shown {
            index: 0,
            info: DeviceInfo {
                name: "t0".into(),
                gid: Gid::from_ipv4("127.0.0.1".parse().unwrap()),
                mac: EthernetAddress([0x02, 0x53, 0x52, 0, 0, 1]),
                netdev: Some("lo".into()),
                ..Default::default()
            },
            port: PortInfo {
                state: PORT_ACTIVE,
                active_mtu: 4096,
                max_mtu: 4096,
                link_speed_bps: 100_000_000_000,
            },
        }
    }

    fn get(t: &[(PathBuf, Node)], p: &str) -> Node {
        t.iter()
            .find(|(q, _)| q == std::path::Path::new(p))
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| panic!("{p} not in the tree"))
    }

    fn text(t: &[(PathBuf, Node)], p: &str) -> String {
        match get(t, p) {
            Node::File(s) => s,
            n => panic!("{p}: {n:?}"),
        }
    }

    #[test]
    fn a_device_on_lo_as_rxe_shows_it() {
        let t = class_tree(&[t0()]);
        let p = "infiniband/t0/ports/1";
        assert_eq!(text(&t, &format!("{p}/state")), "4: ACTIVE\n");
        assert_eq!(text(&t, &format!("{p}/phys_state")), "5: LinkUp\n");
        assert_eq!(text(&t, &format!("{p}/rate")), "100 Gb/sec (4X EDR)\n");
        assert_eq!(text(&t, &format!("{p}/link_layer")), "Ethernet\n");
        assert_eq!(
            text(&t, &format!("{p}/gids/3")),
            "0000:0000:0000:0000:0000:ffff:7f00:0001\n"
        );
        assert_eq!(
            text(&t, &format!("{p}/gids/0")),
            "fe80:0000:0000:0000:0053:52ff:fe00:0001\n"
        );
        assert_eq!(text(&t, &format!("{p}/gid_attrs/types/2")), "IB/RoCE v1\n");
        assert_eq!(text(&t, &format!("{p}/gid_attrs/types/3")), "RoCE v2\n");
        assert_eq!(text(&t, &format!("{p}/gid_attrs/ndevs/3")), "lo\n");
        assert_eq!(text(&t, &format!("{p}/cap_mask")), "0x04000000\n");
        assert_eq!(text(&t, "infiniband/t0/node_guid"), "0053:52ff:fe00:0001\n");
        assert_eq!(text(&t, "infiniband/t0/node_type"), "1: CA\n");
        assert_eq!(
            get(&t, "infiniband/t0/device/net/lo"),
            Node::Link("/sys/class/net/lo".into())
        );
        assert_eq!(text(&t, "infiniband_verbs/uverbs0/ibdev"), "t0\n");
        assert_eq!(dev_nodes(&[t0()]), ["uverbs0", "rdma_cm"]);
    }

    #[test]
    fn a_device_without_netdev_has_no_net_folder() {
        let mut d = t0();
        d.info.netdev = None;
        d.port.state = softrnic::PORT_DOWN;
        d.index = 2;
        let t = class_tree(&[d]);
        assert!(!t
            .iter()
            .any(|(p, _)| p.to_str().unwrap().contains("net") || p.ends_with("ndevs")));
        assert_eq!(text(&t, "infiniband/t0/ports/1/state"), "1: DOWN\n");
        assert_eq!(text(&t, "infiniband_verbs/uverbs2/ibdev"), "t0\n");
    }

    #[test]
    fn rates_as_the_kernel_prints_them() {
        assert_eq!(rate_text(1, 1), "2.5 Gb/sec (1X)");
        assert_eq!(rate_text(2, 4), "40 Gb/sec (4X QDR)");
        assert_eq!(rate_text(1, 64), "50 Gb/sec (1X HDR)");
        assert_eq!(rate_text(2, 128), "400 Gb/sec (4X NDR)");
    }
}
