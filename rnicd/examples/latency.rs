//! Client-visible 64 B RDMA WRITE latency (post → signaled completion),
//! through the daemon (rnicd on the in-memory wire, a separate process,
//! shared-memory rings) against the in-process engine (nic::engine,
//! lock-free queues) on the same in-memory wire, in the same run. In both,
//! the two devices share ONE engine thread (`Engine::start_group`, `rnicd
//! --one-thread`), so a run has two busy threads — the client and the
//! engine — and fits a two-core machine without time-slicing.
//!
//! cargo build --release -p rnicd && \
//!   cargo run --release -p rnicd --example latency [-- ITERS [GAP_US]]
//!
//! With GAP_US, each WRITE follows GAP_US µs of idling (the engine parks in
//! between): the first post after idle, through rnicd with the engine's
//! bell handed to the client and with `--no-bell` (the post then waits for
//! the park, `--park-us`, to end), alternately.

use nic::device::Rnic;
use nic::engine::{Engine, EngineConfig};
use nic::transport::{QpInit, RnicConfig};
use nic::verbs::{access, AhAttr, HeapMemory, Memory, QpType, SendOp, SendWr, Sgl, WcStatus};
use sim::{connect, PairConfig};
use softrnic::{ConnectParams, Context, QpInitAttr, QpKind, ACCESS_ALL};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::{EthernetAddress, Gid};

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

fn report(name: &str, mut v: Vec<u64>) -> f64 {
    let p50 = pct(&mut v, 0.5);
    println!(
        "{name:<28} p50 {p50:7.2} µs  p90 {:7.2} µs  p99 {:7.2} µs  ({} samples)",
        pct(&mut v, 0.9),
        pct(&mut v, 0.99),
        v.len()
    );
    p50
}

fn in_process(iters: usize) -> Vec<u64> {
    let macs = [
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        EthernetAddress([2, 0, 0, 0, 0, 2]),
    ];
    let (p0, p1) = nic::io::mem::pair(macs, 4096);
    let gids = [
        Gid::from_ipv4([192, 0, 2, 1].into()),
        Gid::from_ipv4([192, 0, 2, 2].into()),
    ];
    let ports: Vec<Box<dyn nic::io::Port>> = vec![Box::new(p0), Box::new(p1)];
    // both devices on one engine thread, as `rnicd --mem-pair --one-thread`
    let members = ports
        .into_iter()
        .enumerate()
        .map(|(i, port)| (Rnic::new(RnicConfig::new(macs[i], gids[i])), port, None))
        .collect();
    let engines = Engine::start_group(
        members,
        EngineConfig {
            spin: 200,
            park: Duration::from_micros(200),
            ..Default::default()
        },
    );
    let mut nodes = Vec::new();
    for engine in engines {
        let dev = engine.device();
        let cq = dev.create_cq(4096).unwrap();
        let mem = Arc::new(HeapMemory::new(1 << 16));
        let m = mem.clone() as Arc<dyn Memory>;
        let cqn = cq.cqn;
        let (qpn, lkey, rkey) = dev
            .call(move |r| {
                let pd = r.alloc_pd();
                let all = access::LOCAL_WRITE | access::REMOTE_WRITE;
                let (l, k) = r.reg_mr(pd, m, 0, 0x1000, 1 << 16, all).unwrap();
                let q = r
                    .create_qp(QpInit {
                        qp_type: QpType::Rc,
                        pd,
                        send_cq: cqn,
                        recv_cq: cqn,
                        srq: None,
                        max_send_wr: 64,
                        max_recv_wr: 64,
                        sq_sig_all: false,
                    })
                    .unwrap();
                (q, l, k)
            })
            .unwrap();
        nodes.push((engine, dev, cq, qpn, lkey, rkey, mem));
    }
    for i in 0..2 {
        let (peer, qpn) = (nodes[1 - i].3, nodes[i].3);
        let ah = AhAttr::new(gids[1 - i], macs[1 - i]);
        nodes[i]
            .1
            .call(move |r| {
                connect(
                    r,
                    qpn,
                    PairConfig {
                        timeout: 14,
                        ..PairConfig::default()
                    },
                    ah,
                    peer,
                    1,
                    1,
                )
            })
            .unwrap();
    }
    let (dev, cq, lkey, rkey) = (&nodes[0].1, &nodes[0].2, nodes[0].4, nodes[1].5);
    let qpn = nodes[0].3;
    let mut out = Vec::new();
    let mut lat = Vec::with_capacity(iters);
    for i in 0..iters + 1000 {
        let wr = SendWr::new(
            i as u64,
            SendOp::Write {
                remote_addr: 0x1000,
                rkey,
            },
            Sgl::single(0x1000, 64, lkey),
        );
        let t0 = Instant::now();
        dev.post_send(qpn, wr).unwrap();
        out.clear();
        while cq.poll(1, &mut out) == 0 {
            std::hint::spin_loop();
        }
        let dt = t0.elapsed().as_nanos() as u64;
        assert_eq!(out[0].status, WcStatus::Success);
        if i >= 1000 {
            lat.push(dt);
        }
    }
    lat
}

