//! Raw AF_PACKET sockets with mmap'd rings (packet(7); the kernel's
//! Documentation/networking/packet_mmap.rst), in one of two ring formats:
//!
//! - **TPACKET_V2** (the default, [`TpacketVersion::V2`]): the RX ring is an
//!   array of fixed-size frame slots, each with its own `struct
//!   tpacket2_hdr`. The kernel copies a frame into the next free slot, sets
//!   its `tp_status` to TP_STATUS_USER and wakes the socket right away; the
//!   port copies the frame out and hands the slot back (TP_STATUS_KERNEL).
//!   A lone frame is visible as soon as the kernel has it — what a
//!   ping-pong needs. Slots are sized from the interface MTU (a 9000-byte
//!   MTU takes ~9 KiB per slot, ~1840 slots in the default 16 MiB).
//! - **TPACKET_V3** ([`TpacketVersion::V3`], `--backend afpacket-v3`): the
//!   RX ring is a ring of blocks the kernel packs frames into, handing a
//!   block over (block status TP_STATUS_USER) when it is full or when its
//!   retire timer (`retire_ms`, at least 1 ms) expires. That batching costs
//!   a lone frame up to the timer period: over veth a 64 B WRITE's half
//!   round trip is ~500 µs on V3 against ~8 µs on V2, and the ACKs'
//!   wait halves WRITE bandwidth (3.9 against 7.1 Gbit/s; BENCHMARKS.md,
//!   "AF_PACKET: TPACKET_V2 against TPACKET_V3").
//!
//! Both formats: a frame the kernel truncated (`tp_snaplen < tp_len`, or
//! TP_STATUS_COPY), one whose offsets leave its slot or one longer than a
//! [`FrameBatch`] slot is counted in `rx_dropped` and its slot handed back
//! all the same; frames the kernel dropped because the ring was full
//! (PACKET_STATISTICS, read by `counters`) are counted there too. A VLAN
//! tag the kernel took out of the frame (TP_STATUS_VLAN_VALID) is put back
//! in, so the transport sees the frame as it was on the wire.
//!
//! TX (both formats): a ring of frames marked TP_STATUS_SEND_REQUEST, then
//! one `sendto` kicks the kernel for the whole batch; the frame header is the
//! ring version's (`tpacket2_hdr`, data at 32; `tpacket3_hdr`, data at 48).
//! The socket ignores its own outgoing frames (PACKET_IGNORE_OUTGOING) and
//! bypasses the qdisc layer.
//!
//! The kernel's UDP stack sees RoCEv2 frames too and would answer each with
//! an ICMP port-unreachable; a UDP socket bound to port 4791 that nobody
//! reads (as rxe has its tunnel socket) keeps it quiet.
//!
//! Receive backlog (`Port::rx_backlog`, what PFC generation watches): on
//! V2, the slots marked TP_STATUS_USER from the read position on, counted
//! incrementally (each slot is read once by the count and once by `recv`);
//! bytes are the frames' wire lengths, split by class (the VLAN PCP the
//! kernel took out into `tp_vlan_tci`, the IP DSCP) as each frame is
//! counted, and taken out of its class again when `recv` hands it over. On V3
//! it is `None`: frames wait in blocks the kernel has not retired yet,
//! which userspace cannot count, so a device on V3 generates no PFC.

use super::{FrameBatch, Port, PortCounters, RxBacklog, RxClasses, SLOT_LEN};
use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;
use wire::EthernetAddress;

// linux/if_ether.h, linux/if_packet.h
const ETH_P_ALL: u16 = 0x0003;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
// RX ring status bits
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1 << 0;
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
// TX ring status bits
const TP_STATUS_SEND_REQUEST: u32 = 1 << 0;
const TP_STATUS_SENDING: u32 = 1 << 1;
const TP_STATUS_WRONG_FORMAT: u32 = 1 << 2;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_ALIGNMENT: usize = 16;
/// TPACKET2_HDRLEN: TPACKET_ALIGN(sizeof(struct tpacket2_hdr)) +
/// sizeof(struct sockaddr_ll).
const TPACKET2_HDRLEN: usize = 32 + 20;
/// Where TX frame data starts: TPACKET_ALIGN(sizeof(struct tpacketN_hdr)).
const TX_DATA_OFFSET_V2: usize = 32;
const TX_DATA_OFFSET_V3: usize = 48;
/// Ethernet header plus one VLAN tag the kernel may leave in the frame.
const ETH_VLAN_HLEN: usize = 18;

