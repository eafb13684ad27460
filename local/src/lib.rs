//! A softrnic device hosted in its application's own process, as Linux
//! rxe runs in the kernel beside its callers rather than behind a daemon.
//!
//! With `SOFTRNIC_LOCAL=IFNAME` in its environment, a program's first
//! look at the device list ([`ensure`], from the libibverbs drop-in)
//! starts rnicd's server in the program: the port on interface `IFNAME`
//! (as `rnicd --iface IFNAME`: AF_PACKET with UDP GSO on a veth, else
//! AF_XDP), the interface's address as the GID, the control socket in a
//! folder of the process's own. The client side talks to it as to any
//! rnicd — control messages over the socket, work and completions through
//! the shared rings — but its threads turn the engine's loop themselves
//! when they post and when they find a completion queue empty
//! (`softrnic::client::local`, [`nic::engine::EngineConfig::callers_turn`]):
//! a work request leaves on the wire from the posting thread and a frame
//! is taken off the socket by the polling one, with no engine thread to
//! wake on another CPU. The engine's thread serves the port while the
//! program does not poll (a passive side, a program blocked in
//! `ibv_get_cq_event`).
//!
//! The process's environment then names the folder (`SOFTRNIC_SOCK_DIR`),
//! where the client side lists devices, so that the librdmacm drop-in, a
//! library of its own, finds the device and its RDMA CM too.
//!
//! One process per interface: a second program hosting a device on the
//! same interface would see the first one's frames too. Programs that
//! share a device run `rnicd` instead.

use nic::engine::EngineConfig;
use rnicd::server::{Server, ServerConfig};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

pub use softrnic::client::local::{ENV_IFACE, ENV_NAME};
/// The environment variable naming the port's backend, as `rnicd
/// --backend`: `auto` (the default), `afxdp`, `afpacket`, `afpacket-v3`.
pub const ENV_BACKEND: &str = "SOFTRNIC_LOCAL_BACKEND";

/// Why no device could be hosted.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("{0}: the interface's address: {1}")]
    Address(String, nic::io::addr::AddrError),
    #[error("{0}: {1}")]
    Port(String, nic::io::OpenError),
    #[error("the device's socket folder or server: {0}")]
    Io(#[from] std::io::Error),
    #[error("{ENV_BACKEND}={0}: not auto, afxdp, afpacket or afpacket-v3")]
    Backend(String),
}

/// `SOFTRNIC_LOCAL_BACKEND` as a backend (unset or empty: auto).
fn backend(v: Option<&str>) -> Result<nic::io::Backend, LocalError> {
    use nic::io::Backend;
    Ok(match v.unwrap_or("") {
        "" | "auto" => Backend::Auto,
        "afxdp" => Backend::AfXdp,
        "afpacket" | "afpacket-v2" => Backend::AfPacket,
        "afpacket-v3" => Backend::AfPacketV3,
        other => return Err(LocalError::Backend(other.into())),
    })
}

/// A hosted device: its server (never stopped: it lives as long as the
/// process) and its socket folder.
struct Hosted {
    server: Server,
    dir: PathBuf,
}

static HOSTED: OnceLock<Option<Hosted>> = OnceLock::new();

/// How the client's threads turn the hosted engine.
struct Turner(nic::engine::Device);

impl softrnic::client::local::LocalEngine for Turner {
    fn try_turn(&self) -> Option<usize> {
        self.0.try_turn()
    }
    fn leave(&self) {
        self.0.leave()
    }
}

/// Hosts the device `SOFTRNIC_LOCAL` asks for, once per process; a
/// failure is reported on stderr once and leaves the process without a
/// local device. Whether one is hosted.
pub fn ensure() -> bool {
    HOSTED
        .get_or_init(|| {
            let (ifname, name) = softrnic::client::local::requested()?;
            match host(&ifname, &name) {
                Ok(h) => Some(h),
                Err(e) => {
                    eprintln!("softrnic: {ENV_IFACE}={ifname}: {e}");
                    None
                }
            }
        })
        .is_some()
}

/// Starts the server of device `name` on interface `ifname` and
/// registers it with the client side.
fn host(ifname: &str, name: &str) -> Result<Hosted, LocalError> {
    let ip =
        nic::io::addr::interface_addr(ifname).map_err(|e| LocalError::Address(ifname.into(), e))?;
    let asked = backend(std::env::var(ENV_BACKEND).ok().as_deref())?;
    let (port, _) =
        nic::io::open_port(ifname, asked).map_err(|e| LocalError::Port(ifname.into(), e))?;
    let dir = std::env::temp_dir().join(format!("softrnic-local-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // the folder the client side lists devices in — this library's copy
    // and the librdmacm drop-in's own, which finds the device's CM there.
    // Set before the server's threads start; a program that reads its
    // environment from another thread meanwhile is the one hazard (as of
    // any setenv(3)).
    std::env::set_var("SOFTRNIC_SOCK_DIR", &dir);
    let cfg = ServerConfig {
        name: name.into(),
        sock_dir: dir.clone(),
        // the process's own: no other user connects
        mode: 0o600,
        gid: wire::Gid::from_ip(ip),
        netdev: Some(ifname.into()),
        engine: EngineConfig {
            callers_turn: true,
            // as rnicd's defaults: a woken engine thread runs at once
            // while the program's threads busy-poll every core (SCHED_FIFO
            // where permitted, else a short slice), steps aside under
            // sustained load, and spins briefly while nobody turns it
            priority: nic::engine::Priority::Auto,
            busy_max: std::time::Duration::from_micros(1000),
            busy_pause: std::time::Duration::from_micros(100),
            spin: 30,
            name: format!("softrnic-{name}"),
            ..Default::default()
        },
        bell: true,
        cm: Default::default(),
        dcqcn_rp: true,
        dcqcn_reference_bps: None,
    };
    let server = Server::start(port, cfg)?;
    softrnic::client::local::register(
        server.socket_path(),
        Arc::new(Turner(server.engine_device())),
    );
    // SAFETY: atexit(3) takes a function pointer of the right type.
    unsafe { libc::atexit(remove_folder) };
    Ok(Hosted { server, dir })
}

/// At exit: the socket and its folder go (the server's threads end with
/// the process).
extern "C" fn remove_folder() {
    if let Some(Some(h)) = HOSTED.get() {
        let _ = std::fs::remove_file(h.server.socket_path());
        let _ = std::fs::remove_dir(&h.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nic::io::Backend;

    #[test]
    fn the_backend_is_named_as_rnicds() {
        assert_eq!(backend(None).unwrap(), Backend::Auto);
        assert_eq!(backend(Some("")).unwrap(), Backend::Auto);
        assert_eq!(backend(Some("afxdp")).unwrap(), Backend::AfXdp);
        assert_eq!(backend(Some("afpacket")).unwrap(), Backend::AfPacket);
        assert_eq!(backend(Some("afpacket-v3")).unwrap(), Backend::AfPacketV3);
        let e = backend(Some("dpdk")).unwrap_err();
        assert!(e.to_string().contains("SOFTRNIC_LOCAL_BACKEND=dpdk"), "{e}");
    }

    #[test]
    fn an_interface_that_is_not_there_is_named_in_the_error() {
        let e = host("no-such-if0", "t").err().expect("no such interface");
        assert!(matches!(e, LocalError::Address(..)), "{e:?}");
        assert!(e.to_string().starts_with("no-such-if0: "), "{e}");
    }
}
