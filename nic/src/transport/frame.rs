//! Building a frame with its payload written in place: `RoceRepr::emit`
//! copies the payload from a slice, so a payload gathered from registered
//! memory would be copied twice (memory → staging buffer → frame), and then
//! read a third time for the ICRC. Here the headers are written first and
//! the ICRC started over them; the caller's `fill` then copies the payload
//! straight into the frame through a `Payload`, which folds each byte into
//! the ICRC as it copies it (`wire::crc_copy`: one pass over the payload);
//! the pad, ICRC and UDP checksum follow, exactly as `RoceRepr::emit` writes
//! them (the tests below hold the two to the same bytes).

use crate::verbs::Memory;
use wire::ethernet::ethertype;
use wire::icrc::Icrc;
use wire::{bth, icrc, pad_for, udp, IpRepr, RoceRepr, UdpChecksum};

/// Zeros standing in for the payload where a repr with the payload's
/// length is needed (a debug check of the layout).
static ZEROS: [u8; 4096] = [0; 4096];

/// The longest payload `emit_with` takes (the largest path MTU).
pub(crate) const MAX_PAYLOAD: usize = ZEROS.len();

/// Payloads shorter than this are copied first and covered by one ICRC
/// pass over the whole datagram afterwards, as `RoceRepr::emit` does: below
/// about 256 bytes the fused copy is no faster than copy + CRC (`crc_copy`
/// bench), and one CRC update over headers and payload together saves the
/// fixed cost of a separate one.
const FUSE_MIN: usize = 256;

/// Where `fill` writes a frame's payload: front to back, each piece copied
/// into the frame and, for a payload of `FUSE_MIN` bytes or more, covered
/// by the ICRC in the same pass.
pub(crate) struct Payload<'a> {
    dst: &'a mut [u8],
    at: usize,
    /// `None`: copy only (a short payload; see `FUSE_MIN`).
    icrc: Option<Icrc>,
}

impl Payload<'_> {
    /// Payload bytes not written yet.
    pub(crate) fn remaining(&self) -> usize {
        self.dst.len() - self.at
    }

    /// Appends `src` (at most `remaining()` bytes).
    pub(crate) fn put(&mut self, src: &[u8]) {
        let end = self.at + src.len();
        let dst = &mut self.dst[self.at..end];
        match &mut self.icrc {
            Some(icrc) => icrc.copy(src, dst),
            None => dst.copy_from_slice(src),
        }
        self.at = end;
    }

    /// Appends `len` bytes of `mem` from `offset` (bounds checked by the
    /// caller, as for `Memory::read`; at most `remaining()` bytes).
    pub(crate) fn put_mem(&mut self, mem: &dyn Memory, offset: usize, len: usize) {
        let end = self.at + len;
        let dst = &mut self.dst[self.at..end];
        match &mut self.icrc {
            Some(icrc) => mem.read_icrc(offset, dst, icrc),
            None => mem.read(offset, dst),
        }
        self.at = end;
    }
}