const fn tpacket_align(x: usize) -> usize {
    (x + TPACKET_ALIGNMENT - 1) & !(TPACKET_ALIGNMENT - 1)
}

/// `struct tpacket_req` (TPACKET_V1/V2 rings).
#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

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

/// `struct tpacket2_hdr`.
#[repr(C)]
struct Tpacket2Hdr {
    status: u32,
    len: u32,
    snaplen: u32,
    mac: u16,
    net: u16,
    sec: u32,
    nsec: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    padding: [u8; 4],
}

/// `struct tpacket3_hdr` with its `hv1` variant.
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
    rxhash: u32,
    vlan_tci: u32,
    vlan_tpid: u16,
    hv1_padding: u16,
    padding: [u8; 8],
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

/// Which TPACKET ring format the port uses (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TpacketVersion {
    /// Per-frame slots, each handed over as soon as the kernel filled it.
    #[default]
    V2,
    /// Blocks handed over when full or when their retire timer expires.
    V3,
}

/// Ring geometry.
#[derive(Clone, Copy, Debug)]
pub struct RingConfig {
    /// The ring format, for RX and TX alike.
    pub version: TpacketVersion,
    /// RX block size (a multiple of the page size): V3 packs frames into
    /// each block; V2 cuts each into `rx_frame_size` slots.
    pub rx_block_size: u32,
    pub rx_blocks: u32,
    /// V3: how long a block that does not fill waits before the kernel
    /// hands it over, in ms (the kernel's minimum is 1).
    pub retire_ms: u32,
    /// V2: the size of an RX frame slot (a multiple of 16); 0 sizes it from
    /// the interface MTU. Frames that do not fit arrive truncated and are
    /// dropped.
    pub rx_frame_size: u32,
    pub tx_frame_size: u32,
    pub tx_frames: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            version: TpacketVersion::V2,
            rx_block_size: 1 << 20,
            rx_blocks: 16,
            retire_ms: 1,
            rx_frame_size: 0,
            tx_frame_size: 16384,
            tx_frames: 1024,
        }
    }
}

impl RingConfig {
    /// The default geometry in `version`'s format.
    pub fn with_version(version: TpacketVersion) -> RingConfig {
        RingConfig {
            version,
            ..RingConfig::default()
        }
    }
}

/// The V2 RX slot size for an interface MTU: the kernel puts the MAC
/// header at TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14 (packet_mmap.rst's
/// frame structure; no reserve), and the longest frame is the MTU plus an
/// Ethernet header and one VLAN tag — capped at what a batch slot holds.
pub fn v2_frame_size(mtu: usize) -> u32 {
    let longest = mtu.saturating_add(ETH_VLAN_HLEN).min(SLOT_LEN);
    tpacket_align(tpacket_align(TPACKET2_HDRLEN + 16) + longest).max(2048) as u32
}

/// Where a received frame's bytes lie in its slot: `(mac offset, length)`,
/// or `None` when it must be dropped — truncated by the kernel
/// (TP_STATUS_COPY, or fewer bytes captured than the frame had), reaching
/// past the `room` bytes of its slot, or longer than a batch slot once its
/// VLAN tag (`tag_len` bytes) is back in. Never panics.
fn frame_span(
    status: u32,
    mac: usize,
    snaplen: usize,
    len: usize,
    room: usize,
    tag_len: usize,
) -> Option<(usize, usize)> {
    if status & TP_STATUS_COPY != 0 || snaplen != len {
        return None;
    }
    let end = mac.checked_add(snaplen)?;
    if end > room || snaplen + tag_len > SLOT_LEN || (tag_len > 0 && snaplen < 12) {
        return None;
    }
    Some((mac, snaplen))
}

/// The VLAN tag the kernel took out of a frame (`tp_vlan_tci`, put back
/// at offset 12 with its TPID, 0x8100 when the kernel gave none).
fn vlan_tag(status: u32, tci: u16, tpid: u16) -> Option<[u8; 4]> {
    if status & TP_STATUS_VLAN_VALID == 0 {
        return None;
    }
    let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 && tpid != 0 {
        tpid
    } else {
        0x8100
    };
    let [t0, t1] = tpid.to_be_bytes();
    let [c0, c1] = tci.to_be_bytes();
    Some([t0, t1, c0, c1])
}

