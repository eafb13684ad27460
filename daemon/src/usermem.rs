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

use std::cell::{Cell, UnsafeCell};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

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

/// The system's page size.
pub fn page_size() -> usize {
    static P: AtomicUsize = AtomicUsize::new(0);
    let p = P.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let p = if p > 0 { p as usize } else { 4096 };
    P.store(p, Ordering::Relaxed);
    p
}

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

/// The pipe a forked child signals on once its copies are private (the
/// parent waits: until then they share pages either may write).
static SYNC_R: AtomicI32 = AtomicI32::new(-1);
static SYNC_W: AtomicI32 = AtomicI32::new(-1);

extern "C" fn before_fork() {
    acquire();
    // SAFETY: `busy` is held.
    let moved = unsafe { (*G.store.get()).is_some() };
    if moved && !G.dontfork.load(Ordering::Relaxed) {
        let mut p = [-1; 2];
        // SAFETY: pipe2 into a local array.
        if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } == 0 {
            SYNC_R.store(p[0], Ordering::Relaxed);
            SYNC_W.store(p[1], Ordering::Relaxed);
        }
    }
}

extern "C" fn after_fork_parent() {
    let (r, w) = (
        SYNC_R.swap(-1, Ordering::Relaxed),
        SYNC_W.swap(-1, Ordering::Relaxed),
    );
    // SAFETY: closing and reading our own pipe: a byte from the child when
    // its copies are private, or EOF when it is gone (or fork failed).
    unsafe {
        if w >= 0 {
            libc::close(w);
        }
        if r >= 0 {
            let mut b = 0u8;
            while libc::read(r, &mut b as *mut u8 as *mut libc::c_void, 1) < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
            }
            libc::close(r);
        }
    }
    release_lock();
}

extern "C" fn after_fork_child() {
    let (r, w) = (
        SYNC_R.swap(-1, Ordering::Relaxed),
        SYNC_W.swap(-1, Ordering::Relaxed),
    );
    // SAFETY: the prepare handler holds `busy`; the child has one thread.
    let store = unsafe { &mut *G.store.get() };
    if let Some(s) = store.take() {
        privatize(s.fd.as_raw_fd(), s.dev, s.ino);
        // the parent's memfd is closed here: pages this child registers go
        // to a memfd of its own. The bookkeeping is leaked, not freed: its
        // heap blocks may lie on pages this child did not inherit
        // (MADV_DONTFORK).
        let Store {
            fd, placed, pinned, ..
        } = s;
        drop(fd);
        std::mem::forget(placed);
        std::mem::forget(pinned);
    }
    // SAFETY: our pipe's ends in this child.
    unsafe {
        if r >= 0 {
            libc::close(r);
        }
        if w >= 0 {
            libc::write(w, b"1".as_ptr() as *const libc::c_void, 1);
            libc::close(w);
        }
    }
    release_lock();
}

