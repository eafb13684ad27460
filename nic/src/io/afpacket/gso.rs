//! UDP segmentation offload through the socket's virtio-net header
//! (PACKET_VNET_HDR, packet(7)): on a TPACKET_V2 socket every TX and RX
//! frame carries a `struct virtio_net_hdr` in front of its Ethernet header.
//!
//! TX: consecutive frames of one flow that segmentation would give back
//! byte for byte ([`wire::gso::Train`]) go to the kernel as one super-frame
//! marked `VIRTIO_NET_HDR_GSO_UDP_L4`; the kernel hands it on as one skb and
//! cuts it into the original frames only where the path needs it (software
//! GSO before a device without the offload, or a veth whose peer runs
//! XDP). Over a veth to another AF_PACKET socket it arrives whole: one
//! skb per train instead of one per frame, which is what bounds the
//! sender's CPU (BENCHMARKS.md, "Real ports").
//!
//! RX: a super-frame (the header says `GSO_UDP_L4` and its segment size)
//! is cut back into frames ([`wire::gso::Segments`]). One longer than the
//! ring's slot arrives marked TP_STATUS_COPY, its whole skb queued on the
//! socket (PACKET_COPY_THRESH), and is read from there with `recv`.

use crate::io::{FrameBatch, PortCounters, SLOT_LEN};
use std::os::fd::{AsRawFd, OwnedFd};
use wire::gso::{Segments, Train, HEADERS_LEN, UDP_AT, UDP_CHECKSUM_OFFSET};

/// `sizeof(struct virtio_net_hdr)`.
pub(super) const VNET_LEN: usize = 10;
// linux/virtio_net.h
const F_NEEDS_CSUM: u8 = 1;
const GSO_UDP_L4: u8 = 5;
/// Linux's UDP_MAX_SEGMENTS: the most segments a GSO request may carry.
const MAX_SEGMENTS: usize = 64;
/// The longest super-frame read from the socket queue: an IPv4 datagram
/// of 65535 bytes behind an Ethernet header and a VLAN tag.
const MAX_SUPER: usize = 65535 + super::ETH_VLAN_HLEN;

/// `struct virtio_net_hdr`: flags, gso_type, then four u16 in the host's
/// byte order (packet sockets use the legacy virtio order, which is the
/// host's: `vio_le()` in af_packet.c).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub(super) fn read(b: &[u8; VNET_LEN]) -> VnetHdr {
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        }
    }

    fn write(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        for (i, v) in [
            self.hdr_len,
            self.gso_size,
            self.csum_start,
            self.csum_offset,
        ]
        .into_iter()
        .enumerate()
        {
            b[2 + 2 * i..4 + 2 * i].copy_from_slice(&v.to_ne_bytes());
        }
    }

    /// The segment size of a UDP super-frame, `None` for any other frame.
    pub(super) fn udp_segment(&self) -> Option<usize> {
        (self.gso_type & 0x7F == GSO_UDP_L4).then_some(self.gso_size as usize)
    }
}

/// What goes out with `batch[i]`: the frames of its train, `batch[i]` and
/// the ones right behind it (just `batch[i]` when no other joins).
pub(super) struct Plan {
    first: usize,
    n: usize,
    train: Option<Train>,
}

impl Plan {
    /// The batch indices of the frames, `batch[i]` first.
    pub(super) fn members(&self) -> std::ops::Range<usize> {
        self.first..self.first + self.n
    }

    /// The train when more than one frame goes: the headers of the
    /// super-frame come from it.
    pub(super) fn train(&self) -> Option<&Train> {
        self.train.as_ref().filter(|_| self.n > 1)
    }

    /// The virtio-net header in front of what goes out: UDP GSO for a
    /// train, none for a lone frame.
    pub(super) fn vnet(&self) -> [u8; VNET_LEN] {
        let mut b = [0u8; VNET_LEN];
        if let Some(t) = self.train() {
            VnetHdr {
                flags: F_NEEDS_CSUM,
                gso_type: GSO_UDP_L4,
                hdr_len: HEADERS_LEN as u16,
                gso_size: t.segment as u16,
                csum_start: UDP_AT as u16,
                csum_offset: UDP_CHECKSUM_OFFSET as u16,
            }
            .write(&mut b);
        }
        b
    }
}

