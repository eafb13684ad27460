//! Registering ordinary process memory (`ibv_reg_mr` on malloc, mmap,
//! posix_memalign memory): the registered pages are moved onto shared
//! memory at the same virtual address, so the daemon can map and access
//! them while the program keeps using its own pointers.
//!
//! One sealed memfd per process holds every registered page at the file
//! offset equal to its virtual address (a sparse file of 2^47 bytes; only
//! written pages take memory). To register `[addr, addr + len)` the pages
//! are looked up in `/proc/self/maps`:
//! - pages already on the memfd where we put them are used as they are, so
//!   overlapping registrations share their bytes;
//! - private mappings (anonymous, the heap, MAP_PRIVATE file mappings such
//!   as `.data`) are copied into the memfd at their address and the memfd
//!   is mapped over them (`MAP_SHARED | MAP_FIXED`, same protection);
//! - anything else (a shared mapping that is not ours, hugetlb pages, the
//!   main thread's stack, the vDSO, unmapped holes, unreadable pages) is
//!   refused before anything changes.
//!
//! The daemon receives the memfd with the region's offset (= its address)
//! and maps only the region's pages; the seals keep the file from
//! shrinking under it, and unmapping on the client side does not affect
//! the daemon's mapping.
//!
//! Fork: after [`fork_init`] the moved pages are MADV_DONTFORK (the child
//! does not inherit them, as with rdma-core's `ibv_fork_init`); otherwise
//! a child gets private copies of them (a pthread_atfork handler), so
//! parent and child never share memory they did not share before.
//!
//! Known gaps: a thread writing the pages while they are being moved may
//! lose that write; pages a program frees stay in the memfd (they are not
//! punched out, the program may still use them); hugetlb mappings are
//! refused.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

const PAGE: usize = 4096;
/// The memfd's size: the user half of the x86-64 address space.
const SPACE: u64 = 1 << 47;
const NAME: &str = "softrnic-mem";

