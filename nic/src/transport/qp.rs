//! Per-QP state shared by the requester, responder and completer, and the
//! header template frames are built from.

use super::counters::Counters;
use crate::time::Instant;
use crate::verbs::{AhAttr, QpState, RecvWr, SendWr};
use std::collections::VecDeque;
use wire::{
    EthernetAddress, EthernetRepr, Gid, IpRepr, Ipv4Repr, Ipv6Repr, Operation, Psn, UdpChecksum,
    UdpRepr, ROCEV2_PORT,
};

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

/// Ethernet/IP/UDP headers of a QP's frames (fixed once the QP has a path).
#[derive(Clone, Copy, Debug)]
pub struct HeaderTemplate {
    pub eth: EthernetRepr,
    pub ip: IpRepr,
    pub udp: UdpRepr,
    pub udp_checksum: UdpChecksum,
}

impl HeaderTemplate {
    /// Headers from `src` to the peer `ah`; the UDP source port follows the
    /// Linux rule (`rdma_get_udp_sport`) so our frames match rxe's.
    pub fn new(
        src_mac: EthernetAddress,
        src_gid: Gid,
        ah: &AhAttr,
        local_qpn: u32,
        remote_qpn: u32,
    ) -> Self {
        let dscp = ah.traffic_class >> 2;
        let ecn = ah.traffic_class & 3;
        let ip = match (src_gid.to_ipv4(), ah.dgid.to_ipv4()) {
            (Some(src), Some(dst)) => IpRepr::V4(Ipv4Repr {
                src,
                dst,
                dscp,
                ecn,
                ident: 0,
                dont_frag: true,
                ttl: ah.hop_limit,
            }),
            _ => IpRepr::V6(Ipv6Repr {
                src: std::net::Ipv6Addr::from(src_gid.0),
                dst: std::net::Ipv6Addr::from(ah.dgid.0),
                dscp,
                ecn,
                flow_label: ah.flow_label,
                hop_limit: ah.hop_limit,
            }),
        };
        HeaderTemplate {
            eth: EthernetRepr {
                dst: ah.dmac,
                src: src_mac,
                vlan: ah.vlan,
                ethertype: 0,
            },
            ip,
            udp: UdpRepr {
                src_port: wire::udp::rdma_udp_sport(ah.flow_label, local_qpn, remote_qpn),
                dst_port: ROCEV2_PORT,
            },
            udp_checksum: UdpChecksum::default_for(&ip),
        }
    }
}

impl HeaderTemplate {
    /// Whether a received packet's IP header `ip` comes from the peer these
    /// headers address and to the address they send from (the same IP
    /// version, both addresses swapped).
    #[inline]
    pub fn is_from_peer(&self, ip: &IpRepr) -> bool {
        match (&self.ip, ip) {
            (IpRepr::V4(ours), IpRepr::V4(theirs)) => {
                theirs.src == ours.dst && theirs.dst == ours.src
            }
            (IpRepr::V6(ours), IpRepr::V6(theirs)) => {
                theirs.src == ours.dst && theirs.dst == ours.src
            }
            _ => false,
        }
    }
}

/// A posted send WQE and its progress.
#[derive(Debug)]
pub struct SendWqe {
    pub wr: SendWr,
    /// IBV_SEND_INLINE: the data, copied at post time.
    pub inline: Option<Box<[u8]>>,
    /// Message length in bytes.
    pub len: u64,
    /// Whether its first packet has gone out (and `first_psn` is fixed).
    pub started: bool,
    pub first_psn: Psn,
    /// PSNs the message occupies (READ: one per response packet).
    pub npkts: u32,
    /// READ: bytes of response received so far.
    pub read_done: u64,
    pub signaled: bool,
    /// The WQE finished locally while WQEs before it were still in
    /// flight — a local operation (BIND_MW, LOCAL_INV) executed, or a local
    /// error found when it was due to be sent: it completes with this
    /// status once they have (IBA 10.8.5: send completions are returned in
    /// posting order).
    pub local_status: Option<crate::verbs::WcStatus>,
}

impl SendWqe {
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.max(1) - 1)
    }
    /// Whether packet `psn` belongs to this WQE (a local operation has no
    /// packets).
    pub fn contains(&self, psn: Psn) -> bool {
        self.started && !self.wr.op.is_local() && psn.in_window(self.first_psn, self.npkts.max(1))
    }
}

