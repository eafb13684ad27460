//! UDP segmentation offload for RoCEv2 frames: a train of consecutive
//! frames of one flow sent as one super-frame, and such a super-frame cut
//! back into its frames on receive.
//!
//! A super-frame is what Linux calls a UDP GSO packet (`SKB_GSO_UDP_L4`):
//! one Ethernet / IPv4 / UDP header and a UDP payload that is the
//! concatenation of equal-size segments (the last may be shorter). Whoever
//! segments it — the kernel's software GSO before a device without the
//! offload, a NIC, or [`Segments`] on receive — gives every segment the
//! super-frame's headers with its own lengths, the IPv4 identification of
//! the first plus the segment's index, and fresh checksums.
//!
//! A train therefore holds exactly the frames that segmentation gives
//! back: untagged IPv4 (IHL 5, not fragmented) UDP frames whose headers
//! agree in every byte but the lengths, the identification and the
//! checksums, each identification one more than the one before, all with
//! the same UDP payload length but the last, which may be shorter. The
//! ICRC of each frame covers its identification and lengths (RoCEv2
//! A17.4.3.1 masks only TOS, TTL and the checksums), which is why a frame
//! whose identification does not follow is never taken in: the segment
//! built for it would carry another one and fail the peer's ICRC check.
//! IPv6 frames are not coalesced (their UDP checksum would have to be
//! recomputed over each segment on receive).

use crate::bytes::{be16, put16};
use crate::{ethernet, ipv4, udp};

/// Where the IPv4 header starts in a coalescable frame (untagged).
const L3: usize = ethernet::HEADER_LEN;
/// Where the UDP header starts.
const L4: usize = L3 + ipv4::HEADER_LEN;
/// The Ethernet, IPv4 and UDP headers of a super-frame or segment.
pub const HEADERS_LEN: usize = L4 + udp::HEADER_LEN;
/// Where the UDP checksum lies, from the start of the UDP header (what
/// a GSO request names as the checksum's offset).
pub const UDP_CHECKSUM_OFFSET: usize = 6;
/// The longest UDP payload of a super-frame: an IPv4 datagram's length
/// field holds at most 65535 bytes.
pub const MAX_PAYLOAD: usize = 65535 - ipv4::HEADER_LEN - udp::HEADER_LEN;
/// The start of the UDP header in a super-frame (its checksum's start).
pub const UDP_AT: usize = L4;

/// Why a received super-frame cannot be cut into segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GsoError {
    /// Not untagged IPv4 (IHL 5) carrying UDP.
    #[error("not an untagged IPv4 UDP frame")]
    NotIpv4Udp,
    /// The IPv4 or UDP length does not match the frame's.
    #[error("IPv4/UDP lengths disagree with the frame")]
    BadLength,
    /// A segment size of zero.
    #[error("segment size 0")]
    ZeroSegment,
}

/// The UDP payload length of `frame` if it can be in a train: untagged
/// IPv4, IHL 5, no fragment flags or offset, UDP, and lengths that
/// account for every byte of the frame (no Ethernet padding).
fn udp_payload_len(frame: &[u8]) -> Option<usize> {
    if frame.len() < HEADERS_LEN || be16(frame, 12) != ethernet::ethertype::IPV4 {
        return None;
    }
    let ip = &frame[L3..];
    let frag = be16(ip, ipv4::field::FLAGS_FRAG) & 0x3FFF;
    if ip[ipv4::field::VER_IHL] != 0x45
        || ip[ipv4::field::PROTOCOL] != ipv4::PROTOCOL_UDP
        || frag != 0
    {
        return None;
    }
    let ip_len = be16(ip, ipv4::field::LEN) as usize;
    let udp_len = be16(frame, L4 + 4) as usize;
    let payload = frame.len() - HEADERS_LEN;
    (ip_len == frame.len() - L3 && udp_len == payload + udp::HEADER_LEN && payload > 0)
        .then_some(payload)
}

