//! A device set up the way the in-process loopback and the simulator's
//! tests use one: a PD, a CQ and one region registered with every access
//! right, with addresses derived from its index.

use super::{Rnic, RnicConfig};
use crate::verbs::{access, HeapMemory, Memory};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use wire::{EthernetAddress, Gid};

/// A device's PD, CQ and one registered region, and its addresses.
pub struct Endpoint {
    pub pd: u32,
    pub cq: u32,
    pub mem: Arc<HeapMemory>,
    /// The region's first virtual address.
    pub base: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub mac: EthernetAddress,
    pub gid: Gid,
}

impl Endpoint {
    /// Device `i`: MAC 02:00:00:00:00:0{i+1}, GID 192.0.2.{i+1} (or
    /// 2001:db8::{i+1}), a CQ of `cq_len` entries and `mem_len` bytes at
    /// 0x1000_0000·(i+1). `tune` adjusts the device's settings first.
    pub fn create(
        i: u8,
        ipv6: bool,
        mem_len: usize,
        cq_len: usize,
        tune: impl FnOnce(&mut RnicConfig),
    ) -> (Rnic, Endpoint) {
        let mac = EthernetAddress([0x02, 0, 0, 0, 0, i + 1]);
        let gid = if ipv6 {
            Gid::from_ipv6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16 + 1))
        } else {
            Gid::from_ipv4(Ipv4Addr::new(192, 0, 2, i + 1))
        };
        let mut rc = RnicConfig::new(mac, gid);
        tune(&mut rc);
        let mut r = Rnic::new(rc);
        let e = Endpoint::on(&mut r, i, mem_len, cq_len);
        (r, e)
    }

    /// Another endpoint on the existing device `r` (its MAC and GID): a PD,
    /// a CQ of `cq_len` entries and `mem_len` bytes at 0x1000_0000·(i+1),
    /// registered with every access right. Two of them on one device are
    /// the two ends of a loopback connection.
    pub fn on(r: &mut Rnic, i: u8, mem_len: usize, cq_len: usize) -> Endpoint {
        let pd = r.alloc_pd();
        let cq = r.create_cq(cq_len);
        let mem = Arc::new(HeapMemory::new(mem_len));
        let base = 0x1000_0000u64 * (i as u64 + 1);
        let all = access::LOCAL_WRITE
            | access::REMOTE_WRITE
            | access::REMOTE_READ
            | access::REMOTE_ATOMIC;
        let region = mem.clone() as Arc<dyn Memory>;
        let (lkey, rkey) = r
            .reg_mr(pd, region, 0, base, mem_len as u64, all)
            .expect("a device registers a fresh region");
        Endpoint {
            pd,
            cq,
            mem,
            base,
            lkey,
            rkey,
            mac: r.config().mac,
            gid: r.config().gid,
        }
    }
}
