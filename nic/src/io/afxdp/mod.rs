//! AF_XDP sockets (Documentation/networking/af_xdp.rst): a UMEM of 4 KiB
//! frames shared with the kernel, its fill and completion rings, an RX and
//! a TX ring, and an XDP program (`nic/bpf/xdp_roce.c`) that redirects
//! only RoCEv2 (UDP 4791) and MAC control (PAUSE/PFC) frames to the socket
//! — ARP, ICMP and the out-of-band TCP still reach the kernel.
//!
//! Opening tries, in order: native (driver) XDP with zero-copy, native
//! with copy, generic (SKB) XDP with copy — the first that binds wins
//! ([`AfXdpPort::binding`] says which). veth binds in copy mode only.
//! Frames longer than one frame buffer (4096 − 256 bytes of XDP headroom:
//! a 9000-byte MTU carrying IB MTU 4096) need multi-buffer: the
//! `xdp.frags` program and the `XDP_USE_SG` bind flag (Linux ≥ 6.6); such
//! a frame arrives as several descriptors, all but the last flagged
//! `XDP_PKT_CONTD`, and is reassembled into one batch slot; sending
//! splits it likewise.
//!
//! UMEM frames `[0, rx_frames)` belong to receive: all start in the fill
//! ring and each goes back as soon as its bytes are copied out, so the
//! fill ring never runs dry. Frames `[rx_frames, rx_frames + tx_frames)`
//! belong to transmit and return through the completion ring. TX is kicked
//! with `sendto` (in copy mode each call sends at most 32 descriptors, so
//! the kick repeats while the ring holds work).
//!
//! The program is attached through a BPF link: dropping the port (or the
//! process dying) detaches it. [`super::open_port`] picks a backend and falls back
//! to AF_PACKET, saying why on one line of stderr.
//!
//! This module opens the port and moves frames; `xsk` holds the socket
//! and its UMEM, `ring` the four rings, `bpf` the program's loader, and
//! [`super::iface`] the interface's index, MAC, MTU and link state.

pub mod bpf;
mod ring;
mod xsk;

use super::iface::{IfaceError, Interface};
use super::{FrameBatch, Port, PortBase, PortCounters, RxBacklog, RxClasses, SLOT_LEN};
use ring::XdpDesc;
use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;
pub use xsk::XdpStatistics;
use xsk::{Umem, Xsk};

/// Bytes of one UMEM frame (the largest aligned chunk the kernel takes).
pub const FRAME_SIZE: u32 = 4096;
/// Headroom the kernel keeps in front of received data (XDP_PACKET_HEADROOM).
const XDP_PACKET_HEADROOM: u32 = 256;
/// Ethernet header, one VLAN tag and the FCS-less trailer room a frame adds to the MTU.
const L2_OVERHEAD: usize = 18;
/// At most this many descriptors make one frame (MAX_SKB_FRAGS + 1 in copy mode).
const MAX_DESCS_PER_FRAME: usize = 17;

/// `xdp_desc.options`: more descriptors of this frame follow.
const XDP_PKT_CONTD: u32 = 1;

/// Where the XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (XDP_FLAGS_DRV_MODE); may allow zero-copy.
    Native,
    /// On the skb after the driver (XDP_FLAGS_SKB_MODE); works everywhere, copies.
    Generic,
}

impl AttachMode {
    fn flags(self) -> u32 {
        match self {
            AttachMode::Native => bpf::XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => bpf::XDP_FLAGS_SKB_MODE,
        }
    }
}

/// UMEM and ring geometry, queue and modes.
#[derive(Clone, Copy, Debug)]
pub struct AfXdpConfig {
    /// The receive queue to bind (the XDP program passes other queues' frames to the kernel).
    pub queue: u32,
    /// Receive frames: also the fill and RX ring sizes (a power of two).
    pub rx_frames: u32,
    /// Transmit frames: also the TX and completion ring sizes (a power of two).
    pub tx_frames: u32,
    /// None: native, then generic.
    pub mode: Option<AttachMode>,
    /// Try zero-copy before copy mode (native XDP only).
    pub zero_copy: bool,
}

impl Default for AfXdpConfig {
    fn default() -> Self {
        AfXdpConfig {
            queue: 0,
            rx_frames: 4096,
            tx_frames: 2048,
            mode: None,
            zero_copy: true,
        }
    }
}

