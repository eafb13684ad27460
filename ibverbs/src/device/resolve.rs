//! The destination MAC of a GID: a local softrnic device, else the
//! kernel's neighbour table.

use super::*;

/// Why no destination MAC was found for a GID.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No local device has the GID and the kernel has no neighbour entry
    /// for the address.
    #[error("no MAC for {ip}: {source}{}", unanswered(.silent))]
    NoNeighbour {
        /// The GID as an IP address.
        ip: std::net::IpAddr,
        /// Why the kernel's next hop was not found.
        source: nic::io::addr::AddrError,
        /// The local devices whose daemon did not answer (one of them may
        /// have had the GID), with why.
        silent: Vec<String>,
    },
}

/// Why a local device's address could not be asked.
#[derive(Debug, thiserror::Error)]
enum LocalAddressError {
    /// The device's socket file cannot be read.
    #[error("{0}")]
    Socket(std::io::Error),
    /// The daemon did not answer.
    #[error("{0}")]
    Daemon(softrnic::Error),
}

fn unanswered(silent: &[String]) -> String {
    if silent.is_empty() {
        String::new()
    } else {
        format!(" (devices that did not answer: {})", silent.join(", "))
    }
}

/// The destination MAC for `dgid`: a softrnic device on this host with
/// that GID (the in-memory wire has no neighbour table), else the
/// kernel's next hop for the address (ARP/ND) in this namespace.
pub fn resolve_mac(dgid: Gid) -> Result<wire::EthernetAddress, ResolveError> {
    let mut silent = Vec::new();
    for d in scan() {
        match local_address(&d.sock) {
            Ok((gid, mac)) if gid == dgid => return Ok(mac),
            Ok(_) => {}
            Err(e) => silent.push(format!("{}: {e}", d.name)),
        }
    }
    let ip = dgid.to_ip();
    nic::io::addr::next_hop_mac(ip, std::time::Duration::from_secs(3))
        .map(|(_, mac)| mac)
        .map_err(|source| ResolveError::NoNeighbour { ip, source, silent })
}

/// The GID and MAC of the device behind socket `sock`, asked once per
/// socket file (a restarted daemon makes a new one: its inode and change
/// time key the cache).
fn local_address(
    sock: &std::path::Path,
) -> Result<(Gid, wire::EthernetAddress), LocalAddressError> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Mutex;
    type Key = (std::path::PathBuf, u64, i64, i64);
    static SEEN: Mutex<Option<HashMap<Key, (Gid, wire::EthernetAddress)>>> = Mutex::new(None);
    let m = std::fs::metadata(sock).map_err(LocalAddressError::Socket)?;
    let key = (sock.to_path_buf(), m.ino(), m.ctime(), m.ctime_nsec());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(HashMap::new);
    if let Some(v) = seen.get(&key) {
        return Ok(*v);
    }
    let c = softrnic::Context::open(sock).map_err(LocalAddressError::Daemon)?;
    let v = (c.device.gid, c.device.mac);
    seen.retain(|k, _| k.0 != key.0);
    seen.insert(key, v);
    Ok(v)
}

/// `ibv_resolve_eth_l2_from_gid`: the MAC (and no VLAN) for the AV's GID.
///
/// # Safety
/// `c` open, `attr` readable, `eth_mac` writable for 6 bytes, `vid`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_resolve_eth_l2_from_gid(
    c: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    eth_mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    if unsafe { Ctx::from(c) }.is_none() || attr.is_null() || eth_mac.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's AV.
    let dgid = Gid(unsafe { (*attr).grh.dgid.raw });
    match resolve_mac(dgid) {
        Ok(mac) => {
            // SAFETY: 6 writable bytes, and vid if given.
            unsafe {
                std::ptr::copy_nonoverlapping(mac.0.as_ptr(), eth_mac, 6);
                if !vid.is_null() {
                    *vid = 0xffff;
                }
            }
            0
        }
        Err(e) => {
            complain("ibv_resolve_eth_l2_from_gid", e);
            libc::EHOSTUNREACH
        }
    }
}
