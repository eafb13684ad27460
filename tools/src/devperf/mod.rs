//! `rnic perf {write|read|send|atomic} {bw|lat} --dev IFACE [PEER]`: the
//! perftest tools on a soft RNIC on a real interface, speaking perftest's
//! own out-of-band exchange so that either side can be the real
//! `ib_write_bw`, `ib_read_lat`, … (Debian bookworm's perftest 4.5-0.17,
//! version 6.06). As perftest: without a peer address the command is the
//! server, with one the client; the two meet on TCP port 18515 (`-p`).
//! docs/perftest-interop.md has the whole story; `exchange` the byte
//! formats.
//!
//! ## The order of the exchange (per test, as each perftest `main` runs it)
//!
//! 1. version, cycle buffer, cache line, MTU (both use the smaller MTU);
//! 2. handshakes of 108 bytes carrying each QP's LID (0), outstanding
//!    reads, QPN, PSN, rkey, address, GID and SRQ number; `q` = `-q`:
//!    - bw tests: `q` handshakes, connect, `q` + 1 more;
//!    - ib_send_bw, ib_send_lat: `q`, connect, 1 + `q`;
//!    - ib_write_lat, ib_read_lat, ib_atomic_lat: 1 + `q`, connect, `q` + 1;
//! 3. the test, with these syncs:
//!    - WRITE, READ, atomic bw: none while the client runs every size; then
//!      one handshake, the client's last result (`xchg_bw_reports`), which
//!      the server prints, and the close;
//!    - SEND bw: a handshake before each size, with `-a` also one after
//!      each size; the close;
//!    - SEND lat: a handshake before each size; the close;
//!    - READ, atomic lat: the server goes straight to the close, which
//!      waits for the client's;
//!    - WRITE lat: none at all, not even a close: both sides run every size
//!      in lockstep and exit;
//! 4. the close: a handshake, then `"done"` (`ctx_close_connection`).
//!
//! perftest does not exchange its test parameters: both sides must be
//! started with the same test, `-s`/`-a`, `-n`/`-D`, `-q` and `-c` (the
//! SEND server counts `-n` receives; ib_write_lat's server ping-pongs `-n`
//! times).
//!
//! ## Between two rnic sides
//!
//! The version field carries our mark after its NUL (perftest ignores
//! it). When both sides see it, two text lines are added, which perftest
//! never sees:
//!
//! - after the MTU: the client sends `rnic-settings {json}` (test, sizes,
//!   iterations, duration, QPs, tx depth, connection) and the server — which
//!   adopts them, so it needs no flags but the test — answers `rnic-ok` or
//!   `rnic-error <why>` (a server started for another test refuses);
//! - after the test (after the close, or after the last size of WRITE
//!   latency): the client sends `rnic-done {json}` (its results, printed
//!   report, device counters, operation count) and the server answers
//!   `rnic-done {json}` (its counters and the outcome of its data checks).
//!
//! Between two rnic sides the data is verified too: messages carry a known
//! pattern, and the WRITE, SEND and READ payloads and the atomic counter
//! are checked (docs/perftest-interop.md lists what and when).
//!
//! The peer's MAC address is not exchanged: frames go to the next hop
//! towards the peer's GID (its IPv4 address), from the kernel's route and
//! neighbour tables.

mod exchange;
mod measure;
pub mod memcheck;

pub use exchange::{decode_mtu, decode_version, BwReport, Dest, KEY_MSG_SIZE_GID};

use crate::netdev::{self, Connect, DevOptions, NetDev};
use crate::oob::{self, Ctrl};
use crate::perf::{half, Mode, Settings, SizeResult, Verb};
use crate::perfcmd::{title, PerfRequest};
use crate::progress::Progress;
use crate::{report, stats, CliError};
use exchange::{Peer, Wait};
use measure::{bw_client, fill_pattern, lat_run, send_server_result, Link};
use nic::verbs::{Memory, QpType, RecvWr, Sgl};
use serde_json::{json, Value};
use std::time::Duration;

fn conn_name(t: QpType) -> &'static str {
    match t {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
    }
}

