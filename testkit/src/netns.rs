//! Network namespaces for real-I/O tests: create a pair of
//! namespaces joined by a veth pair (addresses only inside them), run code
//! inside one, and remove everything on drop — even when a test fails.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Runs `ip` with `args`; an error carries its stderr.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let mut c = Command::new("ip");
    c.args(args);
    checked(c, || format!("ip {}", args.join(" ")))
}

/// Runs `c`; a failure is an error naming `what` with the command's stderr.
fn checked(mut c: Command, what: impl FnOnce() -> String) -> io::Result<()> {
    let out = c.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{}: {}",
            what(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Why this process cannot create network namespaces.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// Not running as root.
    #[error("not root: network namespaces need CAP_SYS_ADMIN")]
    NotRoot,
    /// `ip` cannot be run.
    #[error("`ip` (iproute2) is not installed: {0}")]
    NoIp(io::Error),
}

/// Whether this process can create namespaces (root and `ip` present).
pub fn available() -> Result<(), Unavailable> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Unavailable::NotRoot);
    }
    Command::new("ip")
        .arg("-V")
        .output()
        .map_err(Unavailable::NoIp)?;
    Ok(())
}

/// A namespace name for this process: `rnic-<tag>-<pid>`, the form
/// `reap_stale` understands. Tests use distinct tags.
pub fn ns_name(tag: &str) -> String {
    format!("rnic-{tag}-{}", std::process::id())
}

/// Deletes namespaces named `<prefix>...-<pid>` whose process is gone (a
/// test killed before its cleanup ran). Names must end in the full PID of
/// the process that made them (`ns_name`).
pub fn reap_stale(prefix: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|r| r.rsplit('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// Named namespaces that are deleted on drop.
pub struct Namespaces {
    pub names: Vec<String>,
}

impl Namespaces {
    /// Creates the namespaces (names should end in `-<pid>` so that
    /// `reap_stale` can clean up after a killed run).
    pub fn create(names: &[String]) -> io::Result<Namespaces> {
        reap_stale("rnic-");
        let mut me = Namespaces { names: Vec::new() };
        for n in names {
            let _ = ip(&["netns", "del", n]);
            ip(&["netns", "add", n])?;
            me.names.push(n.clone());
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(me)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// Joins namespace `ns` with `a` (in `ns_a`) ↔ `b` (in `ns_b`), each end up
/// with the given address/prefix and MTU.
pub fn veth(
    ns_a: &str,
    a: &str,
    addr_a: &str,
    ns_b: &str,
    b: &str,
    addr_b: &str,
    mtu: u32,
) -> io::Result<()> {
    ip(&[
        "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b,
    ])?;
    let m = mtu.to_string();
    for (ns, dev, addr) in [(ns_a, a, addr_a), (ns_b, b, addr_b)] {
        ip(&["-n", ns, "link", "set", dev, "mtu", &m])?;
        ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])?;
    }
    Ok(())
}

/// Runs `f` on a thread that has entered namespace `ns`; sockets it opens
/// belong to that namespace.
pub fn run_in<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> io::Result<T> {
    let path = format!("/var/run/netns/{ns}");
    let file = File::open(&path)?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on a namespace fd; affects only this thread.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })
        .join()
        .map_err(|_| io::Error::other("the thread in the namespace panicked"))?
    })
}

/// Runs `cmd` inside namespace `ns` (`ip netns exec`); an error carries its
/// stderr.
pub fn exec(ns: &str, cmd: &[&str]) -> io::Result<()> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(cmd);
    checked(c, || format!("{ns}: {}", cmd.join(" ")))
}

/// A ── R ── B: three namespaces, R routing between 192.0.2.0/24 (A is .1,
/// R .254) and 198.51.100.0/24 (B is .1, R .254), veth MTU 9000, addresses
/// only inside the namespaces. RoCEv2 is routable (it rides UDP/IP), so the
/// endpoints reach each other through R's forwarding, where tests shape,
/// drop, mark and capture. Everything is removed on drop.
pub struct Routed {
    pub a: String,
    pub r: String,
    pub b: String,
    /// Interfaces: A's, R's towards A, R's towards B, B's.
    pub va: String,
    pub ra: String,
    pub rb: String,
    pub vb: String,
    pub ga: std::net::Ipv4Addr,
    pub gb: std::net::Ipv4Addr,
    /// A scratch folder for captures and rule files.
    pub dir: std::path::PathBuf,
    _ns: Namespaces,
}

