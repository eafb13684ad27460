//! `rnic pingpong`: ibv_rc_pingpong (with `--ud`: ibv_ud_pingpong, with
//! `--uc`: ibv_uc_pingpong) from rdma-core's libibverbs examples, on a soft
//! RNIC on a real interface — same flags, same out-of-band exchange, same
//! output.
//!
//! The exchange, as the examples do it: TCP port 18515 (`-p`); the client
//! connects and writes its address record, the server reads it, brings
//! its QP to RTS (RC) and answers with its own, the client reads that and
//! writes `"done"` (5 bytes with the NUL), the server reads it, and both
//! close the socket before the first SEND. A record is the 52 bytes of
//! `sprintf("%04x:%06x:%06x:%s", lid, qpn, psn, gid)` with its NUL: LID
//! (0 on Ethernet), QPN, first PSN, and the GID as `gid_to_wire_gid`
//! writes it — four `%08x` of `htonl(*(uint32_t *)(gid + 4 * i))`, which
//! is the 16 GID bytes in order as 32 hex digits on any host.
//!
//! The run: both sides post `-r` receives; the client SENDs first; a side
//! SENDs again once its previous SEND completed and a message arrived,
//! until each side sent and received `-n` messages of `-s` bytes. Timing
//! starts after the client's first post (the server: after connecting)
//! and ends with the last completion, and each side prints
//! `N bytes in T seconds = X Mbit/sec` (N = 2 × size × iters) and
//! `N iters in T seconds = Y usec/iter`. UD (`--ud`): Q_Key 0x11111111,
//! receive buffers of size + 40 for the GRH, the send from offset 40, and
//! a message limit of the port's active MTU (the largest IB MTU the
//! interface MTU carries, as rxe derives it; `-s` defaults to 2048 as in
//! ud_pingpong.c, which refuses `size > active_mtu`). UC (`--uc`): as RC,
//! with uc_pingpong.c's attributes: INIT with no remote access, RTR with
//! AV, path MTU, dest QPN and RQ PSN, RTS with just the SQ PSN.
//!
//! `-c/--chk` (validate received buffer), as the examples do it: before
//! its first SEND the client sets the byte at each page-size offset of its
//! message (UD: after the 40-byte GRH room) to `i / page_size %
//! sizeof(char)` — always 0 — and after the run the server checks those
//! bytes and prints `invalid data in page N` for each that is not 0. Both
//! sides' buffers otherwise hold memset's 0x7b, and every message echoes
//! the client's, so rnic also checks every byte of the last message each
//! side received and fails (non-zero exit) on the first difference.

mod record;

pub use record::{gid_to_wire, wire_to_gid, Dest, RecordError};

use crate::netdev::{DevOptions, NetDev};
use crate::oob::{self, Ctrl};
use crate::qp::{Connect, UD_QKEY};
use crate::CliError;
use nic::verbs::{Memory, QpType, RecvWr, SendOp, SendWr, Sgl, UdDest, Wc, WcStatus};
use record::MSG_LEN;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use wire::Gid;

/// `sizeof "done"`.
pub const DONE: &[u8; 5] = b"done\0";
/// ibv_ud_pingpong's receive buffers hold the 40-byte GRH before the data.
pub const GRH_LEN: usize = 40;
/// memset's fill of the examples' buffers (`memset(ctx->buf, 0x7b, size)`).
pub const FILL: u8 = 0x7b;

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// What `rnic pingpong` was asked.
#[derive(Clone, Debug)]
pub struct PingpongOptions {
    pub peer: Option<String>,
    pub port: u16,
    pub ifname: Option<String>,
    pub ib_port: u32,
    pub size: Option<u32>,
    pub mtu: u32,
    pub rx_depth: u32,
    pub iters: u32,
    pub sl: u8,
    pub gid_idx: Option<i32>,
    pub ud: bool,
    /// ibv_uc_pingpong: UC QPs.
    pub uc: bool,
    /// `-c/--chk`: validate the received buffer.
    pub chk: bool,
    /// The page size `--chk` marks and checks at (the examples use
    /// `sysconf(_SC_PAGESIZE)`; `None`: this host's).
    pub page_size: Option<usize>,
    pub backend: crate::netdev::PortKind,
    pub gid: Option<Gid>,
    pub pcap: Option<PathBuf>,
    pub inline: bool,
    pub core: Option<usize>,
    /// Congestion control (see `netdev::parse_cc`).
    pub cc: nic::transport::CcConfig,
}

