//! Property tests over random but valid
//! reprs of every opcode in the table.
//!
//! - emit → parse gives the repr back, and the ICRC verifies;
//! - flipping any single bit the ICRC covers (masked fields excepted)
//!   changes the ICRC;
//! - rewriting what a router may rewrite (TTL/hop limit, TOS/traffic class,
//!   flow label, UDP checksum, FECN/BECN) leaves the ICRC unchanged;
//! - every rendering is one line.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::ethernet::ethertype;
use wire::opcode::Header;
use wire::{
    icrc, udp, Aeth, AtomicEth, BthRepr, Deth, EthernetAddress, EthernetRepr, ExtHeaders, Feth,
    Frame, IpRepr, IpVersion, Ipv4Repr, Ipv6Repr, MacControl, MacControlRepr, Opcode, OpcodeInfo,
    PayloadRule, Psn, Reth, RocePacket, RoceRepr, Syndrome, UdpChecksum, UdpRepr, VlanTag,
};

/// Cases per property. Each case emits a frame of up to ~4.2 KB and runs a
/// few CRCs over it: 2000 cases take well under a second in release.
const CASES: u32 = 2000;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        // No persistence file: the tests run from a read-only checkout too.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A valid repr without its payload (the repr borrows it), and the payload.
#[derive(Clone, Debug)]
struct Case {
    repr: RoceRepr<'static>,
    payload: Vec<u8>,
}

impl Case {
    fn repr(&self) -> RoceRepr<'_> {
        RoceRepr {
            payload: &self.payload,
            ..self.repr
        }
    }

    fn emit(&self) -> Vec<u8> {
        let r = self.repr();
        let mut buf = vec![0u8; r.buffer_len()];
        let n = r.emit(&mut buf).expect("a valid repr emits");
        assert_eq!(n, buf.len());
        buf
    }
}

fn mac() -> impl Strategy<Value = EthernetAddress> {
    any::<[u8; 6]>().prop_map(EthernetAddress)
}

fn vlan() -> impl Strategy<Value = Option<VlanTag>> {
    proptest::option::of(
        (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
    )
}

fn ipv4() -> impl Strategy<Value = IpRepr> {
    (
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        0u8..64,
        0u8..4,
        any::<u16>(),
        any::<bool>(),
        any::<u8>(),
    )
        .prop_map(|(src, dst, dscp, ecn, ident, dont_frag, ttl)| {
            IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::from(src),
                dst: Ipv4Addr::from(dst),
                dscp,
                ecn,
                ident,
                dont_frag,
                ttl,
            })
        })
}

fn ipv6() -> impl Strategy<Value = IpRepr> {
    (
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
        0u8..64,
        0u8..4,
        0u32..1 << 20,
        any::<u8>(),
    )
        .prop_map(|(src, dst, dscp, ecn, flow_label, hop_limit)| {
            IpRepr::V6(Ipv6Repr {
                src: Ipv6Addr::from(src),
                dst: Ipv6Addr::from(dst),
                dscp,
                ecn,
                flow_label,
                hop_limit,
            })
        })
}

/// Every BTH field except the opcode and the pad, each over its full range.
fn bth(info: &'static OpcodeInfo) -> impl Strategy<Value = BthRepr> {
    (
        (any::<bool>(), any::<bool>(), any::<u16>()),
        (any::<bool>(), any::<bool>(), 0u8..64),
        (0u32..1 << 24, any::<bool>(), 0u8..128, any::<u32>()),
    )
        .prop_map(
            move |(
                (solicited, migreq, pkey),
                (fecn, becn, resv6),
                (dest_qp, ack_req, resv7, psn),
            )| BthRepr {
                opcode: Opcode(info.opcode),
                solicited,
                migreq,
                pad: 0,
                pkey,
                fecn,
                becn,
                resv6,
                dest_qp,
                ack_req,
                resv7,
                psn: Psn::new(psn),
            },
        )
}

/// `Some(value)` when the opcode carries header `h`, `None` otherwise.
fn opt<T: std::fmt::Debug + Clone + 'static>(
    info: &OpcodeInfo,
    h: Header,
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    if info.headers.contains(h) {
        s.prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    }
}

