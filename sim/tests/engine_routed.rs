//! The engine under faults on a real, routed path.
//!
//! A ── veth ── R ── veth ── B, three namespaces made by the test. R routes
//! between 192.0.2.0/24 and 198.51.100.0/24 and drops 2 % of RoCEv2 frames
//! with nftables (`numgen random`); the engines' own impairment stage adds
//! reordering and duplication on both ends (there is no netem here). 10,000
//! mixed messages complete exactly once and in order with byte-exact data.
//! tcpdump in R (frames redirected to AF_XDP never reach a capture on the
//! receiving interface) records the traffic; the pcap tap of A's port
//! recorded the same run and must match it frame for frame, but for the
//! frames the kernel counted as dropped between the two; Wireshark's
//! judge must find nothing malformed in it.

mod enginecommon;

use enginecommon::{can_run, read, start_with, wait_for, Node, Routed, STUCK};
use nic::io::impair::{Impaired, Impairments, RandomImpairments};
use nic::io::pcap::{read_pcap, PcapTap};
use nic::io::Backend;
use nic::io::Port;
use nic::verbs::{Memory, RecvWr, SendOp, SendWr, Sgl, WcOpcode, WcStatus};
use sim::PairConfig;
use std::collections::VecDeque;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// tcpdump in a namespace; killed (and waited for) on drop.
struct Capture(Child, Option<std::thread::JoinHandle<String>>);

impl Capture {
    fn start(ns: &str, dev: &str, file: &Path) -> Capture {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "tcpdump", "-i", dev, "-w"])
            .arg(file)
            // a 256 MiB ring holds a whole run's frames even when tcpdump
            // gets no CPU for a while
            .args([
                "--immediate-mode",
                "-B",
                "262144",
                "-s",
                "0",
                "udp port 4791",
            ])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start tcpdump");
        // wait for "listening on" so no frame is missed
        let mut err = child.stderr.take().expect("piped");
        let mut buf = [0u8; 256];
        let mut seen = String::new();
        let t0 = Instant::now();
        while !seen.contains("listening on") {
            use std::io::Read;
            let n = err.read(&mut buf).unwrap_or(0);
            assert!(
                n > 0 || t0.elapsed() < STUCK,
                "tcpdump did not start: {seen}"
            );
            seen += &String::from_utf8_lossy(&buf[..n]);
        }
        let rest = std::thread::spawn(move || {
            let mut text = String::new();
            use std::io::Read;
            let _ = err.read_to_string(&mut text);
            text
        });
        Capture(child, Some(rest))
    }

    /// Stops tcpdump and returns how many frames its socket dropped (the
    /// kernel's count, from its closing statistics).
    fn stop(mut self) -> u64 {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let _ = self.0.wait();
        let text = self.1.take().expect("once").join().unwrap_or_default();
        let dropped = text
            .lines()
            .find_map(|l| l.strip_suffix(" packets dropped by kernel"))
            .and_then(|n| n.trim().parse().ok());
        dropped.unwrap_or_else(|| panic!("no drop count in tcpdump's statistics: {text}"))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Write,
    Read,
    Send,
    FetchAdd,
}

