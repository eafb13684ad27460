//! Hosts on a switch: a namespace `rnic-<tag>sw-<pid>` holding a bridge
//! (the switch), and N host namespaces `rnic-<tag>hI-<pid>`, each joined
//! to the bridge by a veth pair (`<tag>hI<n>` in the host at
//! 192.0.2.(I+1)/24, `<tag>sI<n>` its switch port; n: the pid modulo
//! 10^3), an rnicd on each host's end (device `rI`, [`NetRnicd`]).
//! Everything goes on drop, the daemons first; a run killed before its
//! cleanup is reaped by the next one ([`netns::reap_stale`]).

use crate::netns::{self, ip, Namespaces};
use crate::rnicd_pair::{carrier, NetRnicd, STUCK};
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// One host: its namespace, interface, switch port and rnicd.
pub struct Host {
    pub ns: String,
    pub iface: String,
    /// Its veth's other end, a port of the switch.
    pub port: String,
    pub rnicd: NetRnicd,
}

/// N hosts on a bridge, each with an rnicd; fields drop in order: the
/// daemons stop before the namespaces go.
pub struct Switched {
    pub hosts: Vec<Host>,
    /// The switch's namespace.
    pub switch: String,
    _ns: Namespaces,
}

/// Host `i`'s address: 192.0.2.(i+1).
pub fn host_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 1 + i as u8)
}

impl Switched {
    /// `n` hosts (at most 9) with an rnicd each on `backend` (rnicd's
    /// `--backend`; frame by frame, `--gso off`, so that a capture on the
    /// switch shows the frames), every port active; or why `backend` does not exist
    /// here (rnicd's exit status 69), for the test to skip (or fail
    /// under CI). `tag` keeps concurrent users apart (a short word: the
    /// interface names, tag + role + digit + 3 digits, fit 15 bytes).
    pub fn try_start(tag: &str, n: usize, backend: &str) -> Result<Switched, crate::Missing> {
        let fabric = |e: io::Error| crate::Missing::new(format!("namespaces and bridge: {e}"));
        let switch = netns::ns_name(&format!("{tag}sw"));
        let hosts: Vec<String> = (0..n)
            .map(|i| netns::ns_name(&format!("{tag}h{i}")))
            .collect();
        let mut names = vec![switch.clone()];
        names.extend(hosts.iter().cloned());
        let ns = Namespaces::create(&names).map_err(fabric)?;
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]).map_err(fabric)?;
        ip(&["-n", &switch, "link", "set", "br0", "up"]).map_err(fabric)?;
        let id = std::process::id() % 1_000;
        let mut wired = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            let (iface, port) = (format!("{tag}h{i}{id}"), format!("{tag}s{i}{id}"));
            let addr = format!("{}/24", host_addr(i));
            plug(&switch, h, &iface, &port, &addr).map_err(fabric)?;
            wired.push((h.clone(), iface, port));
        }
        let mut up = Vec::new();
        for (i, (h, iface, port)) in wired.into_iter().enumerate() {
            crate::wait_for(STUCK, &format!("carrier on {iface}"), || {
                carrier(&h, &iface).then_some(()).ok_or_else(String::new)
            });
            let dev = format!("r{i}");
            let flags = ["--gso", "off"];
            let rnicd = NetRnicd::try_start_with(&h, &iface, host_addr(i), &dev, backend, &flags)?;
            up.push(Host {
                ns: h,
                iface,
                port,
                rnicd,
            });
        }
        for h in &up {
            h.rnicd.wait_active();
        }
        Ok(Switched {
            hosts: up,
            switch,
            _ns: ns,
        })
    }

    /// Fails the test, with its log, when a daemon has exited.
    pub fn check_alive(&mut self) {
        for h in &mut self.hosts {
            h.rnicd.check_alive();
        }
    }

    /// Starts recording the RoCEv2 frames (UDP 4791) through host `i`'s
    /// switch port into `file`, their first 128 bytes (the headers);
    /// returns once tcpdump listens.
    pub fn capture(&self, i: usize, file: &Path) -> Capture {
        let log = file.with_extension("log");
        let child = Command::new("ip")
            .args(["netns", "exec", &self.switch, "tcpdump", "-i"])
            .arg(&self.hosts[i].port)
            .args(["-s", "128", "-B", "16384", "-U", "-n", "--immediate-mode"])
            .arg("-w")
            .arg(file)
            .args(["udp", "port", "4791"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("tcpdump log"))
            .spawn()
            .expect("start tcpdump");
        let mut c = Capture {
            child,
            log,
            file: file.to_path_buf(),
        };
        crate::wait_for(STUCK, "tcpdump listening", || {
            if c.child.try_wait().ok().flatten().is_some() {
                panic!("tcpdump ended: {}", c.said());
            }
            c.said()
                .contains("listening on")
                .then_some(())
                .ok_or_else(|| c.said())
        });
        c
    }
}

/// Joins host namespace `host` to the bridge of `switch`: `iface` in the
/// host at `addr`, `port` on the bridge.
fn plug(switch: &str, host: &str, iface: &str, port: &str, addr: &str) -> io::Result<()> {
    ip(&[
        "link", "add", iface, "netns", host, "type", "veth", "peer", "name", port, "netns", switch,
    ])?;
    ip(&["-n", switch, "link", "set", port, "master", "br0"])?;
    ip(&["-n", switch, "link", "set", port, "up"])?;
    ip(&["-n", host, "addr", "add", addr, "dev", iface])?;
    ip(&["-n", host, "link", "set", iface, "up"])
}

/// A running tcpdump; [`Capture::stop`] ends it and gives the file.
pub struct Capture {
    child: Child,
    log: PathBuf,
    file: PathBuf,
}

impl Capture {
    /// What tcpdump said so far.
    pub fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Ends tcpdump (SIGINT: it writes what it holds) and returns the
    /// capture file and tcpdump's closing words (frames captured and
    /// dropped by the kernel).
    pub fn stop(mut self) -> (PathBuf, String) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        if crate::poll_within(STUCK, || self.child.try_wait().ok().flatten()).is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        (self.file.clone(), self.said())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