impl Routed {
    /// `tag` keeps concurrent users apart (a short word and a digit: the
    /// interface names, tag + role + pid modulo 10^4, must fit 15 bytes).
    pub fn create(tag: &str) -> io::Result<Routed> {
        let names = [
            ns_name(&format!("{tag}a")),
            ns_name(&format!("{tag}r")),
            ns_name(&format!("{tag}b")),
        ];
        let ns = Namespaces::create(&names)?;
        let [a, r, b] = names;
        let id = std::process::id() % 10_000;
        let [va, ra, rb, vb] = ["a", "ra", "rb", "b"].map(|s| format!("{tag}{s}{id}"));
        veth(&a, &va, "192.0.2.1/24", &r, &ra, "192.0.2.254/24", 9000)?;
        veth(
            &r,
            &rb,
            "198.51.100.254/24",
            &b,
            &vb,
            "198.51.100.1/24",
            9000,
        )?;
        ip(&["-n", &a, "route", "add", "default", "via", "192.0.2.254"])?;
        ip(&["-n", &b, "route", "add", "default", "via", "198.51.100.254"])?;
        exec(&r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        let dir = std::env::temp_dir().join(format!("softrnic-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Routed {
            a,
            r,
            b,
            va,
            ra,
            rb,
            vb,
            ga: std::net::Ipv4Addr::new(192, 0, 2, 1),
            gb: std::net::Ipv4Addr::new(198, 51, 100, 1),
            dir,
            _ns: ns,
        })
    }

    /// Loads an nftables ruleset into the router.
    pub fn nft(&self, rules: &str) -> io::Result<()> {
        let f = self.dir.join("rules.nft");
        std::fs::write(&f, rules)?;
        exec(&self.r, &["nft", "-f", &f.to_string_lossy()])
    }

    /// Makes R's egress towards B a congested ECN-capable bottleneck: a tbf
    /// shaper of `rate` (tc syntax, e.g. "400mbit") and CE marking of the
    /// RoCEv2 frames (UDP 4791) that exceed `mark_over` (nft syntax, e.g.
    /// "30 mbytes/second"; None marks every one). The kernels here have no
    /// RED, so nftables' `limit rate over … ip ecn set ce` stands in for a
    /// marking threshold.
    pub fn ecn_bottleneck(&self, rate: &str, mark_over: Option<&str>) -> io::Result<()> {
        exec(
            &self.r,
            &[
                "tc", "qdisc", "add", "dev", &self.rb, "root", "tbf", "rate", rate, "burst",
                "256kb", "latency", "10ms",
            ],
        )?;
        let limit = mark_over
            .map(|r| format!("limit rate over {r} "))
            .unwrap_or_default();
        self.nft(&format!(
            "table inet rnic {{\n  chain mark_ce {{\n    type filter hook forward priority 0;\n    oifname \"{}\" udp dport 4791 {limit}ip ecn set ce\n  }}\n}}\n",
            self.rb
        ))
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP port free on 127.0.0.1 just now (for a tool's server to listen on).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Whether some socket listens on TCP `port` in namespace `ns` (None:
/// ours): /proc/.../net/tcp and tcp6, state 0A. It does not connect: a
/// tool's server that accepts one connection stays free for its client.
pub fn listening(ns: Option<&str>, port: u16) -> bool {
    let want = format!(":{port:04X}");
    let look = || {
        // thread-self: the namespace of this thread (run_in enters it)
        ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"]
            .iter()
            .any(|f| {
                std::fs::read_to_string(f).is_ok_and(|t| {
                    t.lines().any(|l| {
                        let w: Vec<&str> = l.split_whitespace().collect();
                        w.len() > 3 && w[1].ends_with(&want) && w[3] == "0A"
                    })
                })
            })
    };
    match ns {
        None => look(),
        Some(ns) => run_in(ns, look).unwrap_or(false),
    }
}
