//! `rnic perf {write|read|send|atomic} {bw|lat} --dev IFACE [PEER]`: the
//! perftest tools between two soft RNICs on real interfaces. As perftest:
//! without a peer address the command is the server, with one the client;
//! the two meet on TCP port 18515 (`-p`), exchange what their QPs need,
//! connect them and run the test; the client measures and prints, the
//! server serves (answers ping-pongs, reposts receives, or just lends its
//! memory) and prints the client's report too.
//!
//! ## The out-of-band exchange (rnic ↔ rnic; not perftest's wire format)
//!
//! Text lines over the TCP connection, `key value...`, one record ended by
//! `end`. The client sends its record first:
//!
//! ```text
//! rnic-perf 1                                   (format version)
//! role client
//! test write bw RC                              (verb, mode, connection type)
//! mtu 4096                                      (IB MTU the sender can carry)
//! sizes 65536                                   (message sizes, in order)
//! iters 5000                                    (iterations per size)
//! duration 0                                    (seconds per size; 0: use iters)
//! tx_depth 128
//! gid 00000000000000000000ffffc0000201          (32 hex digits)
//! mac 02:a1:b2:c3:d4:e5                         (the sender's port; informational)
//! mr 0x00a1b2c3 0x10000000 262144               (rkey, virtual address, length)
//! qp 0x000011 0x3a5c01                          (QPN and first PSN; one line per QP)
//! end
//! ```
//!
//! The server checks that it was started for the same test (else it
//! answers `error <why>` and exits), adopts the client's sizes,
//! iterations, duration, QP count and tx depth, registers its memory,
//! creates and connects its QPs (the path MTU is the smaller of the two
//! `mtu` lines), posts receives, and answers with its own record (`role
//! server`, `mtu` the agreed one). Lines with unknown keys are ignored,
//! so later versions can add some.
//!
//! Then, per size: the client sends `size N`, the server readies itself
//! and answers `go`; the client runs the size and, once everything it
//! posted has completed, sends `end N`; the server stops serving and
//! answers `ok M` (M: the messages it served). A side that fails sends
//! `error <why>` instead of its next line. Last, the client sends `done {json}` (its results, its
//! printed report and its device's counters) and the server answers
//! `done {json}` (its device's counters); both close. The client retries
//! its connection for 10 s while the server is not listening yet.
//!
//! The peer's MAC address is not taken from the exchange: frames go to
//! the next hop towards the peer's IP, from the kernel's route and
//! neighbour tables.

mod measure;
mod record;

use crate::netdev::{self, Connect, DevOptions, NetDev};
use crate::oob::{self, Ctrl};
use crate::perf::{half, Mode, Settings, Verb};
use crate::perfcmd::{title, PerfRequest};
use crate::progress::Progress;
use crate::{report, stats, CliError};
use measure::{bw_client, lat_client, serve, Link};
use nic::verbs::{Memory, QpType, RecvWr, Sgl};
use record::{expect, next_line, recv_hello, send_hello, Hello};
use serde_json::{json, Value};
use std::time::Duration;
use wire::Gid;

fn conn_name(t: QpType) -> &'static str {
    match t {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
    }
}

/// Queue depths: send and receive queues hold a bw test's window (and
/// twice that in receives), a latency test's few.
fn rx_depth(s: &Settings) -> u32 {
    match s.mode {
        Mode::Bw => (s.tx_depth * 2).max(16),
        Mode::Lat => 64,
    }
}

fn qp_depth(s: &Settings) -> u32 {
    s.tx_depth.max(rx_depth(s)).max(64)
}

/// What the report header says about where the numbers come from.
pub fn dev_note(nd: &NetDev) -> String {
    format!(
        "real interface: the polling engine on {} ({}); wall-clock time at the application",
        nd.ifname, nd.backend
    )
}