/// Posts `n` mixed messages from a to b, at most `window` in flight, and
/// checks every completion: exactly once, in order, data byte for byte.
fn mixed_traffic(a: &Node, b: &Node, n: u64, window: usize) {
    const SLOT: u64 = 8192;
    const SLOTS: u64 = 64;
    let mut inflight: VecDeque<(u64, Kind, u32)> = VecDeque::new();
    let mut recvs: VecDeque<(u64, u32)> = VecDeque::new();
    let mut model = 0u64;
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wcs = Vec::new();
    let t0 = Instant::now();
    let pattern = |i: u64, len: u32| {
        (0..len)
            .map(|j| (i as u32 * 31 + j) as u8)
            .collect::<Vec<u8>>()
    };
    while done < n || !recvs.is_empty() {
        while posted < n && inflight.len() < window {
            let slot = (posted % SLOTS) * SLOT;
            let len = (posted * 97 % 8000) as u32 + 1;
            let kind = [Kind::Write, Kind::Read, Kind::Send, Kind::FetchAdd][(posted % 4) as usize];
            let op = match kind {
                Kind::Write => {
                    a.mem.write(slot as usize, &pattern(posted, len));
                    SendOp::Write {
                        remote_addr: b.base + slot,
                        rkey: b.rkey,
                    }
                }
                Kind::Read => {
                    b.mem
                        .write((0x10_0000 + slot) as usize, &pattern(posted, len));
                    SendOp::Read {
                        remote_addr: b.base + 0x10_0000 + slot,
                        rkey: b.rkey,
                    }
                }
                Kind::Send => {
                    a.mem.write(slot as usize, &pattern(posted, len));
                    let r = RecvWr {
                        wr_id: posted,
                        sgl: Sgl::single(b.base + 0x20_0000 + slot, SLOT as u32, b.lkey),
                    };
                    b.dev.post_recv(b.qpn, r).unwrap();
                    recvs.push_back((posted, len));
                    SendOp::Send
                }
                Kind::FetchAdd => SendOp::FetchAdd {
                    remote_addr: b.base + 0x30_0000,
                    rkey: b.rkey,
                    add: posted,
                },
            };
            let local = match kind {
                Kind::Read => a.base + 0x10_0000 + slot,
                Kind::FetchAdd => a.base + 0x30_0000 + (posted % SLOTS) * 8,
                _ => a.base + slot,
            };
            let len = if matches!(kind, Kind::FetchAdd) {
                8
            } else {
                len
            };
            a.dev
                .post_send(
                    a.qpn,
                    SendWr::new(posted, op, Sgl::single(local, len, a.lkey)),
                )
                .unwrap();
            inflight.push_back((posted, kind, len));
            posted += 1;
        }
        wcs.clear();
        a.cq.poll(64, &mut wcs);
        for wc in &wcs {
            let (id, kind, len) = inflight
                .pop_front()
                .expect("a completion with nothing in flight");
            assert_eq!(
                (wc.wr_id, wc.status),
                (id, WcStatus::Success),
                "in order, exactly once, no error"
            );
            let slot = (id % SLOTS) * SLOT;
            match kind {
                Kind::Write => assert_eq!(
                    read(&b.mem, slot as usize, len as usize),
                    pattern(id, len),
                    "WRITE {id}"
                ),
                Kind::Read => assert_eq!(
                    read(&a.mem, (0x10_0000 + slot) as usize, len as usize),
                    pattern(id, len),
                    "READ {id}"
                ),
                Kind::FetchAdd => {
                    let got = u64::from_ne_bytes(
                        read(&a.mem, (0x30_0000 + slot / SLOT * 8) as usize, 8)
                            .try_into()
                            .unwrap(),
                    );
                    assert_eq!(
                        got, model,
                        "FETCH_ADD {id} returned the wrong original value"
                    );
                    model = model.wrapping_add(id);
                }
                Kind::Send => {}
            }
            done += 1;
        }
        wcs.clear();
        b.cq.poll(64, &mut wcs);
        for wc in &wcs {
            let (id, len) = recvs.pop_front().expect("a receive nobody posted");
            assert_eq!(
                (wc.wr_id, wc.opcode, wc.byte_len),
                (id, WcOpcode::Recv, len)
            );
            let slot = (id % SLOTS) * SLOT;
            assert_eq!(
                read(&b.mem, (0x20_0000 + slot) as usize, len as usize),
                pattern(id, len),
                "SEND {id}"
            );
        }
        if wcs.is_empty() {
            std::thread::yield_now();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "{done} of {n} messages after 240 s"
        );
    }
    assert_eq!(
        u64::from_ne_bytes(read(&b.mem, 0x30_0000, 8).try_into().unwrap()),
        model
    );
}

fn impaired<P: Port + 'static>(p: P, seed: u64) -> Box<dyn Port> {
    let imp = Impairments {
        reorder: 0.01,
        duplicate: 0.01,
        ..Default::default()
    };
    Box::new(Impaired::new(
        p,
        Box::new(RandomImpairments::new(imp, seed)),
    ))
}

#[test]
fn ten_thousand_messages_through_a_lossy_router_over_afpacket() {
    routed(
        "ten_thousand_messages_through_a_lossy_router_over_afpacket",
        Backend::AfPacket,
        0,
    );
}

