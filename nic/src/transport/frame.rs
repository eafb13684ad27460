//! Building a frame with its payload written in place: `RoceRepr::emit`
//! copies the payload from a slice, so a payload gathered from registered
//! memory would be copied twice (memory → staging buffer → frame). Here the
//! caller's `fill` writes the payload straight into the frame, and the
//! headers, pad, ICRC and UDP checksum are written around it exactly as
//! `RoceRepr::emit` writes them (the tests below hold the two to the same
//! bytes).

use wire::ethernet::ethertype;
use wire::{bth, icrc, pad_for, udp, IpRepr, RoceRepr, UdpChecksum};

/// Zeros standing in for the payload while the repr is validated and
/// measured (only the payload's length matters to either).
static ZEROS: [u8; 4096] = [0; 4096];

/// The longest payload `emit_with` takes (the largest path MTU).
pub(crate) const MAX_PAYLOAD: usize = ZEROS.len();

/// Writes the frame `repr` describes into `buf`, with a payload of
/// `payload_len` bytes written by `fill` into its place in the frame
/// (`repr.payload` is ignored). `fill` runs before anything else is
/// written; its error is returned as is. `Ok(None)`: the repr is not valid
/// or `buf` is too small (as `RoceRepr::emit` fails).
pub(crate) fn emit_with<E>(
    repr: &RoceRepr<'_>,
    payload_len: usize,
    buf: &mut [u8],
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Option<usize>, E> {
    if payload_len > MAX_PAYLOAD {
        return Ok(None);
    }
    let repr = RoceRepr {
        payload: &ZEROS[..payload_len],
        ..*repr
    };
    let Ok(info) = repr.validate() else {
        return Ok(None);
    };
    // the layout `RoceRepr::buffer_len` and `ip_len` describe
    let pad = pad_for(payload_len);
    let ip_at = repr.eth.header_len();
    let udp_at = ip_at + repr.ip.header_len();
    let bth_at = udp_at + udp::HEADER_LEN;
    let ext_at = bth_at + bth::HEADER_LEN;
    let payload_at = ext_at + info.ext_len();
    let pad_at = payload_at + payload_len;
    let icrc_at = pad_at + pad as usize;
    let udp_len = icrc_at + icrc::ICRC_LEN - udp_at;
    let total = icrc_at + icrc::ICRC_LEN + repr.trailer_len;
    debug_assert_eq!(total, repr.buffer_len());
    if buf.len() < total {
        return Ok(None);
    }
    let buf = &mut buf[..total];
    fill(&mut buf[payload_at..pad_at])?;
    let eth = wire::EthernetRepr {
        ethertype: match repr.ip {
            IpRepr::V4(_) => ethertype::IPV4,
            IpRepr::V6(_) => ethertype::IPV6,
        },
        ..repr.eth
    };
    eth.emit(buf);
    match &repr.ip {
        IpRepr::V4(r) => r.emit(&mut buf[ip_at..], udp_len),
        IpRepr::V6(r) => r.emit(&mut buf[ip_at..], udp_len),
    }
    repr.udp.emit(&mut buf[udp_at..], udp_len - udp::HEADER_LEN);
    wire::BthRepr { pad, ..repr.bth }.emit(&mut buf[bth_at..]);
    repr.ext.emit(info, &mut buf[ext_at..]);
    buf[pad_at..icrc_at].fill(0);
    let crc = icrc::compute(repr.ip.version(), &buf[ip_at..icrc_at]);
    icrc::write(&mut buf[icrc_at..], crc);
    if repr.udp_checksum == UdpChecksum::Computed {
        let end = icrc_at + icrc::ICRC_LEN;
        let c = match &repr.ip {
            IpRepr::V4(r) => udp::checksum_ipv4(r.src, r.dst, &buf[udp_at..end]),
            IpRepr::V6(r) => udp::checksum_ipv6(r.src, r.dst, &buf[udp_at..end]),
        };
        // the checksum field: bytes 6 and 7 of the UDP header
        buf[udp_at + 6..udp_at + 8].copy_from_slice(&c.to_be_bytes());
    }
    buf[icrc_at + icrc::ICRC_LEN..].fill(0);
    Ok(Some(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{
        Aeth, AtomicEth, BthRepr, Deth, EthernetAddress, EthernetRepr, ExtHeaders, Ipv4Repr,
        Ipv6Repr, Opcode, Psn, Reth, Syndrome, UdpRepr, VlanTag,
    };

    fn ips() -> [IpRepr; 2] {
        [
            IpRepr::V4(Ipv4Repr {
                src: "192.0.2.1".parse().unwrap(),
                dst: "192.0.2.2".parse().unwrap(),
                dscp: 26,
                ecn: 2,
                ident: 0x1234,
                dont_frag: true,
                ttl: 64,
            }),
            IpRepr::V6(Ipv6Repr {
                src: "2001:db8::1".parse().unwrap(),
                dst: "2001:db8::2".parse().unwrap(),
                dscp: 26,
                ecn: 2,
                flow_label: 0x1_2345,
                hop_limit: 64,
            }),
        ]
    }

    /// Every request and response shape the transport sends, over IPv4 and
    /// IPv6, with and without a VLAN tag and a UDP checksum, at payload
    /// lengths around the pad and the MTU: the same bytes as
    /// `RoceRepr::emit`, and the same failures.
    #[test]
    fn same_frames_as_roce_repr_emit() {
        let payload: Vec<u8> = (0..MAX_PAYLOAD as u32)
            .map(|i| ((i * 31) ^ 0x5A) as u8)
            .collect();
        let reth = Reth {
            va: 0x1000_2000_3000,
            rkey: 0xABCD,
            dma_len: 70000,
        };
        let aeth = Aeth {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 77,
        };
        let exts: [(Opcode, ExtHeaders); 8] = [
            (
                Opcode(0x0A),
                ExtHeaders {
                    reth: Some(reth),
                    ..Default::default()
                },
            ),
            (
                Opcode(0x06),
                ExtHeaders {
                    reth: Some(reth),
                    ..Default::default()
                },
            ),
            (Opcode(0x07), ExtHeaders::default()),
            (
                Opcode(0x09),
                ExtHeaders {
                    imm: Some(0xDEAD_BEEF),
                    ..Default::default()
                },
            ),
            (Opcode(0x04), ExtHeaders::default()),
            (
                Opcode::RC_ACKNOWLEDGE,
                ExtHeaders {
                    aeth: Some(aeth),
                    ..Default::default()
                },
            ),
            (
                Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                ExtHeaders {
                    aeth: Some(aeth),
                    ..Default::default()
                },
            ),
            (
                Opcode::UD_SEND_ONLY,
                ExtHeaders {
                    deth: Some(Deth {
                        qkey: 0x1111_1111,
                        src_qp: 0x12,
                    }),
                    ..Default::default()
                },
            ),
        ];
        let atomic = (
            Opcode::RC_CMP_SWAP,
            ExtHeaders {
                atomic: Some(AtomicEth {
                    va: 0x40,
                    rkey: 9,
                    swap_add: 5,
                    compare: 6,
                }),
                ..Default::default()
            },
        );
        let mut cases = 0;
        for ip in ips() {
            for vlan in [
                None,
                Some(VlanTag {
                    pcp: 3,
                    dei: false,
                    vid: 100,
                }),
            ] {
                for csum in [UdpChecksum::Zero, UdpChecksum::Computed] {
                    for &(opcode, ext) in exts.iter().chain([&atomic]) {
                        for len in [0, 1, 2, 3, 4, 5, 63, 64, 1023, 1024, 4095, 4096] {
                            let mut bth = BthRepr::new(opcode, 0x11, Psn::new(0xFF_FFFF));
                            bth.ack_req = len % 2 == 0;
                            bth.solicited = len % 3 == 0;
                            let repr = RoceRepr {
                                eth: EthernetRepr {
                                    dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                                    src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                                    vlan,
                                    ethertype: 0,
                                },
                                ip,
                                udp: UdpRepr {
                                    src_port: 0xC123,
                                    dst_port: wire::ROCEV2_PORT,
                                },
                                udp_checksum: csum,
                                bth,
                                ext,
                                payload: &payload[..len],
                                trailer_len: 0,
                            };
                            let mut want = vec![0xEEu8; 5000];
                            let want_n = repr.emit(&mut want).ok();
                            let mut got = vec![0x77u8; 5000];
                            let got_n = emit_with(&repr, len, &mut got, |dst| {
                                dst.copy_from_slice(&payload[..len]);
                                Ok::<(), ()>(())
                            })
                            .unwrap();
                            assert_eq!(got_n, want_n, "{opcode:?} {len}");
                            if let Some(n) = want_n {
                                assert_eq!(got[..n], want[..n], "{opcode:?} {len} {ip:?}");
                                cases += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(cases > 300, "{cases} frames compared");
        // a too-small buffer fails as `RoceRepr::emit` does
        let repr = RoceRepr::cnp(
            EthernetRepr {
                dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                vlan: None,
                ethertype: 0,
            },
            ips()[0],
            UdpRepr {
                src_port: 1,
                dst_port: wire::ROCEV2_PORT,
            },
            7,
        );
        let mut small = [0u8; 40];
        assert_eq!(
            emit_with(&repr, 0, &mut small, |_| Ok::<(), ()>(())),
            Ok(None)
        );
    }

    #[test]
    fn a_failing_fill_writes_no_headers() {
        let repr = RoceRepr::cnp(
            EthernetRepr {
                dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                vlan: None,
                ethertype: 0,
            },
            ips()[1],
            UdpRepr {
                src_port: 1,
                dst_port: wire::ROCEV2_PORT,
            },
            7,
        );
        let repr = RoceRepr {
            bth: BthRepr::new(Opcode(0x04), 7, Psn::new(1)),
            ..repr
        };
        let mut buf = [0x55u8; 200];
        let r = emit_with(&repr, 8, &mut buf, |dst| {
            dst.fill(1);
            Err("gone")
        });
        assert_eq!(r, Err("gone"));
        let at = 14 + 40 + 8 + 12;
        assert!(buf[..at].iter().all(|&b| b == 0x55));
        assert!(buf[at..at + 8].iter().all(|&b| b == 1));
    }
}
