//! The engine over AF_PACKET, in both ring formats
//! (TPACKET_V2, the default, and TPACKET_V3): two engines in two network
//! namespaces joined by a veth pair exchange every RC verb and a UD SEND;
//! the data is checked byte for byte, V2 sending trains of frames as UDP
//! GSO super-frames (the veth counts fewer skbs than frames). Then the
//! rings themselves: truncated
//! frames are dropped and counted, every slot goes back to the kernel,
//! frames the kernel dropped on a full ring are counted, V2 reports its
//! receive backlog, a VLAN tag the kernel took out is put back, and with
//! the virtio-net header a frame longer than a slot arrives whole; with
//! UDP GSO (no TX ring) a full send buffer holds frames back until the
//! device drains. The tests make their own namespaces (addresses only inside them) and remove
//! them even when they fail.

mod enginecommon;

use enginecommon::{can_run, every_verb, start, wait_for, wait_until, STUCK};
use nic::io::afpacket::{AfPacketPort, RingConfig, TpacketVersion};
use nic::io::{FrameBatch, Port};
use sim::PairConfig;
use std::time::{Duration, Instant};
use testkit::netns::{self, Namespaces};

/// Two namespaces `rnic-<tag>a-<pid>`, `rnic-<tag>b-<pid>` joined by a
/// 9000-MTU veth pair without IPv6 (so the kernel sends nothing of its
/// own on the link); returns them and the interface names.
fn link(tag: &str) -> (Namespaces, [String; 2], [String; 2]) {
    let id = std::process::id() % 100_000;
    let (na, nb) = (
        netns::ns_name(&format!("{tag}a")),
        netns::ns_name(&format!("{tag}b")),
    );
    let ns = Namespaces::create(&[na.clone(), nb.clone()]).expect("create namespaces");
    for n in [&na, &nb] {
        for k in ["all", "default"] {
            let set = format!("net.ipv6.conf.{k}.disable_ipv6=1");
            netns::exec(n, &["sysctl", "-qw", &set]).expect("sysctl");
        }
    }
    let (va, vb) = (format!("r{tag}a{id}"), format!("r{tag}b{id}"));
    netns::veth(&na, &va, "192.0.2.1/24", &nb, &vb, "192.0.2.2/24", 9000).expect("veth pair");
    (ns, [na, nb], [va, vb])
}

fn exchange(test: &str, tag: &str, version: TpacketVersion) {
    if !can_run(test, &[]) {
        return;
    }
    let (_ns, [na, nb], [va, vb]) = link(tag);
    // V2 sends trains as UDP GSO super-frames (V3 has no virtio-net header)
    let cfg = RingConfig {
        gso: true,
        ..RingConfig::with_version(version)
    };
    let pa = netns::run_in(&na, || AfPacketPort::open(&va, cfg))
        .unwrap()
        .expect("open port a");
    let pb = netns::run_in(&nb, || AfPacketPort::open(&vb, cfg))
        .unwrap()
        .expect("open port b");
    assert_eq!(pa.mtu(), 9000);
    assert_eq!(pa.version(), version);
    // a port that sends trains asks the device for QP turns as long
    let trains = version == TpacketVersion::V2 && nic::io::afpacket::gso_available();
    assert_eq!(pa.train_bytes() > 0, trains, "{:?}", pa.train_bytes());
    let cfg = PairConfig {
        mtu: 4096,
        timeout: 14,
        ..PairConfig::default()
    };
    let nodes = start(vec![Box::new(pa), Box::new(pb)], cfg);
    let (a, b) = (&nodes[0], &nodes[1]);

    every_verb(a, b);

    let pc = a.dev.port_counters().unwrap();
    assert!(pc.tx_packets >= 50 && pc.rx_packets >= 50, "{pc:?}");
    assert_eq!(pc.rx_dropped, 0, "{pc:?}");
    for n in nodes {
        n.engine.stop();
    }
    if version == TpacketVersion::V2 && nic::io::afpacket::gso_available() {
        // the veth counts skbs: trains went out as UDP GSO super-frames,
        // and b cut them back into the frames every_verb checked
        let skbs = kernel_tx_packets(&na, &va);
        assert!(skbs < pc.tx_packets, "{skbs} skbs for {pc:?}");
    }
}

/// The kernel's count of packets `dev` in namespace `ns` sent (one per skb).
fn kernel_tx_packets(ns: &str, dev: &str) -> u64 {
    let out = std::process::Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", "dev", dev])
        .output()
        .expect("ip -s link");
    let text = String::from_utf8_lossy(&out.stdout);
    let tx = text.find("\"tx\":").expect("tx statistics");
    let at = tx + text[tx..].find("\"packets\":").expect("tx packets") + 10;
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().expect("a count")
}

