//! The engine over AF_XDP: two engines in two
//! network namespaces joined by a veth pair (MTU 9000, IB MTU 4096, so
//! every full-size frame spans two UMEM frames) exchange every RC verb and
//! a UD SEND; the data is checked byte for byte. Once in the mode the port
//! picks by itself (native XDP on veth) and once in generic (SKB) mode.
//! While the XDP program is attached, ping between the namespaces still
//! works (it passes everything that is not RoCEv2 or PFC); after the ports
//! are dropped no program is left on the interfaces. A third test checks
//! that `open_port` falls back to AF_PACKET when AF_XDP cannot be had, and
//! that on a veth it opens AF_PACKET with UDP GSO first; UDP GSO
//! super-frames to an AF_XDP peer arrive segmented and are taken.
//! Further: the same exchange over IPv6 GIDs (AF_XDP and AF_PACKET, next
//! hop by NDP), the RX ring's backlog by DSCP for PFC generation, and PFC
//! generation end to end (a stalled receiver pauses the sender).
//!
//! The tests make their own namespaces (addresses only inside them) and
//! remove them even when they fail. Without the XDP program (no clang at
//! build time) the AF_XDP tests print SKIPPED — and fail under CI=true.

mod enginecommon;

use enginecommon::{every_verb, start, wait_for, wait_until, STUCK};
use nic::io::afxdp::{AfXdpConfig, AfXdpPort, AttachMode};
use nic::io::Port;
use nic::io::{open_port, open_port_with, Backend, Gso, OpenOptions};
use sim::PairConfig;
use std::process::Command;
use testkit::netns::{self, Namespaces};

/// Namespaces need root; CI runs as root and must not skip.
fn can_run(test: &str) -> bool {
    testkit::runs_here(test, netns::available())
}

/// Two namespaces joined by a veth pair at MTU 9000: (namespaces, names, interfaces).
fn link(tag: &str) -> (Namespaces, [String; 2], [String; 2]) {
    let id = std::process::id() % 100_000;
    let names = [
        netns::ns_name(&format!("{tag}a")),
        netns::ns_name(&format!("{tag}b")),
    ];
    let ns = Namespaces::create(&names).expect("create namespaces");
    let ifs = [format!("r{tag}a{id}"), format!("r{tag}b{id}")];
    netns::veth(
        &names[0],
        &ifs[0],
        "192.0.2.1/24",
        &names[1],
        &ifs[1],
        "192.0.2.2/24",
        9000,
    )
    .expect("veth pair");
    (ns, names, ifs)
}

/// Opens an AF_XDP port in namespace `ns`; None (after a loud SKIPPED
/// line) where this build or kernel has no AF_XDP — a failure under CI.
fn open_xdp(test: &str, ns: &str, ifname: &str, cfg: AfXdpConfig) -> Option<AfXdpPort> {
    match netns::run_in(ns, || AfXdpPort::open(ifname, cfg)).expect("enter the namespace") {
        Ok(p) => Some(p),
        Err(e) if e.is_unavailable() => {
            testkit::skip_or_fail(
                test,
                &format!("{e} (.ci/run installs clang and linux-libc-dev)"),
            );
            None
        }
        Err(e) => panic!("{test}: AF_XDP port on {ifname}: {e}"),
    }
}

/// A veth pair between two namespaces with an AF_XDP port (default
/// settings) on each end; None after a SKIPPED line where AF_XDP is missing.
fn xdp_pair(test: &str, tag: &str) -> Option<(Namespaces, AfXdpPort, AfXdpPort)> {
    let (ns, [na, nb], [va, vb]) = link(tag);
    let pa = open_xdp(test, &na, &va, AfXdpConfig::default())?;
    let pb = open_xdp(test, &nb, &vb, AfXdpConfig::default()).expect("the second port opens");
    Some((ns, pa, pb))
}

