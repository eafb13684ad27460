//! Frames with their payload gathered from registered memory: the
//! emitter is wire's ([`wire::emit::emit_with`]), which lets the payload be
//! written straight into its place in the frame and folded into the ICRC
//! in the same pass; [`PutMem`] writes it from a [`Memory`].

use crate::verbs::Memory;
pub(crate) use wire::emit::{emit_with, Payload};

/// Writing a payload out of registered memory.
pub(crate) trait PutMem {
    /// Appends `len` bytes of `mem` from `offset` (bounds checked by the
    /// caller, as for `Memory::read`; at most `remaining()` bytes).
    fn put_mem(&mut self, mem: &dyn Memory, offset: usize, len: usize);
}

impl PutMem for Payload<'_> {
    #[inline]
    fn put_mem(&mut self, mem: &dyn Memory, offset: usize, len: usize) {
        self.put_with(len, |dst, icrc| match icrc {
            Some(icrc) => mem.read_icrc(offset, dst, icrc),
            None => mem.read(offset, dst),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::HeapMemory;
    use wire::{IpRepr, RoceRepr, UdpChecksum};

    /// The longest payload a frame carries (the largest path MTU).
    const MAX_PAYLOAD: usize = 4096;
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