fn inet6(g: &Gid) -> String {
    std::net::Ipv6Addr::from(g.0).to_string()
}

/// The options `rnic pingpong` checked: QP type, message size, and the
/// page size `--chk` works at.
struct Plan {
    qp_type: QpType,
    size: u32,
    page_size: usize,
}

/// Checks the options as the examples do (same limits, same order).
fn plan(o: &PingpongOptions) -> Result<Plan, CliError> {
    if !crate::check::MTUS.contains(&o.mtu) {
        return Err(CliError::usage(format!(
            "-m {}: the MTU is one of 256, 512, 1024, 2048, 4096",
            o.mtu
        )));
    }
    if o.ib_port != 1 {
        return Err(CliError::usage(format!(
            "-i {}: a soft RNIC has one port, port 1",
            o.ib_port
        )));
    }
    if o.rx_depth < 2 || o.rx_depth > 8192 {
        return Err(CliError::usage(format!(
            "-r {}: the receive depth is 2 to 8192",
            o.rx_depth
        )));
    }
    if o.iters == 0 {
        return Err(CliError::usage("-n 0: at least one exchange"));
    }
    let qp_type = match (o.ud, o.uc) {
        (true, true) => return Err(CliError::usage("--ud and --uc: pick one QP type")),
        (true, false) => QpType::Ud,
        (false, true) => QpType::Uc,
        (false, false) => QpType::Rc,
    };
    // ud_pingpong.c: size 2048; rc_ and uc_pingpong.c: 4096
    let size = o.size.unwrap_or(if o.ud { 2048 } else { 4096 });
    if size == 0 {
        return Err(CliError::usage("-s 0: messages of at least one byte"));
    }
    let page_size = match o.page_size {
        Some(p) if p == 0 || !p.is_power_of_two() => {
            return Err(CliError::usage(format!("--page-size {p}: a power of two")))
        }
        Some(p) => p,
        None => host_page_size(),
    };
    if size as usize > crate::perf::request::MAX_SIZE {
        return Err(CliError::usage(format!(
            "-s {size}: at most {} bytes",
            crate::perf::request::MAX_SIZE
        )));
    }
    Ok(Plan {
        qp_type,
        size,
        page_size,
    })
}

/// The interface to run on: `-d`, or the one the route to the peer takes.
fn interface(o: &PingpongOptions) -> Result<String, CliError> {
    match (&o.ifname, &o.peer) {
        (Some(d), _) => Ok(d.clone()),
        (None, Some(p)) => {
            let ip = oob::resolve(p, o.port)?;
            crate::netdev::route_dev(ip)
        }
        (None, None) => Err(CliError::usage(
            "the server needs its interface: -d IFACE (the device is an interface)",
        )),
    }
}

/// The soft RNIC on `ifname` with its buffer (`buf_len` bytes of 0x7b).
fn open(o: &PingpongOptions, ifname: &str, size: u32, buf_len: usize) -> Result<NetDev, CliError> {
    let mut d = DevOptions::new(ifname, o.backend, buf_len);
    d.gid = o.gid;
    d.pcap = o.pcap.clone();
    d.pcap_frames = usize::MAX;
    d.inline = o.inline;
    d.core = o.core;
    d.cc = o.cc;
    let nd = NetDev::open(&d)?;
    // NetDev::open set the port's active MTU from the interface MTU; a UD
    // message is one packet of at most that
    let port_mtu = nd.max_mtu;
    if o.ud && size > port_mtu {
        // ud_pingpong.c: size > 1 << (active_mtu + 7)
        return Err(CliError::new(format!(
            "Requested size larger than port MTU ({port_mtu}): {} has MTU {}; \
             UD messages are single packets",
            nd.ifname, nd.if_mtu
        )));
    }
    // memset(ctx->buf, 0x7b, size)
    nd.mem.write(0, &vec![FILL; buf_len]);
    Ok(nd)
}