/// The header bytes every frame of a train shares: everything up to the
/// UDP checksum but the IPv4 length, identification and checksum and the
/// UDP length.
fn same_headers(a: &[u8], b: &[u8]) -> bool {
    use ipv4::field as f;
    let ranges = [
        0..L3 + f::LEN,
        L3 + f::FLAGS_FRAG..L3 + f::CHECKSUM,
        L3 + f::SRC..L4 + 4,
    ];
    ranges.into_iter().all(|r| a[r.clone()] == b[r])
}

/// A train being built: the first frame's shape and how many frames
/// have joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Train {
    /// The UDP payload length of every frame but (perhaps) the last: the
    /// segment size.
    pub segment: usize,
    /// Frames in the train.
    pub frames: usize,
    /// Their UDP payload bytes together.
    pub payload: usize,
    ident: u16,
    /// A shorter frame joined: nothing can follow it.
    closed: bool,
}

impl Train {
    /// A train that starts with `first`, or `None` when `first` cannot be
    /// in one (see the module docs).
    pub fn start(first: &[u8]) -> Option<Train> {
        let segment = udp_payload_len(first)?;
        Some(Train {
            segment,
            frames: 1,
            payload: segment,
            ident: be16(first, L3 + ipv4::field::IDENT),
            closed: false,
        })
    }

    /// Takes `next` in if segmenting the train's super-frame would give it
    /// back byte for byte (but its checksums) and the payload stays within
    /// `max_payload` bytes ([`MAX_PAYLOAD`] at most); `first` is the
    /// train's first frame.
    pub fn push(&mut self, first: &[u8], next: &[u8], max_payload: usize) -> bool {
        if self.closed || next.len() < HEADERS_LEN {
            return false;
        }
        let Some(len) = udp_payload_len(next) else {
            return false;
        };
        let ident = self.ident.wrapping_add(self.frames as u16);
        let fits = self.payload + len <= max_payload.min(MAX_PAYLOAD);
        if len > self.segment
            || !fits
            || be16(next, L3 + ipv4::field::IDENT) != ident
            || !same_headers(first, next)
        {
            return false;
        }
        self.closed = len < self.segment;
        self.frames += 1;
        self.payload += len;
        true
    }

    /// Writes the super-frame's headers into `out` (at least
    /// [`HEADERS_LEN`] bytes): `first`'s, with the lengths of the whole
    /// train, a fresh IPv4 checksum, and in the UDP checksum field the
    /// pseudo-header's sum, not complemented, as a checksum left to be
    /// finished by whoever segments the frame (Linux's CHECKSUM_PARTIAL)
    /// expects. The payloads follow at [`HEADERS_LEN`].
    pub fn write_headers(&self, first: &[u8], out: &mut [u8]) {
        out[..HEADERS_LEN].copy_from_slice(&first[..HEADERS_LEN]);
        let udp_len = (self.payload + udp::HEADER_LEN) as u16;
        set_lengths(out, udp_len);
        let (src, dst) = (L3 + ipv4::field::SRC, L3 + ipv4::field::DST);
        let sum = udp::pseudo_header_sum(&out[src..src + 4], &out[dst..dst + 4], udp_len as usize);
        put16(out, L4 + UDP_CHECKSUM_OFFSET, sum);
    }
}

/// Sets the IPv4 and UDP lengths of the headers in `h` for a UDP length
/// of `udp_len` and recomputes the IPv4 checksum.
fn set_lengths(h: &mut [u8], udp_len: u16) {
    put16(h, L4 + 4, udp_len);
    let ip = &mut h[L3..L4];
    put16(ip, ipv4::field::LEN, udp_len + ipv4::HEADER_LEN as u16);
    let check = ipv4::header_checksum(ip);
    put16(ip, ipv4::field::CHECKSUM, check);
}

