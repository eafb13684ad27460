//! rnicd: the softrnic daemon. Owns a port (AF_XDP or AF_PACKET on an
//! interface, or both ends of an in-memory wire) and an engine per device,
//! and serves clients on `<sock-dir>/<name>.sock`.

use clap::Parser;
use nic::engine::{EngineConfig, Priority};
use nic::io::Port;
use nic::io::{open_port_with, Backend, Gso, OpenOptions};
use rnicd::server::{Server, ServerConfig};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;
use wire::{EthernetAddress, Gid};

/// The exit status when the asked-for backend is missing here
/// (EX_UNAVAILABLE of sysexits.h).
const EXIT_UNAVAILABLE: i32 = 69;

/// rnicd's idle spin (`--spin`), shorter than an in-process engine's.
const DAEMON_SPIN: u32 = 30;

/// rnicd's `--self-wake-us`.
const DAEMON_SELF_WAKE_US: u64 = 50;

#[derive(Parser, Debug)]
#[command(name = "rnicd", about = "softrnic daemon", args_override_self = true)]
struct Args {
    /// Device name: the socket is SOCK_DIR/NAME.sock (with --mem-pair:
    /// NAME0 and NAME1).
    #[arg(long, default_value = "srnic0")]
    name: String,
    /// Interface to bind (AF_XDP or AF_PACKET).
    #[arg(long)]
    iface: Option<String>,
    /// Instead of an interface: two devices on the two ends of an
    /// in-memory wire (tests, benchmarks). SIGUSR1 then sets the wire's
    /// link down, SIGUSR2 up again (the port events).
    #[arg(long)]
    mem_pair: bool,
    /// auto | afxdp | afpacket (TPACKET_V2) | afpacket-v3. A backend this
    /// machine or build lacks (AF_XDP without kernel support or
    /// privileges) ends rnicd with exit status 69 (EX_UNAVAILABLE).
    #[arg(long, default_value = "auto")]
    backend: String,
    /// AF_PACKET: consecutive frames of one flow go to the kernel as one
    /// UDP GSO super-frame, cut back into the same frames wherever the path
    /// needs it (a veth to another AF_PACKET socket carries it whole, whose
    /// receiver cuts it): auto (on a veth) | on | off. Needs Linux 6.2
    /// (off before). With `auto`, `--backend auto` on a veth opens
    /// AF_PACKET. A capture on the interface shows super-frames; `off`
    /// sends frame by frame.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    gso: String,
    /// Bytes a QP may send in a row in its turn of the device's transmit
    /// round robin: auto (one UDP GSO super-frame's payload when the port
    /// sends trains, 64 KiB on the in-memory wire, else one frame) | a
    /// number (0: one frame per turn).
    /// Larger turns make longer trains; smaller ones interleave QPs more
    /// finely.
    #[arg(long, default_value = "auto", value_parser = parse_quantum)]
    tx_quantum: Quantum,
    /// The device's IP address (its GID); with --mem-pair the first of
    /// two (the second gets the next address), by default 127.0.0.1: two
    /// loopback addresses the kernel answers too, so a program reaches
    /// the peer by TCP at the address it connects to by RDMA CM.
    #[arg(long)]
    gid: Option<IpAddr>,
    #[arg(long, default_value = "/run/softrnic")]
    sock_dir: PathBuf,
    /// Socket file permissions (octal).
    #[arg(long, default_value = "666")]
    mode: String,
    /// Engine: idle turns spent spinning before parking, for 50 µs at
    /// most (where turns are slow, as on an emulated CPU, fewer). Short
    /// by default: a parked engine wakes at once on a frame or a doorbell,
    /// and every turn spent spinning is taken from the programs it serves
    /// (benches/sharing.sh: 30 against 300 halves a 64 B ib_write_lat
    /// over veth on two CPUs).
    #[arg(long, default_value_t = DAEMON_SPIN)]
    spin: u32,
    /// Engine: longest park when idle, in microseconds. A client's post
    /// (through the engine's bell), a frame and the next timer end it at
    /// once, so an idle engine costs next to no CPU.
    #[arg(long, default_value_t = EngineConfig::default().park.as_micros() as u64)]
    park_us: u64,
    /// Engine: while it shares its CPU with a client (one posted on that
    /// CPU within the last 2 ms), park at most this long (µs) and say so
    /// in the doorbell pages: a client on that CPU then leaves the wake to
    /// this timer or to its own next poll, instead of waking an engine
    /// that would preempt it after every single post. 0: never.
    #[arg(long, default_value_t = DAEMON_SELF_WAKE_US)]
    self_wake_us: u64,
    /// Engine: after running this long (µs) without a park — sustained
    /// load — step aside for --busy-pause-us, so that a real-time engine
    /// leaves the programs it serves some CPU. 0: never.
    #[arg(long, default_value_t = 1000)]
    busy_max_us: u64,
    /// Engine: how long it steps aside (µs).
    #[arg(long, default_value_t = 100)]
    busy_pause_us: u64,
    /// Engine scheduling: normal (the kernel's default) | auto (SCHED_FIFO
    /// 1 where permitted, else a 100 µs slice) | realtime (SCHED_FIFO 1) |
    /// slice (SCHED_OTHER with a 100 µs slice): what lets a woken engine
    /// run at once while applications busy-poll every core (auto: p99 of a
    /// 64 B ib_write_lat over veth on two CPUs 50 µs, normal: 1.8 ms).
    #[arg(long, default_value = "auto", value_parser = ["auto", "realtime", "slice", "normal"])]
    priority: String,
    /// After opening the interface and binding the sockets, switch to this
    /// user (and its group, no supplementary groups, no new privileges):
    /// the daemon that clients talk to then holds no root rights.
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// Do not give clients the engine's bell: a post after idling waits for
    /// the park to end (for comparison).
    #[arg(long)]
    no_bell: bool,
    /// Pin the engine thread(s) to this core (and the next).
    #[arg(long)]
    core: Option<usize>,
    /// With --mem-pair: both devices on ONE engine thread (a two-core
    /// machine then has one busy engine thread, not two).
    #[arg(long)]
    one_thread: bool,
    /// Record the port's frames, sent and received, in this pcap file
    /// (with --iface; opened before --user takes effect).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// With --pcap: record only the first N frames.
    #[arg(long, value_name = "N")]
    pcap_frames: Option<u64>,
    /// The CM response timeout of the REQs (IBA 12.6.5, 0..=31): each
    /// side waits 4.096 us x 2^N for the other's REP, RTU or DREP.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u8).range(0..=31))]
    cm_response_timeout: u8,
    /// How often the CM sends a REQ, REP or DREQ again before the peer
    /// counts as unreachable (IBA 12.6.5 Max CM Retries, 0..=15).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u8).range(0..=15))]
    cm_retries: u8,
    /// The DCQCN reaction point (mlx5's `ecn/roce_rp/enable`): on | off.
    /// Off, the device's QPs send at the line rate whatever CNPs come: a
    /// CNP is counted in `rp_cnp_ignored` and cuts no rate. The
    /// notification point (CNPs for CE-marked packets) stays on.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    dcqcn_rp: String,
    /// The port's line rate in tc's bit-rate words (100mbit, 25gbit, or
    /// short 100m, 25g; `bps` units are refused: tc reads them as bytes)
    /// instead of the interface's (veth: 10 Gbit/s; an in-memory wire:
    /// 100 Gbit/s). The port paces its frames to it (a token bucket of a
    /// few frames, Ethernet's 24 bytes of preamble, FCS and gap counted
    /// per frame), and DCQCN's ceiling and rate steps and the PFC pause
    /// quanta are relative to it.
    #[arg(long, value_name = "RATE", value_parser = rnicd::line_rate::parse_rate)]
    line_rate: Option<u64>,
    /// The link rate DCQCN's values (NVIDIA's, made for 25-100 Gbit/s
    /// links) are taken to be made for, e.g. 25gbit: on a port of another
    /// line rate (--line-rate) the reaction point's timers are stretched
    /// and its rate steps shrunk by s = reference / line rate, and the
    /// CNP interval stretched alike, so the control loop keeps its shape
    /// on a slow emulated link. Unset: the values as they are.
    #[arg(long, value_name = "RATE", value_parser = rnicd::line_rate::parse_rate)]
    dcqcn_reference: Option<u64>,
    /// A file of `key = value` lines with the same names as the flags
    /// (flags on the command line win).
    #[arg(long)]
    config: Option<PathBuf>,
}

