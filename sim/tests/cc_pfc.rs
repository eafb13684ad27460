//! PFC on the virtual clock.
//!
//! - A host of the fabric simulator (`sim::fabric`) sends on priority 3 and
//!   priority 5; PFC frames arrive at chosen instants. A paused priority
//!   starts nothing for exactly quanta × 512 bit times, the other keeps
//!   sending back to back, quanta 0 resumes at once, a refresh extends, and
//!   the `rx_prio{p}_pause*` counters add up.
//! - The PFC frames we emit (the switch model's generation from its ingress
//!   backlog, and `PfcTx` naming several priorities in one frame) decode in
//!   tshark as 802.1Qbb PFC (MAC control opcode 0x0101, "Class Based Flow
//!   Control") with the right class-enable vector and pause times, and
//!   nothing malformed. Without tshark: SKIPPED, or a failure under `CI`.

use nic::cc::{PfcRx, PfcTx, PfcTxParams};
use nic::Instant;
use sim::fabric::{Fabric, FabricConfig, FlowSpec, FrameKind, SwitchConfig, SwitchPfc, TxRecord};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use wire::mac_control::pause_duration_ns;
use wire::{EthernetAddress, MacControl, MacControlRepr};

const G40: u64 = 40_000_000_000;

fn us(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000)
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

#[test]
fn pause_time_is_quanta_times_512_bit_times_at_the_link_speed() {
    for (link, quanta, ns) in [
        (10_000_000_000u64, 1u16, 52u64), // 51.2 ns, rounded up
        (25_000_000_000, 0xFFFF, 1_342_157),
        (40_000_000_000, 10_000, 128_000),
        (100_000_000_000, 0xFFFF, 335_540),
    ] {
        assert_eq!(pause_duration_ns(quanta, link), ns);
        let mut rx = PfcRx::new(link);
        let t = Instant::from_nanos(123_456);
        rx.handle(t, &pfc(1 << 4, &[(4, quanta)]));
        let until = Instant::from_nanos(123_456 + ns);
        assert_eq!(rx.paused_until(4, t), Some(until));
        assert!(rx.is_paused(4, Instant::from_nanos(until.as_nanos() - 1)));
        assert!(!rx.is_paused(4, until));
        assert_eq!(rx.paused_mask(t), 1 << 4);
    }
}

/// Starts of frames of priority `prio` in the log.
fn starts(log: &[TxRecord], prio: u8) -> Vec<&TxRecord> {
    log.iter()
        .filter(|r| r.prio == prio && matches!(r.kind, FrameKind::Data { .. }))
        .collect()
}

fn first_start_at_or_after(log: &[TxRecord], prio: u8, t: Instant) -> Instant {
    starts(log, prio)
        .into_iter()
        .map(|r| r.at)
        .find(|&a| a >= t)
        .expect("the priority sends again")
}

#[track_caller]
fn assert_silent(log: &[TxRecord], prio: u8, from: Instant, to: Instant) {
    for r in starts(log, prio) {
        assert!(
            r.at < from || r.at >= to,
            "priority {prio} started a frame at {:?} during its pause [{from:?}, {to:?})",
            r.at
        );
    }
}

