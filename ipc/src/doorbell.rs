//! Doorbell pages: one shared page per client connection, through which a
//! client tells the engine which of its rings it posted to, as a NIC learns
//! from a write to a QP's doorbell register which queue has work. The
//! engine then looks only at the rings rung, however many rings there are.
//!
//! A page is [`PAGE_LEN`] bytes: the engine's "parked" word (u32) at byte
//! 0 ([`park_word`]: 0 while the engine runs; else the CPU it parks on,
//! and whether its own timer ends the park soon), the "near" word (u32) at
//! byte [`NEAR_AT`] (the CPU + 1 a client last posted on while the engine
//! parked, which the engine takes: it shortens its parks while it shares
//! a CPU with a client), then from byte [`BITS_AT`] a bitmap of [`SLOTS`] bits, one per ring
//! (a QP's send and receive rings, an SRQ's), whose number the daemon
//! writes into the ring's header ([`crate::ring::SLOT_AT`]).
//!
//! A client posts: it writes the WQE, release-stores the producer index,
//! sets its ring's bit (release), then after a SeqCst fence reads
//! "parked" and, if set, rings the engine's bell — or, when the engine
//! parks on the client's own CPU and comes back by itself soon
//! ([`may_leave_wake`]), leaves the wake to that timer or to its own next
//! poll of a completion queue: on a CPU the two share, a woken engine
//! would preempt the client after every post. The engine takes a word
//! (swap to 0, acquire) before it reads the producer indices of the rings
//! it names. Before it parks it raises "parked", fences, and looks at the
//! words once more: either it sees the bit or the client sees the flag.
//!
//! The page is the client's to write: a bit set for no ring of its own, or
//! for nothing posted, costs the engine one empty look; a bit never set
//! only leaves the client's own work waiting.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A doorbell page's length.
pub const PAGE_LEN: usize = 8192;
/// Where the "near" word is.
pub const NEAR_AT: usize = 4;
/// Where the bitmap starts (the "parked" and "near" words have the first
/// cache line).
pub const BITS_AT: usize = 64;
/// Bits in a page: the rings one client may have.
pub const SLOTS: u32 = ((PAGE_LEN - BITS_AT) * 8) as u32;
/// 64-bit words in the bitmap.
pub const WORDS: usize = (PAGE_LEN - BITS_AT) / 8;

/// The "parked" word's flag: the engine's own timer ends this park
/// soon (within its `self_wake`, some tens of µs).
pub const SELF_WAKE: u32 = 1 << 31;
/// The "parked" word's bits that hold the engine's CPU + 1 (0: unknown).
const CPU_MASK: u32 = 0xFFFF;

/// The "parked" word for an engine that parks on `cpu` (None: unknown;
/// a CPU beyond the mask counts as unknown), its own timer ending the
/// park soon or not. Never 0.
pub fn park_word(cpu: Option<u32>, self_wake: bool) -> u32 {
    let cpu = cpu.filter(|&c| c < CPU_MASK).map_or(0, |c| c + 1);
    // bit 30 keeps the word nonzero when neither the CPU nor the flag is
    const PARKED: u32 = 1 << 30;
    PARKED | cpu | if self_wake { SELF_WAKE } else { 0 }
}

/// Whether a client that posted on `cpu` may leave the wake of an engine
/// whose "parked" word is `word` to the engine's own timer (or to the
/// client's next poll): the engine parks on that very CPU and comes back
/// by itself soon.
pub fn may_leave_wake(word: u32, cpu: u32) -> bool {
    word & SELF_WAKE != 0 && cpu < CPU_MASK && word & CPU_MASK == cpu + 1
}

/// A view of a mapped doorbell page.
#[derive(Clone, Copy)]
pub struct Doorbells {
    base: *mut u8,
}

// SAFETY: the page is shared memory used only through atomics.
unsafe impl Send for Doorbells {}
// SAFETY: as above.
unsafe impl Sync for Doorbells {}

impl Doorbells {
    /// # Safety
    /// `base` points at [`PAGE_LEN`] mapped bytes, 8-byte aligned, that
    /// stay mapped while the view is used.
    pub unsafe fn new(base: *mut u8) -> Doorbells {
        Doorbells { base }
    }

    /// The engine's "parked" word: nonzero while it waits on its bell
    /// ([`park_word`]).
    #[inline]
    pub fn parked(&self) -> &AtomicU32 {
        // SAFETY: byte 0 of the page, aligned.
        unsafe { AtomicU32::from_ptr(self.base as *mut u32) }
    }