fn daemon(iters: usize) -> Vec<u64> {
    daemon_with(iters, 0, &[])
}

fn daemon_with(iters: usize, gap_us: u64, extra: &[&str]) -> Vec<u64> {
    let exe = std::env::current_exe().unwrap();
    let rnicd = exe.parent().unwrap().parent().unwrap().join("rnicd");
    let dir = std::env::temp_dir().join(format!("softrnic-bench-{}", std::process::id()));
    let mut child = Command::new(&rnicd)
        .args(["--mem-pair", "--one-thread", "--name", "b", "--sock-dir"])
        .arg(&dir)
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build --release first)", rnicd.display()));
    let mut l = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut l)
        .unwrap();
    let run = || {
        let mut sides = Vec::new();
        for dev in ["b0", "b1"] {
            let ctx = Context::open(dir.join(format!("{dev}.sock"))).unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let buf = pd.alloc_buffer(1 << 16).unwrap();
            let mr = pd.reg_mr(&buf, 0, 1 << 16, ACCESS_ALL).unwrap();
            let cq = ctx.create_cq(256).unwrap();
            let qp = pd
                .create_qp(&QpInitAttr {
                    qp_type: QpKind::Rc,
                    send_cq: cq.handle,
                    recv_cq: cq.handle,
                    max_send_wr: 64,
                    max_recv_wr: 64,
                    sq_sig_all: false,
                    srq: None,
                })
                .unwrap();
            sides.push((ctx, pd, buf, mr, cq, qp));
        }
        for i in 0..2 {
            let (g, m) = (sides[1 - i].0.device.gid, sides[1 - i].0.device.mac);
            let peer = sides[1 - i].5.qpn;
            sides[i]
                .5
                .connect(&ConnectParams::default(), AhAttr::new(g, m), peer, 1, 1)
                .unwrap();
        }
        let (raddr, rkey) = (sides[1].3.addr, sides[1].3.rkey);
        let (laddr, lkey) = (sides[0].3.addr, sides[0].3.lkey);
        let s = &mut sides[0];
        let mut out = Vec::new();
        let mut lat = Vec::with_capacity(iters);
        let warm = if gap_us > 0 { 10 } else { 1000 };
        for i in 0..iters + warm {
            if gap_us > 0 {
                std::thread::sleep(Duration::from_micros(gap_us));
            }
            let mut wr = SendWr::new(
                i as u64,
                SendOp::Write {
                    remote_addr: raddr,
                    rkey,
                },
                Sgl::single(laddr, 64, lkey),
            );
            wr.flags.signaled = true;
            let t0 = Instant::now();
            s.5.post_send(&wr).unwrap();
            out.clear();
            while s.4.poll(1, &mut out) == 0 {
                std::hint::spin_loop();
            }
            let dt = t0.elapsed().as_nanos() as u64;
            assert_eq!(out[0].status, WcStatus::Success);
            if i >= warm {
                lat.push(dt);
            }
        }
        lat
    };
    let lat = run();
    // SAFETY: kill(2) has no memory-safety preconditions; the child is
    // not yet reaped, so its PID is still its own.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    lat
}

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let gap: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if gap > 0 {
        println!(
            "64 B RDMA WRITE after {gap} µs idle, post → completion, rnicd --mem-pair --one-thread --park-us 1000, {iters} iterations"
        );
        for round in 1..=2 {
            let park = ["--park-us", "1000"];
            report(&format!("bell ({round})"), daemon_with(iters, gap, &park));
            let nobell = ["--park-us", "1000", "--no-bell"];
            report(
                &format!("--no-bell ({round})"),
                daemon_with(iters, gap, &nobell),
            );
        }
        return;
    }
    println!("64 B RDMA WRITE, post → completion, in-memory wire, {iters} iterations");
    // alternate to even out machine noise
    let a = report("in-process engine", in_process(iters));
    let b = report("through rnicd (shm rings)", daemon(iters));
    let a2 = report("in-process engine (again)", in_process(iters));
    let b2 = report("through rnicd (again)", daemon(iters));
    println!(
        "shared-memory path adds {:.2} µs at p50 (mean of two runs)",
        (b + b2 - a - a2) / 2.0
    );
}