/// Receives posted per QP: perftest's SEND default (512), at least twice
/// the tx depth.
fn rx_depth(s: &Settings) -> u32 {
    match s.mode {
        Mode::Bw => (s.tx_depth * 2).max(512),
        Mode::Lat => 64,
    }
}

fn qp_depth(s: &Settings) -> u32 {
    s.tx_depth.max(rx_depth(s)).max(64)
}

/// Outstanding RDMA READs / atomics our responder takes and that we
/// advertise in READ and atomic tests: as perftest, the device's maximum
/// (`max_qp_rd_atom`, 128 as rxe's), 1 otherwise.
const OUT_READS: u16 = nic::verbs::qp::MAX_RD_ATOMIC as u16;

/// What the report header says about where the numbers come from.
pub fn dev_note(nd: &NetDev) -> String {
    format!(
        "real interface: the polling engine on {} ({}); wall-clock time at the application",
        nd.ifname, nd.backend
    )
}

/// perftest's `PERF_GID_FMT`: the 16 bytes as two-digit *decimal* numbers.
fn gid_dotted(g: &wire::Gid) -> String {
    g.0.iter()
        .map(|b| format!("{b:02}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// perftest's parameter block and address lines.
fn header(s: &Settings, nd: &NetDev, peer: &Peer, mine: &[Dest], theirs: &[Dest]) -> String {
    let runs = match s.duration {
        Some(d) => format!("{} s per size", d.as_secs()),
        None => format!("{} per size", s.iters),
    };
    let line = report::RESULT_LINE;
    let who = match peer.version.as_ref() {
        Some(v) if v.rnic => "rnic perf".to_string(),
        Some(v) => format!("perftest {}", v.text),
        None => "?".into(),
    };
    let mut out = format!(
        "{line}\n{:>20}{}\n {}\n Method          : {}\n Device          : {} ({}, MTU {}, {})\n Number of qps   : {:<12} Transport type : RoCEv2 (UDP 4791, ICRC computed and verified)\n Connection type : {:<12} Mtu            : {}[B]\n TX depth        : {:<12} Iterations     : {runs}\n Data ex. method : Ethernet (perftest's TCP exchange; the peer is {who})\n{line}\n",
        "",
        title(s.verb, s.mode),
        dev_note(nd),
        s.method(),
        nd.ifname,
        nd.backend,
        nd.if_mtu,
        report::mac(nd.mac.0),
        s.qps,
        conn_name(s.qp_type),
        s.mtu,
        s.tx_depth,
    );
    for (side, dests) in [("local", mine), ("remote", theirs)] {
        for d in dests {
            out += &format!(
                " {side} address: LID {:#06x} QPN {:#06x} PSN {:#08x}",
                d.lid, d.qpn, d.psn
            );
            if s.verb == Verb::Read {
                out += &format!(" OUT {:#04x}", d.out_reads);
            }
            if s.verb != Verb::Send {
                out += &format!(" RKey {:#08x} VAddr {:#016x}", d.rkey, d.vaddr);
            }
            out += &format!("\n GID: {}  ({})\n", gid_dotted(&d.gid), d.gid.to_ip());
        }
    }
    out
}

fn write_file(path: &std::path::Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::new(format!("cannot write {}: {e}", path.display())))
}

fn dev_options(req: &PerfRequest, ifname: &str, mem_len: usize) -> Result<DevOptions, CliError> {
    let mut d = DevOptions::new(ifname, netdev::parse_backend(&req.backend)?, mem_len);
    d.gid = req.gid.as_deref().map(netdev::parse_gid).transpose()?;
    d.pcap = req.pcap.clone();
    d.pcap_frames = req.pcap_frames;
    d.core = req.core;
    d.inline = netdev::parse_engine(&req.engine)?;
    d.cc = netdev::parse_cc(&req.cc, req.pfc_tx.as_deref())?;
    Ok(d)
}

// ---- the rnic-only settings line ----

fn settings_json(s: &Settings) -> Value {
    json!({
        "verb": s.verb.name(),
        "mode": s.mode.name(),
        "connection": conn_name(s.qp_type),
        "sizes": s.sizes,
        "iters": s.iters,
        "duration": s.duration.map_or(0, |d| d.as_secs()),
        "qps": s.qps,
        "tx_depth": s.tx_depth,
    })
}

/// Adopts the client's settings (the server was started for `s`'s test).
fn adopt(s: &mut Settings, v: &Value) -> Result<(), String> {
    let str_of = |k: &str| v[k].as_str().unwrap_or("?").to_string();
    let (verb, mode, conn) = (str_of("verb"), str_of("mode"), str_of("connection"));
    if (verb.as_str(), mode.as_str(), conn.as_str())
        != (s.verb.name(), s.mode.name(), conn_name(s.qp_type))
    {
        return Err(format!(
            "the server runs {} {} {}, the client asked for {verb} {mode} {conn}",
            s.verb.name(),
            s.mode.name(),
            conn_name(s.qp_type)
        ));
    }
    let bad = || format!("the client's settings are malformed: {v}");
    let sizes: Vec<usize> = v["sizes"]
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|x| x.as_u64().map(|x| x as usize))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    // The server allocates for the largest size: a client may ask for up
    // to perftest's largest (-a: 2^23 bytes) or what the server itself was
    // started with, not more (untrusted input must not make it allocate
    // gigabytes).
    let limit = s
        .sizes
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(MAX_CLIENT_SIZE);
    if let Some(&x) = sizes.iter().find(|&&x| x > limit) {
        return Err(format!(
            "the client asks for {x}-byte messages; this server takes at most {limit} \
             (start it with -s {x} to allow more)"
        ));
    }
    if sizes.is_empty() || sizes.len() > 64 || sizes.contains(&0) {
        return Err(bad());
    }
    let iters = v["iters"].as_u64().filter(|&x| x > 0).ok_or_else(bad)?;
    let duration = v["duration"]
        .as_u64()
        .filter(|&d| d <= 86_400)
        .ok_or_else(bad)?;
    let qps = v["qps"]
        .as_u64()
        .filter(|&q| (1..=256).contains(&q))
        .ok_or_else(bad)?;
    let tx = v["tx_depth"]
        .as_u64()
        .filter(|&t| (1..=8192).contains(&t))
        .ok_or_else(bad)?;
    s.sizes = sizes;
    s.iters = iters;
    s.duration = (duration > 0).then(|| Duration::from_secs(duration));
    s.qps = qps as u32;
    s.tx_depth = tx as u32;
    Ok(())
}

/// The rnic line after perftest's preamble (both sides are rnic).
fn rnic_settings(peer: &mut Peer, s: &mut Settings) -> Result<(), CliError> {
    if peer.client {
        peer.ctrl
            .send_line(&format!("rnic-settings {}", settings_json(s)))?;
        let l = peer.ctrl.recv_line()?;
        if let Some(why) = l.strip_prefix("rnic-error ") {
            return Err(CliError::new(format!("the peer refused: {why}")));
        }
        if l != "rnic-ok" {
            return Err(CliError::new(format!(
                "the peer said {l:?} where rnic-ok was due"
            )));
        }
        Ok(())
    } else {
        let l = peer.ctrl.recv_line()?;
        let v: Value = l
            .strip_prefix("rnic-settings ")
            .and_then(|j| serde_json::from_str(j).ok())
            .ok_or_else(|| CliError::new(format!("the client said {l:?}")))?;
        if let Err(why) = adopt(s, &v) {
            let _ = peer.ctrl.send_line(&format!("rnic-error {why}"));
            return Err(CliError::new(why));
        }
        peer.ctrl.send_line("rnic-ok")
    }
}

// ---- QPs ----

/// The largest message a server takes from a client by default: perftest's
/// largest (`-a` runs 2 B .. 8 MiB).
const MAX_CLIENT_SIZE: usize = 1 << 23;

/// Creates `n` QPs, brings them to INIT and (where SENDs arrive) posts
/// receives. Returns (QPN, first PSN) pairs.
fn make_qps(
    nd: &mut NetDev,
    s: &Settings,
    n: usize,
    receives: bool,
) -> Result<Vec<(u32, u32)>, CliError> {
    let depth = qp_depth(s);
    let h = half(s.sizes.iter().copied().max().unwrap_or(8)) as u64;
    let mut out = Vec::new();
    for _ in 0..n {
        let q = nd.create_qp(s.qp_type, depth)?;
        nd.init(q, s.qp_type)?;
        if receives {
            for k in 0..rx_depth(s) {
                nd.dev
                    .post_recv(
                        q,
                        RecvWr {
                            wr_id: k as u64,
                            sgl: Sgl::single(nd.base + h, h as u32, nd.lkey),
                        },
                    )
                    .map_err(|e| CliError::new(format!("post_recv: {e}")))?;
            }
        }
        out.push((q, netdev::random_psn()));
    }
    Ok(out)
}

fn connect_all(nd: &NetDev, s: &Settings, mine: &[Dest], peer: &[Dest]) -> Result<(), CliError> {
    let gid = peer[0].gid;
    if gid.to_ipv4().is_none() != nd.gid.to_ipv4().is_none() {
        // perftest's ctx_check_gid_compatibility
        return Err(CliError::new(format!(
            "the peer's GID {} and ours {} are not both IPv4 (or both IPv6)",
            gid.to_ip(),
            nd.gid.to_ip()
        )));
    }
    let ah = nd.ah_to(gid)?;
    for (m, p) in mine.iter().zip(peer) {
        let mut c = Connect::new(s.qp_type, ah, s.mtu, p.qpn);
        c.sq_psn = m.psn;
        c.rq_psn = p.psn;
        // perftest: max_rd_atomic = the peer's out_reads (what its responder
        // takes), max_dest_rd_atomic = our own
        c.max_rd_atomic = p.out_reads.clamp(1, OUT_READS) as u8;
        c.max_dest_rd_atomic = m.out_reads.clamp(1, OUT_READS) as u8;
        nd.connect(m.qpn, c)?;
    }
    Ok(())
}

/// perftest's handshakes before and after connecting the QPs.
fn hand_shakes(
    peer: &mut Peer,
    nd: &NetDev,
    s: &Settings,
    mine: &[Dest],
) -> Result<Vec<Dest>, CliError> {
    let mut idle = |n: u64| nd.idle(n);
    let q = mine.len();
    let mut theirs = vec![mine[0]; q];
    let lat_not_send = s.mode == Mode::Lat && s.verb != Verb::Send;
    // the expected order of our records: (index, "where")
    let mut before: Vec<usize> = Vec::new();
    if lat_not_send {
        before.push(0);
    }
    before.extend(0..q);
    let mut after: Vec<usize> = Vec::new();
    if s.verb == Verb::Send {
        after.push(0);
        after.extend(0..q);
    } else {
        after.extend(0..q);
        after.push(0);
    }
    for (k, &i) in before.iter().enumerate() {
        let d = peer.hand_shake(&mine[i], Wait::Setup, &mut idle)?;
        if lat_not_send && k == 0 {
            continue;
        }
        theirs[i] = d;
    }
    for d in &theirs {
        // QP 0 is the subnet management QP, never a connected one
        if d.qpn == 0 {
            return Err(CliError::new(
                "the peer's handshake names QP 0: not a connected QP's",
            ));
        }
    }
    connect_all(nd, s, mine, &theirs)?;
    for &i in &after {
        let d = peer.hand_shake(&mine[i], Wait::Setup, &mut idle)?;
        check_same(&d, &theirs[i])?;
    }
    Ok(theirs)
}

/// Every later handshake repeats the QP's first record (perftest sends the
/// same `my_dest` each time); a different one means the two sides run
/// different tests or `-q`.
fn check_same(got: &Dest, want: &Dest) -> Result<(), CliError> {
    if got.qpn != want.qpn || got.psn != want.psn {
        return Err(CliError::new(format!(
            "the peer's handshake names QPN {:#x} PSN {:#x} where QPN {:#x} PSN {:#x} was due: the two sides run different tests, -q or -a",
            got.qpn, got.psn, want.qpn, want.psn
        )));
    }
    Ok(())
}

// ---- the run ----

/// What one side ends with.
struct Outcome {
    /// Our own results (the client's; the ping-pong and SEND bw server's).
    results: Vec<SizeResult>,
    /// What the server prints for the client (perftest's bw report).
    peer_report: Option<BwReport>,
}

/// Runs `rnic perf` against a real interface (client or server).
pub fn run(req: &PerfRequest, mut s: Settings) -> Result<(), CliError> {
    let client = req.peer.is_some();
    let ifname = match (&req.dev, &req.peer) {
        (Some(d), _) => d.clone(),
        (None, Some(peer)) => {
            use std::net::ToSocketAddrs;
            let ip = (peer.as_str(), req.port)
                .to_socket_addrs()
                .map_err(|e| CliError::new(format!("{peer}: {e}")))?
                .next()
                .ok_or_else(|| CliError::new(format!("{peer}: no address")))?
                .ip();
            netdev::route_dev(ip)?
        }
        (None, None) => {
            return Err(CliError::usage(
                "the server needs its interface: --dev IFACE",
            ))
        }
    };
    let mut nd = NetDev::open(&dev_options(req, &ifname, s.mem_len())?)?;
    let our_mtu = if req.mtu == 0 {
        nd.max_mtu
    } else {
        if req.mtu > nd.max_mtu {
            eprintln!(
                "rnic: -m {}: {} (MTU {}) carries IB MTU {} at most; using {}",
                req.mtu, nd.ifname, nd.if_mtu, nd.max_mtu, nd.max_mtu
            );
        }
        req.mtu.min(nd.max_mtu)
    };
    let ctrl = match &req.peer {
        Some(p) => Ctrl::connect(p, req.port)?,
        None => {
            let listener = oob::listen(req.port)?;
            eprintln!(
                "rnic: {} via {}: waiting for a client on TCP port {}",
                nd.ifname, nd.backend, req.port
            );
            let c = Ctrl::accept(&listener)?;
            drop(listener);
            c
        }
    };
    let mut peer = Peer::new(ctrl, client);
    s.mtu = peer.preamble(our_mtu, &mut |n| nd.idle(n))?;
    let rnic_peer = peer.rnic();
    if rnic_peer {
        let before = s.mem_len();
        rnic_settings(&mut peer, &mut s)?;
        if s.mem_len() != before {
            nd.register(s.mem_len())?;
        }
    }
    let h = half(s.sizes.iter().copied().max().unwrap_or(8));
    fill_pattern(&nd, 0, h);
    if s.verb == Verb::Read && !client {
        fill_pattern(&nd, h, h);
    }
    if let Some(p) = &req.dump_mem {
        memcheck::dump_init(p, &nd, &s)?;
    }
    let receives = s.verb == Verb::Send && (s.mode == Mode::Lat || !client);
    let qps = make_qps(&mut nd, &s, s.qps as usize, receives)?;
    let out_reads = if matches!(s.verb, Verb::Read | Verb::Atomic) {
        OUT_READS
    } else {
        1
    };
    let mine: Vec<Dest> = qps
        .iter()
        .map(|&(qpn, psn)| Dest {
            lid: 0,
            out_reads,
            qpn,
            psn,
            rkey: nd.rkey,
            vaddr: nd.base + h as u64,
            gid: nd.gid,
            srqn: 0,
        })
        .collect();
    let theirs = hand_shakes(&mut peer, &nd, &s, &mine)?;
    crate::say(&header(&s, &nd, &peer, &mine, &theirs))?;
    let qpns = qps.iter().map(|q| q.0).collect();
    let targets = theirs.iter().map(|d| (d.rkey, d.vaddr)).collect();
    let mut link = Link::new(&nd, &s, qpns, targets);
    let mut progress = Progress::new(client && !req.no_progress);
    let out = test(&mut peer, &mut link, &s, req, &mine[0], &mut progress);
    progress.finish();
    let out = out?;
    let ops = link.completed;
    drop(link);
    if let Some(p) = &req.dump_mem {
        let vaddrs: Vec<u64> = theirs.iter().map(|d| d.vaddr).collect();
        memcheck::dump_final(p, &nd, &s, client, &vaddrs, ops)?;
    }
    finish(req, &s, nd, peer, out, ops)
}

/// The test itself, per verb, mode and role.
fn test(
    peer: &mut Peer,
    link: &mut Link,
    s: &Settings,
    req: &PerfRequest,
    me: &Dest,
    progress: &mut Progress,
) -> Result<Outcome, CliError> {
    let client = peer.client;
    let check = peer.rnic();
    let nd = link.nd;
    let fail = |size: usize, e: String| {
        CliError::new(format!("{} {} {size} B: {e}", s.verb.name(), s.mode.name()))
    };
    let n = s.sizes.len() as f64;
    let mut results = Vec::new();
    let mut peer_report = None;
    let stage = |progress: &mut Progress, i: usize, size: usize| {
        progress.stage(
            format!("{} {} {size} B", s.verb.name(), s.mode.name()),
            i as f64 / n,
            1.0 / n,
        )
    };
    match (s.mode, s.verb) {
        (Mode::Bw, Verb::Send) => {
            // ib_send_bw: a handshake before each size; with -a (RUN_ALL)
            // one after each size too, without it the next is the close's
            let run_all = s.sizes.len() > 1;
            for (i, &size) in s.sizes.iter().enumerate() {
                stage(progress, i, size);
                peer.hand_shake(me, Wait::Test, &mut |k| nd.idle(k))?;
                if client {
                    results
                        .push(bw_client(link, size, check, progress).map_err(|e| fail(size, e))?);
                    if run_all {
                        peer.hand_shake(me, Wait::Test, &mut |k| nd.idle(k))?;
                    }
                } else {
                    // serve until the client's next handshake (-a: the one
                    // after its run; else its close's)
                    link.check_recv = if check { size } else { 0 };
                    let mut err = None;
                    peer.hand_shake(me, Wait::Test, &mut |k| {
                        if err.is_none() {
                            if let Err(e) = link.poll() {
                                err = Some(e);
                            }
                        }
                        link.nd.idle(k)
                    })?;
                    if let Some(e) = err {
                        return Err(fail(size, e));
                    }
                    let (recvs, t) = link.take_recv_stats();
                    results.push(send_server_result(size, recvs, t));
                }
            }
            if client || run_all {
                peer.close(me, &mut |k| nd.idle(k))?;
            } else {
                peer.done(&mut |k| nd.idle(k))?;
            }
        }
        (Mode::Bw, _) => {
            if client {
                for (i, &size) in s.sizes.iter().enumerate() {
                    stage(progress, i, size);
                    results
                        .push(bw_client(link, size, check, progress).map_err(|e| fail(size, e))?);
                }
            }
            peer.hand_shake(me, Wait::Test, &mut |k| nd.idle(k))?;
            let mine = match results.last() {
                Some(r) => bw_report_of(s, r, req.report_gbits),
                None => BwReport::default(),
            };
            let theirs = peer.bw_reports(&mine, &mut |k| nd.idle(k))?;
            if !client {
                check_report(&theirs, s)?;
                peer_report = Some(theirs);
            }
            peer.close(me, &mut |k| nd.idle(k))?;
        }
        (Mode::Lat, Verb::Write) => {
            for (i, &size) in s.sizes.iter().enumerate() {
                stage(progress, i, size);
                results.push(
                    lat_run(link, size, !client, check, progress).map_err(|e| fail(size, e))?,
                );
            }
        }
        (Mode::Lat, Verb::Send) => {
            for (i, &size) in s.sizes.iter().enumerate() {
                stage(progress, i, size);
                peer.hand_shake(me, Wait::Test, &mut |k| nd.idle(k))?;
                results
                    .push(lat_run(link, size, client, check, progress).map_err(|e| fail(size, e))?);
            }
            peer.close(me, &mut |k| nd.idle(k))?;
        }
        (Mode::Lat, _) => {
            if client {
                for (i, &size) in s.sizes.iter().enumerate() {
                    stage(progress, i, size);
                    results.push(
                        lat_run(link, size, true, check, progress).map_err(|e| fail(size, e))?,
                    );
                }
            }
            peer.close(me, &mut |k| nd.idle(k))?;
        }
    }
    // the last ACKs of what we served reach the peer
    nd.turn_for(Duration::from_millis(50));
    Ok(Outcome {
        results,
        peer_report,
    })
}

/// perftest's report of one size: MB/s (2^20) or Gb/s, Mpps.
fn bw_report_of(s: &Settings, r: &SizeResult, gbits: bool) -> BwReport {
    BwReport {
        size: r.bytes as u64,
        iters: if s.duration.is_some() {
            r.iterations
        } else {
            s.iters * s.qps as u64
        },
        bw_peak: report::bw_value(r.peak_bps, gbits),
        bw_avg: report::bw_value(r.avg_bps, gbits),
        msg_rate: r.msg_rate / 1e6,
    }
}

/// The client's report, as the server prints it: numbers, not garbage.
fn check_report(r: &BwReport, s: &Settings) -> Result<(), CliError> {
    let ok = |x: f64| x.is_finite() && x >= 0.0;
    if !(ok(r.bw_peak) && ok(r.bw_avg) && ok(r.msg_rate)) || r.size == 0 {
        return Err(CliError::new(format!(
            "the client's report is malformed: {r:?}"
        )));
    }
    if s.sizes.last().is_some_and(|&l| l as u64 != r.size) {
        eprintln!(
            "rnic: the client's last size is {} bytes, this server's {:?}: start both with the same -s/-a",
            r.size,
            s.sizes.last()
        );
    }
    Ok(())
}

/// A result line built from the numbers of perftest's report.
fn result_of_report(r: &BwReport, gbits: bool) -> SizeResult {
    let unit = if gbits {
        1e9 / 8.0
    } else {
        (1u64 << 20) as f64
    };
    SizeResult {
        bytes: r.size as usize,
        iterations: r.iters,
        elapsed: Duration::ZERO,
        samples: Vec::new(),
        hist: crate::perf::new_histogram(),
        peak_bps: r.bw_peak * unit,
        avg_bps: r.bw_avg * unit,
        msg_rate: r.msg_rate * 1e6,
    }
}

/// Our data checks as the server of two rnic sides, once the client has
/// told its operation count.
fn server_checks(s: &Settings, nd: &NetDev, client_ops: u64) -> Result<(), String> {
    let h = half(s.sizes.iter().copied().max().unwrap_or(8));
    let last = s.sizes.last().copied().unwrap_or(0);
    match (s.verb, s.mode) {
        (Verb::Write, Mode::Bw) => {
            measure::check_pattern(nd, h, last, "the last RDMA WRITE's data")
        }
        (Verb::Atomic, _) => {
            let mut b = [0u8; 8];
            nd.mem.read(h, &mut b);
            let v = u64::from_le_bytes(b);
            if v == client_ops {
                Ok(())
            } else {
                Err(format!(
                    "the FETCH_AND_ADD counter is {v} after {client_ops} additions of 1"
                ))
            }
        }
        _ => Ok(()),
    }
}

fn finish(
    req: &PerfRequest,
    s: &Settings,
    mut nd: NetDev,
    mut peer: Peer,
    out: Outcome,
    ops: u64,
) -> Result<(), CliError> {
    let client = peer.client;
    let results_json: Vec<Value> = out
        .results
        .iter()
        .map(|r| report::result_json(s, r, req.report_gbits))
        .collect();
    let own_text = if out.results.is_empty() {
        String::new()
    } else if !client && s.mode == Mode::Bw {
        report::bw_table(&out.results, req.report_gbits)
    } else {
        report::text(s, &out.results, req.report_gbits)
    };
    let local = nd.json(if client { "client" } else { "server" });
    let mut remote = Value::Null;
    let mut shown = own_text.clone();
    let mut results_doc = Value::Array(results_json.clone());
    if peer.rnic() {
        if client {
            let done =
                json!({"results": results_json, "report": own_text, "device": local, "ops": ops});
            peer.ctrl.send_line(&format!("rnic-done {done}"))?;
            let l = peer.ctrl.recv_line()?;
            let v: Value = l
                .strip_prefix("rnic-done ")
                .and_then(|j| serde_json::from_str(j).ok())
                .ok_or_else(|| CliError::new(format!("the server said {l:?}")))?;
            if let Some(e) = v["error"].as_str() {
                return Err(CliError::new(format!("the server's data check: {e}")));
            }
            remote = v["device"].clone();
        } else {
            let l = peer.ctrl.recv_line()?;
            let v: Value = l
                .strip_prefix("rnic-done ")
                .and_then(|j| serde_json::from_str(j).ok())
                .ok_or_else(|| CliError::new(format!("the client said {l:?}")))?;
            let checked = server_checks(s, &nd, v["ops"].as_u64().unwrap_or(0));
            let err = checked.as_ref().err().cloned();
            peer.ctrl.send_line(&format!(
                "rnic-done {}",
                json!({"device": local, "error": err})
            ))?;
            if let Some(e) = err {
                return Err(CliError::new(format!("data check: {e}")));
            }
            remote = v["device"].clone();
            // the ping-pong and SEND servers measured for themselves
            if out.results.is_empty() {
                shown = v["report"].as_str().unwrap_or("").to_string();
                results_doc = v["results"].clone();
            }
        }
    } else if !client && s.mode == Mode::Lat && matches!(s.verb, Verb::Read | Verb::Atomic) {
        shown = format!(
            " (the client measures: a {} server only lends its memory and prints no result, as perftest's)\n{}\n",
            title(s.verb, s.mode),
            report::RESULT_LINE
        );
    } else if let Some(r) = &out.peer_report {
        let r = result_of_report(r, req.report_gbits);
        shown = report::bw_table(std::slice::from_ref(&r), req.report_gbits);
        results_doc = Value::Array(vec![report::result_json(s, &r, req.report_gbits)]);
    }
    nd.stop();
    crate::say(&shown)?;
    let mut devices = vec![local];
    if !remote.is_null() {
        devices.push(remote);
    }
    let devices = Value::Array(devices);
    let several = out.results.len() > 1;
    if let Some(p) = &req.hgrm {
        if out.results.is_empty() {
            eprintln!("rnic: --hgrm: the client keeps the histograms; give it to the client");
        }
        for r in &out.results {
            let path = crate::perfcmd::per_size_path(p, r.bytes, several);
            write_file(&path, &report::hgrm(&r.hist))?;
            eprintln!("rnic: wrote {}", path.display());
        }
    }
    if let Some(p) = &req.plot {
        if out.results.is_empty() {
            eprintln!("rnic: --plot: the client keeps the histograms; give it to the client");
        } else {
            let t = format!(
                "rnic perf {} {}: {}",
                s.verb.name(),
                s.mode.name(),
                dev_note(&nd)
            );
            write_file(p, &report::svg(&t, &out.results))?;
            eprintln!("rnic: wrote {}", p.display());
        }
    }
    if let Some(p) = &req.pcap {
        eprintln!(
            "rnic: wrote {} (the first {} frames the port sent or received)",
            p.display(),
            req.pcap_frames
        );
    }
    if let Some(p) = &req.json {
        let doc = dev_json_doc(
            req,
            s,
            &nd,
            if client { "client" } else { "server" },
            peer.version.as_ref().map(|v| v.text.clone()),
            results_doc,
            devices.clone(),
        );
        let text = serde_json::to_string_pretty(&doc).expect("JSON of plain values");
        write_file(p, &(text + "\n"))?;
        eprintln!("rnic: wrote {}", p.display());
    }
    if let Err(e) = stats::save(&req.command, devices) {
        eprintln!("rnic: warning: counters not saved for `rnic stats`: {e}");
    }
    Ok(())
}

/// The JSON document of a run on real interfaces.
fn dev_json_doc(
    req: &PerfRequest,
    s: &Settings,
    nd: &NetDev,
    role: &str,
    peer_version: Option<String>,
    results: Value,
    devices: Value,
) -> Value {
    let mut doc = crate::perfcmd::json_head(req, s, &dev_note(nd), results, devices);
    doc["role"] = role.into();
    doc["interface"] = nd.ifname.clone().into();
    doc["backend"] = json!(nd.backend);
    doc["peer_version"] = json!(peer_version);
    doc
}
