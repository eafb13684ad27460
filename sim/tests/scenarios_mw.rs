//! Memory windows (IBA 10.6.7) on the virtual clock: type 1 and type 2B
//! binds by work request, rkey tags, the window's rights and range, the
//! bind checks (C10-72..75, o10-36.2.2, o10-37.2.30, o10-37.2.40),
//! LOCAL_INV and SEND with Invalidate, deregistration and deallocation.

mod common;

use common::*;
use nic::verbs::{access, MwType, QpState, SendOp, WcOpcode, WcStatus};

const MR_ADDR: u64 = 0x7000_0000;
const MR_AT: usize = 0x40000;
const MR_LEN: u64 = 0x4000;
const ALL: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND;

/// A pair whose side B has a region with MW_BIND access (and no remote
/// rights of its own) and a window of `kind`; (lkey, window R_Key).
fn setup(kind: MwType) -> (H, u32, u32) {
    let mut h = H::rc();
    let (lkey, _) = h.reg(
        1,
        MR_AT,
        MR_ADDR,
        MR_LEN,
        access::LOCAL_WRITE | access::MW_BIND,
    );
    let mw = h.alloc_mw(1, kind);
    (h, lkey, mw)
}

/// A's RDMA WRITE of `data` to `addr` through `rkey`; its status.
fn write(h: &mut H, rkey: u32, addr: u64, data: &[u8]) -> WcStatus {
    h.fill(0, 0, data);
    h.send(
        0,
        wr(
            5,
            SendOp::Write {
                remote_addr: addr,
                rkey,
            },
            h.sgl(0, 0, data.len() as u32),
        ),
    );
    h.run_for_wcs(1, 0);
    h.take(0)[0].status
}

#[test]
fn a_bound_type_2_window_gives_its_rights_and_a_new_tag() {
    let (mut h, lkey, mw) = setup(MwType::Type2);
    // free: the allocation's key opens nothing
    assert_eq!(write(&mut h, mw, MR_ADDR, &[1; 8]), WcStatus::RemAccessErr);
    let (mut h, lkey2, mw2) = setup(MwType::Type2);
    let _ = (lkey, mw);
    let wc = h.bind_wc(
        1,
        mw2,
        0x5a,
        lkey2,
        MR_ADDR + 0x1000,
        0x1000,
        access::REMOTE_WRITE,
    );
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    let rkey = h.mw_rkey(1, mw2);
    assert_eq!(rkey, (mw2 & !0xff) | 0x5a, "the tag the bind chose");
    assert_eq!(
        write(&mut h, rkey, MR_ADDR + 0x1800, b"through the window"),
        WcStatus::Success
    );
    assert_eq!(h.mem(1, MR_AT + 0x1800, 18), b"through the window");
}

#[test]
fn a_window_grants_only_its_rights_and_its_range() {
    for (what, addr, len, op_read) in [
        ("before the window", MR_ADDR + 0x0ff8, 16, false),
        ("after the window", MR_ADDR + 0x1ff8, 16, false),
        (
            "a READ through a write-only window",
            MR_ADDR + 0x1000,
            8,
            true,
        ),
    ] {
        let (mut h, lkey, mw) = setup(MwType::Type2);
        let st = h.bind(
            1,
            mw,
            1,
            lkey,
            MR_ADDR + 0x1000,
            0x1000,
            access::REMOTE_WRITE,
        );
        assert_eq!(st, WcStatus::Success);
        let rkey = h.mw_rkey(1, mw);
        let before = h.whole_mem(1);
        let st = if op_read {
            h.send(
                0,
                wr(
                    6,
                    SendOp::Read {
                        remote_addr: addr,
                        rkey,
                    },
                    h.sgl(0, 0, len),
                ),
            );
            h.run_for_wcs(1, 0);
            h.take(0)[0].status
        } else {
            write(&mut h, rkey, addr, &vec![9; len as usize])
        };
        assert_eq!(st, WcStatus::RemAccessErr, "{what}");
        assert_eq!(h.whole_mem(1), before, "{what}: nothing written");
        assert_eq!(h.qp(1).state, QpState::Err, "{what}");
    }
}

