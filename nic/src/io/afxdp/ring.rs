//! The four single-producer single-consumer rings an AF_XDP socket shares
//! with the kernel (Documentation/networking/af_xdp.rst): fill and TX,
//! where we produce; RX and completion, where we consume. Each is an mmap'd
//! area holding a producer index, a consumer index, a flags word and a
//! power-of-two array of entries; indices run freely and wrap at 2^32.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// `struct xdp_desc`: one RX or TX buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// `struct xdp_mmap_offsets` (Linux ≥ 5.4, with the flags words).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MmapOffsets {
    pub rx: RingOffset,
    pub tx: RingOffset,
    pub fr: RingOffset,
    pub cr: RingOffset,
}

/// `XDP_RING_NEED_WAKEUP`: the kernel asks for a syscall to make progress.
const XDP_RING_NEED_WAKEUP: u32 = 1;

/// Which end of a ring is ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Producer,
    Consumer,
}

/// One mapped ring of `T` entries (`u64` addresses or [`XdpDesc`]s).
pub struct Ring<T> {
    area: *mut u8,
    area_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    entries: *mut T,
    mask: u32,
    /// Our copy of the index we own (producer rings: producer; consumer
    /// rings: consumer), published with `submit` / `release`.
    local: u32,
}

impl<T: Copy> Ring<T> {
    /// Maps the ring of `size` entries at page offset `pgoff` of socket `fd`.
    pub fn map(
        fd: RawFd,
        off: &RingOffset,
        size: u32,
        pgoff: u64,
        ours: Side,
    ) -> io::Result<Ring<T>> {
        let area_len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: a fresh shared mapping, at an address the kernel picks,
        // of the ring set up on `fd` (its XDP_*_RING option came first);
        // the length covers its header words and `size` entries.
        let area = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                area_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if area == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let area = area as *mut u8;
        // The kernel's offsets (XDP_MMAP_OFFSETS) put the producer,
        // consumer and flags words and the entry array inside the area,
        // each aligned for its type (struct xdp_ring); `size` is a power
        // of two (the kernel refuses other ring sizes), so `mask` keeps an
        // index inside the entries.
        let mut ring = Ring {
            area,
            area_len,
            producer: area.wrapping_add(off.producer as usize) as *const AtomicU32,
            consumer: area.wrapping_add(off.consumer as usize) as *const AtomicU32,
            flags: area.wrapping_add(off.flags as usize) as *const AtomicU32,
            entries: area.wrapping_add(off.desc as usize) as *mut T,
            mask: size - 1,
            local: 0,
        };
        ring.local = match ours {
            Side::Producer => ring.producer().load(Ordering::Relaxed),
            Side::Consumer => ring.consumer().load(Ordering::Relaxed),
        };
        Ok(ring)
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: an aligned u32 word of the mapping, which lives as long
        // as self; the kernel updates it atomically too, and AtomicU32 has
        // u32's layout.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { &*self.consumer }
    }

    pub fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Whether the kernel set `XDP_RING_NEED_WAKEUP` (bound with
    /// `XDP_USE_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        // SAFETY: as in `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }

    /// The entry `index` falls on (masked into the entry array).
    fn slot(&self, index: u32) -> *mut T {
        self.entries.wrapping_add((index & self.mask) as usize)
    }

    // ---- producer side (fill, TX)

    /// Entries we may write before the kernel consumes more.
    pub fn free(&self) -> u32 {
        let cons = self.consumer().load(Ordering::Acquire);
        self.size() - self.local.wrapping_sub(cons)
    }

    /// Entries published and not yet consumed by the kernel.
    pub fn outstanding(&self) -> u32 {
        self.local
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// Writes the `i`th entry after the published ones; `i < free()`.
    pub fn write(&mut self, i: u32, v: T) {
        // SAFETY: `slot` masks the index into the live entry array,
        // aligned for T; an entry past the published producer index is not
        // read by the kernel until `submit` publishes it.
        unsafe { std::ptr::write_volatile(self.slot(self.local.wrapping_add(i)), v) };
    }

    /// Publishes the next `n` written entries.
    pub fn submit(&mut self, n: u32) {
        if n > 0 {
            self.local = self.local.wrapping_add(n);
            self.producer().store(self.local, Ordering::Release);
        }
    }

    // ---- consumer side (RX, completion)

    /// Entries the kernel has produced that we have not released.
    pub fn available(&self) -> u32 {
        self.producer()
            .load(Ordering::Acquire)
            .wrapping_sub(self.local)
    }

    /// The `i`th unreleased entry; `i < available()`.
    pub fn read(&self, i: u32) -> T {
        // SAFETY: `slot` masks the index into the live entry array,
        // aligned for T, and T is plain integers (any bytes are a value);
        // entries below the producer index (loaded with Acquire in
        // `available`) are complete and the kernel leaves them until
        // `release`.
        unsafe { std::ptr::read_volatile(self.slot(self.local.wrapping_add(i))) }
    }

    /// Hands the next `n` entries back to the kernel.
    pub fn release(&mut self, n: u32) {
        if n > 0 {
            self.local = self.local.wrapping_add(n);
            self.consumer().store(self.local, Ordering::Release);
        }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: area/area_len are the mapping `map` made; the pointers
        // into it die with self.
        unsafe { libc::munmap(self.area as *mut libc::c_void, self.area_len) };
    }
}
