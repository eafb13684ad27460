//! Raw AF_PACKET sockets with mmap'd TPACKET_V3 rings (packet(7)).
//!
//! RX: a ring of blocks; the kernel fills a block with frames and hands it
//! over (block status TP_STATUS_USER) when it is full or its retire timer
//! (`retire_ms`, at least 1 ms) expires — the price TPACKET_V3 pays for
//! batching: a lone frame may wait up to that long. TX: a ring of frames
//! marked TP_STATUS_SEND_REQUEST, then one `sendto` kicks the kernel for
//! the whole batch. The socket ignores its own outgoing frames
//! (PACKET_IGNORE_OUTGOING) and bypasses the qdisc layer.
//!
//! The kernel's UDP stack sees RoCEv2 frames too and would answer each with
//! an ICMP port-unreachable; a UDP socket bound to port 4791 that nobody
//! reads (as rxe has its tunnel socket) keeps it quiet.
//!
//! The port reports no receive backlog (`Port::rx_backlog` is `None`):
//! frames wait in blocks the kernel has not retired yet, which userspace
//! cannot count, so a device on AF_PACKET generates no PFC.

use super::{FrameBatch, Port, PortCounters, SLOT_LEN};
use std::ffi::CString;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;
use wire::EthernetAddress;

const ETH_P_ALL: u16 = 0x0003;
const TPACKET_V3: libc::c_int = 2;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_WRONG_FORMAT: u32 = 4;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// TPACKET_ALIGN(sizeof(struct tpacket3_hdr)): where TX frame data starts.
const TX_DATA_OFFSET: usize = 48;

/// `struct tpacket_req3`.
#[repr(C)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}

/// `struct tpacket3_hdr` (the fields we use).
#[repr(C)]
struct Tpacket3Hdr {
    next_offset: u32,
    sec: u32,
    nsec: u32,
    snaplen: u32,
    len: u32,
    status: u32,
    mac: u16,
    net: u16,
}

/// `struct tpacket_block_desc` with `struct tpacket_hdr_v1` (the fields we use).
#[repr(C)]
struct BlockDesc {
    version: u32,
    offset_to_priv: u32,
    block_status: u32,
    num_pkts: u32,
    offset_to_first_pkt: u32,
}

/// Ring geometry.
#[derive(Clone, Copy, Debug)]
pub struct RingConfig {
    pub rx_block_size: u32,
    pub rx_blocks: u32,
    pub retire_ms: u32,
    pub tx_frame_size: u32,
    pub tx_frames: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            rx_block_size: 1 << 20,
            rx_blocks: 16,
            retire_ms: 1,
            tx_frame_size: 16384,
            tx_frames: 1024,
        }
    }
}

/// Why the port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AfPacketError {
    #[error("interface {0}: no such interface")]
    NoInterface(String),
    #[error("{what}: {source} (AF_PACKET needs CAP_NET_RAW, e.g. root)")]
    Sys {
        what: &'static str,
        source: io::Error,
    },
}

fn sys(what: &'static str) -> AfPacketError {
    AfPacketError::Sys {
        what,
        source: io::Error::last_os_error(),
    }
}

/// A port on a real interface through an AF_PACKET socket.
pub struct AfPacketPort {
    fd: OwnedFd,
    ring: *mut u8,
    ring_len: usize,
    cfg: RingConfig,
    rx_block: u32,
    /// Position inside the current RX block: (packets left, offset).
    rx_cursor: Option<(u32, usize)>,
    tx_next: u32,
    mac: EthernetAddress,
    mtu: usize,
    speed: u64,
    counters: PortCounters,
    _udp_guard: Option<UdpSocket>,
    pub name: String,
}

// SAFETY: the ring mapping is owned by this port and only touched through &mut self.
unsafe impl Send for AfPacketPort {}

fn setsockopt<T>(
    fd: libc::c_int,
    opt: libc::c_int,
    v: &T,
    what: &'static str,
) -> Result<(), AfPacketError> {
    // SAFETY: v points to a live T of the size we pass.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    if r != 0 {
        return Err(sys(what));
    }
    Ok(())
}

