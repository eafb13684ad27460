//! Sending with UDP GSO straight from the batch: one `sendmmsg(2)` per
//! batch on a second, ring-less packet socket, each message a virtio-net
//! header, the super-frame's headers and the train's payloads gathered by
//! iovecs from the batch's own slots.
//!
//! The TX ring costs two copies a byte where this costs one: ours into the
//! ring, and the kernel's of the ring's pages (a packet socket's ring skb
//! holds them by reference, and a veth must copy such an skb before it
//! crosses into the peer's namespace, a page allocation per 4 KiB). Here
//! the kernel copies the payloads once, into an skb of its own.

use super::gso::{self, VNET_LEN};
use super::sys;
use crate::io::{FrameBatch, PortCounters};
use std::io;
use std::os::fd::OwnedFd;
use wire::gso::{HEADERS_LEN, MAX_PAYLOAD};

/// The send buffer asked for. What it holds is in flight behind the
/// device (a veth hands each skb on at once, a NIC's qdisc queues it), and
/// a full one holds the rest back in the send queues (`Port::tx_room`):
/// 1 MiB is ~16 super-frames, fewer MTU frames than a qdisc's default 1000
/// packets, so a slow device pushes back before its queue drops.
const SNDBUF: libc::c_int = 1 << 20;

/// The sending socket.
pub(super) struct Direct {
    fd: OwnedFd,
    /// The last send found the send buffer full: until it drains, the port
    /// takes nothing ([`Self::room`]).
    blocked: bool,
    m: Messages,
}