/// The train of `batch[i]` among the frames of `batch[..end]`, up to
/// `room` bytes of UDP payload: the frames right behind `batch[i]` that
/// join it. (The device's round robin lets a QP send a train's worth of
/// frames in a row, `Port::train_bytes`, so a flow's frames lie together
/// in the batch; trains that took frames from past other flows' would make
/// what reached the wire after a partial send other than a prefix.)
pub(super) fn plan(batch: &FrameBatch, i: usize, end: usize, room: usize) -> Plan {
    let first = batch.get(i);
    let mut p = Plan {
        first: i,
        n: 1,
        train: Train::start(first),
    };
    if let Some(t) = &mut p.train {
        for j in i + 1..end.min(i + MAX_SEGMENTS) {
            if !t.push(first, batch.get(j), room) {
                break;
            }
            p.n += 1;
        }
    }
    p
}

/// A received super-frame being cut into frames, kept across `recv`s while
/// the batch has no room for the rest.
pub(super) struct Pending {
    buf: Box<[u8]>,
    /// Where the super-frame starts in `buf`: behind the virtio-net header
    /// it was received with, or 0.
    at: usize,
    len: usize,
    segment: usize,
    /// Segments handed over so far.
    taken: usize,
    /// Whether `buf` holds a super-frame with segments left.
    live: bool,
}

impl Pending {
    pub(super) fn new() -> Pending {
        Pending {
            buf: vec![0u8; VNET_LEN + MAX_SUPER].into_boxed_slice(),
            at: 0,
            len: 0,
            segment: 0,
            taken: 0,
            live: false,
        }
    }

    /// Whether segments of a super-frame wait to be handed over.
    pub(super) fn is_live(&self) -> bool {
        self.live
    }

    /// Takes a super-frame of `segment`-byte segments (its bytes from the
    /// Ethernet header on). A segment size no batch slot holds is a drop.
    pub(super) fn take_from(&mut self, counters: &mut PortCounters, frame: &[u8], segment: usize) {
        if frame.len() > MAX_SUPER {
            counters.rx_dropped += 1;
            return;
        }
        self.buf[..frame.len()].copy_from_slice(frame);
        self.start(counters, 0, frame.len(), segment);
    }

    /// Reads the skb the kernel queued on the socket for a TP_STATUS_COPY
    /// slot: one whose frame is a UDP super-frame is taken in, any other
    /// (a TCP super-frame of the host's own traffic, say) is returned to be
    /// handed on as it is, if a slot holds it. `None`: nothing to hand on.
    /// A `tagged` UDP super-frame (the kernel took its VLAN tag out) is a
    /// counted drop: its segments would lose the tag.
    pub(super) fn recv_copy(
        &mut self,
        fd: &OwnedFd,
        counters: &mut PortCounters,
        tagged: bool,
    ) -> Option<&[u8]> {
        // SAFETY: recv(2) writes at most buf.len() bytes into buf, which
        // lives for the call; MSG_TRUNC makes it return the datagram's
        // whole length, so a longer one is seen, not mistaken for whole.
        let r = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        let Ok(n) = usize::try_from(r) else {
            counters.rx_dropped += 1;
            return None;
        };
        if n > self.buf.len() || n < VNET_LEN {
            counters.rx_dropped += 1;
            return None;
        }
        let hdr = VnetHdr::read(&vnet_bytes(&self.buf));
        match hdr.udp_segment() {
            Some(_) if tagged => {
                counters.rx_dropped += 1;
                None
            }
            Some(seg) => {
                self.start(counters, VNET_LEN, n - VNET_LEN, seg);
                None
            }
            None => Some(&self.buf[VNET_LEN..n]),
        }
    }

    /// Takes the super-frame of `len` bytes at `at` in `buf`.
    fn start(&mut self, counters: &mut PortCounters, at: usize, len: usize, segment: usize) {
        let ok = HEADERS_LEN + segment <= SLOT_LEN
            && Segments::new(&self.buf[at..at + len], segment).is_ok();
        if !ok {
            counters.rx_dropped += 1;
            return;
        }
        self.at = at;
        self.len = len;
        self.segment = segment;
        self.taken = 0;
        self.live = true;
    }

