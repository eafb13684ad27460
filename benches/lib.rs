//! Shared helpers for the criterion benchmarks in this folder: the frames
//! they measure, built through the public `wire` API so that a benchmark
//! never measures a frame the codec would not produce itself.

use std::net::{Ipv4Addr, Ipv6Addr};
use wire::{
    EthernetAddress, EthernetRepr, ExtHeaders, IpRepr, Ipv4Repr, Ipv6Repr, Opcode, Psn, Reth,
    RoceRepr, UdpChecksum, UdpRepr,
};

/// Nanoseconds per call of `f` over a batch of `n` calls (the interleaved
/// `*_ratio`, `crc*` and `idle_turn` benchmarks, which time their cases
/// side by side outside criterion).
pub fn batch(n: usize, mut f: impl FnMut()) -> f64 {
    let t = std::time::Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

/// The minimum and the median of a set of timings.
pub fn min_median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2])
}

/// The payload sizes the wire benchmarks sweep.
pub const PAYLOAD_SIZES: [usize; 3] = [64, 1024, 4096];

/// A payload of `len` bytes with a non-trivial pattern.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ 0x5A)
        .collect()
}

/// The IP header of a benchmark frame.
pub fn ip(v6: bool) -> IpRepr {
    if v6 {
        IpRepr::V6(Ipv6Repr {
            src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
            dscp: 26,
            ecn: 2,
            flow_label: 0x1_2345,
            hop_limit: 64,
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(192, 168, 7, 1),
            dst: Ipv4Addr::new(192, 168, 7, 2),
            dscp: 26,
            ecn: 2,
            ident: 0x1234,
            dont_frag: true,
            ttl: 64,
        })
    }
}

/// An RC RDMA WRITE ONLY (BTH + RETH + payload) carrying `payload`, over
/// IPv4 or IPv6 with the given UDP checksum policy.
pub fn rdma_write_only(payload: &[u8], v6: bool, udp_checksum: UdpChecksum) -> RoceRepr<'_> {
    let mut bth = wire::BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, 0x00_0D2, Psn::new(0x12_3456));
    bth.ack_req = true;
    let ethertype = if v6 {
        wire::ethernet::ethertype::IPV6
    } else {
        wire::ethernet::ethertype::IPV4
    };
    RoceRepr {
        eth: EthernetRepr {
            dst: EthernetAddress([0x02, 0, 0, 0, 0, 0x02]),
            src: EthernetAddress([0x02, 0, 0, 0, 0, 0x01]),
            vlan: None,
            ethertype,
        },
        ip: ip(v6),
        udp: UdpRepr {
            src_port: wire::udp::rdma_udp_sport(0, 0x11, 0xD2),
            dst_port: wire::ROCEV2_PORT,
        },
        udp_checksum,
        bth,
        ext: ExtHeaders {
            reth: Some(Reth {
                va: 0x7f00_dead_b000,
                rkey: 0x1234,
                dma_len: payload.len() as u32,
            }),
            ..ExtHeaders::default()
        },
        payload,
        trailer_len: 0,
    }
}

/// The emitted bytes of `repr`.
pub fn frame(repr: &RoceRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf).expect("benchmark frame emits");
    buf.truncate(n);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_back() {
        for len in PAYLOAD_SIZES {
            let p = payload(len);
            for (v6, c) in [
                (false, UdpChecksum::Zero),
                (true, UdpChecksum::Computed),
                (true, UdpChecksum::Zero),
            ] {
                let r = rdma_write_only(&p, v6, c);
                let f = frame(&r);
                assert_eq!(RoceRepr::parse(&f).unwrap(), r);
            }
        }
    }
}