    /// The "near" word: the CPU + 1 the client last posted on while the
    /// engine parked (0: none since the engine took it).
    #[inline]
    pub fn near(&self) -> &AtomicU32 {
        // SAFETY: byte NEAR_AT of the page, 4-byte aligned.
        unsafe { AtomicU32::from_ptr(self.base.add(NEAR_AT) as *mut u32) }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < WORDS);
        // SAFETY: i < WORDS keeps the word inside the page; BITS_AT and
        // the page's alignment keep it 8-byte aligned.
        unsafe { AtomicU64::from_ptr(self.base.add(BITS_AT + 8 * i) as *mut u64) }
    }

    /// Marks ring `slot` as rung (the client's side). A slot beyond the
    /// page (a wild header) rings nothing.
    #[inline]
    pub fn ring(&self, slot: u32) {
        if slot < SLOTS {
            self.word((slot / 64) as usize)
                .fetch_or(1 << (slot % 64), Ordering::Release);
        }
    }

    /// Takes word `i` (the engine's side): the slots rung since the last
    /// take, as bits; a plain load first, so an idle word costs no write.
    #[inline]
    pub fn take(&self, i: usize) -> u64 {
        let w = self.word(i);
        if w.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        w.swap(0, Ordering::AcqRel)
    }

    /// Whether any of the first `words` words has a bit set.
    #[inline]
    pub fn any(&self, words: usize) -> bool {
        (0..words.min(WORDS)).any(|i| self.word(i).load(Ordering::SeqCst) != 0)
    }
}

/// What a slot names, in the daemon's table of a client's slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A QP's send ring (by QPN).
    Sq(u32),
    /// A QP's receive ring.
    Rq(u32),
    /// An SRQ's ring (by SRQ number).
    Srq(u32),
}

/// A client's slots: which ring each names; freed slots are reused.
#[derive(Default)]
pub struct Slots {
    table: Vec<Option<Target>>,
}

impl Slots {
    /// A free slot for `t`; None when the page has no more.
    pub fn alloc(&mut self, t: Target) -> Option<u32> {
        if let Some(i) = self.table.iter().position(Option::is_none) {
            self.table[i] = Some(t);
            return Some(i as u32);
        }
        if self.table.len() >= SLOTS as usize {
            return None;
        }
        self.table.push(Some(t));
        Some(self.table.len() as u32 - 1)
    }

    /// Frees every slot naming a ring `gone` says is gone.
    pub fn release(&mut self, mut gone: impl FnMut(Target) -> bool) {
        for s in &mut self.table {
            if s.is_some_and(&mut gone) {
                *s = None;
            }
        }
        while self.table.last() == Some(&None) {
            self.table.pop();
        }
    }

    /// What slot `i` names (None: free, or beyond the table).
    pub fn get(&self, i: u32) -> Option<Target> {
        self.table.get(i as usize).copied().flatten()
    }

    /// Whether `n` more slots fit.
    pub fn room(&self, n: usize) -> bool {
        let free = self.table.iter().filter(|s| s.is_none()).count();
        free + (SLOTS as usize - self.table.len()) >= n
    }

    /// The bitmap words in use.
    pub fn words(&self) -> usize {
        self.table.len().div_ceil(64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_the_table_shrinks() {
        let mut s = Slots::default();
        assert_eq!(s.alloc(Target::Sq(5)), Some(0));
        assert_eq!(s.alloc(Target::Rq(5)), Some(1));
        assert_eq!(s.alloc(Target::Srq(2)), Some(2));
        s.release(|t| matches!(t, Target::Sq(5) | Target::Rq(5)));
        assert_eq!(s.get(0), None);
        assert_eq!(s.get(2), Some(Target::Srq(2)));
        assert_eq!(s.alloc(Target::Sq(9)), Some(0));
        s.release(|t| t == Target::Srq(2));
        assert_eq!(s.words(), 1);
        s.release(|_| true);
        assert_eq!(s.words(), 0);
    }

    #[test]
    fn a_page_has_room_for_its_slots_and_no_more() {
        let mut s = Slots::default();
        for i in 0..SLOTS {
            assert_eq!(s.alloc(Target::Sq(i)), Some(i));
        }
        assert_eq!(s.alloc(Target::Sq(0)), None);
        assert_eq!(s.words(), WORDS);
    }

    #[test]
    fn a_rung_slot_is_taken_once_and_a_wild_one_rings_nothing() {
        let mut page = vec![0u64; PAGE_LEN / 8];
        // SAFETY: PAGE_LEN bytes, 8-byte aligned, alive for the test.
        let db = unsafe { Doorbells::new(page.as_mut_ptr().cast()) };
        db.ring(3);
        db.ring(64 + 7);
        db.ring(SLOTS);
        assert!(db.any(2));
        assert_eq!(db.take(0), 1 << 3);
        assert_eq!(db.take(0), 0);
        assert_eq!(db.take(1), 1 << 7);
        assert!(!db.any(WORDS));
    }

    #[test]
    fn a_client_leaves_the_wake_only_to_an_engine_on_its_cpu_that_wakes_itself() {
        for cpu in [None, Some(0), Some(1), Some(CPU_MASK)] {
            for soon in [false, true] {
                assert_ne!(park_word(cpu, soon), 0, "a parked word is never 0");
            }
        }
        assert!(may_leave_wake(park_word(Some(1), true), 1));
        // another CPU: the engine runs in parallel once woken
        assert!(!may_leave_wake(park_word(Some(1), true), 0));
        // a long park: nothing would end it soon
        assert!(!may_leave_wake(park_word(Some(1), false), 1));
        // the CPU unknown, or beyond what the word holds
        assert!(!may_leave_wake(park_word(None, true), 0));
        assert!(!may_leave_wake(park_word(Some(CPU_MASK), true), CPU_MASK));
        // a word some other writer left (the page is the client's to scribble)
        assert!(!may_leave_wake(SELF_WAKE, u32::MAX));
    }
}