/// In a forked child, first thing: every mapping of the parent's memfd
/// (none of those that are MADV_DONTFORK) becomes a private copy; the
/// parent keeps the shared pages. Allocates nothing, writes no memory but
/// its stack: heap pages may be among those still shared with the parent.
fn privatize(fd: RawFd, dev: u64, ino: u64) {
    loop {
        let mut found = [(0usize, 0usize, 0u64, 0i32); 32];
        let mut n = 0;
        let mut more = false;
        // SAFETY: open(2) of a static path.
        let mfd = unsafe {
            libc::open(
                c"/proc/self/maps".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if mfd < 0 {
            return;
        }
        let mut buf = [0u8; 8192];
        let mut have = 0usize;
        'read: loop {
            // SAFETY: reading into the free end of a stack buffer.
            let r = unsafe {
                libc::read(
                    mfd,
                    buf[have..].as_mut_ptr() as *mut libc::c_void,
                    buf.len() - have,
                )
            };
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if r <= 0 {
                break;
            }
            have += r as usize;
            let mut used = 0;
            while let Some(nl) = buf[used..have].iter().position(|&b| b == b'\n') {
                let line = &buf[used..used + nl];
                used += nl + 1;
                let l = match std::str::from_utf8(line) {
                    Ok(l) => l,
                    // a path that is not UTF-8: the fields before it are
                    Err(e) => std::str::from_utf8(&line[..e.valid_up_to()]).unwrap_or(""),
                };
                if let Some((h, _)) = parse_head(l) {
                    if !h.private && h.ino == ino && h.dev == dev {
                        if n == found.len() {
                            more = true;
                            break 'read;
                        }
                        found[n] = (h.start, h.end, h.offset, h.prot);
                        n += 1;
                    }
                }
            }
            buf.copy_within(used..have, 0);
            have -= used;
            if have == buf.len() {
                have = 0; // a line longer than any maps line: skip it
            }
        }
        // SAFETY: closing our descriptor.
        unsafe { libc::close(mfd) };
        for &(start, end, offset, prot) in &found[..n] {
            privatize_one(fd, start, end - start, offset, prot);
        }
        if !more {
            return;
        }
    }
}

/// A fresh private anonymous read-write mapping of `len` bytes, or None.
fn anon_rw(len: usize) -> Option<*mut u8> {
    // SAFETY: a new mapping of our own; nothing else is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

/// Replaces `[start, start + len)`, a mapping of `fd` at `offset`, by a
/// private copy of its bytes with protection `prot`.
fn privatize_one(fd: RawFd, start: usize, len: usize, offset: u64, prot: i32) {
    let Some(tmp) = anon_rw(len) else {
        return;
    };
    let tmp = tmp as *mut libc::c_void;
    // SAFETY: a fresh private mapping filled from the file (whatever the
    // pages' protection), then moved over the pages of ours; only this
    // child's address space changes.
    unsafe {
        let mut done = 0usize;
        while done < len {
            let n = libc::pread(
                fd,
                (tmp as *mut u8).add(done) as *mut libc::c_void,
                len - done,
                (offset + done as u64) as libc::off_t,
            );
            if n <= 0 {
                break;
            }
            done += n as usize;
        }
        let r = libc::mremap(
            tmp,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            start as *mut libc::c_void,
        );
        if r == libc::MAP_FAILED {
            libc::munmap(tmp, len);
            return;
        }
        libc::mprotect(start as *mut libc::c_void, len, prot);
    }
}

/// One line of /proc/self/maps: its fields (through `Deref`) and path.
#[derive(Clone, Debug)]
struct MapLine {
    head: Head,
    path: String,
}

impl std::ops::Deref for MapLine {
    type Target = Head;
    fn deref(&self) -> &Head {
        &self.head
    }
}

impl MapLine {
    fn len(&self) -> u64 {
        (self.end - self.start) as u64
    }
}

/// The fields of a maps line before the path.
#[derive(Clone, Copy, Debug)]
struct Head {
    start: usize,
    end: usize,
    prot: i32,
    private: bool,
    offset: u64,
    dev: u64,
    ino: u64,
}

/// Parses the fields before the path (allocates nothing: the fork child
/// handler uses it); the rest of the line's words.
fn parse_head(l: &str) -> Option<(Head, std::str::SplitWhitespace<'_>)> {
    let mut w = l.split_whitespace();
    let (a, b) = w.next()?.split_once('-')?;
    let perms = w.next()?.as_bytes();
    let offset = u64::from_str_radix(w.next()?, 16).ok()?;
    let (maj, min) = w.next()?.split_once(':')?;
    let ino: u64 = w.next()?.parse().ok()?;
    if perms.len() < 4 {
        return None;
    }
    let mut prot = 0;
    if perms[0] == b'r' {
        prot |= libc::PROT_READ;
    }
    if perms[1] == b'w' {
        prot |= libc::PROT_WRITE;
    }
    if perms[2] == b'x' {
        prot |= libc::PROT_EXEC;
    }
    let dev = libc::makedev(
        u32::from_str_radix(maj, 16).ok()?,
        u32::from_str_radix(min, 16).ok()?,
    );
    let (start, end) = (
        usize::from_str_radix(a, 16).ok()?,
        usize::from_str_radix(b, 16).ok()?,
    );
    if end <= start {
        return None;
    }
    let h = Head {
        start,
        end,
        prot,
        private: perms[3] == b'p',
        offset,
        dev,
        ino,
    };
    Some((h, w))
}

fn parse_line(l: &str) -> Option<MapLine> {
    let (head, rest) = parse_head(l)?;
    Some(MapLine {
        head,
        path: rest.collect::<Vec<_>>().join(" "),
    })
}

fn read_maps() -> Result<Vec<MapLine>, UserMemError> {
    let text = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| UserMemError::Os("/proc/self/maps", e))?;
    Ok(text.lines().filter_map(parse_line).collect())
}

/// The `VmFlags` of the mappings starting at `starts`, from an smaps text.
fn vm_flags(smaps: &str, starts: &[usize]) -> BTreeMap<usize, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut cur = None;
    for l in smaps.lines() {
        if let Some(m) = parse_line(l) {
            cur = starts.contains(&m.start).then_some(m.start);
        } else if let (Some(s), Some(f)) = (cur, l.strip_prefix("VmFlags:")) {
            out.insert(s, f.split_whitespace().map(String::from).collect());
        }
    }
    out
}

