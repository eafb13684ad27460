//! testclient: a client process for the daemon's tests. It talks
//! to its parent with lines on stdin/stdout:
//!
//! - it prints `INFO <gid-hex> <mac> <addr> <rkey> <qpn>...` after setup and
//!   reads `PEER <gid-hex> <mac> <addr> <rkey> <qpn>...` back;
//! - then it runs its mode and prints `OK ...`, `FAIL ...` or
//!   `PEER_ERROR ...` lines; it exits at EOF on stdin or when done.
//!
//! Modes: `verbs-a`/`verbs-b` (SEND, WRITE, WRITE_WITH_IMM, READ and both
//! atomics, data checked), `pingpong` (N QPs, M round trips each),
//! `stream` (WRITEs until an error completion), `hostile` (garbage WQEs and
//! ring bytes on its own QPs), `ud` (a UD QP: SENDs both ways through an
//! address handle, then sends with bad AH handles), `srq-recv` (two RC QPs
//! on one SRQ) and `srq-send` (SENDs to them), and `usermem` (commands
//! on the process's own memory, see `usermem.rs`).

mod ud_srq;
mod usermem;

use ud_srq::{srq_recv, srq_send, ud};

use nic::verbs::{AhAttr, RecvWr, SendOp, SendWr, Sgl, Wc, WcOpcode, WcStatus};
use softrnic::ring::{self as sring, WqeRaw};
use softrnic::{Buffer, ConnectParams, Context, Cq, Mr, Qp, QpInitAttr, QpKind, ACCESS_ALL};
use std::io::{BufRead, Write};
use std::time::Duration;
use wire::{EthernetAddress, Gid};

const BUF: usize = 4 << 20;
const T: Duration = Duration::from_secs(20);

struct Peer {
    gid: Gid,
    mac: EthernetAddress,
    addr: u64,
    rkey: u32,
    qpns: Vec<u32>,
}

fn say(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

fn line() -> String {
    let mut s = String::new();
    if std::io::stdin().lock().read_line(&mut s).unwrap_or(0) == 0 {
        std::process::exit(0);
    }
    s.trim().to_string()
}

fn expect(word: &str) -> Vec<String> {
    let l = line();
    let mut it = l.split_whitespace().map(String::from);
    assert_eq!(
        it.next().as_deref(),
        Some(word),
        "expected {word}, got {l:?}"
    );
    it.collect()
}

fn fail(msg: String) -> ! {
    say(&format!("FAIL {msg}"));
    std::process::exit(1)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 13 + seed as usize) % 251) as u8)
        .collect()
}

struct Node {
    ctx: std::sync::Arc<Context>,
    buf: Buffer,
    mr: Mr,
    cq: Cq,
    qps: Vec<Qp>,
}

fn setup(sock: &str, nqps: usize, depth: u32) -> Node {
    let ctx = Context::open(sock).unwrap_or_else(|e| fail(format!("open {sock}: {e}")));
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buffer(BUF).unwrap();
    let mr = pd.reg_mr(&buf, 0, BUF, ACCESS_ALL).unwrap();
    let cq = ctx.create_cq((nqps as u32 * depth * 2).min(65536)).unwrap();
    let qps = (0..nqps)
        .map(|_| {
            pd.create_qp(&QpInitAttr {
                qp_type: QpKind::Rc,
                send_cq: cq.handle,
                recv_cq: cq.handle,
                max_send_wr: depth,
                max_recv_wr: depth,
                sq_sig_all: false,
                srq: None,
            })
            .unwrap()
        })
        .collect();
    Node {
        ctx: ctx.clone(),
        buf,
        mr,
        cq,
        qps,
    }
}

fn exchange(n: &Node, ctx: &Context, p: &ConnectParams) -> Peer {
    let qpns: Vec<u32> = n.qps.iter().map(|q| q.qpn).collect();
    say(&info_line(ctx, n.mr.addr, n.mr.rkey, &qpns));
    let f = expect("PEER");
    let peer = Peer {
        gid: Gid::from_hex(&f[0]).expect("gid"),
        mac: nic::io::addr::parse_mac(&f[1]).expect("mac"),
        addr: f[2].parse().unwrap(),
        rkey: f[3].parse().unwrap(),
        qpns: f[4..].iter().map(|q| q.parse().unwrap()).collect(),
    };
    let ah = AhAttr::new(peer.gid, peer.mac);
    for (q, dq) in n.qps.iter().zip(&peer.qpns) {
        q.connect(p, ah, *dq, 100, 100)
            .unwrap_or_else(|e| fail(format!("connect: {e}")));
    }
    peer
}

fn check_ok(wcs: &[Wc]) {
    for w in wcs {
        if w.status != WcStatus::Success {
            fail(format!("completion {w:?}"));
        }
    }
}