/// Exactly the extension headers `info` names, with random contents.
fn ext(info: &'static OpcodeInfo) -> impl Strategy<Value = ExtHeaders> {
    let deth = (any::<u32>(), 0u32..1 << 24).prop_map(|(qkey, src_qp)| Deth { qkey, src_qp });
    let feth = (0u8..4, 0u8..16).prop_map(|(selectivity, placement_type)| Feth {
        selectivity,
        placement_type,
    });
    let reth = (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, dma_len)| Reth {
        va,
        rkey,
        dma_len,
    });
    let atomic = (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
        |(va, rkey, swap_add, compare)| AtomicEth {
            va,
            rkey,
            swap_add,
            compare,
        },
    );
    let aeth = (any::<u8>(), 0u32..1 << 24).prop_map(|(s, msn)| Aeth {
        syndrome: Syndrome::from_byte(s),
        msn,
    });
    (
        opt(info, Header::Deth, deth),
        opt(info, Header::Feth, feth),
        opt(info, Header::Reth, reth),
        opt(info, Header::AtomicEth, atomic),
        opt(info, Header::Aeth, aeth),
        opt(info, Header::AtomicAckEth, any::<u64>()),
        opt(info, Header::ImmDt, any::<u32>()),
        opt(info, Header::Ieth, any::<u32>()),
    )
        .prop_map(
            |(deth, feth, reth, atomic, aeth, atomic_ack, imm, ieth)| ExtHeaders {
                deth,
                feth,
                reth,
                atomic,
                aeth,
                atomic_ack,
                imm,
                ieth,
            },
        )
}

/// A payload of the size the opcode's rule allows. `Any` mixes short
/// payloads (every pad count often) with long ones (up to 4096 bytes).
fn payload(info: &OpcodeInfo) -> BoxedStrategy<Vec<u8>> {
    use proptest::collection::vec;
    match info.payload {
        PayloadRule::None => Just(Vec::new()).boxed(),
        PayloadRule::Exactly(n) => vec(any::<u8>(), n as usize).boxed(),
        PayloadRule::Any => {
            prop_oneof![vec(any::<u8>(), 0..=16), vec(any::<u8>(), 0..=4096),].boxed()
        }
    }
}

/// A random valid frame of opcode `info`.
fn case_for(info: &'static OpcodeInfo) -> impl Strategy<Value = Case> {
    let eth = (mac(), mac(), vlan());
    let ip = prop_oneof![ipv4(), ipv6()];
    let udp = (
        any::<u16>(),
        prop_oneof![Just(UdpChecksum::Zero), Just(UdpChecksum::Computed)],
    );
    (eth, ip, udp, bth(info), ext(info), payload(info)).prop_map(
        move |((dst, src, vlan), ip, (src_port, udp_checksum), bth, ext, payload)| {
            let ethertype = match ip {
                IpRepr::V4(_) => ethertype::IPV4,
                IpRepr::V6(_) => ethertype::IPV6,
            };
            let repr = RoceRepr {
                eth: EthernetRepr {
                    dst,
                    src,
                    vlan,
                    ethertype,
                },
                ip,
                udp: UdpRepr {
                    src_port,
                    dst_port: wire::ROCEV2_PORT,
                },
                udp_checksum,
                bth: BthRepr {
                    pad: wire::pad_for(payload.len()),
                    ..bth
                },
                ext,
                payload: &[],
                trailer_len: 0,
            };
            assert!(repr.ext.matches(info));
            Case { repr, payload }
        },
    )
}

/// A random valid frame of any opcode in the table.
fn any_case() -> impl Strategy<Value = Case> {
    proptest::sample::select(Opcode::all().collect::<Vec<_>>()).prop_flat_map(case_for)
}

fn check_round_trip(c: &Case) -> Result<(), TestCaseError> {
    let frame = c.emit();
    let r = c.repr();
    let parsed = RoceRepr::parse(&frame).map_err(|e| {
        TestCaseError::fail(format!("{e} for {}\n{:02x?}", r.bth.opcode, &frame[..]))
    })?;
    prop_assert_eq!(parsed, r);
    let p = RocePacket::new_checked(&frame[..]).unwrap();
    prop_assert_eq!(p.verify_icrc(), Ok(()));
    prop_assert_eq!(p.payload(), &c.payload[..]);
    prop_assert_eq!(Frame::parse(&frame), Ok(Frame::Roce(r)));
    // and byte for byte: re-emitting the parsed repr gives the same frame
    let mut again = vec![0u8; parsed.buffer_len()];
    parsed.emit(&mut again).unwrap();
    prop_assert_eq!(again, frame);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn emit_then_parse_gives_the_repr_back(c in any_case()) {
        check_round_trip(&c)?;
    }
}

