//! 24-bit packet sequence numbers.
//!
//! IBA 9.7.1: the PSN is a 24-bit field that wraps from 0xFFFFFF to 0.
//! Comparisons are made in serial-number arithmetic (as RFC 1982 does for
//! 32-bit numbers): `a` is before `b` when `b - a (mod 2^24)` lies in
//! `1 .. 2^23`. IBA 9.7.5.1.1 splits the PSN space the same way into a valid
//! (ahead) half and an invalid/duplicate (behind) half.

use core::fmt;

/// A 24-bit packet sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The 24 bits a PSN occupies.
    pub const MASK: u32 = 0x00FF_FFFF;
    /// The size of the PSN space, 2^24; PSN arithmetic is modulo this.
    pub const MODULUS: u32 = 1 << 24;
    const HALF: u32 = 1 << 23;

    /// A PSN from the low 24 bits of `v` (higher bits are discarded).
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The PSN as a number in 0 ..= 0xFF_FFFF.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[inline]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// The next PSN, wrapping from 0xFF_FFFF to 0.
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Forward distance from `self` to `later`, modulo 2^24 (0 ..= 2^24 - 1).
    #[inline]
    pub const fn distance_to(self, later: Psn) -> u32 {
        later.0.wrapping_sub(self.0) & Self::MASK
    }

    /// Signed serial-number difference `self - other`, in -2^23 ..= 2^23 - 1.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back to
        // sign-extend it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Serial-number "strictly before".
    #[inline]
    pub const fn before(self, other: Psn) -> bool {
        let d = self.distance_to(other);
        d != 0 && d < Self::HALF
    }

    /// Serial-number "strictly after".
    #[inline]
    pub const fn after(self, other: Psn) -> bool {
        other.before(self)
    }

    /// True if `self` lies in the half-open window `[start, start + len)`.
    #[inline]
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        start.distance_to(self) < len
    }
}

impl From<u32> for Psn {
    fn from(v: u32) -> Psn {
        Psn::new(v)
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(0xFF_FFFF).next(), Psn::new(0));
        assert_eq!(Psn::new(0xFF_FFFE).add(5), Psn::new(3));
        assert_eq!(Psn::new(2).sub(5), Psn::new(0xFF_FFFD));
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
    }

    #[test]
    fn serial_compare_across_wrap() {
        let a = Psn::new(0xFF_FFF0);
        let b = Psn::new(0x10);
        assert!(a.before(b));
        assert!(b.after(a));
        assert!(!b.before(a));
        assert_eq!(a.distance_to(b), 0x20);
        assert_eq!(b.diff(a), 0x20);
        assert_eq!(a.diff(b), -0x20);
        assert!(!a.before(a));
        // exactly half-way is not "before" in either direction
        let h = Psn::new(0).add(1 << 23);
        assert!(!Psn::new(0).before(h) || !h.before(Psn::new(0)));
    }

    #[test]
    fn window_membership() {
        let start = Psn::new(0xFF_FFFE);
        assert!(Psn::new(0xFF_FFFE).in_window(start, 4));
        assert!(Psn::new(1).in_window(start, 4));
        assert!(!Psn::new(2).in_window(start, 4));
        assert!(!Psn::new(0xFF_FFFD).in_window(start, 4));
    }
}
