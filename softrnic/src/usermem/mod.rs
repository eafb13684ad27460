//! Registering ordinary process memory (`ibv_reg_mr` on malloc, mmap,
//! posix_memalign memory): the registered pages are moved onto shared
//! memory at the same virtual address ("re-backing"), so the daemon can map
//! and access them while the program keeps using its own pointers.
//!
//! One sealed memfd per process (a sparse file of 2^57 bytes; only pages
//! written take memory) holds every registered page at the file offset
//! equal to its virtual address, its *home*. To register `[addr, addr +
//! len)` the pages are looked up in `/proc/self/maps`, every piece checked
//! before anything changes:
//! - pages of the memfd mapped at home are used as they are, so
//!   overlapping registrations share their bytes;
//! - private mappings (anonymous, the heap, MAP_PRIVATE file mappings such
//!   as `.data`) are copied into the memfd at home and the memfd is mapped
//!   over them (`MAP_SHARED | MAP_FIXED`, same protection); so are pages
//!   of the memfd mapped away from home (a registered block that
//!   `mremap` moved, as glibc's `realloc` does), and any such moved
//!   mapping elsewhere whose file pages the copy would overwrite (moved
//!   home first, from a snapshot);
//! - anything else is refused with nothing changed: shared mappings that
//!   are not ours (`MAP_SHARED` files, shmem, SysV), hugetlb and device
//!   mappings (`VmFlags` `ht`, `io`, `pf`, `mm` in smaps), the main stack
//!   and the calling thread's stack, the vDSO and other `[special]`
//!   mappings (EOPNOTSUPP); holes and unreadable pages, and pages without
//!   write permission when the region asks for write access (EFAULT, as
//!   the kernel's page pinning).
//!
//! Adjacent pages at home merge into one mapping (same file, consecutive
//! offsets), so a registration spanning several earlier ones is still one
//! contiguous window of the one file: the daemon receives the memfd with
//! the region's offset (= its address) and maps only the region's pages;
//! the seals keep the file from shrinking under it, and unmapping on the
//! client side does not affect the daemon's mapping.
//!
//! Why one file rather than a memfd per moved run and a list of (fd,
//! offset) segments per registration: a descriptor per run in the client
//! (thousands of MRs would exhaust RLIMIT_NOFILE), and an exact-size file
//! per run would SIGBUS a program whose `realloc` grows a registered
//! block in place with `mremap`; with one sparse file at home offsets a
//! grown mapping reads file pages no other mapping uses, and overlapping
//! or adjacent registrations are coherent by construction.
//!
//! Pages are forgotten when no mapping of ours shows them any more (the
//! program freed them: `munmap`, a heap trimmed by `brk`) and no
//! registration that is still live covers them ([`release`] on
//! deregistration): their file pages are punched out then, and a later
//! registration of the same addresses copies the new memory in afresh.
//!
//! Fork: after [`fork_init`] the moved pages are MADV_DONTFORK (the child
//! does not inherit them, as with rdma-core's `ibv_fork_init`); otherwise
//! a child gets private copies of them (a pthread_atfork child handler,
//! registered when the library loads so that it runs before other
//! libraries' ones; it allocates nothing, since heap pages are still shared
//! until it is done, and the forking thread waits in the parent handler
//! until it is), so parent and child never share memory they did not
//! share before, as the kernel's copy-on-fork of pinned pages gives. The
//! registry's lock is held from the prepare handler to the parent/child
//! ones (a spin lock, so neither side can find it poisoned or owned by a
//! vanished thread). Either way the child starts with a memfd of its own.
//!
//! Known gaps: a thread writing the pages while they are being moved may
//! lose that write (on the heap that includes malloc's bookkeeping of
//! neighbouring blocks), and other threads writing them while a child is
//! being forked may leave the child a copy newer than the fork; other
//! threads' stacks are not recognised (they are written all the time: do
//! not register them); hugetlb memory cannot be registered; mlock and
//! madvise flags of the moved pages are not carried over; a child made
//! without glibc's fork (a raw `clone` without CLONE_VM) shares the moved
//! pages with its parent; a block `mremap` moved while still registered
//! keeps its old file pages, which a later registration of its old
//! addresses reuses (the old region then sees the new block).
//!
//! Code map: this file holds the store and its lock, the planner (`plan`)
//! and the mover (`apply`), which share the store's invariants and are
//! read together (its length past ~600 lines is this description); `maps`
//! parses `/proc/self/maps` and `smaps`; `fork` holds the fork handlers.

mod fork;
mod maps;
#[cfg(test)]
mod tests;

