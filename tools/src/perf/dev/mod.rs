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
mod finish;
mod measure;
pub mod memcheck;
mod qps;
mod rnic;

pub use exchange::{decode_mtu, decode_version, BwReport, Dest, ExchangeError, KEY_MSG_SIZE_GID};

use crate::netdev::{self, DevOptions, NetDev};
use crate::oob::{self, Ctrl};
use crate::perf::request::PerfRequest;
use crate::perf::{conn_name, half, title, Mode, RunError, Settings, SizeError, SizeResult, Verb};
use crate::progress::Progress;
use crate::{report, CliError};
use exchange::{Peer, Wait};
use finish::{bw_report_of, check_report};
use measure::{bw_client, fill_pattern, lat_run, send_server_result, Link};
use std::time::Duration;

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

/// What one side ends with.
pub(super) struct Outcome {
    /// Our own results (the client's; the ping-pong and SEND bw server's).
    pub(super) results: Vec<SizeResult>,
    /// What the server prints for the client (perftest's bw report).
    pub(super) peer_report: Option<BwReport>,
}

/// Runs `rnic perf` against a real interface (client or server).
pub fn run(req: &PerfRequest, mut s: Settings) -> Result<(), CliError> {
    let client = req.peer.is_some();
    let ifname = match (&req.dev, &req.peer) {
        (Some(d), _) => d.clone(),
        (None, Some(peer)) => netdev::route_dev(oob::resolve(peer, req.port)?)?,
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
        rnic::settings(&mut peer, &mut s)?;
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
    let qps = qps::make(&mut nd, &s, s.qps as usize, receives)?;
    let out_reads = if matches!(s.verb, Verb::Read | Verb::Atomic) {
        qps::OUT_READS
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
    let theirs = qps::hand_shakes(&mut peer, &nd, &s, &mine)?;
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
    finish::finish(req, &s, nd, peer, out, ops)
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
    let fail = |size: usize, e: RunError| CliError::new(SizeError::new(s, size, e).to_string());
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
