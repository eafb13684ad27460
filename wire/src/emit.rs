//! The one emitter of RoCEv2 frames: headers, payload, pad, ICRC and UDP
//! checksum laid out from a [`RoceRepr`].
//!
//! [`emit_with`] writes the headers first, then lets its caller write the
//! payload straight into its place through a [`Payload`] (from registered
//! memory, say: no staging copy), folding each byte into the ICRC as it is
//! copied (`crc_copy`: one pass over the payload); the pad, the ICRC and
//! the UDP checksum follow. [`RoceRepr::emit`] is `emit_with` with the
//! repr's own payload.

use crate::error::{Error, Result};
use crate::ethernet::EthernetRepr;
use crate::icrc::{self, Icrc, ICRC_LEN};
use crate::roce::{pad_for, IpRepr, RoceRepr, UdpChecksum};
use crate::{bth, udp, BthRepr};

/// Payloads shorter than this are copied first and covered by one ICRC
/// pass over the whole datagram afterwards: below about 256 bytes the fused
/// copy is no faster than copy + CRC (`crc_copy` bench), and one CRC update
/// over headers and payload together saves the fixed cost of a separate
/// one.
pub const FUSE_MIN: usize = 256;

/// Where a frame's payload is written: front to back, each piece copied
/// into the frame and, for a payload of [`FUSE_MIN`] bytes or more, covered
/// by the ICRC in the same pass.
pub struct Payload<'a> {
    dst: &'a mut [u8],
    at: usize,
    /// `None`: copy only (a short payload; see [`FUSE_MIN`]).
    icrc: Option<Icrc>,
}

impl Payload<'_> {
    /// Payload bytes not written yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.dst.len() - self.at
    }

    /// Appends `src`.
    ///
    /// # Panics
    /// If `src` is longer than [`Self::remaining`].
    #[inline]
    pub fn put(&mut self, src: &[u8]) {
        self.put_with(src.len(), |dst, icrc| match icrc {
            Some(icrc) => icrc.copy(src, dst),
            None => dst.copy_from_slice(src),
        });
    }

    /// Appends `len` bytes that `write` puts into the slice it is given:
    /// when it is given an ICRC too, it must cover exactly the bytes it
    /// wrote (as [`Icrc::copy`] does); without one it only copies.
    ///
    /// # Panics
    /// If `len` is more than [`Self::remaining`].
    #[inline]
    pub fn put_with(&mut self, len: usize, write: impl FnOnce(&mut [u8], Option<&mut Icrc>)) {
        let end = self.at + len;
        write(&mut self.dst[self.at..end], self.icrc.as_mut());
        self.at = end;
    }
}

impl RoceRepr<'_> {
    /// Writes the frame into `buf` and returns its length. Lengths, pad,
    /// the IPv4 header checksum, the ICRC and (by policy) the UDP checksum
    /// are computed here.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let fill = |p: &mut Payload<'_>| {
            p.put(self.payload);
            Ok::<(), core::convert::Infallible>(())
        };
        match emit_frame(self, self.payload.len(), buf, usize::MAX, fill) {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }
}

/// Writes the frame `repr` describes into `buf`, with a payload of
/// `payload_len` bytes written by `fill` into its place in the frame
/// (`repr.payload` is ignored); payload bytes `fill` leaves unwritten are
/// zeros. `fill`'s error is returned as is, and `buf` then holds no frame
/// (its headers may have been written). `Ok(None)`: the repr is not valid
/// or `buf` is too small (as [`RoceRepr::emit`] fails), and `fill` did not
/// run.
///
/// Inlined into its callers: its result, returned through memory, was
/// read back with a wider load than it was stored with (a store-forwarding
/// stall on every frame).
#[inline(always)]
pub fn emit_with<E>(
    repr: &RoceRepr<'_>,
    payload_len: usize,
    buf: &mut [u8],
    fill: impl FnOnce(&mut Payload<'_>) -> core::result::Result<(), E>,
) -> core::result::Result<Option<usize>, E> {
    Ok(emit_frame(repr, payload_len, buf, FUSE_MIN, fill)?.ok())
}

/// `emit_with`, telling why a frame could not be built; the ICRC is fused
/// into the payload's copy from `fuse_min` bytes of payload on. A payload
/// already in a slice (`RoceRepr::emit`) is copied and then covered in one
/// pass with the headers (`usize::MAX`): the CRC kernel over the whole
/// datagram is faster than the fused copy when nothing is saved by reading
/// the source once (`wire_ratio`'s `build_icrc`).
#[inline(always)]
fn emit_frame<E>(
    repr: &RoceRepr<'_>,
    payload_len: usize,
    buf: &mut [u8],
    fuse_min: usize,
    fill: impl FnOnce(&mut Payload<'_>) -> core::result::Result<(), E>,
) -> core::result::Result<Result<usize>, E> {
    // Validated in place: only the payload's length matters.
    let info = match repr.validate_with_payload_len(payload_len) {
        Ok(info) => info,
        Err(e) => return Ok(Err(e)),
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
    let udp_len = icrc_at + ICRC_LEN - udp_at;
    let total = icrc_at + ICRC_LEN + repr.trailer_len;
    if buf.len() < total {
        return Ok(Err(Error::BufferTooSmall {
            need: total,
            have: buf.len(),
        }));
    }
    let buf = &mut buf[..total];
    let eth = EthernetRepr {
        ethertype: repr.ip.ethertype(),
        ..repr.eth
    };
    eth.emit(buf);
    match &repr.ip {
        IpRepr::V4(r) => r.emit(&mut buf[ip_at..], udp_len),
        IpRepr::V6(r) => r.emit(&mut buf[ip_at..], udp_len),
    }
    repr.udp.emit(&mut buf[udp_at..], udp_len - udp::HEADER_LEN);
    BthRepr { pad, ..repr.bth }.emit(&mut buf[bth_at..]);
    repr.ext.emit(info, &mut buf[ext_at..]);
    // The ICRC (RoCEv2 A17.4.3.1) covers the IP header through the pad:
    // the headers now, with their variant fields masked by `Icrc::new`,
    // then the payload as `fill` copies it in, then the pad.
    let (front, rest) = buf.split_at_mut(payload_at);
    let mut payload = Payload {
        dst: &mut rest[..payload_len],
        at: 0,
        icrc: (payload_len >= fuse_min).then(|| Icrc::new(repr.ip.version(), &front[ip_at..])),
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
        let end = icrc_at + ICRC_LEN;
        let c = match &repr.ip {
            IpRepr::V4(r) => udp::checksum_ipv4(r.src, r.dst, &buf[udp_at..end]),
            IpRepr::V6(r) => udp::checksum_ipv6(r.src, r.dst, &buf[udp_at..end]),
        };
        udp::set_checksum(&mut buf[udp_at..], c);
    }
    buf[icrc_at + ICRC_LEN..].fill(0);
    Ok(Ok(total))
}
