//! The fields `tests/tshark.rs` asks tshark for (`FIELDS`: name, value
//! kind, which occurrence), and how to read the values it prints.

use std::net::IpAddr;
use Kind::*;
use Pick::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// An integer, printed in decimal or as 0x-prefixed hex.
    Num,
    /// A boolean, printed 1/0 or True/False.
    Bool,
    /// Bytes, printed as hex (with or without ':' separators).
    Bytes,
    Mac,
    Ip,
}

/// Which occurrence of a field we compare.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Pick {
    /// The field must occur at most once.
    Only,
    /// `infiniband.reserved`: the first is the BTH's byte 4 (FECN, BECN,
    /// Resv6); a DETH adds its own reserved byte after it.
    First,
    /// `infiniband.vendor`: an "Unknown Header Sequence" item (its first
    /// four bytes) then the data item holding all the bytes.
    Last,
    /// `infiniband.immdt`, `infiniband.ieth`: Wireshark gives the header
    /// item and the value item the same field name; every occurrence must
    /// be the same value.
    Same,
}

#[rustfmt::skip]
pub const FIELDS: &[(&str, Kind, Pick)] = &[
    ("frame.number", Num, Only),
    ("eth.src", Mac, Only),
    ("eth.dst", Mac, Only),
    ("vlan.priority", Num, Only),
    ("vlan.dei", Bool, Only),
    ("vlan.id", Num, Only),
    ("ip.src", Ip, Only),
    ("ip.dst", Ip, Only),
    ("ip.dsfield.dscp", Num, Only),
    ("ip.dsfield.ecn", Num, Only),
    ("ip.id", Num, Only),
    ("ip.flags.df", Bool, Only),
    ("ip.ttl", Num, Only),
    ("ip.checksum.status", Num, Only),
    ("ipv6.src", Ip, Only),
    ("ipv6.dst", Ip, Only),
    ("ipv6.tclass.dscp", Num, Only),
    ("ipv6.tclass.ecn", Num, Only),
    ("ipv6.flow", Num, Only),
    ("ipv6.hlim", Num, Only),
    ("udp.srcport", Num, Only),
    ("udp.dstport", Num, Only),
    ("udp.checksum", Num, Only),
    ("udp.checksum.status", Num, Only),
    ("infiniband.bth.opcode", Num, Only),
    ("infiniband.bth.se", Bool, Only),
    ("infiniband.bth.m", Bool, Only),
    ("infiniband.bth.padcnt", Num, Only),
    ("infiniband.bth.tver", Num, Only),
    ("infiniband.bth.p_key", Num, Only),
    ("infiniband.reserved", Bytes, First),
    ("infiniband.bth.destqp", Num, Only),
    ("infiniband.bth.a", Bool, Only),
    ("infiniband.bth.reserved7", Num, Only),
    ("infiniband.bth.psn", Num, Only),
    ("infiniband.deth.q_key", Num, Only),
    ("infiniband.deth.srcqp", Num, Only),
    // RETH and AtomicETH share the VA and R_Key fields.
    ("infiniband.reth.va", Num, Only),
    ("infiniband.reth.r_key", Num, Only),
    ("infiniband.reth.dmalen", Num, Only),
    ("infiniband.atomiceth.swapdt", Num, Only),
    ("infiniband.atomiceth.cmpdt", Num, Only),
    ("infiniband.aeth.syndrome", Num, Only),
    ("infiniband.aeth.syndrome.opcode", Num, Only),
    ("infiniband.aeth.syndrome.credit_count", Num, Only),
    ("infiniband.aeth.syndrome.timer", Num, Only),
    ("infiniband.aeth.syndrome.error_code", Num, Only),
    ("infiniband.aeth.msn", Num, Only),
    ("infiniband.atomicacketh.origremdt", Num, Only),
    ("infiniband.immdt", Bytes, Same),
    ("infiniband.ieth", Bytes, Same),
    ("infiniband.vendor", Bytes, Last),
    ("infiniband.invariant.crc", Num, Only),
    ("data.data", Bytes, Only),
    ("macc.opcode", Num, Only),
    ("macc.pause_time", Num, Only),
    ("macc.cbfc.enbv", Num, Only),
    ("macc.cbfc.enbv.c0", Bool, Only),
    ("macc.cbfc.enbv.c1", Bool, Only),
    ("macc.cbfc.enbv.c2", Bool, Only),
    ("macc.cbfc.enbv.c3", Bool, Only),
    ("macc.cbfc.enbv.c4", Bool, Only),
    ("macc.cbfc.enbv.c5", Bool, Only),
    ("macc.cbfc.enbv.c6", Bool, Only),
    ("macc.cbfc.enbv.c7", Bool, Only),
    ("macc.cbfc.pause_time.c0", Num, Only),
    ("macc.cbfc.pause_time.c1", Num, Only),
    ("macc.cbfc.pause_time.c2", Num, Only),
    ("macc.cbfc.pause_time.c3", Num, Only),
    ("macc.cbfc.pause_time.c4", Num, Only),
    ("macc.cbfc.pause_time.c5", Num, Only),
    ("macc.cbfc.pause_time.c6", Num, Only),
    ("macc.cbfc.pause_time.c7", Num, Only),
];

/// A field value, normalised so tshark's text and our repr compare.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Val {
    Num(u64),
    Bytes(Vec<u8>),
    Mac([u8; 6]),
    Ip(IpAddr),
}

impl std::fmt::Display for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Num(n) => write!(f, "{n} ({n:#x})"),
            Val::Bytes(b) => {
                for x in b {
                    write!(f, "{x:02x}")?;
                }
                Ok(())
            }
            Val::Mac(m) => write!(f, "{}", wire::EthernetAddress(*m)),
            Val::Ip(a) => write!(f, "{a}"),
        }
    }
}

pub fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let h: String = s.chars().filter(|c| *c != ':').collect();
    if h.len() & 1 == 1 {
        return None;
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).ok())
        .collect()
}

pub fn parse_val(kind: Kind, s: &str) -> Option<Val> {
    match kind {
        Num => parse_num(s).map(Val::Num),
        Bool => match s {
            "1" | "True" | "TRUE" | "true" => Some(Val::Num(1)),
            "0" | "False" | "FALSE" | "false" => Some(Val::Num(0)),
            _ => None,
        },
        Bytes => parse_hex(s).map(Val::Bytes),
        Mac => {
            let b = parse_hex(s)?;
            b.try_into().ok().map(Val::Mac)
        }
        Ip => s.parse().ok().map(Val::Ip),
    }
}