/// Why a private mapping with these smaps `VmFlags` cannot be copied.
fn special_flags(flags: &[String]) -> Option<&'static str> {
    let has = |f: &str| flags.iter().any(|x| x == f);
    if has("ht") {
        Some("hugetlb memory")
    } else if has("io") || has("pf") || has("mm") {
        Some("device memory")
    } else {
        None
    }
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

fn fork_safe_env() -> bool {
    std::env::var_os("RDMAV_FORK_SAFE").is_some() || std::env::var_os("IBV_FORK_SAFE").is_some()
}

/// Registers the fork handlers when the library is loaded: in a child,
/// handlers run in the order they were registered, and ours must run
/// before those of libraries loaded later, which may write heap pages still
/// shared with the parent. (Registered at the first `share` otherwise.)
#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

extern "C" fn at_load() {
    init_atfork();
}

fn init_atfork() {
    G.atfork.call_once(|| {
        if fork_safe_env() {
            G.dontfork.store(true, Ordering::Relaxed);
        }
        // SAFETY: registering handlers that only take the store's lock and
        // remap the store's pages.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_parent),
                Some(after_fork_child),
            );
        }
    });
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

/// `ibv_fork_init`: from now on (and for the pages already moved) the
/// registered pages are not inherited by a child (MADV_DONTFORK).
pub fn fork_init() -> i32 {
    init_atfork();
    G.dontfork.store(true, Ordering::Relaxed);
    with(|st| {
        if let Some(s) = st.as_ref() {
            for m in read_maps()
                .unwrap_or_default()
                .iter()
                .filter(|m| of_store(s, m))
            {
                // SAFETY: advice on our own pages.
                unsafe {
                    libc::madvise(
                        m.start as *mut libc::c_void,
                        m.end - m.start,
                        libc::MADV_DONTFORK,
                    )
                };
            }
        }
    });
    0
}

