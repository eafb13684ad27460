//! Work requests posted and not yet completed, per work queue, so that a
//! device whose daemon went away can still complete every one of them
//! with `IBV_WC_WR_FLUSH_ERR` on its CQ, as a failed RNIC's queues are
//! flushed (IBA 10.3.1: WRs of a QP in the Error state complete with
//! flush errors; the rings alone cannot say which WRs the daemon had
//! finished, since it frees a ring slot when it takes the WQE).
//!
//! Kept on the data path without a system call: a post records its WR,
//! a polled CQE retires what it completes ([`Outstanding::retire`]).

use super::*;
use crate::datapath::wc_status;
use nic::verbs::WcStatus;
use std::sync::Arc;

/// One posted work request.
#[derive(Clone, Copy, Debug)]
pub struct Posted {
    pub wr_id: u64,
    /// The `enum ibv_wc_opcode` its completion carries.
    pub opcode: c_int,
    /// A send that completes even when it succeeds (IBV_SEND_SIGNALED or
    /// `sq_sig_all`; receives always do).
    pub signaled: bool,
}

/// The WRs of one work queue, oldest first.
#[derive(Debug)]
pub struct Outstanding {
    q: VecDeque<Posted>,
    /// More than this are never in flight: the daemon holds at most a
    /// ring's worth beside the ring's own (older entries have completed
    /// without a CQE, as unsignaled sends do).
    cap: usize,
    /// Completions retire WRs in posting order (a QP's own queues, IBA
    /// 10.8.5); an SRQ's receives complete in any order.
    in_order: bool,
}

/// An [`Outstanding`] shared by the queue's poster and its CQs' pollers.
pub type SharedWrs = Arc<Mutex<Outstanding>>;

impl Outstanding {
    /// The WRs of a queue of `entries` ring slots.
    pub fn shared(entries: u32, in_order: bool) -> SharedWrs {
        Arc::new(Mutex::new(Outstanding {
            q: VecDeque::new(),
            cap: 2 * entries as usize,
            in_order,
        }))
    }

    /// Records a WR the ring took.
    pub fn posted(&mut self, p: Posted) {
        if self.q.len() >= self.cap {
            self.q.pop_front();
        }
        self.q.push_back(p);
    }

    /// A completion of `wr_id` (`ok`: successful) was polled. In order: it
    /// retires its WR and every WR posted before it — a successful send's
    /// completion stands for the first signaled WR (unsignaled ones before
    /// it completed silently), an unsuccessful one for the first WR with
    /// its `wr_id` (errors complete signaled or not). Out of order: the
    /// first WR with its `wr_id`.
    pub fn retire(&mut self, wr_id: u64, ok: bool) {
        let hit = if self.in_order && ok {
            self.q.iter().position(|p| p.signaled)
        } else {
            self.q.iter().position(|p| p.wr_id == wr_id)
        };
        match hit {
            Some(i) if self.in_order => {
                self.q.drain(..=i);
            }
            Some(i) => {
                self.q.remove(i);
            }
            None => {}
        }
    }

    /// How many WRs are posted and not yet completed.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Forgets every WR: a QP moved to Reset has no WQEs (IBA 10.3.1).
    pub fn clear(&mut self) {
        self.q.clear();
    }

    /// The oldest WR not completed, taken out to be flushed.
    pub fn take(&mut self) -> Option<Posted> {
        self.q.pop_front()
    }
}

/// A QP as one of its CQs sees it: the queues whose completions go there.
pub struct Attached {
    pub qpn: u32,
    pub send: Option<SharedWrs>,
    /// The QP's receive queue, or its SRQ's.
    pub recv: Option<SharedWrs>,
}

/// Lets QP `qpn`'s completions retire its WRs: its sends on `send.0`,
/// its receives (its own queue's or its SRQ's) on `recv.0`.
pub fn attach(qpn: u32, send: (&Cq, &SharedWrs), recv: (&Cq, Option<SharedWrs>)) {
    let mine = Attached {
        qpn,
        send: Some(send.1.clone()),
        recv: None,
    };
    if std::ptr::eq(send.0, recv.0) {
        send.0.attach(Attached {
            recv: recv.1,
            ..mine
        });
    } else {
        send.0.attach(mine);
        recv.0.attach(Attached {
            qpn,
            send: None,
            recv: recv.1,
        });
    }
}