/// The messages of one batch.
#[derive(Default)]
struct Messages {
    /// Per message: its virtio-net header and, for a train, the
    /// super-frame's headers.
    heads: Vec<[u8; VNET_LEN + HEADERS_LEN]>,
    /// Per message: its frames, a range of batch indices (the messages'
    /// ranges follow each other from 0).
    members: Vec<(usize, usize)>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs` and `msgs` are scratch, rewritten by
// every `send` before use and never read after it returns; `Messages`
// owns nothing they point at.
unsafe impl Send for Messages {}

impl Direct {
    /// A sending socket on interface `ifindex`.
    pub(super) fn open(ifindex: i32) -> Result<Direct, super::AfPacketError> {
        Ok(Direct {
            fd: sys::send_socket(ifindex, SNDBUF)?,
            blocked: false,
            m: Messages::default(),
        })
    }

    /// `want`, or 0 while the send buffer is full.
    pub(super) fn room(&mut self, want: usize) -> usize {
        if self.blocked && sys::writable(&self.fd) {
            self.blocked = false;
        }
        if self.blocked {
            0
        } else {
            want
        }
    }

    /// Sends a prefix of `batch`, trains as UDP GSO super-frames, and
    /// returns how many frames went out. The prefix ends at a frame longer
    /// than the link takes, a message the socket refuses, or a full send
    /// buffer; the frames from there on count dropped (`Port::send`).
    pub(super) fn send(
        &mut self,
        mtu: usize,
        counters: &mut PortCounters,
        batch: &FrameBatch,
    ) -> usize {
        let limit = batch
            .iter()
            .position(|f| !super::fits_link(f, mtu))
            .unwrap_or(batch.len());
        let m = &mut self.m;
        m.plan(batch, limit);
        m.build(batch);
        // messages sent: each a run of frames, in batch order
        let mut at = 0;
        while at < m.msgs.len() {
            // SAFETY: the iovecs point into `m.heads` and the batch's
            // slots, both borrowed unchanged for the whole call.
            match unsafe { sys::sendmmsg(&self.fd, &mut m.msgs[at..]) } {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(e) => {
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.raw_os_error() == Some(libc::ENOBUFS)
                    {
                        self.blocked = true;
                    }
                    break;
                }
            }
        }
        let sent = at.checked_sub(1).map_or(0, |last| m.members[last].1);
        for f in batch.iter().take(sent) {
            counters.sent(f.len());
        }
        counters.tx_dropped += (batch.len() - sent) as u64;
        sent
    }
}

impl Messages {
    /// Splits `batch[..limit]` into messages: each frame's train.
    fn plan(&mut self, batch: &FrameBatch, limit: usize) {
        self.heads.clear();
        self.members.clear();
        let mut i = 0;
        while i < limit {
            let p = gso::plan(batch, i, limit, MAX_PAYLOAD);
            let mut head = [0u8; VNET_LEN + HEADERS_LEN];
            head[..VNET_LEN].copy_from_slice(&p.vnet());
            if let Some(t) = p.train() {
                t.write_headers(batch.get(i), &mut head[VNET_LEN..]);
            }
            let r = p.members();
            self.members.push((r.start, r.end));
            self.heads.push(head);
            i = r.end;
        }
    }

    /// The iovecs and message headers of the planned messages.
    fn build(&mut self, batch: &FrameBatch) {
        self.iovs.clear();
        self.msgs.clear();
        let iov = |b: &[u8]| libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        };
        for (m, &(from, to)) in self.members.iter().enumerate() {
            let head = &self.heads[m];
            if to - from > 1 {
                self.iovs.push(iov(head));
                for k in from..to {
                    self.iovs.push(iov(&batch.get(k)[HEADERS_LEN..]));
                }
            } else {
                self.iovs.push(iov(&head[..VNET_LEN]));
                self.iovs.push(iov(batch.get(from)));
            }
        }
        // (the iovecs are all in place: their addresses hold from here)
        let mut at = 0;
        for &(from, to) in &self.members {
            let n = if to - from > 1 { 1 + to - from } else { 2 };
            // SAFETY: msghdr is plain integers and pointers, for which all
            // zeroes (no name, no control data) is a valid value.
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_iov = self.iovs[at..].as_mut_ptr();
            h.msg_iovlen = n as _;
            self.msgs.push(libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            });
            at += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::gso::tests::{fill, roce};
    use super::*;

    /// The bytes of message `m`: its iovecs one after another.
    fn message(d: &Messages, m: usize) -> Vec<u8> {
        let h = &d.msgs[m].msg_hdr;
        let mut out = Vec::new();
        for k in 0..h.msg_iovlen {
            // SAFETY: `build` pointed msg_iov at msg_iovlen iovecs in
            // `d.iovs`, unchanged since.
            let v = unsafe { &*h.msg_iov.add(k) };
            // SAFETY: each iovec points at a live buffer (the test's batch
            // or `d.heads`) of iov_len bytes, unchanged since `build`.
            let bytes = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) };
            out.extend_from_slice(bytes);
        }
        out
    }

    #[test]
    fn messages_carry_what_a_ring_frame_would() {
        // two QPs' turns of frames, a lone frame of a third, a shorter
        // last frame closing a train, a frame of a flow that went before
        let (a, b) = (
            |k: u16, len| roce(100 + k, k as u32, len, 9),
            |k: u16, len| roce(500 + k, k as u32, len, 10),
        );
        let frames = vec![
            a(0, 1024),
            a(1, 1024),
            b(0, 1024),
            b(1, 1024),
            roce(7, 0, 100, 11),
            a(2, 1024),
            a(3, 300),
            b(2, 1024),
        ];
        let mut batch = FrameBatch::new(frames.len());
        for f in &frames {
            assert!(batch.push(f));
        }
        let mut d = Messages::default();
        d.plan(&batch, batch.len());
        d.build(&batch);
        // runs of one flow's adjacent frames: a's two, b's two, the lone
        // one, a's two (the shorter last closing the train), b's one
        assert_eq!(d.members, [(0, 2), (2, 4), (4, 5), (5, 7), (7, 8)]);
        for (m, &(first, _)) in d.members.iter().enumerate() {
            let mut ring = vec![0u8; 65536];
            let (_, len) = fill(&batch, first, batch.len(), &mut ring);
            assert_eq!(message(&d, m), ring[..len], "message {m}");
        }
    }
}
