//! A pcap per link: `tcpdump` on each host's switch port, in its switch's
//! namespace, into `link-hI.pcap` in the results folder, and with two
//! switches on switch 0's end of the trunk into `link-trunk.pcap`. Bounded: frames
//! are cut at [`SNAPLEN`] bytes (the headers through the BTH and more) and
//! a capture stops after [`MAX_FRAMES`] frames (at most about 30 MB a
//! link). Each tcpdump is a [`Proc`]: SIGTERM at teardown, which makes it
//! flush and close its file.

use super::net::Fabric;
use super::sys::{self, Proc};
use super::LabError;
use std::ffi::OsStr;
use std::path::Path;

/// Bytes kept of each frame.
pub const SNAPLEN: u32 = 128;
/// Frames a link's capture keeps at most.
pub const MAX_FRAMES: u32 = 200_000;

/// Starts one tcpdump per link and waits until each listens.
pub fn start(fabric: &Fabric, out: &Path, logs: &Path) -> Result<Vec<Proc>, LabError> {
    sys::require("tcpdump", "--version")?;
    let mut procs = Vec::new();
    let links = fabric
        .hosts
        .iter()
        .map(|h| (h.name.as_str(), h.switch.as_str(), h.port.as_str()))
        .chain(fabric.trunk.iter().map(|t| {
            (
                "trunk",
                t.ports[0].switch.as_str(),
                t.ports[0].iface.as_str(),
            )
        }));
    for (name, switch, port) in links {
        let file = out.join(format!("link-{name}.pcap"));
        let log = logs.join(format!("tcpdump-{name}.txt"));
        let (snap, count) = (SNAPLEN.to_string(), MAX_FRAMES.to_string());
        let args: Vec<&OsStr> = vec![
            "tcpdump".as_ref(),
            "-i".as_ref(),
            port.as_ref(),
            "-n".as_ref(),
            "-U".as_ref(),
            // frames reach tcpdump as they come, not in blocks the kernel
            // retires on a timeout: the SIGTERM at teardown loses none
            "--immediate-mode".as_ref(),
            "-s".as_ref(),
            snap.as_ref(),
            "-c".as_ref(),
            count.as_ref(),
            "-w".as_ref(),
            file.as_os_str(),
        ];
        procs.push(Proc::spawn(switch, &args, &log, format!("tcpdump {port}"))?);
        sys::wait(&format!("tcpdump on {port}"), 10, || {
            Ok(std::fs::read_to_string(&log)
                .is_ok_and(|t| t.contains("listening on"))
                .then_some(()))
        })?;
    }
    Ok(procs)
}