/// How the socket ended up bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub attach: AttachMode,
    pub zero_copy: bool,
    /// `xdp.frags` program and XDP_USE_SG: frames may span descriptors.
    pub multi_buffer: bool,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attach = match self.attach {
            AttachMode::Native => "native (driver) XDP",
            AttachMode::Generic => "generic (SKB) XDP",
        };
        let copy = if self.zero_copy {
            "zero-copy"
        } else {
            "copy mode"
        };
        let mb = if self.multi_buffer {
            "multi-buffer (xdp.frags, XDP_USE_SG)"
        } else {
            "single-buffer"
        };
        write!(f, "{attach}, {copy}, {mb}")
    }
}

/// One way of binding that did not work, and why.
#[derive(Debug)]
pub struct Attempt {
    pub attach: AttachMode,
    pub zero_copy: bool,
    pub multi_buffer: bool,
    pub step: &'static str,
    pub error: io::Error,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = Binding {
            attach: self.attach,
            zero_copy: self.zero_copy,
            multi_buffer: self.multi_buffer,
        };
        write!(f, "[{b}] {}: {}", self.step, self.error)
    }
}

/// Why the port could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AfXdpError {
    #[error("AF_XDP unavailable: the XDP program was not built: {0}")]
    NotBuilt(&'static str),
    #[error("AF_XDP unavailable: this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): {0}")]
    NoKernelSupport(io::Error),
    #[error(transparent)]
    Interface(#[from] IfaceError),
    #[error("bad configuration: {0}")]
    Config(&'static str),
    #[error("the embedded XDP object: {0}")]
    Object(#[from] bpf::ObjectError),
    #[error("{what}: {source}{}", if source.raw_os_error() == Some(libc::EPERM) { " (AF_XDP needs CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW, e.g. root)" } else { "" })]
    Sys {
        what: &'static str,
        source: io::Error,
    },
    #[error("no way of binding {ifname} worked: {}", tried.iter().map(|a| a.to_string()).collect::<Vec<_>>().join("; "))]
    NoBinding { ifname: String, tried: Vec<Attempt> },
}

impl AfXdpError {
    /// Whether this machine or build lacks AF_XDP altogether (rather than
    /// the port failing on this interface).
    pub fn is_unavailable(&self) -> bool {
        match self {
            AfXdpError::NotBuilt(_) | AfXdpError::NoKernelSupport(_) => true,
            AfXdpError::Sys { source, .. } => source.raw_os_error() == Some(libc::EPERM),
            _ => false,
        }
    }
}

/// A port on one receive queue of a real interface through an AF_XDP socket.
pub struct AfXdpPort {
    // Fields drop in this order: the link first (detaches the program, so
    // nothing is redirected to a closing socket), then the socket and its
    // rings, the program, the map, and last the UMEM they all point into.
    _link: OwnedFd,
    xsk: Xsk,
    _prog: OwnedFd,
    _map: OwnedFd,
    umem: Umem,
    rx_frames: u32,
    /// Transmit frames not in the kernel's hands.
    tx_free: Vec<u64>,
    binding: Binding,
    base: PortBase,
    /// The interface, asked through an AF_INET socket (AF_XDP sockets
    /// take no interface ioctls).
    iface: Interface,
}

// SAFETY: the raw pointers inside `xsk` and `umem` point into mappings
// that the port owns and that move with it; they are dereferenced only
// through &mut self (and &self reads of ring indices), and the port is not
// Sync, so no two threads use it at once.
unsafe impl Send for AfXdpPort {}

/// A socket bound on an interface with the XDP program attached, as one
/// attempt of [`AfXdpPort::open`] got it.
struct Bound {
    prog: OwnedFd,
    link: OwnedFd,
    xsk: Xsk,
    binding: Binding,
}

/// The checks before any attempt: the ring sizes, the XDP program built
/// in, and the kernel's AF_XDP support.
fn preflight(cfg: &AfXdpConfig) -> Result<(), AfXdpError> {
    if !cfg.rx_frames.is_power_of_two()
        || !cfg.tx_frames.is_power_of_two()
        || cfg.rx_frames < 64
        || cfg.tx_frames < 64
    {
        return Err(AfXdpError::Config(
            "rx_frames and tx_frames must be powers of two, at least 64",
        ));
    }
    if bpf::OBJECT.is_empty() {
        return Err(AfXdpError::NotBuilt(bpf::BUILD_STATUS));
    }
    match xsk::xdp_socket() {
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
            Err(AfXdpError::NoKernelSupport(e))
        }
        Err(e) => Err(AfXdpError::Sys {
            what: "socket(AF_XDP)",
            source: e,
        }),
        Ok(_) => Ok(()),
    }
}

/// One attempt: loads the XDP program (the multi-buffer one or not),
/// attaches it in `attach` mode, and binds the socket, zero-copy first
/// where it may be. Each step that fails goes to `tried`; `None` when
/// none bound.
fn attach_and_bind(
    ifindex: i32,
    map: &OwnedFd,
    umem: &Umem,
    cfg: &AfXdpConfig,
    (attach, multi_buffer): (AttachMode, bool),
    tried: &mut Vec<Attempt>,
) -> Result<Option<Bound>, AfXdpError> {
    let mut fail = |zero_copy, step, error| {
        tried.push(Attempt {
            attach,
            zero_copy,
            multi_buffer,
            step,
            error,
        })
    };
    let section = if multi_buffer {
        bpf::SECTION_FRAGS
    } else {
        bpf::SECTION
    };
    let prog = bpf::extract(bpf::OBJECT, section)?;
    let prog = match bpf::load(&prog, map) {
        Ok(p) => p,
        Err(e) => {
            let why = e.to_string();
            fail(false, "BPF_PROG_LOAD", io::Error::new(e.source.kind(), why));
            return Ok(None);
        }
    };
    let link = match bpf::attach(&prog, ifindex, attach.flags()) {
        Ok(l) => l,
        Err(e) => {
            fail(false, "BPF_LINK_CREATE (attach)", e);
            return Ok(None);
        }
    };
    let try_zc = cfg.zero_copy && attach == AttachMode::Native;
    for zero_copy in [true, false] {
        if zero_copy && !try_zc {
            continue;
        }
        let xsk = match Xsk::bind(umem, cfg, ifindex, zero_copy, multi_buffer) {
            Ok(x) => x,
            Err((step, e)) => {
                fail(zero_copy, step, e);
                continue;
            }
        };
        bpf::map_update(map, cfg.queue, xsk.raw_fd() as u32).map_err(|source| AfXdpError::Sys {
            what: "bpf(BPF_MAP_UPDATE_ELEM xskmap)",
            source,
        })?;
        let binding = Binding {
            attach,
            zero_copy,
            multi_buffer,
        };
        return Ok(Some(Bound {
            prog,
            link,
            xsk,
            binding,
        }));
    }
    Ok(None)
}

impl AfXdpPort {
    /// Opens a port on `ifname` (in the calling thread's network
    /// namespace), attaching the XDP program in the first mode that binds.
    pub fn open(ifname: &str, cfg: AfXdpConfig) -> Result<AfXdpPort, AfXdpError> {
        preflight(&cfg)?;
        let iface = Interface::open(ifname)?;
        let map = bpf::create_xskmap(cfg.queue + 1).map_err(|source| AfXdpError::Sys {
            what: "bpf(BPF_MAP_CREATE xskmap)",
            source,
        })?;
        let umem = Umem::new(cfg.rx_frames + cfg.tx_frames).map_err(|source| AfXdpError::Sys {
            what: "mmap(UMEM)",
            source,
        })?;
        let fits_one_frame = iface.mtu + L2_OVERHEAD <= (FRAME_SIZE - XDP_PACKET_HEADROOM) as usize;
        let variants: &[bool] = if fits_one_frame {
            &[false, true]
        } else {
            &[true]
        };
        let modes: &[AttachMode] = match cfg.mode {
            Some(AttachMode::Native) => &[AttachMode::Native],
            Some(AttachMode::Generic) => &[AttachMode::Generic],
            None => &[AttachMode::Native, AttachMode::Generic],
        };
        let mut tried = Vec::new();
        for &attach in modes {
            for &multi_buffer in variants {
                let way = (attach, multi_buffer);
                let Some(b) = attach_and_bind(iface.index, &map, &umem, &cfg, way, &mut tried)?
                else {
                    continue;
                };
                let tx_free = (cfg.rx_frames..cfg.rx_frames + cfg.tx_frames)
                    .rev()
                    .map(|i| i as u64 * FRAME_SIZE as u64)
                    .collect();
                return Ok(AfXdpPort {
                    _link: b.link,
                    xsk: b.xsk,
                    _prog: b.prog,
                    _map: map,
                    umem,
                    rx_frames: cfg.rx_frames,
                    tx_free,
                    binding: b.binding,
                    base: PortBase::of(&iface),
                    iface,
                });
            }
        }
        Err(AfXdpError::NoBinding {
            ifname: ifname.into(),
            tried,
        })
    }

    /// How the socket is bound (native/generic, zero-copy/copy, multi-buffer).
    pub fn binding(&self) -> Binding {
        self.binding
    }

    /// The link speed pause quanta and pacing are computed at (default
    /// [`super::base::IFACE_SPEED_BPS`]).
    pub fn set_link_speed(&mut self, bps: u64) {
        self.base.speed = bps;
    }

    /// The kernel's drop counters for this socket (XDP_STATISTICS).
    pub fn statistics(&self) -> Option<XdpStatistics> {
        self.xsk.statistics()
    }

    /// Returns finished transmit frames to the free list.
    fn reclaim(&mut self) {
        let n = self.xsk.comp.available();
        let tx_base = self.rx_frames as u64 * FRAME_SIZE as u64;
        for i in 0..n {
            let addr = self.xsk.comp.read(i) & !(FRAME_SIZE as u64 - 1);
            if addr >= tx_base && (addr as usize) < self.umem.len {
                self.tx_free.push(addr);
            }
        }
        self.xsk.comp.release(n);
    }

    /// Before a wait: takes back finished transmit frames and sends what
    /// the TX ring holds; true when a received frame already waits.
    fn ready(&mut self) -> bool {
        self.reclaim();
        self.kick_tx();
        self.xsk.rx.available() > 0
    }

    /// Makes the kernel send what the TX ring holds. Copy mode sends at
    /// most 32 descriptors per call and answers EAGAIN while more remain.
    fn kick_tx(&mut self) {
        let mut kicks = self.xsk.tx.outstanding() / 32 + 2;
        while kicks > 0 && self.xsk.tx.outstanding() > 0 {
            kicks -= 1;
            if self.binding.zero_copy && !self.xsk.tx.needs_wakeup() {
                return;
            }
            if let Err(e) = self.xsk.kick_tx() {
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) => continue,
                    _ => return,
                }
            }
        }
    }
}