#[test]
fn paused_priority_is_silent_for_exactly_the_pause_others_keep_sending() {
    // Host 0 sends to host 1: flow 0 on DSCP 26 (priority 3), endless;
    // flow 1 on DSCP 40 (priority 5), 100 packets from 110 µs. No DCQCN,
    // no congestion: the switch just forwards.
    let cfg = FabricConfig {
        dcqcn: None,
        trace_tx: true,
        sample_every: Duration::ZERO,
        ..FabricConfig::new(2)
    };
    let flows = [
        FlowSpec::endless(0, 1, Instant::ZERO),
        FlowSpec {
            bytes: 100 * cfg.payload_bytes,
            dscp: Some(40),
            ..FlowSpec::endless(0, 1, us(110))
        },
    ];
    let mut f = Fabric::new(cfg, &flows);
    let d10k = Duration::from_nanos(pause_duration_ns(10_000, G40)); // 128 µs
    assert_eq!(d10k, Duration::from_micros(128));

    // 1. XOFF for priority 3 at 100 µs, 10000 quanta: silent until 228 µs.
    let t0 = us(100);
    f.inject_mac_control(t0, 0, pfc(1 << 3, &[(3, 10_000)]));
    // 2. XOFF for 0xFFFF quanta at 300 µs, resumed by quanta 0 at 400 µs.
    f.inject_mac_control(us(300), 0, pfc(1 << 3, &[(3, 0xFFFF)]));
    f.inject_mac_control(us(400), 0, pfc(1 << 3, &[(3, 0)]));
    // 3. XOFF at 500 µs, refreshed at 564 µs: silent until 564 + 128 µs.
    f.inject_mac_control(us(500), 0, pfc(1 << 3, &[(3, 10_000)]));
    f.inject_mac_control(us(564), 0, pfc(1 << 3, &[(3, 10_000)]));
    // 4. A frame naming priority 5 only (priority 3's time is ignored).
    f.inject_mac_control(us(800), 0, pfc(1 << 5, &[(3, 0xFFFF), (5, 10_000)]));
    f.run_until(us(1_000));
    let log = f.tx_log();

    // 1: nothing of priority 3 starts in [t0, t0 + 128 µs); it starts
    // again exactly at the end (the link is idle by then).
    assert!(
        starts(log, 3).iter().any(|r| r.at < t0 && r.until > t0),
        "a frame in flight at t0 finishes"
    );
    assert_silent(log, 3, t0, t0 + d10k);
    assert_eq!(first_start_at_or_after(log, 3, t0), t0 + d10k);
    // Priority 5 kept the link busy meanwhile, back to back.
    let p5 = starts(log, 5);
    assert_eq!(p5.len(), 100);
    assert!(p5.iter().all(|r| r.at >= us(110) && r.until <= t0 + d10k));
    for w in p5.windows(2) {
        assert_eq!(
            w[1].at, w[0].until,
            "priority 5 sends back to back during the pause"
        );
    }
    // 2: quanta 0 resumes at once.
    assert_silent(log, 3, us(300), us(400));
    assert_eq!(first_start_at_or_after(log, 3, us(300)), us(400));
    // 3: the refresh extends the pause to 564 + 128 = 692 µs.
    assert_silent(log, 3, us(500), us(692));
    assert_eq!(first_start_at_or_after(log, 3, us(500)), us(692));
    // 4: priority 3 keeps going while priority 5 is paused.
    assert!(starts(log, 3).iter().filter(|r| r.at >= us(800)).count() > 100);

    // Counters: five frames named priority 3, one priority 5; paused for
    // 128 + 100 + 192 µs and 128 µs.
    let c = f.host_counters(0);
    assert_eq!(c.get("rx_prio3_pause"), Some(5));
    assert_eq!(c.get("rx_prio3_pause_duration"), Some(128 + 100 + 192));
    assert_eq!(c.get("rx_prio5_pause"), Some(1));
    assert_eq!(c.get("rx_prio5_pause_duration"), Some(128));
    assert_eq!(c.get("rx_prio0_pause"), Some(0));
    // Nothing is lost by pausing.
    assert_eq!(f.drops(), 0);
    assert_eq!(f.delivered(1), 100 * cfg.payload_bytes);
}

// ---------------------------------------------------------------------------
// tshark

