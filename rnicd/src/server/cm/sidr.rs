//! The RDMA CM's UD IDs (RDMA_PS_UDP): `connect` resolves the service
//! ID with a SIDR_REQ (IBA 12.11) and reports ESTABLISHED with the peer's
//! QPN, Q_Key and address (or UNREACHABLE); a SIDR_REQ to a listener is a
//! CONNECT_REQUEST whose `accept` answers with the ID's QP and the UD
//! Q_Key. No connection state follows: a UD ID's QP talks to whoever it
//! has an address handle for.

use super::service::{event, CmService};
use super::{ip_cm_private_data, CmRequestError};
use ipc::proto::cm::{CmEventKind, CmEventMsg, CmIdNo, ConnParam, UdEventParam};
use ipc::proto::QpKind;
use nic::cm::{CmAddr, CmId, SidrParams};
use std::collections::HashMap;
use std::net::SocketAddr;
use wire::mad::{ip_cm_service_id, sidr_status, CmSidrRep, CmSidrReq, IpCmPrivateData};
use wire::Gid;

/// The Q_Key of RDMA_PS_UDP IDs' QPs (librdmacm's and the kernel's
/// RDMA_UDP_QKEY): the SIDR_REP carries it, `init_qp_attr` sets it.
pub(crate) const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// `connect` on a UD ID: the SIDR_REQ for the destination's service ID,
/// on the device's CM timers. No QPN goes in it, so the ID needs no QP
/// yet (as with the kernel's RDMA CM).
pub(super) fn connect(
    s: &mut CmService,
    owner: u64,
    id: CmIdNo,
    param: &ConnParam,
) -> Result<(), CmRequestError> {
    let (now, timers, local_ip) = (s.now, s.timers, s.gid.to_ip());
    let i = super::id_mut(s, owner, id)?;
    let dst = super::connectable(i, &param.private_data, CmSidrReq::PRIVATE_DATA_LEN)?;
    i.local_qpn = param.qpn & 0x00FF_FFFF;
    let src = i.src.unwrap_or(SocketAddr::new(local_ip, 0));
    // IBA A11: the RDMA IP CM service ID of the port space and port
    let mut p = SidrParams::new(
        CmAddr::from_ip(dst.ip()),
        ip_cm_service_id(i.ps.0 as u8, dst.port()),
    );
    p.private_data = ip_cm_private_data(src, dst, &param.private_data);
    // IBA 12.11.2: the SIDR_REQ is repeated on the CM's timers
    p.response_timeout = timers.response_timeout & 0x1F;
    p.max_retries = timers.max_retries & 0x0F;
    let c = s.cm.sidr_request(now, &p);
    super::id_mut(s, owner, id)?.conn = Some(c);
    s.by_conn.insert(c.0, id);
    Ok(())
}

/// `accept` on a UD ID of a SIDR_REQ: the SIDR_REP (status 0) with the
/// caller's UD QP and RDMA_UDP_QKEY; the ID is done with the CM.
pub(super) fn accept(
    s: &mut CmService,
    owner: u64,
    id: CmIdNo,
    param: &ConnParam,
    qps: &HashMap<u32, QpKind>,
) -> Result<(), CmRequestError> {
    let now = s.now;
    let i = super::id_mut(s, owner, id)?;
    let c = super::acceptable(i, param, CmSidrRep::PRIVATE_DATA_LEN, qps)?;
    let qpn = param.qpn & 0x00FF_FFFF;
    s.cm.sidr_accept(now, c, qpn, RDMA_UDP_QKEY, &param.private_data)?;
    let i = super::id_mut(s, owner, id)?;
    i.local_qpn = qpn;
    i.pending_on = None;
    i.conn = None;
    s.by_conn.remove(&c.0);
    Ok(())
}

impl CmService {
    /// A SIDR_REQ for a listened service ID: a new ID on the listener's
    /// channel and CONNECT_REQUEST with the user's private data and the
    /// requester's address; refused with status 1 when nobody listens (or
    /// the request has no RDMA IP CM header).
    pub(super) fn on_sidr_request(
        &mut self,
        id: CmId,
        from: CmAddr,
        req: &CmSidrReq,
        ip: Option<IpCmPrivateData>,
    ) {
        let listener = self.listeners.get(&req.service_id).copied();
        let addrs = ip.as_ref().and_then(IpCmPrivateData::addrs);
        let (Some(l), Some((src_ip, dst_ip)), Some(ip)) = (listener, addrs, ip) else {
            self.count("cm_sidr_req_refused");
            // IBA 12.11.3: status 1, the service ID is not supported
            let _ = self
                .cm
                .sidr_reject(id, sidr_status::SERVICE_ID_NOT_SUPPORTED, &[]);
            return;
        };
        let local = SocketAddr::new(dst_ip, req.service_id as u16);
        let remote = SocketAddr::new(src_ip, ip.src_port);
        let Some(n) = self.pending_id(l, id, &from, local, remote) else {
            return;
        };
        // the kernel's RDMA CM: the user's part of the private data, no
        // QPN or Q_Key (the SIDR_REQ has none)
        let ud = UdEventParam {
            private_data: req.private_data[IpCmPrivateData::LEN..].to_vec(),
            dgid: from.gid,
            dmac: n.dmac.map_or([0; 6], |m| m.0),
            qp_num: 0,
            qkey: 0,
        };
        let no = self.alloc_id();
        self.ids.insert(no, n);
        self.by_conn.insert(id.0, no);
        self.report(no, |i| CmEventMsg {
            listen_id: Some(l),
            ud: Some(ud),
            addrs: i.src.zip(i.dst),
            ..event(no, i, CmEventKind::CONNECT_REQUEST, 0)
        });
    }

    /// The SIDR_REP to a UD ID's `connect`: status 0 is ESTABLISHED with
    /// the peer's QPN, Q_Key and address; another status UNREACHABLE with
    /// that status (as the kernel's RDMA CM reports it).
    pub(super) fn on_sidr_reply(&mut self, id: CmId, rep: &CmSidrRep) {
        let Some(no) = self.end_conn(id) else { return };
        if rep.status != sidr_status::VALID {
            self.count("cm_sidr_rejected");
            return self.report_kind(no, CmEventKind::UNREACHABLE, i32::from(rep.status));
        }
        let Some(i) = self.ids.get_mut(&no) else {
            return;
        };
        i.remote_qpn = rep.qpn;
        let dst = i.dst;
        let ud = UdEventParam {
            private_data: rep.private_data.to_vec(),
            dgid: dst.map_or([0; 16], |d| Gid::from_ip(d.ip()).0),
            dmac: i.dmac.map_or([0; 6], |m| m.0),
            qp_num: rep.qpn,
            qkey: rep.qkey,
        };
        self.report(no, |i| CmEventMsg {
            ud: Some(ud),
            ..event(no, i, CmEventKind::ESTABLISHED, 0)
        });
    }
}
