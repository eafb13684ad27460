//! The resource tables a QP's requester, responder and completer work
//! against: memory regions and windows, CQs, SRQs, PDs, device counters,
//! asynchronous events, drop counts and PFC state.

use super::frame::{self, PutMem};
use super::{header, Counters, RnicConfig};
use crate::time::Instant;
use crate::verbs::{access, AsyncEvent, Cq, KeyError, MrTable, Sgl, Srq, VerbsError, Wc};
use std::collections::VecDeque;
use wire::{BthRepr, ExtHeaders, IpRepr, RoceRepr};

/// Device events kept for the application at most (older ones are dropped
/// and counted as `async_events_dropped`).
const MAX_ASYNC_EVENTS: usize = 1024;

/// Everything but the QPs, so QP methods can borrow both.
pub(crate) struct Resources {
    pub cfg: RnicConfig,
    pub mrs: MrTable,
    pub cqs: Vec<Option<Cq>>,
    pub srqs: Vec<Option<Srq>>,
    pub pds: Vec<bool>,
    /// Counters of QPs since destroyed, plus device-level events.
    pub dev: Counters,
    /// Asynchronous events not yet taken (`Rnic::poll_async_event`).
    pub events: VecDeque<AsyncEvent>,
    /// Which priorities a peer has paused (PFC reaction).
    pub pfc: crate::cc::PfcRx,
    /// PFC generation from the receive backlog (`None`: off).
    pub pfc_tx: Option<crate::cc::PfcTx>,
    /// The latest `now` the device was handed.
    pub now: Instant,
    /// Whether the port's link is up (what the engine last saw).
    pub link_up: bool,
    /// Completions delivered so far: the sequence number of the latest.
    pub completions: u64,
    /// CQs that got a completion since the owner last took the list
    /// (`Rnic::take_ready_cqs`), each once.
    pub ready_cqs: Vec<u32>,
}

impl Resources {
    /// Queues an asynchronous event; beyond `MAX_ASYNC_EVENTS` the oldest
    /// is dropped and counted.
    pub(crate) fn raise(&mut self, ev: AsyncEvent) {
        if self.events.len() >= MAX_ASYNC_EVENTS {
            self.events.pop_front();
            self.dev.async_events_dropped += 1;
        }
        self.events.push_back(ev);
    }

    /// Builds a frame from a QP's header template into `buf`, with a
    /// payload of `payload_len` bytes that `fill` writes straight into the
    /// frame (from registered memory, say: no staging copy, and the ICRC
    /// taken in the same pass). If `fill` fails nothing is sent.
    /// `Ok(None)`: the frame could not be built.
    #[inline]
    pub(crate) fn emit<E>(
        &mut self,
        hdr: &header::HeaderTemplate,
        bth: BthRepr,
        ext: ExtHeaders,
        payload_len: usize,
        buf: &mut [u8],
        fill: impl FnOnce(&Resources, &mut frame::Payload<'_>) -> Result<(), E>,
    ) -> Result<Option<usize>, E> {
        let mut ip = hdr.ip;
        if let IpRepr::V4(v4) = &mut ip {
            // RFC 6864 4.1: the identification of an atomic datagram (DF
            // set, never fragmented) has no meaning and may be any value.
            // The PSN's low 16 bits make it step by one along a QP's packet
            // sequence, so a run of a QP's frames is what UDP segmentation
            // of one super-frame gives back (`wire::gso`).
            v4.ident = bth.psn.value() as u16;
        }
        let repr = RoceRepr {
            eth: hdr.eth,
            ip,
            udp: hdr.udp,
            udp_checksum: hdr.udp_checksum,
            bth,
            ext,
            payload: &[],
            trailer_len: 0,
        };
        let this = &*self;
        let n = frame::emit_with(&repr, payload_len, buf, |dst| fill(this, dst))?;
        Ok(n)
    }

    /// `emit` for a frame without payload.
    pub(crate) fn emit_bare(
        &mut self,
        hdr: &header::HeaderTemplate,
        bth: BthRepr,
        ext: ExtHeaders,
        buf: &mut [u8],
    ) -> Option<usize> {
        let n = self.emit(hdr, bth, ext, 0, buf, |_, _| Ok::<(), ()>(()));
        n.ok().flatten()
    }

    /// Copies the rest of `dst`'s payload (`dst.remaining()` bytes) from
    /// the message described by `sgl`, starting at message offset `off`,
    /// out of registered memory.
    pub(crate) fn gather(
        &self,
        pd: u32,
        sgl: &Sgl,
        mut off: u64,
        dst: &mut frame::Payload<'_>,
    ) -> Result<(), KeyError> {
        for sge in sgl.as_slice() {
            if dst.remaining() == 0 {
                break;
            }
            let len = sge.length as u64;
            if off >= len {
                off -= len;
                continue;
            }
            let n = ((len - off) as usize).min(dst.remaining());
            let (mr, at) = self
                .mrs
                .check_local(sge.lkey, pd, sge.addr + off, n as u64, 0)?;
            dst.put_mem(&*mr.mem, at, n);
            off = 0;
        }
        Ok(())
    }

    /// Copies `src` into the message described by `sgl` at offset `off`.
    pub(crate) fn scatter(
        &self,
        pd: u32,
        sgl: &Sgl,
        mut off: u64,
        src: &[u8],
    ) -> Result<(), KeyError> {
        let mut done = 0;
        for sge in sgl.as_slice() {
            if done == src.len() {
                break;
            }
            let len = sge.length as u64;
            if off >= len {
                off -= len;
                continue;
            }
            let n = ((len - off) as usize).min(src.len() - done);
            let (mr, at) = self.mrs.check_local(
                sge.lkey,
                pd,
                sge.addr + off,
                n as u64,
                access::LOCAL_WRITE,
            )?;
            mr.mem.write(at, &src[done..done + n]);
            done += n;
            off = 0;
        }
        Ok(())
    }

    /// Checks every SGE of a list against the local keys.
    pub(crate) fn check_sgl(&self, pd: u32, sgl: &Sgl, need: u32) -> Result<(), KeyError> {
        for sge in sgl.as_slice().iter().filter(|s| s.length > 0) {
            self.mrs
                .check_local(sge.lkey, pd, sge.addr, sge.length as u64, need)?;
        }
        Ok(())
    }

    /// Delivers a completion. A CQ overrun is counted; the caller's QP then
    /// goes to the error state (IBA 11.4.2.1).
    pub(crate) fn complete(&mut self, cq: u32, wc: Wc) -> Result<(), VerbsError> {
        match self.cqs.get_mut(cq as usize).and_then(|c| c.as_mut()) {
            Some(c) => {
                if !c.listed {
                    c.listed = true;
                    self.ready_cqs.push(cq);
                }
                let was = c.is_overrun();
                self.completions = self.completions.wrapping_add(1);
                let r = c
                    .push(self.completions, wc)
                    .map_err(|_| VerbsError::CqOverrun);
                if !was && c.is_overrun() {
                    // IBA 11.4.2.1: the overrun is an asynchronous CQ error
                    self.raise(AsyncEvent::CqErr(cq));
                }
                r
            }
            None => Err(VerbsError::NoSuchCq(cq)),
        }
    }
}