#[test]
fn every_rc_verb_and_ud_send_over_afpacket_between_namespaces() {
    exchange(
        "every_rc_verb_and_ud_send_over_afpacket_between_namespaces",
        "pk",
        TpacketVersion::V2,
    );
}

#[test]
fn every_rc_verb_and_ud_send_over_afpacket_v3_between_namespaces() {
    exchange(
        "every_rc_verb_and_ud_send_over_afpacket_v3_between_namespaces",
        "p3",
        TpacketVersion::V3,
    );
}

/// An IEEE local experimental EtherType: the kernel has no handler for it.
const TEST_ETHERTYPE: u16 = 0x88b5;

/// A test frame `seq` of `len` bytes from `src` to `dst`; `vlan`: tagged
/// with this TCI.
fn frame(
    src: &AfPacketPort,
    dst: &AfPacketPort,
    seq: u32,
    len: usize,
    vlan: Option<u16>,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst.mac().0);
    f.extend_from_slice(&src.mac().0);
    if let Some(tci) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&TEST_ETHERTYPE.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    let mut x = seq.wrapping_mul(2_654_435_761);
    while f.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        f.push((x >> 16) as u8);
    }
    f
}

fn send_all(p: &mut AfPacketPort, frames: &[Vec<u8>]) {
    for chunk in frames.chunks(32) {
        let mut b = FrameBatch::new(chunk.len());
        for f in chunk {
            assert!(b.push(f));
        }
        assert_eq!(p.send(&b), chunk.len(), "the TX ring takes the batch");
    }
}

/// The test frames `p` receives until `want` arrived, or until its ring
/// is empty once `wait` has passed (`Duration::ZERO`: what the ring holds).
fn receive(p: &mut AfPacketPort, want: usize, wait: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut b = FrameBatch::new(64);
    let end = Instant::now() + wait;
    while got.len() < want {
        b.clear();
        if p.recv(&mut b) == 0 {
            if Instant::now() >= end {
                break;
            }
            p.wait(Duration::from_millis(5));
            continue;
        }
        for f in b.iter() {
            let et = |o: usize| u16::from_be_bytes([f[o], f[o + 1]]);
            let ours = f.len() >= 18
                && (et(12) == TEST_ETHERTYPE || (et(12) == 0x8100 && et(16) == TEST_ETHERTYPE));
            if ours {
                got.push(f.to_vec());
            }
        }
    }
    got
}

fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(x, y)| x != y);
        panic!(
            "{what}: {} bytes received, {} sent, first difference at {at:?}",
            got.len(),
            want.len()
        );
    }
}