#[test]
fn a_zero_based_type_2_window_is_addressed_from_zero() {
    let (mut h, lkey, mw) = setup(MwType::Type2);
    let acc = access::REMOTE_WRITE | access::ZERO_BASED;
    assert_eq!(
        h.bind(1, mw, 2, lkey, MR_ADDR + 0x2000, 0x100, acc),
        WcStatus::Success
    );
    let rkey = h.mw_rkey(1, mw);
    assert_eq!(write(&mut h, rkey, 0x10, b"zb"), WcStatus::Success);
    assert_eq!(h.mem(1, MR_AT + 0x2010, 2), b"zb");
}

#[test]
fn type_1_rebind_rotates_the_tag_and_a_zero_length_bind_unbinds() {
    let (mut h, lkey, mw) = setup(MwType::Type1);
    let acc = access::REMOTE_WRITE;
    assert_eq!(
        h.bind(1, mw, 0x10, lkey, MR_ADDR, 0x100, acc),
        WcStatus::Success
    );
    let k1 = h.mw_rkey(1, mw);
    // a type 1 window may be bound again while bound: a new tag
    assert_eq!(
        h.bind(1, k1, 0x11, lkey, MR_ADDR, 0x200, acc),
        WcStatus::Success
    );
    let k2 = h.mw_rkey(1, mw);
    assert_ne!(k1, k2);
    assert_eq!(write(&mut h, k2, MR_ADDR + 0x180, b"k2"), WcStatus::Success);
    // unbind: length 0, no region
    assert_eq!(h.bind(1, k2, 0x12, 0, 0, 0, 0), WcStatus::Success);
    let k3 = h.mw_rkey(1, mw);
    assert_eq!(write(&mut h, k3, MR_ADDR, b"k3"), WcStatus::RemAccessErr);
}

#[test]
fn the_old_tag_of_a_rebound_type_1_window_opens_nothing() {
    let (mut h, lkey, mw) = setup(MwType::Type1);
    assert_eq!(
        h.bind(1, mw, 0x20, lkey, MR_ADDR, 0x100, access::REMOTE_WRITE),
        WcStatus::Success
    );
    let k1 = h.mw_rkey(1, mw);
    assert_eq!(
        h.bind(1, k1, 0x21, lkey, MR_ADDR, 0x100, access::REMOTE_WRITE),
        WcStatus::Success
    );
    let before = h.whole_mem(1);
    assert_eq!(write(&mut h, k1, MR_ADDR, b"old"), WcStatus::RemAccessErr);
    assert_eq!(h.whole_mem(1), before);
}

/// Binds that IBA forbids complete with MW_BIND_ERR and fail the QP.
#[test]
fn forbidden_binds_complete_with_mw_bind_err() {
    let cases: [(&str, MwType, u32, u64, u64, u32); 6] = [
        // C10-73: the region has no MW_BIND
        (
            "no MW_BIND on the region",
            MwType::Type2,
            access::LOCAL_WRITE,
            MR_ADDR,
            0x100,
            access::REMOTE_READ,
        ),
        // C10-74: remote write needs local write on the region
        (
            "writable window, read-only region",
            MwType::Type2,
            access::MW_BIND,
            MR_ADDR,
            0x100,
            access::REMOTE_WRITE,
        ),
        // C10-75: inside the region
        (
            "beyond the region",
            MwType::Type2,
            ALL,
            MR_ADDR + MR_LEN - 0x10,
            0x20,
            access::REMOTE_READ,
        ),
        // o10-37.2.40: a type 2 window needs a length
        (
            "type 2, zero length",
            MwType::Type2,
            ALL,
            MR_ADDR,
            0,
            access::REMOTE_READ,
        ),
        // o10-36.2.2: a type 1 window is never zero based
        (
            "type 1 zero based",
            MwType::Type1,
            ALL,
            MR_ADDR,
            0x10,
            access::REMOTE_READ | access::ZERO_BASED,
        ),
        (
            "a right no window has",
            MwType::Type1,
            ALL,
            MR_ADDR,
            0x10,
            access::REMOTE_READ | access::MW_BIND,
        ),
    ];
    for (what, kind, mr_acc, addr, len, acc) in cases {
        let mut h = H::rc();
        let (lkey, _) = h.reg(1, MR_AT, MR_ADDR, MR_LEN, mr_acc);
        let mw = h.alloc_mw(1, kind);
        assert_eq!(
            h.bind(1, mw, 3, lkey, addr, len, acc),
            WcStatus::MwBindErr,
            "{what}"
        );
        assert_eq!(h.qp(1).state, QpState::Err, "{what}");
        assert_eq!(h.mw_rkey(1, mw), mw, "{what}: the key is unchanged");
    }
}

