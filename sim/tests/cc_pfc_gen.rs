//! PFC generation by the NIC, sans-I/O on the
//! virtual clock:
//!
//! - a receive backlog at XOFF makes `Rnic` send one 802.1Qbb frame naming
//!   the priority with the configured pause time, refreshed every half
//!   pause time while the backlog stays above XON, and one with pause time
//!   0 once it falls to XON; the frames parse with the wire crate and leave
//!   ahead of data; `tx_prio{p}_pause` / `tx_prio{p}_pause_duration` count
//!   them;
//! - the priority of the backlog comes from the DSCP (trust dscp, DSCP >> 3)
//!   or the VLAN PCP (trust pcp), as the in-memory port classifies what
//!   waits in its ring;
//! - without configuration nothing is ever sent.

use nic::cc::{Qos, TrustMode};
use nic::io::mem::pair;
use nic::io::{FrameBatch, Port, RxBacklog};
use nic::transport::{PfcTxConfig, MAX_FRAME_LEN};
use nic::verbs::{SendOp, SendWr, Sgl};
use nic::Instant;
use sim::{LinkConfig, Pair, PairConfig};
use std::time::Duration;
use wire::{EthernetAddress, MacControl, MacControlRepr, RoceRepr};

const G10: u64 = 10_000_000_000;

fn pair_at(bps: u64) -> Pair {
    Pair::new(PairConfig {
        mtu: 1024,
        link: LinkConfig {
            bandwidth_bps: bps,
            ..LinkConfig::default()
        },
        ..PairConfig::default()
    })
}

fn ns(n: u64) -> Instant {
    Instant::from_nanos(n)
}

fn pfc(class_enable: u8, q: &[(usize, u16)]) -> MacControl {
    let mut quanta = [0u16; 8];
    for &(p, v) in q {
        quanta[p] = v;
    }
    MacControl::Pfc {
        class_enable,
        quanta,
    }
}

/// The next frame node `i` sends at `now`, if any.
fn next(p: &mut Pair, i: usize, now: Instant) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; MAX_FRAME_LEN];
    let n = p.sim.nodes[i].poll_transmit(now, &mut buf)?;
    buf.truncate(n);
    Some(buf)
}

/// The next frame, which must be a MAC control frame from node `i`.
#[track_caller]
fn next_pfc(p: &mut Pair, i: usize, now: Instant) -> MacControl {
    let f = next(p, i, now).expect("a PFC frame is due");
    let m = MacControlRepr::parse(&f).expect("a MAC control frame");
    assert_eq!(f.len(), 60, "padded to the minimum frame");
    assert_eq!(m.src, p.sides[i].mac);
    assert_eq!(m.dst, EthernetAddress::MAC_CONTROL);
    m.control
}

#[test]
fn xoff_refresh_and_xon_on_the_virtual_clock() {
    let mut p = pair_at(G10);
    let r = &mut p.sim.nodes[1];
    assert!(!r.pfc_tx_enabled());
    r.set_pfc_tx(Some(PfcTxConfig {
        quanta: 1000, // 51.2 µs at 10 Gb/s: refreshed every 25.6 µs
        ..PfcTxConfig::new(100_000, 50_000)
    }));
    assert!(r.pfc_tx_enabled());
    let t0 = ns(1_000);
    r.on_rx_backlog(t0, 3, 99_999);
    assert_eq!(r.poll_timeout(), None);
    assert!(next(&mut p, 1, t0).is_none(), "below XOFF: nothing");

    // XOFF: one frame naming priority 3 alone, with the configured time
    p.sim.nodes[1].on_rx_backlog(t0, 3, 100_000);
    assert_eq!(p.sim.nodes[1].poll_timeout(), Some(Instant::ZERO));
    assert_eq!(next_pfc(&mut p, 1, t0), pfc(1 << 3, &[(3, 1000)]));
    assert!(next(&mut p, 1, t0).is_none(), "one frame, not two");
    let refresh = t0 + Duration::from_nanos(25_600);
    assert_eq!(p.sim.nodes[1].poll_timeout(), Some(refresh));

    // between XON and XOFF nothing changes; the refresh is due at half the
    // pause time, not before
    p.sim.nodes[1].on_rx_backlog(ns(2_000), 3, 60_000);
    let before = ns(refresh.as_nanos() - 1);
    p.sim.nodes[1].handle_timeout(before);
    assert!(next(&mut p, 1, before).is_none());
    p.sim.nodes[1].handle_timeout(refresh);
    assert_eq!(next_pfc(&mut p, 1, refresh), pfc(1 << 3, &[(3, 1000)]));
    assert_eq!(
        p.sim.nodes[1].poll_timeout(),
        Some(refresh + Duration::from_nanos(25_600))
    );

    // XON: pause time 0 resumes the peer; no refresh after it
    let t2 = ns(40_000);
    p.sim.nodes[1].on_rx_backlog(t2, 3, 50_000);
    assert_eq!(next_pfc(&mut p, 1, t2), pfc(1 << 3, &[]));
    assert_eq!(p.sim.nodes[1].poll_timeout(), None);
    assert!(next(&mut p, 1, ns(1_000_000)).is_none());

    let c = p.sim.nodes[1].pfc_counters(ns(100_000));
    let get = |n: &str| c.iter().find(|(k, _)| k == n).map(|(_, v)| v);
    assert_eq!(get("tx_prio3_pause"), Some(3));
    assert_eq!(get("tx_prio3_pause_duration"), Some(39), "µs, t0 to XON");
    for q in (0..8).filter(|&q| q != 3) {
        assert_eq!(get(&format!("tx_prio{q}_pause")), Some(0));
    }
    assert_eq!(c.rx_pause, [0; 8]);

    // the peer obeys what we sent: hand node 0 the frames of a new episode
    p.sim.nodes[1].on_rx_backlog(ns(200_000), 3, 1 << 20);
    let f = next(&mut p, 1, ns(200_000)).unwrap();
    p.sim.nodes[0].handle_frame(ns(200_100), &f);
    let c0 = p.sim.nodes[0].pfc_counters(ns(200_100));
    assert_eq!(c0.rx_pause[3], 1);
}

