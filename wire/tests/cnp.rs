//! CNPs: the known-good CNP is produced exactly
//! from its repr and parses back.

use std::net::Ipv4Addr;
use wire::ethernet::{EthernetFrame, EthernetRepr};
use wire::{EthernetAddress, IpRepr, Ipv4Repr, Opcode, Psn, RoceRepr, UdpChecksum, UdpRepr};

const CNP_IP_TO_ICRC: &str =
    "4589003C98C64000201169271616160816161607DBAE12B7002800008100FFFF400000D200000000\
                              00000000000000000000000000000000DAFC1BEF";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn eth() -> EthernetRepr {
    EthernetRepr {
        dst: EthernetAddress([0x02, 0, 0, 0, 0, 0x07]),
        src: EthernetAddress([0x02, 0, 0, 0, 0, 0x08]),
        vlan: None,
        ethertype: 0,
    }
}

fn cnp_repr() -> RoceRepr<'static> {
    let ip = IpRepr::V4(Ipv4Repr {
        src: Ipv4Addr::new(22, 22, 22, 8),
        dst: Ipv4Addr::new(22, 22, 22, 7),
        dscp: 34,
        ecn: 1,
        ident: 0x98C6,
        dont_frag: true,
        ttl: 0x20,
    });
    RoceRepr::cnp(
        eth(),
        ip,
        UdpRepr {
            src_port: 0xDBAE,
            dst_port: 4791,
        },
        0xD2,
    )
}

#[test]
fn known_good_cnp_is_emitted_exactly() {
    let expected = unhex(CNP_IP_TO_ICRC);
    assert_eq!(expected.len(), 60);
    let r = cnp_repr();
    assert_eq!(r.udp_checksum, UdpChecksum::Zero);
    let mut buf = vec![0u8; r.buffer_len()];
    assert_eq!(r.emit(&mut buf).unwrap(), 74);
    let hdr = EthernetFrame::new_checked(&buf[..]).unwrap().header_len();
    assert_eq!(&buf[hdr..], &expected[..]);
}

#[test]
fn known_good_cnp_parses_back() {
    let mut frame = vec![0u8; 14];
    eth().emit(&mut frame);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame.extend(unhex(CNP_IP_TO_ICRC));
    let r = RoceRepr::parse(&frame).unwrap();
    assert_eq!(r.bth.opcode, Opcode::CNP);
    assert!(r.bth.becn && !r.bth.fecn);
    assert_eq!(r.bth.pkey, 0xFFFF);
    assert_eq!(r.bth.dest_qp, 0xD2);
    assert_eq!(r.bth.psn, Psn::new(0));
    assert!(r.payload.is_empty());
    assert_eq!(r, cnp_repr());
    // and a corrupted reserved byte is caught by the ICRC
    frame[14 + 40 + 3] ^= 1;
    assert!(matches!(
        RoceRepr::parse(&frame),
        Err(wire::Error::BadIcrc { .. })
    ));
}
