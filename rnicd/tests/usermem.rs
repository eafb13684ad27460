//! `reg_user_mr` / `ibv_reg_mr` on a process's own memory (malloc, brk
//! heap, mmap'd malloc blocks, posix_memalign, anonymous mmap): one
//! `rnicd --mem-pair`; the registering process is a `testclient
//! usermem` child on t0 (single-threaded, so its small mallocs are brk heap
//! and nothing races the page moves), driven line by line; its RDMA peer is
//! this test process on t1 (a shared buffer of its own), which WRITEs into
//! and READs out of the child's malloc'd memory by its rkey.

mod common;

use common::{tempdir, Client, Daemon};
use nic::verbs::{AhAttr, SendOp, SendWr, Sgl, WcStatus};
use softrnic::{Buffer, ConnectParams, Context, Cq, Mr, Pd, Qp, QpInitAttr, QpKind, ACCESS_ALL};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

const PG: u64 = 4096;
const EFAULT: i32 = 14;
const EOPNOTSUPP: i32 = 95;

/// The byte at address `a` for `seed` (as `examples/testclient/usermem.rs`).
fn pat(seed: u8, a: u64) -> u8 {
    ((a ^ (a >> 9))
        .wrapping_mul(31)
        .wrapping_add(seed as u64 * 97)
        % 251) as u8
}

fn pats(seed: u8, a: u64, n: usize) -> Vec<u8> {
    (0..n as u64).map(|i| pat(seed, a + i)).collect()
}

/// The registering process.
struct Puppet {
    c: Client,
}

impl Puppet {
    /// Sends a command, returns the answer line.
    fn cmd(&mut self, l: &str) -> String {
        self.c.send(l);
        let r = self.c.line();
        assert!(!r.starts_with("FAIL"), "{l}: {r}");
        r
    }

    /// A command that must answer `OK ...`; the words after OK.
    fn ok(&mut self, l: &str) -> Vec<String> {
        let r = self.cmd(l);
        assert!(r.starts_with("OK"), "{l}: {r}");
        r.split_whitespace().skip(1).map(String::from).collect()
    }

    fn addr(&mut self, l: &str) -> u64 {
        let a: u64 = self.ok(l)[0].parse().unwrap();
        assert_ne!(a, 0, "{l}: null");
        a
    }

    /// `REG`: Ok((lkey, rkey)) or Err(errno).
    fn reg(&mut self, addr: u64, n: u64) -> Result<(u32, u32), i32> {
        let r = self.cmd(&format!("REG {addr} {n}"));
        let w: Vec<&str> = r.split_whitespace().collect();
        match w[0] {
            "OK" => Ok((w[1].parse().unwrap(), w[2].parse().unwrap())),
            "ERR" => Err(w[1].parse().unwrap()),
            _ => panic!("REG: {r}"),
        }
    }

    fn must_reg(&mut self, addr: u64, n: u64) -> (u32, u32) {
        self.reg(addr, n)
            .unwrap_or_else(|e| panic!("REG {addr:#x} {n}: errno {e}"))
    }

    fn fill(&mut self, a: u64, n: u64, seed: u8) {
        self.ok(&format!("FILL {a} {n} {seed}"));
    }

    /// The process's own bytes (through its original pointers) are
    /// `pat(seed, ..)`.
    fn check(&mut self, a: u64, n: u64, seed: u8) {
        let r = self.cmd(&format!("CHECK {a} {n} {seed}"));
        assert_eq!(r, "OK", "CHECK {a:#x} {n} seed {seed}");
    }

    /// `<perms> <offset> <path>` of the mapping holding `a`.
    fn maps(&mut self, a: u64) -> String {
        self.ok(&format!("MAPS {a}")).join(" ")
    }

    fn on_memfd(&mut self, a: u64) -> bool {
        let m = self.maps(a);
        m.starts_with("rw-s") && m.contains("softrnic-mem")
    }
}

/// The RDMA peer in this process: a shared buffer, an RC QP on t1.
struct Peer {
    _ctx: Arc<Context>,
    _pd: Pd,
    buf: Buffer,
    mr: Mr,
    cq: Cq,
    qp: Qp,
}

const PEER_BUF: usize = 8 << 20;