#[test]
fn ten_thousand_messages_through_a_lossy_router_over_afxdp() {
    routed(
        "ten_thousand_messages_through_a_lossy_router_over_afxdp",
        Backend::AfXdp,
        1,
    );
}

fn routed(test: &str, backend: Backend, n: u32) {
    if !can_run(test, &["tcpdump", "nft"]) {
        return;
    }
    let net = Routed::new(&format!("r{n}"));
    // R sends A nothing of its own but ARP: no IPv6
    for k in ["all", "default", net.ra.as_str()] {
        let set = format!("net.ipv6.conf.{k}.disable_ipv6=1");
        testkit::netns::exec(&net.r, &["sysctl", "-qw", &set]).expect("sysctl");
    }
    // 2 % of the RoCEv2 frames the router forwards are dropped; R's egress
    // towards A counts what it sends there
    net.nft(&format!(
        "table inet rnic {{\n  chain forward_drop {{\n    type filter hook forward priority 0;\n    udp dport 4791 numgen random mod 100 < 2 counter drop\n  }}\n}}\n{}",
        ToA::rules(&net.ra)
    ));
    let (dump, tap) = (net.dir.join("router.pcap"), net.dir.join("tap.pcap"));
    let capture = Capture::start(&net.r, &net.ra, &dump);
    let drops_before = LinkDrops::read(&net);
    let (pa, mac_a) = net.open(0, backend);
    let (pb, mac_b) = net.open(1, backend);
    assert_ne!(mac_a, pb.mac(), "a's frames go to the router, not to b");
    let pa = PcapTap::new(pa, &tap).unwrap();
    let cfg = PairConfig {
        mtu: 4096,
        timeout: 12,
        retry_cnt: 7,
        unlimited_retries: true,
        ..PairConfig::default()
    };
    let nodes = start_with(
        vec![impaired(pa, 1), impaired(pb, 2)],
        net.gids(),
        vec![mac_a, mac_b],
        cfg,
    );
    mixed_traffic(&nodes[0], &nodes[1], 10_000, 32);
    let c = nodes[0].dev.counters().unwrap();
    eprintln!(
        "a: retransmitted {} seq NAKs {} timeouts {}",
        c.retransmitted_pkts, c.packet_seq_err, c.local_ack_timeout_err
    );
    assert!(
        c.retransmitted_pkts > 0,
        "2 % loss must have caused retransmissions"
    );
    // B (the responder) stops first; what it sent last still reaches A,
    // whose tap must see everything the router forwarded to it
    let mut nodes = nodes;
    let b = nodes.pop().expect("two nodes");
    b.engine.stop();
    // A's engine has read every frame R sent towards A (so its tap has
    // them), but those R's veth dropped and those A's port counted as
    // dropped: over AF_XDP the RoCEv2 frames (the rest go to the kernel),
    // over AF_PACKET all of them
    let port = wait_for(STUCK, "A's port took every frame R sent it", || {
        let out = ToA::read(&net);
        let lost = LinkDrops::read(&net).since(&drops_before).r_tx;
        let sent = match backend {
            Backend::AfXdp => out.roce,
            _ => out.frames,
        }
        .saturating_sub(lost);
        let p = nodes[0].dev.port_counters().unwrap();
        if p.rx_packets + p.rx_dropped >= sent {
            eprintln!("R sent A {sent} frames ({out:?}); A's port took {p:?}");
            Ok(p)
        } else {
            Err(format!(
                "R sent {sent} ({out:?}, {lost} dropped by its veth), A's port {p:?}"
            ))
        }
    });
    for n in nodes {
        n.engine.stop();
    }
    // tcpdump's socket can drop frames on a loaded machine (its buffer
    // filled while tcpdump was off the CPU); it says how many, and the
    // comparisons below allow exactly that many gaps in its capture
    let capture_dropped = capture.stop();
    if capture_dropped > 0 {
        eprintln!("tcpdump's socket dropped {capture_dropped} frames");
    }
    let lost = LinkDrops::read(&net).since(&drops_before);
    eprintln!(
        "kernel drops on the A link: {lost:?}; A's port dropped rx {} tx {}",
        port.rx_dropped, port.tx_dropped
    );

    // the tap (A's view) and tcpdump (the router's view of the A link) agree
    // frame for frame, but for frames the kernel counted as dropped between
    // the two capture points
    let tapped = read_pcap(&tap).unwrap();
    let dumped = read_pcap(&dump).unwrap();
    let roce = |f: &Vec<u8>| wire::RoceRepr::parse(f).is_ok();
    let (t, d): (Vec<_>, Vec<_>) = (
        tapped.iter().map(|x| &x.1).filter(|f| roce(f)).collect(),
        dumped.iter().map(|x| &x.1).filter(|f| roce(f)).collect(),
    );
    eprintln!("tap {} frames, tcpdump {} frames", t.len(), d.len());
    assert!(d.len() > 10_000);
    // A's MAC is the source of what it sent and the destination of what it got
    let mac_of_a = tapped
        .iter()
        .find(|x| roce(&x.1))
        .map(|x| x.1[6..12].to_vec())
        .unwrap();
    let pick = |v: &[&Vec<u8>], at: usize| -> Vec<Vec<u8>> {
        v.iter()
            .filter(|f| f[at..at + 6] == mac_of_a[..])
            .map(|f| (*f).clone())
            .collect()
    };
    // A → R: the tap records what A's port handed to the kernel; a frame
    // the veth could not queue to R (backlog full) is counted on A's veth
    same_frames(
        "sent by A",
        &pick(&t, 6),
        &pick(&d, 6),
        lost.a_tx,
        Uncaptured::Later(capture_dropped),
    );
    // R → A: tcpdump records what R sent; R's veth counts what it could not
    // queue to A, A's port what its receive ring had no room for
    same_frames(
        "received by A",
        &pick(&d, 0),
        &pick(&t, 0),
        lost.r_tx + port.rx_dropped,
        Uncaptured::Earlier(capture_dropped),
    );
    // Our own checker (`rnic pcap check --lossy`) accepts the router's
    // capture: the B→A frames nftables dropped never reach it, so gaps on
    // that side are counted losses; every other rule still applies.
    let verdict =
        conform::check_file(&dump, true).unwrap_or_else(|e| panic!("rnic pcap check --lossy: {e}"));
    eprintln!("rnic pcap check --lossy: {verdict}");
    if let Some(judge) =
        testkit::tshark_judge(&format!("{test}: tshark-judge of the router's capture"))
    {
        let out = Command::new(judge)
            .arg(&dump)
            .output()
            .expect("run tshark-judge");
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!("tshark-judge: {text}");
        assert!(out.status.success(), "tshark-judge: {text}");
    }
}

