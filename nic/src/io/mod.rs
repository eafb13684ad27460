//! Ports: one small trait and its backends. A port moves batches of whole
//! Ethernet frames; the engine never sees sockets and the transport never
//! sees ports.
//!
//! Frames live in [`FrameBatch`]es: fixed, pre-allocated slots reused for
//! every batch (the mbuf pool of a DPDK application), so the data path does
//! not allocate per packet.
//!
//! - [`mem`]: an in-memory pair of ports (crossbeam queues) with a seeded
//!   interceptor for loss, reordering, duplication, corruption, CE marking;
//! - [`pcap`]: a replay port feeding a capture's frames, and a tap that
//!   records everything any port sends or receives;
//! - [`afpacket`]: raw AF_PACKET sockets with mmap'd TPACKET_V3 rings.

pub mod addr;
pub mod afpacket;
pub mod afxdp;
pub mod impair;
pub mod mem;
pub mod netns;
pub mod pcap;

use std::time::Duration;
use wire::EthernetAddress;

/// Largest frame a slot holds: a 9000-byte MTU plus Ethernet and VLAN headers.
pub const SLOT_LEN: usize = 9018 + 4;

/// A batch of frames in pre-allocated slots.
pub struct FrameBatch {
    data: Box<[u8]>,
    lens: Vec<u16>,
    cap: usize,
}

impl FrameBatch {
    pub fn new(cap: usize) -> FrameBatch {
        FrameBatch {
            data: vec![0u8; cap * SLOT_LEN].into_boxed_slice(),
            lens: Vec::with_capacity(cap),
            cap,
        }
    }

    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.lens.len() == self.cap
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn clear(&mut self) {
        self.lens.clear();
    }

    /// The `i`th frame.
    pub fn get(&self, i: usize) -> &[u8] {
        &self.data[i * SLOT_LEN..i * SLOT_LEN + self.lens[i] as usize]
    }

    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        let len = self.lens[i] as usize;
        &mut self.data[i * SLOT_LEN..i * SLOT_LEN + len]
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(move |i| self.get(i))
    }

    /// The next free slot, whole, to write a frame into; `commit` it after.
    pub fn next_slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let i = self.lens.len();
        Some(&mut self.data[i * SLOT_LEN..(i + 1) * SLOT_LEN])
    }

    /// Keeps the first `len` bytes of the slot `next_slot` returned.
    pub fn commit(&mut self, len: usize) {
        debug_assert!(len <= SLOT_LEN && !self.is_full());
        self.lens.push(len as u16);
    }

    /// Copies a frame into the next slot; false if full or too long.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if frame.len() > SLOT_LEN {
            return false;
        }
        match self.next_slot() {
            Some(slot) => {
                slot[..frame.len()].copy_from_slice(frame);
                self.commit(frame.len());
                true
            }
            None => false,
        }
    }
}

/// Per-port counters, named as `ethtool -S` names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames the port had to drop on receive (ring full, too long, ...).
    pub rx_dropped: u64,
    /// Frames the port could not send (ring or queue full).
    pub tx_dropped: u64,
}

impl PortCounters {
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("tx_packets", self.tx_packets),
            ("tx_bytes", self.tx_bytes),
            ("rx_dropped", self.rx_dropped),
            ("tx_dropped", self.tx_dropped),
        ]
        .into_iter()
    }
}

/// What a port does: move batches of frames.
pub trait Port: Send {
    /// Appends received frames to `batch` (up to its capacity); returns how
    /// many. Never blocks.
    fn recv(&mut self, batch: &mut FrameBatch) -> usize;
    /// Sends the frames of `batch` in order and returns how many went out:
    /// always a prefix of the batch (a port that cannot take a frame drops
    /// it and all behind it, and counts them), so a wrapper knows exactly
    /// which frames reached the wire. Never blocks.
    fn send(&mut self, batch: &FrameBatch) -> usize;
    fn mac(&self) -> EthernetAddress;
    /// Largest IP datagram (the interface MTU).
    fn mtu(&self) -> usize;
    fn link_speed_bps(&self) -> u64;
    fn counters(&self) -> PortCounters;
    /// Blocks until a frame may be ready or `timeout` passes (the last step
    /// of the engine's idle backoff). Ports without a wait primitive sleep.
    fn wait(&mut self, timeout: Duration) {
        std::thread::park_timeout(timeout);
    }
}

/// A boxed port is a port (so wrappers take `Box<dyn Port>` from `open_port`).
impl<P: Port + ?Sized> Port for Box<P> {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        (**self).recv(batch)
    }
    fn send(&mut self, batch: &FrameBatch) -> usize {
        (**self).send(batch)
    }
    fn mac(&self) -> EthernetAddress {
        (**self).mac()
    }
    fn mtu(&self) -> usize {
        (**self).mtu()
    }
    fn link_speed_bps(&self) -> u64 {
        (**self).link_speed_bps()
    }
    fn counters(&self) -> PortCounters {
        (**self).counters()
    }
    fn wait(&mut self, timeout: Duration) {
        (**self).wait(timeout)
    }
}
