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
    let h = parse_line("55d0c8a3e000-55d0c8a5f000 rw-p 00000000 00:00 0   [heap]").expect("heap");
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
    // reserve a far place and move the block there; the old range stays
    // mapped (MREMAP_DONTUNMAP, Linux 5.13+ for shared mappings), so no
    // other thread of the test harness can map into a hole before the
    // MAP_FIXED below replaces it
    let dst = anon(8 * pg).as_mut_ptr();
    // SAFETY: moving our own mapping onto our own reservation.
    let q = unsafe {
        libc::mremap(
            p as *mut libc::c_void,
            4 * pg,
            4 * pg,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP,
            dst as *mut libc::c_void,
        )
    };
    assert_eq!(q as *mut u8, dst);
    // SAFETY: the moved block, 4 pages.
    let w = unsafe { std::slice::from_raw_parts_mut(dst, 4 * pg) };
    // new private memory at the old address, registered: its copy goes
    // to the file pages the moved block still reads
    // SAFETY: a fixed anonymous mapping over the old range, still ours.
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
