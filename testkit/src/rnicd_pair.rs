//! Two rnicd daemons on a wire of their own: namespaces A and B joined by
//! a veth pair ([`Veth`]), A's end at 192.0.2.1/24 and B's at
//! 192.0.2.2/24, an rnicd on each end ([`RnicdPair`]: devices `ra` and
//! `rb`) in its own socket folder, dropping to `nobody` once its port is
//! open. Programs run in a side's namespace as `nobody`, talking to that
//! side's daemon ([`NetRnicd::command`]).
//!
//! Needs root (see [`netns::available`]). Everything goes on drop, even
//! when the test fails: the daemons are killed first, then the namespaces
//! (and the veth with them) are deleted; a run killed before its cleanup
//! is reaped by the next one ([`netns::reap_stale`]).

use crate::netns::{self, Namespaces};
use crate::{abi::profile_dir, wait_for, Missing};
use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long the pair waits for a condition (carrier, a daemon's READY, an
/// active port): far more than a loaded machine needs, so only a stuck
/// run reaches it.
pub const STUCK: Duration = Duration::from_secs(60);

/// rnicd's exit status when the asked-for backend does not exist here
/// (EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: i32 = 69;

/// A's address (device `ra`).
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// B's address (device `rb`).
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// Namespaces `rnic-<tag>a-<pid>` and `rnic-<tag>b-<pid>` joined by the
/// veth pair `<tag>a<n>` ↔ `<tag>b<n>` (n: the pid modulo 10^4), both ends
/// up with carrier. Deleted on drop.
pub struct Veth {
    pub ns_a: String,
    pub ns_b: String,
    pub if_a: String,
    pub if_b: String,
    _ns: Namespaces,
}

impl Veth {
    /// `tag` keeps concurrent users apart: a short word of the test's own
    /// (the interface names, tag + side + 4 digits, must fit 15 bytes).
    pub fn create(tag: &str, mtu: u32) -> io::Result<Veth> {
        let id = std::process::id() % 10_000;
        let (ns_a, ns_b) = (
            netns::ns_name(&format!("{tag}a")),
            netns::ns_name(&format!("{tag}b")),
        );
        let ns = Namespaces::create(&[ns_a.clone(), ns_b.clone()])?;
        let (if_a, if_b) = (format!("{tag}a{id}"), format!("{tag}b{id}"));
        netns::veth(
            &ns_a,
            &if_a,
            &format!("{ADDR_A}/24"),
            &ns_b,
            &if_b,
            &format!("{ADDR_B}/24"),
            mtu,
        )?;
        // both ends have carrier before a daemon looks at them
        for (n, v) in [(&ns_a, &if_a), (&ns_b, &if_b)] {
            wait_for(STUCK, &format!("carrier on {v}"), || {
                carrier(n, v).then_some(()).ok_or_else(String::new)
            });
        }
        Ok(Veth {
            ns_a,
            ns_b,
            if_a,
            if_b,
            _ns: ns,
        })
    }
}

/// Whether `dev` in namespace `ns` has carrier (LOWER_UP).
pub(crate) fn carrier(ns: &str, dev: &str) -> bool {
    Command::new("ip")
        .args(["-n", ns, "-o", "link", "show", "dev", dev])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("LOWER_UP"))
}

/// An rnicd on an interface inside a namespace, dropping to `nobody` once
/// its port is open; its output goes to files ([`NetRnicd::log`]), and
/// `tcpdump` (when installed) records the interface's RoCE frames the
/// kernel's taps see (over AF_PACKET the received ones: the daemon's own
/// sends bypass the taps, so the peer's capture has them), headers only. Killed on drop; when the test fails, its counters, its output and
/// the capture's path (kept in `target/test-captures/`) are printed.
pub struct NetRnicd {
    pub child: Child,
    capture: Option<Child>,
    /// Its namespace.
    pub ns: String,
    /// Its device's name (`ra`, `rb`).
    pub dev: String,
    /// Its interface's address (the device's GID).
    pub addr: Ipv4Addr,
    dir: tempfile::TempDir,
}

