//! One-line human-readable rendering, used by `rnic pcap dump` and fuzzing.

use crate::roce::{IpRepr, RoceRepr};
use crate::Frame;
use core::fmt;

const ECN: [&str; 4] = ["not-ect", "ect1", "ect0", "CE"];

impl fmt::Display for RoceRepr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.ip {
            IpRepr::V4(ip) => write!(
                f,
                "{}:{} > {}:{}",
                ip.src, self.udp.src_port, ip.dst, self.udp.dst_port
            )?,
            IpRepr::V6(ip) => write!(
                f,
                "[{}]:{} > [{}]:{}",
                ip.src, self.udp.src_port, ip.dst, self.udp.dst_port
            )?,
        }
        if let Some(v) = self.eth.vlan {
            write!(f, " vlan={} pcp={}", v.vid, v.pcp)?;
        }
        write!(
            f,
            " dscp={} {}",
            self.ip.dscp(),
            ECN[self.ip.ecn() as usize & 3]
        )?;
        let b = &self.bth;
        write!(f, " {} qp={:#08x} psn={}", b.opcode, b.dest_qp, b.psn)?;
        for (set, name) in [
            (b.ack_req, " A"),
            (b.solicited, " SE"),
            (b.migreq, " M"),
            (b.fecn, " FECN"),
            (b.becn, " BECN"),
        ] {
            if set {
                f.write_str(name)?;
            }
        }
        if b.pkey != crate::bth::DEFAULT_PKEY {
            write!(f, " pkey={:#06x}", b.pkey)?;
        }
        let x = &self.ext;
        if let Some(d) = x.deth {
            write!(f, " qkey={:#010x} src_qp={:#08x}", d.qkey, d.src_qp)?;
        }
        if let Some(fe) = x.feth {
            write!(f, " sel={} plt={}", fe.selectivity, fe.placement_type)?;
        }
        if let Some(r) = x.reth {
            write!(
                f,
                " va={:#x} rkey={:#010x} dmalen={}",
                r.va, r.rkey, r.dma_len
            )?;
        }
        if let Some(a) = x.atomic {
            write!(
                f,
                " va={:#x} rkey={:#010x} swap_add={:#x} cmp={:#x}",
                a.va, a.rkey, a.swap_add, a.compare
            )?;
        }
        if let Some(a) = x.aeth {
            write!(f, " {} msn={}", a.syndrome, a.msn)?;
        }
        if let Some(o) = x.atomic_ack {
            write!(f, " orig={o:#x}")?;
        }
        if let Some(i) = x.imm {
            write!(f, " imm={i:#010x}")?;
        }
        if let Some(k) = x.ieth {
            write!(f, " inv_rkey={k:#010x}")?;
        }
        write!(f, " len={}", self.payload.len())
    }
}

impl fmt::Display for Frame<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Frame::Roce(r) => r.fmt(f),
            Frame::MacControl(m) => m.fmt(f),
        }
    }
}
