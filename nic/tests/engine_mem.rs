//! Two engines on their own threads joined by the in-memory wire: every RC
//! verb and a UD SEND, data checked byte for byte; then thousands of
//! messages through a seeded impairing interceptor, recorded by a pcap tap.

mod enginecommon;

use enginecommon::{every_verb, start, start_grouped};
use nic::io::impair::{Impaired, Impairments, RandomImpairments};
use nic::io::mem::pair;
use nic::io::pcap::{read_pcap, PcapTap};
use nic::io::Port;
use nic::sim::PairConfig;
use nic::verbs::{Memory, SendOp, SendWr, Sgl, WcStatus};
use std::time::{Duration, Instant};
use wire::EthernetAddress;

fn macs() -> [EthernetAddress; 2] {
    [
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        EthernetAddress([2, 0, 0, 0, 0, 2]),
    ]
}

#[test]
fn every_verb_between_two_engine_threads() {
    let (a, b) = pair(macs(), 1024);
    let nodes = start(
        vec![Box::new(a), Box::new(b)],
        PairConfig {
            mtu: 4096,
            timeout: 10,
            ..PairConfig::default()
        },
    );
    every_verb(&nodes[0], &nodes[1]);
    let pc = nodes[0].dev.port_counters().unwrap();
    assert!(pc.tx_packets > 50 && pc.rx_packets > 50, "{pc:?}");
    for n in nodes {
        let s = n.engine.stop();
        assert!(s.tx_frames > 0 && s.rx_frames > 0);
    }
}

/// Both devices on one engine thread (`Engine::start_group`): the same
/// verbs, and each member stops on its own.
#[test]
fn every_verb_with_both_devices_on_one_engine_thread() {
    let (a, b) = pair(macs(), 1024);
    let mut nodes = start_grouped(
        vec![Box::new(a), Box::new(b)],
        PairConfig {
            mtu: 4096,
            timeout: 10,
            ..PairConfig::default()
        },
    );
    every_verb(&nodes[0], &nodes[1]);
    let b = nodes.pop().unwrap();
    let sb = b.engine.stop();
    assert!(sb.tx_frames > 0 && sb.rx_frames > 0, "{sb:?}");
    assert!(b.dev.counters().is_err(), "a stopped member still answers");
    // the other member keeps running after its partner stopped
    let a = nodes.pop().unwrap();
    assert!(a.dev.counters().unwrap().sent_pkts > 0);
    let sa = a.engine.stop();
    assert!(sa.tx_frames > 0 && sa.rx_frames > 0, "{sa:?}");
}