impl Peer {
    fn new(sock: &str) -> Peer {
        let ctx = Context::open(sock).expect("t1");
        let pd = ctx.alloc_pd().unwrap();
        let buf = pd.alloc_buffer(PEER_BUF).unwrap();
        let mr = pd.reg_mr(&buf, 0, PEER_BUF, ACCESS_ALL).unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = pd
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
        Peer {
            _ctx: ctx,
            _pd: pd,
            buf,
            mr,
            cq,
            qp,
        }
    }

    fn post(&mut self, op: SendOp, off: usize, n: usize) -> WcStatus {
        let sgl = Sgl::single(self.mr.addr + off as u64, n as u32, self.mr.lkey);
        self.qp.post_send(&SendWr::new(7, op, sgl)).unwrap();
        let wcs = self
            .cq
            .wait(1, Duration::from_secs(30))
            .expect("completion");
        wcs[0].status
    }

    /// RDMA WRITE of `data` to the puppet's `raddr`.
    fn write(&mut self, raddr: u64, rkey: u32, data: &[u8]) -> WcStatus {
        self.buf.write(0, data);
        self.post(
            SendOp::Write {
                remote_addr: raddr,
                rkey,
            },
            0,
            data.len(),
        )
    }

    fn must_write(&mut self, raddr: u64, rkey: u32, data: &[u8]) {
        assert_eq!(
            self.write(raddr, rkey, data),
            WcStatus::Success,
            "WRITE {raddr:#x}"
        );
    }

    /// RDMA READ of `n` bytes at the puppet's `raddr`.
    fn read(&mut self, raddr: u64, rkey: u32, n: usize) -> Vec<u8> {
        let off = PEER_BUF / 2;
        self.buf.write(off, &vec![0xa5; n]);
        let st = self.post(
            SendOp::Read {
                remote_addr: raddr,
                rkey,
            },
            off,
            n,
        );
        assert_eq!(st, WcStatus::Success, "READ {raddr:#x}");
        self.buf.to_vec(off, n)
    }
}

/// A daemon, the puppet on t0 and the peer on t1, connected.
struct Setup {
    d: Daemon,
    p: Puppet,
    peer: Peer,
}

fn puppet(d: &Daemon, peer: &Peer, name: &str) -> Puppet {
    let c = Client::spawn(name, None, "usermem", &d.sock("t0"), &[]);
    let info = c.expect("INFO");
    let f: Vec<&str> = info.split_whitespace().collect();
    let gid = wire::Gid::from_hex(f[0]).unwrap();
    let mac = nic::io::addr::parse_mac(f[1]).unwrap();
    let qpn: u32 = f[2].parse().unwrap();
    let mut p = Puppet { c };
    let dev = &peer._ctx.device;
    let m = dev.mac.0;
    p.c.send(&format!(
        "PEER {} {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} {}",
        dev.gid.to_hex(),
        m[0],
        m[1],
        m[2],
        m[3],
        m[4],
        m[5],
        peer.qp.qpn
    ));
    peer.qp
        .connect(
            &ConnectParams::default(),
            AhAttr::new(gid, mac),
            qpn,
            100,
            100,
        )
        .unwrap();
    p.c.expect("OK");
    p
}

fn setup(tag: &str) -> Setup {
    let dir = tempdir(tag);
    let d = Daemon::start(None, &["--mem-pair", "--name", "t"], &dir);
    let peer = Peer::new(&d.sock("t1"));
    let p = puppet(&d, &peer, tag);
    Setup { d, p, peer }
}

impl Setup {
    /// The registered `[a, a + n)`: a WRITE from the peer lands byte for
    /// byte in the process's own memory; a READ returns what the process
    /// wrote through its pointers; the process's own WRITE (its memory as
    /// the source, by lkey) and READ (its memory as the target) work too.
    fn rdma_both_ways(&mut self, a: u64, n: u64, (lkey, rkey): (u32, u32), seed: u8) {
        let len = n as usize;
        self.peer.must_write(a, rkey, &pats(seed, a, len));
        self.p.check(a, n, seed);
        self.p.fill(a, n, seed + 1);
        assert_eq!(
            self.peer.read(a, rkey, len),
            pats(seed + 1, a, len),
            "READ {a:#x}"
        );
        let (paddr, prkey) = (self.peer.mr.addr + 4096, self.peer.mr.rkey);
        self.peer.buf.write(4096, &vec![0; len]);
        self.p
            .ok(&format!("POST WRITE {lkey} {a} {n} {paddr} {prkey}"));
        assert_eq!(self.peer.buf.to_vec(4096, len), pats(seed + 1, a, len));
        self.peer.buf.write(4096, &pats(seed + 2, a, len));
        self.p
            .ok(&format!("POST READ {lkey} {a} {n} {paddr} {prkey}"));
        self.p.check(a, n, seed + 2);
    }
}