/// Whether a CQE's opcode is a receive's (`IBV_WC_RECV` and up).
pub fn is_recv_opcode(opcode: c_int) -> bool {
    opcode & IBV_WC_RECV != 0
}

impl Cq {
    /// Counts the completion `wc` against the WR it completes.
    pub fn retire(&self, wc: &ibv_wc) {
        let qps = lock(&self.attached);
        let Some(a) = qps.iter().find(|a| a.qpn == wc.qp_num) else {
            return;
        };
        let q = if is_recv_opcode(wc.opcode) {
            &a.recv
        } else {
            &a.send
        };
        if let Some(q) = q {
            lock(q).retire(wc.wr_id, wc.status == wc_status(WcStatus::Success));
        }
    }

    /// Up to `max` flush completions of the WRs still outstanding on the
    /// queues that complete here, each handed to `out`; their count.
    pub fn flush(&self, max: usize, mut out: impl FnMut(ibv_wc)) -> usize {
        let qps = lock(&self.attached);
        let mut n = 0;
        for a in qps.iter() {
            for q in [&a.send, &a.recv].into_iter().flatten() {
                let mut g = lock(q);
                while n < max {
                    let Some(p) = g.take() else { break };
                    out(ibv_wc {
                        wr_id: p.wr_id,
                        status: wc_status(WcStatus::WrFlushErr),
                        opcode: p.opcode,
                        qp_num: a.qpn,
                        ..Default::default()
                    });
                    n += 1;
                }
            }
        }
        n
    }

    /// Lets completions on this CQ retire the WRs of `a`'s queues.
    pub fn attach(&self, a: Attached) {
        lock(&self.attached).push(a);
    }

    /// Forgets QP `qpn` (destroyed).
    pub fn detach(&self, qpn: u32) {
        lock(&self.attached).retain(|a| a.qpn != qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wr(wr_id: u64, signaled: bool) -> Posted {
        Posted {
            wr_id,
            opcode: IBV_WC_SEND,
            signaled,
        }
    }

    fn left(q: &SharedWrs) -> Vec<u64> {
        let mut g = lock(q);
        std::iter::from_fn(|| g.take().map(|p| p.wr_id)).collect()
    }

    #[test]
    fn a_send_completion_retires_the_unsignaled_sends_before_it() {
        let q = Outstanding::shared(8, true);
        for (id, sig) in [(1, false), (2, false), (3, true), (4, false), (5, true)] {
            lock(&q).posted(wr(id, sig));
        }
        lock(&q).retire(3, true);
        assert_eq!(left(&q), [4, 5]);
    }

    #[test]
    fn an_error_completion_retires_its_wr_and_those_before() {
        let q = Outstanding::shared(8, true);
        for (id, sig) in [(1, false), (2, false), (3, true)] {
            lock(&q).posted(wr(id, sig));
        }
        // an unsignaled WR that fails completes all the same
        lock(&q).retire(2, false);
        assert_eq!(left(&q), [3]);
        // a completion of nothing outstanding retires nothing
        lock(&q).posted(wr(6, true));
        lock(&q).retire(9, false);
        assert_eq!(left(&q), [6]);
    }

    #[test]
    fn srq_receives_retire_in_any_order() {
        let q = Outstanding::shared(8, false);
        for id in [1, 2, 3] {
            lock(&q).posted(wr(id, true));
        }
        lock(&q).retire(2, true);
        assert_eq!(left(&q), [1, 3]);
    }

    #[test]
    fn no_more_than_two_rings_are_kept() {
        let q = Outstanding::shared(2, true);
        for id in 1..=6 {
            lock(&q).posted(wr(id, false));
        }
        assert_eq!(left(&q), [3, 4, 5, 6]);
    }
}
