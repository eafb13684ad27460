//! TPACKET_V2 (the default, [`TpacketVersion::V2`](super::TpacketVersion)):
//! the RX ring is an array of fixed-size frame slots, each with its own
//! `struct tpacket2_hdr`. The kernel copies a frame into the next free
//! slot, sets its `tp_status` to TP_STATUS_USER and wakes the socket right
//! away; the port copies the frame out and hands the slot back
//! (TP_STATUS_KERNEL). A lone frame is visible as soon as the kernel has
//! it — what a ping-pong needs. Slots are sized from the interface MTU (a
//! 9000-byte MTU takes ~9 KiB per slot, ~1840 slots in the default 16 MiB).
//!
//! Receive backlog (`Port::rx_backlog`, what PFC generation watches): the
//! slots marked TP_STATUS_USER from the read position on, counted
//! incrementally (each slot is read once by the count and once by `recv`);
//! bytes are the frames' wire lengths, split by class (the VLAN PCP the
//! kernel took out into `tp_vlan_tci`, the IP DSCP) as each frame is
//! counted, and taken out of its class again when `recv` hands it over.

use super::gso::{Pending, VnetHdr, VNET_LEN};
use super::sys::{setsockopt, PACKET_RX_RING, PACKET_TX_RING};
use super::{
    frame_span, take, tpacket_align, vlan_tag, AfPacketError, RingConfig, TxGeometry, TxLayout,
    ETH_VLAN_HLEN, TP_STATUS_COPY, TP_STATUS_KERNEL, TP_STATUS_USER,
};
use crate::io::{FrameBatch, PortCounters, RxBacklog, RxClasses, SLOT_LEN};
use std::cell::RefCell;
use std::mem::{offset_of, size_of};
use std::os::fd::OwnedFd;
use std::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use std::sync::atomic::{fence, Ordering};

/// `struct tpacket_req` (TPACKET_V1/V2 rings).
#[repr(C)]
pub(super) struct TpacketReq {
    pub block_size: u32,
    pub block_nr: u32,
    pub frame_size: u32,
    pub frame_nr: u32,
}

/// `struct tpacket2_hdr`.
#[repr(C)]
pub(super) struct Tpacket2Hdr {
    status: u32,
    len: u32,
    snaplen: u32,
    mac: u16,
    net: u16,
    sec: u32,
    nsec: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    padding: [u8; 4],
}

/// TPACKET2_HDRLEN: TPACKET_ALIGN(sizeof(struct tpacket2_hdr)) +
/// sizeof(struct sockaddr_ll).
const TPACKET2_HDRLEN: usize = 32 + 20;

/// Where a TX frame's header fields and data lie.
pub(super) const TX: TxLayout = TxLayout {
    status: offset_of!(Tpacket2Hdr, status),
    len: offset_of!(Tpacket2Hdr, len),
    snaplen: offset_of!(Tpacket2Hdr, snaplen),
    data: tpacket_align(size_of::<Tpacket2Hdr>()),
};

/// The V2 RX slot size for an interface MTU: the kernel puts the MAC
/// header at TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14 (packet_mmap.rst's
/// frame structure; no reserve), `vnet` bytes later with a virtio-net
/// header in front of it, and the longest frame is the MTU plus an
/// Ethernet header and one VLAN tag — capped at what a batch slot holds.
pub fn v2_frame_size(mtu: usize, vnet: usize) -> u32 {
    let longest = mtu.saturating_add(ETH_VLAN_HLEN).min(SLOT_LEN);
    tpacket_align(tpacket_align(TPACKET2_HDRLEN + 16) + vnet + longest).max(2048) as u32
}

/// What `backlog` has counted of the ring: slots, their wire bytes, and
/// the same bytes by class.
#[derive(Default)]
struct Seen {
    n: u32,
    bytes: u64,
    classes: RxClasses,
}

impl Seen {
    fn add(&mut self, len: u64, (pcp, dscp): (Option<u8>, u8)) {
        self.n += 1;
        self.bytes += len;
        if let Some(p) = pcp {
            self.classes.pcp[p as usize & 7] += len;
        }
        self.classes.dscp[dscp as usize & 63] += len;
    }