/// Interface facts from the kernel through `fd`'s network namespace:
/// (ifindex, MAC, MTU). (sysfs would show the mount's namespace instead.)
pub(super) fn interface(
    fd: libc::c_int,
    name: &str,
) -> Result<(i32, EthernetAddress, usize), AfPacketError> {
    let c = CString::new(name).map_err(|_| AfPacketError::NoInterface(name.into()))?;
    if c.as_bytes().len() >= libc::IFNAMSIZ {
        return Err(AfPacketError::NoInterface(name.into()));
    }
    // SAFETY: a zeroed ifreq with the name copied in.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(c.as_bytes()) {
        *d = *s as libc::c_char;
    }
    // SAFETY: ioctls that fill ifr.
    unsafe {
        if libc::ioctl(fd, libc::SIOCGIFINDEX, &mut ifr) != 0 {
            return Err(AfPacketError::NoInterface(name.into()));
        }
        let idx = ifr.ifr_ifru.ifru_ifindex;
        if libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut ifr) != 0 {
            return Err(sys("SIOCGIFHWADDR"));
        }
        let mut mac = [0u8; 6];
        for (m, b) in mac.iter_mut().zip(ifr.ifr_ifru.ifru_hwaddr.sa_data.iter()) {
            *m = *b as u8;
        }
        if libc::ioctl(fd, libc::SIOCGIFMTU, &mut ifr) != 0 {
            return Err(sys("SIOCGIFMTU"));
        }
        Ok((idx, EthernetAddress(mac), ifr.ifr_ifru.ifru_mtu as usize))
    }
}

impl AfPacketPort {
    /// Opens a port on `ifname` in the calling thread's network namespace.
    /// The link speed pause quanta and pacing are computed at (default
    /// 10 Gb/s, what veth reports).
    pub fn set_link_speed(&mut self, bps: u64) {
        self.speed = bps;
    }

    pub fn open(ifname: &str, cfg: RingConfig) -> Result<AfPacketPort, AfPacketError> {
        // SAFETY: plain socket(2) call.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                (ETH_P_ALL.to_be()) as i32,
            )
        };
        if raw < 0 {
            return Err(sys("socket(AF_PACKET)"));
        }
        // SAFETY: raw is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let (ifindex, mac, mtu) = interface(raw, ifname)?;
        setsockopt(raw, PACKET_VERSION, &TPACKET_V3, "PACKET_VERSION")?;
        let one: libc::c_int = 1;
        // Best effort: older kernels lack these.
        let _ = setsockopt(raw, PACKET_QDISC_BYPASS, &one, "PACKET_QDISC_BYPASS");
        let _ = setsockopt(raw, PACKET_IGNORE_OUTGOING, &one, "PACKET_IGNORE_OUTGOING");
        let rx = TpacketReq3 {
            block_size: cfg.rx_block_size,
            block_nr: cfg.rx_blocks,
            frame_size: 2048,
            frame_nr: cfg.rx_block_size / 2048 * cfg.rx_blocks,
            retire_blk_tov: cfg.retire_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(raw, PACKET_RX_RING, &rx, "PACKET_RX_RING")?;
        let tx_block = cfg.tx_frame_size * 4;
        let tx = TpacketReq3 {
            block_size: tx_block,
            block_nr: cfg.tx_frames / 4,
            frame_size: cfg.tx_frame_size,
            frame_nr: cfg.tx_frames / 4 * 4,
            retire_blk_tov: 0,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        setsockopt(raw, PACKET_TX_RING, &tx, "PACKET_TX_RING")?;
        let ring_len = (cfg.rx_block_size * cfg.rx_blocks) as usize
            + (tx_block * (cfg.tx_frames / 4)) as usize;
        // SAFETY: mapping the rings the kernel just set up on this socket.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                raw,
                0,
            )
        };
        let ring = if ring == libc::MAP_FAILED {
            // MAP_LOCKED may exceed RLIMIT_MEMLOCK: try without
            // SAFETY: as above.
            let r = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    ring_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    raw,
                    0,
                )
            };
            if r == libc::MAP_FAILED {
                return Err(sys("mmap(rings)"));
            }
            r
        } else {
            ring
        };
        // SAFETY: zeroed sockaddr_ll, then filled.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: sll is a valid sockaddr_ll.
        let r = unsafe {
            libc::bind(
                raw,
                &sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r != 0 {
            // SAFETY: unmapping what we mapped.
            unsafe { libc::munmap(ring, ring_len) };
            return Err(sys("bind(AF_PACKET)"));
        }
        let guard = UdpSocket::bind(("0.0.0.0", wire::ROCEV2_PORT)).ok();
        Ok(AfPacketPort {
            fd,
            ring: ring as *mut u8,
            ring_len,
            cfg,
            rx_block: 0,
            rx_cursor: None,
            tx_next: 0,
            mac,
            mtu,
            speed: 10_000_000_000,
            counters: PortCounters::default(),
            _udp_guard: guard,
            name: ifname.into(),
        })
    }

    fn block(&self, i: u32) -> *mut u8 {
        // SAFETY: i < rx_blocks, inside the mapping.
        unsafe { self.ring.add((i * self.cfg.rx_block_size) as usize) }
    }

    fn tx_frame(&self, i: u32) -> *mut u8 {
        let rx_len = (self.cfg.rx_block_size * self.cfg.rx_blocks) as usize;
        // SAFETY: i < tx frames, inside the mapping.
        unsafe {
            self.ring
                .add(rx_len + (i * self.cfg.tx_frame_size) as usize)
        }
    }

    fn tx_frames(&self) -> u32 {
        self.cfg.tx_frames / 4 * 4
    }
}