fn verbs(n: &mut Node, peer: &Peer, role: &str) {
    let (mr, base) = (&n.mr, n.mr.addr);
    if role == "b" {
        n.buf.write(0x10_0000, &pattern(7, 200_000));
        n.buf.write(0x20_0000, &7u64.to_ne_bytes());
        let q = &mut n.qps[0];
        q.post_recv(&RecvWr {
            wr_id: 90,
            sgl: Sgl::single(base + 0x30_0000, 65536, mr.lkey),
        })
        .unwrap();
        q.post_recv(&RecvWr {
            wr_id: 91,
            sgl: Sgl::single(base + 0x31_0000, 16, mr.lkey),
        })
        .unwrap();
        say("READY");
        expect("CHECK");
        let wcs =
            n.cq.wait(2, T)
                .unwrap_or_else(|e| fail(format!("recv: {e}")));
        check_ok(&wcs);
        let s = wcs.iter().find(|w| w.wr_id == 90).expect("send arrived");
        let i = wcs
            .iter()
            .find(|w| w.wr_id == 91)
            .expect("write-imm arrived");
        if s.opcode != WcOpcode::Recv || s.byte_len != 50_000 {
            fail(format!("send completion {s:?}"));
        }
        if i.opcode != WcOpcode::RecvRdmaWithImm || i.imm != Some(0xabcd) {
            fail(format!("write-imm completion {i:?}"));
        }
        if n.buf.to_vec(0, 200_000) != pattern(1, 200_000) {
            fail("WRITE data differs".into());
        }
        if n.buf.to_vec(0x30_0000, 50_000) != pattern(2, 50_000) {
            fail("SEND data differs".into());
        }
        if n.buf.to_vec(0x8_0000, 4096) != pattern(3, 4096) {
            fail("WRITE_WITH_IMM data differs".into());
        }
        let v = u64::from_ne_bytes(n.buf.to_vec(0x20_0000, 8).try_into().unwrap());
        if v != 105 {
            fail(format!("atomic word is {v}, want 105"));
        }
        say("OK verbs-b");
        return;
    }
    expect("GO");
    n.buf.write(0, &pattern(1, 200_000));
    n.buf.write(0x8_0000, &pattern(3, 4096));
    n.buf.write(0x30_0000, &pattern(2, 50_000));
    let (rb, rk, lk) = (peer.addr, peer.rkey, mr.lkey);
    let w = |id, op, off: u64, len| {
        let mut wr = SendWr::new(id, op, Sgl::single(base + off, len, lk));
        wr.flags.signaled = true;
        wr
    };
    let posts = [
        w(
            1,
            SendOp::Write {
                remote_addr: rb,
                rkey: rk,
            },
            0,
            200_000,
        ),
        w(
            2,
            SendOp::Read {
                remote_addr: rb + 0x10_0000,
                rkey: rk,
            },
            0x10_0000,
            200_000,
        ),
        w(3, SendOp::Send, 0x30_0000, 50_000),
        w(
            4,
            SendOp::WriteWithImm {
                remote_addr: rb + 0x8_0000,
                rkey: rk,
                imm: 0xabcd,
            },
            0x8_0000,
            4096,
        ),
        w(
            5,
            SendOp::CompareSwap {
                remote_addr: rb + 0x20_0000,
                rkey: rk,
                compare: 7,
                swap: 100,
            },
            0x20_0000,
            8,
        ),
        w(
            6,
            SendOp::FetchAdd {
                remote_addr: rb + 0x20_0000,
                rkey: rk,
                add: 5,
            },
            0x20_0008,
            8,
        ),
    ];
    for p in &posts {
        n.qps[0].post_send(p).unwrap();
    }
    let wcs =
        n.cq.wait(6, T)
            .unwrap_or_else(|e| fail(format!("sends: {e}")));
    check_ok(&wcs);
    if n.buf.to_vec(0x10_0000, 200_000) != pattern(7, 200_000) {
        fail("READ data differs".into());
    }
    let cas = u64::from_ne_bytes(n.buf.to_vec(0x20_0000, 8).try_into().unwrap());
    let faa = u64::from_ne_bytes(n.buf.to_vec(0x20_0008, 8).try_into().unwrap());
    if (cas, faa) != (7, 100) {
        fail(format!("atomics returned {cas}, {faa}; want 7, 100"));
    }
    say("OK verbs-a");
}