/// Copies `data` into the next slot of `batch`, with `tag` back after the
/// MAC addresses. `frame_span` checked the lengths.
/// One received frame (V2 slot or V3 block entry) into `batch`, counted:
/// `None` (it failed the ring's checks) or a full batch is a drop.
/// Returns whether it went in.
fn take(
    counters: &mut PortCounters,
    batch: &mut FrameBatch,
    data: Option<&[u8]>,
    tag: Option<[u8; 4]>,
) -> bool {
    match data {
        Some(d) if deliver(batch, d, tag) => {
            counters.rx_packets += 1;
            counters.rx_bytes += (d.len() + if tag.is_some() { 4 } else { 0 }) as u64;
            true
        }
        _ => {
            counters.rx_dropped += 1;
            false
        }
    }
}

fn deliver(batch: &mut FrameBatch, data: &[u8], tag: Option<[u8; 4]>) -> bool {
    let Some(tag) = tag else {
        return batch.push(data);
    };
    let n = data.len() + 4;
    match batch.next_slot() {
        Some(slot) if n <= slot.len() && data.len() >= 12 => {
            slot[..12].copy_from_slice(&data[..12]);
            slot[12..16].copy_from_slice(&tag);
            slot[16..n].copy_from_slice(&data[12..]);
            batch.commit(n);
            true
        }
        _ => false,
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

/// What `rx_backlog` has counted of the V2 ring: slots, their wire bytes,
/// and the same bytes by class.
#[derive(Default)]
struct Seen {
    n: u32,
    bytes: u64,
    classes: RxClasses,
}

impl Seen {
    fn add(&mut self, len: u64, (pcp, dscp): (Option<u8>, u8)) {
        self.n += 1;
        self.bytes += len;
        if let Some(p) = pcp {
            self.classes.pcp[p as usize & 7] += len;
        }
        self.classes.dscp[dscp as usize & 63] += len;
    }

    /// The first counted slot was handed to the user.
    fn take_first(&mut self, len: u64, (pcp, dscp): (Option<u8>, u8)) {
        if self.n == 0 {
            return;
        }
        self.n -= 1;
        if self.n == 0 {
            // nothing counted is left: start clean (no rounding to carry)
            *self = Seen::default();
            return;
        }
        self.bytes = self.bytes.saturating_sub(len);
        if let Some(p) = pcp {
            let v = &mut self.classes.pcp[p as usize & 7];
            *v = v.saturating_sub(len);
        }
        let v = &mut self.classes.dscp[dscp as usize & 63];
        *v = v.saturating_sub(len);
    }
}

/// One V2 slot the kernel handed over (TP_STATUS_USER).
struct V2Frame<'a> {
    hdr: *mut Tpacket2Hdr,
    /// Wire length as the kernel holds it (without a tag it took out).
    len: usize,
    /// The frame's bytes, `None` when it failed the ring's checks.
    data: Option<&'a [u8]>,
    /// The VLAN tag the kernel took out.
    tag: Option<[u8; 4]>,
}

impl V2Frame<'_> {
    /// The class PFC counts this frame under: the PCP of the tag the
    /// kernel took out (or of one left in the frame) and the IP DSCP.
    fn class(&self) -> (Option<u8>, u8) {
        let (pcp, dscp) = self.data.map_or((None, 0), RxClasses::classify);
        (self.tag.map(|t| t[2] >> 5).or(pcp), dscp)
    }
}

/// Where the port reads its RX ring.
enum RxRing {
    V2 {
        frame_size: usize,
        frames_per_block: u32,
        frames: u32,
        /// The next slot to read.
        next: u32,
        /// Slots from `next` on already seen as TP_STATUS_USER by
        /// `rx_backlog` (they stay the user's until `recv` hands them back).
        seen: Box<RefCell<Seen>>,
    },
    V3 {
        block: u32,
        /// Position inside the current block: (packets left, offset).
        cursor: Option<(u32, usize)>,
    },
}

/// A port on a real interface through an AF_PACKET socket.
pub struct AfPacketPort {
    fd: OwnedFd,
    ring: *mut u8,
    ring_len: usize,
    cfg: RingConfig,
    rx: RxRing,
    tx_next: u32,
    /// The TX ring holds frames the kernel has not taken yet: its last
    /// kick failed (socket send buffer full, device busy) or the ring was
    /// found full. The kernel takes ring frames only when kicked, so every
    /// `send` and `recv` kicks again until one succeeds.
    tx_kick_owed: bool,
    mac: EthernetAddress,
    mtu: usize,
    speed: u64,
    counters: PortCounters,
    /// Frames the kernel dropped on a full RX ring, read so far.
    kernel_drops: Cell<u64>,
    _udp_guard: Option<UdpSocket>,
    pub name: String,
}

