//! `usermem` mode: a process whose own memory (malloc, posix_memalign,
//! mmap) the test registers and checks, one command per stdin line, one
//! answer line each (`OK ...`, `ERR <errno> <why>`, `BAD ...`).
//!
//! At start it opens the device, makes a PD, a CQ and an RC QP, prints
//! `INFO <gid-hex> <mac> <qpn>` and connects to `PEER <gid-hex> <mac>
//! <qpn>`. Then (addresses and numbers in decimal):
//!
//! - `MALLOC n`, `MEMALIGN align n`, `MMAP n`, `REALLOC addr n` → `OK addr`;
//!   `FREE addr`, `MUNMAP addr n`, `RDONLY addr n` (mprotect PROT_READ);
//! - `SHARED path n [at]` maps a file MAP_SHARED (at `at`, MAP_FIXED) →
//!   `OK addr`;
//! - `FILL addr n seed`, `CHECK addr n seed` (bytes `pat(seed, address)`;
//!   `BAD offset got want` on the first difference), `SUM addr n` (FNV-1a);
//! - `MAPS addr` → `OK <perms> <offset> <path>` of the mapping holding
//!   `addr` (`OK none` for a hole), `DONTFORK addr` → `OK yes|no` (smaps
//!   `VmFlags` `dc`);
//! - `REG addr n [access]` → `OK lkey rkey` or `ERR errno why`;
//!   `DEREG lkey`; `STACKREG` / `THREADREG` register a buffer on the main
//!   thread's / a new thread's own stack;
//! - `POST WRITE|READ lkey addr n raddr rkey`: an RDMA WRITE from / READ
//!   into this process's memory → `OK` or `ERR status`;
//! - `FORK addr n seed_seen seed_write`: a child checks it sees
//!   `seed_seen` there, writes `seed_write` and exits → `OK <exit code>`
//!   (0: it saw the bytes); `FORKREG addr n seed`: a child registers the
//!   same memory itself (`usermem::share`) and writes `seed` → `OK <code>`;
//!   `FORKMAPPED addr` → `OK mapped|unmapped` (in a child);
//! - `FORKINIT` → `OK <ret> <fork_initialized>`;
//! - `TRUNCATE` tries to shrink the process's registration memfd →
//!   `OK <errno>`.

use nic::verbs::{AhAttr, SendOp, SendWr, Sgl, WcStatus};
use softrnic::{ConnectParams, Context, Mr, QpInitAttr, QpKind, ACCESS_ALL};
use std::collections::HashMap;
use std::time::Duration;

use super::{fail, info_head, line, say};

const T: Duration = Duration::from_secs(20);

/// The byte the tests expect at address `a` for `seed`.
pub fn pat(seed: u8, a: u64) -> u8 {
    ((a ^ (a >> 9))
        .wrapping_mul(31)
        .wrapping_add(seed as u64 * 97)
        % 251) as u8
}

fn fill(addr: u64, n: usize, seed: u8) {
    for i in 0..n as u64 {
        // SAFETY: the test names memory it made writable in this process.
        unsafe { std::ptr::write_volatile((addr + i) as *mut u8, pat(seed, addr + i)) };
    }
}

/// The first difference from `pat(seed, ..)`: (offset, got, want).
fn check(addr: u64, n: usize, seed: u8) -> Option<(u64, u8, u8)> {
    (0..n as u64).find_map(|i| {
        // SAFETY: the test names readable memory of this process.
        let got = unsafe { std::ptr::read_volatile((addr + i) as *const u8) };
        let want = pat(seed, addr + i);
        (got != want).then_some((i, got, want))
    })
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn maps_line(addr: u64) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/maps").ok()?;
    text.lines()
        .find(|l| {
            let r = l.split_whitespace().next().unwrap_or("");
            let (a, b) = r.split_once('-').unwrap_or(("0", "0"));
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap_or(0),
                u64::from_str_radix(b, 16).unwrap_or(0),
            );
            a <= addr && addr < b
        })
        .map(String::from)
}

fn dontfork(addr: u64) -> bool {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut inside = false;
    for l in text.lines() {
        let first = l.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                inside = a <= addr && addr < b;
                continue;
            }
        }
        if inside {
            if let Some(f) = l.strip_prefix("VmFlags:") {
                return f.split_whitespace().any(|x| x == "dc");
            }
        }
    }
    false
}

/// Forks; the child runs `f` and `_exit`s with its result; the exit code
/// (or 100 + signal).
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: this process has one thread; the child only runs `f` (its
    // own copy of memory) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        fail(format!("fork: errno {}", errno()));
    }
    if pid == 0 {
        let code = f();
        // SAFETY: leaving the child without running the parent's exit code.
        unsafe { libc::_exit(code) };
    }
    let mut st = 0;
    // SAFETY: waiting for our child.
    unsafe { libc::waitpid(pid, &mut st, 0) };
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        100 + libc::WTERMSIG(st)
    }
}