/// Why memory cannot be registered.
#[derive(Debug, thiserror::Error)]
pub enum UserMemError {
    #[error("[{0:#x}, {1:#x}) is not mapped")]
    Unmapped(usize, usize),
    #[error("[{0:#x}, {1:#x}) ({2}) cannot be shared with the daemon: only private memory (malloc, mmap MAP_PRIVATE) can be registered")]
    Unshareable(usize, usize, String),
    #[error("[{0:#x}, {1:#x}) is not readable")]
    Unreadable(usize, usize),
    #[error("bad range")]
    BadRange,
    #[error("{0}: {1}")]
    Os(&'static str, std::io::Error),
}

impl UserMemError {
    /// The errno `ibv_reg_mr` reports for it.
    pub fn errno(&self) -> i32 {
        match self {
            UserMemError::Unmapped(..) | UserMemError::Unreadable(..) => libc::EFAULT,
            UserMemError::Unshareable(..) => libc::EOPNOTSUPP,
            UserMemError::BadRange => libc::EINVAL,
            UserMemError::Os(_, e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

struct Store {
    fd: OwnedFd,
    dev: u64,
    ino: u64,
    /// Moved ranges: start → (end, protection).
    ranges: BTreeMap<usize, (usize, i32)>,
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

fn release() {
    G.busy.store(false, Ordering::Release);
}

fn with<R>(f: impl FnOnce(&mut Option<Store>) -> R) -> R {
    acquire();
    // SAFETY: `busy` is held: nobody else touches the store.
    let r = f(unsafe { &mut *G.store.get() });
    release();
    r
}

extern "C" fn before_fork() {
    acquire();
}

extern "C" fn after_fork_parent() {
    release();
}

extern "C" fn after_fork_child() {
    // SAFETY: the prepare handler holds `busy`; the child has one thread.
    let store = unsafe { &mut *G.store.get() };
    if let Some(s) = store.as_mut() {
        if !G.dontfork.load(Ordering::Relaxed) {
            privatize(s);
        }
    }
    release();
}

/// In a forked child: every moved range still mapped from the memfd
/// becomes a private copy (the parent keeps the shared pages).
fn privatize(s: &mut Store) {
    let maps = read_maps().unwrap_or_default();
    for m in maps.iter().filter(|m| is_ours(s, m)) {
        let len = m.end - m.start;
        // SAFETY: a fresh private mapping, a copy of readable pages of
        // ours, then moved over them; only this child's address space.
        unsafe {
            let tmp = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if tmp == libc::MAP_FAILED {
                continue;
            }
            if m.prot & libc::PROT_READ != 0 {
                std::ptr::copy_nonoverlapping(m.start as *const u8, tmp as *mut u8, len);
            }
            let r = libc::mremap(
                tmp,
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                m.start as *mut libc::c_void,
            );
            if r == libc::MAP_FAILED {
                libc::munmap(tmp, len);
                continue;
            }
            libc::mprotect(m.start as *mut libc::c_void, len, m.prot);
        }
    }
    s.ranges.clear();
}

/// One line of /proc/self/maps.
#[derive(Clone, Debug)]
struct MapLine {
    start: usize,
    end: usize,
    prot: i32,
    private: bool,
    offset: u64,
    dev: u64,
    ino: u64,
    path: String,
}

fn parse_line(l: &str) -> Option<MapLine> {
    let mut w = l.split_whitespace();
    let (a, b) = w.next()?.split_once('-')?;
    let perms = w.next()?.as_bytes();
    let offset = u64::from_str_radix(w.next()?, 16).ok()?;
    let (maj, min) = w.next()?.split_once(':')?;
    let ino: u64 = w.next()?.parse().ok()?;
    let path = w.collect::<Vec<_>>().join(" ");
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
    Some(MapLine {
        start: usize::from_str_radix(a, 16).ok()?,
        end: usize::from_str_radix(b, 16).ok()?,
        prot,
        private: perms[3] == b'p',
        offset,
        dev,
        ino,
        path,
    })
}

fn read_maps() -> Result<Vec<MapLine>, UserMemError> {
    let text = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| UserMemError::Os("/proc/self/maps", e))?;
    Ok(text.lines().filter_map(parse_line).collect())
}

fn is_ours(s: &Store, m: &MapLine) -> bool {
    !m.private && m.ino == s.ino && m.dev == s.dev && m.offset == m.start as u64
}

fn os(what: &'static str) -> UserMemError {
    UserMemError::Os(what, std::io::Error::last_os_error())
}

fn open_store() -> Result<Store, UserMemError> {
    let name = std::ffi::CString::new(NAME).expect("no NUL");
    // SAFETY: plain syscalls on a new descriptor we own.
    unsafe {
        let raw = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
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
            ranges: BTreeMap::new(),
        })
    }
}

fn fork_safe_env() -> bool {
    std::env::var_os("RDMAV_FORK_SAFE").is_some() || std::env::var_os("IBV_FORK_SAFE").is_some()
}

/// Moves `[addr, addr + len)` onto the process's shared memfd (if it is
/// not there yet) and returns the memfd (owned by this module, valid for
/// the process's life) and the region's offset in it (= `addr`).
pub fn share(addr: u64, len: usize) -> Result<(RawFd, u64), UserMemError> {
    let a = addr as usize;
    let end = a.checked_add(len).ok_or(UserMemError::BadRange)?;
    if len == 0 || (end as u64) > SPACE {
        return Err(UserMemError::BadRange);
    }
    G.atfork.call_once(|| {
        if fork_safe_env() {
            G.dontfork.store(true, Ordering::Relaxed);
        }
        // SAFETY: registering handlers that only take the store's lock and
        // remap the store's ranges.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_parent),
                Some(after_fork_child),
            );
        }
    });
    let start = a & !(PAGE - 1);
    let stop = end.div_ceil(PAGE) * PAGE;
    with(|st| {
        if st.is_none() {
            *st = Some(open_store()?);
        }
        let s = st.as_mut().expect("opened");
        let maps = read_maps()?;
        // forget ranges no longer mapped from the memfd where we put them
        let live: Vec<&MapLine> = maps.iter().filter(|m| is_ours(s, m)).collect();
        s.ranges
            .retain(|r0, (r1, _)| live.iter().any(|m| m.start <= *r0 && *r1 <= m.end));
        // every page of the range, in order, before anything changes
        let mut todo = Vec::new();
        let mut at = start;
        for m in maps.iter().filter(|m| m.end > start && m.start < stop) {
            if m.start > at {
                return Err(UserMemError::Unmapped(at, m.start));
            }
            let (p0, p1) = (at.max(m.start), stop.min(m.end));
            if is_ours(s, m) {
                at = p1;
                continue;
            }
            let special = m.path.starts_with('[') && m.path != "[heap]";
            if !m.private || special || m.path.contains("hugepage") || m.path.contains("/hugetlb") {
                let what = if m.path.is_empty() {
                    "shared memory".to_string()
                } else {
                    m.path.clone()
                };
                return Err(UserMemError::Unshareable(p0, p1, what));
            }
            if m.prot & libc::PROT_READ == 0 {
                return Err(UserMemError::Unreadable(p0, p1));
            }
            todo.push((p0, p1, m.prot));
            at = p1;
        }
        if at < stop {
            return Err(UserMemError::Unmapped(at, stop));
        }
        let fd = s.fd.as_raw_fd();
        for (p0, p1, prot) in todo {
            let mut done = 0usize;
            while p0 + done < p1 {
                // SAFETY: reading readable pages of this process into the
                // memfd at their own address.
                let n = unsafe {
                    libc::pwrite(
                        fd,
                        (p0 + done) as *const libc::c_void,
                        p1 - p0 - done,
                        (p0 + done) as libc::off_t,
                    )
                };
                if n <= 0 {
                    return Err(os("copying pages into the memfd"));
                }
                done += n as usize;
            }
            // SAFETY: replaces private pages by the memfd's copy of them,
            // same address, same protection: the program sees the same
            // bytes through the same pointers.
            let r = unsafe {
                libc::mmap(
                    p0 as *mut libc::c_void,
                    p1 - p0,
                    prot,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    p0 as libc::off_t,
                )
            };
            if r == libc::MAP_FAILED {
                return Err(os("mapping the memfd over the pages"));
            }
            if G.dontfork.load(Ordering::Relaxed) {
                // SAFETY: advice on our own pages.
                unsafe { libc::madvise(p0 as *mut libc::c_void, p1 - p0, libc::MADV_DONTFORK) };
            }
            s.ranges.insert(p0, (p1, prot));
        }
        Ok((fd, addr))
    })
}

/// `ibv_fork_init`: from now on (and for the pages already moved) the
/// registered pages are not inherited by a child (MADV_DONTFORK).
pub fn fork_init() -> i32 {
    G.dontfork.store(true, Ordering::Relaxed);
    with(|st| {
        if let Some(s) = st.as_ref() {
            for (p0, (p1, _)) in &s.ranges {
                // SAFETY: advice on our own pages.
                unsafe { libc::madvise(*p0 as *mut libc::c_void, p1 - p0, libc::MADV_DONTFORK) };
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
        // SAFETY: a new private anonymous mapping of `len` bytes.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            std::slice::from_raw_parts_mut(p as *mut u8, len)
        }
    }

    /// Fork without and then with `fork_init` (one test: fork_init is
    /// process-wide).
    #[test]
    fn a_child_never_shares_moved_pages_and_gets_none_after_fork_init() {
        // anonymous pages of their own: the test harness's other threads
        // use the heap meanwhile (see the module's known gaps)
        let v = anon(3 * PAGE);
        v.fill(1);
        let p = v.as_mut_ptr() as u64;
        share(p, v.len()).expect("share");
        // SAFETY: fork; the child only writes its copy and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the child's own copy of the buffer.
            unsafe {
                std::ptr::write_volatile((p + 100) as *mut u8, 9);
                libc::_exit(0);
            }
        }
        assert!(pid > 0);
        let mut st = 0;
        // SAFETY: waiting for our child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0);
        assert_eq!(v[100], 1, "the child's write reached the parent");
        // the parent's pages are still the shared ones
        let fd = share(p, 1).expect("again").0;
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
            let page = (p as usize).div_ceil(PAGE) * PAGE;
            // SAFETY: msync only asks whether the page is mapped.
            let r = unsafe { libc::msync(page as *mut libc::c_void, PAGE, libc::MS_ASYNC) };
            // SAFETY: leaving the child.
            unsafe { libc::_exit(if r != 0 { 0 } else { 3 }) };
        }
        // SAFETY: waiting for our child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "the child inherited DONTFORK pages"
        );
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
    }