/// The path MTU: the port's active MTU for UD, else `-m` as far as the
/// interface carries it.
fn path_mtu(o: &PingpongOptions, nd: &NetDev) -> u32 {
    if o.ud {
        return nd.max_mtu;
    }
    let mtu = o.mtu.min(nd.max_mtu);
    if mtu < o.mtu {
        eprintln!(
            "rnic: -m {}: {} (MTU {}) carries IB MTU {mtu} at most; using {mtu}",
            o.mtu, nd.ifname, nd.if_mtu
        );
    }
    mtu
}

/// The out-of-band exchange of address records, client or server side as
/// the examples order it; `connect` brings the QP to RTS (RC) toward the
/// peer's record.
fn exchange(
    o: &PingpongOptions,
    nd: &NetDev,
    me: &Dest,
    connect: impl Fn(&NetDev, &Dest) -> Result<Connect, CliError>,
) -> Result<(Dest, Connect), CliError> {
    match &o.peer {
        Some(host) => {
            let mut ctrl = Ctrl::connect(host, o.port)?;
            ctrl.write_all(&me.encode())
                .map_err(|e| CliError::new(format!("Couldn't send local address: {e}")))?;
            let msg = ctrl
                .read_exact(MSG_LEN)
                .map_err(|e| CliError::new(format!("Couldn't read/write remote address: {e}")))?;
            ctrl.write_all(DONE)?;
            let rem = fix_gid(Dest::decode(&msg)?, &ctrl);
            print_remote(&rem)?;
            let c = connect(nd, &rem)?;
            Ok((rem, c))
        }
        None => {
            let l = oob::listen(o.port)?;
            let mut ctrl = Ctrl::accept(&l)?;
            drop(l);
            let msg = ctrl
                .read_exact(MSG_LEN)
                .map_err(|e| CliError::new(format!("{e}: Couldn't read remote address")))?;
            let rem = fix_gid(Dest::decode(&msg)?, &ctrl);
            let c = connect(nd, &rem)?;
            ctrl.write_all(&me.encode())?;
            // "done" (5 bytes; some versions read a whole record's worth)
            let done = ctrl.read_some(MSG_LEN)?;
            if !done.starts_with(b"done") {
                return Err(CliError::new("Couldn't send/recv local address"));
            }
            print_remote(&rem)?;
            Ok((rem, c))
        }
    }
}

/// Runs `rnic pingpong`.
pub fn run(o: &PingpongOptions) -> Result<(), CliError> {
    let Plan {
        qp_type,
        size,
        page_size,
    } = plan(o)?;
    let ifname = interface(o)?;
    let grh = if o.ud { GRH_LEN } else { 0 };
    let buf_len = size as usize + grh;
    let mut nd = open(o, &ifname, size, buf_len)?;
    let qpn = nd.create_qp(qp_type, o.rx_depth.max(16))?;
    nd.init(qpn, qp_type)?;
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sgl: Sgl::single(nd.base, buf_len as u32, nd.lkey),
    };
    for _ in 0..o.rx_depth {
        nd.dev
            .post_recv(qpn, recv)
            .map_err(|e| CliError::new(format!("Couldn't post receive: {e}")))?;
    }
    let me = Dest {
        lid: 0,
        qpn,
        psn: crate::netdev::random_psn(),
        gid: nd.gid,
    };
    let sep = if o.ud { ":" } else { "," };
    crate::say(&format!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}\n",
        me.lid,
        me.qpn,
        me.psn,
        inet6(&me.gid)
    ))?;
    let mtu = path_mtu(o, &nd);
    let connect = |nd: &NetDev, rem: &Dest| -> Result<Connect, CliError> {
        let ah = nd.ah_to(rem.gid)?;
        // the examples: one outstanding READ/atomic, RNR timer 12, timeout 14
        let c = Connect {
            max_rd_atomic: 1,
            ..Connect::new(qp_type, ah, mtu, rem.qpn).with_psns(me.psn, rem.psn)
        };
        nd.connect(qpn, c)?;
        Ok(c)
    };
    let (rem, conn) = exchange(o, &nd, &me, connect)?;
    let ud = o.ud.then_some(UdDest {
        ah: conn.ah,
        remote_qpn: rem.qpn,
        remote_qkey: UD_QKEY,
    });
    let send = SendWr {
        ud,
        ..SendWr::new(
            SEND_WRID,
            SendOp::Send,
            Sgl::single(nd.base + grh as u64, size, nd.lkey),
        )
    };
    let mut pending = RECV_WRID;
    if o.peer.is_some() {
        if o.chk {
            // the examples' client: buf[i (+ 40)] = i / page_size % sizeof(char)
            for i in (0..size as usize).step_by(page_size) {
                nd.mem.write(grh + i, &[chk_byte(i, page_size)]);
            }
        }
        post_send(&nd, qpn, &send)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let ring = Ring {
        qpn,
        recv,
        send: &send,
    };
    exchange_messages(o, &mut nd, &ring, pending)?;
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * o.iters as u64 * 2;
    nd.stop();
    crate::say(&format!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec\n{} iters in {:.2} seconds = {:.2} usec/iter\n",
        usec / 1e6,
        bytes as f64 * 8.0 / usec,
        o.iters,
        usec / 1e6,
        usec / o.iters as f64
    ))?;
    if let Some(p) = &nd.pcap {
        eprintln!("rnic: wrote {}", p.display());
    }
    if o.chk {
        let mut got = vec![0u8; size as usize];
        nd.mem.read(grh, &mut got);
        check_received(o, &got, page_size)?;
    }
    Ok(())
}