fn reg_reply(r: softrnic::client::Result<Mr>, mrs: &mut HashMap<u32, Mr>) -> String {
    match r {
        Ok(mr) => {
            let s = format!("OK {} {}", mr.lkey, mr.rkey);
            mrs.insert(mr.lkey, mr);
            s
        }
        Err(softrnic::Error::UserMem(e)) => format!("ERR {} {e}", e.errno()),
        Err(e) => format!("ERR 0 {e}"),
    }
}

pub fn run(sock: &str, p: &ConnectParams) -> ! {
    let ctx = Context::open(sock).unwrap_or_else(|e| fail(format!("open {sock}: {e}")));
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(64).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpKind::Rc,
            send_cq: cq.handle,
            recv_cq: cq.handle,
            max_send_wr: 16,
            max_recv_wr: 16,
            sq_sig_all: true,
            srq: None,
        })
        .unwrap();
    say(&format!("{} {}", info_head(&ctx), qp.qpn));
    let l = line();
    let f: Vec<&str> = l.split_whitespace().collect();
    if f.len() != 4 || f[0] != "PEER" {
        fail(format!("expected PEER, got {l:?}"));
    }
    let gid = wire::Gid::from_hex(f[1]).expect("gid");
    let mac = nic::io::addr::parse_mac(f[2]).expect("mac");
    qp.connect(p, AhAttr::new(gid, mac), f[3].parse().unwrap(), 100, 100)
        .unwrap_or_else(|e| fail(format!("connect: {e}")));
    say("OK connected");

    let mut mrs: HashMap<u32, Mr> = HashMap::new();
    loop {
        let l = line();
        let w: Vec<&str> = l.split_whitespace().collect();
        let num = |i: usize| -> u64 {
            w.get(i)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| fail(format!("{l:?}: argument {i}")))
        };
        let reply = match w.first().copied().unwrap_or("") {
            "MALLOC" => {
                // SAFETY: malloc.
                let p = unsafe { libc::malloc(num(1) as usize) };
                format!("OK {}", p as u64)
            }
            "MEMALIGN" => {
                let mut p = std::ptr::null_mut();
                // SAFETY: posix_memalign into a local pointer.
                let r = unsafe { libc::posix_memalign(&mut p, num(1) as usize, num(2) as usize) };
                if r != 0 {
                    format!("ERR {r} posix_memalign")
                } else {
                    format!("OK {}", p as u64)
                }
            }
            "REALLOC" => {
                // SAFETY: realloc of a block this process malloc'd.
                let p = unsafe { libc::realloc(num(1) as *mut libc::c_void, num(2) as usize) };
                format!("OK {}", p as u64)
            }
            "FREE" => {
                // SAFETY: free of a block this process malloc'd.
                unsafe { libc::free(num(1) as *mut libc::c_void) };
                "OK".into()
            }
            "MMAP" => {
                // SAFETY: a new private anonymous mapping.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        num(1) as usize,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    format!("ERR {} mmap", errno())
                } else {
                    format!("OK {}", p as u64)
                }
            }
            "MUNMAP" => {
                // SAFETY: unmapping memory the test says this process owns.
                let r = unsafe { libc::munmap(num(1) as *mut libc::c_void, num(2) as usize) };
                format!("OK {r}")
            }
            "RDONLY" => {
                // SAFETY: as above.
                let r = unsafe {
                    libc::mprotect(
                        num(1) as *mut libc::c_void,
                        num(2) as usize,
                        libc::PROT_READ,
                    )
                };
                format!("OK {r}")
            }
            "SHARED" => {
                let path = std::ffi::CString::new(w[1]).unwrap();
                // SAFETY: open a file by name.
                let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR) };
                let at = w.get(3).map(|_| num(3)).unwrap_or(0);
                let flags = libc::MAP_SHARED | if at != 0 { libc::MAP_FIXED } else { 0 };
                // SAFETY: a shared mapping of the test's file (at `at`:
                // memory the test says this process owns).
                let p = unsafe {
                    libc::mmap(
                        at as *mut libc::c_void,
                        num(2) as usize,
                        libc::PROT_READ | libc::PROT_WRITE,
                        flags,
                        fd,
                        0,
                    )
                };
                let e = errno();
                // SAFETY: our fd.
                unsafe { libc::close(fd) };
                if p == libc::MAP_FAILED {
                    format!("ERR {e} mmap")
                } else {
                    format!("OK {}", p as u64)
                }
            }
            "FILL" => {
                fill(num(1), num(2) as usize, num(3) as u8);
                "OK".into()
            }
            "CHECK" => match check(num(1), num(2) as usize, num(3) as u8) {
                None => "OK".into(),
                Some((o, g, want)) => format!("BAD {o} {g} {want}"),
            },
            "SUM" => {
                let mut h: u64 = 0xcbf29ce484222325;
                for i in 0..num(2) {
                    // SAFETY: readable memory the test names.
                    let b = unsafe { std::ptr::read_volatile((num(1) + i) as *const u8) };
                    h = (h ^ b as u64).wrapping_mul(0x100000001b3);
                }
                format!("OK {h:016x}")
            }
            "MAPS" => match maps_line(num(1)) {
                Some(m) => {
                    let f: Vec<&str> = m.split_whitespace().collect();
                    format!("OK {} {} {}", f[1], f[2], f[5..].join(" "))
                }
                None => "OK none".into(),
            },
            "DONTFORK" => format!("OK {}", if dontfork(num(1)) { "yes" } else { "no" }),
            "REG" => {
                let acc = w.get(3).map(|_| num(3) as u32).unwrap_or(ACCESS_ALL);
                reg_reply(pd.reg_user_mr(num(1), num(2) as usize, acc), &mut mrs)
            }
            "DEREG" => match mrs.remove(&(num(1) as u32)) {
                Some(mr) => match mr.dereg() {
                    Ok(()) => "OK".into(),
                    Err(e) => format!("ERR 0 {e}"),
                },
                None => "ERR 0 no such MR".into(),
            },
            "STACKREG" => {
                let local = [7u8; 256];
                let r = pd.reg_user_mr(local.as_ptr() as u64, local.len(), ACCESS_ALL);
                std::hint::black_box(&local);
                reg_reply(r, &mut mrs)
            }
            "THREADREG" => {
                let pd = &pd;
                let r = std::thread::scope(|s| {
                    s.spawn(|| {
                        let local = [7u8; 256];
                        let r = pd.reg_user_mr(local.as_ptr() as u64, local.len(), ACCESS_ALL);
                        std::hint::black_box(&local);
                        r
                    })
                    .join()
                    .unwrap()
                });
                reg_reply(r, &mut mrs)
            }
            "POST" => {
                let (lkey, addr, n, raddr, rkey) =
                    (num(2) as u32, num(3), num(4) as u32, num(5), num(6) as u32);
                let op = match w[1] {
                    "WRITE" => SendOp::Write {
                        remote_addr: raddr,
                        rkey,
                    },
                    "READ" => SendOp::Read {
                        remote_addr: raddr,
                        rkey,
                    },
                    o => fail(format!("POST {o}?")),
                };
                qp.post_send(&SendWr::new(1, op, Sgl::single(addr, n, lkey)))
                    .unwrap_or_else(|e| fail(format!("post: {e}")));
                match cq.wait(1, T) {
                    Ok(wcs) if wcs[0].status == WcStatus::Success => "OK".into(),
                    Ok(wcs) => format!("ERR {:?}", wcs[0].status),
                    Err(e) => format!("ERR {e}"),
                }
            }
            "FORK" => {
                let (a, n, seen, write) = (num(1), num(2) as usize, num(3) as u8, num(4) as u8);
                let code = in_child(|| {
                    let saw = check(a, n, seen).is_none();
                    fill(a, n, write);
                    if saw {
                        0
                    } else {
                        2
                    }
                });
                format!("OK {code}")
            }
            "FORKREG" => {
                let (a, n, seed) = (num(1), num(2) as usize, num(3) as u8);
                let code = in_child(|| match softrnic::usermem::share(a, n, true) {
                    Ok(_) => {
                        fill(a, n, seed);
                        0
                    }
                    Err(_) => 3,
                });
                format!("OK {code}")
            }
            "FORKMAPPED" => {
                let a = num(1) & !4095;
                let code = in_child(|| {
                    // SAFETY: msync only asks whether the page is mapped.
                    let r = unsafe { libc::msync(a as *mut libc::c_void, 4096, libc::MS_ASYNC) };
                    if r == 0 {
                        0
                    } else {
                        1
                    }
                });
                match code {
                    0 => "OK mapped".into(),
                    1 => "OK unmapped".into(),
                    c => format!("ERR {c} child"),
                }
            }
            "FORKINIT" => {
                let r = softrnic::usermem::fork_init();
                format!("OK {r} {}", softrnic::usermem::fork_initialized())
            }
            "TRUNCATE" => {
                let mut r = "ERR 0 no memfd".to_string();
                for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
                    let target = std::fs::read_link(e.path()).unwrap_or_default();
                    if target.to_string_lossy().contains("softrnic-mem") {
                        let fd: i32 = e.file_name().to_string_lossy().parse().unwrap();
                        // SAFETY: a hostile client shrinking its own memfd.
                        let x = unsafe { libc::ftruncate(fd, 0) };
                        r = format!("OK {}", if x == 0 { 0 } else { errno() });
                    }
                }
                r
            }
            _ => fail(format!("unknown command {l:?}")),
        };
        say(&reply);
    }
}
