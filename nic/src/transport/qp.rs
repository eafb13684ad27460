//! Per-QP state shared by the requester, responder and completer.

use super::completer::Completer;
use super::counters::Counters;
use super::header::HeaderTemplate;
use super::requester::Requester;
use super::responder::Responder;
use super::sq::SendQueue;
use crate::verbs::{AhAttr, QpState, RecvWr};
use std::collections::VecDeque;

/// How a QP was created.
#[derive(Clone, Copy, Debug)]
pub struct QpInit {
    pub qp_type: wire::QpType,
    pub pd: u32,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub srq: Option<u32>,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    /// Every send WQE generates a completion (`sq_sig_all`).
    pub sq_sig_all: bool,
}

/// One queue pair.
pub struct Qp {
    pub qpn: u32,
    pub init: QpInit,
    pub state: QpState,
    pub access: u32,
    pub qkey: u32,
    pub pkey: u16,
    pub ah: Option<AhAttr>,
    pub mtu: u32,
    pub dest_qpn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub hdr: Option<HeaderTemplate>,
    /// Posted send WQEs, shared by the requester and the completer.
    pub sq: SendQueue,
    pub req: Requester,
    pub comp: Completer,
    pub resp: Responder,
    pub rq: VecDeque<RecvWr>,
    pub counters: Counters,
    /// Queued for transmission in the device's round robin.
    pub scheduled: bool,
    /// COMM_EST was raised (once per QP life: RTR is entered once).
    pub comm_est: bool,
    /// In SQD and SQ_DRAINED not raised yet.
    pub drain_pending: bool,
    /// DCQCN reaction point, pacer, notification point.
    pub(crate) cc: super::congestion::QpCc,
}

impl Qp {
    pub fn new(qpn: u32, init: QpInit, cfg: &super::RnicConfig) -> Qp {
        Qp {
            cc: super::congestion::QpCc::new(&cfg.cc, cfg.link_bps),
            qpn,
            init,
            state: QpState::Reset,
            access: 0,
            qkey: 0,
            pkey: wire::bth::DEFAULT_PKEY,
            ah: None,
            // UD: the port's active MTU; RC and UC: set by modify_qp(RTR)
            mtu: if init.qp_type == wire::QpType::Ud {
                cfg.port_mtu
            } else {
                1024
            },
            dest_qpn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            hdr: None,
            sq: SendQueue::new(),
            req: Requester::default(),
            comp: Completer::default(),
            resp: Responder::default(),
            rq: VecDeque::new(),
            counters: Counters::default(),
            scheduled: false,
            comm_est: false,
            drain_pending: false,
        }
    }

    pub fn qp_type(&self) -> wire::QpType {
        self.init.qp_type
    }
}
