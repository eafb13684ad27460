//! Acceptance 1 of the engine issue over AF_PACKET: two engines in two
//! network namespaces joined by a veth pair exchange every RC verb and a UD
//! SEND; the data is checked byte for byte. The test makes its own
//! namespaces (addresses only inside them) and removes them even when it
//! fails.

mod enginecommon;

use enginecommon::{can_run, every_verb, start};
use nic::io::afpacket::{AfPacketPort, RingConfig};
use nic::io::netns::{self, Namespaces};
use nic::io::Port;
use nic::sim::PairConfig;

#[test]
fn every_rc_verb_and_ud_send_over_afpacket_between_namespaces() {
    if !can_run(
        "every_rc_verb_and_ud_send_over_afpacket_between_namespaces",
        &[],
    ) {
        return;
    }
    let id = std::process::id() % 100_000;
    let (na, nb) = (netns::ns_name("pa"), netns::ns_name("pb"));
    let _ns = Namespaces::create(&[na.clone(), nb.clone()]).expect("create namespaces");
    let (va, vb) = (format!("rva{id}"), format!("rvb{id}"));
    netns::veth(&na, &va, "192.0.2.1/24", &nb, &vb, "192.0.2.2/24", 9000).expect("veth pair");
    let pa = netns::run_in(&na, || AfPacketPort::open(&va, RingConfig::default()))
        .unwrap()
        .expect("open port a");
    let pb = netns::run_in(&nb, || AfPacketPort::open(&vb, RingConfig::default()))
        .unwrap()
        .expect("open port b");
    assert_eq!(pa.mtu(), 9000);
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
    for n in nodes {
        n.engine.stop();
    }
}