/// ICMP echo from namespace `ns` to `addr`; Err when `ping` is missing.
fn ping(ns: &str, addr: &str) -> Result<bool, testkit::Missing> {
    if Command::new("ping").arg("-V").output().is_err() {
        return Err(testkit::Missing::new(
            "`ping` is not installed (Debian: iputils-ping)",
        ));
    }
    // ARP goes first; a few tries keep a slow first resolution from failing the check
    Ok((0..3).any(|_| {
        Command::new("ip")
            .args(["netns", "exec", ns, "ping", "-c1", "-W1", addr])
            .output()
            .is_ok_and(|o| o.status.success())
    }))
}

/// `ip link show` of `dev` in `ns`: what XDP program, if any, is attached.
fn link_show(ns: &str, dev: &str) -> String {
    let out = Command::new("ip")
        .args(["-n", ns, "link", "show", "dev", dev])
        .output()
        .expect("run ip");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn exchange(test: &str, tag: &str, mode: Option<AttachMode>) {
    if !can_run(test) {
        return;
    }
    let (_ns, [na, nb], [va, vb]) = link(tag);
    let cfg = AfXdpConfig {
        mode,
        ..AfXdpConfig::default()
    };
    let Some(pa) = open_xdp(test, &na, &va, cfg) else {
        return;
    };
    let pb = open_xdp(test, &nb, &vb, cfg).expect("the second port opens where the first did");
    eprintln!("{test}: {va}: {}; {vb}: {}", pa.binding(), pb.binding());
    assert!(
        pa.binding().multi_buffer,
        "MTU 9000 needs multi-buffer: {}",
        pa.binding()
    );
    if let Some(m) = mode {
        assert_eq!((pa.binding().attach, pb.binding().attach), (m, m));
    }
    assert_eq!(pa.mtu(), 9000);
    assert!(
        link_show(&na, &va).contains("xdp"),
        "no XDP program on {va}: {}",
        link_show(&na, &va)
    );

    let nodes = start(
        vec![Box::new(pa), Box::new(pb)],
        PairConfig {
            mtu: 4096,
            timeout: 14,
            ..PairConfig::default()
        },
    );
    every_verb(&nodes[0], &nodes[1]);
    // the kernel still gets what is not RoCEv2: ARP and ICMP both ways
    for (from, to) in [(&na, "192.0.2.2"), (&nb, "192.0.2.1")] {
        match ping(from, to) {
            Ok(ok) => assert!(
                ok,
                "{test}: ping {from} → {to} failed with the XDP program attached"
            ),
            Err(why) => testkit::skip_or_fail(&format!("the ping check of {test}"), &why),
        }
    }

    for n in &nodes {
        let pc = n.dev.port_counters().unwrap();
        assert!(pc.tx_packets >= 50 && pc.rx_packets >= 50, "{pc:?}");
        assert_eq!((pc.rx_dropped, pc.tx_dropped), (0, 0), "{pc:?}");
    }
    for n in nodes {
        n.engine.stop();
    }
    // the ports are gone with their engines: so are the programs (the
    // kernel may finish releasing the BPF link a moment after the close)
    for (ns, dev) in [(&na, &va), (&nb, &vb)] {
        wait_for(STUCK, &format!("no XDP program on {dev}"), || {
            let shown = link_show(ns, dev);
            if shown.contains("xdp") {
                Err(shown)
            } else {
                Ok(())
            }
        });
    }
}

#[test]
fn every_rc_verb_and_ud_send_over_afxdp_between_namespaces() {
    exchange(
        "every_rc_verb_and_ud_send_over_afxdp_between_namespaces",
        "x",
        None,
    );
}

#[test]
fn every_rc_verb_and_ud_send_over_afxdp_in_generic_mode() {
    exchange(
        "every_rc_verb_and_ud_send_over_afxdp_in_generic_mode",
        "g",
        Some(AttachMode::Generic),
    );
}

#[test]
fn open_port_falls_back_to_afpacket_when_afxdp_cannot_be_had() {
    let test = "open_port_falls_back_to_afpacket_when_afxdp_cannot_be_had";
    if !can_run(test) {
        return;
    }
    let (_ns, [na, _], [va, _]) = link("f");
    netns::run_in(&na, || {
        // a port already holds the interface's XDP hook: a second AF_XDP
        // port cannot attach; without AF_XDP at all the fallback is direct
        let first = AfXdpPort::open(&va, AfXdpConfig::default());
        if let Err(e) = &first {
            assert!(e.is_unavailable(), "{e}");
            testkit::skip_or_fail(&format!("{test}: the busy-hook part"), &e.to_string());
        }
        // without UDP GSO, which on a veth would pick AF_PACKET first
        let off = OpenOptions { gso: Gso::Off };
        let (port, backend) = open_port_with(&va, Backend::Auto, off).expect("AF_PACKET opens");
        assert_eq!(backend, Backend::AfPacket);
        assert_eq!(port.mtu(), 9000);
        if first.is_ok() {
            let err = open_port(&va, Backend::AfXdp)
                .err()
                .expect("the hook is taken");
            assert!(err.to_string().contains("BPF_LINK_CREATE"), "{err}");
        }
    })
    .expect("enter the namespace");
}

/// On a veth, `Backend::Auto` opens AF_PACKET with UDP GSO where the
/// kernel has it (AF_XDP runs in copy mode there).
#[test]
fn auto_opens_afpacket_with_gso_on_a_veth() {
    if !can_run("auto_opens_afpacket_with_gso_on_a_veth") {
        return;
    }
    let (_ns, [na, _], [va, _]) = link("u");
    let gso = nic::io::afpacket::gso_available();
    netns::run_in(&na, || {
        let (_, backend) = open_port(&va, Backend::Auto).expect("a port opens");
        if gso {
            assert_eq!(backend, Backend::AfPacket);
        }
        assert_eq!(nic::io::gso_wanted(&va, OpenOptions::default()), gso);
        assert!(!nic::io::gso_wanted(&va, OpenOptions { gso: Gso::Off }));
        assert!(
            !nic::io::gso_wanted("lo", OpenOptions::default()),
            "not a veth"
        );
    })
    .expect("enter the namespace");
}

/// Super-frames from an AF_PACKET port to a veth whose peer runs XDP: the
/// kernel segments them (the qdisc layer, not the bypass, which would drop
/// them) and leaves each segment's UDP checksum unfinished, which the
/// AF_XDP receiver takes as none.
#[test]
fn gso_trains_reach_an_afxdp_peer_segmented() {
    let test = "gso_trains_reach_an_afxdp_peer_segmented";
    if !can_run(test) {
        return;
    }
    if !nic::io::afpacket::gso_available() {
        testkit::skip_or_fail(
            test,
            "this kernel's packet sockets have no UDP GSO (Linux 6.2)",
        );
        return;
    }
    let (_ns, [na, nb], [va, vb]) = link("g");
    let Some(pb) = open_xdp(test, &nb, &vb, AfXdpConfig::default()) else {
        return;
    };
    let cfg = nic::io::afpacket::RingConfig {
        gso: true,
        ..Default::default()
    };
    let pa = netns::run_in(&na, || nic::io::afpacket::AfPacketPort::open(&va, cfg))
        .expect("enter the namespace")
        .expect("AF_PACKET port");
    assert!(pa.gso());
    let cfg = PairConfig {
        mtu: 4096,
        timeout: 14,
        ..PairConfig::default()
    };
    let nodes = start(vec![Box::new(pa), Box::new(pb)], cfg);
    every_verb(&nodes[0], &nodes[1]);
    let pc = nodes[1].dev.port_counters().unwrap();
    assert_eq!(pc.rx_dropped, 0, "{pc:?}");
    let c = nodes[0].dev.counters().unwrap();
    assert_eq!(c.retransmitted_pkts, 0, "nothing was lost: {c:?}");
    for n in nodes {
        n.engine.stop();
    }
}

/// A RoCEv2 RDMA WRITE ONLY frame of `payload` bytes with IPv4 DSCP `dscp`.
fn write_frame(
    src: wire::EthernetAddress,
    dst: wire::EthernetAddress,
    dscp: u8,
    payload: usize,
) -> Vec<u8> {
    use wire::*;
    let data = vec![0xA5u8; payload];
    let mut bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, 0x11, Psn::new(1));
    bth.ack_req = true;
    let repr = RoceRepr {
        eth: EthernetRepr {
            dst,
            src,
            vlan: None,
            ethertype: ethernet::ethertype::IPV4,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: [192, 0, 2, 1].into(),
            dst: [192, 0, 2, 2].into(),
            dscp,
            ecn: 2,
            ident: 1,
            dont_frag: true,
            ttl: 64,
        }),
        udp: UdpRepr {
            src_port: 0xC000,
            dst_port: ROCEV2_PORT,
        },
        udp_checksum: UdpChecksum::Zero,
        bth,
        ext: ExtHeaders {
            reth: Some(Reth {
                va: 0x1000,
                rkey: 0x1234,
                dma_len: payload as u32,
            }),
            ..ExtHeaders::default()
        },
        payload: &data,
        trailer_len: 0,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf).expect("the frame emits");
    buf.truncate(n);
    buf
}

