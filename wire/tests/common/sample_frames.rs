//! A deterministic set of sample frames built with our own codec: at least
//! one frame of every opcode in the table, over IPv4 and IPv6, with and
//! without an 802.1Q tag, every AETH syndrome class (ACK, RNR NAK, each NAK
//! code), CNPs over both IP versions, a PFC frame and a legacy PAUSE frame.
//!
//! `tests/tshark.rs` writes them to `pcaps/wire-samples.pcap` and checks
//! Wireshark's decode against [`Sample::repr`]; other tests and tools can
//! reuse [`samples`] (typed) or [`sample_frames`] (bytes).
//!
//! Every field value is distinct per frame (derived from the frame number),
//! so a decoder that reads a field from the wrong offset, or the wrong
//! frame, shows up as a mismatch. Addresses are from the documentation
//! ranges: MACs 00:00:5e:00:53:xx (RFC 7042), 192.0.2.0/24 (RFC 5737),
//! 2001:db8::/32 (RFC 3849).

use std::net::{Ipv4Addr, Ipv6Addr};
use wire::ethernet::ethertype;
use wire::ext::{AtomicEth, Deth, Feth, Reth};
use wire::{
    udp, Aeth, BthRepr, EthernetAddress, EthernetRepr, ExtHeaders, Header, IpRepr, Ipv4Repr,
    Ipv6Repr, MacControl, MacControlRepr, NakCode, Opcode, OpcodeInfo, PayloadRule, Psn, RoceRepr,
    Syndrome, Transport, UdpChecksum, UdpRepr, VlanTag, ROCEV2_PORT,
};

/// What a sample frame is built from.
#[allow(clippy::large_enum_variant)] // a few dozen samples: size does not matter
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleRepr {
    Roce(RoceRepr<'static>),
    MacControl(MacControlRepr),
}

/// One sample: a short label (opcode, IP version, VLAN, syndrome) and the
/// repr that emits it.
#[derive(Clone, Debug)]
pub struct Sample {
    pub label: String,
    pub repr: SampleRepr,
}

impl Sample {
    /// The frame's bytes, emitted by our codec.
    pub fn frame(&self) -> Vec<u8> {
        match &self.repr {
            SampleRepr::Roce(r) => {
                let mut b = vec![0u8; r.buffer_len()];
                let n = r.emit(&mut b).expect("sample repr emits");
                b.truncate(n);
                b
            }
            SampleRepr::MacControl(m) => {
                let mut b = vec![0u8; m.buffer_len()];
                let n = m.emit(&mut b).expect("sample MAC control emits");
                b.truncate(n);
                b
            }
        }
    }
}

/// Label and bytes of every sample frame, in pcap order.
pub fn sample_frames() -> Vec<(String, Vec<u8>)> {
    samples()
        .into_iter()
        .map(|s| {
            let f = s.frame();
            (s.label, f)
        })
        .collect()
}

/// The host that sends requests (and receives responses).
pub const REQUESTER_MAC: EthernetAddress = EthernetAddress([0x00, 0x00, 0x5e, 0x00, 0x53, 0x0a]);
/// The host that sends responses.
pub const RESPONDER_MAC: EthernetAddress = EthernetAddress([0x00, 0x00, 0x5e, 0x00, 0x53, 0x14]);
pub const REQUESTER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
pub const RESPONDER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 20);
pub const REQUESTER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
pub const RESPONDER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x20);
/// RoCE traffic class commonly configured for lossless RoCE (DSCP 26, PCP 3).
pub const ROCE_DSCP: u8 = 26;
pub const ROCE_PCP: u8 = 3;
/// DSCP of CNPs (the value ConnectX and rxe configurations commonly use).
pub const CNP_DSCP: u8 = 48;

/// Payload bytes the data-carrying samples slice from: ASCII letters and
/// digits. Printable text keeps Wireshark's payload heuristics off our
/// frames: binary bytes can look like a Mellanox EoIB header to them.
static PAYLOAD: [u8; 256] = payload_bytes();