/// The QP and the work requests the exchange posts again and again.
struct Ring<'a> {
    qpn: u32,
    recv: RecvWr,
    send: &'a SendWr,
}

fn post_send(nd: &NetDev, qpn: u32, send: &SendWr) -> Result<(), CliError> {
    nd.dev
        .post_send(qpn, send.clone())
        .map_err(|e| CliError::new(format!("Couldn't post send: {e}")))
}

/// The examples' loop: SEND again once the previous SEND completed and a
/// message arrived (`pending` holds the wr_ids awaited), re-post the
/// receives when one is left, until each side sent and received `-n`
/// messages. Fails on an error completion or 20 s without one.
fn exchange_messages(
    o: &PingpongOptions,
    nd: &mut NetDev,
    ring: &Ring<'_>,
    mut pending: u64,
) -> Result<(), CliError> {
    let qpn = ring.qpn;
    let mut routs = o.rx_depth;
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wcs: Vec<Wc> = Vec::with_capacity(2);
    let mut last_progress = Instant::now();
    let mut spins = 0u32;
    while rcnt < o.iters || scnt < o.iters {
        wcs.clear();
        if nd.cq.poll(2, &mut wcs) == 0 {
            spins = spins.wrapping_add(1);
            nd.idle(spins as u64);
            if spins.is_multiple_of(4096) && last_progress.elapsed() > Duration::from_secs(20) {
                let state = nd.dev.call(move |r| r.debug_qp(qpn)).unwrap_or_default();
                return Err(CliError::new(format!(
                    "no completion for 20 s ({scnt} sent, {rcnt} received): {}",
                    state.trim().replace('\n', " | ")
                )));
            }
            continue;
        }
        last_progress = Instant::now();
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(CliError::new(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status.as_str(),
                    wc.status as i32,
                    wc.wr_id
                )));
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        while routs < o.rx_depth {
                            nd.dev.post_recv(qpn, ring.recv).map_err(|e| {
                                CliError::new(format!("Couldn't post receive ({routs}): {e}"))
                            })?;
                            routs += 1;
                        }
                    }
                    rcnt += 1;
                }
                other => {
                    return Err(CliError::new(format!(
                        "Completion for unknown wr_id {other}"
                    )))
                }
            }
            pending &= !wc.wr_id;
            if scnt < o.iters && pending == 0 {
                post_send(nd, qpn, ring.send)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    Ok(())
}

/// `--chk` on the last message received (`got`): the server prints the
/// examples' `invalid data in page N` lines; both sides fail on the first
/// byte that differs.
fn check_received(o: &PingpongOptions, got: &[u8], page_size: usize) -> Result<(), CliError> {
    if o.peer.is_none() {
        // the examples' server: one line per page whose first byte is off
        let mut lines = String::new();
        for p in invalid_pages(got, page_size) {
            lines += &format!("invalid data in page {p}\n");
        }
        crate::say(&lines)?;
    }
    if let Some(off) = first_mismatch(got, page_size) {
        return Err(CliError::new(format!(
            "--chk: the last message received differs at byte {off}: {:#04x}, expected {:#04x} \
             (0x7b with 0 at each {page_size}-byte page)",
            got[off],
            expected_byte(off, page_size)
        )));
    }
    Ok(())
}

