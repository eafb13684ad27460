//! TPACKET_V3 ([`TpacketVersion::V3`](super::TpacketVersion),
//! `--backend afpacket-v3`): the RX ring is a ring of blocks the kernel
//! packs frames into, handing a block over (block status TP_STATUS_USER)
//! when it is full or when its retire timer (`retire_ms`, at least 1 ms)
//! expires. That batching costs a lone frame up to the timer period: over
//! veth a 64 B WRITE's half round trip is ~500 µs on V3 against ~8 µs on
//! V2, and the ACKs' wait cuts WRITE bandwidth to under a third (2.48 against
//! 8.16 Gbit/s; BENCHMARKS.md, "Real ports: veth between namespaces").
//!
//! Receive backlog: `None` — frames wait in blocks the kernel has not
//! retired yet, which userspace cannot count, so a device on V3 generates
//! no PFC.

use super::sys::{setsockopt, PACKET_RX_RING, PACKET_TX_RING};
use super::{
    frame_span, take, tpacket_align, vlan_tag, AfPacketError, RingConfig, TxGeometry, TxLayout,
    TP_STATUS_KERNEL, TP_STATUS_USER,
};
use crate::io::{FrameBatch, PortCounters};
use std::mem::{offset_of, size_of};
use std::os::fd::OwnedFd;
use std::ptr::{addr_of, addr_of_mut, read_unaligned, read_volatile, write_volatile};
use std::sync::atomic::{fence, Ordering};

/// `struct tpacket_req3`.
#[repr(C)]
pub(super) struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// `struct tpacket3_hdr` with its `hv1` variant.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Tpacket3Hdr {
    next_offset: u32,
    sec: u32,
    nsec: u32,
    snaplen: u32,
    len: u32,
    status: u32,
    mac: u16,
    net: u16,
    rxhash: u32,
    vlan_tci: u32,
    vlan_tpid: u16,
    hv1_padding: u16,
    padding: [u8; 8],
}

/// `struct tpacket_block_desc` with `struct tpacket_hdr_v1` (the fields we use).
#[repr(C)]
struct BlockDesc {
    version: u32,
    offset_to_priv: u32,
    block_status: u32,
    num_pkts: u32,
    offset_to_first_pkt: u32,
}

/// Where a TX frame's header fields and data lie.
pub(super) const TX: TxLayout = TxLayout {
    status: offset_of!(Tpacket3Hdr, status),
    len: offset_of!(Tpacket3Hdr, len),
    snaplen: offset_of!(Tpacket3Hdr, snaplen),
    data: tpacket_align(size_of::<Tpacket3Hdr>()),
};