#[test]
fn a_bound_type_2_window_cannot_be_bound_again() {
    // o10-37.2.30: only a free type 2 window can be bound
    let (mut h, lkey, mw) = setup(MwType::Type2);
    assert_eq!(
        h.bind(1, mw, 4, lkey, MR_ADDR, 0x100, access::REMOTE_READ),
        WcStatus::Success
    );
    let k = h.mw_rkey(1, mw);
    assert_eq!(
        h.bind(1, k, 5, lkey, MR_ADDR, 0x100, access::REMOTE_READ),
        WcStatus::MwBindErr
    );
}

#[test]
fn a_window_of_another_pd_cannot_be_bound() {
    // C10-72: window, region and QP share a PD
    let mut h = H::rc();
    let pd2 = h.p.sim.nodes[1].alloc_pd();
    let (lkey, _) = h.reg(1, MR_AT, MR_ADDR, MR_LEN, ALL);
    let mw = h.p.sim.nodes[1].alloc_mw(pd2, MwType::Type2).unwrap();
    assert_eq!(
        h.bind(1, mw, 6, lkey, MR_ADDR, 0x100, access::REMOTE_READ),
        WcStatus::MwBindErr
    );
}

#[test]
fn local_invalidate_frees_a_type_2_window_once() {
    let (mut h, lkey, mw) = setup(MwType::Type2);
    assert_eq!(
        h.bind(1, mw, 7, lkey, MR_ADDR, 0x100, access::REMOTE_WRITE),
        WcStatus::Success
    );
    let k = h.mw_rkey(1, mw);
    let wc = h.local_op(1, 8, SendOp::LocalInv { rkey: k });
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    // free again: it may be bound anew, with a new tag
    assert_eq!(
        h.bind(1, k, 8, lkey, MR_ADDR, 0x100, access::REMOTE_WRITE),
        WcStatus::Success
    );
    let k2 = h.mw_rkey(1, mw);
    assert_eq!(write(&mut h, k2, MR_ADDR, b"again"), WcStatus::Success);
    assert_eq!(write(&mut h, k, MR_ADDR, b"stale"), WcStatus::RemAccessErr);
}

#[test]
fn local_invalidate_of_a_region_or_a_type_1_window_is_a_local_qp_error() {
    // o10-37.2.26 (type 1), and a region of ibv_reg_mr is not invalidatable
    let (mut h, lkey, mw) = setup(MwType::Type1);
    assert_eq!(
        h.bind(1, mw, 9, lkey, MR_ADDR, 0x100, access::REMOTE_READ),
        WcStatus::Success
    );
    let k = h.mw_rkey(1, mw);
    assert_eq!(
        h.local_op(1, 9, SendOp::LocalInv { rkey: k }).status,
        WcStatus::LocQpOpErr
    );
    assert_eq!(h.qp(1).state, QpState::Err);
    let (mut h, lkey, _) = setup(MwType::Type2);
    assert_eq!(
        h.local_op(1, 9, SendOp::LocalInv { rkey: lkey }).status,
        WcStatus::LocQpOpErr
    );
}