static STOP: AtomicBool = AtomicBool::new(false);
/// With --mem-pair: SIGUSR1 pulls the wire's cable (link down on both
/// devices), SIGUSR2 plugs it back (tests of the port events).
static CABLE: AtomicU8 = AtomicU8::new(0);
const CABLE_OUT: u8 = 1;
const CABLE_IN: u8 = 2;

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Release);
}

extern "C" fn on_cable(sig: libc::c_int) {
    let v = if sig == libc::SIGUSR1 {
        CABLE_OUT
    } else {
        CABLE_IN
    };
    CABLE.store(v, Ordering::Release);
}

/// Why the command line or the configuration file was refused.
#[derive(Debug, thiserror::Error)]
enum ArgsError {
    #[error("{0}")]
    Cli(#[from] clap::Error),
    #[error("{}: {source}", path.display())]
    ReadConfig {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: config may not nest", path.display())]
    NestedConfig {
        path: std::path::PathBuf,
        line: usize,
    },
}

/// Why dropping privileges failed.
#[derive(Debug, thiserror::Error)]
enum PrivError {
    #[error("a NUL in the name")]
    Nul,
    #[error("no such user")]
    NoUser,
    #[error("{call}: {source}")]
    Syscall {
        call: &'static str,
        source: std::io::Error,
    },
    #[error("the switch did not stick")]
    DidNotStick,
}

fn parse() -> Result<Args, ArgsError> {
    let cli: Vec<String> = std::env::args().collect();
    let first = Args::try_parse_from(&cli)?;
    let Some(path) = first.config.clone() else {
        return Ok(first);
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ArgsError::ReadConfig {
        path: path.clone(),
        source,
    })?;
    let mut args = vec![cli[0].clone()];
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .unwrap_or((line, ""));
        // the flags' names, with `_` or `-` between words
        let k = k.replace('_', "-");
        if k == "config" {
            return Err(ArgsError::NestedConfig {
                path: path.clone(),
                line: n + 1,
            });
        }
        if v.is_empty() || v == "true" {
            args.push(format!("--{k}"));
        } else if v != "false" {
            args.push(format!("--{k}"));
            args.push(v.to_string());
        }
    }
    args.extend(cli[1..].iter().cloned());
    Ok(Args::try_parse_from(&args)?)
}

/// Becomes `user` for good: no supplementary groups, its group, its user
/// (glibc applies set*id to every thread of the process), and no way back
/// up (PR_SET_NO_NEW_PRIVS; getting root back must fail). The open ports
/// and sockets stay usable: they need no privilege once open.
fn drop_privileges(user: &str) -> Result<(u32, u32), PrivError> {
    let name = std::ffi::CString::new(user).map_err(|_| PrivError::Nul)?;
    // SAFETY: passwd is plain old data; all zeroes (NULL pointers) is valid.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r with a NUL-terminated name, a local passwd, a
    // buffer of the stated length and a local result pointer, all alive
    // for the call; pw's strings point into `buf`, which outlives them.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut res,
        )
    };
    if rc != 0 || res.is_null() {
        return Err(PrivError::NoUser);
    }
    let (uid, gid) = (pw.pw_uid, pw.pw_gid);
    let os = |call: &'static str| PrivError::Syscall {
        call,
        source: std::io::Error::last_os_error(),
    };
    // SAFETY: set*id, setgroups with no list (a NULL pointer and length
    // 0), prctl and get*id take no memory of ours; they change only this
    // process's credentials.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(os("setgroups"));
        }
        if libc::setgid(gid) != 0 {
            return Err(os("setgid"));
        }
        if libc::setuid(uid) != 0 {
            return Err(os("setuid"));
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(os("prctl(PR_SET_NO_NEW_PRIVS)"));
        }
        if uid != 0 && (libc::setuid(0) == 0 || libc::geteuid() != uid || libc::getegid() != gid) {
            return Err(PrivError::DidNotStick);
        }
    }
    Ok((uid, gid))
}

