//! MAC control frames: IEEE 802.3x PAUSE and IEEE 802.1Qbb priority-based
//! flow control (PFC), EtherType 0x8808 to 01:80:C2:00:00:01.
//!
//! ```text
//! PAUSE: opcode 0x0001, pause_time(16)
//! PFC:   opcode 0x0101, class-enable vector(16, low 8 bits used), time[0..8](16 each)
//! ```
//! Times are in quanta of 512 bit times; the frame is padded to 60 bytes.

use crate::bytes::{be16, put16};
use crate::error::{need, Error, Layer, Result};
use crate::ethernet::{ethertype, EthernetAddress, EthernetFrame, EthernetRepr, MIN_FRAME_LEN};
use core::fmt;

/// MAC control opcode of an 802.3x PAUSE frame.
pub const OPCODE_PAUSE: u16 = 0x0001;
/// MAC control opcode of an 802.1Qbb PFC frame.
pub const OPCODE_PFC: u16 = 0x0101;
/// Bit times in one pause quantum (IEEE 802.3 Annex 31B).
pub const BITS_PER_QUANTUM: u64 = 512;

/// A PAUSE or PFC frame.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MacControl {
    /// 802.3x: pause every priority for `quanta`.
    Pause {
        /// Pause time in quanta of [`BITS_PER_QUANTUM`] bit times; 0 resumes
        /// at once.
        quanta: u16,
    },
    /// 802.1Qbb: for each priority whose bit is set in `class_enable`, pause
    /// for `quanta[p]` (0 resumes at once).
    Pfc {
        /// Priority-enable vector: bit `p` set means `quanta[p]` applies.
        class_enable: u8,
        /// Pause time per priority (index = 802.1p priority), in quanta.
        quanta: [u16; 8],
    },
}

/// A whole MAC control frame.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MacControlRepr {
    /// Source MAC address: the port that sends the pause.
    pub src: EthernetAddress,
    /// Destination MAC address, normally [`EthernetAddress::MAC_CONTROL`].
    pub dst: EthernetAddress,
    /// The PAUSE or PFC request.
    pub control: MacControl,
}

impl MacControlRepr {
    /// A PFC frame from `src` to the reserved MAC control address.
    pub fn pfc(src: EthernetAddress, class_enable: u8, quanta: [u16; 8]) -> MacControlRepr {
        MacControlRepr {
            src,
            dst: EthernetAddress::MAC_CONTROL,
            control: MacControl::Pfc {
                class_enable,
                quanta,
            },
        }
    }

    /// Parses a frame whose EtherType is MAC control.
    pub fn parse(frame: &[u8]) -> Result<MacControlRepr> {
        let eth = EthernetFrame::new_checked(frame)?;
        if eth.ethertype() != ethertype::MAC_CONTROL {
            return Err(Error::UnsupportedEtherType(eth.ethertype()));
        }
        let p = eth.payload();
        need(Layer::MacControl, p, 2)?;
        let control = match be16(p, 0) {
            OPCODE_PAUSE => {
                need(Layer::MacControl, p, 4)?;
                MacControl::Pause { quanta: be16(p, 2) }
            }
            OPCODE_PFC => {
                need(Layer::MacControl, p, 20)?;
                let mut quanta = [0u16; 8];
                for (i, q) in quanta.iter_mut().enumerate() {
                    *q = be16(p, 4 + 2 * i);
                }
                MacControl::Pfc {
                    class_enable: p[3],
                    quanta,
                }
            }
            op => return Err(Error::UnknownMacControl(op)),
        };
        Ok(MacControlRepr {
            src: eth.src(),
            dst: eth.dst(),
            control,
        })
    }

    /// Frame length (always the 60-byte minimum: MAC control frames are padded).
    pub const fn buffer_len(&self) -> usize {
        MIN_FRAME_LEN
    }

    /// Writes the 60-byte frame (zero-padded) into `buf` and returns its
    /// length; [`Error::BufferTooSmall`] when `buf` is shorter.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if buf.len() < MIN_FRAME_LEN {
            return Err(Error::BufferTooSmall {
                need: MIN_FRAME_LEN,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..MIN_FRAME_LEN];
        buf.fill(0);
        let eth = EthernetRepr {
            dst: self.dst,
            src: self.src,
            vlan: None,
            ethertype: ethertype::MAC_CONTROL,
        };
        eth.emit(buf);
        let p = &mut buf[eth.header_len()..];
        match self.control {
            MacControl::Pause { quanta } => {
                put16(p, 0, OPCODE_PAUSE);
                put16(p, 2, quanta);
            }
            MacControl::Pfc {
                class_enable,
                quanta,
            } => {
                put16(p, 0, OPCODE_PFC);
                put16(p, 2, class_enable as u16);
                for (i, q) in quanta.iter().enumerate() {
                    put16(p, 4 + 2 * i, *q);
                }
            }
        }
        Ok(MIN_FRAME_LEN)
    }
}

/// How long `quanta` pause quanta last at `link_bps` bits per second, in
/// nanoseconds (rounded up).
pub fn pause_duration_ns(quanta: u16, link_bps: u64) -> u64 {
    if link_bps == 0 {
        return 0;
    }
    let bits = quanta as u64 * BITS_PER_QUANTUM;
    (bits * 1_000_000_000).div_ceil(link_bps)
}

impl fmt::Display for MacControlRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.control {
            MacControl::Pause { quanta } => {
                write!(f, "{} > {} PAUSE quanta={quanta}", self.src, self.dst)
            }
            MacControl::Pfc {
                class_enable,
                quanta,
            } => {
                write!(
                    f,
                    "{} > {} PFC enable={class_enable:#04x}",
                    self.src, self.dst
                )?;
                for (p, q) in quanta.iter().enumerate() {
                    if class_enable & (1 << p) != 0 {
                        write!(f, " p{p}={q}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfc_layout() {
        let src = EthernetAddress([2, 0, 0, 0, 0, 9]);
        let r = MacControlRepr::pfc(src, 0b0100_0001, [0xFFFF, 0, 0, 0, 0, 0, 0x100, 0]);
        let mut b = [0xAAu8; 64];
        assert_eq!(r.emit(&mut b).unwrap(), 60);
        assert_eq!(&b[..6], &[0x01, 0x80, 0xC2, 0, 0, 1]);
        assert_eq!(&b[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x41]);
        assert_eq!(&b[18..20], &[0xFF, 0xFF]);
        assert_eq!(&b[30..32], &[0x01, 0x00]);
        assert!(b[34..60].iter().all(|&x| x == 0));
        assert_eq!(MacControlRepr::parse(&b[..60]).unwrap(), r);
        let pause = MacControlRepr {
            control: MacControl::Pause { quanta: 7 },
            ..r
        };
        pause.emit(&mut b).unwrap();
        assert_eq!(MacControlRepr::parse(&b[..60]).unwrap(), pause);
        b[15] = 9;
        assert_eq!(
            MacControlRepr::parse(&b[..60]).unwrap_err(),
            Error::UnknownMacControl(9)
        );
        assert!(MacControlRepr::parse(&b[..15]).is_err());
    }

    #[test]
    fn quanta_to_time() {
        // 0xFFFF quanta at 100 Gb/s: 65535 * 512 bits / 1e11 b/s = 335.5 us
        assert_eq!(pause_duration_ns(0xFFFF, 100_000_000_000), 335_540);
        assert_eq!(pause_duration_ns(1, 10_000_000_000), 52); // 51.2 ns, rounded up
        assert_eq!(pause_duration_ns(0, 10_000_000_000), 0);
    }
}