/// What the examples' client writes at message offset `i` (a multiple of
/// the page size): `i / page_size % sizeof(char)`, which is 0 since
/// `sizeof(char)` is 1.
pub fn chk_byte(i: usize, page_size: usize) -> u8 {
    (i / page_size % std::mem::size_of::<std::ffi::c_char>()) as u8
}

/// The byte a `--chk` message holds at `off`: the client's mark at page
/// starts, memset's 0x7b elsewhere.
pub fn expected_byte(off: usize, page_size: usize) -> u8 {
    if off.is_multiple_of(page_size) {
        chk_byte(off, page_size)
    } else {
        FILL
    }
}

/// The pages the examples' server reports: those whose first byte is not
/// the client's mark.
pub fn invalid_pages(msg: &[u8], page_size: usize) -> Vec<usize> {
    (0..msg.len())
        .step_by(page_size)
        .filter(|&i| msg[i] != chk_byte(i, page_size))
        .map(|i| i / page_size)
        .collect()
}

/// The first byte of a `--chk` message that is not what the client sent.
pub fn first_mismatch(msg: &[u8], page_size: usize) -> Option<usize> {
    msg.iter()
        .enumerate()
        .position(|(i, &b)| b != expected_byte(i, page_size))
}

/// `sysconf(_SC_PAGESIZE)`, from the auxiliary vector (AT_PAGESZ); 4096
/// if it cannot be read.
pub fn host_page_size() -> usize {
    const AT_PAGESZ: usize = 6;
    const W: usize = std::mem::size_of::<usize>();
    let Ok(auxv) = std::fs::read("/proc/self/auxv") else {
        return 4096;
    };
    let word = |b: &[u8]| <[u8; W]>::try_from(b).ok().map(usize::from_ne_bytes);
    auxv.chunks_exact(2 * W)
        .find_map(|e| match (word(&e[..W]), word(&e[W..])) {
            (Some(AT_PAGESZ), Some(v)) => Some(v),
            _ => None,
        })
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

fn print_remote(rem: &Dest) -> Result<(), CliError> {
    crate::say(&format!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}\n",
        rem.lid,
        rem.qpn,
        rem.psn,
        inet6(&rem.gid)
    ))
}

/// A peer that sent no GID (ibv_rc_pingpong without `-g`) is reached at
/// the address its TCP connection came from.
fn fix_gid(mut rem: Dest, ctrl: &Ctrl) -> Dest {
    if rem.gid.0[8..].iter().all(|&b| b == 0) {
        eprintln!(
            "rnic: the peer sent no GID (run ibv_*_pingpong with -g); using its TCP address {}",
            ctrl.peer
        );
        rem.gid = Gid::from_ip(ctrl.peer);
    }
    rem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chk_marks_are_zero_and_checks_find_the_first_difference() {
        // i / page_size % sizeof(char): 0 at every page
        for i in [0, 4096, 8192, 65536] {
            assert_eq!(chk_byte(i, 4096), 0);
        }
        let page = 1024;
        let mut msg = vec![FILL; 5000];
        for i in (0..msg.len()).step_by(page) {
            msg[i] = 0;
        }
        assert_eq!(invalid_pages(&msg, page), Vec::<usize>::new());
        assert_eq!(first_mismatch(&msg, page), None);
        msg[2048] = FILL;
        msg[3000] = 1;
        assert_eq!(invalid_pages(&msg, page), [2]);
        assert_eq!(first_mismatch(&msg, page), Some(2048));
        msg[2048] = 0;
        assert_eq!(invalid_pages(&msg, page), Vec::<usize>::new());
        assert_eq!(first_mismatch(&msg, page), Some(3000));
        // marked for 4096-byte pages, checked for 1024-byte ones
        let mut four_k = vec![FILL; 4096];
        four_k[0] = 0;
        assert_eq!(invalid_pages(&four_k, 1024), [1, 2, 3]);
        assert_eq!(first_mismatch(&four_k, 1024), Some(1024));
    }

    #[test]
    fn host_page_size_is_a_power_of_two() {
        let p = host_page_size();
        assert!(p.is_power_of_two() && p >= 4096, "{p}");
    }
}