/// Whether `ibv_fork_init` semantics are on (by the call, or by
/// RDMAV_FORK_SAFE / IBV_FORK_SAFE in the environment as with rdma-core).
pub fn fork_initialized() -> bool {
    G.dontfork.load(Ordering::Relaxed) || fork_safe_env()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fresh anonymous private pages (leaked: the tests end with the process).
    fn anon(len: usize) -> &'static mut [u8] {
        let p = anon_rw(len).expect("mmap");
        // SAFETY: a new private mapping of `len` bytes, never unmapped.
        unsafe { std::slice::from_raw_parts_mut(p, len) }
    }

    #[test]
    fn ranges_merge_and_subtract() {
        let r = Ranges::of([(10, 20), (0, 5), (5, 8), (30, 40), (15, 25)]);
        assert_eq!(r.0, vec![(0, 8), (10, 25), (30, 40)]);
        let cut = Ranges::of([(2, 3), (12, 35)]);
        assert_eq!(r.minus(&cut).0, vec![(0, 2), (3, 8), (10, 12), (35, 40)]);
        assert!(r.intersects((7, 9)) && !r.intersects((8, 10)) && !r.intersects((25, 30)));
        let mut r = r;
        r.add((8, 10));
        assert_eq!(r.0, vec![(0, 25), (30, 40)]);
    }

    #[test]
    fn maps_lines_parse() {
        let m = parse_line(
            "7f1c2a000000-7f1c2a021000 rw-s 7f1c2a000000 00:01 2050  /memfd:softrnic-mem (deleted)",
        )
        .expect("parses");
        assert_eq!(m.start, 0x7f1c2a000000);
        assert_eq!(m.offset, 0x7f1c2a000000);
        assert!(!m.private);
        assert_eq!(m.prot, libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(m.path, "/memfd:softrnic-mem (deleted)");
        let h =
            parse_line("55d0c8a3e000-55d0c8a5f000 rw-p 00000000 00:00 0   [heap]").expect("heap");
        assert!(h.private && h.path == "[heap]");
        assert!(parse_line("garbage").is_none());
        assert!(parse_line("2000-1000 rw-p 00000000 00:00 0").is_none());
    }

    #[test]
    fn hugetlb_and_device_mappings_are_recognised_in_smaps() {
        let smaps = "\
7f0000000000-7f0000200000 rw-p 00000000 00:10 123  /anon_hugepage (deleted)
Size:               2048 kB
KernelPageSize:     2048 kB
VmFlags: rd wr mr mw me de ht
7f0000200000-7f0000201000 rw-p 00000000 00:05 9  /dev/somedev
Size:                  4 kB
VmFlags: rd wr mr mw me io pf
7f0000201000-7f0000202000 rw-p 00001000 08:01 77  /usr/lib/libx.so
Size:                  4 kB
VmFlags: rd wr mr mw me ac
";
        let f = vm_flags(smaps, &[0x7f0000000000, 0x7f0000200000, 0x7f0000201000]);
        assert_eq!(special_flags(&f[&0x7f0000000000]), Some("hugetlb memory"));
        assert_eq!(special_flags(&f[&0x7f0000200000]), Some("device memory"));
        assert_eq!(special_flags(&f[&0x7f0000201000]), None);
    }

    /// Fork without and then with `fork_init` (one test: fork_init is
    /// process-wide). The unit tests move pages of their own: the test
    /// harness's other threads use the heap meanwhile (the module's known
    /// gaps); `tests/usermem.rs` registers malloc memory in processes of
    /// their own.
    #[test]
    fn a_child_never_shares_moved_pages_and_gets_none_after_fork_init() {
        let v = anon(3 * page_size());
        v.fill(1);
        let p = v.as_mut_ptr() as u64;
        share(p, v.len(), true).expect("share");
        // SAFETY: fork; the child only writes its copy and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the child's own copy of the buffer.
            unsafe {
                let ok = std::ptr::read_volatile((p + 100) as *const u8) == 1;
                std::ptr::write_volatile((p + 100) as *mut u8, 9);
                libc::_exit(if ok { 0 } else { 2 });
            }
        }
        assert!(pid > 0);
        let mut st = 0;
        // SAFETY: waiting for our child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0);
        assert_eq!(v[100], 1, "the child's write reached the parent");
        // the parent's pages are still the shared ones
        let fd = share(p, 1, true).expect("again").0;
        v[100] = 7;
        let mut b = [0u8; 1];
        // SAFETY: pread into a local byte.
        unsafe { libc::pread(fd, b.as_mut_ptr() as *mut libc::c_void, 1, (p + 100) as i64) };
        assert_eq!(b[0], 7);

        assert_eq!(fork_init(), 0);
        assert!(fork_initialized());
        // SAFETY: as above; the child reports whether the page is mapped.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: msync only asks whether the page is mapped.
            let r = unsafe { libc::msync(p as *mut libc::c_void, page_size(), libc::MS_ASYNC) };
            // SAFETY: leaving the child.
            unsafe { libc::_exit(if r != 0 { 0 } else { 3 }) };
        }
        // SAFETY: waiting for our child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "the child inherited DONTFORK pages"
        );
        release(p, 1);
        release(p, v.len());
    }

    fn pread_at(fd: RawFd, off: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        // SAFETY: pread into a local buffer.
        let r = unsafe { libc::pread(fd, b.as_mut_ptr() as *mut libc::c_void, n, off as i64) };
        assert_eq!(r, n as isize);
        b
    }

    #[test]
    fn private_memory_moves_and_keeps_its_bytes_and_refusals_change_nothing() {
        let pg = page_size();
        let v = anon(5 * pg);
        for (i, b) in v.iter_mut().enumerate() {
            *b = (i as u32 * 7) as u8;
        }
        let v = &mut v[..5 * pg - 480];
        let p = v.as_mut_ptr() as u64;
        let (fd, off) = share(p + 3, 3 * pg + 5, true).expect("private memory");
        assert_eq!(off, p + 3);
        assert!(v
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i as u32 * 7) as u8));
        // the memfd holds the same bytes at the address
        assert_eq!(pread_at(fd, p + 100, 16), &v[100..116]);
        // writes through the program's pointer reach the memfd
        v[200] = 0xab;
        assert_eq!(pread_at(fd, p + 200, 1)[0], 0xab);
        // sharing again (overlapping) moves nothing and answers the same fd
        assert_eq!(share(p, pg, true).expect("again").0, fd);
        // an unmapped hole
        assert!(matches!(
            share(8192, 4096, false),
            Err(UserMemError::Unmapped(..))
        ));
        // a read-only page asked for write access
        let ro = anon(pg);
        // SAFETY: our own mapping.
        unsafe { libc::mprotect(ro.as_mut_ptr() as *mut libc::c_void, pg, libc::PROT_READ) };
        let e = share(ro.as_ptr() as u64, 10, true).expect_err("read-only");
        assert_eq!(e.errno(), libc::EFAULT);
        share(ro.as_ptr() as u64, 10, false).expect("read-only, read access");
        // the calling thread's stack
        let local = [0u8; 64];
        let e = share(local.as_ptr() as u64, 64, true).expect_err("stack");
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
        // a shared file mapping is refused
        let f = tempfile::tempfile().expect("tempfile");
        f.set_len(8192).expect("len");
        // SAFETY: a fresh shared mapping of our temp file.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        let e = share(m as u64, 100, true).expect_err("refused");
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
        // SAFETY: unmapping our mapping.
        unsafe { libc::munmap(m, 8192) };
    }

    /// A registered block that mremap moved (glibc's realloc of an mmapped
    /// chunk) registers again, keeping its bytes; fresh memory at its old
    /// address then does not overwrite it; its freed pages are punched.
    #[test]
    fn moved_pages_go_home_and_do_not_collide() {
        let pg = page_size();
        let v = anon(4 * pg);
        for (i, b) in v.iter_mut().enumerate() {
            *b = (i % 253) as u8;
        }
        let p = v.as_mut_ptr() as u64;
        let (fd, _) = share(p, 4 * pg, true).expect("share");
        release(p, 4 * pg);
        // reserve a far place and move the block there
        let dst = anon(8 * pg).as_mut_ptr();
        // SAFETY: moving our own mapping onto our own reservation.
        let q = unsafe {
            libc::mremap(
                p as *mut libc::c_void,
                4 * pg,
                4 * pg,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                dst as *mut libc::c_void,
            )
        };
        assert_eq!(q as *mut u8, dst);
        // SAFETY: the moved block, 4 pages.
        let w = unsafe { std::slice::from_raw_parts_mut(dst, 4 * pg) };
        // new private memory at the old address, registered: its copy goes
        // to the file pages the moved block still reads
        // SAFETY: a fixed anonymous mapping on the hole the move left.
        let r = unsafe {
            libc::mmap(
                p as *mut libc::c_void,
                4 * pg,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(r as u64, p);
        // SAFETY: the fresh mapping, 4 pages.
        unsafe { std::ptr::write_bytes(p as *mut u8, 0xee, 4 * pg) };
        share(p, 4 * pg, true).expect("fresh memory at the old place");
        assert!(
            w.iter().enumerate().all(|(i, b)| *b == (i % 253) as u8),
            "the moved block was overwritten"
        );
        // the moved block registers too, at its own home
        share(dst as u64 + 10, 2 * pg, true).expect("moved block");
        assert_eq!(pread_at(fd, dst as u64 + 5, 4), &w[5..9]);
        assert!(w.iter().enumerate().all(|(i, b)| *b == (i % 253) as u8));
        w[7] = 0x55;
        assert_eq!(pread_at(fd, dst as u64 + 7, 1)[0], 0x55);
        // freed and released: the file pages are punched out
        release(p, 4 * pg);
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(p as *mut libc::c_void, 4 * pg) };
        release(dst as u64 + 10, 2 * pg);
        assert_eq!(pread_at(fd, p, 4), vec![0, 0, 0, 0], "not punched");
        assert_eq!(
            pread_at(fd, dst as u64 + 5, 4),
            &w[5..9],
            "live pages punched"
        );
    }
}