/// `p`'s RX backlog once it holds at least `frames` frames.
fn backlog_of(p: &AfXdpPort, frames: u64) -> nic::io::RxBacklog {
    wait_for(STUCK, &format!("{frames} frames in the RX ring"), || {
        let b = p.rx_backlog().expect("AF_XDP knows its backlog");
        if b.frames >= frames {
            Ok(b)
        } else {
            Err(format!("{b:?}"))
        }
    })
}

/// PFC generation watches the receive ring by priority: the frames waiting
/// in an AF_XDP port's RX ring are counted by their DSCP (read in place in
/// the UMEM, a frame over two descriptors counted once with all its bytes)
/// and mapped to priorities through the device's DSCP table.
#[test]
fn the_afxdp_rx_backlog_counts_waiting_frames_by_dscp() {
    let test = "the_afxdp_rx_backlog_counts_waiting_frames_by_dscp";
    if !can_run(test) {
        return;
    }
    let Some((_ns, mut pa, pb)) = xdp_pair(test, "q") else {
        return;
    };
    // (DSCP, frames, payload): the 6000-byte ones span two UMEM frames
    let plan = [(26u8, 5usize, 1000usize), (46, 3, 200), (0, 2, 6000)];
    let mut batch = nic::io::FrameBatch::new(16);
    let mut want_dscp = [0u64; 64];
    let (mut frames, mut bytes) = (0u64, 0u64);
    for &(dscp, n, len) in &plan {
        for _ in 0..n {
            let f = write_frame(pa.mac(), pb.mac(), dscp, len);
            want_dscp[dscp as usize] += f.len() as u64;
            bytes += f.len() as u64;
            frames += 1;
            assert!(batch.push(&f));
        }
    }
    assert_eq!(pa.send(&batch), batch.len(), "{:?}", pa.counters());
    // nobody receives on pb: its RX ring holds them all
    let b = backlog_of(&pb, frames);
    assert_eq!((b.frames, b.bytes), (frames, bytes), "{b:?}");
    let c = b
        .classes
        .as_ref()
        .expect("classes from the frames' headers");
    for d in [0usize, 26, 46] {
        assert_eq!(c.dscp[d], want_dscp[d], "DSCP {d}");
    }
    assert_eq!(c.dscp.iter().sum::<u64>(), bytes);
    assert_eq!(c.pcp.iter().sum::<u64>(), 0, "untagged frames have no PCP");
    // default QoS (trust DSCP, DSCP >> 3): 26 → 3, 46 → 5, 0 → 0
    let by = b.by_priority(&nic::cc::Qos::default());
    assert_eq!(
        (by[3], by[5], by[0]),
        (want_dscp[26], want_dscp[46], want_dscp[0]),
        "{by:?}"
    );

    // past BACKLOG_CLASSIFIED frames the rest is apportioned: 600 more
    // DSCP 46 frames, all still waiting
    let extra = 600u64;
    let f = write_frame(pa.mac(), pb.mac(), 46, 200);
    let mut sent = 0u64;
    wait_for(STUCK, &format!("{extra} more frames sent"), || {
        let mut batch = nic::io::FrameBatch::new(16);
        while (batch.len() as u64) < (extra - sent).min(16) {
            batch.push(&f);
        }
        sent += pa.send(&batch) as u64;
        if sent >= extra {
            Ok(())
        } else {
            Err(format!("{sent} sent"))
        }
    });
    assert_eq!(sent, extra);
    let (frames, bytes) = (frames + extra, bytes + extra * f.len() as u64);
    let b = backlog_of(&pb, frames);
    assert!(frames > nic::io::afxdp::BACKLOG_CLASSIFIED);
    assert_eq!((b.frames, b.bytes), (frames, bytes), "{b:?}");
    let c = b.classes.as_ref().expect("classes");
    let total: u64 = c.dscp.iter().sum();
    assert!(
        total <= bytes && bytes - total < 64,
        "apportioned classes sum to {total} of {bytes}"
    );
    // the classified 512 are the 10 of the plan and 502 of DSCP 46: the
    // rest goes mostly to DSCP 46, and nothing to a class never seen
    assert!(
        c.dscp[46] > c.dscp[26] && c.dscp[46] > c.dscp[0],
        "{:?}",
        &c.dscp[..]
    );
    assert_eq!(total, c.dscp[0] + c.dscp[26] + c.dscp[46]);
}

