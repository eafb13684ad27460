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
//! - [`afpacket`]: raw AF_PACKET sockets with mmap'd TPACKET_V2 rings (or
//!   TPACKET_V3 on request);
//! - [`afxdp`]: AF_XDP sockets and their XDP program, falling back to
//!   AF_PACKET;
//! - [`addr`] over [`netlink`]: the next hop's MAC and an interface's
//!   address, from the kernel's tables.
//!
//! What all of them keep alike (MAC, MTU, link speed, their own counters)
//! is one [`PortBase`]; the ports on a kernel interface open it as an
//! [`iface::Interface`], which also answers their link state.

pub mod addr;
pub mod afpacket;
pub mod afxdp;
pub mod base;
pub mod bell;
pub mod iface;
pub mod impair;
pub mod mem;
pub mod netlink;
mod open;
pub mod pcap;

use std::sync::Arc;
use std::time::Duration;
use wire::EthernetAddress;

/// A zero-length, non-blocking `sendto` on a socket with a mapped TX ring
/// (AF_PACKET, AF_XDP): the kernel sends what the ring holds.
pub(crate) fn kick_tx(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: sendto(2) with a null buffer of length 0 and no address
    // reads no memory; a bad descriptor is an error return, not UB.
    let r = unsafe {
        libc::sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub use base::PortBase;
pub use bell::Bell;
pub use open::{
    gso_wanted, open_best, open_port, open_port_with, Backend, Gso, OpenError, OpenOptions,
};

/// Largest frame a slot holds: a 9000-byte MTU plus Ethernet and VLAN headers.
pub const SLOT_LEN: usize = 9018 + 4;

/// One slot's storage. A port that receives frames in buffers of its own
/// (the in-memory wire) hands them to a batch whole instead of copying
/// their bytes ([`FrameBatch::push_slot`]).
pub type Slot = Box<[u8; SLOT_LEN]>;

/// A new, zeroed slot (allocated on the heap directly, not built on the
/// stack and moved).
pub fn new_slot() -> Slot {
    vec![0u8; SLOT_LEN]
        .into_boxed_slice()
        .try_into()
        .unwrap_or_else(|_| unreachable!("a vector of SLOT_LEN bytes"))
}

/// A batch of frames in pre-allocated slots.
pub struct FrameBatch {
    slots: Vec<Slot>,
    lens: Vec<u16>,
}

impl FrameBatch {
    pub fn new(cap: usize) -> FrameBatch {
        FrameBatch {
            slots: (0..cap).map(|_| new_slot()).collect(),
            lens: Vec::with_capacity(cap),
        }
    }

    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.lens.len() == self.slots.len()
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn clear(&mut self) {
        self.lens.clear();
    }

    /// The `i`th frame.
    pub fn get(&self, i: usize) -> &[u8] {
        &self.slots[i][..self.lens[i] as usize]
    }

    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        let len = self.lens[i] as usize;
        &mut self.slots[i][..len]
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
        Some(&mut self.slots[i][..])
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

    /// Appends a frame of `len` bytes held in `slot` without copying it:
    /// the slot takes the place of the batch's next one, which is handed
    /// back (to be reused by whoever gave `slot`). `Err(slot)` when the
    /// batch is full or `len` is longer than a slot.
    pub fn push_slot(&mut self, slot: Slot, len: usize) -> Result<Slot, Slot> {
        if self.is_full() || len > SLOT_LEN {
            return Err(slot);
        }
        let i = self.lens.len();
        let old = std::mem::replace(&mut self.slots[i], slot);
        self.lens.push(len as u16);
        Ok(old)
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
    /// A frame of `len` bytes received.
    #[inline]
    pub fn received(&mut self, len: usize) {
        self.rx_packets += 1;
        self.rx_bytes += len as u64;
    }

    /// A frame of `len` bytes sent.
    #[inline]
    pub fn sent(&mut self, len: usize) {
        self.tx_packets += 1;
        self.tx_bytes += len as u64;
    }

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

/// Bytes of received frames waiting in a port's receive ring (received by
/// the port, not yet handed to the engine): the backlog PFC generation
/// watches ([`crate::device::Rnic::on_rx_backlog`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RxBacklog {
    pub frames: u64,
    pub bytes: u64,
    /// The same bytes by class, when the port knows the frames (see
    /// [`RxClasses`]); `None`: only the total is known, and it counts
    /// against the priority of our RoCE data.
    pub classes: Option<RxClasses>,
}

/// Backlog bytes by the fields a priority comes from: the VLAN PCP of
/// tagged frames and the IP DSCP of every frame (non-IP frames under DSCP
/// 0). The device's trust mode picks one ([`RxBacklog::by_priority`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxClasses {
    /// Bytes of VLAN-tagged frames by PCP (untagged ones: the rest).
    pub pcp: [u64; 8],
    /// Bytes by IP DSCP.
    pub dscp: [u64; 64],
}

impl Default for RxClasses {
    fn default() -> RxClasses {
        RxClasses {
            pcp: [0; 8],
            dscp: [0; 64],
        }
    }
}

impl RxClasses {
    /// The (tagged PCP, DSCP) class of a frame: `None` PCP when untagged;
    /// DSCP 0 when it is not IPv4 or IPv6. Never panics on short frames.
    pub fn classify(frame: &[u8]) -> (Option<u8>, u8) {
        wire::sniff::qos_class(frame)
    }
}

impl RxBacklog {
    /// Bytes per priority under `qos` (trust pcp: tagged frames by PCP,
    /// untagged ones on the default priority; trust dscp: through the DSCP
    /// table). Without classes, everything is on the data priority.
    pub fn by_priority(&self, qos: &crate::cc::Qos) -> [u64; 8] {
        let mut out = [0u64; 8];
        let Some(c) = &self.classes else {
            out[qos.data_priority() as usize & 7] = self.bytes;
            return out;
        };
        match qos.trust {
            crate::cc::TrustMode::Pcp => {
                let tagged: u64 = c.pcp.iter().sum();
                for (p, &b) in c.pcp.iter().enumerate() {
                    out[p] += b;
                }
                out[qos.default_priority as usize & 7] += self.bytes.saturating_sub(tagged);
            }
            crate::cc::TrustMode::Dscp => {
                for (d, &b) in c.dscp.iter().enumerate() {
                    out[qos.dscp2prio[d] as usize & 7] += b;
                }
            }
        }
        out
    }
}

/// How a waiter that does not hold a port learns that a frame arrived
/// ([`Port::wait_unheld`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unheld {
    /// The descriptor [`Port::wait_or_ring`] polls turns readable.
    Fd(std::os::fd::RawFd),
    /// The port rings the bell attached to it ([`Port::attach_bell`]).
    Bell,
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
    /// How many of the next `want` frames (each up to the MTU) the port
    /// can take now without dropping one: its free transmit descriptors.
    /// The engine makes no more frames than that in a turn. A frame the
    /// transport made counts as sent, so a full transmit queue holds the
    /// rest back in the send queues, as a NIC's scheduler stops at a full
    /// ring, instead of dropping them into a retransmission (the port may
    /// take back what the kernel finished, or kick it, to answer).
    fn tx_room(&mut self, want: usize) -> usize {
        want
    }
    /// When [`Port::tx_room`] said too little: how long until the port
    /// takes a batch again, if it holds transmissions back by time (a
    /// pacer: `rnicd --line-rate`). The engine with a transmit backlog
    /// parks no longer than that. `None`: the port does not know (a full
    /// descriptor ring), and the engine looks again after
    /// [`crate::engine::BACKLOG_PARK`].
    fn tx_ready_in(&self) -> Option<Duration> {
        None
    }
    /// How many bytes of one flow's consecutive frames the port takes best
    /// in a row: what it sends as one unit (a UDP GSO super-frame, which
    /// costs the kernel about what one frame does), or what keeps the
    /// flow's state and buffers in the caches at both ends (the in-memory
    /// wire); 0 when frames gain nothing from being together. The device
    /// lets a QP send that many bytes in a row in its turn of the round
    /// robin ([`crate::device::Rnic::set_tx_quantum`]), so its frames sit
    /// together in a batch.
    fn train_bytes(&self) -> usize {
        0
    }
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
    /// Like `wait`, and the engine's `bell` ends it too. Ports with a
    /// socket wait on both; the rest on the bell, which they ring when a
    /// frame arrives if they can ([`Port::attach_bell`]).
    fn wait_or_ring(&mut self, bell: &Arc<Bell>, timeout: Duration) {
        bell.wait(None, timeout);
    }
    /// For a waiter that cannot hold the port while it waits (the thread
    /// of a callers-turn engine parks without its loop's lock): how it
    /// learns of a frame. None: the port has no such way, or a frame is
    /// ready already — wait with `wait_or_ring` instead.
    fn wait_unheld(&mut self) -> Option<Unheld> {
        None
    }
    /// The engine that turns this port parks on `bell`: a port whose frames
    /// are delivered by another thread (the in-memory wire) rings it.
    fn attach_bell(&mut self, _bell: &Arc<Bell>) {}
    /// Whether a frame waits that no descriptor the engine polls would
    /// signal (the in-memory wire). The engine asks after announcing its
    /// park: a frame queued before the announcement rang no bell, and the
    /// engine must not sleep on it. A socket port answers false: its
    /// descriptor stays readable while frames wait.
    fn pending(&self) -> bool {
        false
    }
    /// What waits in the receive ring right now, for PFC generation; `None`
    /// when the port cannot tell (AF_PACKET with TPACKET_V3: frames in
    /// blocks the kernel has not retired are not visible), and then no PFC
    /// is generated.
    fn rx_backlog(&self) -> Option<RxBacklog> {
        None
    }
    /// Whether the link is up (the interface administratively up and with
    /// carrier: IFF_UP and IFF_RUNNING); `None` when the port cannot tell,
    /// which counts as up. The engine asks at most every
    /// [`crate::engine::LINK_POLL`] and raises IBV_EVENT_PORT_ERR /
    /// IBV_EVENT_PORT_ACTIVE on a change (IBTA 11.6.3.2, unaffiliated
    /// asynchronous events), so this may cost a syscall.
    fn link_up(&self) -> Option<bool> {
        None
    }
    /// A frame the device sent to its own address, which the engine hands
    /// back to the device instead of sending it
    /// ([`crate::device::Rnic::is_to_self`]): it never reaches the wire,
    /// but a port that records or impairs what passes does so here too
    /// (the pcap tap records it once; the impairment stage may drop,
    /// corrupt or CE-mark it). Returns whether it is delivered.
    fn loop_back(&mut self, _frame: &mut [u8]) -> bool {
        true
    }
}

/// Writes the [`Port`] methods a port hands on as they are: each named
/// method forwards to the same method of a wrapped port, reached through a
/// field (`forward_port!(field inner: mac, mtu)`) or through two accessor
/// methods (`forward_port!(via port, port_mut: mac, wait)`). A wrapper
/// writes only the methods it changes and lists the rest. The field may
/// be anything with those methods: a port's [`PortBase`]
/// (`forward_port!(field base: mac, mtu, link_speed_bps)`) or its
/// [`iface::Interface`] (`link_up`).
#[macro_export]
macro_rules! forward_port {
    (field $f:ident: $($m:ident),* $(,)?) => {
        $( $crate::forward_port!(@one (field $f) $m); )*
    };
    (via $get:ident, $get_mut:ident: $($m:ident),* $(,)?) => {
        $( $crate::forward_port!(@one (via $get $get_mut) $m); )*
    };
    // `self` is written where the method is, so the accessor is applied to
    // it by a nested call
    (@r $s:tt (field $f:ident)) => { $s.$f };
    (@w $s:tt (field $f:ident)) => { $s.$f };
    (@r $s:tt (via $get:ident $get_mut:ident)) => { $s.$get() };
    (@w $s:tt (via $get:ident $get_mut:ident)) => { $s.$get_mut() };
    (@one $how:tt recv) => {
        fn recv(&mut self, batch: &mut $crate::io::FrameBatch) -> usize {
            $crate::forward_port!(@w self $how).recv(batch)
        }
    };
    (@one $how:tt send) => {
        fn send(&mut self, batch: &$crate::io::FrameBatch) -> usize {
            $crate::forward_port!(@w self $how).send(batch)
        }
    };
    (@one $how:tt tx_room) => {
        fn tx_room(&mut self, want: usize) -> usize {
            $crate::forward_port!(@w self $how).tx_room(want)
        }
    };
    (@one $how:tt tx_ready_in) => {
        fn tx_ready_in(&self) -> Option<::std::time::Duration> {
            $crate::forward_port!(@r self $how).tx_ready_in()
        }
    };
    (@one $how:tt train_bytes) => {
        fn train_bytes(&self) -> usize {
            $crate::forward_port!(@r self $how).train_bytes()
        }
    };
    (@one $how:tt mac) => {
        fn mac(&self) -> $crate::wire::EthernetAddress {
            $crate::forward_port!(@r self $how).mac()
        }
    };
    (@one $how:tt mtu) => {
        fn mtu(&self) -> usize {
            $crate::forward_port!(@r self $how).mtu()
        }
    };
    (@one $how:tt link_speed_bps) => {
        fn link_speed_bps(&self) -> u64 {
            $crate::forward_port!(@r self $how).link_speed_bps()
        }
    };
    (@one $how:tt counters) => {
        fn counters(&self) -> $crate::io::PortCounters {
            $crate::forward_port!(@r self $how).counters()
        }
    };
    (@one $how:tt wait) => {
        fn wait(&mut self, timeout: ::std::time::Duration) {
            $crate::forward_port!(@w self $how).wait(timeout)
        }
    };
    (@one $how:tt wait_or_ring) => {
        fn wait_or_ring(
            &mut self,
            bell: &::std::sync::Arc<$crate::io::Bell>,
            timeout: ::std::time::Duration,
        ) {
            $crate::forward_port!(@w self $how).wait_or_ring(bell, timeout)
        }
    };
    (@one $how:tt wait_unheld) => {
        fn wait_unheld(&mut self) -> Option<$crate::io::Unheld> {
            $crate::forward_port!(@w self $how).wait_unheld()
        }
    };
    (@one $how:tt pending) => {
        fn pending(&self) -> bool {
            $crate::forward_port!(@r self $how).pending()
        }
    };
    (@one $how:tt attach_bell) => {
        fn attach_bell(&mut self, bell: &::std::sync::Arc<$crate::io::Bell>) {
            $crate::forward_port!(@w self $how).attach_bell(bell)
        }
    };
    (@one $how:tt rx_backlog) => {
        fn rx_backlog(&self) -> Option<$crate::io::RxBacklog> {
            $crate::forward_port!(@r self $how).rx_backlog()
        }
    };
    (@one $how:tt link_up) => {
        fn link_up(&self) -> Option<bool> {
            $crate::forward_port!(@r self $how).link_up()
        }
    };
    (@one $how:tt loop_back) => {
        fn loop_back(&mut self, frame: &mut [u8]) -> bool {
            $crate::forward_port!(@w self $how).loop_back(frame)
        }
    };
}

/// A boxed port is a port (so wrappers take `Box<dyn Port>` from `open_port`).
impl<P: Port + ?Sized> Port for Box<P> {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        (**self).recv(batch)
    }
    fn send(&mut self, batch: &FrameBatch) -> usize {
        (**self).send(batch)
    }
    fn tx_room(&mut self, want: usize) -> usize {
        (**self).tx_room(want)
    }
    fn tx_ready_in(&self) -> Option<Duration> {
        (**self).tx_ready_in()
    }
    fn train_bytes(&self) -> usize {
        (**self).train_bytes()
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
    fn wait_or_ring(&mut self, bell: &Arc<Bell>, timeout: Duration) {
        (**self).wait_or_ring(bell, timeout)
    }
    fn wait_unheld(&mut self) -> Option<Unheld> {
        (**self).wait_unheld()
    }
    fn attach_bell(&mut self, bell: &Arc<Bell>) {
        (**self).attach_bell(bell)
    }
    fn pending(&self) -> bool {
        (**self).pending()
    }
    fn rx_backlog(&self) -> Option<RxBacklog> {
        (**self).rx_backlog()
    }
    fn link_up(&self) -> Option<bool> {
        (**self).link_up()
    }
    fn loop_back(&mut self, frame: &mut [u8]) -> bool {
        (**self).loop_back(frame)
    }
}
