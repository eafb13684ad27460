//! The memory behind a memory region. The transport only copies bytes in
//! and out and runs 64-bit atomics, so any backing store works: a heap
//! buffer in tests, shared memory in the daemon.
//!
//! Like DMA on a hardware NIC, the engine may touch a buffer while the
//! application does too; which bytes either side sees in that case is the
//! application's business (IBA 10.6.3: the consumer must not touch memory
//! that is part of an outstanding work request).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

pub trait Memory: Send + Sync {
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `dst.len()` bytes from `offset`. Callers check bounds first.
    fn read(&self, offset: usize, dst: &mut [u8]);

    /// Copies `src` to `offset`. Callers check bounds first.
    fn write(&self, offset: usize, src: &[u8]);

    /// `read`, covering the bytes read with `icrc` as they are copied: the
    /// send path copies a payload into its frame and computes the ICRC in
    /// one pass. The ICRC must cover exactly the bytes that land in `dst`,
    /// even if the memory changes meanwhile. Callers check bounds first.
    fn read_icrc(&self, offset: usize, dst: &mut [u8], icrc: &mut wire::icrc::Icrc) {
        self.read(offset, dst);
        icrc.update(dst);
    }

    /// Atomically adds `add` to the 8-byte-aligned native-endian u64 at
    /// `offset` and returns the value before.
    fn fetch_add(&self, offset: usize, add: u64) -> u64;

    /// Atomically replaces the u64 at `offset` by `swap` if it equals
    /// `compare`; returns the value before.
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64;
}

/// Heap memory, 8-byte aligned so atomics work at any aligned offset.
pub struct HeapMemory {
    words: Box<[UnsafeCell<u64>]>,
    len: usize,
}

// SAFETY: all access goes through raw-pointer copies or atomics; concurrent
// access has DMA semantics (see the module docs).
unsafe impl Sync for HeapMemory {}
// SAFETY: the words are owned by the value (a boxed slice); nothing in it
// is tied to the thread that made it.
unsafe impl Send for HeapMemory {}

impl HeapMemory {
    pub fn new(len: usize) -> HeapMemory {
        let words = (0..len.div_ceil(8))
            .map(|_| UnsafeCell::new(0u64))
            .collect();
        HeapMemory { words, len }
    }

    pub fn from_bytes(b: &[u8]) -> HeapMemory {
        let m = HeapMemory::new(b.len());
        m.write(0, b);
        m
    }

    fn base(&self) -> *mut u8 {
        if self.words.is_empty() {
            core::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8
        } else {
            self.words[0].get() as *mut u8
        }
    }

    /// A copy of the whole buffer (for tests and tools).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.read(0, &mut v);
        v
    }

    fn atomic(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.len,
            "atomic at {offset} out of bounds or misaligned"
        );
        // SAFETY: in bounds, 8-aligned (the backing store is u64 words), and
        // every atomic access to these bytes goes through AtomicU64.
        unsafe { AtomicU64::from_ptr(self.base().add(offset) as *mut u64) }
    }
}

impl Memory for HeapMemory {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "read out of bounds");
        // SAFETY: bounds checked above.
        unsafe {
            core::ptr::copy_nonoverlapping(self.base().add(offset), dst.as_mut_ptr(), dst.len())
        }
    }

    fn read_icrc(&self, offset: usize, dst: &mut [u8], icrc: &mut wire::icrc::Icrc) {
        assert!(offset + dst.len() <= self.len, "read out of bounds");
        // SAFETY: bounds checked above; `dst` is a `&mut`, so not in here.
        unsafe { icrc.copy_raw(self.base().add(offset), dst) }
    }

    fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len, "write out of bounds");
        // SAFETY: bounds checked above.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), self.base().add(offset), src.len()) }
    }

    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        self.atomic(offset).fetch_add(add, Ordering::AcqRel)
    }

    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        match self.atomic(offset).compare_exchange(
            compare,
            swap,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(v) | Err(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_and_atomics() {
        let m = HeapMemory::new(24);
        m.write(3, b"hello");
        let mut out = [0u8; 5];
        m.read(3, &mut out);
        assert_eq!(&out, b"hello");
        assert_eq!(m.fetch_add(8, 5), 0);
        assert_eq!(m.fetch_add(8, 5), 5);
        assert_eq!(m.compare_swap(16, 1, 2), 0);
        assert_eq!(m.compare_swap(16, 0, 9), 0);
        assert_eq!(m.compare_swap(16, 0, 7), 9);
        assert_eq!(m.to_vec().len(), 24);
    }

    /// The fused read gives the bytes `read` gives and the CRC of them.
    #[test]
    fn read_icrc_copies_and_covers() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        let m = HeapMemory::from_bytes(&bytes);
        let front = [0u8; 40];
        for (off, len) in [(0, 0), (1, 63), (5, 64), (3, 300), (7, 4096), (0, 5000)] {
            let mut icrc = wire::icrc::Icrc::new(wire::IpVersion::V4, &front);
            let mut want = icrc.clone();
            let mut dst = vec![0u8; len];
            m.read_icrc(off, &mut dst, &mut icrc);
            assert!(dst == bytes[off..off + len], "{off} {len}");
            want.update(&bytes[off..off + len]);
            assert_eq!(icrc.finish(), want.finish(), "{off} {len}");
        }
    }
}