/// PFC generation end to end on real ports: the in-memory scenario
/// (`enginecommon::pfc_stalled_receiver`: the receiver held while a window
/// of WRITEs fills its AF_XDP RX ring, then XOFF before anything else, the
/// sender silent until XON, data intact, counters agreeing) over a veth
/// pair — the PFC frames (MAC control, 01:80:C2:00:00:01) cross the veth and
/// reach the sender's socket through its XDP program. Both ports report
/// 10 Mb/s, so a pause lasts 3.4 s: ordering only, no timing.
#[test]
fn a_stalled_receiver_pauses_the_sender_with_pfc_over_afxdp() {
    let test = "a_stalled_receiver_pauses_the_sender_with_pfc_over_afxdp";
    if !can_run(test) {
        return;
    }
    let Some((_ns, mut pa, mut pb)) = xdp_pair(test, "p") else {
        return;
    };
    pa.set_link_speed(10_000_000);
    pb.set_link_speed(10_000_000);
    enginecommon::pfc_stalled_receiver(Box::new(pa), Box::new(pb));
}

/// RoCEv2 over IPv6 on real ports, over AF_XDP and over AF_PACKET: the
/// GIDs are the interfaces' IPv6 addresses (not IPv4-mapped), so every
/// frame is Ethernet / IPv6 / UDP 4791; the next hop's MAC comes from the
/// kernel's neighbour table (NDP, which the XDP program leaves to the
/// kernel). Every RC verb and a UD SEND, data checked byte for byte.
#[test]
fn every_rc_verb_and_ud_send_over_ipv6() {
    let test = "every_rc_verb_and_ud_send_over_ipv6";
    if !can_run(test) {
        return;
    }
    for (tag, backend) in [("6x", Backend::AfXdp), ("6p", Backend::AfPacket)] {
        let (_ns, [na, nb], [va, vb]) = link(tag);
        let addrs = ["fd00:6::1", "fd00:6::2"];
        for (ns, dev, a) in [(&na, &va, addrs[0]), (&nb, &vb, addrs[1])] {
            let ok = |args: &[&str]| {
                let o = Command::new("ip").args(args).output().expect("run ip");
                assert!(
                    o.status.success(),
                    "ip {args:?}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            };
            ok(&[
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=0",
            ]);
            ok(&[
                "netns",
                "exec",
                ns,
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{dev}.disable_ipv6=0"),
            ]);
            // no duplicate address detection: the address is usable at once
            ok(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{a}/64"),
                "dev",
                dev,
                "nodad",
            ]);
        }
        let ip6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap();
        let mut ports: Vec<Box<dyn Port>> = Vec::new();
        let mut dmacs = Vec::new();
        for (ns, dev, peer) in [(&na, &va, addrs[1]), (&nb, &vb, addrs[0])] {
            let opened = netns::run_in(ns, || {
                let (p, got) = match open_port(dev, backend) {
                    Ok(x) => x,
                    Err(nic::io::OpenError::AfXdp(e)) if e.is_unavailable() => {
                        testkit::skip_or_fail(&format!("{test} over {backend:?}"), &e.to_string());
                        return None;
                    }
                    Err(e) => panic!("{test}: {backend:?} on {dev}: {e}"),
                };
                assert_eq!(got, backend);
                let (_, mac) = nic::io::addr::next_hop_mac(std::net::IpAddr::V6(ip6(peer)), STUCK)
                    .expect("the neighbour over NDP");
                Some((p, mac))
            })
            .expect("enter the namespace");
            let Some((p, mac)) = opened else {
                return;
            };
            ports.push(p);
            dmacs.push(mac);
        }
        // A's port recorded, to see what went on the wire
        let pcap =
            std::env::temp_dir().join(format!("softrnic-{test}-{tag}-{}.pcap", std::process::id()));
        let a = ports.remove(0);
        ports.insert(
            0,
            Box::new(nic::io::pcap::PcapTap::new(a, &pcap).expect("pcap tap")),
        );
        let gids = vec![
            wire::Gid::from_ipv6(ip6(addrs[0])),
            wire::Gid::from_ipv6(ip6(addrs[1])),
        ];
        let nodes = enginecommon::start_with(
            ports,
            gids,
            dmacs,
            PairConfig {
                mtu: 4096,
                timeout: 14,
                ..PairConfig::default()
            },
        );
        every_verb(&nodes[0], &nodes[1]);
        for n in &nodes {
            let pc = n.dev.port_counters().unwrap();
            assert!(
                pc.tx_packets >= 50 && pc.rx_packets >= 50,
                "{backend:?}: {pc:?}"
            );
        }
        for n in nodes {
            n.engine.stop();
        }
        let frames = nic::io::pcap::read_pcap(&pcap).expect("the tap's pcap");
        let _ = std::fs::remove_file(&pcap);
        let roce: Vec<_> = frames
            .iter()
            .filter_map(|(_, f)| wire::RoceRepr::parse(f).ok())
            .collect();
        assert!(roce.len() >= 100, "{backend:?}: {} RoCE frames", roce.len());
        assert!(
            roce.iter().all(|r| matches!(r.ip, wire::IpRepr::V6(_))),
            "{backend:?}: a RoCE frame not over IPv6"
        );
    }
}

/// `Port::link_up` of an AF_XDP port: SIOCGIFFLAGS through the port's
/// AF_INET socket in the interface's namespace (the test thread is not in
/// it); the peer down takes the carrier away.
#[test]
fn afxdp_link_state_follows_the_carrier() {
    let test = "afxdp_link_state_follows_the_carrier";
    if !can_run(test) {
        return;
    }
    let (_ns, [na, nb], [va, vb]) = link("xl");
    let Some(pa) = open_xdp(test, &na, &va, AfXdpConfig::default()) else {
        return;
    };
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
}

/// A port is up while its link has carrier: attaching an XDP program
/// (this port's or the peer's) leaves the carrier on, though the kernel's
/// operational state (IFF_RUNNING) blinks meanwhile. Both ports are
/// sampled from the moment each is open until half a second after the
/// second opened, the window in which the blink shows.
#[test]
fn afxdp_link_stays_up_while_the_ports_attach_their_programs() {
    let test = "afxdp_link_stays_up_while_the_ports_attach_their_programs";
    if !can_run(test) {
        return;
    }
    let (_ns, [na, nb], [va, vb]) = link("xa");
    let Some(pa) = open_xdp(test, &na, &va, AfXdpConfig::default()) else {
        return;
    };
    let peer = std::thread::spawn(move || {
        netns::run_in(&nb, || AfXdpPort::open(&vb, AfXdpConfig::default()))
            .expect("enter the namespace")
            .expect("the peer's port opens")
    });
    let (mut downs, mut samples) = (0u32, 0u32);
    let mut sample = |p: &AfXdpPort| {
        samples += 1;
        downs += u32::from(p.link_up() != Some(true));
    };
    while !peer.is_finished() {
        sample(&pa);
    }
    let pb = peer.join().expect("the peer's thread");
    let opened = std::time::Instant::now();
    while opened.elapsed() < std::time::Duration::from_millis(500) {
        sample(&pa);
        sample(&pb);
        std::thread::yield_now();
    }
    assert_eq!(downs, 0, "{downs} of {samples} samples saw a link down");
}