/// The PFC frames we emit: what the switch model generates when two
/// senders overrun it without DCQCN (pause, refresh, resume on priority
/// 3), and `PfcTx` frames naming several priorities at once.
fn emitted_frames() -> Vec<(Instant, MacControlRepr)> {
    let cfg = FabricConfig {
        dcqcn: None,
        sample_every: Duration::ZERO,
        switch: SwitchConfig {
            pfc: Some(SwitchPfc {
                xoff_bytes: 300_000,
                xon_bytes: 250_000,
                quanta: 0xFFFF,
            }),
            ..FabricConfig::new(3).switch
        },
        ..FabricConfig::new(3)
    };
    let flows = [
        FlowSpec::endless(0, 2, Instant::ZERO),
        FlowSpec::endless(1, 2, us(50)),
    ];
    let mut f = Fabric::new(cfg, &flows);
    f.run_until(us(3_000));
    let mut out: Vec<(Instant, MacControlRepr)> =
        f.emitted_pfc().iter().map(|&(t, _, r)| (t, r)).collect();
    assert!(
        out.len() >= 10,
        "the switch paused its senders: {}",
        out.len()
    );
    let mut seen_xoff = false;
    let mut seen_xon = false;
    for (_, r) in &out {
        let MacControl::Pfc {
            class_enable,
            quanta,
        } = r.control
        else {
            panic!("not PFC")
        };
        assert_eq!(class_enable, 1 << 3);
        seen_xoff |= quanta[3] == 0xFFFF;
        seen_xon |= quanta[3] == 0;
    }
    assert!(seen_xoff && seen_xon);

    // Several priorities in one frame, then a resume of one of them.
    let src = EthernetAddress([0x02, 0, 0, 0, 0, 0x42]);
    let mut tx = PfcTx::new(PfcTxParams {
        quanta: 0x1234,
        ..PfcTxParams::new(G40, 100_000, 50_000)
    });
    let t = out.last().unwrap().0;
    tx.on_backlog(3, 150_000);
    tx.on_backlog(5, 100_000);
    tx.on_backlog(7, 120_000);
    let mut at = t + Duration::from_micros(10);
    let m = tx.poll_transmit(at).unwrap();
    assert_eq!(
        m,
        pfc(0b1010_1000, &[(3, 0x1234), (5, 0x1234), (7, 0x1234)])
    );
    out.push((
        at,
        MacControlRepr::pfc(src, 0b1010_1000, [0, 0, 0, 0x1234, 0, 0x1234, 0, 0x1234]),
    ));
    tx.on_backlog(5, 10_000);
    at = at + Duration::from_micros(10);
    let m = tx.poll_transmit(at).unwrap();
    assert_eq!(m, pfc(1 << 5, &[]));
    out.push((
        at,
        MacControlRepr {
            src,
            dst: EthernetAddress::MAC_CONTROL,
            control: m,
        },
    ));
    at = at + Duration::from_micros(400); // past half of 0x1234 quanta at 40 G
    let m = tx.poll_transmit(at).unwrap();
    assert_eq!(m, pfc(0b1000_1000, &[(3, 0x1234), (7, 0x1234)]));
    out.push((
        at,
        MacControlRepr {
            src,
            dst: EthernetAddress::MAC_CONTROL,
            control: m,
        },
    ));
    out
}

fn write_pcap(path: &Path, frames: &[(Instant, MacControlRepr)]) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        endianness: pcap_file::Endianness::Little,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
    let epoch = Duration::from_secs(1_700_000_000);
    for (t, r) in frames {
        let mut buf = [0u8; 60];
        assert_eq!(r.emit(&mut buf).unwrap(), 60);
        assert_eq!(MacControlRepr::parse(&buf).unwrap(), *r);
        let ts = epoch + Duration::from_nanos(t.as_nanos());
        w.write_packet(&PcapPacket::new(ts, 60, &buf)).unwrap();
    }
    std::fs::write(path, w.into_writer()).unwrap();
}

#[test]
fn emitted_pfc_frames_decode_in_tshark_as_802_1qbb() {
    let frames = emitted_frames();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pfc-emitted.pcap");
    write_pcap(&path, &frames);
    if !testkit::tshark_runs("emitted_pfc_frames_decode_in_tshark_as_802_1qbb") {
        return;
    }
    let mut fields = vec![
        "frame.protocols",
        "_ws.col.Info",
        "eth.dst",
        "eth.type",
        "macc.opcode",
        "macc.cbfc.enbv",
    ];
    let times: Vec<String> = (0..8)
        .map(|p| format!("macc.cbfc.pause_time.c{p}"))
        .collect();
    fields.extend(times.iter().map(String::as_str));
    fields.push("_ws.malformed");
    fields.push("_ws.expert");
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(&path).args([
        "-T",
        "fields",
        "-E",
        "separator=\t",
        "-E",
        "occurrence=a",
    ]);
    for f in &fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), frames.len(), "one line per frame:\n{text}");
    for (k, (row, (_, r))) in rows.iter().zip(&frames).enumerate() {
        let MacControl::Pfc {
            class_enable,
            quanta,
        } = r.control
        else {
            unreachable!()
        };
        let ctx = format!("frame {}: {row:?}", k + 1);
        assert_eq!(row.len(), fields.len(), "{ctx}");
        assert_eq!(row[0], "eth:ethertype:macc", "{ctx}");
        assert_eq!(row[1], "Class Based Flow Control [CBFC] Pause", "{ctx}");
        assert_eq!(row[2], "01:80:c2:00:00:01", "{ctx}");
        assert_eq!(row[3], "0x8808", "{ctx}");
        assert_eq!(row[4], "0x0101", "{ctx}");
        assert_eq!(row[5], format!("0x{class_enable:04x}"), "{ctx}");
        for p in 0..8 {
            assert_eq!(row[6 + p], quanta[p].to_string(), "{ctx}: C{p}");
        }
        assert_eq!(row[14], "", "{ctx}: malformed");
        assert_eq!(row[15], "", "{ctx}: expert info");
    }
    println!(
        "tshark decoded {} PFC frames from {}",
        rows.len(),
        path.display()
    );
}