/// What R's egress towards A counted (nftables, netdev family): every
/// frame, and the RoCEv2 ones.
#[derive(Debug)]
struct ToA {
    frames: u64,
    roce: u64,
}

impl ToA {
    /// The table that counts on R's interface `ra`.
    fn rules(ra: &str) -> String {
        format!(
            "table netdev rnic_to_a {{\n  counter frames {{ }}\n  counter roce {{ }}\n  chain egress {{\n    type filter hook egress device \"{ra}\" priority 0;\n    counter name \"frames\"\n    udp dport 4791 counter name \"roce\"\n  }}\n}}\n"
        )
    }

    fn read(net: &Routed) -> ToA {
        let counter = |name: &str| -> u64 {
            let out = Command::new("ip")
                .args(["netns", "exec", &net.r, "nft", "list", "counter"])
                .args(["netdev", "rnic_to_a", name])
                .output()
                .expect("run ip netns exec nft");
            let text = String::from_utf8_lossy(&out.stdout);
            text.split_whitespace()
                .skip_while(|w| *w != "packets")
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("counter {name} in {}: {text:?}", net.r))
        };
        ToA {
            frames: counter("frames"),
            roce: counter("roce"),
        }
    }
}

/// Kernel drop counters of the two ends of the A ── R link.
#[derive(Debug, Default)]
struct LinkDrops {
    /// A's veth: frames it could not pass to R.
    a_tx: u64,
    /// R's veth towards A: frames it could not pass to A.
    r_tx: u64,
}

