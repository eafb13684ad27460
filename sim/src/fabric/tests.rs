//! The fabric's unit tests: frame sizes, RED, a flow alone, determinism.

use super::*;

#[test]
fn frame_sizes_are_what_the_wire_crate_emits() {
    assert_eq!((DATA_OVERHEAD, CNP_FRAME, PFC_FRAME), (62, 78, 64));
    // a CNP as the codec builds it, plus the FCS
    let cnp = wire::RoceRepr::cnp(
        wire::EthernetRepr {
            dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src: EthernetAddress([2, 0, 0, 0, 0, 1]),
            vlan: None,
            ethertype: 0,
        },
        wire::IpRepr::V4(wire::Ipv4Repr {
            src: [10, 0, 0, 1].into(),
            dst: [10, 0, 0, 2].into(),
            dscp: 48,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
        }),
        wire::UdpRepr {
            src_port: 0xC000,
            dst_port: wire::ROCEV2_PORT,
        },
        0x11,
    );
    assert_eq!(cnp.buffer_len() as u64 + FCS_LEN as u64, CNP_FRAME);
}

#[test]
fn red_probability() {
    let r = Red::sigcomm15();
    assert_eq!(r.probability(0), 0.0);
    assert_eq!(r.probability(5_000), 0.0);
    assert!((r.probability(102_500) - 0.005).abs() < 1e-12);
    assert_eq!(r.probability(200_000), 1.0);
}

#[test]
fn one_flow_alone_runs_at_line_rate_without_queue() {
    let cfg = FabricConfig::new(2);
    let mut f = Fabric::new(cfg, &[FlowSpec::endless(0, 1, Instant::ZERO)]);
    f.run_until(Instant::from_nanos(1_000_000));
    let goodput = f.delivered(0) as f64 * 8.0 / 1e-3;
    assert!(goodput > 0.99 * cfg.link_goodput_bps(), "{goodput}");
    assert!(f.max_queue_bytes(1) <= 2 * (1024 + DATA_OVERHEAD));
    assert_eq!((f.drops(), f.ce_marked()), (0, 0));
    assert!(!f.reaction_point(0).is_limited());
}

#[test]
fn finite_flow_and_determinism() {
    let cfg = FabricConfig {
        sample_every: Duration::ZERO,
        ..FabricConfig::new(3)
    };
    let flows = [
        FlowSpec {
            bytes: 1_000_000,
            ..FlowSpec::endless(0, 2, Instant::ZERO)
        },
        FlowSpec::endless(1, 2, Instant::from_nanos(10_000)),
    ];
    let run = || {
        let mut f = Fabric::new(cfg, &flows);
        f.run_until(Instant::from_nanos(2_000_000));
        (
            f.delivered(0),
            f.delivered(1),
            f.ce_marked(),
            f.max_queue_bytes(2),
        )
    };
    let a = run();
    assert_eq!(a.0, 1_000_000);
    assert!(a.2 > 0);
    assert_eq!(a, run());
}