/// `gso`: b's V2 socket has the virtio-net header, so a frame longer than
/// its slot is queued whole on the socket and arrives whole.
fn rings(test: &str, tag: &str, version: TpacketVersion, gso: bool) {
    if !can_run(test, &[]) {
        return;
    }
    let (_ns, [na, nb], [va, vb]) = link(tag);
    // b's ring is small: V2 with 2 KiB slots (64 in all), V3 with 8 KiB
    // blocks (8 in all; frames over ~8.1 KB arrive truncated)
    let small = match version {
        TpacketVersion::V2 => RingConfig {
            rx_block_size: 1 << 16,
            rx_blocks: 2,
            rx_frame_size: 2048,
            gso,
            ..RingConfig::with_version(version)
        },
        TpacketVersion::V3 => RingConfig {
            rx_block_size: 1 << 13,
            rx_blocks: 8,
            ..RingConfig::with_version(version)
        },
    };
    let big = match version {
        TpacketVersion::V2 => 4000,
        TpacketVersion::V3 => 8500,
    };
    // what b drops of the frames: the one too long for its slot, but with
    // the virtio-net header
    let truncated = u64::from(!gso);
    let mut a = netns::run_in(&na, || {
        AfPacketPort::open(&va, RingConfig::with_version(version))
    })
    .unwrap()
    .expect("open port a");
    let mut b = netns::run_in(&nb, || AfPacketPort::open(&vb, small))
        .unwrap()
        .expect("open port b");

    // small frames around one the slot cannot hold, and a tagged one
    let mut frames: Vec<Vec<u8>> = (0..5)
        .map(|i| frame(&a, &b, i, 100 + i as usize, None))
        .collect();
    frames.push(frame(&a, &b, 5, big, None));
    frames.extend((6..9).map(|i| frame(&a, &b, i, 1000, None)));
    frames.push(frame(&a, &b, 9, 200, Some((5 << 13) | 7)));
    send_all(&mut a, &frames);
    match version {
        TpacketVersion::V2 => {
            // the kernel has put all ten in the ring (one of them cut short)
            let bl = wait_for(STUCK, "ten frames in b's ring", || {
                let bl = b.rx_backlog().expect("V2 reports its backlog");
                if bl.frames >= 10 {
                    Ok(bl)
                } else {
                    Err(format!("{bl:?}"))
                }
            });
            let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum::<u64>() - 4;
            assert_eq!(bl.frames, 10, "{bl:?}");
            // wire lengths, the tag outside the frame as the kernel holds it
            assert_eq!(bl.bytes, bytes, "{bl:?}");
            // by class: the tag the kernel took out gives PCP 5 to its
            // frame (200 bytes, 196 without the tag); none is IP: DSCP 0
            let c = bl.classes.as_ref().expect("V2 classifies its backlog");
            assert_eq!(c.pcp[5], 196, "{:?}", c.pcp);
            assert_eq!(c.pcp.iter().sum::<u64>(), 196, "{:?}", c.pcp);
            assert_eq!((c.dscp[0], c.dscp.iter().sum::<u64>()), (bytes, bytes));
            let by = bl.by_priority(&nic::cc::Qos {
                trust: nic::cc::TrustMode::Pcp,
                ..Default::default()
            });
            assert_eq!(by[5], 196, "{by:?}");
            // asking again counts nothing twice
            assert_eq!(b.rx_backlog().unwrap(), bl);
        }
        TpacketVersion::V3 => assert!(b.rx_backlog().is_none()),
    }
    let mut got = Vec::new();
    if version == TpacketVersion::V2 {
        // four handed over: the backlog is the other six, the tagged one last
        let mut four = FrameBatch::new(4);
        assert_eq!(b.recv(&mut four), 4);
        got.extend(four.iter().map(|f| f.to_vec()));
        let bl = b.rx_backlog().unwrap();
        let rest: u64 = frames[4..].iter().map(|f| f.len() as u64).sum::<u64>() - 4;
        assert_eq!((bl.frames, bl.bytes), (6, rest), "{bl:?}");
        let c = bl.classes.as_ref().unwrap();
        assert_eq!((c.pcp[5], c.dscp[0]), (196, rest), "{bl:?}");
    }
    got.extend(receive(&mut b, 10 - truncated as usize - got.len(), STUCK));
    let want: Vec<&Vec<u8>> = frames.iter().filter(|f| gso || f.len() != big).collect();
    assert_eq!(got.len(), want.len(), "all but a truncated frame");
    for (g, w) in got.iter().zip(&want) {
        same(g, w, &format!("frame of {} bytes", w.len()));
    }
    assert_eq!(b.counters().rx_dropped, truncated, "the truncated frame");
    if version == TpacketVersion::V2 {
        let bl = b.rx_backlog().unwrap();
        assert_eq!((bl.frames, bl.bytes), (0, 0), "{bl:?}");
        let c = bl.classes.unwrap();
        assert_eq!(c.pcp.iter().chain(&c.dscp).sum::<u64>(), 0, "{c:?}");
    }

    // every slot went back: many times the ring's size, read as it comes
    let mut seq = 100;
    for round in 0..12 {
        let burst: Vec<Vec<u8>> = (0..40)
            .map(|i| frame(&a, &b, seq + i, 60 + (i as usize * 37) % 1400, None))
            .collect();
        seq += 40;
        send_all(&mut a, &burst);
        let got = receive(&mut b, burst.len(), STUCK);
        assert_eq!(got.len(), burst.len(), "round {round}");
        for (g, w) in got.iter().zip(&burst) {
            same(g, w, &format!("round {round}"));
        }
    }
    assert_eq!(b.counters().rx_dropped, truncated);

    // a burst the ring cannot hold: the kernel drops the rest, and says so.
    // Nothing is read until the kernel has dropped some (the ring is full),
    // then every frame is either received or counted as dropped.
    let burst: Vec<Vec<u8>> = (0..200)
        .map(|i| frame(&a, &b, seq + i, 1500, None))
        .collect();
    send_all(&mut a, &burst);
    wait_until(STUCK, "the kernel dropping frames on b's full ring", || {
        b.counters().rx_dropped > truncated
    });
    let mut got = Vec::new();
    let c = wait_for(
        STUCK,
        "every frame of the burst received or dropped",
        || {
            got.extend(receive(&mut b, burst.len() - got.len(), Duration::ZERO));
            let c = b.counters();
            if got.len() as u64 + c.rx_dropped - truncated >= burst.len() as u64 {
                Ok(c)
            } else {
                Err(format!("received {}, {c:?}", got.len()))
            }
        },
    );
    assert!(
        got.len() < burst.len(),
        "{} of {} fit",
        got.len(),
        burst.len()
    );
    assert_eq!(
        got.len() as u64 + c.rx_dropped - truncated,
        burst.len() as u64,
        "received {} + dropped {} (the kernel's count): {c:?}",
        got.len(),
        c.rx_dropped - truncated
    );
}