/// Small malloc (brk heap), large malloc (its own mmap), posix_memalign,
/// anonymous mmap, and an unaligned start and length: each registers, its
/// pages move onto the memfd with their bytes, and RDMA in both directions
/// reaches the program's own memory; bytes next to an unaligned region
/// stay out of reach; malloc keeps working around moved heap pages.
#[test]
fn malloc_memalign_mmap_and_unaligned_memory_take_rdma_in_place() {
    let mut s = setup("um-kinds");
    let cases = [
        ("MALLOC 100", 100, "[heap]"),
        ("MALLOC 3000000", 3_000_000, ""),
        ("MEMALIGN 4096 65536", 65536, ""),
        ("MEMALIGN 64 5000", 5000, ""),
        ("MMAP 12288", 12288, ""),
    ];
    for (i, (cmd, n, place)) in cases.into_iter().enumerate() {
        let seed = 10 * i as u8 + 1;
        let a = s.p.addr(cmd);
        let m = s.p.maps(a);
        assert!(m.starts_with("rw-p"), "{cmd}: {m}");
        if place == "[heap]" {
            assert!(m.ends_with("[heap]"), "{cmd} is not on the brk heap: {m}");
        } else if cmd.starts_with("MALLOC") || cmd.starts_with("MMAP") {
            assert_eq!(m.split(' ').nth(2), None, "{cmd} is not anonymous: {m}");
        }
        s.p.fill(a, n, seed);
        let keys = s.p.must_reg(a, n);
        assert!(s.p.on_memfd(a), "{cmd}: not moved: {}", s.p.maps(a));
        assert!(s.p.on_memfd(a + n - 1));
        s.p.check(a, n, seed);
        s.rdma_both_ways(a, n, keys, seed + 3);
    }
    // small blocks next to the moved heap page still come and go
    for _ in 0..200 {
        let b = s.p.addr("MALLOC 48");
        s.p.fill(b, 48, 9);
        s.p.check(b, 48, 9);
        s.p.ok(&format!("FREE {b}"));
    }

    // unaligned: [a + 3, a + 3 + 9000) of a 20000-byte block
    let a = s.p.addr("MALLOC 20000");
    s.p.fill(a, 20000, 51);
    let keys = s.p.must_reg(a + 3, 9000);
    s.rdma_both_ways(a + 3, 9000, keys, 52);
    s.p.check(a, 3, 51);
    s.p.check(a + 9003, 20000 - 9003, 51);
    // one byte past either end is out of the region
    let st = s.peer.write(a + 9003, keys.1, &[0]);
    assert_ne!(st, WcStatus::Success, "a WRITE past the region");
    s.p.check(a + 9003, 20000 - 9003, 51);
    assert!(s.d.alive());
}

