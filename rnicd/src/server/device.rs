//! Requests about the device as a whole: its attributes, its port, the
//! engine's bell, asynchronous events, its QPs' congestion state.

use super::{event_fd, ok, one_fd, Attach, Reply, RequestError, Shared, MAX_CQE, MAX_QP_WR};
use ipc::proto::{CcStates, PortInfo, QpCcState, Response, CC_STATES_PER_PAGE};
use nic::verbs::MAX_SGE;
use std::os::fd::{AsFd, OwnedFd};

/// Most events one `GetAsyncEvents` answer carries.
const EVENTS_PER_ANSWER: usize = 64;

/// `QueryDevice`: the device's attributes and limits.
pub(super) fn query_device(sh: &Shared) -> Result<Reply, RequestError> {
    Ok((
        Response::Device {
            name: sh.cfg.name.clone(),
            gid: sh.cfg.gid.0,
            mac: sh.mac,
            mtu: sh.mtu,
            max_qp_wr: MAX_QP_WR,
            max_cqe: MAX_CQE,
            max_sge: MAX_SGE as u32,
            netdev: sh.cfg.netdev.clone(),
        },
        None,
    ))
}

/// `QueryPort`: the one port's state, MTUs and speed.
pub(super) fn query_port(sh: &Shared, port: u8) -> Result<Reply, RequestError> {
    if port != 1 {
        return Err(RequestError::NoPort(port));
    }
    let p = super::call(sh, |r| r.port_attr())?;
    Ok((Response::Port(PortInfo::from(&p)), None))
}

/// `CcStates`: the DCQCN state of the device's QPs from QPN `from_qpn`
/// on, one page, as of the device's latest instant.
pub(super) fn cc_states(sh: &Shared, from_qpn: u32) -> Result<Reply, RequestError> {
    let mut page = super::call(sh, move |r| {
        let now = r.last_now();
        CcStates {
            now_ns: now.as_nanos(),
            line_bps: r.config().link_bps,
            qps: r
                .cc_states(now)
                .filter(|(qpn, _)| *qpn >= from_qpn)
                .take(CC_STATES_PER_PAGE + 1)
                .map(QpCcState::from)
                .collect(),
            next_qpn: None,
        }
    })?;
    if page.qps.len() > CC_STATES_PER_PAGE {
        page.next_qpn = page.qps.pop().map(|q| q.qpn);
    }
    Ok((Response::CcStates(page), None))
}

/// `Bell`: a duplicate of the engine's eventfd.
pub(super) fn bell(sh: &Shared) -> Result<Reply, RequestError> {
    if !sh.cfg.bell {
        return Err(RequestError::BellOff);
    }
    let bell = sh.bell.as_ref().ok_or(RequestError::NoBell)?;
    let fd = bell.try_clone_fd()?;
    Ok((Response::Ok, Some(Attach::Fd(fd))))
}

/// `Doorbells`: the client's doorbell page (`ipc::doorbell`).
pub(super) fn doorbells(sh: &Shared, id: u64) -> Result<Reply, RequestError> {
    let map = sh.dataplane().doorbell_page(id)?;
    Ok((Response::Ok, Some(Attach::Map(map))))
}

/// `AsyncEventFd`: the eventfd the daemon writes when an event is queued
/// for this client (written at once if some already are).
pub(super) fn async_event_fd(
    sh: &Shared,
    id: u64,
    fds: Vec<OwnedFd>,
) -> Result<Reply, RequestError> {
    let fd = one_fd(fds, "async_event_fd", "eventfd")?;
    event_fd(&fd)?;
    let mut dp = sh.dataplane();
    let c = dp.events.entry(id).or_default();
    if !c.queue.is_empty() {
        nic::io::bell::ring_fd(fd.as_fd());
    }
    c.fd = Some(fd);
    ok()
}

/// `GetAsyncEvents`: the queued events, oldest first.
pub(super) fn get_async_events(sh: &Shared, id: u64) -> Result<Reply, RequestError> {
    let mut dp = sh.dataplane();
    let events = match dp.events.get_mut(&id) {
        Some(c) => {
            let n = c.queue.len().min(EVENTS_PER_ANSWER);
            c.queue.drain(..n).collect()
        }
        None => Vec::new(),
    };
    Ok((Response::AsyncEvents { events }, None))
}