const fn payload_bytes() -> [u8; 256] {
    const ALPHABET: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut b = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        // stride 7 is prime to 62: a 62-byte period, no short repeats
        b[i] = ALPHABET[(i * 7) % 62];
        i += 1;
    }
    b
}

/// Every AETH syndrome class the RC_ACKNOWLEDGE samples cover.
pub fn ack_syndromes() -> [Syndrome; 7] {
    [
        Syndrome::Ack { credits: 0x0B },
        Syndrome::RnrNak { timer: 14 },
        Syndrome::Nak(NakCode::PsnSequenceError),
        Syndrome::Nak(NakCode::InvalidRequest),
        Syndrome::Nak(NakCode::RemoteAccessError),
        Syndrome::Nak(NakCode::RemoteOperationalError),
        Syndrome::Nak(NakCode::InvalidRdRequest),
    ]
}

/// The link shape of one sample.
#[derive(Clone, Copy, Debug)]
struct Shape {
    v6: bool,
    vlan: bool,
}

impl Shape {
    fn label(self) -> &'static str {
        match (self.v6, self.vlan) {
            (false, false) => "v4",
            (false, true) => "v4 vlan",
            (true, false) => "v6",
            (true, true) => "v6 vlan",
        }
    }
    fn opposite(self) -> Shape {
        Shape {
            v6: !self.v6,
            vlan: !self.vlan,
        }
    }
}

/// Ethernet, IP and UDP of a RoCEv2 frame numbered `n` (1-based frame
/// number in the pcap), from the requester or from the responder.
fn l2_l4(
    n: u32,
    shape: Shape,
    response: bool,
    local_qpn: u32,
    remote_qpn: u32,
) -> (EthernetRepr, IpRepr, UdpRepr) {
    let (smac, dmac) = if response {
        (RESPONDER_MAC, REQUESTER_MAC)
    } else {
        (REQUESTER_MAC, RESPONDER_MAC)
    };
    let eth = EthernetRepr {
        dst: dmac,
        src: smac,
        vlan: shape.vlan.then_some(VlanTag {
            pcp: ROCE_PCP,
            dei: false,
            vid: 100 + (n as u16 % 8),
        }),
        ethertype: if shape.v6 {
            ethertype::IPV6
        } else {
            ethertype::IPV4
        },
    };
    // Linux: with no flow label configured, the flow label is derived from
    // the two QPNs and the UDP source port from the flow label.
    let flow_label = udp::rdma_flow_label(local_qpn, remote_qpn);
    let ip = if shape.v6 {
        let (src, dst) = if response {
            (RESPONDER_V6, REQUESTER_V6)
        } else {
            (REQUESTER_V6, RESPONDER_V6)
        };
        IpRepr::V6(Ipv6Repr {
            src,
            dst,
            dscp: ROCE_DSCP,
            ecn: 2, // ECT(0)
            flow_label,
            hop_limit: 64,
        })
    } else {
        let (src, dst) = if response {
            (RESPONDER_V4, REQUESTER_V4)
        } else {
            (REQUESTER_V4, RESPONDER_V4)
        };
        IpRepr::V4(Ipv4Repr {
            src,
            dst,
            dscp: ROCE_DSCP,
            ecn: 2,
            ident: 0x4000 + n as u16,
            dont_frag: true,
            ttl: 64,
        })
    };
    let udp = UdpRepr {
        src_port: udp::rdma_udp_sport(flow_label, local_qpn, remote_qpn),
        dst_port: ROCEV2_PORT,
    };
    (eth, ip, udp)
}

/// Distinct field values for frame number `n`.
fn psn(n: u32) -> Psn {
    // Spread over the whole 24-bit space, including values above 2^23.
    Psn::new(0x0F_0000u32.wrapping_mul(n) ^ (0x1234 + n))
}
fn dest_qp(n: u32) -> u32 {
    (0x00_0100 + n * 0x0_3517) & 0xFF_FFFF
}
fn va(n: u32) -> u64 {
    0x0000_7F3A_1C00_0000 + (n as u64) * 0x0001_0203_0400
}
fn rkey(n: u32) -> u32 {
    0x1A2B_0000 | (n * 0x101)
}
fn msn(n: u32) -> u32 {
    (0x80_0000 | (n * 0x0123)) & 0xFF_FFFF
}