#[test]
fn send_with_invalidate_revokes_a_type_2_window() {
    let (mut h, lkey, mw) = setup(MwType::Type2);
    assert_eq!(
        h.bind(1, mw, 0x33, lkey, MR_ADDR, 0x1000, access::REMOTE_WRITE),
        WcStatus::Success
    );
    let k = h.mw_rkey(1, mw);
    assert_eq!(write(&mut h, k, MR_ADDR, &[0xAB; 64]), WcStatus::Success);
    h.recv(1, 20, 0x8000, 4096);
    h.fill(0, 0x100, b"invalidate me");
    h.send(
        0,
        wr(
            2,
            SendOp::SendWithInv { invalidate_rkey: k },
            h.sgl(0, 0x100, 13),
        ),
    );
    h.run_for_wcs(1, 1);
    let (wa, wb) = (h.take(0), h.take(1));
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!(
        (wb[0].status, wb[0].opcode),
        (WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(
        wb[0].invalidated_rkey,
        Some(k),
        "IBV_WC_WITH_INV and its key"
    );
    assert_eq!(wb[0].byte_len, 13);
    assert_eq!(h.mem(1, 0x8000, 13), b"invalidate me");
    // after: REM_ACCESS_ERR, nothing written
    let before = h.whole_mem(1);
    assert_eq!(
        write(&mut h, k, MR_ADDR, &[0xCD; 64]),
        WcStatus::RemAccessErr
    );
    assert_eq!(h.whole_mem(1), before);
}

#[test]
fn a_region_with_bound_windows_is_not_deregistered() {
    let (mut h, lkey, mw) = setup(MwType::Type2);
    assert_eq!(
        h.bind(1, mw, 1, lkey, MR_ADDR, 0x100, access::REMOTE_READ),
        WcStatus::Success
    );
    assert!(h.p.sim.nodes[1].dereg_mr(lkey).is_err());
    let k = h.mw_rkey(1, mw);
    assert_eq!(
        h.local_op(1, 2, SendOp::LocalInv { rkey: k }).status,
        WcStatus::Success
    );
    assert!(h.p.sim.nodes[1].dereg_mr(lkey).is_ok());
}

#[test]
fn dealloc_and_destroy_qp_end_a_binding() {
    // deallocating a bound window frees its region
    let (mut h, lkey, mw) = setup(MwType::Type1);
    assert_eq!(
        h.bind(1, mw, 1, lkey, MR_ADDR, 0x100, access::REMOTE_WRITE),
        WcStatus::Success
    );
    let k = h.mw_rkey(1, mw);
    h.p.sim.nodes[1].dealloc_mw(k >> 8).unwrap();
    assert!(h.p.sim.nodes[1].dealloc_mw(k >> 8).is_err(), "twice");
    assert_eq!(write(&mut h, k, MR_ADDR, b"gone"), WcStatus::RemAccessErr);
    assert!(h.p.sim.nodes[1].dereg_mr(lkey).is_ok());
    // destroying the QP a type 2 window is bound to leaves the window
    // bound (its region busy) but out of every QP's reach, as in rxe;
    // LOCAL_INV from another QP frees it (MrTable's unit tests)
    let (mut h, lkey, mw) = setup(MwType::Type2);
    assert_eq!(
        h.bind(1, mw, 1, lkey, MR_ADDR, 0x100, access::REMOTE_WRITE),
        WcStatus::Success
    );
    let qpn = h.ep(1).qpn;
    h.p.sim.nodes[1].destroy_qp(qpn).unwrap();
    let b = h.p.sim.nodes[1].query_mw(mw >> 8).unwrap().binding;
    assert!(b.is_some_and(|b| b.qpn != Some(qpn)), "{b:?}");
    assert!(h.p.sim.nodes[1].dereg_mr(lkey).is_err());
}

#[test]
fn a_bind_completes_after_the_write_posted_before_it() {
    // IBA 10.8.5: send completions in posting order, local operations too
    let (mut h, lkey, mw) = setup(MwType::Type2);
    // B writes to A (B's QP is the one that binds), then binds
    let a = h.ep(0);
    h.fill(1, 0, &[7; 2048]);
    h.send(
        1,
        wr(
            40,
            SendOp::Write {
                remote_addr: a.base + 0x1000,
                rkey: a.rkey,
            },
            h.sgl(1, 0, 2048),
        ),
    );
    let bind = h.bind_wc(1, mw, 1, lkey, MR_ADDR, 0x100, access::REMOTE_READ);
    let mut order: Vec<_> = h.take(1).iter().map(|w| (w.wr_id, w.opcode)).collect();
    order.push((bind.wr_id, bind.opcode));
    assert_eq!(order, [(40, WcOpcode::RdmaWrite), (77, WcOpcode::BindMw)]);
}

#[test]
fn a_local_write_right_in_a_bind_is_ignored() {
    // IBA 10.6.7.2: a window grants remote rights; LOCAL_WRITE asked with
    // them (rdma-core's suite does) binds, and grants nothing more
    let (mut h, lkey, mw) = setup(MwType::Type2);
    let acc = access::LOCAL_WRITE | access::REMOTE_WRITE;
    assert_eq!(
        h.bind(1, mw, 6, lkey, MR_ADDR, 0x100, acc),
        WcStatus::Success
    );
    let rkey = h.mw_rkey(1, mw);
    assert_eq!(write(&mut h, rkey, MR_ADDR, b"ok"), WcStatus::Success);
    assert_eq!(h.mem(1, MR_AT, 2), b"ok");
    let read = SendOp::Read {
        remote_addr: MR_ADDR,
        rkey,
    };
    h.send(0, wr(8, read, h.sgl(0, 0x100, 8)));
    h.run_for_wcs(1, 0);
    assert_eq!(h.take(0)[0].status, WcStatus::RemAccessErr);
}
