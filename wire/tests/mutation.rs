//! Mutation tests of the codec (the deterministic half; the libFuzzer
//! half is `wire/fuzz`): well over a million mutated frames, seeded from the
//! third-party captures and from frames the codec emits itself, go through
//! every entry point of the parser. None may panic, and whatever parses must
//! re-emit to something that parses back to the same repr.
//!
//! Mutations: bit flips, bytes and 16-bit words set to interesting values,
//! truncation, extension, insertion/deletion, adding/removing a VLAN tag,
//! splicing the headers of one frame onto the rest of another, rewriting the
//! length fields (IPv4 total length, IPv6 payload length, UDP length), the
//! pad count and the opcode. Half of the frames are then "repaired" (lengths,
//! IPv4 header checksum, UDP checksum, ICRC, each at random) so that they get
//! past the outer checks and reach the deeper ones.

mod common;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use wire::ethernet::ethertype;
use wire::{
    icrc, Aeth, AtomicEth, BthRepr, Deth, EthernetAddress, EthernetRepr, ExtHeaders, Feth, Frame,
    IpRepr, IpVersion, Ipv4Repr, Ipv6Repr, MacControlRepr, Opcode, PayloadRule, Psn, Reth,
    RocePacket, RoceRepr, Syndrome, UdpChecksum, UdpRepr, VlanTag,
};

/// Mutated frames pushed through the parser.
const FRAMES: usize = 2_000_000;
const SEED: u64 = 0x50F7_121C_0000_0005;

/// Frames the codec emits itself: every opcode over IPv4 and IPv6, with and
/// without VLAN, several payload lengths, both UDP checksum policies, short
/// frames with an Ethernet trailer; and PAUSE/PFC frames.
fn codec_frames(rng: &mut SmallRng) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let payload: Vec<u8> = (0..600).map(|_| rng.gen()).collect();
    for info in Opcode::all() {
        let lens: &[usize] = match info.payload {
            PayloadRule::None => &[0, 0, 0, 0],
            PayloadRule::Exactly(n) => &[n as usize; 4],
            PayloadRule::Any => &[0, 1, 2, 3, 4, 13, 256, 600],
        };
        for (k, &len) in lens.iter().enumerate() {
            let v6 = k % 2 == 1;
            let ip = if v6 {
                IpRepr::V6(Ipv6Repr {
                    src: Ipv6Addr::from(rng.gen::<[u8; 16]>()),
                    dst: Ipv6Addr::from(rng.gen::<[u8; 16]>()),
                    dscp: rng.gen_range(0..64),
                    ecn: rng.gen_range(0..4),
                    flow_label: rng.gen_range(0..1 << 20),
                    hop_limit: rng.gen(),
                })
            } else {
                IpRepr::V4(Ipv4Repr {
                    src: Ipv4Addr::from(rng.gen::<[u8; 4]>()),
                    dst: Ipv4Addr::from(rng.gen::<[u8; 4]>()),
                    dscp: rng.gen_range(0..64),
                    ecn: rng.gen_range(0..4),
                    ident: rng.gen(),
                    dont_frag: rng.gen(),
                    ttl: rng.gen(),
                })
            };
            let has = |h| info.headers.contains(h);
            use wire::opcode::Header as H;
            let ext = ExtHeaders {
                deth: has(H::Deth).then(|| Deth {
                    qkey: rng.gen(),
                    src_qp: rng.gen_range(0..1 << 24),
                }),
                feth: has(H::Feth).then(|| Feth {
                    selectivity: rng.gen_range(0..4),
                    placement_type: rng.gen_range(0..16),
                }),
                reth: has(H::Reth).then(|| Reth {
                    va: rng.gen(),
                    rkey: rng.gen(),
                    dma_len: rng.gen(),
                }),
                atomic: has(H::AtomicEth).then(|| AtomicEth {
                    va: rng.gen(),
                    rkey: rng.gen(),
                    swap_add: rng.gen(),
                    compare: rng.gen(),
                }),
                aeth: has(H::Aeth).then(|| Aeth {
                    syndrome: Syndrome::from_byte(rng.gen()),
                    msn: rng.gen_range(0..1 << 24),
                }),
                atomic_ack: has(H::AtomicAckEth).then(|| rng.gen()),
                imm: has(H::ImmDt).then(|| rng.gen()),
                ieth: has(H::Ieth).then(|| rng.gen()),
            };
            let mut bth = BthRepr::new(
                Opcode(info.opcode),
                rng.gen_range(0..1 << 24),
                Psn::new(rng.gen()),
            );
            bth.ack_req = rng.gen();
            bth.solicited = rng.gen();
            bth.fecn = rng.gen();
            bth.becn = rng.gen();
            let mut r = RoceRepr {
                eth: EthernetRepr {
                    dst: EthernetAddress(rng.gen()),
                    src: EthernetAddress(rng.gen()),
                    vlan: (k % 4 >= 2).then(|| VlanTag {
                        pcp: rng.gen_range(0..8),
                        dei: rng.gen(),
                        vid: rng.gen_range(0..4096),
                    }),
                    ethertype: 0,
                },
                ip,
                udp: UdpRepr {
                    src_port: rng.gen_range(0xC000..=0xFFFF),
                    dst_port: wire::ROCEV2_PORT,
                },
                udp_checksum: if rng.gen() {
                    UdpChecksum::Zero
                } else {
                    UdpChecksum::Computed
                },
                bth,
                ext,
                payload: &payload[..len],
                trailer_len: 0,
            };
            // short frames carry Ethernet padding up to 60 bytes
            r.trailer_len = 60usize.saturating_sub(r.buffer_len());
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b).unwrap();
            assert!(Frame::parse(&b).is_ok(), "{}", info.name);
            out.push(b);
        }
    }
    let src = EthernetAddress([2, 0, 0, 0, 0, 1]);
    for m in [
        MacControlRepr::pfc(src, 0xA5, [1, 2, 3, 4, 5, 6, 7, 0xFFFF]),
        MacControlRepr {
            control: wire::MacControl::Pause { quanta: 0x1234 },
            ..MacControlRepr::pfc(src, 0, [0; 8])
        },
    ] {
        let mut b = vec![0u8; m.buffer_len()];
        m.emit(&mut b).unwrap();
        out.push(b);
    }
    out
}