#[test]
fn pfc_goes_out_ahead_of_data_and_several_priorities_share_a_frame() {
    let mut p = pair_at(G10);
    let (qa, la, ba, bb, rb) = (
        p.sides[0].qpn,
        p.sides[0].lkey,
        p.sides[0].base,
        p.sides[1].base,
        p.sides[1].rkey,
    );
    p.sim.nodes[0].set_pfc_tx(Some(PfcTxConfig::new(10_000, 1_000)));
    let wr = SendWr::new(
        1,
        SendOp::Write {
            remote_addr: bb,
            rkey: rb,
        },
        Sgl::single(ba, 4096, la),
    );
    p.sim.nodes[0].post_send(qa, wr).unwrap();
    let t = ns(5_000);
    p.sim.nodes[0].on_rx_backlogs(t, &[0, 0, 20_000, 0, 0, 10_000, 0, 0]);
    // G10, 0xFFFF quanta: what the peer is told; data follows
    assert_eq!(
        next_pfc(&mut p, 0, t),
        pfc(0b0010_0100, &[(2, 0xFFFF), (5, 0xFFFF)])
    );
    let data = next(&mut p, 0, t).expect("then the WRITE");
    assert!(RoceRepr::parse(&data).is_ok(), "a RoCE frame");
    // a priority PFC is not enabled for is never paused
    p.sim.nodes[1].set_pfc_tx(Some(PfcTxConfig {
        enabled: 1 << 3,
        ..PfcTxConfig::new(10_000, 1_000)
    }));
    p.sim.nodes[1].on_rx_backlogs(t, &[u64::MAX; 8]);
    assert_eq!(next_pfc(&mut p, 1, t), pfc(1 << 3, &[(3, 0xFFFF)]));
    p.sim.nodes[1].on_rx_backlog(t, 42, u64::MAX); // out of range: ignored
    assert!(next(&mut p, 1, t).is_none());
}

#[test]
fn no_pfc_without_configuration() {
    let mut p = pair_at(G10);
    for i in 0..2 {
        assert!(!p.sim.nodes[i].pfc_tx_enabled());
        p.sim.nodes[i].on_rx_backlogs(ns(1), &[u64::MAX; 8]);
        assert_eq!(p.sim.nodes[i].poll_timeout(), None);
        assert!(next(&mut p, i, ns(2)).is_none());
        let c = p.sim.nodes[i].pfc_counters(ns(3));
        assert_eq!(c.tx_pause, [0; 8]);
        assert_eq!(c.tx_pause_duration_ns, [0; 8]);
    }
    // and turned off again
    p.sim.nodes[0].set_pfc_tx(Some(PfcTxConfig::new(1, 0)));
    p.sim.nodes[0].set_pfc_tx(None);
    p.sim.nodes[0].on_rx_backlog(ns(4), 3, u64::MAX);
    assert!(next(&mut p, 0, ns(5)).is_none());
}

/// An Ethernet frame: optional VLAN tag with `pcp`, IPv4 with `dscp`,
/// padded to `len`.
fn ip_frame(pcp: Option<u8>, dscp: u8, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    if let Some(p) = pcp {
        f.extend_from_slice(&[0x81, 0x00, (p << 5), 10]);
    }
    f.extend_from_slice(&[0x08, 0x00, 0x45, dscp << 2]);
    f.resize(len, 0);
    f
}