fn gid_dotted(g: &Gid) -> String {
    g.0.iter()
        .map(|b| format!("{b:02}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// perftest's parameter block and address lines.
fn header(s: &Settings, nd: &NetDev, me: &Hello, peer: &Hello) -> String {
    let runs = match s.duration {
        Some(d) => format!("{} s per size", d.as_secs()),
        None => format!("{} per size", s.iters),
    };
    let line = report::RESULT_LINE;
    let mut out = format!(
        "{line}\n{:>20}{}\n {}\n Method          : {}\n Device          : {} ({}, MTU {}, {})\n Number of qps   : {:<12} Transport type : RoCEv2 (UDP 4791, ICRC computed and verified)\n Connection type : {:<12} Mtu            : {}[B]\n TX depth        : {:<12} Iterations     : {runs}\n Data ex. method : TCP port (rnic-perf records)\n{line}\n",
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
    for (who, h) in [("local", me), ("remote", peer)] {
        for &(q, p) in &h.qps {
            out += &format!(
                " {who} address: LID 0000 QPN {q:#06x} PSN {p:#08x} RKey {:#08x} VAddr {:#016x}\n GID: {}  ({})\n",
                h.rkey,
                h.va,
                gid_dotted(&h.gid),
                h.gid.to_ip()
            );
        }
    }
    out
}

// ---- the two roles ----

/// The JSON document of a run on real interfaces.
fn dev_json_doc(
    req: &PerfRequest,
    s: &Settings,
    nd: &NetDev,
    role: &str,
    results: Value,
    devices: Value,
) -> Value {
    json!({
        "tool": "rnic",
        "version": env!("CARGO_PKG_VERSION"),
        "command": req.command,
        "test": s.verb.name(),
        "mode": s.mode.name(),
        "title": title(s.verb, s.mode),
        "transport": dev_note(nd),
        "method": s.method(),
        "role": role,
        "interface": nd.ifname,
        "backend": nd.backend,
        "settings": {
            "connection": conn_name(s.qp_type),
            "qps": s.qps,
            "mtu": s.mtu,
            "tx_depth": s.tx_depth,
            "iterations": s.iters,
            "duration_sec": s.duration.map(|d| d.as_secs()),
            "sizes": s.sizes,
            "report_gbits": req.report_gbits,
        },
        "results": results,
        "devices": devices,
    })
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
    Ok(d)
}

fn my_hello(s: &Settings, nd: &NetDev, role: &str, mtu: u32, qps: &[(u32, u32)]) -> Hello {
    Hello {
        role: role.into(),
        verb: s.verb,
        mode: s.mode,
        qp_type: s.qp_type,
        mtu,
        sizes: s.sizes.clone(),
        iters: s.iters,
        duration: s.duration.map_or(0, |d| d.as_secs()),
        tx_depth: s.tx_depth,
        gid: nd.gid,
        mac: nd.mac,
        rkey: nd.rkey,
        va: nd.base,
        len: nd.mem.len() as u64,
        qps: qps.to_vec(),
    }
}

/// Creates `n` QPs, brings them to INIT and (for SEND tests, on the side
/// that receives) posts receives. Returns (QPN, first PSN) pairs.
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

fn connect_all(
    nd: &NetDev,
    s: &Settings,
    mine: &[(u32, u32)],
    peer: &Hello,
) -> Result<(), CliError> {
    let ah = nd.ah_to(peer.gid)?;
    for (&(q, psn), &(pq, ppsn)) in mine.iter().zip(&peer.qps) {
        let mut c = Connect::new(s.qp_type, ah, s.mtu, pq);
        c.sq_psn = psn;
        c.rq_psn = ppsn;
        nd.connect(q, c)?;
    }
    Ok(())
}

/// Runs `rnic perf` against a real interface (client or server).
pub fn run(req: &PerfRequest, s: Settings) -> Result<(), CliError> {
    match req.peer.clone() {
        Some(peer) => client(req, s, &peer),
        None => server(req, s),
    }
}

fn client(req: &PerfRequest, mut s: Settings, peer: &str) -> Result<(), CliError> {
    let ifname = match &req.dev {
        Some(d) => d.clone(),
        None => {
            use std::net::ToSocketAddrs;
            let ip = (peer, req.port)
                .to_socket_addrs()
                .map_err(|e| CliError::new(format!("{peer}: {e}")))?
                .next()
                .ok_or_else(|| CliError::new(format!("{peer}: no address")))?
                .ip();
            netdev::route_dev(ip)?
        }
    };
    let mut nd = NetDev::open(&dev_options(req, &ifname, s.mem_len())?)?;
    let mtu = s.mtu.min(nd.max_mtu);
    if mtu < s.mtu {
        eprintln!(
            "rnic: -m {}: {} (MTU {}) carries IB MTU {mtu} at most; using {mtu}",
            s.mtu, nd.ifname, nd.if_mtu
        );
    }
    let send_lat = s.verb == Verb::Send && s.mode == Mode::Lat;
    let mine = make_qps(&mut nd, &s, s.qps as usize, send_lat)?;
    let me = my_hello(&s, &nd, "client", mtu, &mine);
    let mut ctrl = Ctrl::connect(peer, req.port)?;
    send_hello(&mut ctrl, &me)?;
    let sh = recv_hello(&mut ctrl)?;
    if sh.qps.len() != mine.len() {
        return Err(CliError::new(format!(
            "the server made {} QPs, not {}",
            sh.qps.len(),
            mine.len()
        )));
    }
    s.mtu = sh.mtu.min(mtu);
    connect_all(&nd, &s, &mine, &sh)?;
    let me = Hello { mtu: s.mtu, ..me };
    crate::say(&header(&s, &nd, &me, &sh))?;
    let qpns = mine.iter().map(|q| q.0).collect();
    let mut link = Link::new(&nd, &s, qpns, sh.rkey, sh.va);
    let mut progress = Progress::new(!req.no_progress);
    let mut results = Vec::new();
    let n = s.sizes.len() as f64;
    for (i, &size) in s.sizes.iter().enumerate() {
        progress.stage(
            format!("{} {} {size} B", s.verb.name(), s.mode.name()),
            i as f64 / n,
            1.0 / n,
        );
        if s.verb == Verb::Write && s.mode == Mode::Lat {
            nd.mem.write(link.at(size), &[0]);
        }
        ctrl.send_line(&format!("size {size}"))?;
        expect(&mut ctrl, &nd, "go")?;
        let r = match s.mode {
            Mode::Lat => lat_client(&mut link, size, &mut progress),
            Mode::Bw => bw_client(&mut link, size, &mut progress),
        };
        let r = r.map_err(|e| {
            progress.finish();
            let _ = ctrl.send_line(&format!("error {e}"));
            CliError::new(format!("{} {} {size} B: {e}", s.verb.name(), s.mode.name()))
        })?;
        ctrl.send_line(&format!("end {size}"))?;
        expect(&mut ctrl, &nd, "ok")?;
        results.push(r);
    }
    progress.finish();
    let text = report::text(&s, &results, req.report_gbits);
    crate::say(&text)?;
    let results_json: Vec<Value> = results
        .iter()
        .map(|r| report::result_json(&s, r, req.report_gbits))
        .collect();
    let local = nd.json("client");
    let done = json!({"results": results_json, "report": text, "device": local});
    ctrl.send_line(&format!("done {done}"))?;
    let reply = expect(&mut ctrl, &nd, "done")?;
    let remote: Value = serde_json::from_str(reply.trim_start_matches("done").trim())
        .map_err(|e| CliError::new(format!("the server's counters: {e}")))?;
    let devices = Value::Array(vec![local, remote["device"].clone()]);
    nd.stop();
    let several = results.len() > 1;
    if let Some(p) = &req.hgrm {
        for r in &results {
            let path = crate::perfcmd::per_size_path(p, r.bytes, several);
            write_file(&path, &report::hgrm(&r.hist))?;
            eprintln!("rnic: wrote {}", path.display());
        }
    }
    if let Some(p) = &req.plot {
        let t = format!(
            "rnic perf {} {}: {}",
            s.verb.name(),
            s.mode.name(),
            dev_note(&nd)
        );
        write_file(p, &report::svg(&t, &results))?;
        eprintln!("rnic: wrote {}", p.display());
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
            &s,
            &nd,
            "client",
            Value::Array(results_json),
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

fn server(req: &PerfRequest, mut s: Settings) -> Result<(), CliError> {
    let ifname = req
        .dev
        .clone()
        .ok_or_else(|| CliError::usage("the server needs its interface: --dev IFACE"))?;
    let mut nd = NetDev::open(&dev_options(req, &ifname, 4096)?)?;
    let listener = oob::listen(req.port)?;
    eprintln!(
        "rnic: {} via {}: waiting for a client on TCP port {}",
        nd.ifname, nd.backend, req.port
    );
    let mut ctrl = Ctrl::accept(&listener)?;
    drop(listener);
    let ch = recv_hello(&mut ctrl)?;
    if (ch.verb, ch.mode, ch.qp_type) != (s.verb, s.mode, s.qp_type) {
        let why = format!(
            "the server runs {} {} {}, the client asked for {} {} {}",
            s.verb.name(),
            s.mode.name(),
            conn_name(s.qp_type),
            ch.verb.name(),
            ch.mode.name(),
            conn_name(ch.qp_type)
        );
        let _ = ctrl.send_line(&format!("error {why}"));
        return Err(CliError::new(why));
    }
    // the client's run parameters apply
    s.sizes = ch.sizes.clone();
    s.iters = ch.iters.max(1);
    s.duration = (ch.duration > 0).then(|| Duration::from_secs(ch.duration));
    s.qps = ch.qps.len() as u32;
    s.tx_depth = ch.tx_depth;
    s.mtu = ch.mtu.min(nd.max_mtu);
    nd.register(s.mem_len())?;
    let mine = make_qps(&mut nd, &s, ch.qps.len(), s.verb == Verb::Send)?;
    connect_all(&nd, &s, &mine, &ch)?;
    let me = my_hello(&s, &nd, "server", s.mtu, &mine);
    send_hello(&mut ctrl, &me)?;
    crate::say(&header(&s, &nd, &me, &ch))?;
    let qpns = mine.iter().map(|q| q.0).collect();
    let mut link = Link::new(&nd, &s, qpns, ch.rkey, ch.va);
    let done = loop {
        let l = next_line(&mut ctrl, &nd)?;
        let mut w = l.split_whitespace();
        match w.next() {
            Some("size") => {
                let size: usize = w
                    .next()
                    .and_then(|x| x.parse().ok())
                    .filter(|x| s.sizes.contains(x))
                    .ok_or_else(|| CliError::new(format!("the client said {l:?}")))?;
                let served = serve(&mut link, &mut ctrl, size)?;
                ctrl.send_line(&format!("ok {served}"))?;
            }
            Some("done") => break l,
            Some("error") => {
                return Err(CliError::new(format!(
                    "the client failed: {}",
                    l.trim_start_matches("error ")
                )))
            }
            _ => return Err(CliError::new(format!("the client said {l:?}"))),
        }
    };
    let client: Value = serde_json::from_str(done.trim_start_matches("done").trim())
        .map_err(|e| CliError::new(format!("the client's results: {e}")))?;
    let local = nd.json("server");
    ctrl.send_line(&format!("done {}", json!({ "device": local })))?;
    nd.stop();
    crate::say(client["report"].as_str().unwrap_or(""))?;
    let devices = Value::Array(vec![local, client["device"].clone()]);
    for (flag, given) in [
        ("--hgrm", req.hgrm.is_some()),
        ("--plot", req.plot.is_some()),
    ] {
        if given {
            eprintln!("rnic: {flag}: the client keeps the histograms; give it to the client");
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
            &s,
            &nd,
            "server",
            client["results"].clone(),
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
