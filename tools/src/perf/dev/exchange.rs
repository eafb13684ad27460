//! perftest's out-of-band exchange, as Debian bookworm's perftest
//! (4.5-0.17, which calls itself version "6.06") speaks it over TCP: the
//! byte formats of `src/perftest_communication.c` and the order in which
//! each test's `main` calls them. Formats only: the code is ours.
//!
//! Every exchange is symmetric and fixed-size: the client writes its
//! message and then reads the server's, the server reads first and then
//! writes (`ctx_xchg_data_ethernet`, `ctx_hand_shake`). perftest reads each
//! message with one `read()`, so each of ours goes out in one `write()`.
//!
//! | step | bytes | content |
//! |---|---|---|
//! | version (`exchange_versions`) | 16 | NUL-terminated version text, `"6.06"`; perftest refuses a peer below 5.70 (`check_version_compatibility`) |
//! | cycle buffer (`check_sys_data`, peer ≥ 5.32) | 4 | page size, big-endian int |
//! | cache line | 4 | cache line size, big-endian int |
//! | MTU (`check_mtu`, peer ≥ 5.31) | 2 | the `enum ibv_mtu` (1 = 256 … 5 = 4096) as one ASCII digit and a NUL; both use the smaller |
//! | handshake (`ctx_hand_shake`) | 108 | `KEY_PRINT_FMT_GID`: `lid:out_reads:qpn:psn:rkey:vaddr:gid[0]:…:gid[15]:srqn:` as `%04x:%04x:%06x:%06x:%08x:%016llx:` + 16 × `%02x:` + `%08x:` and a NUL |
//! | bw report (`xchg_bw_reports`) | 8, 8, 8, 8, 8 | message size (u64), iterations (u64, peer ≥ 5.33), BW peak, BW average (f64, in the sender's report unit), message rate (f64, Mpps); each big-endian, each its own exchange |
//! | close (`ctx_close_connection`) | 108 + 5 | a last handshake, then `"done"` and its NUL, unread by the other side |
//!
//! RoCE always uses the GID form of the handshake (perftest sets the GID
//! index to 0 on an Ethernet link layer); the 59-byte form without a GID
//! is InfiniBand's and is refused here.
//!
//! rnic's addition: our version field reads `"6.06"`, a NUL, and
//! [`RNIC_MARK`] — perftest stops at the first NUL (`atof`), so it sees
//! 6.06. When both sides carry the mark they know the other is rnic and
//! add two text exchanges perftest never sees (the parent module
//! documents them).

use crate::oob::{Ctrl, READ_PATIENCE};
use crate::CliError;
use wire::Gid;

/// The version bookworm's perftest sends (configure.ac's AC_INIT of 4.5-0.17).
pub const PERFTEST_VERSION: &str = "6.06";
/// perftest refuses peers older than this (`check_version_compatibility`).
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Our mark after the version's NUL.
pub const RNIC_MARK: &str = "rnic-perf2";
/// `MAX_VERSION`.
pub const VERSION_LEN: usize = 16;
/// `KEY_MSG_SIZE_GID`.
pub const KEY_MSG_SIZE_GID: usize = 108;
/// `KEY_MSG_SIZE` (InfiniBand's form without a GID; refused).
pub const KEY_MSG_SIZE: usize = 59;
/// `"done"` with its NUL.
pub const DONE: &[u8; 5] = b"done\0";
/// What we send as cycle buffer and cache line size (perftest: the page
/// size and the CPU's cache line; they only shape the sender's own buffers).
pub const CYCLE_BUFFER: i32 = 4096;
pub const CACHE_LINE: i32 = 64;

