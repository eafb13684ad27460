//! Fork: the pthread_atfork handlers that give a child private copies of
//! the moved pages (or, after `fork_init`, none of them), and
//! `ibv_fork_init`'s switch.

use super::*;

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
pub(super) fn anon_rw(len: usize) -> Option<*mut u8> {
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

pub(super) fn init_atfork() {
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