impl Port for AfXdpPort {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        if self.xsk.tx.outstanding() > 0 {
            self.kick_tx();
        }
        let avail = self.xsk.rx.available();
        // every frame we hold came out of the fill ring, so it has room for them all
        let room = self.xsk.fill.free();
        let rx_end = self.rx_frames as u64 * FRAME_SIZE as u64;
        let (mut used, mut refill, mut n) = (0u32, 0u32, 0usize);
        while used < avail && !batch.is_full() {
            // one frame: descriptors used..end, all but the last CONTD
            let mut end = used;
            let complete = loop {
                if end == avail {
                    break false;
                }
                end += 1;
                if self.xsk.rx.read(end - 1).options & XDP_PKT_CONTD == 0 {
                    break true;
                }
            };
            if !complete || refill + (end - used) > room {
                break;
            }
            let slot = batch.next_slot().expect("batch not full");
            let (mut len, mut ok) = (0usize, (end - used) as usize <= MAX_DESCS_PER_FRAME);
            for i in used..end {
                let d = self.xsk.rx.read(i);
                let bytes = if d.addr < rx_end {
                    self.umem.bytes(d.addr, d.len)
                } else {
                    None
                };
                match bytes {
                    Some(src) => {
                        if ok && len + src.len() <= SLOT_LEN {
                            slot[len..len + src.len()].copy_from_slice(src);
                            len += src.len();
                        } else {
                            ok = false;
                        }
                        self.xsk
                            .fill
                            .write(refill, d.addr & !(FRAME_SIZE as u64 - 1));
                        refill += 1;
                    }
                    // not a receive frame: nothing to give back
                    None => ok = false,
                }
            }
            used = end;
            if ok && len > 0 {
                batch.commit(len);
                self.base.counters.received(len);
                n += 1;
            } else {
                self.base.counters.rx_dropped += 1;
            }
        }
        self.xsk.rx.release(used);
        self.xsk.fill.submit(refill);
        if refill > 0 && self.xsk.fill.needs_wakeup() {
            self.xsk.wake_rx();
        }
        n
    }

    /// Free TX descriptors and frames, as whole frames of the MTU; when
    /// none is free, the kernel is kicked and what it finished taken back
    /// first (copy mode sends only when kicked).
    fn tx_room(&mut self, want: usize) -> usize {
        let per = (self.base.mtu + L2_OVERHEAD).div_ceil(FRAME_SIZE as usize);
        let room = |p: &Self| p.tx_free.len().min(p.xsk.tx.free() as usize) / per.max(1);
        self.reclaim();
        if room(self) == 0 {
            self.kick_tx();
            self.reclaim();
        }
        want.min(room(self))
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        self.reclaim();
        let mut room = self.xsk.tx.free();
        let (mut queued, mut sent) = (0u32, 0usize);
        for (i, f) in batch.iter().enumerate() {
            let descs = f.len().div_ceil(FRAME_SIZE as usize);
            if descs == 0
                || descs > MAX_DESCS_PER_FRAME
                || (descs > 1 && !self.binding.multi_buffer)
            {
                // sends a prefix of the batch (see `Port::send`)
                self.base.counters.tx_dropped += (batch.len() - i) as u64;
                break;
            }
            if descs > self.tx_free.len() || descs as u32 > room - queued {
                // publish what we have, let the kernel send it, take back what it finished
                self.xsk.tx.submit(queued);
                queued = 0;
                self.kick_tx();
                self.reclaim();
                room = self.xsk.tx.free();
                if descs > self.tx_free.len() || descs as u32 > room {
                    self.base.counters.tx_dropped += (batch.len() - i) as u64;
                    break;
                }
            }
            for (j, piece) in f.chunks(FRAME_SIZE as usize).enumerate() {
                let addr = self.tx_free.pop().expect("checked above");
                self.umem.frame_mut(addr)[..piece.len()].copy_from_slice(piece);
                let options = if j + 1 < descs { XDP_PKT_CONTD } else { 0 };
                self.xsk.tx.write(
                    queued,
                    XdpDesc {
                        addr,
                        len: piece.len() as u32,
                        options,
                    },
                );
                queued += 1;
            }
            sent += 1;
            self.base.counters.sent(f.len());
        }
        self.xsk.tx.submit(queued);
        self.kick_tx();
        sent
    }

    crate::forward_port!(field base: mac, mtu, link_speed_bps);
    crate::forward_port!(field iface: link_up);

    /// Our counters plus the kernel's drops (RX: no buffer, RX ring full;
    /// TX: invalid descriptors).
    fn counters(&self) -> PortCounters {
        match self.statistics() {
            Some(s) => self
                .base
                .counters_with_drops(s.rx_dropped + s.rx_ring_full, s.tx_invalid_descs),
            None => self.base.counters(),
        }
    }

    /// The frames waiting in the RX ring, by class: each frame's first
    /// descriptor holds its Ethernet and IP headers (VLAN PCP, DSCP), read
    /// in place in the UMEM; its bytes are the sum of its descriptors. The
    /// engine asks every turn while PFC generation is on, and a long
    /// backlog is when its time matters most: only the first
    /// [`BACKLOG_CLASSIFIED`] frames are read, the bytes behind them are
    /// spread over the classes in the proportions of those (exact below
    /// that many frames).
    fn rx_backlog(&self) -> Option<RxBacklog> {
        let avail = self.xsk.rx.available().min(self.xsk.rx.size());
        let rx_end = self.rx_frames as u64 * FRAME_SIZE as u64;
        let mut b = RxBacklog::default();
        let mut classes = RxClasses::default();
        // the class of the frame being summed (set by its first descriptor)
        let mut class: Option<(Option<u8>, u8)> = None;
        let (mut classified, mut rest) = (0u64, 0u64);
        for i in 0..avail {
            let d = self.xsk.rx.read(i);
            let len = d.len as u64;
            b.bytes += len;
            if b.frames >= BACKLOG_CLASSIFIED {
                rest += len;
            } else {
                let (pcp, dscp) = *class.get_or_insert_with(|| {
                    // a descriptor outside our RX frames is counted, not read
                    (d.addr < rx_end)
                        .then(|| self.umem.bytes(d.addr, d.len))
                        .flatten()
                        .map_or((None, 0), RxClasses::classify)
                });
                if let Some(p) = pcp {
                    classes.pcp[p as usize & 7] += len;
                }
                classes.dscp[dscp as usize & 63] += len;
                classified += len;
            }
            if d.options & XDP_PKT_CONTD == 0 {
                b.frames += 1;
                class = None;
            }
        }
        if rest > 0 && classified > 0 {
            let share = |v: &mut u64| *v += (*v as u128 * rest as u128 / classified as u128) as u64;
            classes.pcp.iter_mut().for_each(share);
            classes.dscp.iter_mut().for_each(share);
        }
        b.classes = Some(classes);
        Some(b)
    }

    /// poll(2) on the socket: readable once the RX ring holds a frame.
    fn wait(&mut self, timeout: Duration) {
        if !self.ready() {
            self.xsk.poll(timeout);
        }
    }

    /// ppoll(2) on the socket and the engine's bell.
    fn wait_or_ring(&mut self, bell: &std::sync::Arc<super::Bell>, timeout: Duration) {
        if !self.ready() {
            bell.wait(Some(self.xsk.fd()), timeout);
        }
    }

    fn wait_unheld(&mut self) -> Option<super::Unheld> {
        use std::os::fd::AsRawFd;
        (!self.ready()).then(|| super::Unheld::Fd(self.xsk.fd().as_raw_fd()))
    }
}

/// How many waiting frames `rx_backlog` classifies by reading their
/// headers (the rest are apportioned).
pub const BACKLOG_CLASSIFIED: u64 = 512;