/// A message of the peer's that is not what perftest sends.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    #[error("a handshake is {KEY_MSG_SIZE_GID} bytes, not {len}{}", ib_form(.len))]
    HandshakeLength { len: usize },
    #[error("the handshake {text:?} does not end in a NUL")]
    HandshakeNoNul { text: String },
    #[error(
        "the handshake {text:?}: field {field} (bytes {from}..{to}) is not {} hexadecimal digits",
        .to - .from
    )]
    HandshakeField {
        text: String,
        field: usize,
        from: usize,
        to: usize,
    },
    #[error("the handshake {text:?}: byte {at} is {got:?}, not ':'")]
    HandshakeSeparator { text: String, at: usize, got: char },
    #[error("the version field is {VERSION_LEN} bytes, not {len}")]
    VersionLength { len: usize },
    #[error(
        "the peer's version field {text:?} has no NUL: not perftest's exchange \
         (is the peer perftest or rnic perf?)"
    )]
    VersionNoNul { text: String },
    #[error("the peer's version {text:?} is not a version number: not perftest's exchange")]
    NotAVersion { text: String },
    #[error("the peer's version {text:?} is not a number")]
    VersionNotANumber { text: String },
    #[error(
        "the peer's perftest version {text} is older than {:.2}, which perftest 6.06 refuses too",
        MIN_PEER_VERSION
    )]
    TooOld { text: String },
    #[error("the peer's {what} is 4 bytes, not {len}")]
    SysLength { what: &'static str, len: usize },
    #[error("the peer's {what} is {value}: not a size")]
    SysValue { what: &'static str, value: i32 },
    #[error(
        "the peer's MTU field is {bytes:02x?}: perftest sends one digit 1-5 (256-4096 bytes) and a NUL"
    )]
    Mtu { bytes: Vec<u8> },
}

impl crate::Failure for ExchangeError {}

/// What a handshake of the InfiniBand form's length is.
fn ib_form(len: &usize) -> &'static str {
    if *len == KEY_MSG_SIZE {
        " (perftest's form without a GID, InfiniBand's; RoCE needs the GID)"
    } else {
        ""
    }
}

/// One QP's `struct pingpong_dest`, as the handshake carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: Gid,
    pub srqn: u32,
}

/// Field widths of `KEY_PRINT_FMT_GID`, in order; each is followed by ':'.
const WIDTHS: [usize; 23] = [
    4, 4, 6, 6, 8, 16, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 8,
];

impl Dest {
    /// The 108 bytes perftest's `sprintf(msg, KEY_PRINT_FMT_GID, ...)` writes.
    pub fn encode(&self) -> [u8; KEY_MSG_SIZE_GID] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xFF_FFFF,
            self.psn & 0xFF_FFFF,
            self.rkey,
            self.vaddr
        );
        for b in self.gid.0 {
            s += &format!("{b:02x}:");
        }
        s += &format!("{:08x}:", self.srqn);
        let mut out = [0u8; KEY_MSG_SIZE_GID];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    /// Parses a peer's handshake strictly: exactly the layout above,
    /// hexadecimal digits of the fixed widths, the colons, the NUL.
    pub fn decode(b: &[u8]) -> Result<Dest, ExchangeError> {
        if b.len() != KEY_MSG_SIZE_GID {
            return Err(ExchangeError::HandshakeLength { len: b.len() });
        }
        let show = || {
            String::from_utf8_lossy(&b[..b.len() - 1])
                .escape_debug()
                .to_string()
        };
        if b[KEY_MSG_SIZE_GID - 1] != 0 {
            return Err(ExchangeError::HandshakeNoNul { text: show() });
        }
        let mut vals = [0u64; 23];
        let mut at = 0;
        for (k, &w) in WIDTHS.iter().enumerate() {
            let field = &b[at..at + w];
            let not_hex = || ExchangeError::HandshakeField {
                text: show(),
                field: k + 1,
                from: at,
                to: at + w,
            };
            let text = std::str::from_utf8(field)
                .ok()
                .filter(|t| t.bytes().all(|c| c.is_ascii_hexdigit()))
                .ok_or_else(not_hex)?;
            vals[k] = u64::from_str_radix(text, 16).map_err(|_| not_hex())?;
            if b[at + w] != b':' {
                return Err(ExchangeError::HandshakeSeparator {
                    text: show(),
                    at: at + w,
                    got: b[at + w] as char,
                });
            }
            at += w + 1;
        }
        debug_assert_eq!(at, KEY_MSG_SIZE_GID - 1);
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = vals[6 + i] as u8;
        }
        Ok(Dest {
            lid: vals[0] as u16,
            out_reads: vals[1] as u16,
            qpn: vals[2] as u32,
            psn: vals[3] as u32,
            rkey: vals[4] as u32,
            vaddr: vals[5],
            gid: Gid(gid),
            srqn: vals[22] as u32,
        })
    }
}

/// What the peer's version field says.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerVersion {
    pub text: String,
    pub value: f64,
    /// The peer is rnic (our mark follows the NUL).
    pub rnic: bool,
}