// SAFETY: the ring mapping is owned by this port and only touched through
// &mut self (and `rx_backlog`'s reads of status words through &self).
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

/// A zeroed `ifreq` naming `name`; None if the name cannot be one (a NUL,
/// or IFNAMSIZ bytes or more).
fn ifreq(name: &str) -> Option<libc::ifreq> {
    let c = CString::new(name).ok()?;
    if c.as_bytes().len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: a zeroed ifreq is a valid (empty) one.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(c.as_bytes()) {
        *d = *s as libc::c_char;
    }
    Some(ifr)
}

/// Whether interface `name` (in `fd`'s network namespace) is up with
/// carrier: SIOCGIFFLAGS has IFF_UP (administratively up) and IFF_RUNNING
/// (the kernel's operational state: carrier present). None when the ioctl
/// fails (the interface went away: the caller reports that as it sees fit).
pub(super) fn link_flags_up(fd: libc::c_int, name: &str) -> Option<bool> {
    let mut ifr = ifreq(name)?;
    // SAFETY: an ioctl that fills ifr.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut ifr) } != 0 {
        return None;
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags } as libc::c_int;
    Some(flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0)
}

/// Interface facts from the kernel through `fd`'s network namespace:
/// (ifindex, MAC, MTU). (sysfs would show the mount's namespace instead.)
pub(super) fn interface(
    fd: libc::c_int,
    name: &str,
) -> Result<(i32, EthernetAddress, usize), AfPacketError> {
    let mut ifr = ifreq(name).ok_or_else(|| AfPacketError::NoInterface(name.into()))?;
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
    /// Sets the link speed pause quanta and pacing are computed at
    /// (default 10 Gb/s, what veth reports).
    pub fn set_link_speed(&mut self, bps: u64) {
        self.speed = bps;
    }

    /// The ring format this port uses.
    pub fn version(&self) -> TpacketVersion {
        self.cfg.version
    }

    /// Opens a port on `ifname` in the calling thread's network namespace.
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
        let version = match cfg.version {
            TpacketVersion::V2 => TPACKET_V2,
            TpacketVersion::V3 => TPACKET_V3,
        };
        setsockopt(raw, PACKET_VERSION, &version, "PACKET_VERSION")?;
        let one: libc::c_int = 1;
        // A TX frame the kernel cannot send (too long for the device, bad
        // header) is skipped and its slot freed; without this the kernel
        // stops at it, marked TP_STATUS_WRONG_FORMAT, and sends nothing
        // behind it until that slot is written again. Before the rings.
        setsockopt(raw, PACKET_LOSS, &one, "PACKET_LOSS")?;
        // Best effort: older kernels lack these.
        let _ = setsockopt(raw, PACKET_QDISC_BYPASS, &one, "PACKET_QDISC_BYPASS");
        let _ = setsockopt(raw, PACKET_IGNORE_OUTGOING, &one, "PACKET_IGNORE_OUTGOING");
        let tx_block = cfg.tx_frame_size * 4;
        let rx = match cfg.version {
            TpacketVersion::V2 => {
                let frame_size = if cfg.rx_frame_size == 0 {
                    v2_frame_size(mtu)
                } else {
                    cfg.rx_frame_size
                };
                let per_block = cfg.rx_block_size / frame_size.max(1);
                let req = TpacketReq {
                    block_size: cfg.rx_block_size,
                    block_nr: cfg.rx_blocks,
                    frame_size,
                    frame_nr: per_block.saturating_mul(cfg.rx_blocks),
                };
                setsockopt(raw, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
                let tx = TpacketReq {
                    block_size: tx_block,
                    block_nr: cfg.tx_frames / 4,
                    frame_size: cfg.tx_frame_size,
                    frame_nr: cfg.tx_frames / 4 * 4,
                };
                setsockopt(raw, PACKET_TX_RING, &tx, "PACKET_TX_RING")?;
                RxRing::V2 {
                    frame_size: frame_size as usize,
                    frames_per_block: per_block,
                    frames: req.frame_nr,
                    next: 0,
                    seen: Box::new(RefCell::new(Seen::default())),
                }
            }
            TpacketVersion::V3 => {
                let req = TpacketReq3 {
                    block_size: cfg.rx_block_size,
                    block_nr: cfg.rx_blocks,
                    frame_size: 2048,
                    frame_nr: cfg.rx_block_size / 2048 * cfg.rx_blocks,
                    retire_blk_tov: cfg.retire_ms,
                    sizeof_priv: 0,
                    feature_req_word: 0,
                };
                setsockopt(raw, PACKET_RX_RING, &req, "PACKET_RX_RING")?;
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
                RxRing::V3 {
                    block: 0,
                    cursor: None,
                }
            }
        };
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
            let e = sys("bind(AF_PACKET)");
            // SAFETY: unmapping what we mapped.
            unsafe { libc::munmap(ring, ring_len) };
            return Err(e);
        }
        let guard = UdpSocket::bind(("0.0.0.0", wire::ROCEV2_PORT)).ok();
        Ok(AfPacketPort {
            fd,
            ring: ring as *mut u8,
            ring_len,
            cfg,
            rx,
            tx_next: 0,
            tx_kick_owed: false,
            mac,
            mtu,
            speed: 10_000_000_000,
            counters: PortCounters::default(),
            kernel_drops: Cell::new(0),
            _udp_guard: guard,
            name: ifname.into(),
        })
    }

    fn block(&self, i: u32) -> *mut u8 {
        // SAFETY: i < rx_blocks, inside the mapping.
        unsafe { self.ring.add(i as usize * self.cfg.rx_block_size as usize) }
    }

    /// V2: the `i`th RX slot (slots do not cross blocks).
    fn v2_slot(&self, i: u32, frame_size: usize, per_block: u32) -> *mut u8 {
        // SAFETY: i < frames = per_block * rx_blocks: inside the RX ring.
        unsafe {
            self.block(i / per_block)
                .add((i % per_block) as usize * frame_size)
        }
    }

    fn tx_frame(&self, i: u32) -> *mut u8 {
        let rx_len = (self.cfg.rx_block_size * self.cfg.rx_blocks) as usize;
        // SAFETY: i < tx frames, inside the mapping.
        unsafe {
            self.ring
                .add(rx_len + i as usize * self.cfg.tx_frame_size as usize)
        }
    }

    fn tx_frames(&self) -> u32 {
        self.cfg.tx_frames / 4 * 4
    }

    /// Frames the kernel dropped because the RX ring was full, since the
    /// last call (PACKET_STATISTICS reads and resets its count).
    fn read_kernel_drops(&self) -> u64 {
        // struct tpacket_stats_v3 (V2's tpacket_stats is its prefix)
        let mut st = [0u32; 3];
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: st is a writable buffer of len bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                st.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            st[1] as u64
        } else {
            0
        }
    }

    /// Slot `i` if the kernel has handed it over (TP_STATUS_USER).
    fn v2_frame<'a>(&self, i: u32, frame_size: usize, per_block: u32) -> Option<V2Frame<'a>> {
        let slot = self.v2_slot(i, frame_size, per_block);
        let hdr = slot as *mut Tpacket2Hdr;
        // SAFETY: hdr is the slot's header inside the ring.
        let status = unsafe { read_volatile(addr_of!((*hdr).status)) };
        if status & TP_STATUS_USER == 0 {
            return None;
        }
        fence(Ordering::Acquire);
        // SAFETY: a USER slot is ours (its header and bytes stay as they
        // are) until `recv` hands it back.
        let (len, snaplen, mac, tci, tpid) = unsafe {
            (
                (*hdr).len as usize,
                (*hdr).snaplen as usize,
                (*hdr).mac as usize,
                (*hdr).vlan_tci,
                (*hdr).vlan_tpid,
            )
        };
        let tag = vlan_tag(status, tci, tpid);
        let tag_len = if tag.is_some() { 4 } else { 0 };
        let data = frame_span(status, mac, snaplen, len, frame_size, tag_len)
            // SAFETY: frame_span kept [off, off + l) inside the slot.
            .map(|(off, l)| unsafe { std::slice::from_raw_parts(slot.add(off) as *const u8, l) });
        Some(V2Frame {
            hdr,
            len,
            data,
            tag,
        })
    }

    fn recv_v2(&mut self, batch: &mut FrameBatch) -> usize {
        let RxRing::V2 {
            frame_size,
            frames_per_block,
            frames,
            next,
            ref seen,
        } = self.rx
        else {
            return 0;
        };
        let mut i = next;
        let mut n = 0;
        while !batch.is_full() {
            let Some(f) = self.v2_frame(i, frame_size, frames_per_block) else {
                break;
            };
            n += take(&mut self.counters, batch, f.data, f.tag) as usize;
            let mut seen = seen.borrow_mut();
            // counted only when someone asks for the backlog (PFC on)
            if seen.n > 0 {
                seen.take_first(f.len as u64, f.class());
            }
            fence(Ordering::Release);
            // SAFETY: handing the slot back to the kernel.
            unsafe { write_volatile(addr_of_mut!((*f.hdr).status), TP_STATUS_KERNEL) };
            i = (i + 1) % frames;
        }
        if let RxRing::V2 { next, .. } = &mut self.rx {
            *next = i;
        }
        n
    }

    fn recv_v3(&mut self, batch: &mut FrameBatch) -> usize {
        let RxRing::V3 {
            mut block,
            mut cursor,
        } = self.rx
        else {
            return 0;
        };
        let block_size = self.cfg.rx_block_size as usize;
        let hdr_len = std::mem::size_of::<Tpacket3Hdr>();
        let mut n = 0;
        while !batch.is_full() {
            let base = self.block(block);
            let bd = base as *mut BlockDesc;
            let (left, off) = match cursor {
                Some(c) => c,
                None => {
                    // SAFETY: bd points at a block descriptor in the ring.
                    let status = unsafe { read_volatile(addr_of!((*bd).block_status)) };
                    if status & TP_STATUS_USER == 0 {
                        break;
                    }
                    fence(Ordering::Acquire);
                    // SAFETY: the block is ours until we hand it back.
                    unsafe { ((*bd).num_pkts, (*bd).offset_to_first_pkt as usize) }
                }
            };
            // a frame header that would leave the block ends it
            if left == 0 || off > block_size.saturating_sub(hdr_len) {
                fence(Ordering::Release);
                // SAFETY: handing the block back to the kernel.
                unsafe { write_volatile(addr_of_mut!((*bd).block_status), TP_STATUS_KERNEL) };
                cursor = None;
                block = (block + 1) % self.cfg.rx_blocks;
                continue;
            }
            // SAFETY: off + hdr_len <= block_size: a tpacket3_hdr inside this block.
            let hdr = unsafe { &*(base.add(off) as *const Tpacket3Hdr) };
            let tag = vlan_tag(hdr.status, hdr.vlan_tci as u16, hdr.vlan_tpid);
            let tag_len = if tag.is_some() { 4 } else { 0 };
            let room = block_size - off;
            match frame_span(
                hdr.status,
                hdr.mac as usize,
                hdr.snaplen as usize,
                hdr.len as usize,
                room,
                tag_len,
            ) {
                Some((m, l)) => {
                    // SAFETY: frame_span kept the bytes inside the block.
                    let data = unsafe { std::slice::from_raw_parts(base.add(off + m), l) };
                    n += take(&mut self.counters, batch, Some(data), tag) as usize;
                }
                None => {
                    take(&mut self.counters, batch, None, tag);
                }
            }
            let next = hdr.next_offset as usize;
            cursor = Some(if next == 0 {
                (0, off)
            } else {
                (left - 1, off.saturating_add(next))
            });
        }
        self.rx = RxRing::V3 { block, cursor };
        n
    }
}