impl Drop for AfPacketPort {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and no longer used.
        unsafe { libc::munmap(self.ring as *mut libc::c_void, self.ring_len) };
    }
}

impl Port for AfPacketPort {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        let mut n = 0;
        while !batch.is_full() {
            let bd = self.block(self.rx_block) as *mut BlockDesc;
            let (left, off) = match self.rx_cursor {
                Some(c) => c,
                None => {
                    // SAFETY: bd points at a block descriptor in the ring.
                    let status = unsafe { std::ptr::read_volatile(&(*bd).block_status) };
                    if status & TP_STATUS_USER == 0 {
                        break;
                    }
                    fence(Ordering::Acquire);
                    // SAFETY: the block is ours until we hand it back.
                    unsafe { ((*bd).num_pkts, (*bd).offset_to_first_pkt as usize) }
                }
            };
            if left == 0 {
                fence(Ordering::Release);
                // SAFETY: handing the block back to the kernel.
                unsafe { std::ptr::write_volatile(&mut (*bd).block_status, TP_STATUS_KERNEL) };
                self.rx_cursor = None;
                self.rx_block = (self.rx_block + 1) % self.cfg.rx_blocks;
                continue;
            }
            // SAFETY: off points at a tpacket3_hdr inside this block.
            let hdr = unsafe { &*(self.block(self.rx_block).add(off) as *const Tpacket3Hdr) };
            let len = hdr.snaplen as usize;
            if len <= SLOT_LEN {
                // SAFETY: the frame's bytes lie inside the block.
                let data = unsafe {
                    std::slice::from_raw_parts(
                        self.block(self.rx_block).add(off + hdr.mac as usize),
                        len,
                    )
                };
                batch.push(data);
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += len as u64;
                n += 1;
            } else {
                self.counters.rx_dropped += 1;
            }
            self.rx_cursor = Some((left - 1, off + hdr.next_offset as usize));
        }
        n
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        let mut queued = 0;
        for (i, f) in batch.iter().enumerate() {
            let slot = self.tx_frame(self.tx_next);
            let hdr = slot as *mut Tpacket3Hdr;
            // SAFETY: slot is a TX frame in the ring.
            let status = unsafe { std::ptr::read_volatile(&(*hdr).status) };
            if status & (TP_STATUS_SEND_REQUEST | 2) != 0
                || f.len() + TX_DATA_OFFSET > self.cfg.tx_frame_size as usize
            {
                // sends a prefix of the batch (see `Port::send`)
                self.counters.tx_dropped += (batch.len() - i) as u64;
                break;
            }
            if status & TP_STATUS_WRONG_FORMAT != 0 {
                self.counters.tx_dropped += 1;
            }
            fence(Ordering::Acquire);
            // SAFETY: the frame slot is ours while its status is AVAILABLE.
            unsafe {
                std::ptr::copy_nonoverlapping(f.as_ptr(), slot.add(TX_DATA_OFFSET), f.len());
                (*hdr).len = f.len() as u32;
                (*hdr).snaplen = f.len() as u32;
            }
            fence(Ordering::Release);
            // SAFETY: publishing the frame to the kernel.
            unsafe { std::ptr::write_volatile(&mut (*hdr).status, TP_STATUS_SEND_REQUEST) };
            self.tx_next = (self.tx_next + 1) % self.tx_frames();
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += f.len() as u64;
            queued += 1;
        }
        if queued > 0 {
            // SAFETY: a zero-length sendto kicks the TX ring.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock {
                    self.counters.tx_dropped += 1;
                }
            }
        }
        let _ = TP_STATUS_AVAILABLE;
        queued
    }

    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn link_speed_bps(&self) -> u64 {
        self.speed
    }

    fn counters(&self) -> PortCounters {
        self.counters.clone()
    }

    /// poll(2) on the socket: readable once a block is handed over.
    fn wait(&mut self, timeout: Duration) {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().clamp(0, 1000) as i32;
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms.max(if timeout.is_zero() { 0 } else { 1 })) };
    }

    /// ppoll(2) on the socket and the engine's bell.
    fn wait_or_ring(&mut self, bell: &std::sync::Arc<super::Bell>, timeout: Duration) {
        bell.wait(Some(self.fd.as_fd()), timeout);
    }
}