/// Where the headers would be if the frame were what it claims to be.
/// Computed from the bytes alone, without validation: offsets may lie past
/// the end.
#[derive(Clone, Copy, Debug)]
struct Layout {
    ip_at: usize,
    v6: bool,
    udp_at: usize,
    bth_at: usize,
    payload_at: usize,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    if at + 2 <= b.len() {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
}

fn layout(b: &[u8]) -> Layout {
    let ip_at = if be16(b, 12) == Some(ethertype::VLAN) {
        18
    } else {
        14
    };
    let v6 = match be16(b, ip_at - 2) {
        Some(ethertype::IPV6) => true,
        Some(ethertype::IPV4) => false,
        _ => b.get(ip_at).is_some_and(|v| v >> 4 == 6),
    };
    let udp_at = ip_at + if v6 { 40 } else { 20 };
    let bth_at = udp_at + 8;
    let ext_len = b
        .get(bth_at)
        .and_then(|&o| Opcode(o).info())
        .map_or(0, |i| i.ext_len());
    Layout {
        ip_at,
        v6,
        udp_at,
        bth_at,
        payload_at: bth_at + 12 + ext_len,
    }
}

impl Layout {
    /// Header boundaries, for truncation and splicing.
    fn cuts(&self) -> [usize; 12] {
        [
            0,
            6,
            12,
            self.ip_at - 2,
            self.ip_at,
            self.ip_at + 2,
            self.ip_at + if self.v6 { 8 } else { 12 },
            self.udp_at,
            self.udp_at + 4,
            self.bth_at,
            self.bth_at + 12,
            self.payload_at,
        ]
    }
}

const BYTES: [u8; 16] = [
    0, 1, 2, 3, 4, 0x0F, 0x10, 0x11, 0x30, 0x40, 0x45, 0x60, 0x7F, 0x80, 0x81, 0xFF,
];
const WORDS: [u16; 12] = [
    0,
    1,
    4,
    0x7FFF,
    0x8000,
    0xFFFF,
    0xFFFE,
    wire::ROCEV2_PORT,
    ethertype::IPV4,
    ethertype::IPV6,
    ethertype::VLAN,
    ethertype::MAC_CONTROL,
];

/// A position, most of the time within the headers.
fn pos(b: &[u8], l: &Layout, rng: &mut SmallRng) -> usize {
    let hdr = (l.payload_at + 8).min(b.len());
    if hdr > 0 && rng.gen_ratio(4, 5) {
        rng.gen_range(0..hdr)
    } else {
        rng.gen_range(0..b.len().max(1))
    }
}

/// A length field value: the consistent one, off by a little, or wild.
fn length_value(right: usize, rng: &mut SmallRng) -> u16 {
    match rng.gen_range(0..4) {
        0 => right as u16,
        1 => (right as i64 + rng.gen_range(-8i64..=8)).clamp(0, 0xFFFF) as u16,
        2 => *WORDS[..6].choose(rng).unwrap(),
        _ => rng.gen(),
    }
}

fn mutate(b: &mut Vec<u8>, seeds: &[Vec<u8>], rng: &mut SmallRng) {
    let l = layout(b);
    match rng.gen_range(0..14) {
        // bit flip
        0 | 1 => {
            if !b.is_empty() {
                let i = pos(b, &l, rng);
                b[i] ^= 1 << rng.gen_range(0..8);
            }
        }
        // byte set to an interesting value, or to a length
        2 => {
            if !b.is_empty() {
                let i = pos(b, &l, rng);
                b[i] = match rng.gen_range(0..3) {
                    0 => b.len() as u8,
                    1 => (b.len() >> 8) as u8,
                    _ => *BYTES.choose(rng).unwrap(),
                };
            }
        }
        // 16-bit word set to an interesting value
        3 => {
            if b.len() >= 2 {
                let i = pos(b, &l, rng).min(b.len() - 2);
                let v = if rng.gen() {
                    *WORDS.choose(rng).unwrap()
                } else {
                    length_value(b.len() - l.ip_at.min(b.len()), rng)
                };
                put16(b, i, v);
            }
        }
        // truncation: at a header boundary (± a little) or anywhere
        4 => {
            let at = if rng.gen() {
                let c = *l.cuts().choose(rng).unwrap() as i64 + rng.gen_range(-2i64..=2);
                c.max(0) as usize
            } else if rng.gen_ratio(1, 4) {
                b.len().saturating_sub(rng.gen_range(1..=8))
            } else {
                rng.gen_range(0..=b.len())
            };
            b.truncate(at);
        }
        // extension: zeros (Ethernet padding), random bytes, or a lot
        5 => {
            let n = if rng.gen_ratio(1, 16) {
                rng.gen_range(64..=4200)
            } else {
                rng.gen_range(1..=64)
            };
            if rng.gen() {
                b.resize(b.len() + n, 0);
            } else {
                b.extend((0..n).map(|_| rng.gen::<u8>()));
            }
        }
        // splice: the headers of this frame onto the rest of another one
        6 => {
            let other = seeds.choose(rng).unwrap();
            let lo = layout(other);
            let i = (*l.cuts().choose(rng).unwrap()).min(b.len());
            let j = if rng.gen_ratio(3, 4) {
                // the same boundary in the other frame
                let k = l.cuts().iter().position(|&c| c == i).unwrap_or(0);
                lo.cuts()[k]
            } else {
                *lo.cuts().choose(rng).unwrap()
            }
            .min(other.len());
            b.truncate(i);
            b.extend_from_slice(&other[j..]);
        }
        // IP length field
        7 => {
            if l.v6 {
                let right = b.len().saturating_sub(l.ip_at + 40);
                put16(b, l.ip_at + 4, length_value(right, rng));
            } else {
                let right = b.len().saturating_sub(l.ip_at);
                put16(b, l.ip_at + 2, length_value(right, rng));
            }
        }
        // UDP length field
        8 => {
            let right = b.len().saturating_sub(l.udp_at);
            put16(b, l.udp_at + 4, length_value(right, rng));
        }
        // pad count (and the TVer bits beside it, sometimes)
        9 => {
            if let Some(x) = b.get_mut(l.bth_at + 1) {
                *x = (*x & !0x30) | rng.gen_range(0..4u8) << 4;
                if rng.gen_ratio(1, 8) {
                    *x ^= 1 << rng.gen_range(0..4);
                }
            }
        }
        // opcode: another one from the table (so the extension headers no
        // longer line up), or any byte
        10 => {
            if let Some(x) = b.get_mut(l.bth_at) {
                *x = if rng.gen_ratio(7, 8) {
                    Opcode::all()
                        .collect::<Vec<_>>()
                        .choose(rng)
                        .unwrap()
                        .opcode
                } else {
                    rng.gen()
                };
            }
        }
        // insert or delete a few bytes at a boundary or anywhere
        11 => {
            let at = if rng.gen() {
                (*l.cuts().choose(rng).unwrap()).min(b.len())
            } else {
                rng.gen_range(0..=b.len())
            };
            let n = *[1usize, 2, 4, 4, 8, 12, 16].choose(rng).unwrap();
            if rng.gen() {
                let end = (at + n).min(b.len());
                b.drain(at..end);
            } else {
                let fill: u8 = if rng.gen() { 0 } else { rng.gen() };
                b.splice(at..at, vec![fill; n]);
            }
        }
        // add or remove an 802.1Q tag
        12 => {
            if be16(b, 12) == Some(ethertype::VLAN) && b.len() >= 16 {
                b.drain(12..16);
            } else if b.len() >= 12 {
                let tci: u16 = rng.gen();
                let tag = [0x81, 0x00, (tci >> 8) as u8, tci as u8];
                b.splice(12..12, tag);
            }
        }
        // random byte, anywhere
        _ => {
            if !b.is_empty() {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
        }
    }
}

/// RFC 1071 checksum of an IPv4 header (the checksum field taken as zero).
fn ipv4_header_checksum(h: &[u8]) -> u16 {
    let mut acc = 0u32;
    for i in (0..20).step_by(2) {
        if i != 10 {
            acc += u16::from_be_bytes([h[i], h[i + 1]]) as u32;
        }
    }
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    !(acc as u16)
}

/// Makes some of what a mutation broke consistent again, each step at random,
/// so that the frame gets further into the parser.
fn repair(b: &mut [u8], rng: &mut SmallRng) {
    let l = layout(b);
    if b.len() < l.bth_at + 12 {
        return;
    }
    // length fields agree with the frame (no trailer)
    if rng.gen_ratio(3, 4) {
        if l.v6 {
            put16(b, l.ip_at + 4, (b.len() - l.ip_at - 40) as u16);
        } else {
            put16(b, l.ip_at + 2, (b.len() - l.ip_at) as u16);
        }
        put16(b, l.udp_at + 4, (b.len() - l.udp_at) as u16);
    }
    // IPv4 header checksum
    if !l.v6 && rng.gen_ratio(7, 8) {
        let c = ipv4_header_checksum(&b[l.ip_at..l.ip_at + 20]);
        put16(b, l.ip_at + 10, c);
    }
    // no UDP checksum
    if rng.gen_ratio(3, 4) {
        put16(b, l.udp_at + 6, 0);
    }
    // the ICRC, at the end of the IP datagram as its length field says
    if rng.gen_ratio(7, 8) {
        let ip_end = if l.v6 {
            l.ip_at + 40 + be16(b, l.ip_at + 4).unwrap() as usize
        } else {
            l.ip_at + be16(b, l.ip_at + 2).unwrap() as usize
        };
        let v = if l.v6 { IpVersion::V6 } else { IpVersion::V4 };
        if ip_end <= b.len() && ip_end >= l.bth_at + 12 + icrc::ICRC_LEN {
            let c = icrc::compute(v, &b[l.ip_at..ip_end - icrc::ICRC_LEN]);
            icrc::write(&mut b[ip_end - icrc::ICRC_LEN..], c);
        }
    }
}

#[derive(Default, Debug)]
struct Stats {
    tried: usize,
    /// `Frame::parse` succeeded (RoCE with a good ICRC, or MAC control).
    frame_ok: usize,
    roce_ok: usize,
    mac_control_ok: usize,
    /// `RocePacket::new_checked` succeeded (the ICRC not yet looked at).
    packet_ok: usize,
    icrc_ok: usize,
    /// Why `Frame::parse` refused the others (`Error::reason`).
    refused: BTreeMap<&'static str, usize>,
}

/// Every parser entry point on one frame, plus the consistency between them.
fn exercise(b: &[u8], st: &mut Stats, s: &mut String, out: &mut Vec<u8>) {
    st.tried += 1;
    s.clear();
    let frame = Frame::parse(b);
    match frame {
        Ok(f) => {
            st.frame_ok += 1;
            write!(s, "{f}").unwrap();
            assert!(!s.contains('\n'), "two lines: {s:?}");
            match f {
                Frame::Roce(_) => st.roce_ok += 1,
                Frame::MacControl(m) => {
                    st.mac_control_ok += 1;
                    out.clear();
                    out.resize(m.buffer_len(), 0);
                    let n = m.emit(out).unwrap();
                    assert_eq!(MacControlRepr::parse(&out[..n]), Ok(m));
                }
            }
        }
        Err(e) => {
            write!(s, "{e}").unwrap();
            *st.refused.entry(e.reason()).or_default() += 1;
        }
    }
    match RocePacket::new_checked(b) {
        Ok(p) => {
            st.packet_ok += 1;
            let r = RoceRepr::from_packet(&p);
            s.clear();
            write!(s, "{r}").unwrap();
            assert!(!s.contains('\n'), "two lines: {s:?}");
            let _ = (p.payload(), p.ext_bytes(), p.trailer(), p.payload_offset());
            let _ = (p.bth().psn(), p.ethernet().ethertype(), p.opcode_info());
            assert_eq!(r.payload, p.payload());
            if p.verify_icrc().is_ok() {
                st.icrc_ok += 1;
                assert_eq!(frame, Ok(Frame::Roce(r)));
            } else {
                assert!(frame.is_err());
                assert_ne!(p.computed_icrc(), p.stored_icrc());
            }
            // parse(emit(r)) == r; emit computes a fresh ICRC, so this holds
            // for the repr of a frame whose ICRC was wrong as well
            out.clear();
            out.resize(r.buffer_len(), 0);
            let n = r
                .emit(out)
                .unwrap_or_else(|e| panic!("re-emit of {r}: {e}"));
            assert_eq!(n, r.buffer_len());
            assert_eq!(RoceRepr::parse(&out[..n]), Ok(r), "re-emitted {r}");
        }
        Err(_) => assert!(!matches!(frame, Ok(Frame::Roce(_)))),
    }
    if let Ok(m) = MacControlRepr::parse(b) {
        s.clear();
        write!(s, "{m}").unwrap();
        assert_eq!(frame, Ok(Frame::MacControl(m)));
    }
}

#[test]
fn a_million_mutated_frames_do_not_panic() {
    let started = Instant::now();
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut seeds = Vec::new();
    let captured = match common::rxe_frames("a_million_mutated_frames_do_not_panic (captures part)")
    {
        Some(files) => {
            for (_, frames) in files {
                seeds.extend(frames);
            }
            seeds.len()
        }
        None => 0,
    };
    seeds.extend(codec_frames(&mut rng));
    if captured > 0 {
        eprintln!(
            "seeds: {captured} frames from ../shared/pcaps/rxe-public + {} emitted by the codec",
            seeds.len() - captured
        );
    } else {
        eprintln!(
            "seeds: ../shared is missing, {} frames emitted by the codec only",
            seeds.len()
        );
    }

    let valid: Vec<usize> = (0..seeds.len())
        .filter(|&i| Frame::parse(&seeds[i]).is_ok())
        .collect();
    eprintln!("{} of the seeds parse", valid.len());

    let mut st = Stats::default();
    let mut b = Vec::with_capacity(16 * 1024);
    let mut s = String::with_capacity(512);
    let mut out = Vec::with_capacity(16 * 1024);
    for i in 0..FRAMES {
        // mostly frames that parse (the captures also hold TCP, ARP, ...)
        let seed_ix = if rng.gen_ratio(7, 8) {
            *valid.choose(&mut rng).unwrap()
        } else {
            rng.gen_range(0..seeds.len())
        };
        b.clear();
        b.extend_from_slice(&seeds[seed_ix]);
        let n = *[1, 1, 1, 1, 2, 2, 3, 4, 8].choose(&mut rng).unwrap();
        for _ in 0..n {
            mutate(&mut b, &seeds, &mut rng);
        }
        if rng.gen() {
            repair(&mut b, &mut rng);
        }
        let r = catch_unwind(AssertUnwindSafe(|| exercise(&b, &mut st, &mut s, &mut out)));
        if let Err(p) = r {
            eprintln!(
                "PANIC on mutated frame {i} (seed frame {seed_ix}, {n} mutations), {} bytes:\n{}",
                b.len(),
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            );
            std::panic::resume_unwind(p);
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{} mutated frames in {:.2?}: Frame::parse ok {} (RoCE {}, MAC control {}), \
         RocePacket::new_checked ok {} (ICRC ok {})",
        st.tried, elapsed, st.frame_ok, st.roce_ok, st.mac_control_ok, st.packet_ok, st.icrc_ok
    );
    eprintln!("refused by reason: {:?}", st.refused);
    assert_eq!(st.tried, FRAMES);
    assert!(st.tried >= 1_000_000);
    // some get through (the repairs see to it), most do not
    assert!(st.frame_ok > st.tried / 50, "{st:?}");
    assert!(st.frame_ok < st.tried / 2, "{st:?}");
    assert!(st.roce_ok > st.tried / 50, "{st:?}");
    assert!(st.mac_control_ok > 0, "{st:?}");
    assert!(
        st.packet_ok >= st.icrc_ok && st.icrc_ok >= st.roce_ok,
        "{st:?}"
    );
    // the mutations reach every layer
    for reason in [
        "truncated",
        "bad_ip_checksum",
        "bad_ip_length",
        "bad_udp_length",
        "bad_udp_checksum",
        "bad_tver",
        "unknown_opcode",
        "bad_length",
        "icrc_error",
    ] {
        assert!(
            st.refused.get(reason).is_some_and(|&n| n > 100),
            "{reason}: {st:?}"
        );
    }
}

/// The bug the mutation run found first: an opcode without payload whose
/// BTH pad count is not zero was accepted by `RocePacket::new_checked`, and
/// the payload length `0 - pad` made `payload()`/`from_packet` panic.
#[test]
fn no_payload_opcode_with_a_pad_count_is_refused() {
    let ip = IpRepr::V4(Ipv4Repr {
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
        ttl: 64,
    });
    let udp = UdpRepr {
        src_port: 0xC000,
        dst_port: wire::ROCEV2_PORT,
    };
    let eth = EthernetRepr {
        dst: EthernetAddress([2, 0, 0, 0, 0, 1]),
        src: EthernetAddress([2, 0, 0, 0, 0, 2]),
        vlan: None,
        ethertype: ethertype::IPV4,
    };
    for info in Opcode::all().filter(|i| i.payload == PayloadRule::None) {
        let r = RoceRepr {
            bth: BthRepr::new(Opcode(info.opcode), 0x11, Psn::new(0)),
            ..RoceRepr::cnp(eth, ip, udp, 0x11)
        };
        let mut ext = ExtHeaders::default();
        use wire::opcode::Header as H;
        let has = |h| info.headers.contains(h);
        ext.reth = has(H::Reth).then(Reth::default);
        ext.feth = has(H::Feth).then(Feth::default);
        ext.atomic = has(H::AtomicEth).then(AtomicEth::default);
        ext.aeth = has(H::Aeth).then_some(Aeth {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 0,
        });
        ext.atomic_ack = has(H::AtomicAckEth).then_some(0);
        let r = RoceRepr { ext, ..r };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        let bth = 14 + 20 + 8;
        let end = b.len() - icrc::ICRC_LEN;
        for pad in 1..4u8 {
            b[bth + 1] = (b[bth + 1] & !0x30) | pad << 4;
            let c = icrc::compute(IpVersion::V4, &b[14..end]);
            icrc::write(&mut b[end..], c);
            assert!(
                matches!(
                    RocePacket::new_checked(&b[..]),
                    Err(wire::Error::BadLength { .. })
                ),
                "{} with pad {pad}",
                info.name
            );
            assert!(Frame::parse(&b).is_err());
        }
    }
}