impl Drop for AfPacketPort {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and no longer used.
        unsafe { libc::munmap(self.ring as *mut libc::c_void, self.ring_len) };
    }
}

impl AfPacketPort {
    /// sendto(2) with no data: the kernel takes the TX ring's pending
    /// frames in order until one fails (send buffer full, device busy). If
    /// the frame queued last is still pending afterwards, the kick is owed.
    fn kick(&mut self) {
        if let Err(e) = super::kick_tx(self.fd.as_raw_fd()) {
            if e.kind() != io::ErrorKind::WouldBlock && e.raw_os_error() != Some(libc::ENOBUFS) {
                self.counters.tx_dropped += 1;
            }
        }
        let n = self.tx_frames();
        let last = self.tx_frame((self.tx_next + n - 1) % n) as *const u32;
        // SAFETY: tp_status, the first field of both versions' TX frame
        // headers, of a frame inside the ring.
        let status = unsafe { read_volatile(last) };
        self.tx_kick_owed = status & TP_STATUS_SEND_REQUEST != 0;
    }
}

impl Port for AfPacketPort {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        if self.tx_kick_owed {
            self.kick();
        }
        match self.rx {
            RxRing::V2 { .. } => self.recv_v2(batch),
            RxRing::V3 { .. } => self.recv_v3(batch),
        }
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        let v2 = self.cfg.version == TpacketVersion::V2;
        let data_off = if v2 {
            TX_DATA_OFFSET_V2
        } else {
            TX_DATA_OFFSET_V3
        };
        let mut queued = 0;
        for (i, f) in batch.iter().enumerate() {
            let slot = self.tx_frame(self.tx_next);
            // the version's header fields: tp_status, tp_len, tp_snaplen
            let (status_p, len_p, snaplen_p) = if v2 {
                let h = slot as *mut Tpacket2Hdr;
                // SAFETY: field addresses of a header inside the ring.
                unsafe {
                    (
                        addr_of_mut!((*h).status),
                        addr_of_mut!((*h).len),
                        addr_of_mut!((*h).snaplen),
                    )
                }
            } else {
                let h = slot as *mut Tpacket3Hdr;
                // SAFETY: as above.
                unsafe {
                    (
                        addr_of_mut!((*h).status),
                        addr_of_mut!((*h).len),
                        addr_of_mut!((*h).snaplen),
                    )
                }
            };
            // SAFETY: slot is a TX frame in the ring.
            let status = unsafe { read_volatile(status_p) };
            let full = status & (TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING) != 0;
            // the longest frame the kernel sends: the MTU, the Ethernet
            // header and one VLAN tag
            let too_long = f.len() > self.mtu + 18;
            if full || too_long || f.len() + data_off > self.cfg.tx_frame_size as usize {
                // sends a prefix of the batch (see `Port::send`)
                self.counters.tx_dropped += (batch.len() - i) as u64;
                // a ring full of frames the kernel was never kicked for
                // would stay full for good
                self.tx_kick_owed |= full;
                break;
            }
            if status & TP_STATUS_WRONG_FORMAT != 0 {
                self.counters.tx_dropped += 1;
            }
            fence(Ordering::Acquire);
            // SAFETY: the frame slot is ours while its status is AVAILABLE.
            unsafe {
                std::ptr::copy_nonoverlapping(f.as_ptr(), slot.add(data_off), f.len());
                write_volatile(len_p, f.len() as u32);
                write_volatile(snaplen_p, f.len() as u32);
            }
            fence(Ordering::Release);
            // SAFETY: publishing the frame to the kernel.
            unsafe { write_volatile(status_p, TP_STATUS_SEND_REQUEST) };
            self.tx_next = (self.tx_next + 1) % self.tx_frames();
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += f.len() as u64;
            queued += 1;
        }
        if queued > 0 || self.tx_kick_owed {
            self.kick();
        }
        queued
    }

    /// SIOCGIFFLAGS on the port's own socket (same namespace as the
    /// interface); an interface that vanished counts as down.
    fn link_up(&self) -> Option<bool> {
        Some(link_flags_up(self.fd.as_raw_fd(), &self.name).unwrap_or(false))
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

    /// The port's counts; `rx_dropped` includes the frames the kernel
    /// dropped on a full RX ring.
    fn counters(&self) -> PortCounters {
        let k = self.kernel_drops.get() + self.read_kernel_drops();
        self.kernel_drops.set(k);
        let mut c = self.counters.clone();
        c.rx_dropped += k;
        c
    }

    /// poll(2) on the socket: readable once a frame (V2) or a block (V3)
    /// is handed over.
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

    /// V2: the slots the kernel has filled and `recv` has not read, and
    /// their frames' bytes (wire lengths). V3: `None` (see the module docs).
    fn rx_backlog(&self) -> Option<RxBacklog> {
        let RxRing::V2 {
            frame_size,
            frames_per_block,
            frames,
            next,
            ref seen,
        } = self.rx
        else {
            return None;
        };
        let mut seen = seen.borrow_mut();
        while seen.n < frames {
            let i = ((next as u64 + seen.n as u64) % frames as u64) as u32;
            let Some(f) = self.v2_frame(i, frame_size, frames_per_block) else {
                break;
            };
            seen.add(f.len as u64, f.class());
        }
        Some(RxBacklog {
            frames: seen.n as u64,
            bytes: seen.bytes,
            classes: Some(seen.classes.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layouts_match_the_uapi() {
        assert_eq!(std::mem::size_of::<Tpacket2Hdr>(), 32);
        assert_eq!(std::mem::size_of::<Tpacket3Hdr>(), 48);
        assert_eq!(std::mem::size_of::<TpacketReq>(), 16);
        assert_eq!(std::mem::size_of::<TpacketReq3>(), 28);
        assert_eq!(
            tpacket_align(std::mem::size_of::<Tpacket2Hdr>()),
            TX_DATA_OFFSET_V2
        );
        assert_eq!(
            tpacket_align(std::mem::size_of::<Tpacket3Hdr>()),
            TX_DATA_OFFSET_V3
        );
    }

    #[test]
    fn v2_slots_hold_the_longest_frame_of_the_mtu() {
        for mtu in [1500usize, 4200, 9000, 65535] {
            let f = v2_frame_size(mtu) as usize;
            assert_eq!(f % TPACKET_ALIGNMENT, 0);
            let mac = tpacket_align(TPACKET2_HDRLEN + 16) - 14;
            let longest = (mtu + ETH_VLAN_HLEN).min(SLOT_LEN);
            assert!(mac + longest <= f, "mtu {mtu}: slot {f}");
            assert!(f <= (1 << 20) / 100, "mtu {mtu}: slot {f}");
        }
        assert_eq!(v2_frame_size(1500), 2048);
    }

    #[test]
    fn truncated_or_oversized_frames_are_refused() {
        // whole, inside the slot
        assert_eq!(
            frame_span(TP_STATUS_USER, 66, 1000, 1000, 2048, 0),
            Some((66, 1000))
        );
        // the kernel captured fewer bytes than the frame had (snaplen)
        assert_eq!(frame_span(TP_STATUS_USER, 66, 1982, 4000, 2048, 0), None);
        // the kernel marks a copy (the rest went to the socket queue)
        assert_eq!(
            frame_span(TP_STATUS_USER | TP_STATUS_COPY, 66, 100, 100, 2048, 0),
            None
        );
        // offsets that leave the slot, or overflow
        assert_eq!(frame_span(TP_STATUS_USER, 2000, 100, 100, 2048, 0), None);
        assert_eq!(
            frame_span(TP_STATUS_USER, usize::MAX, 100, 100, 2048, 0),
            None
        );
        // longer than a batch slot, with or without the tag put back
        assert_eq!(
            frame_span(TP_STATUS_USER, 66, SLOT_LEN + 1, SLOT_LEN + 1, 1 << 20, 0),
            None
        );
        assert_eq!(
            frame_span(TP_STATUS_USER, 66, SLOT_LEN, SLOT_LEN, 1 << 20, 4),
            None
        );
        assert!(frame_span(TP_STATUS_USER, 66, SLOT_LEN, SLOT_LEN, 1 << 20, 0).is_some());
        // a tag cannot go back into a frame without MAC addresses
        assert_eq!(frame_span(TP_STATUS_USER, 66, 10, 10, 2048, 4), None);
    }

    #[test]
    fn a_stripped_vlan_tag_goes_back_after_the_mac_addresses() {
        assert_eq!(vlan_tag(TP_STATUS_USER, 5, 0), None);
        let tag = vlan_tag(TP_STATUS_USER | TP_STATUS_VLAN_VALID, 0x6005, 0).unwrap();
        assert_eq!(tag, [0x81, 0x00, 0x60, 0x05]);
        let st = TP_STATUS_USER | TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID;
        assert_eq!(vlan_tag(st, 7, 0x88a8).unwrap(), [0x88, 0xa8, 0, 7]);
        let frame: Vec<u8> = (0..60u8).collect();
        let mut b = FrameBatch::new(2);
        assert!(deliver(&mut b, &frame, Some(tag)));
        let got = b.get(0);
        assert_eq!(got.len(), 64);
        assert_eq!(&got[..12], &frame[..12]);
        assert_eq!(&got[12..16], &tag);
        assert_eq!(&got[16..], &frame[12..]);
        assert!(deliver(&mut b, &frame, None));
        assert_eq!(b.get(1), &frame[..]);
        assert!(!deliver(&mut b, &frame, None), "full");
    }
}