/// Set (to anything but "0") to leave the mark out: `rnic perf` then
/// behaves exactly as plain perftest towards another rnic (no settings
/// line, no data checks, no closing line). For tests and comparisons.
pub const PLAIN_ENV: &str = "SOFTRNIC_PERFTEST_PLAIN";

/// Our 16-byte version field: "6.06", NUL, the mark, NUL (without the
/// mark under [`PLAIN_ENV`]: what perftest's `strncpy` leaves).
pub fn encode_version() -> [u8; VERSION_LEN] {
    let plain = std::env::var_os(PLAIN_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    let mut out = [0u8; VERSION_LEN];
    let v = PERFTEST_VERSION.as_bytes();
    out[..v.len()].copy_from_slice(v);
    if !plain {
        let m = RNIC_MARK.as_bytes();
        out[v.len() + 1..v.len() + 1 + m.len()].copy_from_slice(m);
    }
    out
}

/// Parses the peer's version field: a number (as `atof` reads it) ended by
/// a NUL within the 16 bytes; refuses what perftest refuses.
pub fn decode_version(b: &[u8]) -> Result<PeerVersion, ExchangeError> {
    if b.len() != VERSION_LEN {
        return Err(ExchangeError::VersionLength { len: b.len() });
    }
    let nul = b
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| ExchangeError::VersionNoNul {
            text: String::from_utf8_lossy(b).into_owned(),
        })?;
    let text = std::str::from_utf8(&b[..nul])
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit() || c == b'.'))
        .ok_or_else(|| ExchangeError::NotAVersion {
            text: String::from_utf8_lossy(&b[..nul]).into_owned(),
        })?;
    let value: f64 = text
        .parse()
        .map_err(|_| ExchangeError::VersionNotANumber { text: text.into() })?;
    if value < MIN_PEER_VERSION {
        return Err(ExchangeError::TooOld { text: text.into() });
    }
    let rest = &b[nul + 1..];
    let mark_end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
    let rnic = &rest[..mark_end] == RNIC_MARK.as_bytes();
    Ok(PeerVersion {
        text: text.to_string(),
        value,
        rnic,
    })
}

/// A big-endian int of `check_sys_data`; a page or cache line size is
/// positive and at most 1 GiB.
pub fn decode_sys(b: &[u8], what: &'static str) -> Result<i32, ExchangeError> {
    let v = i32::from_be_bytes(
        b.try_into()
            .map_err(|_| ExchangeError::SysLength { what, len: b.len() })?,
    );
    if !(1..=1 << 30).contains(&v) {
        return Err(ExchangeError::SysValue { what, value: v });
    }
    Ok(v)
}

/// IB MTU in bytes → `enum ibv_mtu`.
pub fn mtu_enum(mtu: u32) -> u8 {
    match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// `check_mtu`'s two bytes: the enum as a digit, and the NUL.
pub fn encode_mtu(mtu: u32) -> [u8; 2] {
    [b'0' + mtu_enum(mtu), 0]
}

/// The peer's MTU, in bytes.
pub fn decode_mtu(b: &[u8]) -> Result<u32, ExchangeError> {
    match b {
        [d @ b'1'..=b'5', 0] => Ok(128 << (d - b'0')),
        _ => Err(ExchangeError::Mtu { bytes: b.to_vec() }),
    }
}

/// `struct bw_report_data` as `xchg_bw_reports` sends it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwReport {
    pub size: u64,
    pub iters: u64,
    pub bw_peak: f64,
    pub bw_avg: f64,
    pub msg_rate: f64,
}

/// The perftest conversation on one TCP connection.
pub struct Peer {
    pub ctrl: Ctrl,
    pub client: bool,
    /// The peer's version (after [`Peer::preamble`]).
    pub version: Option<PeerVersion>,
}

/// How long a read may wait.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The setup's pace: [`READ_PATIENCE`].
    Setup,
    /// While the peer runs its test: as long as the connection lives.
    Test,
}

impl Peer {
    pub fn new(ctrl: Ctrl, client: bool) -> Peer {
        Peer {
            ctrl,
            client,
            version: None,
        }
    }

    /// The peer is rnic too.
    pub fn rnic(&self) -> bool {
        self.version.as_ref().is_some_and(|v| v.rnic)
    }

