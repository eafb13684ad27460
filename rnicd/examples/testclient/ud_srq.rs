//! The modes with a QP type or receive queue of their own: `ud` (a UD QP:
//! SENDs both ways through an address handle, then sends with bad AH
//! handles), `srq-recv` (two RC QPs on one SRQ) and `srq-send` (SENDs to
//! them).

use super::*;

fn wait_fetched(what: &str, pending: impl Fn() -> u32) {
    let t0 = std::time::Instant::now();
    while pending() != 0 {
        if t0.elapsed() > T {
            fail(format!("the daemon did not take the {what} receives"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn ud_len(j: usize) -> usize {
    100 * (j + 1)
}

/// UD: three SENDs each way (data, source QP and GRH flag checked), then
/// sends with a handle that never existed, a destroyed handle and an AH
/// of another PD: all complete with errors.
pub(super) fn ud(sock: &str) {
    let ctx = Context::open(sock).unwrap_or_else(|e| fail(format!("open {sock}: {e}")));
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buffer(1 << 20).unwrap();
    let mr = pd.reg_mr(&buf, 0, 1 << 20, ACCESS_ALL).unwrap();
    let mut cq = ctx.create_cq(256).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpKind::Ud,
            send_cq: cq.handle,
            recv_cq: cq.handle,
            max_send_wr: 64,
            max_recv_wr: 64,
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    qp.ud_ready(QKEY, 0)
        .unwrap_or_else(|e| fail(format!("ud modify: {e}")));
    say(&info_line(&ctx, mr.addr, mr.rkey, &[qp.qpn]));
    let f = expect("PEER");
    let gid = Gid::from_hex(&f[0]).expect("gid");
    let mac = nic::io::addr::parse_mac(&f[1]).expect("mac");
    let peer_qpn: u32 = f[4].parse().unwrap();
    let ah = pd.create_ah(&AhAttr::new(gid, mac)).unwrap();
    const RX: u64 = 64 << 10;
    for i in 0..3u64 {
        // UD receives start with the 40-byte GRH (IBA 11.4.1.2)
        let wr = RecvWr {
            wr_id: i,
            sgl: Sgl::single(mr.addr + RX + i * 4096, 4096, mr.lkey),
        };
        qp.post_recv(&wr).unwrap();
    }
    wait_fetched("UD", || qp.pending_recv());
    say("READY");
    expect("GO");
    for j in 0..3usize {
        let data = pattern(qp.qpn as u8 + j as u8, ud_len(j));
        buf.write(j * 4096, &data);
        let mut wr = SendWr::new(
            100 + j as u64,
            SendOp::Send,
            Sgl::single(mr.addr + (j * 4096) as u64, ud_len(j) as u32, mr.lkey),
        );
        wr.flags.signaled = true;
        qp.post_send_ud(&wr, &ah, peer_qpn, QKEY).unwrap();
    }
    let wcs = cq
        .wait(6, T)
        .unwrap_or_else(|e| fail(format!("ud completions: {e}")));
    check_ok(&wcs);
    let mut recvs = 0;
    for w in &wcs {
        if w.opcode != WcOpcode::Recv {
            continue;
        }
        recvs += 1;
        let i = w.wr_id as usize;
        if i >= 3 || w.src_qp != peer_qpn || !w.grh || w.byte_len as usize != 40 + ud_len(i) {
            fail(format!("ud receive {w:?} (peer QPN {peer_qpn})"));
        }
        let want = pattern(peer_qpn as u8 + i as u8, ud_len(i));
        let got = buf.to_vec(RX as usize + i * 4096 + 40, ud_len(i));
        if let Some(off) = want.iter().zip(&got).position(|(a, b)| a != b) {
            fail(format!("ud message {i} differs at byte {off}"));
        }
    }
    if recvs != 3 {
        fail(format!("{recvs} receives: {wcs:?}"));
    }
    // bad handles: one that never existed, one destroyed, one of another
    // PD of this client (IBA 10.2.1.1: the AH and the QP share a PD)
    let dead = pd.create_ah(&AhAttr::new(gid, mac)).unwrap();
    let dead_handle = dead.handle;
    dead.destroy().unwrap();
    let pd2 = ctx.alloc_pd().unwrap();
    let other = pd2.create_ah(&AhAttr::new(gid, mac)).unwrap();
    for (k, h) in [0xdead_beef_u32, dead_handle, other.handle]
        .into_iter()
        .enumerate()
    {
        let mut wr = SendWr::new(
            200 + k as u64,
            SendOp::Send,
            Sgl::single(mr.addr, 64, mr.lkey),
        );
        wr.flags.signaled = true;
        let w = sring::encode_send_ud(&wr, h, peer_qpn, QKEY);
        // SAFETY: memory-safe; the handle is meant to be refused
        unsafe { qp.post_raw_send(&w) }.unwrap();
        let wc = cq
            .wait(1, T)
            .unwrap_or_else(|e| fail(format!("bad AH completion: {e}")));
        if wc[0].status == WcStatus::Success || wc[0].wr_id != 200 + k as u64 {
            fail(format!("bad AH {h:#x} gave {:?}", wc[0]));
        }
    }
    say("OK ud");
    loop {
        line();
    }
}

fn srq_len(k: usize) -> usize {
    64 + k * 8
}

fn srq_msg(k: usize) -> Vec<u8> {
    let mut v = pattern(k as u8, srq_len(k));
    v[..4].copy_from_slice(&(k as u32).to_le_bytes());
    v
}

const SRQ_MSGS: usize = 8;

/// Two RC QPs on one SRQ: the SENDs to both consume the SRQ's receives.
pub(super) fn srq_recv(sock: &str, p: &ConnectParams) {
    let ctx = Context::open(sock).unwrap_or_else(|e| fail(format!("open {sock}: {e}")));
    let pd = ctx.alloc_pd().unwrap();
    let buf = pd.alloc_buffer(BUF).unwrap();
    let mr = pd.reg_mr(&buf, 0, BUF, ACCESS_ALL).unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mut srq = pd.create_srq(16).unwrap();
    let qps = (0..2)
        .map(|_| {
            pd.create_qp(&QpInitAttr {
                qp_type: QpKind::Rc,
                send_cq: cq.handle,
                recv_cq: cq.handle,
                max_send_wr: 16,
                max_recv_wr: 1,
                sq_sig_all: false,
                srq: Some(srq.handle),
            })
            .unwrap()
        })
        .collect();
    let mut n = Node {
        ctx: ctx.clone(),
        buf,
        mr,
        cq,
        qps,
    };
    exchange(&n, &ctx, p);
    for i in 0..SRQ_MSGS as u64 {
        let wr = RecvWr {
            wr_id: i,
            sgl: Sgl::single(n.mr.addr + i * 4096, 4096, n.mr.lkey),
        };
        srq.post_recv(&wr).unwrap();
    }
    wait_fetched("SRQ", || srq.pending());
    say("READY");
    let wcs =
        n.cq.wait(SRQ_MSGS, T)
            .unwrap_or_else(|e| fail(format!("srq completions: {e}")));
    check_ok(&wcs);
    let mut seen = [false; SRQ_MSGS];
    let mut per_qp = [0; 2];
    for w in &wcs {
        let slot = w.wr_id as usize;
        if w.opcode != WcOpcode::Recv || slot >= SRQ_MSGS {
            fail(format!("srq completion {w:?}"));
        }
        let mut k = [0u8; 4];
        n.buf.read(slot * 4096, &mut k);
        let k = u32::from_le_bytes(k) as usize;
        if k >= SRQ_MSGS || seen[k] || w.byte_len as usize != srq_len(k) {
            fail(format!("srq message {k} in slot {slot}: {w:?}"));
        }
        seen[k] = true;
        let want_qp = n.qps[k % 2].qpn;
        if w.qp_num != want_qp {
            fail(format!(
                "message {k} arrived on QP {} not {want_qp}",
                w.qp_num
            ));
        }
        per_qp[k % 2] += 1;
        let got = n.buf.to_vec(slot * 4096, srq_len(k));
        if let Some(off) = srq_msg(k).iter().zip(&got).position(|(a, b)| a != b) {
            fail(format!("srq message {k} differs at byte {off}"));
        }
    }
    // the QPs cannot post to their own receive rings: the daemon refuses
    say(&format!("OK srq {} {}", per_qp[0], per_qp[1]));
    let _keep = srq;
    loop {
        line();
    }
}

pub(super) fn srq_send(n: &mut Node) {
    expect("GO");
    for k in 0..SRQ_MSGS {
        n.buf.write(k * 4096, &srq_msg(k));
        let mut wr = SendWr::new(
            k as u64,
            SendOp::Send,
            Sgl::single(n.mr.addr + (k * 4096) as u64, srq_len(k) as u32, n.mr.lkey),
        );
        wr.flags.signaled = true;
        let i = k % 2;
        n.qps[i].post_send(&wr).unwrap();
    }
    let wcs =
        n.cq.wait(SRQ_MSGS, T)
            .unwrap_or_else(|e| fail(format!("send completions: {e}")));
    check_ok(&wcs);
    say("OK srq-send");
}