impl NetRnicd {
    /// Starts `target/<profile>/rnicd` on `iface` in `ns` and waits for its
    /// READY (the port open, the socket listening, root dropped).
    pub fn start(ns: &str, iface: &str, addr: Ipv4Addr, dev: &str, backend: &str) -> NetRnicd {
        Self::try_start(ns, iface, addr, dev, backend)
            .unwrap_or_else(|why| panic!("rnicd in {ns}: {why}"))
    }

    /// [`NetRnicd::start`], or what rnicd said when `backend` does not
    /// exist on this machine (its exit status 69); any other failure
    /// fails the test.
    pub fn try_start(
        ns: &str,
        iface: &str,
        addr: Ipv4Addr,
        dev: &str,
        backend: &str,
    ) -> Result<NetRnicd, Missing> {
        Self::try_start_with(ns, iface, addr, dev, backend, &[])
    }

    /// [`NetRnicd::try_start`] with more rnicd flags, `extra`.
    pub fn try_start_with(
        ns: &str,
        iface: &str,
        addr: Ipv4Addr,
        dev: &str,
        backend: &str,
        extra: &[&str],
    ) -> Result<NetRnicd, Missing> {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: chmod of our own temp folder (a NUL-terminated path) so
        // `nobody` can use it.
        unsafe { libc::chmod(p.as_ptr(), 0o777) };
        let out = File::create(dir.path().join("rnicd.out")).expect("out");
        let err = File::create(dir.path().join("rnicd.err")).expect("err");
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(profile_dir().join("rnicd"))
            .args(["--iface", iface, "--gid", &addr.to_string(), "--name", dev])
            .args(["--backend", backend])
            .args(extra)
            .args(["--user", "nobody", "--sock-dir"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start rnicd");
        let mut d = NetRnicd {
            child,
            capture: None,
            ns: ns.into(),
            dev: dev.into(),
            addr,
            dir,
        };
        let unavailable = wait_for(STUCK, &format!("rnicd in {ns} READY"), || {
            if let Ok(Some(st)) = d.child.try_wait() {
                if st.code() == Some(EXIT_UNAVAILABLE) {
                    return Ok(Some(d.log("rnicd.err").trim().to_string()));
                }
            }
            d.check_alive();
            if d.log("rnicd.out").contains("READY") {
                Ok(None)
            } else {
                Err(d.log("rnicd.err"))
            }
        });
        if let Some(why) = unavailable {
            return Err(Missing(why));
        }
        // the capture (diagnostics only: without tcpdump there is none)
        let log = File::create(d.dir.path().join("tcpdump.err")).expect("tcpdump log");
        d.capture = Command::new("ip")
            .args([
                "netns", "exec", ns, "tcpdump", "-i", iface, "-s", "160", "-U", "-n",
            ])
            // each frame to the file at once: the test may end any moment
            .arg("--immediate-mode")
            .arg("-w")
            .arg(d.dir.path().join("wire.pcap"))
            .args(["udp", "port", "4791"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .ok();
        if let Some(c) = d.capture.as_mut() {
            let dir = d.dir.path().to_path_buf();
            crate::poll_within(STUCK, || {
                let said = std::fs::read_to_string(dir.join("tcpdump.err")).unwrap_or_default();
                (said.contains("listening on") || c.try_wait().ok().flatten().is_some())
                    .then_some(())
            });
        }
        Ok(d)
    }

    /// The daemon's `rnicd.out` or `rnicd.err` so far.
    pub fn log(&self, f: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default()
    }

    /// The daemon's socket folder (`SOFTRNIC_SOCK_DIR` of its clients).
    pub fn sock_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Fails the test, with the daemon's log, when it has exited.
    pub fn check_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!(
                "rnicd in {} exited ({st}): {}",
                self.ns,
                self.log("rnicd.err")
            );
        }
    }

    /// `prog` in this side's namespace as `nobody`, its stdin empty and
    /// this daemon's socket folder as `SOFTRNIC_SOCK_DIR` (the library path
    /// is the caller's to set).
    pub fn command(&self, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, "setpriv"])
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(prog)
            .env("SOFTRNIC_SOCK_DIR", self.sock_dir())
            .stdin(Stdio::null());
        c
    }

