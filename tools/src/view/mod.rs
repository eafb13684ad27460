//! `rnic exec`'s view of the softrnic devices: what programs that look at
//! the system instead of calling verbs read (`/sys/class/infiniband/DEV/…`,
//! `/sys/class/infiniband_verbs/uverbsN/…`, `/dev/infiniband/uverbsN`),
//! shown to the program `rnic exec` starts and its children only, as the
//! kernel shows an rxe device on the same netdev. The view is a snapshot
//! of the devices when the program starts.
//!
//! [`devices`] asks the running daemons (the libibverbs drop-in's device
//! list, in its order); [`enter`] moves this process into namespaces of
//! its own and lays the view out ([`mount`]) from [`sysfs`]'s files;
//! [`netlink`] gives the same devices to the netlink shim that answers
//! `rdma link` and `rdma dev`. docs/dropin.md lists the files and who
//! reads them.

pub mod mount;
pub mod netlink;
pub mod sysfs;

use std::path::{Path, PathBuf};
pub use sysfs::Shown;

/// Why the view could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// No namespace of our own (user namespaces off, seccomp, ...): the
    /// program runs without the view.
    #[error("unshare: {0}")]
    Unshare(std::io::Error),
    #[error("{file}: {source}")]
    IdMap {
        file: String,
        source: std::io::Error,
    },
    #[error("{call} {}: {source}", path.display())]
    Mount {
        call: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("making {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: a NUL in the path", .0.display())]
    Nul(PathBuf),
}

impl crate::Failure for ViewError {}

/// The devices whose sockets are in `sock_dir`, numbered as the
/// libibverbs drop-in numbers them; a device whose daemon does not answer
/// keeps its number but is left out (with a line on stderr).
pub fn devices(sock_dir: &Path) -> Vec<Shown> {
    softrnic::client::device_sockets_in(sock_dir)
        .into_iter()
        .enumerate()
        .filter_map(|(index, s)| {
            let shown = softrnic::Context::open(&s.path).and_then(|c| {
                let port = c.query_port(1)?;
                Ok(Shown {
                    index,
                    info: c.device.clone(),
                    port,
                })
            });
            shown
                .map_err(|e| {
                    eprintln!(
                        "rnic exec: {}: {e}; the view leaves {} out",
                        s.path.display(),
                        s.name
                    )
                })
                .ok()
        })
        .collect()
}

/// The device a program hosts itself (`SOFTRNIC_LOCAL=IFNAME`, crate
/// `softrnic-local`) as it will answer, from the interface alone — the
/// program opens the port when it first lists its devices, after the view
/// is made: device `name` on interface `ifname`, the interface's address as
/// its GID and its MAC, MTU, link state and speed as an rnicd port on it
/// takes them. The only device that program lists, hence number 0. The
/// view shows none of the device's limits (`max_qp_wr`, ...), which stay 0.
pub fn hosted(ifname: &str, name: &str) -> Result<Shown, String> {
    let iface = nic::io::iface::Interface::open(ifname).map_err(|e| format!("{ifname}: {e}"))?;
    let ip = nic::io::addr::interface_addr(ifname).map_err(|e| format!("{ifname}: {e}"))?;
    let gid = wire::Gid::from_ip(ip);
    let base = nic::io::PortBase::of(&iface);
    let mut rnic = nic::device::Rnic::new(nic::transport::RnicConfig::new(base.mac(), gid));
    rnic.fit_port(base.link_speed_bps(), base.mtu());
    rnic.init_link_up(iface.link_up().unwrap_or(true));
    Ok(Shown {
        index: 0,
        info: softrnic::client::DeviceInfo {
            name: name.into(),
            gid,
            mac: base.mac(),
            mtu: base.mtu() as u32,
            netdev: Some(ifname.into()),
            ..Default::default()
        },
        port: softrnic::client::PortInfo::from(&rnic.port_attr()),
    })
}

/// Whether a `/sys/class` entry is one the view replaces (the RDMA
/// classes: only softrnic's devices are shown, as only they are listed).
fn rdma_class(name: &str) -> bool {
    name.starts_with("infiniband")
}

/// Moves this process (still one thread) into namespaces of its own and
/// shows `devs` in `/sys/class` and `/dev`. On [`ViewError::Unshare`]
/// nothing changed; on another error the process is half-way and should
/// not run the program.
pub fn enter(devs: &[Shown]) -> Result<(), ViewError> {
    mount::unshare()?;
    mount::cover(
        Path::new("/sys/class"),
        &rdma_class,
        &sysfs::class_tree(devs),
        &[],
    )?;
    let binds: Vec<(PathBuf, PathBuf)> = sysfs::dev_nodes(devs)
        .into_iter()
        .map(|n| (Path::new("infiniband").join(n), PathBuf::from("/dev/null")))
        .collect();
    mount::cover(
        Path::new("/dev"),
        &|n| n == "infiniband",
        &[(PathBuf::from("infiniband"), sysfs::Node::Dir)],
        &binds,
    )
}