/// Two overlapping registrations of the same pages (and one reaching
/// further) share the same bytes: a WRITE through one is read back
/// through the other and seen by the program; neighbouring small mallocs
/// on one heap page registered separately; after one is deregistered the
/// other still works.
#[test]
fn overlapping_registrations_share_the_same_bytes() {
    let mut s = setup("um-overlap");
    let a = s.p.addr("MMAP 16384");
    s.p.fill(a, 16384, 3);
    let k1 = s.p.must_reg(a, 2 * PG + 100);
    let k2 = s.p.must_reg(a + PG + 7, 3 * PG - 7);
    let (x, n) = (a + PG + 50, 3000usize);
    s.peer.must_write(x, k2.1, &pats(4, x, n));
    assert_eq!(
        s.peer.read(x, k1.1, n),
        pats(4, x, n),
        "through the other MR"
    );
    s.p.check(x, n as u64, 4);
    s.peer.must_write(x, k1.1, &pats(5, x, n));
    assert_eq!(s.peer.read(x, k2.1, n), pats(5, x, n));
    s.p.check(a, 50 + PG, 3);
    // a third one over all of it, mostly pages already moved
    let k3 = s.p.must_reg(a, 16384);
    assert_eq!(s.peer.read(x, k3.1, n), pats(5, x, n));
    s.p.ok(&format!("DEREG {}", k1.0));
    s.p.ok(&format!("DEREG {}", k3.0));
    s.peer.must_write(x, k2.1, &pats(6, x, n));
    s.p.check(x, n as u64, 6);

    // two small blocks sharing a heap page, registered one by one
    let (b1, b2) = (0..10)
        .map(|_| (s.p.addr("MALLOC 64"), s.p.addr("MALLOC 64")))
        .find(|(b1, b2)| b1 / PG == b2 / PG)
        .expect("two small blocks on one page");
    s.p.fill(b1, 64, 7);
    s.p.fill(b2, 64, 8);
    let r1 = s.p.must_reg(b1, 64);
    let r2 = s.p.must_reg(b2, 64);
    s.peer.must_write(b2, r2.1, &pats(9, b2, 64));
    s.p.check(b1, 64, 7);
    s.p.check(b2, 64, 9);
    s.p.ok(&format!("DEREG {}", r1.0));
    assert_eq!(s.peer.read(b2, r2.1, 64), pats(9, b2, 64));
}

/// register → deregister → free → malloc again → register, for a brk
/// block and for mmap'd blocks (which glibc unmaps on free: the pages
/// come back as fresh memory and are moved again), and for a block
/// realloc moved or grew (mremap of the moved pages).
#[test]
fn freed_and_reallocated_memory_registers_again() {
    let mut s = setup("um-free");
    // realloc of a registered (moved) mmap'd block: mremap moves or grows
    // the memfd's pages; the grown block registers and keeps its bytes
    // (first: freeing mmap'd blocks raises glibc's mmap threshold)
    let a = s.p.addr("MALLOC 1000000");
    let m = s.p.maps(a);
    assert!(
        m.starts_with("rw-p") && m.split(' ').nth(2).is_none(),
        "not mmap'd: {m}"
    );
    s.p.fill(a, 1_000_000, 71);
    let sum = s.p.ok(&format!("SUM {a} 1000000"));
    let k = s.p.must_reg(a, 1_000_000);
    s.p.ok(&format!("DEREG {}", k.0));
    let b = s.p.addr(&format!("REALLOC {a} 5000000"));
    let moved = s.p.maps(b);
    assert!(moved.contains("softrnic-mem"), "realloc copied: {moved}");
    assert_eq!(s.p.ok(&format!("SUM {b} 1000000")), sum);
    s.p.fill(b + 1_000_000, 4_000_000, 72);
    // something new where the block was, registered before the moved one
    let c = s.p.addr("MMAP 1000000");
    s.p.fill(c, 1_000_000, 73);
    let kc = s.p.must_reg(c, 1_000_000);
    assert_eq!(s.p.ok(&format!("SUM {b} 1000000")), sum);
    let kb = s.p.must_reg(b, 5_000_000);
    assert_eq!(s.p.ok(&format!("SUM {b} 1000000")), sum);
    s.p.check(b + 1_000_000, 4_000_000, 72);
    s.p.check(c, 1_000_000, 73);
    s.rdma_both_ways(b + 4_000_000, 1_000_000, kb, 74);
    s.rdma_both_ways(c, 1_000_000, kc, 77);
    assert_eq!(s.p.ok(&format!("SUM {b} 1000000")), sum);
    assert_eq!(
        s.peer.read(b + 1_000_000, kb.1, 4096),
        pats(72, b + 1_000_000, 4096)
    );
    for (i, n) in [200u64, 1 << 20, 3 << 20].into_iter().enumerate() {
        let seed = 20 * i as u8 + 1;
        let a = s.p.addr(&format!("MALLOC {n}"));
        s.p.fill(a, n, seed);
        let k = s.p.must_reg(a, n);
        s.rdma_both_ways(a, n, k, seed);
        s.p.ok(&format!("DEREG {}", k.0));
        s.p.ok(&format!("FREE {a}"));
        let b = s.p.addr(&format!("MALLOC {n}"));
        s.p.fill(b, n, seed + 5);
        let k = s.p.must_reg(b, n);
        s.p.check(b, n, seed + 5);
        s.rdma_both_ways(b, n, k, seed + 6);
        s.p.ok(&format!("DEREG {}", k.0));
        s.p.ok(&format!("FREE {b}"));
    }
}