/// A device to serve: its name, port, GID and netdev.
struct DevicePort {
    name: String,
    port: Box<dyn Port>,
    gid: Gid,
    netdev: Option<String>,
}

/// The netdev a `--mem-pair` device on `ip` stands beside: `lo` for an
/// address of 127.0.0.0/8 (the kernel's loopback answers all of it), none
/// for another address.
fn loopback_netdev(ip: std::net::Ipv4Addr) -> Option<String> {
    ip.is_loopback().then(|| "lo".to_string())
}

/// `port` at `--line-rate`, if given.
fn with_line_rate(port: Box<dyn Port>, a: &Args) -> Box<dyn Port> {
    match a.line_rate {
        Some(bps) => Box::new(rnicd::line_rate::LineRate::new(port, bps)),
        None => port,
    }
}

/// The two devices of `--mem-pair` on the two ends of an in-memory wire,
/// and the wire's cable (SIGUSR1 / SIGUSR2 pull and plug it).
fn mem_pair_ports(a: &Args) -> (Vec<DevicePort>, nic::io::mem::MemLink) {
    if a.pcap.is_some() {
        eprintln!("rnicd: --pcap records an --iface port, not --mem-pair");
        std::process::exit(2)
    }
    let macs = [
        EthernetAddress([0x02, 0x53, 0x52, 0, 0, 1]),
        EthernetAddress([0x02, 0x53, 0x52, 0, 0, 2]),
    ];
    let (p0, p1) = nic::io::mem::pair(macs, 4096);
    let cable = p0.link();
    let base = match a.gid {
        Some(IpAddr::V4(v4)) => u32::from(v4),
        Some(IpAddr::V6(_)) => {
            eprintln!("rnicd: --mem-pair takes an IPv4 --gid");
            std::process::exit(2)
        }
        None => u32::from(std::net::Ipv4Addr::LOCALHOST),
    };
    let (ip0, ip1) = (base.into(), (base + 1).into());
    let ports = vec![
        DevicePort {
            name: format!("{}0", a.name),
            port: with_line_rate(Box::new(p0), a),
            gid: Gid::from_ipv4(ip0),
            netdev: loopback_netdev(ip0),
        },
        DevicePort {
            name: format!("{}1", a.name),
            port: with_line_rate(Box::new(p1), a),
            gid: Gid::from_ipv4(ip1),
            netdev: loopback_netdev(ip1),
        },
    ];
    (ports, cable)
}

