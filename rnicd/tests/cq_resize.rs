//! `ResizeCq` (`ibv_resize_cq`) through the daemon: sizes out of range
//! are refused with the CQ left as it was; a resize gives a ring of the
//! next power of two that the CQ goes on using, with its completions
//! (the completions waiting across a resize: ibverbs' extverbs_check.c).

mod common;

use common::{tempdir, Daemon};
use softrnic::Context;

#[test]
fn a_cq_is_resized_or_left_as_it_was() {
    let dir = tempdir("cq-resize");
    let d = Daemon::start(None, &["--mem-pair", "--name", "t"], &dir);
    let ctx = Context::open(d.sock("t0")).expect("t0");
    let mut cq = ctx.create_cq(16).expect("create_cq");
    assert_eq!(cq.entries(), 16);
    for bad in [0, 1 << 31] {
        let e = cq.resize(bad).expect_err("a size out of range");
        assert!(e.to_string().contains("CQ size"), "{e}");
        assert_eq!(cq.entries(), 16);
    }
    assert_eq!(cq.resize(100).expect("grow"), 128);
    assert_eq!(cq.entries(), 128);
    assert_eq!(cq.resize(3).expect("shrink, nothing waiting"), 4);
    let mut out = Vec::new();
    assert_eq!(cq.poll(4, &mut out), 0);
    // the CQ is the daemon's as before: a QP can use it, destroy works
    let pd = ctx.alloc_pd().expect("pd");
    let qp = pd
        .create_qp(&softrnic::QpInitAttr {
            qp_type: softrnic::QpKind::Rc,
            send_cq: cq.handle,
            recv_cq: cq.handle,
            max_send_wr: 4,
            max_recv_wr: 4,
            sq_sig_all: false,
            srq: None,
        })
        .expect("a QP on the resized CQ");
    qp.destroy().expect("destroy qp");
    cq.destroy().expect("destroy cq");
}

/// The device takes a CQ of every size up to the `max_cqe` it reports,
/// and refuses one more; that maximum holds what libfabric's `ofi_rxm`
/// asks for by default (its MSG CQ: 256 work requests for each of 1024
/// peers, 262144 entries).
#[test]
fn a_cq_of_max_cqe_entries_is_made_and_one_more_refused() {
    let dir = tempdir("cq-max");
    let d = Daemon::start(None, &["--mem-pair", "--name", "t"], &dir);
    let ctx = Context::open(d.sock("t0")).expect("t0");
    let max = ctx.device.max_cqe;
    assert!(max >= 262_144, "max_cqe {max} is below ofi_rxm's CQ");
    let e = ctx.create_cq(max + 1).err().expect("past max_cqe");
    assert!(e.to_string().contains("CQ size"), "{e}");
    for n in [262_144, max] {
        let mut cq = ctx.create_cq(n).expect("a CQ up to max_cqe");
        assert!(cq.entries() >= n, "{} entries for {n}", cq.entries());
        assert!(cq.resize(max + 1).is_err(), "resized past max_cqe");
        cq.destroy().expect("destroy cq");
    }
}