#[test]
fn thousands_of_messages_through_an_impairing_wire_with_a_pcap_tap() {
    let (a, b) = pair(macs(), 4096);
    let imp = Impairments {
        loss: 0.02,
        duplicate: 0.01,
        reorder: 0.02,
        corrupt: 0.005,
        ce_mark: 0.0,
    };
    let dir = std::env::temp_dir().join(format!("softrnic-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("tap.pcap");
    // impairments apply first; the tap records what reaches the wire
    let a: Box<dyn Port> = Box::new(Impaired::new(
        PcapTap::new(a, &pcap).unwrap(),
        Box::new(RandomImpairments::new(imp, 11)),
    ));
    let b: Box<dyn Port> = Box::new(Impaired::new(b, Box::new(RandomImpairments::new(imp, 12))));
    let nodes = start(
        vec![a, b],
        PairConfig {
            timeout: 10,
            ..PairConfig::default()
        },
    );
    let (na, nb) = (&nodes[0], &nodes[1]);
    const N: u64 = 3000;
    let mut posted = 0u64;
    let mut done = Vec::new();
    let t0 = Instant::now();
    while (done.len() as u64) < N {
        while posted < N && posted - done.len() as u64 <= 64 {
            let off = (posted % 64) * 4096;
            let len = (posted * 37 % 4000) as u32 + 1;
            na.mem
                .write(off as usize, &vec![(posted % 256) as u8; len as usize]);
            let read = posted.is_multiple_of(3);
            let op = if read {
                SendOp::Read {
                    remote_addr: nb.base + off,
                    rkey: nb.rkey,
                }
            } else {
                SendOp::Write {
                    remote_addr: nb.base + off,
                    rkey: nb.rkey,
                }
            };
            let local = na.base + 0x20_0000 * read as u64 + off;
            na.dev
                .post_send(
                    na.qpn,
                    SendWr::new(posted, op, Sgl::single(local, len, na.lkey)),
                )
                .unwrap();
            posted += 1;
        }
        if na.cq.poll(64, &mut done) == 0 {
            std::thread::yield_now();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{} of {N} after 120 s",
            done.len()
        );
    }
    for (i, w) in done.iter().enumerate() {
        assert_eq!(
            (w.wr_id, w.status),
            (i as u64, WcStatus::Success),
            "in order, exactly once"
        );
    }
    let c = na.dev.counters().unwrap();
    assert!(
        c.retransmitted_pkts > 0,
        "loss must have caused retransmissions: {c:?}"
    );
    for n in nodes {
        n.engine.stop();
    }
    let frames = read_pcap(&pcap).unwrap();
    assert!(
        frames.len() > N as usize,
        "the tap recorded {} frames",
        frames.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the sender's port saw, in the order its engine saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// A PFC frame received: its pause time for priority 3, if named.
    Pfc(Option<u16>),
    /// A RoCE frame sent.
    Data,
}

/// A port that logs PFC frames received and RoCE frames sent.
struct Logged<P: Port> {
    inner: P,
    log: std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
}

impl<P: Port> Port for Logged<P> {
    fn recv(&mut self, batch: &mut nic::io::FrameBatch) -> usize {
        let before = batch.len();
        let n = self.inner.recv(batch);
        let mut log = self.log.lock().unwrap();
        for i in before..batch.len() {
            if let Ok(m) = wire::MacControlRepr::parse(batch.get(i)) {
                if let wire::MacControl::Pfc {
                    class_enable,
                    quanta,
                } = m.control
                {
                    log.push(Seen::Pfc((class_enable & 1 << 3 != 0).then_some(quanta[3])));
                }
            }
        }
        n
    }
    fn send(&mut self, batch: &nic::io::FrameBatch) -> usize {
        let n = self.inner.send(batch);
        let mut log = self.log.lock().unwrap();
        for f in batch.iter().take(n) {
            if wire::RoceRepr::parse(f).is_ok() {
                log.push(Seen::Data);
            }
        }
        n
    }
    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn link_speed_bps(&self) -> u64 {
        self.inner.link_speed_bps()
    }
    fn counters(&self) -> nic::io::PortCounters {
        self.inner.counters()
    }
    fn wait(&mut self, timeout: Duration) {
        self.inner.wait(timeout)
    }
    fn rx_backlog(&self) -> Option<nic::io::RxBacklog> {
        self.inner.rx_backlog()
    }
}

/// PFC generation end to end on the in-memory wire: the receiver's engine
/// is held inside a control call while the sender fills its receive ring
/// with a whole window of WRITEs. Once released, the receiver sees the
/// backlog above XOFF and pauses priority 3 (DSCP 26) before anything
/// else; the sender, which the ACKs of that window would let go on, sends
/// nothing until the backlog has drained below XON and the receiver has
/// sent pause time 0; then the rest of the WRITEs go and land intact.
/// Counters on both sides agree. Ordering only: no timing is asserted (a
/// 10 Mb/s link makes a pause last 3.4 s, far longer than the drain).
#[test]
fn a_stalled_receiver_pauses_the_sender_with_pfc_and_resumes_it() {
    use nic::transport::{CcConfig, PfcTxConfig};
    use std::sync::{mpsc, Arc, Mutex};
    let (mut a, mut b) = pair(macs(), 1024);
    a.set_link_speed(10_000_000);
    b.set_link_speed(10_000_000);
    let log = Arc::new(Mutex::new(Vec::new()));
    let a = Logged {
        inner: a,
        log: log.clone(),
    };
    let cc = CcConfig {
        pfc_tx: Some(PfcTxConfig::new(256 << 10, 64 << 10)),
        ..CcConfig::default()
    };
    let ports: Vec<Box<dyn Port>> = vec![Box::new(a), Box::new(b)];
    let m = [ports[0].mac(), ports[1].mac()];
    let nodes = enginecommon::start_cc(
        ports,
        vec![enginecommon::gid(0), enginecommon::gid(1)],
        vec![m[1], m[0]],
        PairConfig {
            mtu: 4096,
            timeout: 20, // ~4 s: no retransmission while the receiver is held
            ..PairConfig::default()
        },
        cc,
    );
    let (na, nb) = (&nodes[0], &nodes[1]);
    // hold the receiver's engine
    let (held_tx, held_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let dev_b = nb.dev.clone();
    let holder = std::thread::spawn(move || {
        dev_b
            .call(move |_| {
                held_tx.send(()).unwrap();
                let _ = gate_rx.recv();
            })
            .unwrap()
    });
    held_rx.recv().unwrap();
    // a window (128 PSNs) of 4 KiB WRITEs reaches its ring; 72 more wait
    const N: u64 = 200;
    for i in 0..N {
        let off = i * 4096;
        na.mem
            .write(off as usize, &vec![(i * 7 % 251) as u8 + 1; 4096]);
        let wr = SendWr::new(
            i,
            SendOp::Write {
                remote_addr: nb.base + off,
                rkey: nb.rkey,
            },
            Sgl::single(na.base + off, 4096, na.lkey),
        );
        na.dev.post_send(na.qpn, wr).unwrap();
    }
    let t0 = Instant::now();
    while na.dev.port_counters().unwrap().tx_packets < 128 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the window never left"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let sent_before = log.lock().unwrap().len();
    assert_eq!(sent_before, 128, "a window, then the sender waits for ACKs");
    gate_tx.send(()).unwrap();
    holder.join().unwrap();
    let done = enginecommon::wait(&na.cq, N as usize, Duration::from_secs(60));
    assert!(
        done.iter().all(|w| w.status == WcStatus::Success),
        "{done:?}"
    );

    // the sender's view, in order
    let log = log.lock().unwrap().clone();
    assert!(log[..128].iter().all(|s| *s == Seen::Data));
    let mut paused = false;
    let (mut xoff, mut xon, mut after_xon) = (0, 0, 0);
    for (i, s) in log.iter().enumerate() {
        match *s {
            Seen::Pfc(Some(0)) => {
                paused = false;
                xon += 1;
            }
            Seen::Pfc(Some(q)) => {
                assert_eq!(q, 0xFFFF);
                paused = true;
                xoff += 1;
            }
            Seen::Pfc(None) => panic!("a PFC frame not naming priority 3"),
            Seen::Data => {
                assert!(
                    !paused,
                    "frame {i} sent while priority 3 was paused: {log:?}"
                );
                after_xon += (xon > 0) as usize;
            }
        }
    }
    assert!(xoff >= 1 && xon >= 1, "{log:?}");
    assert!(!paused, "resumed at the end");
    assert!(
        matches!(log[128], Seen::Pfc(Some(0xFFFF))),
        "the pause is the first thing the receiver sends: {:?}",
        &log[128..]
    );
    assert!(after_xon >= (N - 128) as usize, "the rest went after XON");

    // counters: every PFC frame B sent, A received (a lossless wire)
    let ca = na.dev.call(|r| r.pfc_counters(r.last_now())).unwrap();
    let cb = nb.dev.call(|r| r.pfc_counters(r.last_now())).unwrap();
    assert_eq!(ca.rx_pause[3], (xoff + xon) as u64);
    assert_eq!(cb.tx_pause[3], ca.rx_pause[3]);
    assert_eq!(cb.tx_pause.iter().sum::<u64>(), cb.tx_pause[3]);
    assert_eq!(ca.tx_pause, [0; 8], "the sender's ring never backed up");
    let names: Vec<(String, u64)> = cb.iter().collect();
    assert!(names.iter().any(|(n, v)| n == "tx_prio3_pause" && *v >= 2));
    assert!(names.iter().any(|(n, _)| n == "tx_prio3_pause_duration"));
    // the data landed
    let got = enginecommon::read(&nb.mem, 0, (N * 4096) as usize);
    for i in 0..N as usize {
        let want = (i as u64 * 7 % 251) as u8 + 1;
        if let Some(at) = got[i * 4096..(i + 1) * 4096]
            .iter()
            .position(|&x| x != want)
        {
            panic!("WRITE {i}: byte {at} differs");
        }
    }
    for n in nodes {
        n.engine.stop();
    }
}