/// The device on interface `ifname` (with `--pcap`, behind a capture).
fn iface_port(a: &Args, ifname: &str) -> DevicePort {
    let backend = match a.backend.as_str() {
        "auto" => Backend::Auto,
        "afxdp" => Backend::AfXdp,
        "afpacket" | "afpacket-v2" => Backend::AfPacket,
        "afpacket-v3" => Backend::AfPacketV3,
        b => {
            eprintln!("rnicd: unknown backend {b}");
            std::process::exit(2)
        }
    };
    let Some(gid) = a.gid else {
        eprintln!("rnicd: --iface needs --gid (the interface's address)");
        std::process::exit(2)
    };
    let gso = match a.gso.as_str() {
        "on" => Gso::On,
        "off" => Gso::Off,
        _ => Gso::Auto,
    };
    let opts = OpenOptions { gso };
    match open_port_with(ifname, backend, opts) {
        Ok((p, b)) => {
            eprintln!(
                "rnicd: {ifname}: {b:?}{}",
                if p.train_bytes() > 0 {
                    " (UDP GSO)"
                } else {
                    ""
                }
            );
            let p: Box<dyn Port> = match &a.pcap {
                Some(file) => match nic::io::pcap::PcapTap::new(p, file) {
                    Ok(t) => Box::new(t.with_limit(a.pcap_frames.unwrap_or(u64::MAX))),
                    Err(e) => {
                        eprintln!("rnicd: --pcap: {e}");
                        std::process::exit(1)
                    }
                },
                None => p,
            };
            DevicePort {
                name: a.name.clone(),
                port: with_line_rate(p, a),
                gid: Gid::from_ip(gid),
                netdev: Some(ifname.to_string()),
            }
        }
        Err(e) => {
            eprintln!("rnicd: {ifname}: {e}");
            // EX_UNAVAILABLE (sysexits.h): the asked-for backend does
            // not exist on this machine or in this build, as opposed to
            // failing on this interface
            let unavailable = matches!(&e, nic::io::OpenError::AfXdp(x) if x.is_unavailable());
            std::process::exit(if unavailable { EXIT_UNAVAILABLE } else { 1 })
        }
    }
}