    #[test]
    fn private_memory_moves_and_keeps_its_bytes_and_refusals_change_nothing() {
        let v = anon(20480);
        for (i, b) in v.iter_mut().enumerate() {
            *b = (i as u32 * 7) as u8;
        }
        let v = &mut v[..20000];
        let p = v.as_mut_ptr() as u64;
        let (fd, off) = share(p + 3, 15000).expect("heap memory");
        assert_eq!(off, p + 3);
        assert!(v
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i as u32 * 7) as u8));
        // the memfd holds the same bytes at the address
        let mut b = [0u8; 16];
        // SAFETY: pread into a local buffer.
        let n = unsafe {
            libc::pread(
                fd,
                b.as_mut_ptr() as *mut libc::c_void,
                16,
                (p + 100) as i64,
            )
        };
        assert_eq!(n, 16);
        assert_eq!(&b[..], &v[100..116]);
        // writes through the program's pointer reach the memfd
        v[200] = 0xab;
        // SAFETY: as above.
        unsafe { libc::pread(fd, b.as_mut_ptr() as *mut libc::c_void, 1, (p + 200) as i64) };
        assert_eq!(b[0], 0xab);
        // sharing again (overlapping) moves nothing and answers the same fd
        assert_eq!(share(p, 4096).expect("again").0, fd);
        // an unmapped hole
        assert!(matches!(share(8192, 4096), Err(UserMemError::Unmapped(..))));
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
        let e = share(m as u64, 100).expect_err("refused");
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
        // SAFETY: unmapping our mapping.
        unsafe { libc::munmap(m, 8192) };
    }
}