/// A MAP_SHARED file mapping is refused (EOPNOTSUPP) with the file and
/// the mapping unchanged; a range that is private memory around a shared
/// page, or that has a hole, is refused (EOPNOTSUPP, EFAULT) before any of
/// its private pages moves; the calling thread's stack (main thread and
/// another thread) and read-only memory asked for write access are
/// refused.
#[test]
fn shared_files_holes_and_stacks_are_refused_and_left_alone() {
    let mut s = setup("um-refuse");
    let dir = tempdir("um-refuse-file");
    let path = dir.join("f");
    let content: Vec<u8> = (0..3 * PG).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&content)
        .unwrap();
    let a = s.p.addr(&format!("SHARED {} {}", path.display(), 3 * PG));
    let before = s.p.maps(a);
    assert!(before.starts_with("rw-s"), "{before}");
    let sum_before = s.p.ok(&format!("SUM {a} {}", 3 * PG));
    assert_eq!(s.p.reg(a + 10, 5000), Err(EOPNOTSUPP));
    assert_eq!(s.p.maps(a), before);
    assert_eq!(s.p.ok(&format!("SUM {a} {}", 3 * PG)), sum_before);
    assert_eq!(std::fs::read(&path).unwrap(), content, "the file changed");

    // private pages around a shared one: none of them moves
    let b = s.p.addr("MMAP 12288");
    s.p.fill(b, 12288, 5);
    s.p.addr(&format!("SHARED {} {PG} {}", path.display(), b + PG));
    assert_eq!(s.p.reg(b, 12288), Err(EOPNOTSUPP));
    for x in [b, b + 2 * PG] {
        let m = s.p.maps(x);
        assert!(m.starts_with("rw-p") && !m.contains("softrnic"), "{m}");
    }
    s.p.check(b, PG, 5);
    assert_eq!(std::fs::read(&path).unwrap(), content, "the file changed");

    // a hole
    let c = s.p.addr("MMAP 12288");
    s.p.fill(c, 12288, 6);
    s.p.ok(&format!("MUNMAP {} {PG}", c + PG));
    assert_eq!(s.p.reg(c, 12288), Err(EFAULT));
    assert_eq!(s.p.reg(c + PG + 1, 10), Err(EFAULT));
    assert!(!s.p.on_memfd(c) && !s.p.on_memfd(c + 2 * PG));
    s.p.check(c, PG, 6);

    // stacks
    let r = s.p.cmd("STACKREG");
    assert!(r.starts_with(&format!("ERR {EOPNOTSUPP}")), "{r}");
    let r = s.p.cmd("THREADREG");
    assert!(r.starts_with(&format!("ERR {EOPNOTSUPP}")), "{r}");

    // read-only memory: write access refused, read access granted
    let e = s.p.addr("MMAP 4096");
    s.p.fill(e, 4096, 8);
    s.p.ok(&format!("RDONLY {e} 4096"));
    assert_eq!(s.p.reg(e, 4096), Err(EFAULT));
    let r = s.p.cmd(&format!("REG {e} 4096 0"));
    assert!(r.starts_with("OK"), "{r}");
    s.p.check(e, 4096, 8);

    // and the process still registers ordinary memory
    let f = s.p.addr("MALLOC 5000");
    let k = s.p.must_reg(f, 5000);
    s.rdma_both_ways(f, 5000, k, 30);
}