/// Where a frame's UDP checksum and IP addresses lie.
fn udp_fields(r: &RoceRepr) -> (usize, std::ops::Range<usize>, std::ops::Range<usize>) {
    let l3 = if r.eth.vlan.is_some() { 18 } else { 14 };
    match r.ip {
        IpRepr::V4(_) => (l3 + 20 + 6, l3 + 12..l3 + 16, l3 + 16..l3 + 20),
        IpRepr::V6(_) => (l3 + 40 + 6, l3 + 8..l3 + 24, l3 + 24..l3 + 40),
    }
}

proptest! {
    #![proptest_config(config())]

    /// A UDP checksum left for offload and never finished (the pseudo-
    /// header's sum, as veth hands a GSO segment to XDP) is no checksum;
    /// any other wrong one is refused.
    #[test]
    fn an_unfinished_udp_checksum_is_taken_as_none(c in any_case()) {
        let mut f = c.emit();
        let (at, src, dst) = udp_fields(&c.repr());
        let udp = at - 6..f.len() - c.repr().trailer_len;
        let sum = wire::udp::pseudo_header_sum(&f[src.clone()], &f[dst.clone()], udp.len());
        f[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        prop_assert!(RoceRepr::parse(&f).is_ok());
        // the checksum the datagram should carry, which is not wrong
        f[at..at + 2].copy_from_slice(&[0, 0]);
        let right = match c.repr().ip {
            IpRepr::V4(v) => wire::udp::checksum_ipv4(v.src, v.dst, &f[udp]),
            IpRepr::V6(v) => wire::udp::checksum_ipv6(v.src, v.dst, &f[udp]),
        };
        let wrong = (1..=3u16).map(|k| sum.wrapping_add(k)).find(|&w| w != 0 && w != right).unwrap_or(7);
        f[at..at + 2].copy_from_slice(&wrong.to_be_bytes());
        prop_assert_eq!(RoceRepr::parse(&f).unwrap_err().reason(), "bad_udp_checksum");
    }
}

/// The random opcode choice above visits each of the 40 opcodes about 50
/// times; this makes sure none is skipped, whatever the seed.
#[test]
fn every_opcode_round_trips() {
    let mut n = 0;
    for info in Opcode::all() {
        let mut runner = TestRunner::new(Config {
            cases: 64,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&case_for(info), |c| check_round_trip(&c))
            .unwrap_or_else(|e| panic!("{}: {e}", info.name));
        n += 1;
    }
    assert_eq!(n, 40);
}

/// Where the fields the ICRC masks sit in the covered bytes (which start at
/// the IP header): `masked(v, i)` is the mask of the bits of byte `i` that
/// the ICRC replaces by ones.
fn masked_bits(v: IpVersion, i: usize) -> u8 {
    let ip = v.header_len();
    match (v, i) {
        // IPv4 TOS (DSCP+ECN), TTL, header checksum
        (IpVersion::V4, 1 | 8 | 10 | 11) => 0xFF,
        // IPv6 version(4) | traffic class(8) | flow label(20): all but the version
        (IpVersion::V6, 0) => 0x0F,
        (IpVersion::V6, 1..=3) => 0xFF,
        // IPv6 hop limit
        (IpVersion::V6, 7) => 0xFF,
        // UDP checksum
        (_, i) if i == ip + 6 || i == ip + 7 => 0xFF,
        // BTH byte 4: FECN, BECN, Resv6
        (_, i) if i == ip + 8 + 4 => 0xFF,
        _ => 0,
    }
}

/// The covered bytes (IP header to last pad byte) and the stored ICRC of an
/// emitted frame with no trailer.
fn covered(frame: &[u8], r: &RoceRepr) -> (usize, usize, u32) {
    let start = r.eth.header_len();
    let end = frame.len() - icrc::ICRC_LEN;
    (start, end, icrc::read(&frame[end..]))
}

/// Which bit to flip: anywhere in the covered bytes, or (half the time)
/// within the headers, which a uniform pick over a 4 KB payload rarely hits.
#[derive(Clone, Copy, Debug)]
enum Where {
    Anywhere(Index),
    Headers(Index),
}

fn where_() -> impl Strategy<Value = Where> {
    prop_oneof![
        any::<Index>().prop_map(Where::Anywhere),
        any::<Index>().prop_map(Where::Headers),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn flipping_any_covered_bit_changes_the_icrc(c in any_case(), w in where_()) {
        let frame = c.emit();
        let r = c.repr();
        let v = r.ip.version();
        let (start, end, stored) = covered(&frame, &r);
        let mut cov = frame[start..end].to_vec();
        prop_assert_eq!(icrc::compute(v, &cov), stored);
        let headers_len = v.header_len()
            + udp::HEADER_LEN
            + wire::bth::HEADER_LEN
            + r.opcode_info().unwrap().ext_len();
        // every bit the ICRC does not mask, in the chosen range
        let range = match w {
            Where::Anywhere(_) => cov.len(),
            Where::Headers(_) => headers_len,
        };
        let bits: Vec<(usize, u8)> = (0..range)
            .flat_map(|i| (0..8).map(move |b| (i, 1u8 << b)))
            .filter(|&(i, b)| masked_bits(v, i) & b == 0)
            .collect();
        let (Where::Anywhere(ix) | Where::Headers(ix)) = w;
        let (i, bit) = *ix.get(&bits);
        cov[i] ^= bit;
        prop_assert_ne!(
            icrc::compute(v, &cov),
            stored,
            "flipping bit {:#04x} of covered byte {} ({:?}) left the ICRC unchanged",
            bit,
            i,
            v
        );
    }

    /// Every single masked bit, flipped alone, leaves the ICRC alone.
    #[test]
    fn flipping_a_masked_bit_keeps_the_icrc(c in any_case(), ix in any::<Index>()) {
        let frame = c.emit();
        let r = c.repr();
        let v = r.ip.version();
        let (start, end, stored) = covered(&frame, &r);
        let mut cov = frame[start..end].to_vec();
        let bits: Vec<(usize, u8)> = (0..v.header_len() + 20)
            .flat_map(|i| (0..8).map(move |b| (i, 1u8 << b)))
            .filter(|&(i, b)| masked_bits(v, i) & b != 0)
            .collect();
        prop_assert_eq!(bits.len(), match v { IpVersion::V4 => 4 * 8 + 24, IpVersion::V6 => 28 + 8 + 24 });
        let (i, bit) = *ix.get(&bits);
        cov[i] ^= bit;
        prop_assert_eq!(icrc::compute(v, &cov), stored);
    }
}

/// What a router (or the NIC's own ECN marking) may rewrite in flight.
#[derive(Clone, Copy, Debug)]
struct Rewrite {
    /// Which of the fields below to apply (bit per field).
    which: u8,
    ttl: u8,
    tos: u8,
    ip_checksum: u16,
    flow_label: u32,
    udp_checksum: u16,
    fecn: bool,
    becn: bool,
    resv6: u8,
}

fn rewrite() -> impl Strategy<Value = Rewrite> {
    (
        1u8..=0x3F,
        any::<u8>(),
        any::<u8>(),
        any::<u16>(),
        0u32..1 << 20,
        any::<u16>(),
        any::<bool>(),
        any::<bool>(),
        0u8..64,
    )
        .prop_map(
            |(which, ttl, tos, ip_checksum, flow_label, udp_checksum, fecn, becn, resv6)| Rewrite {
                which,
                ttl,
                tos,
                ip_checksum,
                flow_label,
                udp_checksum,
                fecn,
                becn,
                resv6,
            },
        )
}

impl Rewrite {
    /// Applies the rewrite to covered bytes (starting at the IP header).
    /// `ip_checksum` and `udp_checksum` are written raw when `raw` is set.
    fn apply(&self, v: IpVersion, cov: &mut [u8], raw: bool) {
        let ip = v.header_len();
        let on = |bit: u8| self.which & (1 << bit) != 0;
        match v {
            IpVersion::V4 => {
                if on(0) {
                    cov[8] = self.ttl;
                }
                if on(1) {
                    cov[1] = self.tos;
                }
                if raw && on(2) {
                    cov[10..12].copy_from_slice(&self.ip_checksum.to_be_bytes());
                }
            }
            IpVersion::V6 => {
                if on(0) {
                    cov[7] = self.ttl;
                }
                let mut w0 = u32::from_be_bytes([cov[0], cov[1], cov[2], cov[3]]);
                if on(1) {
                    w0 = (w0 & !0x0FF0_0000) | (self.tos as u32) << 20;
                }
                if on(2) {
                    w0 = (w0 & !0x000F_FFFF) | self.flow_label;
                }
                cov[..4].copy_from_slice(&w0.to_be_bytes());
            }
        }
        if raw && on(3) {
            cov[ip + 6..ip + 8].copy_from_slice(&self.udp_checksum.to_be_bytes());
        }
        if on(4) || on(5) {
            let b4 = &mut cov[ip + 8 + 4];
            if on(4) {
                *b4 = (*b4 & !0x80) | (self.fecn as u8) << 7;
                *b4 = (*b4 & !0x40) | (self.becn as u8) << 6;
            }
            if on(5) {
                *b4 = (*b4 & !0x3F) | self.resv6;
            }
        }
    }
}

/// RFC 1071 checksum of an IPv4 header (checksum field taken as zero).
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

proptest! {
    #![proptest_config(config())]

    /// At the ICRC level: the masked fields take any value, the ICRC stays.
    #[test]
    fn router_rewrites_keep_the_icrc(c in any_case(), rw in rewrite()) {
        let frame = c.emit();
        let r = c.repr();
        let v = r.ip.version();
        let (start, end, stored) = covered(&frame, &r);
        let mut cov = frame[start..end].to_vec();
        rw.apply(v, &mut cov, true);
        prop_assert_eq!(icrc::compute(v, &cov), stored);
    }

    /// End to end: a frame rewritten the way a router does it (IPv4 header
    /// checksum and, when one is sent, the UDP checksum updated) parses with
    /// its ICRC intact and shows the new field values.
    #[test]
    fn router_rewritten_frames_still_parse(c in any_case(), rw in rewrite()) {
        let mut frame = c.emit();
        let r = c.repr();
        let v = r.ip.version();
        let start = r.eth.header_len();
        let end = frame.len();
        rw.apply(v, &mut frame[start..end], false);
        let ip = v.header_len();
        if v == IpVersion::V4 {
            let c = ipv4_header_checksum(&frame[start..start + 20]);
            frame[start + 10..start + 12].copy_from_slice(&c.to_be_bytes());
        }
        if r.udp_checksum == UdpChecksum::Computed {
            let u = start + ip;
            frame[u + 6..u + 8].fill(0);
            let c = match r.ip {
                IpRepr::V4(h) => udp::checksum_ipv4(h.src, h.dst, &frame[u..]),
                IpRepr::V6(h) => udp::checksum_ipv6(h.src, h.dst, &frame[u..]),
            };
            frame[u + 6..u + 8].copy_from_slice(&c.to_be_bytes());
        }
        let parsed = RoceRepr::parse(&frame)
            .map_err(|e| TestCaseError::fail(format!("{e} after {rw:?}")))?;
        let on = |bit: u8| rw.which & (1 << bit) != 0;
        let mut want = r;
        match &mut want.ip {
            IpRepr::V4(h) => {
                if on(0) {
                    h.ttl = rw.ttl;
                }
                if on(1) {
                    h.dscp = rw.tos >> 2;
                    h.ecn = rw.tos & 3;
                }
            }
            IpRepr::V6(h) => {
                if on(0) {
                    h.hop_limit = rw.ttl;
                }
                if on(1) {
                    h.dscp = rw.tos >> 2;
                    h.ecn = rw.tos & 3;
                }
                if on(2) {
                    h.flow_label = rw.flow_label;
                }
            }
        }
        if on(4) {
            want.bth.fecn = rw.fecn;
            want.bth.becn = rw.becn;
        }
        if on(5) {
            want.bth.resv6 = rw.resv6;
        }
        prop_assert_eq!(parsed, want);
    }

    #[test]
    fn every_rendering_is_one_line(c in any_case()) {
        let frame = c.emit();
        let r = c.repr();
        for s in [
            format!("{r}"),
            format!("{}", Frame::Roce(r)),
            format!("{}", RoceRepr::parse(&frame).unwrap()),
        ] {
            prop_assert!(!s.is_empty());
            prop_assert!(!s.contains(['\n', '\r']), "{:?}", s);
            prop_assert!(s.contains(r.bth.opcode.name()), "{:?}", s);
        }
    }

    #[test]
    fn mac_control_round_trips_and_renders_on_one_line(
        src in mac(),
        dst in mac(),
        pfc in any::<bool>(),
        class_enable in any::<u8>(),
        quanta in any::<[u16; 8]>(),
    ) {
        let control = if pfc {
            MacControl::Pfc { class_enable, quanta }
        } else {
            MacControl::Pause { quanta: quanta[0] }
        };
        let m = MacControlRepr { src, dst, control };
        let mut buf = [0u8; 64];
        let n = m.emit(&mut buf).unwrap();
        prop_assert_eq!(MacControlRepr::parse(&buf[..n]), Ok(m));
        prop_assert_eq!(Frame::parse(&buf[..n]), Ok(Frame::MacControl(m)));
        let s = format!("{}", Frame::MacControl(m));
        prop_assert!(!s.is_empty() && !s.contains(['\n', '\r']), "{:?}", s);
    }
}
