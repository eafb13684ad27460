//! Completion queues: polled straight from the shared ring.

use super::*;

/// A completion queue; `poll` reads the shared ring directly.
pub struct Cq {
    pub(super) ctx: Arc<Context>,
    pub handle: u32,
    pub(super) _map: Arc<Mapping>,
    pub(super) ring: Ring,
    pub(super) cons: u32,
    /// Completions in the ring that no longer count: (QP, ring index
    /// before which its completions are skipped), after the QP moved to
    /// Reset ([`Cq::forget_qp`]).
    pub(super) stale: Vec<(u32, u32)>,
    /// The completion-event eventfd, once `req_notify` made one.
    pub(super) events: Option<nic::io::Bell>,
}

impl Cq {
    /// Asks for a completion event (`ibv_req_notify_cq`): the next
    /// completion — with `solicited_only`, the next solicited or
    /// unsuccessful one — makes the CQ's event descriptor readable
    /// ([`Cq::get_event`], [`Cq::event_fd`]). One request, one event. As
    /// with verbs, poll once more after asking: completions that arrived
    /// before the request raise no event.
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        if self.events.is_none() {
            let bell = nic::io::Bell::new()?;
            self.notify_to(bell.as_fd().as_raw_fd())?;
            self.events = Some(bell);
        }
        self.arm(solicited_only);
        Ok(())
    }

    /// Waits up to `timeout` for a completion event (`ibv_get_cq_event`
    /// and its acknowledgement in one); true when one came. Then poll.
    pub fn get_event(&mut self, timeout: Duration) -> Result<bool> {
        self.ctx.pay_owed_wake();
        self.ctx.leave_local();
        let bell = self.events.as_ref().ok_or(Error::NotArmed)?;
        if bell.drain() > 0 {
            return Ok(true);
        }
        bell.wait(None, timeout);
        Ok(bell.drain() > 0)
    }

    /// The descriptor that becomes readable on a completion event (for
    /// poll/epoll, as a completion channel's fd); None before the first
    /// `req_notify`. Read it (8 bytes) or call `get_event` to clear it.
    pub fn event_fd(&self) -> Option<RawFd> {
        use std::os::fd::{AsFd, AsRawFd};
        self.events.as_ref().map(|b| b.as_fd().as_raw_fd())
    }

    /// Asks for completion events written to `fd`, an eventfd the caller
    /// owns and may share between CQs (a completion channel): the daemon
    /// gets a duplicate. Arm with [`Cq::arm`]; [`Cq::armed`] reads 0 once
    /// the daemon has fired the request.
    pub fn notify_to(&mut self, fd: RawFd) -> Result<()> {
        match self
            .ctx
            .request(Request::NotifyCq { cq: self.handle }, Some(fd))?
            .0
        {
            Response::Ok => Ok(()),
            r => Err(unexpected(r)),
        }
    }

    /// Arms the CQ for one event on the descriptor given to
    /// [`Cq::notify_to`] (`ibv_req_notify_cq`).
    pub fn arm(&self, solicited_only: bool) {
        let arm = if solicited_only {
            ring::ARM_SOLICITED
        } else {
            ring::ARM_NEXT
        };
        self.ring.armed().store(arm, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        // a program that asks for an event waits for the engine next
        self.ctx.pay_owed_wake();
    }

    /// The request word the daemon clears when it fires an event.
    pub fn armed(&self) -> u32 {
        self.ring.armed().load(Ordering::SeqCst)
    }

    /// The daemon's count of fired events when it fired this CQ's latest:
    /// of CQs found fired together, the lowest fired first (compare with
    /// wrapping differences).
    pub fn event_seq(&self) -> u32 {
        self.ring.event_seq().load(Ordering::SeqCst)
    }

    /// Hands up to `max` raw completions, oldest first, to `f` and
    /// releases their slots; their count. For callers that convert CQEs to
    /// another layout (the libibverbs drop-in's `ibv_wc`).
    pub fn poll_each(&mut self, max: usize, mut f: impl FnMut(&CqeRaw)) -> usize {
        self.ctx.pay_owed_wake();
        let mut prod = self.ring.producer().load(Ordering::Acquire);
        // empty, and the engine runs in this process: turn it, then look
        if prod == self.cons && self.ctx.turn_local() {
            prod = self.ring.producer().load(Ordering::Acquire);
        }
        let start = self.cons;
        let avail = prod.wrapping_sub(self.cons).min(self.ring.entries);
        let mut n = 0;
        while n < max && self.cons.wrapping_sub(start) < avail {
            let c: CqeRaw = self.ring.read(self.cons);
            let at = self.cons;
            self.cons = self.cons.wrapping_add(1);
            // (indices compare modulo 2^32: `at` is before `upto`)
            let skip = self
                .stale
                .iter()
                .any(|&(q, upto)| q == c.qp_num && (upto.wrapping_sub(at) as i32) > 0);
            if !skip {
                f(&c);
                n += 1;
            }
        }
        if self.cons != start {
            self.ring.consumer().store(self.cons, Ordering::Release);
        }
        if !self.stale.is_empty() {
            let cons = self.cons;
            self.stale
                .retain(|&(_, upto)| (upto.wrapping_sub(cons) as i32) > 0);
        }
        n
    }

    /// QP `qpn` moved to Reset: its completions in the ring now are
    /// skipped, as a QP in Reset has none to deliver (the daemon dropped
    /// those it had not written yet; mlx5 cleans its CQ likewise).
    pub fn forget_qp(&mut self, qpn: u32) {
        let prod = self.ring.producer().load(Ordering::Acquire);
        if prod != self.cons {
            self.stale.push((qpn, prod));
        }
    }

    /// Moves up to `max` completions into `out` (`ibv_poll_cq`).
    pub fn poll(&mut self, max: usize, out: &mut Vec<Wc>) -> usize {
        self.poll_each(max, |c| out.push(ring::decode_cqe(c)))
    }

    /// Polls (spinning, then yielding) until `n` completions arrived.
    pub fn wait(&mut self, n: usize, timeout: Duration) -> Result<Vec<Wc>> {
        let t0 = Instant::now();
        let mut out = Vec::with_capacity(n);
        let mut spins = 0u32;
        while out.len() < n {
            if self.poll(n - out.len(), &mut out) == 0 {
                if self.ctx.is_dead() {
                    return Err(Error::DeviceGone);
                }
                if t0.elapsed() > timeout {
                    return Err(Error::Timeout);
                }
                spins += 1;
                if spins > 1000 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        Ok(out)
    }

    pub fn destroy(self) -> Result<()> {
        self.destroy_by_ref()
    }

    /// `destroy` that leaves the CQ usable when the daemon refuses (a QP
    /// still uses it).
    pub fn destroy_by_ref(&self) -> Result<()> {
        self.ctx.simple(Request::DestroyCq { cq: self.handle })
    }

    /// `ibv_resize_cq`: the ring becomes one of at least `cqe` slots
    /// holding the completions not yet polled (the daemon refuses a size
    /// they do not fit in); the new number of slots.
    pub fn resize(&mut self, cqe: u32) -> Result<u32> {
        let (r, fds) = self.ctx.request(
            Request::ResizeCq {
                cq: self.handle,
                cqe,
            },
            None,
        )?;
        let (cq, map, ring) = super::cq_ring(r, fds)?;
        if cq != self.handle {
            return Err(ProtocolError::BadRings("CQ").into());
        }
        self.ring = ring;
        self._map = map;
        // the new ring's indices are its own
        self.stale.clear();
        Ok(self.ring.entries)
    }

    /// Whether the device's daemon has gone away ([`Context::is_dead`]):
    /// what the ring holds is all that will ever come.
    pub fn device_dead(&self) -> bool {
        self.ctx.is_dead()
    }

    /// Slots in the CQ ring.
    pub fn entries(&self) -> u32 {
        self.ring.entries
    }
}