#[test]
fn afpacket_v2_ring_drops_truncated_frames_returns_slots_and_counts_backlog() {
    rings(
        "afpacket_v2_ring_drops_truncated_frames_returns_slots_and_counts_backlog",
        "r2",
        TpacketVersion::V2,
        false,
    );
}

#[test]
fn afpacket_v2_with_the_virtio_net_header_takes_a_frame_longer_than_a_slot_whole() {
    rings(
        "afpacket_v2_with_the_virtio_net_header_takes_a_frame_longer_than_a_slot_whole",
        "rg",
        TpacketVersion::V2,
        true,
    );
}

#[test]
fn afpacket_v3_ring_drops_truncated_frames_and_returns_blocks() {
    rings(
        "afpacket_v3_ring_drops_truncated_frames_and_returns_blocks",
        "r3",
        TpacketVersion::V3,
        false,
    );
}

/// `Port::link_up` reads SIOCGIFFLAGS in the port's own namespace (the
/// test thread is not in it): up with carrier; the peer down (no carrier,
/// IFF_RUNNING clear) or the interface itself down is a down link.
#[test]
fn afpacket_link_state_follows_the_interface_and_its_carrier() {
    let test = "afpacket_link_state_follows_the_interface_and_its_carrier";
    if !can_run(test, &[]) {
        return;
    }
    let (_ns, [na, nb], [va, vb]) = link("ls");
    let pa = netns::run_in(&na, || AfPacketPort::open(&va, RingConfig::default()))
        .unwrap()
        .expect("open port a");
    // carrier may take a moment after the veth pair comes up
    let wait_for = |want: bool, what: &str| {
        wait_until(STUCK, &format!("{what}: link_up {want:?}"), || {
            pa.link_up() == Some(want)
        })
    };
    wait_for(true, "both ends up");
    netns::exec(&nb, &["ip", "link", "set", &vb, "down"]).expect("peer down");
    wait_for(false, "the peer down (no carrier)");
    netns::exec(&nb, &["ip", "link", "set", &vb, "up"]).expect("peer up");
    wait_for(true, "the peer up again");
    netns::exec(&na, &["ip", "link", "set", &va, "down"]).expect("own end down");
    wait_for(false, "its own interface down");
    netns::exec(&na, &["ip", "link", "set", &va, "up"]).expect("own end up");
    wait_for(true, "its own interface up again");
}

/// With UDP GSO frames leave by sendmmsg from the batch: behind a device
/// that queues (a token bucket at 1 Mbit/s on a's veth), the send buffer
/// fills, the port then takes nothing (`tx_room` 0, `send` 0) and takes
/// frames again once the queue is gone.
#[test]
fn a_full_send_buffer_holds_frames_back_until_the_device_drains() {
    if !can_run(
        "a_full_send_buffer_holds_frames_back_until_the_device_drains",
        &[],
    ) || !nic::io::afpacket::gso_available()
    {
        return;
    }
    let (_ns, [na, _], [va, _]) = link("pq");
    let tbf = ["tc", "qdisc", "add", "dev", &va, "root", "tbf"];
    let slow = [
        &tbf[..],
        &["rate", "1mbit", "burst", "10kb", "limit", "100mb"],
    ]
    .concat();
    netns::exec(&na, &slow).expect("tc tbf");
    let cfg = RingConfig {
        gso: true,
        ..RingConfig::default()
    };
    let mut port = netns::run_in(&na, || AfPacketPort::open(&va, cfg))
        .unwrap()
        .expect("open port");
    assert!(port.gso());
    let mut batch = FrameBatch::new(16);
    for seq in 0..16 {
        batch.push(&frame(&port, &port, seq, 1400, None));
    }
    let mut sent = 0;
    wait_until(STUCK, "the send buffer filling", || {
        sent += port.send(&batch);
        port.tx_room(16) == 0
    });
    assert!(sent > 0, "frames went out before it filled");
    assert_eq!(port.send(&batch), 0, "a full port takes nothing");
    // the queue goes: the buffer drains and the port takes frames again
    netns::exec(&na, &["tc", "qdisc", "del", "dev", &va, "root"]).expect("tc del");
    wait_until(STUCK, "the port taking frames again", || {
        port.tx_room(16) == 16 && port.send(&batch) == 16
    });
}
