//! The address record the pingpong examples exchange: the 52 bytes of
//! `sprintf("%04x:%06x:%06x:%s", lid, qpn, psn, gid)` with its NUL (the
//! parent module tells the whole exchange).

use wire::Gid;

/// `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
pub const MSG_LEN: usize = 52;

/// A peer's record that is not what the examples send.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("the peer's address record is not text")]
    NotText,
    #[error("bad {what} {value:?} in the peer's record {record:?}")]
    BadField {
        what: &'static str,
        value: String,
        record: String,
    },
    #[error("QPN or PSN out of range in {record:?}")]
    OutOfRange { record: String },
}

impl crate::Failure for RecordError {}

/// One side's address record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    pub lid: u32,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

/// `gid_to_wire_gid`: each 32-bit word of the GID as the host loads it,
/// through `htonl`, printed `%08x`.
pub fn gid_to_wire(gid: &Gid) -> String {
    gid.0
        .chunks(4)
        .map(|w| {
            let host = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
            format!("{:08x}", host.to_be())
        })
        .collect()
}

/// `wire_gid_to_gid`: each 8 hex digits scanned `%x`, through `ntohl`,
/// stored as a host word.
pub fn wire_to_gid(s: &str) -> Option<Gid> {
    if s.len() < 32 || !s.is_char_boundary(32) {
        return None;
    }
    let mut g = [0u8; 16];
    for i in 0..4 {
        let v = u32::from_str_radix(&s[i * 8..i * 8 + 8], 16).ok()?;
        g[i * 4..i * 4 + 4].copy_from_slice(&u32::from_be(v).to_ne_bytes());
    }
    Some(Gid(g))
}

impl Dest {
    /// The 52-byte record (NUL-terminated).
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn,
            self.psn,
            gid_to_wire(&self.gid)
        );
        let mut out = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        out[..n].copy_from_slice(&text.as_bytes()[..n]);
        out
    }

    /// `sscanf(msg, "%x:%x:%x:%s", ...)` and `wire_gid_to_gid`.
    pub fn decode(b: &[u8]) -> Result<Dest, RecordError> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let text = std::str::from_utf8(&b[..end]).map_err(|_| RecordError::NotText)?;
        let mut f = text.splitn(4, ':');
        let bad = |what: &'static str, value: &str| RecordError::BadField {
            what,
            value: value.to_string(),
            record: text.to_string(),
        };
        let mut hex = |what: &'static str| {
            let s = f.next().unwrap_or("");
            u32::from_str_radix(s.trim(), 16).map_err(|_| bad(what, s))
        };
        let lid = hex("LID")?;
        let qpn = hex("QPN")?;
        let psn = hex("PSN")?;
        let g = f.next().unwrap_or("");
        let gid = wire_to_gid(g.trim()).ok_or_else(|| bad("GID", g))?;
        if qpn > 0xFF_FFFF || psn > 0xFF_FFFF {
            return Err(RecordError::OutOfRange {
                record: text.to_string(),
            });
        }
        Ok(Dest { lid, qpn, psn, gid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `gid_to_wire_gid` does in C: load each 4 bytes as a host word,
    /// `htonl`, print `%08x` — written out for both byte orders.
    fn c_gid_to_wire(raw: &[u8; 16], little_endian_host: bool) -> String {
        let mut s = String::new();
        for w in raw.chunks(4) {
            let host = if little_endian_host {
                u32::from_le_bytes([w[0], w[1], w[2], w[3]])
            } else {
                u32::from_be_bytes([w[0], w[1], w[2], w[3]])
            };
            let net = if little_endian_host {
                host.swap_bytes()
            } else {
                host
            };
            s += &format!("{net:08x}");
        }
        s
    }

    #[test]
    fn wire_gid_is_the_bytes_in_order_on_any_host() {
        let g = Gid::from_ipv4("192.0.2.1".parse().unwrap());
        assert_eq!(gid_to_wire(&g), "00000000000000000000ffffc0000201");
        let raw: [u8; 16] = core::array::from_fn(|i| (i * 17 + 3) as u8);
        let g = Gid(raw);
        assert_eq!(gid_to_wire(&g), c_gid_to_wire(&raw, true));
        assert_eq!(gid_to_wire(&g), c_gid_to_wire(&raw, false));
        assert_eq!(gid_to_wire(&g), g.to_hex());
        assert_eq!(wire_to_gid(&gid_to_wire(&g)), Some(g));
        let v6 = Gid::from_ipv6("fe80::1234:56ff:fe78:9abc".parse().unwrap());
        assert_eq!(gid_to_wire(&v6), "fe80000000000000123456fffe789abc");
    }

    #[test]
    fn records_are_52_bytes_with_the_nul() {
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_ipv4("192.0.2.2".parse().unwrap()),
        };
        let b = d.encode();
        assert_eq!(b.len(), 52);
        assert_eq!(
            &b[..51],
            b"0000:000011:abcdef:00000000000000000000ffffc0000202"
        );
        assert_eq!(b[51], 0);
        assert_eq!(Dest::decode(&b), Ok(d));
        // as sscanf reads it: fields need not be zero-padded
        let d2 = Dest::decode(b"1:2a:3:00000000000000000000ffffc0000202\0").unwrap();
        assert_eq!((d2.lid, d2.qpn, d2.psn), (1, 0x2a, 3));
        assert!(Dest::decode(b"0000:zz:000000:00\0").is_err());
        assert!(Dest::decode(b"0000:000011:000001:0000\0").is_err());
    }
}