/// Every QP: `iters` round trips of a 64-byte SEND; `lead` starts them.
fn pingpong(n: &mut Node, lead: bool, iters: u64) {
    let (base, lk) = (n.mr.addr, n.mr.lkey);
    let nq = n.qps.len();
    let recv = |q: &mut Qp, i: usize| {
        q.post_recv(&RecvWr {
            wr_id: i as u64,
            sgl: Sgl::single(base + 0x1000 + 64 * i as u64, 64, lk),
        })
        .unwrap()
    };
    for (i, q) in n.qps.iter_mut().enumerate() {
        recv(q, i);
        recv(q, i);
    }
    say("READY");
    expect("GO");
    let send = |q: &mut Qp, i: usize| {
        let mut wr = SendWr::new(
            (1 << 32) | i as u64,
            SendOp::Send,
            Sgl::single(base + 0x10_0000 + 64 * i as u64, 64, lk),
        );
        wr.flags.signaled = true;
        q.post_send(&wr).unwrap()
    };
    let mut left = vec![iters; nq];
    if lead {
        for (i, q) in n.qps.iter_mut().enumerate() {
            send(q, i);
        }
    }
    let mut done = 0;
    let mut out = Vec::new();
    // a stall guard, not a time limit: on a loaded machine the round trips
    // take as long as they take, but a minute without one is a stuck run
    let mut last = std::time::Instant::now();
    while done < nq {
        out.clear();
        if n.cq.poll(256, &mut out) == 0 {
            if last.elapsed() > Duration::from_secs(60) {
                let rest: u64 = left.iter().sum();
                fail(format!(
                    "pingpong: {done} of {nq} QPs done, {rest} round trips left, none for 60 s"
                ));
            }
            std::thread::yield_now();
            continue;
        }
        last = std::time::Instant::now();
        for w in &out {
            if w.status != WcStatus::Success {
                fail(format!("pingpong completion {w:?}"));
            }
            if w.opcode != WcOpcode::Recv {
                continue;
            }
            let i = w.wr_id as usize;
            recv(&mut n.qps[i], i);
            left[i] -= 1;
            // the leader's last receive ends its QP; the follower answers
            // every ping, including the last
            if !lead || left[i] > 0 {
                send(&mut n.qps[i], i);
            }
            if left[i] == 0 {
                done += 1;
            }
        }
    }
    say(&format!("OK pingpong {nq} QPs x {iters}"));
}

/// WRITEs to the peer, 8 outstanding, until a completion fails.
fn stream(n: &mut Node, peer: &Peer) {
    let (base, lk) = (n.mr.addr, n.mr.lkey);
    say("READY");
    expect("GO");
    let mut out = Vec::new();
    let mut outstanding = 0;
    let mut total = 0u64;
    let mut id = 0u64;
    loop {
        while outstanding < 8 {
            id += 1;
            let mut wr = SendWr::new(
                id,
                SendOp::Write {
                    remote_addr: peer.addr + 0x40_000,
                    rkey: peer.rkey,
                },
                Sgl::single(base, 4096, lk),
            );
            wr.flags.signaled = true;
            if n.qps[0].post_send(&wr).is_err() {
                break;
            }
            outstanding += 1;
        }
        out.clear();
        n.cq.poll(64, &mut out);
        for w in &out {
            outstanding -= 1;
            if w.status != WcStatus::Success {
                say(&format!("PEER_ERROR {:?} after {total} writes", w.status));
                std::process::exit(3);
            }
            total += 1;
            if total == 1000 {
                say("STREAMING");
            }
        }
        if out.is_empty() {
            std::thread::yield_now();
        }
    }
}