    /// The first counted slot was handed to the user.
    fn take_first(&mut self, len: u64, (pcp, dscp): (Option<u8>, u8)) {
        if self.n == 0 {
            return;
        }
        self.n -= 1;
        if self.n == 0 {
            // nothing counted is left: start clean (no rounding to carry)
            *self = Seen::default();
            return;
        }
        self.bytes = self.bytes.saturating_sub(len);
        if let Some(p) = pcp {
            let v = &mut self.classes.pcp[p as usize & 7];
            *v = v.saturating_sub(len);
        }
        let v = &mut self.classes.dscp[dscp as usize & 63];
        *v = v.saturating_sub(len);
    }
}

/// One slot the kernel handed over (TP_STATUS_USER).
struct Frame<'a> {
    /// The frame was longer than the slot and the kernel queued it whole
    /// on the socket (TP_STATUS_COPY; only with a virtio-net header).
    copied: bool,
    /// The segment size of a UDP super-frame (virtio-net header).
    segment: Option<usize>,
    hdr: *mut Tpacket2Hdr,
    /// Wire length as the kernel holds it (without a tag it took out).
    len: usize,
    /// The frame's bytes, `None` when it failed the ring's checks.
    data: Option<&'a [u8]>,
    /// The VLAN tag the kernel took out.
    tag: Option<[u8; 4]>,
}

impl Frame<'_> {
    /// The class PFC counts this frame under: the PCP of the tag the
    /// kernel took out (or of one left in the frame) and the IP DSCP.
    fn class(&self) -> (Option<u8>, u8) {
        let (pcp, dscp) = self.data.map_or((None, 0), RxClasses::classify);
        (self.tag.map(|t| t[2] >> 5).or(pcp), dscp)
    }
}

/// The RX ring: `frames` slots of `frame_size` bytes, `per_block` to a
/// block of `block_size` bytes (slots do not cross blocks).
pub(super) struct Rx {
    /// The start of the RX ring in the port's mapping.
    base: *mut u8,
    block_size: usize,
    frame_size: usize,
    per_block: u32,
    frames: u32,
    /// The next slot to read.
    next: u32,
    /// Slots from `next` on already seen as TP_STATUS_USER by `backlog`
    /// (they stay the user's until `recv` hands them back).
    seen: Box<RefCell<Seen>>,
    /// With a virtio-net header in front of every frame: the super-frame
    /// being cut into frames (`gso`).
    pending: Option<Box<Pending>>,
    /// Every frame has a virtio-net header in front of it.
    vnet: bool,
}