    /// Waits until `ibv_devinfo` (Debian's, through the libibverbs drop-in
    /// of `target/<profile>/softrnic-ibverbs`) shows the port active (the
    /// engine polls the link now and then).
    pub fn wait_active(&self) {
        wait_for(STUCK, &format!("{}: the port active", self.dev), || {
            let out = self
                .command("ibv_devinfo")
                .args(["-d", &self.dev])
                .env("LD_LIBRARY_PATH", profile_dir().join("softrnic-ibverbs"))
                .output()
                .map_err(|e| format!("ibv_devinfo: {e}"))?;
            if String::from_utf8_lossy(&out.stdout).contains("PORT_ACTIVE (4)") {
                Ok(())
            } else {
                Err(format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        });
    }
}

impl Drop for NetRnicd {
    fn drop(&mut self) {
        // a failing test shows what the daemon counted and said
        let counters = std::thread::panicking().then(|| crate::rnicd::counters(self.sock_dir()));
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut kept = String::from("none (no tcpdump)");
        if let Some(mut c) = self.capture.take() {
            // SIGINT: tcpdump writes what it holds and ends
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGINT) };
            if crate::poll_within(STUCK, || c.try_wait().ok().flatten()).is_none() {
                let _ = c.kill();
            }
            let _ = c.wait();
            if counters.is_some() {
                let dest = profile_dir().join("../test-captures");
                let to = dest.join(format!("{}-{}.pcap", self.ns, self.dev));
                kept = match std::fs::create_dir_all(&dest)
                    .and_then(|_| std::fs::copy(self.dir.path().join("wire.pcap"), &to))
                {
                    Ok(_) => format!("{} ({})", to.display(), self.log("tcpdump.err").trim()),
                    Err(e) => format!("not kept: {e}"),
                };
            }
        }
        if let Some(counters) = counters {
            eprintln!(
                "--- rnicd in {} ({}): counters\n{counters}--- capture of its interface: {kept}\n--- stderr\n{}--- stdout\n{}",
                self.ns,
                self.dev,
                self.log("rnicd.err"),
                self.log("rnicd.out")
            );
        }
    }
}

/// An rnicd in each namespace of a [`Veth`] on `backend` (rnicd's
/// `--backend`: `afxdp`, `afpacket`): `a` (device `ra`, 192.0.2.1) and `b`
/// (`rb`, 192.0.2.2). Fields drop in order: the daemons stop before the
/// namespaces go.
pub struct RnicdPair {
    pub a: NetRnicd,
    pub b: NetRnicd,
    pub veth: Veth,
}

impl RnicdPair {
    /// Starts both daemons and checks that each opened its port on
    /// `backend` itself, not a fallback.
    pub fn start(veth: Veth, backend: &str) -> RnicdPair {
        Self::try_start(veth, backend).unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`RnicdPair::start`], or why `backend` does not exist on this
    /// machine (rnicd's exit status 69: AF_XDP without kernel support or
    /// privileges), for the test to skip (or fail under CI).
    pub fn try_start(veth: Veth, backend: &str) -> Result<RnicdPair, Missing> {
        let a = NetRnicd::try_start(&veth.ns_a, &veth.if_a, ADDR_A, "ra", backend)?;
        let b = NetRnicd::try_start(&veth.ns_b, &veth.if_b, ADDR_B, "rb", backend)?;
        let want = match backend {
            "afxdp" => "AfXdp",
            "afpacket" | "afpacket-v2" => "AfPacket",
            "afpacket-v3" => "AfPacketV3",
            other => other,
        };
        for (d, v) in [(&a, &veth.if_a), (&b, &veth.if_b)] {
            let log = d.log("rnicd.err");
            assert!(log.contains(&format!("{v}: {want}")), "{log}");
        }
        Ok(RnicdPair { a, b, veth })
    }

    /// Waits until both ports are active ([`NetRnicd::wait_active`]).
    pub fn wait_active(&self) {
        self.a.wait_active();
        self.b.wait_active();
    }

    /// Fails the test, with its log, when a daemon has exited.
    pub fn check_alive(&mut self) {
        self.a.check_alive();
        self.b.check_alive();
    }
}
