//! Ethernet II with an optional IEEE 802.1Q tag.

use crate::bytes::{be16, put16};
use crate::error::{need, Layer, Result};
use core::fmt;

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address, ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);
    /// IEEE 802.1Qbb / 802.3x MAC control destination (01:80:C2:00:00:01).
    pub const MAC_CONTROL: EthernetAddress = EthernetAddress([0x01, 0x80, 0xC2, 0, 0, 0x01]);

    /// The address in the first six bytes of `b`; panics if `b` is shorter.
    #[inline(always)]
    pub fn from_bytes(b: &[u8]) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&b[..6]);
        EthernetAddress(a)
    }

    /// True for a group address: the I/G bit (bit 0 of the first byte) is set.
    /// Broadcast is a multicast address.
    #[inline(always)]
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// EtherType values this crate understands; others are kept as numbers.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// IPv6.
    pub const IPV6: u16 = 0x86DD;
    /// The TPID of an IEEE 802.1Q tag, which sits after the source address.
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.3 MAC control (PAUSE, PFC).
    pub const MAC_CONTROL: u16 = 0x8808;
    /// ARP (RFC 826).
    pub const ARP: u16 = 0x0806;
    /// The TPID of an IEEE 802.1ad service tag (QinQ, outside an 802.1Q tag).
    pub const QINQ: u16 = 0x88A8;
    /// LLDP (IEEE 802.1AB).
    pub const LLDP: u16 = 0x88CC;
    /// FCoE.
    pub const FCOE: u16 = 0x8906;
}

/// An 802.1Q tag: priority code point, drop-eligible indicator, VLAN id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct VlanTag {
    /// Priority code point (0-7), the 802.1p priority; PFC pauses per PCP.
    pub pcp: u8,
    /// Drop eligible indicator.
    #[cfg_attr(feature = "serde", serde(default))]
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    fn tci(&self) -> u16 {
        ((self.pcp as u16 & 7) << 13) | ((self.dei as u16) << 12) | (self.vid & 0x0FFF)
    }

    #[inline(always)]
    pub(crate) fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0FFF,
        }
    }
}

pub(crate) mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const TYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_TYPE: usize = 16;
}

/// Length of an untagged Ethernet II header: two addresses and the EtherType.
pub const HEADER_LEN: usize = 14;
/// Length of a header with one 802.1Q tag (4 more bytes: TPID and TCI).
pub const VLAN_HEADER_LEN: usize = 18;
/// Minimum Ethernet frame length without the FCS.
pub const MIN_FRAME_LEN: usize = 60;

/// A zero-copy view of an Ethernet header (with its optional 802.1Q tag).
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` without checks; the accessors then panic on a buffer
    /// shorter than the header. Use [`Self::new_checked`] on untrusted input.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Validates that the header (and the VLAN tag when present) fits.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        let b = f.buffer.as_ref();
        need(Layer::Ethernet, b, HEADER_LEN)?;
        if be16(b, field::TYPE) == ethertype::VLAN {
            need(Layer::Vlan, b, VLAN_HEADER_LEN)?;
        }
        Ok(f)
    }

    /// Destination MAC address (bytes 0-5).
    #[inline(always)]
    pub fn dst(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::DST])
    }

    /// Source MAC address (bytes 6-11).
    #[inline(always)]
    pub fn src(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::SRC])
    }

    /// The 802.1Q tag, when the outer EtherType is [`ethertype::VLAN`].
    #[inline(always)]
    pub fn vlan(&self) -> Option<VlanTag> {
        let b = self.buffer.as_ref();
        (be16(b, field::TYPE) == ethertype::VLAN).then(|| VlanTag::from_tci(be16(b, field::TCI)))
    }

    /// The EtherType of what follows (after the tag, if tagged).
    #[inline(always)]
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        match be16(b, field::TYPE) {
            ethertype::VLAN => be16(b, field::INNER_TYPE),
            t => t,
        }
    }

    /// Header length: [`VLAN_HEADER_LEN`] when tagged, else [`HEADER_LEN`].
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        if be16(self.buffer.as_ref(), field::TYPE) == ethertype::VLAN {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The bytes after the header (and tag), to the end of the buffer.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The parsed form of an Ethernet header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst: EthernetAddress,
    /// Source MAC address.
    pub src: EthernetAddress,
    /// The 802.1Q tag, if the frame is tagged.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload (the inner one when tagged); see [`ethertype`].
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the fields of a checked header.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> EthernetRepr {
        EthernetRepr {
            dst: f.dst(),
            src: f.src(),
            vlan: f.vlan(),
            ethertype: f.ethertype(),
        }
    }

    /// Length the header takes on emit: [`VLAN_HEADER_LEN`] with a tag, else
    /// [`HEADER_LEN`].
    #[inline(always)]
    pub const fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header into the front of `buf` (which must hold `header_len()`).
    pub fn emit(&self, buf: &mut [u8]) {
        buf[field::DST].copy_from_slice(&self.dst.0);
        buf[field::SRC].copy_from_slice(&self.src.0);
        match self.vlan {
            Some(tag) => {
                put16(buf, field::TYPE, ethertype::VLAN);
                put16(buf, field::TCI, tag.tci());
                put16(buf, field::INNER_TYPE, self.ethertype);
            }
            None => put16(buf, field::TYPE, self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vlan_tag_round_trip() {
        let repr = EthernetRepr {
            dst: EthernetAddress([2, 0, 0, 0, 0, 1]),
            src: EthernetAddress([2, 0, 0, 0, 0, 2]),
            vlan: Some(VlanTag {
                pcp: 3,
                dei: true,
                vid: 0x123,
            }),
            ethertype: ethertype::IPV4,
        };
        let mut buf = [0u8; 18];
        repr.emit(&mut buf);
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0x71, 0x23, 0x08, 0x00]);
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&f), repr);
        assert_eq!(f.header_len(), 18);
        assert!(EthernetFrame::new_checked(&buf[..15]).is_err());
        assert!(EthernetFrame::new_checked(&buf[..13]).is_err());
    }
}