/// A received super-frame cut into its segments, one at a time.
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    frame: &'a [u8],
    segment: usize,
    /// Where the next segment's payload starts in `frame`.
    at: usize,
    index: u16,
}

impl<'a> Segments<'a> {
    /// The segments of `frame`, every one `segment` bytes of UDP payload
    /// but the last. Refuses a frame that is not untagged IPv4 UDP or
    /// whose lengths disagree with its size (never panics).
    pub fn new(frame: &'a [u8], segment: usize) -> Result<Segments<'a>, GsoError> {
        if segment == 0 {
            return Err(GsoError::ZeroSegment);
        }
        if frame.len() < HEADERS_LEN
            || be16(frame, 12) != ethernet::ethertype::IPV4
            || frame[L3] != 0x45
            || frame[L3 + ipv4::field::PROTOCOL] != ipv4::PROTOCOL_UDP
        {
            return Err(GsoError::NotIpv4Udp);
        }
        let ip_len = be16(frame, L3 + ipv4::field::LEN) as usize;
        let udp_len = be16(frame, L4 + 4) as usize;
        let payload = frame.len() - HEADERS_LEN;
        if ip_len != frame.len() - L3 || udp_len != payload + udp::HEADER_LEN || payload == 0 {
            return Err(GsoError::BadLength);
        }
        Ok(Segments {
            frame,
            segment,
            at: HEADERS_LEN,
            index: 0,
        })
    }

    /// The segments of `frame` after the first `taken` (as [`Self::new`]
    /// checks it); none are left when `taken` covers them all.
    pub fn resume(frame: &'a [u8], segment: usize, taken: usize) -> Result<Segments<'a>, GsoError> {
        let mut s = Segments::new(frame, segment)?;
        let skip = taken.min(s.remaining());
        s.at = (s.at + skip * segment).min(frame.len());
        s.index = s.index.wrapping_add(skip as u16);
        Ok(s)
    }

    /// Segments not yet taken.
    pub fn remaining(&self) -> usize {
        (self.frame.len() - self.at).div_ceil(self.segment)
    }

    /// The longest segment, headers included.
    pub fn max_len(&self) -> usize {
        HEADERS_LEN + self.segment
    }

    /// Writes the next segment into `out` and returns its length, or
    /// `None` when none is left or `out` is too short for it (then the
    /// segment stays next).
    pub fn next_into(&mut self, out: &mut [u8]) -> Option<usize> {
        let left = self.frame.len() - self.at;
        if left == 0 {
            return None;
        }
        let len = left.min(self.segment);
        let n = HEADERS_LEN + len;
        if out.len() < n {
            return None;
        }
        out[..HEADERS_LEN].copy_from_slice(&self.frame[..HEADERS_LEN]);
        out[HEADERS_LEN..n].copy_from_slice(&self.frame[self.at..self.at + len]);
        let ident = be16(self.frame, L3 + ipv4::field::IDENT).wrapping_add(self.index);
        put16(out, L3 + ipv4::field::IDENT, ident);
        // RoCEv2 over IPv4 may send no UDP checksum (the ICRC covers the
        // packet); the segment's is left 0.
        put16(out, L4 + UDP_CHECKSUM_OFFSET, 0);
        set_lengths(out, (len + udp::HEADER_LEN) as u16);
        self.at += len;
        self.index = self.index.wrapping_add(1);
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An untagged IPv4 UDP frame with ident `id` and `payload` bytes.
    fn frame(id: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; HEADERS_LEN + payload.len()];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        put16(&mut f, 12, ethernet::ethertype::IPV4);
        f[L3] = 0x45;
        f[L3 + 1] = 0x02;
        put16(&mut f, L3 + ipv4::field::IDENT, id);
        put16(&mut f, L3 + ipv4::field::FLAGS_FRAG, 0x4000);
        f[L3 + ipv4::field::TTL] = 64;
        f[L3 + ipv4::field::PROTOCOL] = ipv4::PROTOCOL_UDP;
        f[L3 + 12..L3 + 16].copy_from_slice(&[10, 0, 0, 1]);
        f[L3 + 16..L3 + 20].copy_from_slice(&[10, 0, 0, 2]);
        put16(&mut f, L4, 0xC000);
        put16(&mut f, L4 + 2, udp::ROCEV2_PORT);
        f[HEADERS_LEN..].copy_from_slice(payload);
        set_lengths(&mut f, (payload.len() + 8) as u16);
        f
    }

    /// Gathers `frames` into super-frames as a sender would, then cuts
    /// each back: the frames come back byte for byte.
    fn round_trip(frames: &[Vec<u8>], max_payload: usize) -> (Vec<Vec<u8>>, usize) {
        let mut out = Vec::new();
        let mut supers = 0;
        let mut i = 0;
        while i < frames.len() {
            let Some(mut t) = Train::start(&frames[i]) else {
                out.push(frames[i].clone());
                i += 1;
                continue;
            };
            let mut j = i + 1;
            while j < frames.len() && t.push(&frames[i], &frames[j], max_payload) {
                j += 1;
            }
            let mut sup = vec![0u8; HEADERS_LEN];
            t.write_headers(&frames[i], &mut sup);
            for f in &frames[i..j] {
                sup.extend_from_slice(&f[HEADERS_LEN..]);
            }
            assert_eq!(sup.len(), HEADERS_LEN + t.payload);
            let mut segs = Segments::new(&sup, t.segment).unwrap();
            assert_eq!(segs.remaining(), j - i);
            let mut buf = vec![0u8; segs.max_len()];
            while let Some(n) = segs.next_into(&mut buf) {
                out.push(buf[..n].to_vec());
            }
            supers += 1;
            i = j;
        }
        (out, supers)
    }

    #[test]
    fn a_train_cut_back_gives_its_frames() {
        let p = |n: usize, k: u8| (0..n).map(|x| x as u8 ^ k).collect::<Vec<u8>>();
        let frames: Vec<Vec<u8>> = (0..5u16)
            .map(|i| {
                frame(
                    0xFFFE_u16.wrapping_add(i),
                    &p(if i == 4 { 300 } else { 1040 }, i as u8),
                )
            })
            .collect();
        let (back, supers) = round_trip(&frames, MAX_PAYLOAD);
        assert_eq!(supers, 1);
        assert_eq!(back, frames, "identifications wrap, the last is shorter");
    }

    #[test]
    fn frames_segmentation_would_change_are_kept_out() {
        let a = frame(7, &[1; 100]);
        let mut t = Train::start(&a).unwrap();
        assert!(
            !t.push(&a, &frame(9, &[1; 100]), MAX_PAYLOAD),
            "ident skips"
        );
        assert!(
            !t.push(&a, &frame(7, &[1; 100]), MAX_PAYLOAD),
            "ident repeats"
        );
        assert!(!t.push(&a, &frame(8, &[1; 101]), MAX_PAYLOAD), "longer");
        let mut other = frame(8, &[1; 100]);
        other[L4] ^= 1; // another source port
        assert!(!t.push(&a, &other, MAX_PAYLOAD));
        let mut ttl = frame(8, &[1; 100]);
        ttl[L3 + ipv4::field::TTL] = 3;
        assert!(!t.push(&a, &ttl, MAX_PAYLOAD));
        assert!(!t.push(&a, &frame(8, &[1; 100]), 150), "over the limit");
        assert!(t.push(&a, &frame(8, &[1; 50]), MAX_PAYLOAD));
        assert!(!t.push(&a, &frame(9, &[1; 50]), MAX_PAYLOAD), "closed");
        assert_eq!((t.frames, t.payload, t.segment), (2, 150, 100));
        // padded, tagged, fragmented or not UDP: no train
        let mut padded = frame(1, &[0; 4]);
        padded.extend_from_slice(&[0; 8]);
        assert!(Train::start(&padded).is_none());
        let mut mf = frame(1, &[0; 40]);
        mf[L3 + ipv4::field::FLAGS_FRAG] |= 0x20;
        assert!(Train::start(&mf).is_none());
        let mut tcp = frame(1, &[0; 40]);
        tcp[L3 + ipv4::field::PROTOCOL] = 6;
        assert!(Train::start(&tcp).is_none());
        let mut vlan = frame(1, &[0; 40]);
        put16(&mut vlan, 12, 0x8100);
        assert!(Train::start(&vlan).is_none());
    }

    #[test]
    fn the_partial_checksum_is_the_pseudo_headers_sum() {
        let a = frame(1, &[0xAB; 64]);
        let t = Train::start(&a).unwrap();
        let mut h = [0u8; HEADERS_LEN];
        t.write_headers(&a, &mut h);
        // finishing it over the UDP header and payload gives the checksum
        // the datagram would have
        let mut d = a[L4..].to_vec();
        put16(
            &mut d,
            UDP_CHECKSUM_OFFSET,
            be16(&h, L4 + UDP_CHECKSUM_OFFSET),
        );
        let finished = !crate::bytes::ones_complement_sum(0, &d) as u16;
        let mut zeroed = a[L4..].to_vec();
        put16(&mut zeroed, UDP_CHECKSUM_OFFSET, 0);
        let want = udp::checksum_ipv4([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), &zeroed);
        assert_eq!(finished, want);
    }

    #[test]
    fn received_super_frames_are_checked_not_trusted() {
        let a = frame(1, &[0; 64]);
        assert_eq!(Segments::new(&a, 0).unwrap_err(), GsoError::ZeroSegment);
        assert_eq!(
            Segments::new(&a[..30], 8).unwrap_err(),
            GsoError::NotIpv4Udp
        );
        let mut bad = a.clone();
        put16(&mut bad, L3 + ipv4::field::LEN, 500);
        assert_eq!(Segments::new(&bad, 8).unwrap_err(), GsoError::BadLength);
        let mut s = Segments::new(&a, 60).unwrap();
        assert_eq!(s.remaining(), 2);
        assert_eq!(s.next_into(&mut [0u8; 10]), None, "too short: stays next");
        let mut buf = [0u8; 200];
        assert_eq!(s.next_into(&mut buf), Some(HEADERS_LEN + 60));
        assert_eq!(s.next_into(&mut buf), Some(HEADERS_LEN + 4));
        assert_eq!(s.next_into(&mut buf), None);
        let mut r = Segments::resume(&a, 60, 1).unwrap();
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.next_into(&mut buf), Some(HEADERS_LEN + 4));
        assert_eq!(Segments::resume(&a, 60, 9).unwrap().remaining(), 0);
    }

    proptest::proptest! {
        #[test]
        fn any_cut_is_checked_and_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            seg in 0usize..80,
        ) {
            if let Ok(mut s) = Segments::new(&bytes, seg) {
                let mut buf = [0u8; 200];
                let mut total = 0;
                while let Some(n) = s.next_into(&mut buf) {
                    total += n - HEADERS_LEN;
                }
                proptest::prop_assert_eq!(total, bytes.len() - HEADERS_LEN);
            }
        }

        #[test]
        fn trains_of_any_shape_come_back(
            sizes in proptest::collection::vec(1usize..300, 1..12),
            skip in proptest::option::of(0usize..12),
            start in proptest::prelude::any::<u16>(),
            max in 1usize..4000,
        ) {
            let mut id = start;
            let frames: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| {
                if Some(i) == skip { id = id.wrapping_add(3); }
                let f = frame(id, &vec![i as u8; n]);
                id = id.wrapping_add(1);
                f
            }).collect();
            let (back, _) = round_trip(&frames, max);
            proptest::prop_assert_eq!(back, frames);
        }
    }
}