    /// One symmetric exchange: the client writes first, the server reads
    /// first. `idle` keeps an inline engine turning while we wait.
    pub fn xchg(
        &mut self,
        mine: &[u8],
        n: usize,
        wait: Wait,
        idle: &mut dyn FnMut(u64),
    ) -> Result<Vec<u8>, CliError> {
        let patience = (wait == Wait::Setup).then_some(READ_PATIENCE);
        if self.client {
            self.ctrl.write_all(mine)?;
            self.ctrl.read_exact_while(n, patience, idle)
        } else {
            let got = self.ctrl.read_exact_while(n, patience, idle)?;
            self.ctrl.write_all(mine)?;
            Ok(got)
        }
    }

    /// Version, cycle buffer, cache line and MTU; returns the agreed MTU.
    pub fn preamble(&mut self, our_mtu: u32, idle: &mut dyn FnMut(u64)) -> Result<u32, CliError> {
        let v = self.xchg(&encode_version(), VERSION_LEN, Wait::Setup, idle)?;
        let v = decode_version(&v)?;
        let old = v.value;
        self.version = Some(v);
        // check_sys_data: from 5.32 on (always, past the 5.70 check)
        if old >= 5.32 {
            let c = self.xchg(&CYCLE_BUFFER.to_be_bytes(), 4, Wait::Setup, idle)?;
            decode_sys(&c, "cycle buffer size")?;
            let l = self.xchg(&CACHE_LINE.to_be_bytes(), 4, Wait::Setup, idle)?;
            decode_sys(&l, "cache line size")?;
        }
        // check_mtu: two bytes from 5.31 on
        let m = self.xchg(&encode_mtu(our_mtu), 2, Wait::Setup, idle)?;
        let peer = decode_mtu(&m)?;
        Ok(our_mtu.min(peer))
    }

    /// One `ctx_hand_shake`: our QP's record for the peer's.
    pub fn hand_shake(
        &mut self,
        mine: &Dest,
        wait: Wait,
        idle: &mut dyn FnMut(u64),
    ) -> Result<Dest, CliError> {
        let got = self
            .xchg(&mine.encode(), KEY_MSG_SIZE_GID, wait, idle)
            .map_err(|e| {
                CliError::new(format!(
                    "{} (perftest's handshake; both sides need the same test, -q and -a)",
                    e.msg
                ))
            })?;
        Dest::decode(&got).map_err(|e| CliError::new(format!("the peer's handshake: {e}")))
    }

    /// `xchg_bw_reports` (not per port): ours for theirs.
    pub fn bw_reports(
        &mut self,
        mine: &BwReport,
        idle: &mut dyn FnMut(u64),
    ) -> Result<BwReport, CliError> {
        let u = |me: &mut Peer, x: u64, idle: &mut dyn FnMut(u64)| -> Result<u64, CliError> {
            let b = me.xchg(&x.to_be_bytes(), 8, Wait::Setup, idle)?;
            Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
        };
        let size = u(self, mine.size, idle)?;
        let iters = u(self, mine.iters, idle)?;
        let peak = u(self, mine.bw_peak.to_bits(), idle)?;
        let avg = u(self, mine.bw_avg.to_bits(), idle)?;
        let rate = u(self, mine.msg_rate.to_bits(), idle)?;
        Ok(BwReport {
            size,
            iters,
            bw_peak: f64::from_bits(peak),
            bw_avg: f64::from_bits(avg),
            msg_rate: f64::from_bits(rate),
        })
    }

    /// `ctx_close_connection`: a last handshake, then `"done"`. perftest
    /// never reads the other side's `"done"`; between two rnic sides we
    /// read it (it precedes our own closing exchange).
    pub fn close(&mut self, mine: &Dest, idle: &mut dyn FnMut(u64)) -> Result<(), CliError> {
        self.hand_shake(mine, Wait::Test, idle)?;
        self.done(idle)
    }

