//! The incast workload: unmodified `ib_write_bw` from every host but h0
//! to h0 at once, through the drop-in (`rnic exec` against each host's
//! rnicd). perftest's server serves one client, so h0 runs one server per
//! sender, each on a TCP port of its own (18515 + sender).

use super::host::Daemon;
use super::sys::{self, Proc};
use super::{LabConfig, LabError};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// perftest's default TCP port; sender i's server listens on BASE + i.
pub const BASE_PORT: u16 = 18515;

/// One flow: sender `from` → h0.
pub struct Flow {
    pub from: String,
    pub server: Proc,
    pub client: Option<Proc>,
    pub server_log: PathBuf,
    pub client_log: PathBuf,
}

/// The ib_write_bw command line of host `d`: `-D` seconds of `-s` byte
/// writes on port `port`, to `peer` when a client.
fn perftest(
    rnic: &Path,
    d: &Daemon,
    cfg: &LabConfig,
    port: u16,
    peer: Option<&str>,
) -> Vec<String> {
    let args = perftest_args(cfg);
    perftest_argv(
        rnic,
        (&d.sock_dir, &d.net.name),
        "ib_write_bw",
        &args,
        port,
        peer,
    )
}

/// ib_write_bw's arguments of the incast: `-D` seconds of `-s` byte
/// writes, its average in Gbit/s.
pub fn perftest_args(cfg: &LabConfig) -> Vec<String> {
    vec![
        "--report_gbits".to_string(),
        "-D".into(),
        cfg.duration_s.to_string(),
        "-s".into(),
        cfg.size.to_string(),
    ]
}

/// A perftest program's command line through `rnic exec` (`rnic` is this
/// program) against the rnicd of socket folder `sock_dir` and device
/// `dev`: `prog -d DEV -x 3 -F ARGS -p PORT [PEER]` (GID index 3: the
/// RoCEv2 GID of the host's address).
pub fn perftest_argv(
    rnic: &Path,
    (sock_dir, dev): (&Path, &str),
    prog: &str,
    args: &[String],
    port: u16,
    peer: Option<&str>,
) -> Vec<String> {
    let mut a = vec![
        rnic.display().to_string(),
        "exec".into(),
        "--sock-dir".into(),
        sock_dir.display().to_string(),
        "--".into(),
        prog.into(),
        "-d".into(),
        dev.into(),
        "-x".into(),
        "3".into(),
        "-F".into(),
    ];
    a.extend(args.iter().cloned());
    a.extend(["-p".into(), port.to_string()]);
    a.extend(peer.map(String::from));
    a
}

pub fn spawn(ns: &str, argv: &[String], log: &Path, name: String) -> Result<Proc, LabError> {
    let args: Vec<&OsStr> = argv.iter().map(OsStr::new).collect();
    Proc::spawn(ns, &args, log, name)
}

/// Starts h0's servers, waits until each listens, then starts the
/// senders' clients.
pub fn start(
    rnic: &Path,
    hosts: &[Daemon],
    cfg: &LabConfig,
    logs: &Path,
) -> Result<Vec<Flow>, LabError> {
    let sink = &hosts[0];
    let mut flows = Vec::new();
    for (i, h) in hosts.iter().enumerate().skip(1) {
        let port = BASE_PORT + i as u16;
        let server_log = logs.join(format!("ib_write_bw-server-{}.txt", h.net.name));
        let argv = perftest(rnic, sink, cfg, port, None);
        let server = spawn(
            &sink.net.ns,
            &argv,
            &server_log,
            format!("ib_write_bw server for {}", h.net.name),
        )?;
        flows.push(Flow {
            from: h.net.name.clone(),
            server,
            client: None,
            server_log,
            client_log: logs.join(format!("ib_write_bw-client-{}.txt", h.net.name)),
        });
    }
    for (i, f) in flows.iter_mut().enumerate() {
        let port = BASE_PORT + 1 + i as u16;
        let pid = f.server.child.id();
        sys::wait(&format!("the server for {} listening", f.from), 60, || {
            if let Some(st) = f.server.ended() {
                return Err(failed(
                    "ib_write_bw server",
                    &sink.net.name,
                    st,
                    &f.server_log,
                ));
            }
            Ok(sys::listening(pid, port).then_some(()))
        })?;
    }
    let peer = sink.net.addr.to_string();
    for (i, f) in flows.iter_mut().enumerate() {
        let h = &hosts[i + 1];
        let argv = perftest(rnic, h, cfg, BASE_PORT + 1 + i as u16, Some(&peer));
        f.client = Some(spawn(
            &h.net.ns,
            &argv,
            &f.client_log,
            format!("ib_write_bw {} → h0", h.net.name),
        )?);
    }
    Ok(flows)
}

pub fn failed(
    what: &'static str,
    host: &str,
    st: std::process::ExitStatus,
    log: &Path,
) -> LabError {
    LabError::Workload {
        what,
        host: host.into(),
        status: st.to_string(),
        log: log.to_path_buf(),
    }
}

/// Whether every flow has ended; an error for the first that failed.
pub fn all_done(flows: &mut [Flow]) -> Result<bool, LabError> {
    let mut done = true;
    for f in flows.iter_mut() {
        for (what, p, log) in [
            ("ib_write_bw server", Some(&mut f.server), &f.server_log),
            ("ib_write_bw client", f.client.as_mut(), &f.client_log),
        ] {
            let Some(p) = p else { continue };
            match p.ended() {
                None => done = false,
                Some(st) if !st.success() => return Err(failed(what, &f.from, st, log)),
                Some(_) => {}
            }
        }
    }
    Ok(done)
}

/// The average rate each sender's ib_write_bw reported, Gbit/s, from
/// their outputs in `logs`.
pub fn reported_all(logs: &Path, senders: &[String]) -> Vec<Option<f64>> {
    senders
        .iter()
        .map(|h| {
            let f = logs.join(format!("ib_write_bw-client-{h}.txt"));
            reported_gbits(&std::fs::read_to_string(f).unwrap_or_default())
        })
        .collect()
}

/// The average rate ib_write_bw reported (its `BW average[Gb/sec]`
/// column), in Gbit/s, from a client's output.
pub fn reported_gbits(out: &str) -> Option<f64> {
    // the row under the header: bytes iterations peak average msg-rate
    let mut lines = out.lines().skip_while(|l| !l.contains("BW average"));
    lines.next()?;
    let row: Vec<&str> = lines.next()?.split_whitespace().collect();
    row.get(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_average_comes_from_perftests_row() {
        let out = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 65536      12345          0.00               0.094000            0.000180\n";
        assert_eq!(super::reported_gbits(out), Some(0.094));
        assert_eq!(super::reported_gbits("nothing"), None);
    }
}