pub use fork::{fork_init, fork_initialized};

use fork::{anon_rw, init_atfork};
use maps::*;
use std::cell::{Cell, UnsafeCell};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The memfd's size: every user address of 64-bit Linux (57 bits with
/// 5-level paging, 52 on arm64) is an offset in it.
const SPACE: u64 = 1 << 57;
const NAME: &str = "softrnic-mem";
/// `MFD_NOEXEC_SEAL` (Linux 6.3), for `vm.memfd_noexec = 2`.
const MFD_NOEXEC_SEAL: libc::c_uint = 0x8;

/// Why memory cannot be registered.
#[derive(Debug, thiserror::Error)]
pub enum UserMemError {
    #[error("[{0:#x}, {1:#x}) is not mapped")]
    Unmapped(usize, usize),
    #[error("[{0:#x}, {1:#x}) ({2}) cannot be shared with the daemon: only private memory (malloc, mmap MAP_PRIVATE) can be registered")]
    Unshareable(usize, usize, String),
    #[error("[{0:#x}, {1:#x}) is not readable")]
    Unreadable(usize, usize),
    #[error("[{0:#x}, {1:#x}) is not writable and the region asks for write access")]
    ReadOnly(usize, usize),
    #[error("bad range")]
    BadRange,
    #[error("{0}: {1}")]
    Os(&'static str, std::io::Error),
}

impl UserMemError {
    /// The errno `ibv_reg_mr` reports for it.
    pub fn errno(&self) -> i32 {
        match self {
            UserMemError::Unmapped(..)
            | UserMemError::Unreadable(..)
            | UserMemError::ReadOnly(..) => libc::EFAULT,
            UserMemError::Unshareable(..) => libc::EOPNOTSUPP,
            UserMemError::BadRange => libc::EINVAL,
            UserMemError::Os(_, e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

pub use ipc::shm::page_size;

/// Sorted, disjoint, non-touching half-open ranges.
#[derive(Clone, Debug, Default, PartialEq)]
struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    fn of(it: impl IntoIterator<Item = (u64, u64)>) -> Ranges {
        let mut v: Vec<(u64, u64)> = it.into_iter().filter(|(a, b)| a < b).collect();
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(l) if a <= l.1 => l.1 = l.1.max(b),
                _ => out.push((a, b)),
            }
        }
        Ranges(out)
    }

    fn add(&mut self, r: (u64, u64)) {
        let mut v = std::mem::take(&mut self.0);
        v.push(r);
        *self = Ranges::of(v);
    }

    /// What is in `self` and not in `cut`.
    fn minus(&self, cut: &Ranges) -> Ranges {
        let mut out = Vec::new();
        for &(a, b) in &self.0 {
            let mut at = a;
            for &(c, d) in cut.0.iter().filter(|(c, d)| *d > a && *c < b) {
                if c > at {
                    out.push((at, c));
                }
                at = at.max(d);
            }
            if at < b {
                out.push((at, b));
            }
        }
        Ranges(out)
    }

    fn intersects(&self, (a, b): (u64, u64)) -> bool {
        self.0.iter().any(|&(c, d)| c < b && a < d)
    }
}

struct Store {
    fd: OwnedFd,
    dev: u64,
    ino: u64,
    /// File ranges we copied pages into (not yet punched out).
    placed: Ranges,
    /// Page ranges of live registrations (how many each).
    pinned: BTreeMap<(u64, u64), usize>,
}

/// The process-wide store behind a spin lock (a pthread_atfork prepare
/// handler holds it across fork, so it must not be a lock a forked child
/// could find poisoned or owned by a vanished thread).
struct Global {
    busy: AtomicBool,
    store: UnsafeCell<Option<Store>>,
    dontfork: AtomicBool,
    atfork: std::sync::Once,
}

// SAFETY: `store` is only touched while `busy` is held (see `with`).
unsafe impl Sync for Global {}

static G: Global = Global {
    busy: AtomicBool::new(false),
    store: UnsafeCell::new(None),
    dontfork: AtomicBool::new(false),
    atfork: std::sync::Once::new(),
};

fn acquire() {
    while G
        .busy
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

fn release_lock() {
    G.busy.store(false, Ordering::Release);
}

fn with<R>(f: impl FnOnce(&mut Option<Store>) -> R) -> R {
    acquire();
    // SAFETY: `busy` is held: nobody else touches the store.
    let r = f(unsafe { &mut *G.store.get() });
    release_lock();
    r
}

/// A mapping of our memfd (anywhere).
fn of_store(s: &Store, m: &MapLine) -> bool {
    !m.private && m.ino == s.ino && m.dev == s.dev
}

fn os(what: &'static str) -> UserMemError {
    UserMemError::Os(what, std::io::Error::last_os_error())
}

fn open_store() -> Result<Store, UserMemError> {
    let name = std::ffi::CString::new(NAME).expect("no NUL");
    // SAFETY: plain syscalls on a new descriptor we own.
    unsafe {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        let mut raw = libc::memfd_create(name.as_ptr(), flags);
        if raw < 0 {
            // vm.memfd_noexec = 2 wants the no-exec seal
            raw = libc::memfd_create(name.as_ptr(), flags | MFD_NOEXEC_SEAL);
        }
        if raw < 0 {
            return Err(os("memfd_create"));
        }
        let fd = OwnedFd::from_raw_fd(raw);
        if libc::ftruncate(raw, SPACE as libc::off_t) != 0 {
            return Err(os("ftruncate"));
        }
        if libc::fcntl(
            raw,
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        ) != 0
        {
            return Err(os("F_ADD_SEALS"));
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(raw, &mut st) != 0 {
            return Err(os("fstat"));
        }
        Ok(Store {
            fd,
            dev: st.st_dev,
            ino: st.st_ino,
            placed: Ranges::default(),
            pinned: BTreeMap::new(),
        })
    }
}

/// `[lo, hi)` of the calling thread's stack (glibc's idea of it: for the
/// main thread the whole extent it may grow to).
fn own_stack() -> Option<(u64, u64)> {
    thread_local!(static STACK: Cell<Option<(u64, u64)>> = const { Cell::new(None) });
    if let Some(s) = STACK.with(|c| c.get()) {
        return Some(s);
    }
    // SAFETY: pthread_getattr_np fills `attr`, which we destroy after
    // reading the stack out of it.
    let s = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut lo: *mut libc::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let r = libc::pthread_attr_getstack(&attr, &mut lo, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if r != 0 || size == 0 {
            return None;
        }
        (lo as u64, lo as u64 + size as u64)
    };
    STACK.with(|c| c.set(Some(s)));
    Some(s)
}

/// A page range to move home: copied from private memory, or from a
/// mapping of our memfd away from home (`moved`: snapshotted first).
struct Move {
    va: (u64, u64),
    prot: i32,
    moved: bool,
}

/// Checks every page of `[start, stop)` and returns what has to move
/// (nothing changes here).
fn plan(
    s: &Store,
    maps: &[MapLine],
    start: u64,
    stop: u64,
    writable: bool,
) -> Result<Vec<Move>, UserMemError> {
    let mut moves = Vec::new();
    let mut file_backed = Vec::new();
    let mut at = start;
    for m in maps
        .iter()
        .filter(|m| m.end as u64 > start && (m.start as u64) < stop)
    {
        if m.start as u64 > at {
            return Err(UserMemError::Unmapped(at as usize, m.start));
        }
        let (p0, p1) = (at.max(m.start as u64), stop.min(m.end as u64));
        let (u0, u1) = (p0 as usize, p1 as usize);
        let ours = of_store(s, m);
        if !ours {
            let special =
                m.path.starts_with('[') && m.path != "[heap]" && !m.path.starts_with("[anon:");
            if !m.private || special {
                let what = if m.path.is_empty() {
                    "shared memory".to_string()
                } else {
                    m.path.clone()
                };
                return Err(UserMemError::Unshareable(u0, u1, what));
            }
        }
        if m.prot & libc::PROT_READ == 0 {
            return Err(UserMemError::Unreadable(u0, u1));
        }
        if writable && m.prot & libc::PROT_WRITE == 0 {
            return Err(UserMemError::ReadOnly(u0, u1));
        }
        if !ours && (m.ino != 0 || m.path.contains("hugepage")) {
            file_backed.push((m.start, u0, u1));
        }
        if !ours || m.offset != m.start as u64 {
            moves.push(Move {
                va: (p0, p1),
                prot: m.prot,
                moved: ours,
            });
        }
        at = p1;
    }
    if at < stop {
        return Err(UserMemError::Unmapped(at as usize, stop as usize));
    }
    if !file_backed.is_empty() {
        // private file mappings: hugetlbfs and device files cannot be
        // copied page by page (smaps is only read for these, rare, cases)
        let text = std::fs::read_to_string("/proc/self/smaps")
            .map_err(|e| UserMemError::Os("/proc/self/smaps", e))?;
        let starts: Vec<usize> = file_backed.iter().map(|f| f.0).collect();
        let flags = vm_flags(&text, &starts);
        for (vma, u0, u1) in file_backed {
            let why = match flags.get(&vma) {
                Some(f) => special_flags(f),
                None => Some("mapping changed while looking"),
            };
            if let Some(why) = why {
                return Err(UserMemError::Unshareable(u0, u1, why.into()));
            }
        }
    }
    // mappings of ours away from home (outside the range) whose file pages
    // the copies would overwrite go home too, and so on
    let range = Ranges::of([(start, stop)]);
    let mut away: Vec<(u64, u64, u64, i32)> = Vec::new();
    for m in maps
        .iter()
        .filter(|m| of_store(s, m) && m.offset != m.start as u64)
    {
        let whole = Ranges::of([(m.start as u64, m.end as u64)]);
        for (a, b) in whole.minus(&range).0 {
            away.push((a, b, m.offset + (a - m.start as u64), m.prot));
        }
    }
    let mut targets = Ranges::of(moves.iter().map(|mv| mv.va));
    loop {
        let mut grew = false;
        let mut i = 0;
        while i < away.len() {
            let (a, b, off, prot) = away[i];
            if targets.intersects((off, off + (b - a))) {
                if prot & libc::PROT_READ == 0 {
                    return Err(UserMemError::Unreadable(a as usize, b as usize));
                }
                targets.add((a, b));
                moves.push(Move {
                    va: (a, b),
                    prot,
                    moved: true,
                });
                away.swap_remove(i);
                grew = true;
            } else {
                i += 1;
            }
        }
        if !grew {
            break;
        }
    }
    Ok(moves)
}

/// Punches out file pages no mapping of ours shows and no live
/// registration covers.
fn sweep(s: &mut Store, maps: &[MapLine]) {
    let keep = Ranges::of(
        maps.iter()
            .filter(|m| of_store(s, m))
            .map(|m| (m.offset, m.offset + m.len()))
            .chain(s.pinned.keys().copied()),
    );
    let dead = s.placed.minus(&keep);
    for &(a, b) in &dead.0 {
        // SAFETY: punching pages of our own memfd nobody maps; the size
        // stays (KEEP_SIZE), so no mapping can fault beyond the end.
        unsafe {
            libc::fallocate(
                s.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                a as libc::off_t,
                (b - a) as libc::off_t,
            );
        }
    }
    s.placed = s.placed.minus(&dead);
}

/// Writes `len` bytes from `src` into the memfd at `off`.
///
/// # Safety
/// `src` must be readable for `len` bytes.
unsafe fn pwrite_all(fd: RawFd, src: *const u8, len: usize, off: u64) -> Result<(), UserMemError> {
    let mut done = 0usize;
    while done < len {
        // SAFETY: the caller's promise about `src`.
        let n = unsafe {
            libc::pwrite(
                fd,
                src.add(done) as *const libc::c_void,
                len - done,
                (off + done as u64) as libc::off_t,
            )
        };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return Err(os("copying pages into the memfd"));
        }
        done += n as usize;
    }
    Ok(())
}

/// Moves the planned pages home: snapshots of moved mappings, then every
/// page's bytes into the file at home, then the file mapped over them.
fn apply(s: &mut Store, moves: &[Move]) -> Result<(), UserMemError> {
    let fd = s.fd.as_raw_fd();
    let mut snaps: Vec<Option<*mut u8>> = Vec::with_capacity(moves.len());
    let free = |snaps: &[Option<*mut u8>]| {
        for (mv, p) in moves.iter().zip(snaps) {
            if let Some(p) = p {
                // SAFETY: unmapping a snapshot we mapped.
                unsafe { libc::munmap(*p as *mut libc::c_void, (mv.va.1 - mv.va.0) as usize) };
            }
        }
    };
    for mv in moves {
        let len = (mv.va.1 - mv.va.0) as usize;
        if !mv.moved {
            snaps.push(None);
            continue;
        }
        let Some(p) = anon_rw(len) else {
            let e = os("snapshot of moved pages");
            free(&snaps);
            return Err(e);
        };
        // SAFETY: a fresh private mapping of `len` bytes, filled from
        // readable pages of ours (the plan checked PROT_READ).
        unsafe { std::ptr::copy_nonoverlapping(mv.va.0 as *const u8, p, len) };
        snaps.push(Some(p));
    }
    for (mv, snap) in moves.iter().zip(&snaps) {
        let len = (mv.va.1 - mv.va.0) as usize;
        let src = snap.unwrap_or(mv.va.0 as *mut u8);
        // SAFETY: `src` is a snapshot of `len` bytes or the readable
        // private pages themselves (checked by the plan).
        if let Err(e) = unsafe { pwrite_all(fd, src, len, mv.va.0) } {
            // moved mappings read their old file pages: put back what a
            // copy may have overwritten (nothing is mapped differently yet)
            for (mv, snap) in moves.iter().zip(&snaps) {
                if let (true, Some(p)) = (mv.moved, snap) {
                    let old = read_offset_of(s, mv.va.0);
                    if let Some(off) = old {
                        // SAFETY: the snapshot is `len` readable bytes.
                        let _ = unsafe { pwrite_all(fd, *p, (mv.va.1 - mv.va.0) as usize, off) };
                    }
                }
            }
            free(&snaps);
            return Err(e);
        }
    }
    free(&snaps);
    // from here until every page is mapped nothing may write the heap (no
    // allocation): a write to a page copied but not yet mapped is lost
    let dontfork = G.dontfork.load(Ordering::Relaxed);
    let mut mapped = 0;
    let mut err = None;
    for mv in moves {
        let len = (mv.va.1 - mv.va.0) as usize;
        // SAFETY: replaces the pages by the memfd's copy of them, same
        // address, same protection: the program sees the same bytes
        // through the same pointers.
        let r = unsafe {
            libc::mmap(
                mv.va.0 as *mut libc::c_void,
                len,
                mv.prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                mv.va.0 as libc::off_t,
            )
        };
        if r == libc::MAP_FAILED {
            err = Some(os("mapping the memfd over the pages"));
            break;
        }
        if dontfork {
            // SAFETY: advice on our own pages.
            unsafe { libc::madvise(mv.va.0 as *mut libc::c_void, len, libc::MADV_DONTFORK) };
        }
        mapped += 1;
    }
    s.placed = Ranges::of(
        s.placed
            .0
            .iter()
            .copied()
            .chain(moves[..mapped].iter().map(|mv| mv.va)),
    );
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The file offset our memfd is mapped with at `va` now, if it is.
fn read_offset_of(s: &Store, va: u64) -> Option<u64> {
    let maps = read_maps().ok()?;
    let m = maps
        .iter()
        .find(|m| m.start as u64 <= va && va < m.end as u64 && of_store(s, m))?;
    Some(m.offset + (va - m.start as u64))
}

fn page_range(addr: u64, len: usize) -> Option<(u64, u64)> {
    let end = addr.checked_add(len as u64)?;
    if len == 0 || end > SPACE {
        return None;
    }
    let pg = page_size() as u64;
    Some((addr & !(pg - 1), end.div_ceil(pg) * pg))
}

/// Moves `[addr, addr + len)` onto the process's shared memfd (if it is
/// not there yet) and returns the memfd (owned by this module, valid for
/// the process's life) and the region's offset in it (= `addr`). The
/// pages stay in the file until [`release`] with the same range (call it
/// once per successful `share`, when the registration ends). `writable`:
/// the region asks for write access (local or remote), so every page must
/// be writable for the program.
pub fn share(addr: u64, len: usize, writable: bool) -> Result<(RawFd, u64), UserMemError> {
    let (start, stop) = page_range(addr, len).ok_or(UserMemError::BadRange)?;
    init_atfork();
    if let Some((lo, hi)) = own_stack() {
        if start < hi && lo < stop {
            return Err(UserMemError::Unshareable(
                start.max(lo) as usize,
                stop.min(hi) as usize,
                "the calling thread's stack".into(),
            ));
        }
    }
    with(|st| {
        if st.is_none() {
            *st = Some(open_store()?);
        }
        let s = st.as_mut().expect("opened");
        let maps = read_maps()?;
        let moves = plan(s, &maps, start, stop, writable)?;
        sweep(s, &maps);
        apply(s, &moves)?;
        *s.pinned.entry((start, stop)).or_default() += 1;
        Ok((s.fd.as_raw_fd(), addr))
    })
}

/// The end of a registration made with [`share`]`(addr, len, _)`: its
/// pages may be punched out of the file once the program no longer maps
/// them either.
pub fn release(addr: u64, len: usize) {
    let Some(r) = page_range(addr, len) else {
        return;
    };
    with(|st| {
        let Some(s) = st.as_mut() else { return };
        if let Some(n) = s.pinned.get_mut(&r) {
            *n -= 1;
            if *n == 0 {
                s.pinned.remove(&r);
            }
        }
        if let Ok(maps) = read_maps() {
            sweep(s, &maps);
        }
    })
}
