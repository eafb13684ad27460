//! Raw AF_PACKET sockets with mmap'd rings (packet(7); the kernel's
//! Documentation/networking/packet_mmap.rst), in one of two RX ring
//! formats: TPACKET_V2 (`v2`, the default: each frame handed
//! over at once) or TPACKET_V3 (`v3`: a block at a time). This
//! module opens the socket, asks for the rings, maps them and moves
//! frames; `sys` holds the system calls, `tx` the TX ring, `gso` the
//! virtio-net header through which V2 sends trains of frames as UDP GSO
//! super-frames and cuts received ones ([`RingConfig::gso`]), `direct`
//! the sending of those trains.
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
//! With UDP GSO there is no TX ring: `direct` sends each batch by one
//! `sendmmsg` on a second socket, gathering the frames from the batch.
//! The socket ignores its own outgoing frames (PACKET_IGNORE_OUTGOING) and,
//! without UDP GSO, bypasses the qdisc layer (with it, the qdisc layer is
//! where a super-frame the device cannot take whole is segmented).
//!
//! The kernel's UDP stack sees RoCEv2 frames too and would answer each with
//! an ICMP port-unreachable; a UDP socket bound to port 4791 that nobody
//! reads (as rxe has its tunnel socket) keeps it quiet.
//!
//! Receive backlog (`Port::rx_backlog`, what PFC generation watches): V2
//! counts it (see `v2`); V3 cannot (`None`: no PFC from a device
//! on V3).

mod direct;
mod gso;
mod sys;
mod tx;
mod v2;
mod v3;

pub use v2::v2_frame_size;

/// Whether this kernel's packet sockets carry UDP GSO requests in their
/// virtio-net header (VIRTIO_NET_HDR_GSO_UDP_L4, Linux 6.2 on): what
/// [`RingConfig::gso`] needs.
pub fn gso_available() -> bool {
    sys::kernel_at_least(6, 2)
}

use super::iface::{IfaceError, Interface};
use super::{FrameBatch, Port, PortBase, PortCounters, RxBacklog, SLOT_LEN};
use std::cell::Cell;
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;
use sys::{setsockopt, Mapping};

// linux/if_packet.h
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
const TPACKET_ALIGNMENT: usize = 16;
/// Ethernet header plus one VLAN tag the kernel may leave in the frame.
const ETH_VLAN_HLEN: usize = 18;

/// Whether the kernel sends `frame` on a link of `mtu`: at most the MTU
/// behind the Ethernet header and one VLAN tag (packet_snd refuses a
/// longer one, the TX ring marks it TP_STATUS_WRONG_FORMAT).
fn fits_link(frame: &[u8], mtu: usize) -> bool {
    frame.len() <= mtu + ETH_VLAN_HLEN
}

const fn tpacket_align(x: usize) -> usize {
    (x + TPACKET_ALIGNMENT - 1) & !(TPACKET_ALIGNMENT - 1)
}

/// Byte offsets of a TX frame's `tp_status`, `tp_len` and `tp_snaplen`
/// (u32 fields of the version's frame header) and of its data.
#[derive(Clone, Copy, Debug)]
struct TxLayout {
    status: usize,
    len: usize,
    snaplen: usize,
    data: usize,
}

/// The TX ring's shape (`struct tpacket_req` / `tpacket_req3` fields):
/// blocks of four frames.
#[derive(Clone, Copy, Debug)]
struct TxGeometry {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

impl TxGeometry {
    /// No TX ring.
    const NONE: TxGeometry = TxGeometry {
        block_size: 0,
        block_nr: 0,
        frame_size: 0,
        frame_nr: 0,
    };

    fn of(cfg: &RingConfig) -> TxGeometry {
        let block_nr = cfg.tx_frames / 4;
        TxGeometry {
            block_size: cfg.tx_frame_size.saturating_mul(4),
            block_nr,
            frame_size: cfg.tx_frame_size,
            frame_nr: block_nr * 4,
        }
    }

    fn len(&self) -> usize {
        self.block_size as usize * self.block_nr as usize
    }
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

/// How frames leave.
enum TxPath {
    /// Through the TX ring.
    Ring(tx::Tx),
    /// With UDP GSO: by sendmmsg from the batch on a second socket.
    Direct(direct::Direct),
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
    /// V2: a virtio-net header on every frame (PACKET_VNET_HDR), trains of
    /// frames sent as UDP GSO super-frames and super-frames cut on receive
    /// (`gso`); taken only on kernels whose packet sockets carry UDP GSO
    /// (6.2 on). Frames then leave by `sendmmsg` straight from the batch
    /// (`direct`), with no TX ring (`tx_frame_size` and `tx_frames` unused).
    /// Off by default: with it the socket leaves the qdisc bypass (see the
    /// module docs).
    pub gso: bool,
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
            gso: false,
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
            counters.received(d.len() + if tag.is_some() { 4 } else { 0 });
            true
        }
        _ => {
            counters.rx_dropped += 1;
            false
        }
    }
}