/// Asks the kernel for V3 rings on `fd` (PACKET_VERSION already set).
/// Returns the RX ring's length in bytes.
pub(super) fn request_rings(
    fd: &OwnedFd,
    cfg: &RingConfig,
    tx: TxGeometry,
) -> Result<usize, AfPacketError> {
    let req = TpacketReq3 {
        block_size: cfg.rx_block_size,
        block_nr: cfg.rx_blocks,
        frame_size: 2048,
        frame_nr: cfg.rx_block_size / 2048 * cfg.rx_blocks,
        retire_blk_tov: cfg.retire_ms,
        sizeof_priv: 0,
        feature_req_word: 0,
    };
    setsockopt(fd, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
    let txreq = TpacketReq3 {
        block_size: tx.block_size,
        block_nr: tx.block_nr,
        frame_size: tx.frame_size,
        frame_nr: tx.frame_nr,
        retire_blk_tov: 0,
        sizeof_priv: 0,
        feature_req_word: 0,
    };
    setsockopt(fd, PACKET_TX_RING, &txreq, "PACKET_TX_RING")?;
    Ok((cfg.rx_block_size * cfg.rx_blocks) as usize)
}

/// The RX ring: `blocks` blocks of `block_size` bytes.
pub(super) struct Rx {
    /// The start of the RX ring in the port's mapping.
    base: *mut u8,
    block_size: usize,
    blocks: u32,
    /// The block being read.
    block: u32,
    /// Position inside the current block: (packets left, offset).
    cursor: Option<(u32, usize)>,
}

impl Rx {
    /// The ring of `blocks` blocks at `base`, which the caller keeps
    /// mapped for as long as the `Rx` lives.
    pub(super) fn new(base: *mut u8, block_size: u32, blocks: u32) -> Rx {
        Rx {
            base,
            block_size: block_size as usize,
            blocks,
            block: 0,
            cursor: None,
        }
    }

    /// Copies the frames of the blocks the kernel handed over into
    /// `batch`, handing each block back once read.
    pub(super) fn recv(&mut self, counters: &mut PortCounters, batch: &mut FrameBatch) -> usize {
        let hdr_len = size_of::<Tpacket3Hdr>();
        let mut n = 0;
        while !batch.is_full() {
            let base = self
                .base
                .wrapping_add(self.block as usize * self.block_size);
            let bd = base as *mut BlockDesc;
            let (left, off) = match self.cursor {
                Some(c) => c,
                None => {
                    // SAFETY: block < blocks: bd is the page-aligned block
                    // descriptor at the start of a block inside the mapped
                    // ring; the kernel writes its status concurrently,
                    // hence the volatile read.
                    let status = unsafe { read_volatile(addr_of!((*bd).block_status)) };
                    if status & TP_STATUS_USER == 0 {
                        break;
                    }
                    fence(Ordering::Acquire);
                    // SAFETY: a USER block belongs to userspace until its
                    // status is set back to KERNEL (the Acquire fence
                    // orders these reads after the status read).
                    unsafe { ((*bd).num_pkts, (*bd).offset_to_first_pkt as usize) }
                }
            };
            // a frame header that would leave the block ends it
            if left == 0 || off > self.block_size.saturating_sub(hdr_len) {
                fence(Ordering::Release);
                // SAFETY: bd is the descriptor of a block inside the ring
                // (as above); the Release fence orders our reads of the
                // block before the kernel can see it handed back.
                unsafe { write_volatile(addr_of_mut!((*bd).block_status), TP_STATUS_KERNEL) };
                self.cursor = None;
                self.block = (self.block + 1) % self.blocks;
                continue;
            }
            // SAFETY: off + hdr_len <= block_size, so the header's bytes
            // lie inside this block, which is ours (USER) until handed
            // back; read_unaligned needs no alignment from the kernel's
            // offsets.
            let hdr = unsafe { read_unaligned(base.add(off) as *const Tpacket3Hdr) };
            let tag = vlan_tag(hdr.status, hdr.vlan_tci as u16, hdr.vlan_tpid);
            let tag_len = if tag.is_some() { 4 } else { 0 };
            let room = self.block_size - off;
            match frame_span(
                hdr.status,
                hdr.mac as usize,
                hdr.snaplen as usize,
                hdr.len as usize,
                room,
                tag_len,
            ) {
                Some((m, l)) => {
                    // SAFETY: frame_span kept [off + m, off + m + l) inside
                    // the block, which the kernel leaves alone until it is
                    // handed back (after this slice's last use, in `take`).
                    let data = unsafe { std::slice::from_raw_parts(base.add(off + m), l) };
                    n += take(counters, batch, Some(data), tag) as usize;
                }
                None => {
                    take(counters, batch, None, tag);
                }
            }
            let next = hdr.next_offset as usize;
            self.cursor = Some(if next == 0 {
                (0, off)
            } else {
                (left - 1, off.saturating_add(next))
            });
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layouts_match_the_uapi() {
        assert_eq!(size_of::<Tpacket3Hdr>(), 48);
        assert_eq!(size_of::<TpacketReq3>(), 28);
        assert_eq!(TX.data, 48);
        assert_eq!((TX.status, TX.len, TX.snaplen), (20, 16, 12));
    }
}
