//! Asynchronous events of the device (`ibv_get_async_event`).

/// An asynchronous event of the device (`ibv_get_async_event`), with the
/// QPN, CQ or SRQ number it is affiliated with (IBTA 11.6.3 "Asynchronous
/// Events"; rdma-core `enum ibv_event_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AsyncEvent {
    /// IBV_EVENT_CQ_ERR: the CQ overran (IBA 11.4.2.1: a CQ overrun is an
    /// asynchronous error of the CQ). Raised once, when it overruns.
    CqErr(u32),
    /// IBV_EVENT_QP_FATAL (IBTA "Local Work Queue Catastrophic Error": an
    /// error the CI cannot report through the CQ): the QP's CQ overran, so
    /// its completions cannot be delivered, and the QP went to ERR.
    QpFatal(u32),
    /// IBV_EVENT_QP_REQ_ERR (IBTA "Invalid Request Local Work Queue
    /// Error"): the RC responder NAKed an invalid request and the QP went
    /// to ERR (IBA 9.9.3, class C responder errors).
    QpReqErr(u32),
    /// IBV_EVENT_QP_ACCESS_ERR (IBTA "Local Access Violation Work Queue
    /// Error"): the RC responder NAKed a remote access error and the QP went
    /// to ERR.
    QpAccessErr(u32),
    /// IBV_EVENT_COMM_EST (IBTA 11.6.3.1 "Communication Established"): the
    /// first packet arrived on an RC or UC QP in RTR (once per RTR).
    CommEst(u32),
    /// IBV_EVENT_SQ_DRAINED (IBTA 11.6.3.1 "Send Queue Drained"): the QP is
    /// in SQD and every send message in progress has completed (once per
    /// transition to SQD).
    SqDrained(u32),
    /// IBV_EVENT_QP_LAST_WQE_REACHED (IBA 10.2.9.5 / 11.6.3.1 "Last WQE
    /// Reached"): a QP attached to an SRQ went to ERR; it takes no more
    /// receive WQEs from the SRQ.
    QpLastWqeReached(u32),
    /// IBV_EVENT_SRQ_LIMIT_REACHED: fewer receive WQEs than the armed limit
    /// are left on the SRQ; the limit is disarmed (IBTA: the "SRQ Limit
    /// Reached" affiliated asynchronous event; `ibv_modify_srq` re-arms).
    SrqLimitReached(u32),
    /// IBV_EVENT_PORT_ACTIVE (IBTA 11.6.3.2, unaffiliated "Port Active"):
    /// the link of port `n` came up; the port is ACTIVE again.
    PortActive(u8),
    /// IBV_EVENT_PORT_ERR (IBTA 11.6.3.2, unaffiliated "Port Error" / link
    /// down): the link of port `n` went down; the port is DOWN.
    PortErr(u8),
}

/// The object an [`AsyncEvent`] is affiliated with; a port for the
/// unaffiliated events (`ibv_async_event.element.port_num`), which concern
/// every user of the device.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Affiliated {
    Qp(u32),
    Cq(u32),
    Srq(u32),
    Port(u8),
}

impl AsyncEvent {
    /// The QP, CQ or SRQ the event is about (`ibv_async_event.element`).
    pub fn affiliated(&self) -> Affiliated {
        match *self {
            AsyncEvent::CqErr(c) => Affiliated::Cq(c),
            AsyncEvent::SrqLimitReached(s) => Affiliated::Srq(s),
            AsyncEvent::QpFatal(q)
            | AsyncEvent::QpReqErr(q)
            | AsyncEvent::QpAccessErr(q)
            | AsyncEvent::CommEst(q)
            | AsyncEvent::SqDrained(q)
            | AsyncEvent::QpLastWqeReached(q) => Affiliated::Qp(q),
            AsyncEvent::PortActive(p) | AsyncEvent::PortErr(p) => Affiliated::Port(p),
        }
    }

    /// The event's number in rdma-core's `enum ibv_event_type`.
    pub fn ibv_event_type(&self) -> u32 {
        match self {
            AsyncEvent::CqErr(_) => 0,
            AsyncEvent::QpFatal(_) => 1,
            AsyncEvent::QpReqErr(_) => 2,
            AsyncEvent::QpAccessErr(_) => 3,
            AsyncEvent::CommEst(_) => 4,
            AsyncEvent::SqDrained(_) => 5,
            AsyncEvent::SrqLimitReached(_) => 15,
            AsyncEvent::QpLastWqeReached(_) => 16,
            AsyncEvent::PortActive(_) => 9,
            AsyncEvent::PortErr(_) => 10,
        }
    }
}