/// Copies `data` into the next slot of `batch`, with `tag` back after the
/// MAC addresses.
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
    #[error(transparent)]
    Interface(#[from] IfaceError),
    #[error("ring geometry: {0}")]
    Geometry(&'static str),
    #[error("{what}: {source} (AF_PACKET needs CAP_NET_RAW, e.g. root)")]
    Sys {
        what: &'static str,
        source: io::Error,
    },
}

/// Where the port reads its RX ring.
enum RxRing {
    V2(v2::Rx),
    V3(v3::Rx),
}

/// A port on a real interface through an AF_PACKET socket.
pub struct AfPacketPort {
    // `rx` and a ring `tx` point into `_map`, which is unmapped before `fd`
    // closes.
    rx: RxRing,
    tx: TxPath,
    _map: Mapping,
    fd: OwnedFd,
    cfg: RingConfig,
    base: PortBase,
    iface: Interface,
    /// Frames the kernel dropped on a full RX ring, read so far.
    kernel_drops: Cell<u64>,
    _udp_guard: Option<UdpSocket>,
}

// SAFETY: the rings' raw pointers point into `_map`, which the port owns
// and which moves with it; they are dereferenced only through &mut self,
// or through &self by `rx_backlog` (V2 status words and a RefCell count),
// and the port is not Sync, so no two threads use it at once.
unsafe impl Send for AfPacketPort {}

impl AfPacketPort {
    /// Sets the link speed pause quanta and pacing are computed at
    /// (default [`super::base::IFACE_SPEED_BPS`]).
    pub fn set_link_speed(&mut self, bps: u64) {
        self.base.speed = bps;
    }

    /// The ring format this port uses.
    pub fn version(&self) -> TpacketVersion {
        self.cfg.version
    }

    /// Whether trains of frames go out as UDP GSO super-frames (and
    /// super-frames are cut on receive).
    pub fn gso(&self) -> bool {
        self.cfg.gso
    }

    /// Opens a port on `ifname` in the calling thread's network namespace.
    pub fn open(ifname: &str, cfg: RingConfig) -> Result<AfPacketPort, AfPacketError> {
        if cfg.rx_blocks == 0 || cfg.tx_frames < 4 {
            // the kernel takes a zero count as "no ring"
            return Err(AfPacketError::Geometry(
                "at least one RX block and four TX frames",
            ));
        }
        let fd = sys::packet_socket()?;
        let iface = Interface::open(ifname)?;
        let version = match cfg.version {
            TpacketVersion::V2 => TPACKET_V2,
            TpacketVersion::V3 => TPACKET_V3,
        };
        setsockopt(&fd, sys::PACKET_VERSION, &version, "PACKET_VERSION")?;
        let one: libc::c_int = 1;
        // A TX frame the kernel cannot send (too long for the device, bad
        // header) is skipped and its slot freed; without this the kernel
        // stops at it, marked TP_STATUS_WRONG_FORMAT, and sends nothing
        // behind it until that slot is written again. Before the rings.
        setsockopt(&fd, sys::PACKET_LOSS, &one, "PACKET_LOSS")?;
        // The virtio-net header must be asked for before the rings.
        let vnet = cfg.gso && cfg.version == TpacketVersion::V2 && gso_available();
        // Best effort: older kernels lack these. Not with super-frames:
        // the qdisc bypass (__dev_direct_xmit) drops a GSO skb the device
        // cannot take whole instead of segmenting it (a veth whose peer
        // runs XDP, a device without UDP segmentation).
        if !vnet {
            let _ = setsockopt(&fd, sys::PACKET_QDISC_BYPASS, &one, "PACKET_QDISC_BYPASS");
        }
        let _ = setsockopt(
            &fd,
            sys::PACKET_IGNORE_OUTGOING,
            &one,
            "PACKET_IGNORE_OUTGOING",
        );
        if vnet {
            setsockopt(&fd, sys::PACKET_VNET_HDR, &one, "PACKET_VNET_HDR")?;
            // a super-frame longer than an RX slot is queued whole on the
            // socket, its slot marked TP_STATUS_COPY
            setsockopt(&fd, sys::PACKET_COPY_THRESH, &one, "PACKET_COPY_THRESH")?;
            sys::grow_rcvbuf(&fd, 8 << 20);
        }
        let cfg = RingConfig { gso: vnet, ..cfg };
        // with GSO frames leave from the batch by sendmmsg: no TX ring
        let direct = match vnet {
            true => Some(direct::Direct::open(iface.index)?),
            false => None,
        };
        let txg = match direct {
            Some(_) => TxGeometry::NONE,
            None => TxGeometry::of(&cfg),
        };
        let (v2_geometry, rx_len, layout) = match cfg.version {
            TpacketVersion::V2 => {
                let (g, len) = v2::request_rings(&fd, &cfg, iface.mtu, txg)?;
                (Some(g), len, v2::TX)
            }
            TpacketVersion::V3 => (None, v3::request_rings(&fd, &cfg, txg)?, v3::TX),
        };
        let map = Mapping::new(&fd, rx_len + txg.len())?;
        sys::bind(&fd, iface.index)?;
        let rx = match v2_geometry {
            Some(g) => RxRing::V2(v2::Rx::new(map.at(0), g, vnet)),
            None => RxRing::V3(v3::Rx::new(map.at(0), cfg.rx_block_size, cfg.rx_blocks)),
        };
        let tx = match direct {
            Some(d) => TxPath::Direct(d),
            None => TxPath::Ring(tx::Tx::new(
                map.at(rx_len),
                txg.frame_size,
                txg.frame_nr,
                layout,
            )),
        };
        let guard = UdpSocket::bind(("0.0.0.0", wire::ROCEV2_PORT)).ok();
        if let (Some(g), true) = (&guard, vnet) {
            // takes a super-frame whole instead of cutting it into
            // datagrams nobody reads
            sys::udp_gro(g);
        }
        Ok(AfPacketPort {
            rx,
            tx,
            _map: map,
            fd,
            cfg,
            base: PortBase::of(&iface),
            iface,
            kernel_drops: Cell::new(0),
            _udp_guard: guard,
        })
    }
}

impl Port for AfPacketPort {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        if let TxPath::Ring(tx) = &mut self.tx {
            if tx.kick_owed {
                tx.kick(&self.fd, &mut self.base.counters);
            }
        }
        match &mut self.rx {
            RxRing::V2(rx) => rx.recv(&self.fd, &mut self.base.counters, batch),
            RxRing::V3(rx) => rx.recv(&mut self.base.counters, batch),
        }
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        let (mtu, counters) = (self.base.mtu, &mut self.base.counters);
        match &mut self.tx {
            TxPath::Direct(d) => d.send(mtu, counters, batch),
            TxPath::Ring(tx) => tx.send(&self.fd, mtu, counters, batch),
        }
    }

    fn tx_room(&mut self, want: usize) -> usize {
        match &mut self.tx {
            TxPath::Direct(d) => d.room(want),
            TxPath::Ring(tx) => tx.room(&self.fd, &mut self.base.counters, want),
        }
    }

    /// With GSO, a train of one flow's frames leaves as one super-frame of
    /// up to an IPv4 datagram's payload.
    fn train_bytes(&self) -> usize {
        if self.cfg.gso {
            wire::gso::MAX_PAYLOAD
        } else {
            0
        }
    }

    crate::forward_port!(field base: mac, mtu, link_speed_bps);
    crate::forward_port!(field iface: link_up);

    /// The port's counts; `rx_dropped` includes the frames the kernel
    /// dropped on a full RX ring.
    fn counters(&self) -> PortCounters {
        let k = self.kernel_drops.get() + sys::read_kernel_drops(&self.fd);
        self.kernel_drops.set(k);
        self.base.counters_with_drops(k, 0)
    }

    /// poll(2) on the socket: readable once a frame (V2) or a block (V3)
    /// is handed over.
    fn wait(&mut self, timeout: Duration) {
        sys::poll_in(&self.fd, timeout);
    }

    /// ppoll(2) on the socket and the engine's bell.
    fn wait_or_ring(&mut self, bell: &std::sync::Arc<super::Bell>, timeout: Duration) {
        bell.wait(Some(self.fd.as_fd()), timeout);
    }

    fn wait_unheld(&mut self) -> Option<super::Unheld> {
        use std::os::fd::AsRawFd;
        Some(super::Unheld::Fd(self.fd.as_raw_fd()))
    }

    /// V2: the slots the kernel has filled and `recv` has not read, and
    /// their frames' bytes (wire lengths). V3: `None` (see `v3`).
    fn rx_backlog(&self) -> Option<RxBacklog> {
        match &self.rx {
            RxRing::V2(rx) => Some(rx.backlog()),
            RxRing::V3(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