/// Garbage on its own QPs: every case must come back as an error
/// completion (or, for wild ring bytes, an error state), never a crash.
fn hostile(n: &mut Node) {
    use rand::Rng;
    let (base, lk) = (n.mr.addr, n.mr.lkey);
    let mut rng = rand::thread_rng();
    say("READY");
    expect("GO");
    let write = |addr: u64, len: u32, lkey: u32| {
        let mut w = softrnic::ring::encode_send(&SendWr::new(
            0,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: 1,
            },
            Sgl::single(addr, len, lkey),
        ));
        w.flags = 1;
        w
    };
    let mut cases: Vec<(u64, WqeRaw)> = Vec::new();
    let mut w = write(base, 64, lk);
    w.opcode = 99;
    cases.push((101, w));
    let mut w = write(base, 64, lk);
    w.num_sge = 200;
    cases.push((102, w));
    cases.push((103, write(base, 64, lk ^ 0x5a5a_0000)));
    cases.push((104, write(base, u32::MAX, lk)));
    cases.push((105, write(base.wrapping_sub(4096), 64, lk)));
    let mut w = write(base, 64, lk);
    w.flags = 0xff;
    cases.push((106, w));
    let mut w = write(base, 8, lk);
    w.opcode = softrnic::ring::opcode::ATOMIC_FETCH_AND_ADD;
    w.sge[0].length = 3;
    cases.push((107, w));
    let nq = n.qps.len();
    for (i, (id, mut w)) in cases.iter().copied().enumerate() {
        w.wr_id = id;
        // SAFETY: deliberately bad WQEs on our own QP.
        unsafe { n.qps[i % nq].post_raw_send(&w) }.unwrap();
    }
    let mut errs = 0;
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < cases.len() && t0.elapsed() < Duration::from_secs(10) {
        let mut out = Vec::new();
        n.cq.poll(64, &mut out);
        for w in out {
            if w.status != WcStatus::Success {
                errs += 1;
            }
            got.push(w.wr_id);
        }
        std::thread::yield_now();
    }
    for (id, _) in &cases {
        if !got.contains(id) {
            fail(format!("no completion for hostile WQE {id}; got {got:?}"));
        }
    }
    // now scribble over every ring byte of the remaining QPs, indices
    // included, many times
    for q in n.qps.iter().skip(cases.len()) {
        for (p, len) in q.raw_rings() {
            for _ in 0..50 {
                for k in 0..len {
                    // SAFETY: our own mapping.
                    unsafe { *p.add(k) = rng.gen() };
                }
                q.ring_doorbells();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    // and the doorbell page: every bit set, and random words
    if let Some((p, len)) = n.ctx.raw_doorbells() {
        for round in 0..20 {
            for k in 0..len {
                let b = if round == 0 { 0xff } else { rng.gen() };
                // SAFETY: our own mapping.
                unsafe { *p.add(k) = b };
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    // and a few wild WQEs with random bytes through the normal doorbell
    let last = n.qps.len() - 1;
    for _ in 0..16 {
        let mut w = WqeRaw::default();
        // SAFETY: plain old data.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                &mut w as *mut WqeRaw as *mut u8,
                std::mem::size_of::<WqeRaw>(),
            )
        };
        rng.fill(bytes);
        // SAFETY: post_raw_send is memory-safe for any WQE (that is the
        // point here: the daemon must refuse random ones).
        let _ = unsafe { n.qps[last].post_raw_send(&w) };
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut out = Vec::new();
    n.cq.poll(4096, &mut out);
    say(&format!(
        "OK hostile {errs} error completions, {} more after garbage",
        out.len()
    ));
}

const QKEY: u32 = 0x1111_2222;

/// `INFO <gid-hex> <mac>`: how every subcommand starts its INFO line.
fn info_head(ctx: &Context) -> String {
    format!("INFO {} {}", ctx.device.gid.to_hex(), ctx.device.mac)
}

fn info_line(ctx: &Context, addr: u64, rkey: u32, qpns: &[u32]) -> String {
    let mut s = format!("{} {addr} {rkey}", info_head(ctx));
    for q in qpns {
        s += &format!(" {q}");
    }
    s
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let mode = args.get(1).cloned().unwrap_or_default();
    let sock = get("--sock").unwrap_or_else(|| fail("--sock PATH".into()));
    let nqps: usize = get("--qps").and_then(|s| s.parse().ok()).unwrap_or(1);
    let iters: u64 = get("--iters").and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut p = ConnectParams::default();
    if let Some(t) = get("--timeout").and_then(|s| s.parse().ok()) {
        p.timeout = t;
    }
    if let Some(r) = get("--retry").and_then(|s| s.parse().ok()) {
        p.retry_cnt = r;
    }
    match mode.as_str() {
        "ud" => ud(&sock),
        "srq-recv" => srq_recv(&sock, &p),
        "usermem" => usermem::run(&sock, &p),
        _ => {}
    }
    let depth = if mode.starts_with("pingpong") { 4 } else { 64 };
    let nq = if mode == "hostile" { 10 } else { nqps };
    let mut n = setup(&sock, nq, depth);
    let ctx = n.ctx.clone();
    if mode == "hostile" {
        // connect to a peer that does not exist: the good-looking WQEs
        // have nowhere to go, the bad ones must fail locally
        let peer = exchange(&n, &ctx, &p);
        let _ = peer;
        hostile(&mut n);
    } else {
        let peer = exchange(&n, &ctx, &p);
        match mode.as_str() {
            "verbs-a" => verbs(&mut n, &peer, "a"),
            "verbs-b" => verbs(&mut n, &peer, "b"),
            "pingpong-lead" => pingpong(&mut n, true, iters),
            "pingpong" => pingpong(&mut n, false, iters),
            "stream" => stream(&mut n, &peer),
            "srq-send" => srq_send(&mut n),
            m => fail(format!("unknown mode {m}")),
        }
    }
    // stay until the parent closes stdin
    loop {
        line();
    }
}