    /// Hands segments over into `batch` while it has room. Returns how
    /// many.
    pub(super) fn drain(&mut self, counters: &mut PortCounters, batch: &mut FrameBatch) -> usize {
        if !self.live {
            return 0;
        }
        let frame = &self.buf[self.at..self.at + self.len];
        let Ok(mut segs) = Segments::resume(frame, self.segment, self.taken) else {
            self.live = false;
            return 0;
        };
        let mut n = 0;
        while let Some(slot) = batch.next_slot() {
            let Some(len) = segs.next_into(slot) else {
                break;
            };
            batch.commit(len);
            counters.received(len);
            n += 1;
        }
        self.taken += n;
        self.live = segs.remaining() > 0;
        n
    }
}

/// The first [`VNET_LEN`] bytes of `b` (which holds at least that many).
fn vnet_bytes(b: &[u8]) -> [u8; VNET_LEN] {
    let mut a = [0u8; VNET_LEN];
    a.copy_from_slice(&b[..VNET_LEN]);
    a
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use wire::{
        BthRepr, EthernetAddress, EthernetRepr, IpRepr, Ipv4Repr, Opcode, Psn, RoceRepr, UdpRepr,
    };

    /// The bytes that go out with `batch[i]`, as the kernel takes them
    /// (what `direct`'s iovecs gather): `batch[i]` and the frames of
    /// `batch[..end]` that join its train ([`plan`], up to what `out`
    /// holds), as one super-frame behind a virtio-net header. Returns how
    /// many frames went in and the bytes written.
    pub(in super::super) fn fill(
        batch: &FrameBatch,
        i: usize,
        end: usize,
        out: &mut [u8],
    ) -> (usize, usize) {
        let room = out.len().saturating_sub(VNET_LEN + HEADERS_LEN);
        let p = plan(batch, i, end, room);
        let (hdr, body) = out.split_at_mut(VNET_LEN);
        hdr.copy_from_slice(&p.vnet());
        let first = batch.get(i);
        match p.train() {
            Some(t) => {
                t.write_headers(first, body);
                let mut at = HEADERS_LEN;
                for k in p.members() {
                    let payload = &batch.get(k)[HEADERS_LEN..];
                    body[at..at + payload.len()].copy_from_slice(payload);
                    at += payload.len();
                }
                (p.members().count(), VNET_LEN + at)
            }
            None => {
                body[..first.len()].copy_from_slice(first);
                (1, VNET_LEN + first.len())
            }
        }
    }

    /// A RoCEv2 WRITE_MIDDLE frame over IPv4 with `ident` and `len`
    /// payload bytes.
    pub(in super::super) fn roce(ident: u16, psn: u32, len: usize, dst_port: u16) -> Vec<u8> {
        let payload: Vec<u8> = (0..len).map(|i| (i as u32 ^ psn) as u8).collect();
        let ip = IpRepr::V4(Ipv4Repr {
            src: [10, 0, 0, 1].into(),
            dst: [10, 0, 0, 2].into(),
            dscp: 26,
            ecn: 2,
            ident,
            dont_frag: true,
            ttl: 64,
        });
        let eth = EthernetRepr {
            dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src: EthernetAddress([2, 0, 0, 0, 0, 1]),
            vlan: None,
            ethertype: 0,
        };
        let udp = UdpRepr {
            src_port: dst_port,
            dst_port: wire::ROCEV2_PORT,
        };
        let repr = RoceRepr {
            bth: BthRepr::new(Opcode(0x07), 0x11, Psn::new(psn)),
            payload: &payload,
            ..RoceRepr::cnp(eth, ip, udp, 0x11)
        };
        let mut buf = vec![0u8; 10_000];
        let n = repr.emit(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// Sends `frames` through `fill` into ring frames of `room` bytes and
    /// takes each ring frame back in as a receiver does: the frames come
    /// back unchanged (ICRC and all). Returns how many ring frames.
    fn through(frames: &[Vec<u8>], room: usize) -> usize {
        let mut tx = FrameBatch::new(frames.len());
        for f in frames {
            assert!(tx.push(f));
        }
        let mut rx = FrameBatch::new(frames.len());
        let mut counters = PortCounters::default();
        let mut pending = Pending::new();
        let (mut i, mut rings) = (0, 0);
        while i < tx.len() {
            let mut ring = vec![0u8; room];
            let (n, len) = fill(&tx, i, tx.len(), &mut ring);
            let hdr = VnetHdr::read(&vnet_bytes(&ring));
            let body = &ring[VNET_LEN..len];
            match hdr.udp_segment() {
                Some(seg) => {
                    assert!(n > 1);
                    assert_eq!(hdr.csum_start as usize, UDP_AT);
                    pending.take_from(&mut counters, body, seg);
                    // a batch with room for one at a time still gets them all
                    while pending.is_live() {
                        let mut one = FrameBatch::new(1);
                        assert_eq!(pending.drain(&mut counters, &mut one), 1);
                        rx.push(one.get(0));
                    }
                }
                None => {
                    assert_eq!((n, hdr), (1, VnetHdr::default()));
                    rx.push(body);
                }
            }
            i += n;
            rings += 1;
        }
        assert_eq!(counters.rx_dropped, 0);
        let back: Vec<&[u8]> = rx.iter().collect();
        let want: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        assert_eq!(back, want);
        for f in back {
            RoceRepr::parse(f).expect("parses, ICRC intact");
        }
        rings
    }

    /// Trains are of adjacent frames only: two QPs' frames interleaved
    /// (a frame of the other flow ends each) go out one by one, and a
    /// frame of the flow that cannot join (a retransmission) ends its
    /// train too.
    #[test]
    fn a_train_is_of_adjacent_frames_of_one_flow() {
        let (a, b) = (
            |k: u16| roce(100 + k, k as u32, 1024, 9),
            |k: u16| roce(500 + k, k as u32, 1024, 10),
        );
        let mixed = vec![a(0), b(0), a(1), b(1), a(2), b(2)];
        assert_eq!(through(&mixed, 65536), 6, "adjacent only: no trains");
        let batch = vec![a(0), a(1), a(5), a(6), b(0), b(1)];
        assert_eq!(through(&batch, 65536), 3, "a(0..2), a(5..7), b(0..2)");
    }

    #[test]
    fn trains_go_out_as_one_super_frame_and_come_back_whole() {
        let full: Vec<Vec<u8>> = (0..8).map(|i| roce(100 + i, i as u32, 1024, 9)).collect();
        assert_eq!(through(&full, 65536), 1);
        // a shorter last one closes the train
        let mut tail = full.clone();
        tail.push(roce(108, 8, 100, 9));
        tail.push(roce(109, 9, 1024, 9));
        assert_eq!(through(&tail, 65536), 2);
        // another flow, or an identification out of step, starts another
        let mut mixed = full[..3].to_vec();
        mixed.push(roce(103, 3, 1024, 10));
        mixed.push(roce(200, 4, 1024, 9));
        assert_eq!(through(&mixed, 65536), 3);
        // the ring frame's room, and Linux's 64 segments, bound a train
        assert_eq!(through(&full, 3 * 1100), 3);
        let many: Vec<Vec<u8>> = (0..70).map(|i| roce(i, i as u32, 256, 9)).collect();
        assert_eq!(through(&many, 65536), 2);
    }

    #[test]
    fn the_header_is_the_uapi_struct() {
        // struct virtio_net_hdr: u8 flags, u8 gso_type, __virtio16 hdr_len,
        // gso_size, csum_start, csum_offset
        let h = VnetHdr {
            flags: 1,
            gso_type: 5,
            hdr_len: 0x0102,
            gso_size: 0x0304,
            csum_start: 0x0506,
            csum_offset: 0x0708,
        };
        let mut b = [0u8; VNET_LEN];
        h.write(&mut b);
        assert_eq!(b[..2], [1, 5]);
        assert_eq!(b[4..6], 0x0304u16.to_ne_bytes());
        assert_eq!(VnetHdr::read(&b), h);
        assert_eq!(h.udp_segment(), Some(0x0304));
        assert_eq!(VnetHdr::default().udp_segment(), None);
    }
}
