//! The responder a replay feeds, set up from what the capture shows: its
//! RC QP moved to RTR on the capture's path (`create_qp`), one memory
//! region per capture R_Key (`register_regions`), receive WQEs for the
//! messages that take one, and the capture's requests rewritten to our QPN
//! and R_Keys (`request_frames`). A step that fails adds a `setup:` line
//! to the report's mismatches.

use super::*;

/// Where each capture R_Key lands in our responder: our R_Key, the lowest
/// VA the region covers, and its memory.
pub(super) type Regions = HashMap<u32, (u32, u64, Arc<HeapMemory>)>;

/// Every access a replayed request may need.
const ALL_ACCESS: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// VA of the receive buffer the SENDs land in.
const RECV_VA: u64 = 0x7000_0000;

/// What the capture shows of the connection: the two ends, the path MTU,
/// the requester's QPN and the first request PSN.
pub(super) struct Path {
    pub resp_ip: IpAddr,
    pub req_ip: IpAddr,
    pub resp_mac: wire::EthernetAddress,
    pub req_mac: wire::EthernetAddress,
    pub mtu: u32,
    pub peer_qpn: u32,
    pub first_psn: Psn,
}

/// Our responder and the QP that answers the capture's requests.
pub(super) struct Responder {
    pub rnic: Rnic,
    pub pd: u32,
    pub qpn: u32,
}

/// An RNIC at the responder's address with one RC QP in RTR toward the
/// capture's requester (IBA 10.3.1: INIT, then RTR with the path, the
/// peer's QPN and the expected PSN).
pub(super) fn create_qp(path: &Path, mismatches: &mut Vec<String>) -> Option<Responder> {
    let mut rnic = Rnic::new(RnicConfig::new(path.resp_mac, Gid::from_ip(path.resp_ip)));
    let pd = rnic.alloc_pd();
    let cq = rnic.create_cq(1 << 20);
    let qpn = match rnic.create_qp(QpInit {
        qp_type: wire::QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 16,
        max_recv_wr: 1 << 16,
        sq_sig_all: false,
    }) {
        Ok(q) => q,
        Err(e) => {
            mismatches.push(format!("setup: create the QP: {e}"));
            return None;
        }
    };
    let init = QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        access_flags: Some(ALL_ACCESS),
        ..Default::default()
    };
    let rtr = QpAttr {
        state: Some(QpState::Rtr),
        ah: Some(AhAttr::new(Gid::from_ip(path.req_ip), path.req_mac)),
        path_mtu: Some(path.mtu),
        dest_qpn: Some(path.peer_qpn),
        rq_psn: Some(path.first_psn.value()),
        max_dest_rd_atomic: Some(16),
        min_rnr_timer: Some(12),
        ..Default::default()
    };
    for (name, attr) in [("INIT", &init), ("RTR", &rtr)] {
        if let Err(e) = rnic.modify_qp(qpn, attr) {
            mismatches.push(format!("setup: move the QP to {name}: {e}"));
            return None;
        }
    }
    Some(Responder { rnic, pd, qpn })
}