/// The backlog of the receiving end after `frames` were sent into it.
fn backlog_of(frames: &[Vec<u8>]) -> RxBacklog {
    let macs = [EthernetAddress([2, 0, 0, 0, 0, 1]); 2];
    let (mut a, b) = pair(macs, 64);
    assert_eq!(b.rx_backlog().unwrap().bytes, 0, "counting starts");
    let mut batch = FrameBatch::new(16);
    for f in frames {
        assert!(batch.push(f));
    }
    assert_eq!(a.send(&batch), frames.len());
    let bl = b.rx_backlog().unwrap();
    assert_eq!(bl.frames, frames.len() as u64);
    assert_eq!(bl.bytes, frames.iter().map(|f| f.len() as u64).sum::<u64>());
    bl
}

#[test]
fn the_backlog_priority_comes_from_dscp_or_pcp() {
    // 1000 B tagged PCP 6 / DSCP 10; 2000 B untagged DSCP 26; 300 B non-IP
    let mut non_ip = vec![0u8; 300];
    non_ip[12..14].copy_from_slice(&[0x88, 0xB5]);
    let frames = vec![
        ip_frame(Some(6), 10, 1000),
        ip_frame(None, 26, 2000),
        non_ip,
    ];
    let bl = backlog_of(&frames);
    // trust dscp (default): DSCP >> 3 — 10 → 1, 26 → 3, non-IP → 0
    let dscp = Qos::default();
    assert_eq!(bl.by_priority(&dscp), [300, 1000, 0, 2000, 0, 0, 0, 0]);
    // a configured table moves DSCP 26 to priority 4
    let mut table = Qos::default();
    table.dscp2prio[26] = 4;
    assert_eq!(bl.by_priority(&table), [300, 1000, 0, 0, 2000, 0, 0, 0]);
    // trust pcp: the tag's PCP; untagged frames on the default priority
    let pcp = Qos {
        trust: TrustMode::Pcp,
        default_priority: 2,
        ..Qos::default()
    };
    assert_eq!(bl.by_priority(&pcp), [0, 0, 2300, 0, 0, 0, 1000, 0]);
    // a port that knows only the total puts it on the data priority
    let total = RxBacklog {
        frames: 3,
        bytes: 3300,
        classes: None,
    };
    assert_eq!(total.by_priority(&dscp), [0, 0, 0, 3300, 0, 0, 0, 0]);

    // into the NIC: trust pcp pauses priorities 2 and 6, trust dscp 0, 1, 3
    for (qos, mask) in [(pcp, 0b0100_0100u8), (dscp, 0b0000_1011)] {
        let mut p = pair_at(G10);
        p.sim.nodes[1].set_pfc_tx(Some(PfcTxConfig::new(300, 100)));
        p.sim.nodes[1].on_rx_backlogs(ns(10), &bl.by_priority(&qos));
        match next_pfc(&mut p, 1, ns(10)) {
            MacControl::Pfc {
                class_enable,
                quanta,
            } => {
                assert_eq!(class_enable, mask, "{qos:?}");
                for (q, &t) in quanta.iter().enumerate() {
                    let want = if mask & (1 << q) != 0 { 0xFFFF } else { 0 };
                    assert_eq!(t, want);
                }
            }
            other => panic!("not PFC: {other:?}"),
        }
    }
    // what the ring held is gone once received
    let macs = [EthernetAddress([2, 0, 0, 0, 0, 1]); 2];
    let (mut a, mut b) = pair(macs, 64);
    let _ = b.rx_backlog();
    let mut batch = FrameBatch::new(4);
    batch.push(&frames[0]);
    batch.push(&frames[1]);
    a.send(&batch);
    let mut rx = FrameBatch::new(1);
    assert_eq!(b.recv(&mut rx), 1);
    let bl = b.rx_backlog().unwrap();
    assert_eq!((bl.frames, bl.bytes), (1, 2000));
    assert_eq!(bl.by_priority(&dscp), [0, 0, 0, 2000, 0, 0, 0, 0]);
}

#[test]
fn classifying_short_or_odd_frames_never_panics() {
    use nic::io::RxClasses;
    for len in 0..40 {
        let f = ip_frame(Some(5), 46, 60);
        let _ = RxClasses::classify(&f[..len.min(f.len())]);
        let f = vec![0x81u8; len];
        let _ = RxClasses::classify(&f);
    }
    assert_eq!(
        RxClasses::classify(&ip_frame(Some(5), 46, 60)),
        (Some(5), 46)
    );
    assert_eq!(RxClasses::classify(&ip_frame(None, 26, 60)), (None, 26));
    // IPv6: traffic class 0xB8 (DSCP 46)
    let mut v6 = vec![0u8; 60];
    v6[12..14].copy_from_slice(&[0x86, 0xDD]);
    v6[14] = 0x6B;
    v6[15] = 0x80;
    assert_eq!(RxClasses::classify(&v6), (None, 46));
    // a tag with nothing behind it
    assert_eq!(RxClasses::classify(&ip_frame(Some(3), 0, 16)), (Some(3), 0));
}