/// Requester and completer state (one side of the send queue).
#[derive(Debug, Default)]
pub struct Requester {
    /// Posted, not yet completed, oldest first.
    pub sq: VecDeque<SendWqe>,
    /// Index in `sq` of the WQE whose next packet goes out next.
    pub cur: usize,
    /// Bytes of `sq[cur]` already sent (or, for a READ, the offset to ask from).
    pub cur_off: u64,
    /// Next PSN to send.
    pub npsn: Psn,
    /// Oldest PSN not yet acknowledged.
    pub una: Psn,
    /// READs and atomics sent and not completed.
    pub rd_atomic_outstanding: u32,
    /// Packets sent since the last one with AckReq.
    pub noack_pkts: u32,
    pub retry_left: u8,
    pub rnr_left: u8,
    pub ack_deadline: Option<Instant>,
    /// Sending is held until this RNR NAK timer expires.
    pub rnr_deadline: Option<Instant>,
    /// One past the highest PSN ever sent: responses up to here answer
    /// something we sent, even after a go-back-N rewind moved `npsn` back.
    pub high: Psn,
    /// One past the highest PSN an ACK or NAK has acknowledged. WQEs behind
    /// an unanswered READ cannot complete yet, but their packets need not
    /// be sent again (an ACK acknowledges every earlier packet, IBA 9.7.5.2).
    pub acked: Psn,
    /// The first missing READ/atomic response an implied NAK last resent
    /// from (once per gap, `implied_nak`); forgotten on progress.
    pub read_retry: Option<Psn>,
}

impl Requester {
    pub fn outstanding(&self) -> bool {
        self.una != self.high
    }
}

/// A response the responder owes, in PSN order.
#[derive(Clone, Copy, Debug)]
pub enum Response {
    Ack {
        psn: Psn,
        syndrome: wire::Syndrome,
        msn: u32,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
    Read(ReadJob),
}

impl Response {
    /// The PSN of the next frame this response sends.
    pub fn psn(&self) -> Psn {
        match *self {
            Response::Ack { psn, .. } | Response::AtomicAck { psn, .. } => psn,
            Response::Read(job) => job.psn,
        }
    }
}

/// A READ being answered: responses from `psn` on, `remaining` bytes of
/// `rkey` memory from `va`.
#[derive(Clone, Copy, Debug)]
pub struct ReadJob {
    pub psn: Psn,
    pub va: u64,
    pub rkey: u32,
    pub remaining: u64,
    /// No response of this job has gone out yet.
    pub first: bool,
    pub msn: u32,
    /// Answers a duplicate READ (a replay from the responder resources); it
    /// does not count against max_dest_rd_atomic.
    pub replay: bool,
}

/// A READ or atomic remembered for duplicates (the responder resources of
/// IBA 9.7.5.1.3 / C9-111: atomics are replayed, never re-executed).
#[derive(Clone, Copy, Debug)]
pub enum Resource {
    Read {
        first_psn: Psn,
        npkts: u32,
        va: u64,
        rkey: u32,
        len: u64,
        msn: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
        msn: u32,
    },
}

/// The message the responder is in the middle of.
#[derive(Clone, Copy, Debug)]
pub enum InMessage {
    Send {
        recv: RecvWr,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        remaining: u64,
        total: u64,
    },
}

impl InMessage {
    pub fn operation(&self) -> Operation {
        match self {
            InMessage::Send { .. } => Operation::Send,
            InMessage::Write { .. } => Operation::Write,
        }
    }
}

/// Responder state.
#[derive(Debug, Default)]
pub struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number: completed request messages, 24 bits.
    pub msn: u32,
    pub in_msg: Option<InMessage>,
    /// A PSN sequence error NAK was sent for the current gap (IBA C9-97:
    /// one NAK per out-of-sequence condition).
    pub nak_sent: bool,
    /// UC: drop packets until the next FIRST or ONLY.
    pub uc_discard: bool,
    pub responses: VecDeque<Response>,
    pub resources: VecDeque<Resource>,
    /// Move to ERR once the pending responses have gone out (class C errors
    /// NAK first, then fail the QP).
    pub error_after_flush: bool,
    /// The affiliated asynchronous event raised when it does.
    pub error_event: Option<crate::verbs::AsyncEvent>,
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
    pub req: Requester,
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
            req: Requester::default(),
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

    /// States in which the send queue processes work (IBA 10.3.1).
    pub fn can_send(&self) -> bool {
        matches!(self.state, QpState::Rts)
    }

    /// States in which the receive side takes packets.
    pub fn can_receive(&self) -> bool {
        matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }
}