/// Asks the kernel for V2 rings on `fd` (PACKET_VERSION already set): RX
/// in slots sized from `mtu` unless `cfg` gives a size, TX as `tx` says.
/// Returns the RX ring, at `base` once mapped, and its length in bytes.
pub(super) fn request_rings(
    fd: &OwnedFd,
    cfg: &RingConfig,
    mtu: usize,
    tx: TxGeometry,
) -> Result<(RxGeometry, usize), AfPacketError> {
    let vnet = if cfg.gso { VNET_LEN } else { 0 };
    let frame_size = if cfg.rx_frame_size == 0 {
        v2_frame_size(mtu, vnet)
    } else {
        cfg.rx_frame_size
    };
    let per_block = cfg.rx_block_size / frame_size.max(1);
    let req = TpacketReq {
        block_size: cfg.rx_block_size,
        block_nr: cfg.rx_blocks,
        frame_size,
        frame_nr: per_block.saturating_mul(cfg.rx_blocks),
    };
    // The kernel refuses a geometry whose slots cannot hold a header, that
    // puts no slot in a block, or whose frame count is not slots per block
    // times blocks (packet_set_ring): on success, every slot index below
    // frame_nr lies inside the ring with room for its header.
    setsockopt(fd, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
    // no TX ring when frames leave by sendmmsg (UDP GSO)
    if tx.frame_nr > 0 {
        let txreq = TpacketReq {
            block_size: tx.block_size,
            block_nr: tx.block_nr,
            frame_size: tx.frame_size,
            frame_nr: tx.frame_nr,
        };
        setsockopt(fd, PACKET_TX_RING, &txreq, "PACKET_TX_RING")?;
    }
    let geometry = RxGeometry {
        block_size: cfg.rx_block_size as usize,
        frame_size: frame_size as usize,
        per_block,
        frames: req.frame_nr,
    };
    Ok((geometry, (cfg.rx_block_size * cfg.rx_blocks) as usize))
}

/// The RX ring's shape, as the kernel accepted it.
pub(super) struct RxGeometry {
    block_size: usize,
    frame_size: usize,
    per_block: u32,
    frames: u32,
}

impl Rx {
    /// The ring of `g`'s shape at `base`, which the caller keeps mapped
    /// for as long as the `Rx` lives; `vnet`: the socket has
    /// PACKET_VNET_HDR (and PACKET_COPY_THRESH).
    pub(super) fn new(base: *mut u8, g: RxGeometry, vnet: bool) -> Rx {
        Rx {
            pending: vnet.then(|| Box::new(Pending::new())),
            vnet,
            base,
            block_size: g.block_size,
            frame_size: g.frame_size,
            per_block: g.per_block,
            frames: g.frames,
            next: 0,
            seen: Box::new(RefCell::new(Seen::default())),
        }
    }

    /// The `i`th slot (`i < frames`).
    fn slot(&self, i: u32) -> *mut u8 {
        let off = (i / self.per_block) as usize * self.block_size
            + (i % self.per_block) as usize * self.frame_size;
        self.base.wrapping_add(off)
    }

    /// Slot `i` if the kernel has handed it over (TP_STATUS_USER).
    fn frame(&self, i: u32) -> Option<Frame<'_>> {
        let slot = self.slot(i);
        let hdr = slot as *mut Tpacket2Hdr;
        // SAFETY: i < frames, so hdr is the 16-byte-aligned header at the
        // start of a slot inside the mapped ring (`request_rings`); the
        // kernel writes tp_status concurrently, hence the volatile read.
        let status = unsafe { read_volatile(addr_of!((*hdr).status)) };
        if status & TP_STATUS_USER == 0 {
            return None;
        }
        fence(Ordering::Acquire);
        // SAFETY: a USER slot belongs to userspace until its status is set
        // back to KERNEL (the Acquire fence orders these reads after the
        // status read): the kernel does not write its header meanwhile.
        let (len, snaplen, mac, tci, tpid) = unsafe {
            (
                (*hdr).len as usize,
                (*hdr).snaplen as usize,
                (*hdr).mac as usize,
                (*hdr).vlan_tci,
                (*hdr).vlan_tpid,
            )
        };
        let tag = vlan_tag(status, tci, tpid);
        let tag_len = if tag.is_some() { 4 } else { 0 };
        let vnet = self.vnet;
        let copied = vnet && status & TP_STATUS_COPY != 0;
        let segment = match mac.checked_sub(VNET_LEN) {
            Some(at)
                if vnet && !copied && at >= size_of::<Tpacket2Hdr>() && mac <= self.frame_size =>
            {
                let mut h = [0u8; VNET_LEN];
                // SAFETY: [at, mac) lies inside the slot (past its header,
                // within its frame_size bytes), and the kernel leaves a
                // USER slot alone.
                unsafe { std::ptr::copy_nonoverlapping(slot.add(at), h.as_mut_ptr(), VNET_LEN) };
                VnetHdr::read(&h).udp_segment()
            }
            _ => None,
        };
        let data = frame_span(status, mac, snaplen, len, self.frame_size, tag_len)
            // SAFETY: frame_span kept [off, off + l) inside the slot's
            // frame_size bytes, which the kernel leaves alone while the
            // slot is USER; the slice lives no longer than &self, and the
            // slot is handed back only after its last use.
            .map(|(off, l)| unsafe { std::slice::from_raw_parts(slot.add(off) as *const u8, l) });
        Some(Frame {
            copied,
            segment,
            hdr,
            len,
            data,
            tag,
        })
    }

    /// Copies the frames the kernel handed over into `batch`, handing
    /// each slot back; super-frames (virtio-net header) are cut into their
    /// frames first, those the kernel queued on the socket read from `fd`.
    pub(super) fn recv(
        &mut self,
        fd: &OwnedFd,
        counters: &mut PortCounters,
        batch: &mut FrameBatch,
    ) -> usize {
        let mut pending = self.pending.take();
        let mut n = pending.as_mut().map_or(0, |p| p.drain(counters, batch));
        let mut i = self.next;
        while !batch.is_full() && !pending.as_ref().is_some_and(|p| p.is_live()) {
            let Some(f) = self.frame(i) else {
                break;
            };
            match (&mut pending, f.data) {
                (Some(p), _) if f.copied => {
                    if let Some(other) = p.recv_copy(fd, counters, f.tag.is_some()) {
                        n += take(counters, batch, Some(other), f.tag) as usize;
                    }
                }
                // a tagged super-frame is handed on whole (and refused by
                // the parser, counted): its segments would lose the tag
                (Some(p), Some(d)) if f.segment.is_some() && f.tag.is_none() => {
                    p.take_from(counters, d, f.segment.unwrap_or_default());
                }
                _ => n += take(counters, batch, f.data, f.tag) as usize,
            }
            let mut seen = self.seen.borrow_mut();
            // counted only when someone asks for the backlog (PFC on)
            if seen.n > 0 {
                seen.take_first(f.len as u64, f.class());
            }
            fence(Ordering::Release);
            // SAFETY: f.hdr is the header of a slot inside the ring (see
            // `frame`); the Release fence orders our reads of the slot
            // before the kernel can see it handed back.
            unsafe { write_volatile(addr_of_mut!((*f.hdr).status), TP_STATUS_KERNEL) };
            i = (i + 1) % self.frames;
            n += pending.as_mut().map_or(0, |p| p.drain(counters, batch));
        }
        self.next = i;
        self.pending = pending;
        n
    }

    /// The slots the kernel has filled and `recv` has not read, and their
    /// frames' bytes (wire lengths).
    pub(super) fn backlog(&self) -> RxBacklog {
        let mut seen = self.seen.borrow_mut();
        while seen.n < self.frames {
            let i = ((self.next as u64 + seen.n as u64) % self.frames as u64) as u32;
            let Some(f) = self.frame(i) else {
                break;
            };
            seen.add(f.len as u64, f.class());
        }
        RxBacklog {
            frames: seen.n as u64,
            bytes: seen.bytes,
            classes: Some(seen.classes.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::TPACKET_ALIGNMENT;
    use super::*;

    #[test]
    fn header_layouts_match_the_uapi() {
        assert_eq!(size_of::<Tpacket2Hdr>(), 32);
        assert_eq!(size_of::<TpacketReq>(), 16);
        assert_eq!(TX.data, 32);
        assert_eq!((TX.status, TX.len, TX.snaplen), (0, 4, 8));
    }

    #[test]
    fn v2_slots_hold_the_longest_frame_of_the_mtu() {
        for mtu in [1500usize, 4200, 9000, 65535] {
            for vnet in [0, VNET_LEN] {
                let f = v2_frame_size(mtu, vnet) as usize;
                assert_eq!(f % TPACKET_ALIGNMENT, 0);
                let mac = tpacket_align(TPACKET2_HDRLEN + 16) - 14 + vnet;
                let longest = (mtu + ETH_VLAN_HLEN).min(SLOT_LEN);
                assert!(mac + longest <= f, "mtu {mtu}: slot {f}");
                assert!(f <= (1 << 20) / 100, "mtu {mtu}: slot {f}");
            }
        }
        assert_eq!(v2_frame_size(1500, 0), 2048);
        assert_eq!(v2_frame_size(1500, VNET_LEN), 2048);
    }
}