impl LinkDrops {
    fn read(net: &Routed) -> LinkDrops {
        let counter = |ns: &str, dev: &str| -> u64 {
            let out = Command::new("ip")
                .args(["netns", "exec", ns, "cat"])
                .arg(format!("/sys/class/net/{dev}/statistics/tx_dropped"))
                .output()
                .expect("run ip netns exec cat");
            let text = String::from_utf8_lossy(&out.stdout);
            text.trim()
                .parse()
                .unwrap_or_else(|e| panic!("tx_dropped of {dev} in {ns}: {e}: {text:?}"))
        };
        LinkDrops {
            a_tx: counter(&net.a, &net.va),
            r_tx: counter(&net.r, &net.ra),
        }
    }

    fn since(&self, before: &LinkDrops) -> LinkDrops {
        LinkDrops {
            a_tx: self.a_tx - before.a_tx,
            r_tx: self.r_tx - before.r_tx,
        }
    }
}

/// `seen` (the later capture point) is `sent` (the earlier one) with exactly
/// `dropped` frames missing and nothing else changed: same bytes, same
/// order. Reported by count and first difference (never by dumping frames).
/// Frames a capture missed by its own account (tcpdump's "dropped by
/// kernel"): in the later capture (`seen`) or in the earlier one (`sent`).
#[derive(Clone, Copy)]
enum Uncaptured {
    Later(u64),
    Earlier(u64),
}

/// `seen` is `sent` in order but for `dropped` frames the kernel counted as
/// dropped between the two capture points, give or take what a capture
/// missed by its own account.
fn same_frames(what: &str, sent: &[Vec<u8>], seen: &[Vec<u8>], dropped: u64, un: Uncaptured) {
    let show = |f: &Vec<u8>| {
        wire::RoceRepr::parse(f)
            .map(|r| r.to_string())
            .unwrap_or_else(|e| e.to_string())
    };
    let (later_lost, earlier_lost) = match un {
        Uncaptured::Later(n) => (n, 0),
        Uncaptured::Earlier(n) => (0, n),
    };
    // greedy matching decides whether `seen` is a subsequence of `sent`; a
    // frame the earlier capture missed is in `seen` only
    let (mut i, mut missing, mut extra) = (0usize, 0u64, 0u64);
    for (j, f) in seen.iter().enumerate() {
        match sent[i..].iter().position(|s| s == f) {
            Some(k) => {
                missing += k as u64;
                i += k + 1;
            }
            None => {
                extra += 1;
                assert!(
                    extra <= earlier_lost,
                    "{what}: frame {j} of the later capture ({}) is not in the earlier one \
                     in order ({} vs {} frames, {earlier_lost} uncaptured there)",
                    show(f),
                    sent.len(),
                    seen.len()
                );
            }
        }
    }
    missing += (sent.len() - i) as u64;
    assert!(
        missing + earlier_lost >= dropped && missing <= dropped + later_lost,
        "{what}: {} frames sent, {} seen: {missing} missing but {dropped} counted as dropped \
         ({later_lost} uncaptured)",
        sent.len(),
        seen.len()
    );
}

#[test]
fn same_frames_allows_only_what_a_capture_says_it_missed() {
    let f = |v: &[u8]| v.iter().map(|&b| vec![b]).collect::<Vec<_>>();
    let fails = |sent: &[u8], seen: &[u8], dropped, un| {
        let (sent, seen) = (f(sent), f(seen));
        std::panic::catch_unwind(|| same_frames("t", &sent, &seen, dropped, un)).is_err()
    };
    // the kernel's drops, exactly
    assert!(!fails(&[1, 2, 3], &[1, 3], 1, Uncaptured::Later(0)));
    assert!(fails(&[1, 2, 3], &[1], 1, Uncaptured::Later(0)));
    // the later capture missed one more by its own account
    assert!(!fails(&[1, 2, 3], &[1], 1, Uncaptured::Later(1)));
    assert!(fails(&[1, 2, 3, 4], &[1], 1, Uncaptured::Later(1)));
    // the earlier capture missed one the later one has
    assert!(!fails(&[1, 3], &[1, 2, 3], 0, Uncaptured::Earlier(1)));
    assert!(fails(&[1, 3], &[1, 2, 4, 3], 0, Uncaptured::Earlier(1)));
    // ... or one the kernel then dropped
    assert!(!fails(&[1, 3], &[1, 3], 1, Uncaptured::Earlier(1)));
    // out of order is never explained by a missed frame
    assert!(fails(&[1, 2, 3], &[2, 1, 3], 0, Uncaptured::Later(1)));
}
