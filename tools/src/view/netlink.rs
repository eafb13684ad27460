//! The view over RDMA netlink: the device table the netlink shim
//! (`nlshim/`, preloaded by `rnic exec`) answers `rdma link` and `rdma
//! dev` from, made of the same devices and values as the view's sysfs
//! files ([`super::sysfs`]).

use super::sysfs::{self, Shown};
use nldev::{Device, Netdev};

/// The index of interface `name` in this network namespace (the
/// program's), if it has one.
fn ifindex(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; if_nametoindex only reads it.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// One device as RDMA netlink shows it: its number, name, GUID (as the
/// kernel's `be64_to_cpu` reads the GUID's bytes), firmware, port
/// states, and its netdev when the program's namespace has it (the
/// kernel leaves a netdev of another namespace out).
pub fn device(d: &Shown, ifindex_of: impl Fn(&str) -> Option<u32>) -> Device {
    let l = sysfs::link(&d.port);
    Device {
        index: d.index as u32,
        name: d.info.name.clone(),
        node_guid: u64::from_be_bytes(d.info.node_guid()),
        fw: sysfs::FW_VERSION.into(),
        cap_flags: softrnic::client::DEVICE_CAP_FLAGS.into(),
        port_state: l.state,
        phys_state: l.phys_state,
        netdev: d.info.netdev.as_ref().and_then(|n| {
            ifindex_of(n).map(|index| Netdev {
                name: n.clone(),
                index,
            })
        }),
    }
}

/// The table of `devs`, as [`nldev::table::ENV`] carries it.
pub fn table(devs: &[Shown]) -> String {
    let t: Vec<Device> = devs.iter().map(|d| device(d, ifindex)).collect();
    nldev::table::encode(&t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrnic::{PORT_ACTIVE, PORT_DOWN};

    fn shown(state: u32, netdev: Option<&str>) -> Shown {
        let mut d = sysfs::tests::t0();
        d.index = 2;
        d.port.state = state;
        d.info.netdev = netdev.map(Into::into);
        d
    }

    #[test]
    fn a_device_shows_over_netlink_what_its_sysfs_files_say() {
        let d = device(&shown(PORT_ACTIVE, Some("lo")), |n| {
            (n == "lo").then_some(1)
        });
        assert_eq!(d.index, 2);
        assert_eq!(d.name, "t0");
        // sysfs: node_guid 0053:52ff:fe00:0001
        assert_eq!(d.node_guid, 0x0053_52ff_fe00_0001);
        assert_eq!(d.fw, sysfs::FW_VERSION);
        assert_eq!(d.cap_flags, softrnic::client::DEVICE_CAP_FLAGS as u64);
        assert_eq!((d.port_state, d.phys_state), (4, 5));
        assert_eq!(
            d.netdev,
            Some(Netdev {
                name: "lo".into(),
                index: 1
            })
        );
        let d = device(&shown(PORT_DOWN, Some("gone0")), |_| None);
        assert_eq!((d.port_state, d.phys_state), (1, 3));
        assert_eq!(d.netdev, None);
        let d = device(&shown(PORT_ACTIVE, None), |_| Some(1));
        assert_eq!(d.netdev, None);
    }
}
