//! The TX ring (both versions): frames marked TP_STATUS_SEND_REQUEST, then
//! one `sendto` kicks the kernel for the whole batch. Only the frame
//! header differs between versions ([`TxLayout`]).

use super::{TxLayout, TP_STATUS_SENDING, TP_STATUS_SEND_REQUEST, TP_STATUS_WRONG_FORMAT};
use crate::io::{FrameBatch, PortCounters};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::{read_volatile, write_volatile};
use std::sync::atomic::{fence, Ordering};

/// The TX ring: `frames` frames of `frame_size` bytes from `base`.
pub(super) struct Tx {
    /// The start of the TX ring in the port's mapping.
    base: *mut u8,
    frame_size: usize,
    frames: u32,
    layout: TxLayout,
    /// The next frame to fill.
    next: u32,
    /// Frames handed to the kernel and not yet seen free: the ones before
    /// `next`. The kernel sends ring frames in order, so they are found
    /// free oldest first ([`Self::reclaim`]): each frame's status is read
    /// about once after it is sent, instead of every frame ahead of `next`
    /// on every turn (each 64 KiB apart: a TLB miss apiece).
    in_flight: u32,
    /// The ring holds frames the kernel has not taken yet: its last kick
    /// failed (socket send buffer full, device busy) or the ring was found
    /// full. The kernel takes ring frames only when kicked, so every
    /// `send` and `recv` kicks again until one succeeds.
    pub kick_owed: bool,
}

impl Tx {
    /// The ring at `base`, which the caller keeps mapped for as long as
    /// the `Tx` lives; `frame_size` is a multiple of 16 holding at least
    /// a header (the kernel refused the ring otherwise).
    pub(super) fn new(base: *mut u8, frame_size: u32, frames: u32, layout: TxLayout) -> Tx {
        Tx {
            base,
            frame_size: frame_size as usize,
            frames,
            layout,
            next: 0,
            in_flight: 0,
            kick_owed: false,
        }
    }

    /// The `i`th frame's header field at `off`, a u32 (`i < frames`).
    fn field(&self, i: u32, off: usize) -> *mut u32 {
        self.base
            .wrapping_add(i as usize * self.frame_size + off)
            .cast::<u32>()
    }

    /// Queues a prefix of `batch` (frames longer than `mtu` plus an
    /// Ethernet header and one VLAN tag, or than a ring frame, end it) and
    /// kicks the kernel. Returns how many were queued.
    pub(super) fn send(
        &mut self,
        fd: &OwnedFd,
        mtu: usize,
        counters: &mut PortCounters,
        batch: &FrameBatch,
    ) -> usize {
        self.reclaim();
        let l = self.layout;
        let fits = |f: &[u8]| super::fits_link(f, mtu) && f.len() + l.data <= self.frame_size;
        let limit = batch.iter().position(|f| !fits(f)).unwrap_or(batch.len());
        let mut queued = 0;
        for f in batch.iter().take(limit) {
            let status_p = self.field(self.next, l.status);
            let status = self.status(self.next);
            if status & (TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING) != 0 {
                // a ring full of frames the kernel was never kicked for
                // would stay full for good
                self.kick_owed = true;
                break;
            }
            if status & TP_STATUS_WRONG_FORMAT != 0 {
                counters.tx_dropped += 1;
            }
            fence(Ordering::Acquire);
            let data = self
                .base
                .wrapping_add(self.next as usize * self.frame_size + l.data);
            // SAFETY: the frame's status is AVAILABLE, so the kernel does
            // not touch its bytes until we publish it; [l.data, frame_size)
            // lies inside this ring frame, and the slice is dropped before
            // the status is written.
            let out = unsafe { std::slice::from_raw_parts_mut(data, self.frame_size - l.data) };
            out[..f.len()].copy_from_slice(f);
            let len = f.len();
            // SAFETY: tp_len and tp_snaplen are aligned u32 fields of the
            // header of the same ring frame.
            unsafe {
                write_volatile(self.field(self.next, l.len), len as u32);
                write_volatile(self.field(self.next, l.snaplen), len as u32);
            }
            fence(Ordering::Release);
            // SAFETY: the same status word as above; the Release fence
            // orders the frame's bytes before the kernel can see them.
            unsafe { write_volatile(status_p, TP_STATUS_SEND_REQUEST) };
            self.next = (self.next + 1) % self.frames;
            self.in_flight = (self.in_flight + 1).min(self.frames);
            queued += 1;
        }
        for f in batch.iter().take(queued) {
            counters.sent(f.len());
        }
        counters.tx_dropped += (batch.len() - queued) as u64;
        if queued > 0 || self.kick_owed {
            self.kick(fd, counters);
        }
        queued
    }

    /// How many of the next `want` ring frames are free (the kernel sent
    /// them); when none is, the owed kick is made first.
    pub(super) fn room(&mut self, fd: &OwnedFd, counters: &mut PortCounters, want: usize) -> usize {
        self.reclaim();
        if self.kick_owed && self.in_flight == self.frames {
            self.kick(fd, counters);
            self.reclaim();
        }
        want.min((self.frames - self.in_flight) as usize)
    }

    /// Counts the frames the kernel finished since the last look, oldest
    /// first, stopping at the first it has not: a frame freed out of order
    /// counts once the older ones are (fewer free frames are claimed than
    /// there are, never more).
    fn reclaim(&mut self) {
        while self.in_flight > 0 {
            let oldest = (self.next + self.frames - self.in_flight) % self.frames;
            if !self.free_at(oldest) {
                break;
            }
            self.in_flight -= 1;
        }
    }

    /// Whether ring frame `i` (< frames) is free to fill.
    fn free_at(&self, i: u32) -> bool {
        self.status(i) & (TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING) == 0
    }

    /// Ring frame `i`'s tp_status (`i < frames`).
    fn status(&self, i: u32) -> u32 {
        debug_assert!(i < self.frames);
        // SAFETY: i < frames: tp_status of a frame inside the mapped TX
        // ring, 4-byte aligned (frames are 16-byte aligned, the field's
        // offset a multiple of 4); the kernel writes it concurrently,
        // hence the volatile read.
        unsafe { read_volatile(self.field(i, self.layout.status)) }
    }

    /// sendto(2) with no data: the kernel takes the ring's pending frames
    /// in order until one fails (send buffer full, device busy). If the
    /// frame queued last is still pending afterwards, the kick is owed.
    pub(super) fn kick(&mut self, fd: &OwnedFd, counters: &mut PortCounters) {
        if let Err(e) = crate::io::kick_tx(fd.as_raw_fd()) {
            if e.kind() != io::ErrorKind::WouldBlock && e.raw_os_error() != Some(libc::ENOBUFS) {
                counters.tx_dropped += 1;
            }
        }
        let last = (self.next + self.frames - 1) % self.frames;
        self.kick_owed = self.status(last) & TP_STATUS_SEND_REQUEST != 0;
    }
}