/// After registering, the program unmaps its memory (free of an mmap'd
/// block) and tries to shrink the memfd: the peer's WRITE and READ into
/// the region still complete (the daemon maps the pages itself), the
/// daemon keeps running, and another client pair is unaffected.
#[test]
fn unmapped_or_truncated_memory_never_hurts_the_daemon() {
    let mut s = setup("um-unmap");
    let n = 2u64 << 20;
    let a = s.p.addr(&format!("MALLOC {n}"));
    s.p.fill(a, n, 1);
    let k = s.p.must_reg(a, n);
    s.p.ok(&format!("FREE {a}"));
    assert_eq!(s.p.maps(a), "none", "glibc did not unmap the block");
    s.peer.must_write(a, k.1, &pats(2, a, 100_000));
    assert_eq!(s.peer.read(a, k.1, 100_000), pats(2, a, 100_000));
    let r = s.p.ok("TRUNCATE");
    assert_eq!(r, vec![libc::EPERM.to_string()], "the memfd shrank");
    s.peer
        .must_write(a + n - 5000, k.1, &pats(3, a + n - 5000, 5000));
    assert_eq!(
        s.peer.read(a + n - 5000, k.1, 5000),
        pats(3, a + n - 5000, 5000)
    );
    assert!(s.d.alive(), "rnicd died");

    // another pair of clients on the same daemon
    let mut peer2 = Peer::new(&s.d.sock("t1"));
    let mut p2 = puppet(&s.d, &peer2, "um-unmap-2");
    let b = p2.addr("MALLOC 70000");
    p2.fill(b, 70000, 4);
    let k2 = p2.must_reg(b, 70000);
    peer2.must_write(b, k2.1, &pats(5, b, 70000));
    p2.check(b, 70000, 5);
    // and the first process goes on
    let c = s.p.addr("MALLOC 9000");
    let kc = s.p.must_reg(c, 9000);
    s.rdma_both_ways(c, 9000, kc, 6);
    assert!(s.d.alive());
}

/// Without fork_init a child gets private copies of registered memory:
/// it sees the bytes, its writes reach neither the parent nor the daemon,
/// and registering the same addresses in the child does not touch the
/// parent's pages; the parent's memory stays shared with the daemon.
#[test]
fn fork_without_fork_init_gives_the_child_private_copies() {
    let mut s = setup("um-fork");
    let a = s.p.addr("MALLOC 300");
    let b = s.p.addr("MALLOC 1000000");
    for (x, n, seed) in [(a, 300u64, 1u8), (b, 1_000_000, 11)] {
        s.p.fill(x, n, seed);
        let k = s.p.must_reg(x, n);
        s.peer.must_write(x, k.1, &pats(seed + 1, x, n as usize));
        let code = s.p.ok(&format!("FORK {x} {n} {} {}", seed + 1, seed + 2));
        assert_eq!(
            code,
            vec!["0"],
            "the child did not see the registered bytes"
        );
        s.p.check(x, n, seed + 1);
        assert_eq!(
            s.peer.read(x, k.1, n as usize),
            pats(seed + 1, x, n as usize)
        );
        let code = s.p.ok(&format!("FORKREG {x} {n} {}", seed + 3));
        assert_eq!(code, vec!["0"], "the child could not register");
        s.p.check(x, n, seed + 1);
        assert_eq!(
            s.peer.read(x, k.1, n as usize),
            pats(seed + 1, x, n as usize)
        );
        // still shared with the daemon after the forks
        s.rdma_both_ways(x, n, k, seed + 4);
        assert_eq!(s.p.ok(&format!("FORKMAPPED {x}")), vec!["mapped"]);
        assert_eq!(s.p.ok(&format!("DONTFORK {x}")), vec!["no"]);
    }
    let r = s.p.ok("FORKINIT");
    assert_eq!(r, vec!["0", "true"]);
}

/// After fork_init the registered pages (those registered before it too)
/// are MADV_DONTFORK: a child does not have them; memory never registered
/// is inherited as usual.
#[test]
fn fork_init_makes_registered_memory_dontfork() {
    let mut s = setup("um-forkinit");
    let a = s.p.addr("MMAP 20480");
    s.p.fill(a, 20480, 1);
    let ka = s.p.must_reg(a + PG, 2 * PG);
    assert_eq!(s.p.ok("FORKINIT"), vec!["0", "true"]);
    let b = s.p.addr("MALLOC 2000000");
    s.p.fill(b, 2_000_000, 2);
    let kb = s.p.must_reg(b, 2_000_000);
    for x in [a + PG, a + 2 * PG, b, b + 1_000_000] {
        assert_eq!(s.p.ok(&format!("DONTFORK {x}")), vec!["yes"], "{x:#x}");
        assert_eq!(s.p.ok(&format!("FORKMAPPED {x}")), vec!["unmapped"]);
    }
    // pages never registered are inherited
    assert_eq!(s.p.ok(&format!("DONTFORK {a}")), vec!["no"]);
    assert_eq!(s.p.ok(&format!("FORKMAPPED {a}")), vec!["mapped"]);
    assert_eq!(
        s.p.ok(&format!("FORKMAPPED {}", a + 4 * PG)),
        vec!["mapped"]
    );
    s.rdma_both_ways(a + PG, 2 * PG, ka, 3);
    s.rdma_both_ways(b, 2_000_000, kb, 6);
}