/// `--priority` as the engine's [`Priority`].
fn engine_priority(p: &str) -> Priority {
    match p {
        "realtime" => Priority::Realtime(1),
        "slice" => Priority::ShortSlice(nic::engine::SHORT_SLICE),
        "auto" => Priority::Auto,
        _ => Priority::Normal,
    }
}

/// `--tx-quantum`: `None` for auto.
#[derive(Clone, Copy, Debug)]
struct Quantum(Option<usize>);

fn parse_quantum(s: &str) -> Result<Quantum, String> {
    if s == "auto" {
        return Ok(Quantum(None));
    }
    s.parse::<usize>()
        .map(|n| Quantum(Some(n)))
        .map_err(|_| format!("`{s}` is neither auto nor a number of bytes"))
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let mode = u32::from_str_radix(&a.mode, 8).unwrap_or_else(|_| {
        eprintln!("rnicd: --mode must be octal");
        std::process::exit(2)
    });
    let priority = engine_priority(&a.priority);
    let engine = |i: usize| EngineConfig {
        core: a.core.map(|c| c + i),
        priority,
        spin: a.spin,
        park: Duration::from_micros(a.park_us),
        self_wake: Duration::from_micros(a.self_wake_us),
        busy_max: Duration::from_micros(a.busy_max_us),
        busy_pause: Duration::from_micros(a.busy_pause_us),
        tx_quantum: a.tx_quantum.0,
        ..Default::default()
    };
    let (ports, cable) = if a.mem_pair {
        let (ports, cable) = mem_pair_ports(&a);
        (ports, Some(cable))
    } else if let Some(ifname) = &a.iface {
        (vec![iface_port(&a, ifname)], None)
    } else {
        eprintln!("rnicd: give --iface IFNAME or --mem-pair");
        std::process::exit(2)
    };
    // SAFETY: the handlers only store to an atomic (async-signal-safe);
    // signal(2) takes no memory of ours.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        if cable.is_some() {
            libc::signal(libc::SIGUSR1, on_cable as *const () as libc::sighandler_t);
            libc::signal(libc::SIGUSR2, on_cable as *const () as libc::sighandler_t);
        }
    }
    let items: Vec<(Box<dyn Port>, ServerConfig)> = ports
        .into_iter()
        .enumerate()
        .map(
            |(
                i,
                DevicePort {
                    name,
                    port,
                    gid,
                    netdev,
                },
            )| {
                let cfg = ServerConfig {
                    name,
                    sock_dir: a.sock_dir.clone(),
                    mode,
                    gid,
                    netdev,
                    engine: engine(i),
                    bell: !a.no_bell,
                    cm: rnicd::server::CmTimers {
                        response_timeout: a.cm_response_timeout,
                        max_retries: a.cm_retries,
                    },
                    dcqcn_rp: a.dcqcn_rp == "on",
                    dcqcn_reference_bps: a.dcqcn_reference,
                };
                (port, cfg)
            },
        )
        .collect();
    let servers = match Server::start_many(items, a.one_thread) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rnicd: {e}");
            std::process::exit(1)
        }
    };
    for s in &servers {
        eprintln!("rnicd: listening on {}", s.socket_path().display());
        match s.engine_priority() {
            Some(Ok(g)) => eprintln!("rnicd: engine scheduling: {g}"),
            Some(Err(e)) => eprintln!("rnicd: engine scheduling {priority:?} refused: {e}"),
            None => {}
        }
    }
    if let Some(user) = &a.user {
        match drop_privileges(user) {
            Ok((uid, gid)) => eprintln!("rnicd: running as {user} (uid {uid}, gid {gid})"),
            Err(e) => {
                eprintln!("rnicd: --user {user}: {e}");
                for s in servers {
                    s.stop();
                }
                std::process::exit(1)
            }
        }
    }
    println!("READY");
    while !STOP.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(c) = &cable {
            match CABLE.swap(0, Ordering::AcqRel) {
                CABLE_OUT => c.set_up(false),
                CABLE_IN => c.set_up(true),
                _ => {}
            }
        }
    }
    eprintln!("rnicd: shutting down");
    for s in servers {
        s.stop();
    }
}