/// Writes the frame `repr` describes into `buf`, with a payload of
/// `payload_len` bytes written by `fill` into its place in the frame
/// (`repr.payload` is ignored); payload bytes `fill` leaves unwritten are
/// zeros. `fill`'s error is returned as is, and `buf` then holds no frame
/// (its headers may have been written). `Ok(None)`: the repr is not valid
/// or `buf` is too small (as `RoceRepr::emit` fails), and `fill` did not
/// run.
///
/// Inlined into its callers: its result, returned through memory, was
/// read back with a wider load than it was stored with (a store-forwarding
/// stall on every frame).
#[inline(always)]
pub(crate) fn emit_with<E>(
    repr: &RoceRepr<'_>,
    payload_len: usize,
    buf: &mut [u8],
    fill: impl FnOnce(&mut Payload<'_>) -> Result<(), E>,
) -> Result<Option<usize>, E> {
    if payload_len > MAX_PAYLOAD {
        return Ok(None);
    }
    // Validated in place (no copy of the repr with a stand-in payload:
    // only the payload's length matters).
    let Ok(info) = repr.validate_with_payload_len(payload_len) else {
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
    debug_assert_eq!(
        total,
        RoceRepr {
            payload: &ZEROS[..payload_len],
            ..*repr
        }
        .buffer_len()
    );
    if buf.len() < total {
        return Ok(None);
    }
    let buf = &mut buf[..total];
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
    // The ICRC (RoCEv2 A17.4.3.1) covers the IP header through the pad:
    // the headers now, with their variant fields masked by `Icrc::new`,
    // then the payload as `fill` copies it in, then the pad.
    let (front, rest) = buf.split_at_mut(payload_at);
    let mut payload = Payload {
        dst: &mut rest[..payload_len],
        at: 0,
        icrc: (payload_len >= FUSE_MIN).then(|| Icrc::new(repr.ip.version(), &front[ip_at..])),
    };
    fill(&mut payload)?;
    let Payload { dst, at, icrc } = payload;
    if at < dst.len() {
        dst[at..].fill(0);
    }
    buf[pad_at..icrc_at].fill(0);
    let crc = match icrc {
        Some(mut icrc) => {
            if at < payload_len {
                icrc.update(&buf[payload_at + at..pad_at]);
            }
            icrc.update(&buf[pad_at..icrc_at]);
            icrc.finish()
        }
        None => icrc::compute(repr.ip.version(), &buf[ip_at..icrc_at]),
    };
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
    use crate::verbs::HeapMemory;
    use wire::{
        Aeth, AtomicEth, BthRepr, Deth, EthernetAddress, EthernetRepr, ExtHeaders, Ipv4Repr,
        Ipv6Repr, Opcode, Psn, Reth, Syndrome, UdpRepr, VlanTag,
    };

    /// Writes `payload` (also at offset 3 of `mem`) through `dst` in one
    /// of three ways.
    fn fill_by(way: usize, payload: &[u8], mem: &HeapMemory, dst: &mut Payload<'_>) {
        let len = payload.len();
        assert_eq!(dst.remaining(), len);
        match way {
            0 => dst.put(payload),
            1 => {
                let (a, b) = (len / 3, len / 3 + len / 2);
                dst.put(&payload[..a]);
                dst.put(&payload[a..b]);
                dst.put(&payload[b..]);
            }
            _ => {
                let a = len.min(333);
                dst.put_mem(mem, 3, a);
                dst.put_mem(mem, 3 + a, len - a);
            }
        }
        assert_eq!(dst.remaining(), 0);
    }

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
        // the payload again at offset 3 of a memory region
        let mem = HeapMemory::new(MAX_PAYLOAD + 8);
        mem.write(3, &payload);
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
                        for len in [
                            0, 1, 2, 3, 4, 5, 63, 64, 255, 256, 257, 1023, 1024, 4095, 4096,
                        ] {
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
                            // the payload from one slice (inline data), from
                            // three (a gather list), from registered memory
                            // in two pieces at odd offsets (multi-SGE)
                            for way in 0..3 {
                                let mut got = vec![0x77u8; 5000];
                                let got_n = emit_with(&repr, len, &mut got, |dst| {
                                    fill_by(way, &payload[..len], &mem, dst);
                                    Ok::<(), ()>(())
                                })
                                .unwrap();
                                assert_eq!(got_n, want_n, "{opcode:?} {len} way {way}");
                                if let Some(n) = want_n {
                                    let bad =
                                        got[..n].iter().zip(&want[..n]).position(|(a, b)| a != b);
                                    assert_eq!(
                                        bad, None,
                                        "{opcode:?} {len} {ip:?} way {way}: first differing byte"
                                    );
                                    cases += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(cases > 1100, "{cases} frames compared");
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

    fn write_repr(ip: IpRepr, payload: &[u8]) -> RoceRepr<'_> {
        let repr = RoceRepr::cnp(
            EthernetRepr {
                dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                vlan: None,
                ethertype: 0,
            },
            ip,
            UdpRepr {
                src_port: 1,
                dst_port: wire::ROCEV2_PORT,
            },
            7,
        );
        RoceRepr {
            bth: BthRepr::new(Opcode(0x04), 7, Psn::new(1)),
            payload,
            ..repr
        }
    }

    #[test]
    fn a_failing_fill_returns_its_error() {
        let repr = write_repr(ips()[1], &[]);
        let mut buf = [0x55u8; 200];
        let r = emit_with(&repr, 8, &mut buf, |dst| {
            dst.put(&[1; 4]);
            Err("gone")
        });
        assert_eq!(r, Err("gone"));
    }

    /// Payload bytes `fill` does not write are zeros, in the frame and in
    /// its ICRC: never stale buffer contents.
    #[test]
    fn a_short_fill_leaves_zeros() {
        for ip in ips() {
            for (len, wrote) in [(8, 0), (8, 5), (255, 3), (257, 0), (1001, 999), (4096, 100)] {
                let mut payload = vec![0u8; len];
                payload[..wrote].fill(0xC3);
                let mut want = vec![0u8; 5000];
                let n = write_repr(ip, &payload).emit(&mut want).unwrap();
                let mut got = vec![0x55u8; 5000];
                let got_n = emit_with(&write_repr(ip, &[]), len, &mut got, |dst| {
                    dst.put(&payload[..wrote]);
                    Ok::<(), ()>(())
                });
                assert_eq!(got_n, Ok(Some(n)));
                let bad = got[..n].iter().zip(&want[..n]).position(|(a, b)| a != b);
                assert_eq!(bad, None, "{len} {wrote}: first differing byte");
            }
        }
    }
}