fn roce_sample(n: u32, info: &'static OpcodeInfo, shape: Shape, syndrome: Syndrome) -> Sample {
    let response = info.is_response();
    let dqp = dest_qp(n);
    let local_qpn = 0x00_0011 + n;
    let (eth, ip, udp_repr) = l2_l4(n, shape, response, local_qpn, dqp);
    let mut bth = BthRepr::new(Opcode(info.opcode), dqp, psn(n));
    // A realistic mix of flags: ACK requested on the last packet of a
    // request, SE on every other send that ends a message, a non-default
    // P_Key on every fifth frame.
    bth.ack_req = info.is_request() && info.position.is_end();
    bth.solicited = info.position.is_end() && info.operation == wire::Operation::Send && n % 2 == 1;
    if n % 5 == 4 {
        bth.pkey = 0x8001 + n as u16;
    }

    let payload_len = match info.payload {
        PayloadRule::None => 0,
        PayloadRule::Exactly(k) => k as usize,
        // 16..=63 bytes: pad counts 0..3 all occur. (At least 16: Wireshark
        // 4.0's RPC-over-RDMA heuristic threw on 1- and 8-byte payloads of
        // SEND_LAST_WITH_INVALIDATE; see pcaps/README.md.)
        PayloadRule::Any => 16 + (n as usize * 7) % 48,
    };
    let off = (n as usize * 13) % (PAYLOAD.len() - 64);
    let payload: &'static [u8] = &PAYLOAD[off..off + payload_len];
    // Canonical repr: what parsing the emitted frame gives back.
    bth.pad = wire::pad_for(payload_len);

    let mut ext = ExtHeaders::default();
    for h in info.headers.iter() {
        match h {
            Header::Deth => {
                ext.deth = Some(Deth {
                    qkey: 0x1111_0000 | (n * 0x11),
                    src_qp: 0x00_0A00 + n * 0x21,
                })
            }
            Header::Feth => {
                ext.feth = Some(Feth {
                    selectivity: 1,    // memory region range
                    placement_type: 1, // global visibility
                })
            }
            Header::Reth => {
                let dma_len = match (info.operation, info.position) {
                    (wire::Operation::Write, wire::Position::First) => {
                        payload_len as u32 * 3 + 8192
                    }
                    (wire::Operation::Write, _) => payload_len as u32,
                    (wire::Operation::AtomicWrite, _) => 8,
                    _ => 0x0001_0000 + n * 0x40,
                };
                ext.reth = Some(Reth {
                    va: va(n),
                    rkey: rkey(n),
                    dma_len,
                })
            }
            Header::AtomicEth => {
                ext.atomic = Some(AtomicEth {
                    va: va(n) & !7,
                    rkey: rkey(n),
                    swap_add: 0xFEDC_BA98_7654_3210 ^ n as u64,
                    compare: 0x0123_4567_89AB_CDEF ^ ((n as u64) << 32),
                })
            }
            Header::Aeth => {
                ext.aeth = Some(Aeth {
                    syndrome,
                    msn: msn(n),
                })
            }
            Header::AtomicAckEth => ext.atomic_ack = Some(0x8877_6655_4433_2211 ^ n as u64),
            Header::ImmDt => ext.imm = Some(0xDEAD_0000 | n),
            Header::Ieth => ext.ieth = Some(0x4E00_0000 | (n * 0x1001)),
            Header::CnpReserved => {}
        }
    }

    let mut repr = RoceRepr {
        eth,
        ip,
        udp: udp_repr,
        udp_checksum: UdpChecksum::default_for(&ip),
        bth,
        ext,
        payload,
        trailer_len: 0,
    };
    // Frames shorter than the Ethernet minimum are padded after the IP
    // datagram, as a NIC does on the wire.
    let len = repr.buffer_len();
    if len < wire::ethernet::MIN_FRAME_LEN {
        repr.trailer_len = wire::ethernet::MIN_FRAME_LEN - len;
    }
    let mut label = format!("{} {}", info.name, shape.label());
    if info.headers.contains(Header::Aeth) {
        label.push_str(&format!(" {syndrome}"));
    }
    Sample {
        label,
        repr: SampleRepr::Roce(repr),
    }
}

