//! A network interface as a port on it sees it: its index, MAC and MTU
//! when the port opens, and its link state whenever the engine asks, all
//! through interface ioctls on an AF_INET socket in the interface's
//! network namespace (sysfs would show the mount's namespace instead).
//! The AF_PACKET and AF_XDP ports both open one.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use wire::EthernetAddress;

/// Why an interface could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum IfaceError {
    #[error("interface {0}: no such interface")]
    NoInterface(String),
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        source: io::Error,
    },
}

fn sys(what: &'static str) -> IfaceError {
    IfaceError::Sys {
        what,
        source: io::Error::last_os_error(),
    }
}

/// An interface in the calling thread's network namespace when opened.
pub struct Interface {
    pub name: String,
    pub index: i32,
    /// The MAC and MTU the kernel gave when the interface was opened.
    pub mac: EthernetAddress,
    pub mtu: usize,
    /// The socket the ioctls go through (kept for the link state; it stays
    /// in the namespace it was opened in whatever thread asks later).
    ctl: OwnedFd,
}

impl Interface {
    /// Opens `name` in the calling thread's namespace: its index, MAC and
    /// MTU.
    pub fn open(name: &str) -> Result<Interface, IfaceError> {
        // SAFETY: socket(2) takes no pointers; the result is checked below.
        let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(sys("socket(AF_INET) for interface ioctls"));
        }
        // SAFETY: raw is a descriptor socket(2) just returned, owned by nothing else.
        let ctl = unsafe { OwnedFd::from_raw_fd(raw) };
        let (index, mac, mtu) = facts(ctl.as_raw_fd(), name)?;
        Ok(Interface {
            name: name.into(),
            index,
            mac,
            mtu,
            ctl,
        })
    }

    /// Whether the interface is up with carrier now, as rxe judges its
    /// port (`netif_running` and `netif_carrier_ok`: IFF_UP, and the
    /// driver's link or else IFF_RUNNING); an interface that vanished
    /// counts as down. Never `None`: the answer of a port on an interface
    /// to [`Port::link_up`](super::Port::link_up).
    pub fn link_up(&self) -> Option<bool> {
        Some(link_flags_up(self.ctl.as_raw_fd(), &self.name).unwrap_or(false))
    }
}

/// `struct ethtool_drvinfo` (linux/ethtool.h).
#[repr(C)]
struct Drvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// ETHTOOL_GDRVINFO (linux/ethtool.h): the name of the interface's
/// driver (`veth`, `mlx5_core`, ...); None when the call fails.
pub fn driver(name: &str) -> Option<String> {
    const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
    // SAFETY: socket(2) takes no pointers; the result is checked below.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return None;
    }
    // SAFETY: raw is a descriptor socket(2) just returned, owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut ifr = ifreq(name)?;
    // SAFETY: Drvinfo is integers and byte arrays: all zeroes is valid.
    let mut info: Drvinfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    ifr.ifr_ifru.ifru_data = (&mut info as *mut Drvinfo).cast();
    // SAFETY: SIOCETHTOOL reads the name and the pointer in `ifr` and
    // writes `info`, a live, writable ethtool_drvinfo, through it.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) } != 0 {
        return None;
    }
    let end = info.driver.iter().position(|&c| c == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// A zeroed `ifreq` naming `name`; None if the name cannot be one (a NUL,
/// or IFNAMSIZ bytes or more).
fn ifreq(name: &str) -> Option<libc::ifreq> {
    let c = CString::new(name).ok()?;
    if c.as_bytes().len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: ifreq is a name array and a union of plain integers, arrays
    // and pointers, for all of which all zeroes is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(c.as_bytes()) {
        *d = *s as libc::c_char;
    }
    Some(ifr)
}

/// Whether interface `name` (in `fd`'s network namespace) is up with
/// carrier, as rxe judges its port (`netif_running` and
/// `netif_carrier_ok`): SIOCGIFFLAGS has IFF_UP, and ETHTOOL_GLINK reports
/// the link, or, for a driver without it, IFF_RUNNING. IFF_RUNNING alone
/// is the RFC 2863 operational state, which the kernel's link watch
/// updates after the carrier and which blinks while an XDP program is
/// attached to the peer of a veth. None when SIOCGIFFLAGS fails (the
/// interface went away: the caller reports that as it sees fit).
fn link_flags_up(fd: libc::c_int, name: &str) -> Option<bool> {
    let mut ifr = ifreq(name)?;
    // SAFETY: SIOCGIFFLAGS reads the NUL-terminated name and writes the
    // flags inside `ifr`, a live, writable ifreq.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) } != 0 {
        return None;
    }
    // SAFETY: SIOCGIFFLAGS succeeded, so the flags member is the union's
    // initialised one (and any bit pattern is a valid c_short).
    let flags = unsafe { ifr.ifr_ifru.ifru_flags } as libc::c_int;
    if flags & libc::IFF_UP == 0 {
        return Some(false);
    }
    Some(carrier(fd, name).unwrap_or(flags & libc::IFF_RUNNING != 0))
}

/// ETHTOOL_GLINK (linux/ethtool.h): the driver's link (carrier) state;
/// None when the driver has no such call.
fn carrier(fd: libc::c_int, name: &str) -> Option<bool> {
    /// `struct ethtool_value`: a command and its one value.
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    const ETHTOOL_GLINK: u32 = 0x0000_000a;
    let mut ifr = ifreq(name)?;
    let mut v = EthtoolValue {
        cmd: ETHTOOL_GLINK,
        data: 0,
    };
    ifr.ifr_ifru.ifru_data = (&mut v as *mut EthtoolValue).cast();
    // SAFETY: SIOCETHTOOL reads the name and the pointer in `ifr` and
    // writes `v`, a live, writable ethtool_value, through it.
    if unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut ifr) } != 0 {
        return None;
    }
    Some(v.data != 0)
}

/// Interface facts from the kernel through `fd`'s network namespace:
/// (ifindex, MAC, MTU).
fn facts(fd: libc::c_int, name: &str) -> Result<(i32, EthernetAddress, usize), IfaceError> {
    let mut ifr = ifreq(name).ok_or_else(|| IfaceError::NoInterface(name.into()))?;
    // SAFETY: each ioctl reads the NUL-terminated name and writes one
    // union member of `ifr`, a live, writable ifreq; each member is read
    // only after the ioctl that writes it succeeded, and every bit pattern
    // is a valid value of these integer members.
    unsafe {
        if libc::ioctl(fd, libc::SIOCGIFINDEX, &mut ifr) != 0 {
            return Err(IfaceError::NoInterface(name.into()));
        }
        let idx = ifr.ifr_ifru.ifru_ifindex;
        if libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut ifr) != 0 {
            return Err(sys("SIOCGIFHWADDR"));
        }
        let mut mac = [0u8; 6];
        for (m, b) in mac.iter_mut().zip(ifr.ifr_ifru.ifru_hwaddr.sa_data.iter()) {
            *m = *b as u8;
        }
        if libc::ioctl(fd, libc::SIOCGIFMTU, &mut ifr) != 0 {
            return Err(sys("SIOCGIFMTU"));
        }
        Ok((idx, EthernetAddress(mac), ifr.ifr_ifru.ifru_mtu as usize))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn drvinfo_is_the_uapi_struct() {
        // sizeof(struct ethtool_drvinfo), the driver name right after cmd
        assert_eq!(std::mem::size_of::<super::Drvinfo>(), 196);
        assert_eq!(std::mem::offset_of!(super::Drvinfo, driver), 4);
        assert_eq!(std::mem::offset_of!(super::Drvinfo, regdump_len), 192);
    }
}