    /// The `"done"` that ends [`Peer::close`] (after its handshake).
    pub fn done(&mut self, idle: &mut dyn FnMut(u64)) -> Result<(), CliError> {
        self.ctrl.write_all(DONE)?;
        if self.rnic() {
            let d = self
                .ctrl
                .read_exact_while(DONE.len(), Some(READ_PATIENCE), idle)?;
            if d != DONE {
                return Err(CliError::new(format!(
                    "the peer closed with {:?}, not \"done\"",
                    String::from_utf8_lossy(&d)
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest() -> Dest {
        Dest {
            lid: 0,
            out_reads: 0x10,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x55d0_c8a4_b000,
            gid: Gid::from_ip("10.88.0.2".parse().unwrap()),
            srqn: 0,
        }
    }

    /// The bytes of `sprintf(msg, KEY_PRINT_FMT_GID, 0, 0x10, 0x11, 0xabcdef,
    /// 0x1234, 0x55d0c8a4b000ULL, <::ffff:10.88.0.2>, 0)` as perftest's
    /// ethernet_write_keys sends them (char msg[108]): produced with
    /// printf(1) from the format string of perftest_communication.h.
    const CAPTURED: &[u8; 108] = b"0000:0010:000011:abcdef:00001234:000055d0c8a4b000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:58:00:02:00000000:\0";

    #[test]
    fn handshake_matches_perftests_format_byte_for_byte() {
        assert_eq!(CAPTURED.len(), KEY_MSG_SIZE_GID);
        assert_eq!(&dest().encode(), CAPTURED);
        assert_eq!(Dest::decode(CAPTURED), Ok(dest()));
        // rxe's real values: a large rkey and vaddr, a high QPN, uppercase accepted
        let d = Dest {
            lid: 0,
            out_reads: 128,
            qpn: 0xff_fff1,
            psn: 0,
            rkey: 0xdead_beef,
            vaddr: u64::MAX,
            gid: Gid([0xfe; 16]),
            srqn: 0xffff_ffff,
        };
        assert_eq!(Dest::decode(&d.encode()), Ok(d));
        let mut up = CAPTURED.to_vec();
        up[17] = b'A'; // "abcdef" -> "Abcdef"
        assert_eq!(Dest::decode(&up).unwrap().psn, 0xabcdef);
    }

    #[test]
    fn malformed_handshakes_are_refused_with_the_reason() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (CAPTURED[..59].to_vec(), "108 bytes, not 59"),
            (
                {
                    let mut b = CAPTURED.to_vec();
                    b[107] = b'x';
                    b
                },
                "does not end in a NUL",
            ),
            (
                {
                    let mut b = CAPTURED.to_vec();
                    b[4] = b'-';
                    b
                },
                "byte 4 is '-'",
            ),
            (
                {
                    let mut b = CAPTURED.to_vec();
                    b[10] = b'g';
                    b
                },
                "field 3",
            ),
            (
                {
                    let mut b = CAPTURED.to_vec();
                    b[33] = b' ';
                    b
                },
                "field 6",
            ),
            (
                {
                    let mut b = CAPTURED.to_vec();
                    b[99] = 0;
                    b
                },
                "field 23",
            ),
            (vec![0u8; 108], "field 1"),
            (vec![0xffu8; 108], "NUL"),
        ];
        for (b, want) in cases {
            let e = Dest::decode(&b).unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }

    #[test]
    fn version_sys_and_mtu_fields() {
        let v = encode_version();
        assert_eq!(&v[..5], b"6.06\0");
        let p = decode_version(&v).unwrap();
        assert_eq!((p.text.as_str(), p.rnic), ("6.06", true));
        // what perftest sends: strncpy("6.06") into 16 bytes
        let mut pt = [0u8; 16];
        pt[..4].copy_from_slice(b"6.06");
        let p = decode_version(&pt).unwrap();
        assert!(!p.rnic && (p.value - 6.06).abs() < 1e-9);
        let mut old = [0u8; 16];
        old[..4].copy_from_slice(b"5.60");
        assert!(decode_version(&old)
            .unwrap_err()
            .to_string()
            .contains("older than 5.70"));
        assert!(decode_version(&[b'6'; 16])
            .unwrap_err()
            .to_string()
            .contains("no NUL"));
        assert!(decode_version(b"rnic-perf 1\nrol\0").is_err());
        assert!(decode_version(&[0u8; 16]).is_err());
        assert_eq!(decode_sys(&4096i32.to_be_bytes(), "x"), Ok(4096));
        assert!(decode_sys(&(-1i32).to_be_bytes(), "x").is_err());
        assert!(decode_sys(&[0, 0], "x").is_err());
        for m in [256, 512, 1024, 2048, 4096] {
            assert_eq!(decode_mtu(&encode_mtu(m)), Ok(m));
        }
        assert_eq!(&encode_mtu(1024), b"3\0");
        assert!(decode_mtu(b"6\0").is_err());
        assert!(decode_mtu(b"3x").is_err());
        assert!(decode_mtu(b"\0\0").is_err());
    }
}