fn cnp_sample(n: u32, shape: Shape) -> Sample {
    let dqp = dest_qp(n);
    // The notification point sends the CNP back to the data sender.
    let (eth, mut ip, udp_repr) = l2_l4(n, shape, true, 0x00_0011 + n, dqp);
    match &mut ip {
        IpRepr::V4(r) => r.dscp = CNP_DSCP,
        IpRepr::V6(r) => r.dscp = CNP_DSCP,
    }
    ip.set_ecn(1); // ECT(1), as ConnectX sends CNPs
    let mut repr = RoceRepr::cnp(eth, ip, udp_repr, dqp);
    assert_eq!(repr.udp_checksum, UdpChecksum::default_for(&ip));
    let len = repr.buffer_len();
    if len < wire::ethernet::MIN_FRAME_LEN {
        repr.trailer_len = wire::ethernet::MIN_FRAME_LEN - len;
    }
    Sample {
        label: format!("CNP {}", shape.label()),
        repr: SampleRepr::Roce(repr),
    }
}

/// Every sample, in pcap order (frame number = index + 1).
pub fn samples() -> Vec<Sample> {
    let mut out: Vec<Sample> = Vec::new();
    let next = |out: &Vec<Sample>| out.len() as u32 + 1;
    for (i, info) in Opcode::all().enumerate() {
        if info.transport == Transport::Cnp {
            continue; // below, built by RoceRepr::cnp
        }
        // Each opcode twice: once on one shape, once on the opposite IP
        // version and VLAN state, cycling through all four shapes.
        let first = Shape {
            v6: i % 2 == 1,
            vlan: (i / 2) % 2 == 1,
        };
        if info.opcode == Opcode::RC_ACKNOWLEDGE.0 {
            // One ACK per syndrome class, every shape in turn.
            for (k, s) in ack_syndromes().into_iter().enumerate() {
                let shape = Shape {
                    v6: k % 2 == 1,
                    vlan: (k / 2) % 2 == 1,
                };
                out.push(roce_sample(next(&out), info, shape, s));
            }
            continue;
        }
        // Other AETH carriers acknowledge with credits; the second one
        // says "no end-to-end credits" (0x1F).
        for (k, shape) in [first, first.opposite()].into_iter().enumerate() {
            let syndrome = Syndrome::Ack {
                credits: if k == 0 {
                    0x05
                } else {
                    Syndrome::UNLIMITED_CREDITS
                },
            };
            out.push(roce_sample(next(&out), info, shape, syndrome));
        }
    }
    for shape in [
        Shape {
            v6: false,
            vlan: false,
        },
        Shape {
            v6: true,
            vlan: true,
        },
    ] {
        out.push(cnp_sample(next(&out), shape));
    }
    out.push(Sample {
        label: "PFC".into(),
        repr: SampleRepr::MacControl(MacControlRepr::pfc(
            RESPONDER_MAC,
            // Priorities 0, 3, 5 and 7 paused or resumed; 3 resumes (0 quanta).
            0b1010_1001,
            [0xFFFF, 0, 0, 0x0000, 0, 0x1234, 0, 0x00C8],
        )),
    });
    out.push(Sample {
        label: "PAUSE".into(),
        repr: SampleRepr::MacControl(MacControlRepr {
            src: REQUESTER_MAC,
            dst: EthernetAddress::MAC_CONTROL,
            control: MacControl::Pause { quanta: 0x0200 },
        }),
    });
    out
}