/// Memory regions: one per capture R_Key, spanning every VA it is used
/// with (and 8 bytes past the highest, room for an atomic's word).
pub(super) fn register_regions(
    resp: &mut Responder,
    requests: &[&Seen<'_>],
    mismatches: &mut Vec<String>,
) -> Regions {
    let mut spans: HashMap<u32, (u64, u64)> = HashMap::new();
    for s in requests {
        let r = &s.repr;
        let (rkey, va, len) = match (r.ext.reth, r.ext.atomic) {
            (Some(x), _) => (x.rkey, x.va, x.dma_len as u64),
            (_, Some(a)) => (a.rkey, a.va, 8),
            _ => continue,
        };
        let e = spans.entry(rkey).or_insert((va, va.saturating_add(len)));
        e.0 = e.0.min(va);
        e.1 = e.1.max(va.saturating_add(len));
    }
    let mut regions = Regions::new();
    let mut rkeys: Vec<_> = spans.into_iter().collect();
    rkeys.sort_unstable_by_key(|&(k, _)| k);
    for (rkey, (lo, hi)) in rkeys {
        let lo = lo & !7;
        let len = (hi - lo).max(8) + 8;
        if len > SPAN_LIMIT + 16 || lo.checked_add(len).is_none() {
            mismatches.push(format!(
                "setup: R_Key {rkey:#x} is used across {} MiB of addresses from {lo:#x}; the replay backs at most {} MiB",
                (hi - lo) >> 20,
                SPAN_LIMIT >> 20
            ));
            continue;
        }
        let mem = Arc::new(HeapMemory::new(len as usize));
        let mr = mem.clone() as Arc<dyn Memory>;
        match resp.rnic.reg_mr(resp.pd, mr, 0, lo, len, ALL_ACCESS) {
            Ok((_, ours)) => {
                regions.insert(rkey, (ours, lo, mem));
            }
            Err(e) => mismatches.push(format!("setup: register R_Key {rkey:#x}'s memory: {e}")),
        }
    }
    regions
}

/// Posts a receive for every message that consumes one (the responder
/// takes them in order): each SEND, and each RDMA WRITE carrying immediate
/// data (its LAST or ONLY packet consumes a receive WQE, IBA 9.7.5.1.5);
/// all land in one large buffer, reused. Returns the requests rewritten to
/// our QPN and R_Keys, with their capture timestamps; `None` when the
/// receive buffer cannot be registered.
pub(super) fn request_frames(
    resp: &mut Responder,
    requests: &[&Seen<'_>],
    regions: &Regions,
    mismatches: &mut Vec<String>,
) -> Option<Vec<(Instant, Vec<u8>)>> {
    let recv_len = 1u64 << 20;
    let recv_mem = Arc::new(HeapMemory::new(recv_len as usize)) as Arc<dyn Memory>;
    let recv_lkey = match resp
        .rnic
        .reg_mr(resp.pd, recv_mem, 0, RECV_VA, recv_len, ALL_ACCESS)
    {
        Ok((lkey, _)) => lkey,
        Err(e) => {
            mismatches.push(format!("setup: register the receive buffer: {e}"));
            return None;
        }
    };
    let mut frames = Vec::with_capacity(requests.len());
    let mut recv_id = 0u64;
    for s in requests {
        let r = &s.repr;
        let Some(info) = r.opcode_info() else {
            continue;
        };
        let takes_receive = match info.operation {
            Operation::Send => info.position.is_start(),
            Operation::Write => info.has_immediate(),
            _ => false,
        };
        if takes_receive {
            recv_id += 1;
            let _ = resp.rnic.post_recv(
                resp.qpn,
                RecvWr {
                    wr_id: recv_id,
                    sgl: Sgl::single(RECV_VA, recv_len as u32, recv_lkey),
                },
            );
        }
        match rewrite(r, resp.qpn, regions) {
            Ok(frame) => frames.push((s.at, frame)),
            Err(e) => mismatches.push(format!(
                "setup: frame {}: cannot re-emit the request: {e}",
                s.frame
            )),
        }
    }
    Some(frames)
}

/// The request `r` addressed to our QP `qpn`, its R_Keys mapped to ours.
fn rewrite(r: &RoceRepr<'_>, qpn: u32, regions: &Regions) -> wire::Result<Vec<u8>> {
    let mut req = *r;
    req.bth.dest_qp = qpn;
    if let Some(x) = req.ext.reth.as_mut() {
        if let Some((k, _, _)) = regions.get(&x.rkey) {
            x.rkey = *k;
        }
    }
    if let Some(a) = req.ext.atomic.as_mut() {
        if let Some((k, _, _)) = regions.get(&a.rkey) {
            a.rkey = *k;
        }
    }
    let mut frame = vec![0u8; req.buffer_len()];
    let n = req.emit(&mut frame)?;
    frame.truncate(n);
    Ok(frame)
}