fn memfd(name: &str, len: u64, seals: i32) -> OwnedFd {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: plain syscalls on a fresh descriptor.
    unsafe {
        let fd = libc::memfd_create(n.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, len as i64), 0);
        if seals != 0 {
            assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, seals), 0);
        }
        OwnedFd::from_raw_fd(fd)
    }
}

/// `reg_mr` requests from a hostile client: descriptors that are not
/// memfds or not sealed against shrinking, too short for the region,
/// regions that overflow, are empty or too long, several descriptors, a
/// write-sealed memfd: each gets an error, the daemon serves the next.
#[test]
fn hostile_reg_mr_requests_are_refused() {
    use softrnic::proto::{self, ReqMsg, Request, RespMsg, Response};
    let dir = tempdir("um-hostile");
    let mut d = Daemon::start(None, &["--mem-pair", "--name", "t"], &dir);
    let sock = softrnic::shm::SeqPacket::connect(std::path::Path::new(&d.sock("t0"))).unwrap();
    let ask = |req: Request, fds: &[i32]| -> Response {
        let msg = proto::encode(&ReqMsg {
            v: proto::VERSION,
            req,
        });
        sock.send(&msg, fds).unwrap();
        let mut buf = Vec::new();
        sock.recv(&mut buf).unwrap().expect("answer");
        serde_json::from_slice::<RespMsg>(&buf).unwrap().resp
    };
    let pd = match ask(Request::AllocPd, &[]) {
        Response::Pd { pd } => pd,
        r => panic!("{r:?}"),
    };
    let reg = |offset: u64, len: u64| Request::RegMr {
        pd,
        offset,
        addr: 0x10000,
        len,
        access: 1,
    };
    let sealed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    let good = memfd("good", 1 << 20, sealed);
    let unsealed = memfd("unsealed", 1 << 20, 0);
    let wsealed = memfd("wsealed", 1 << 20, sealed | libc::F_SEAL_WRITE);
    let file = tempfile::tempfile().unwrap();
    file.set_len(1 << 20).unwrap();
    let g = good.as_raw_fd();
    let cases: Vec<(Request, Vec<i32>, &str)> = vec![
        (reg(0, 4096), vec![file.as_raw_fd()], "a plain file"),
        (
            reg(0, 4096),
            vec![unsealed.as_raw_fd()],
            "an unsealed memfd",
        ),
        (
            reg(0, 4096),
            vec![wsealed.as_raw_fd()],
            "a write-sealed memfd",
        ),
        (reg((1 << 20) - 100, 4096), vec![g], "past the end"),
        (reg(u64::MAX - 10, 100), vec![g], "an overflowing offset"),
        (reg(0, 0), vec![g], "an empty region"),
        (reg(0, 1 << 40), vec![g], "a huge region"),
        (reg(0, 4096), vec![g, g], "two descriptors"),
        (reg(0, 4096), vec![], "no descriptor"),
    ];
    for (req, fds, what) in cases {
        match ask(req, &fds) {
            Response::Error { .. } => {}
            r => panic!("{what}: {r:?}"),
        }
    }
    match ask(reg(4096 + 5, 8192), &[g]) {
        Response::Mr { .. } => {}
        r => panic!("a good region: {r:?}"),
    }
    // the client shrinking a memfd it sealed: not possible
    // SAFETY: our own descriptor.
    assert_ne!(unsafe { libc::ftruncate(g, 0) }, 0);
    assert!(d.alive());
    assert_eq!(common::stats(&d.sock("t0")).mrs, 1);
}
