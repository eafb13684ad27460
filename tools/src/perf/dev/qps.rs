//! The QPs of a test on a real interface: created and brought to INIT
//! (with receives where SENDs arrive), then perftest's handshakes around
//! connecting them to the peer's.

use super::exchange::{Dest, Peer, Wait};
use crate::netdev::{self, NetDev};
use crate::perf::{half, Mode, Settings, Verb};
use crate::qp::Connect;
use crate::CliError;
use nic::verbs::{RecvWr, Sgl};

/// Receives posted per QP: perftest's SEND default (512), at least twice
/// the tx depth.
fn rx_depth(s: &Settings) -> u32 {
    match s.mode {
        Mode::Bw => (s.tx_depth * 2).max(512),
        Mode::Lat => 64,
    }
}

fn qp_depth(s: &Settings) -> u32 {
    s.tx_depth.max(rx_depth(s)).max(64)
}

/// Outstanding RDMA READs / atomics our responder takes and that we
/// advertise in READ and atomic tests: as perftest, the device's maximum
/// (`max_qp_rd_atom`, 128 as rxe's), 1 otherwise.
pub(super) const OUT_READS: u16 = nic::verbs::qp::MAX_RD_ATOMIC as u16;

/// Creates `n` QPs, brings them to INIT and (where SENDs arrive) posts
/// receives. Returns (QPN, first PSN) pairs.
pub(super) fn make(
    nd: &mut NetDev,
    s: &Settings,
    n: usize,
    receives: bool,
) -> Result<Vec<(u32, u32)>, CliError> {
    let depth = qp_depth(s);
    let h = half(s.sizes.iter().copied().max().unwrap_or(8)) as u64;
    let mut out = Vec::new();
    for _ in 0..n {
        let q = nd.create_qp(s.qp_type, depth)?;
        nd.init(q, s.qp_type)?;
        if receives {
            for k in 0..rx_depth(s) {
                nd.dev
                    .post_recv(
                        q,
                        RecvWr {
                            wr_id: k as u64,
                            sgl: Sgl::single(nd.base + h, h as u32, nd.lkey),
                        },
                    )
                    .map_err(|e| CliError::new(format!("post_recv: {e}")))?;
            }
        }
        out.push((q, netdev::random_psn()));
    }
    Ok(out)
}

fn connect_all(nd: &NetDev, s: &Settings, mine: &[Dest], peer: &[Dest]) -> Result<(), CliError> {
    let gid = peer[0].gid;
    if gid.to_ipv4().is_none() != nd.gid.to_ipv4().is_none() {
        // perftest's ctx_check_gid_compatibility
        return Err(CliError::new(format!(
            "the peer's GID {} and ours {} are not both IPv4 (or both IPv6)",
            gid.to_ip(),
            nd.gid.to_ip()
        )));
    }
    let ah = nd.ah_to(gid)?;
    for (m, p) in mine.iter().zip(peer) {
        // perftest: max_rd_atomic = the peer's out_reads (what its responder
        // takes), max_dest_rd_atomic = our own
        let c = Connect {
            max_rd_atomic: p.out_reads.clamp(1, OUT_READS) as u8,
            max_dest_rd_atomic: m.out_reads.clamp(1, OUT_READS) as u8,
            ..Connect::new(s.qp_type, ah, s.mtu, p.qpn).with_psns(m.psn, p.psn)
        };
        nd.connect(m.qpn, c)?;
    }
    Ok(())
}

/// perftest's handshakes before and after connecting the QPs.
pub(super) fn hand_shakes(
    peer: &mut Peer,
    nd: &NetDev,
    s: &Settings,
    mine: &[Dest],
) -> Result<Vec<Dest>, CliError> {
    let mut idle = |n: u64| nd.idle(n);
    let q = mine.len();
    let mut theirs = vec![mine[0]; q];
    let lat_not_send = s.mode == Mode::Lat && s.verb != Verb::Send;
    // the expected order of our records: (index, "where")
    let mut before: Vec<usize> = Vec::new();
    if lat_not_send {
        before.push(0);
    }
    before.extend(0..q);
    let mut after: Vec<usize> = Vec::new();
    if s.verb == Verb::Send {
        after.push(0);
        after.extend(0..q);
    } else {
        after.extend(0..q);
        after.push(0);
    }
    for (k, &i) in before.iter().enumerate() {
        let d = peer.hand_shake(&mine[i], Wait::Setup, &mut idle)?;
        if lat_not_send && k == 0 {
            continue;
        }
        theirs[i] = d;
    }
    for d in &theirs {
        // QP 0 is the subnet management QP, never a connected one
        if d.qpn == 0 {
            return Err(CliError::new(
                "the peer's handshake names QP 0: not a connected QP's",
            ));
        }
    }
    connect_all(nd, s, mine, &theirs)?;
    for &i in &after {
        let d = peer.hand_shake(&mine[i], Wait::Setup, &mut idle)?;
        check_same(&d, &theirs[i])?;
    }
    Ok(theirs)
}

/// Every later handshake repeats the QP's first record (perftest sends the
/// same `my_dest` each time); a different one means the two sides run
/// different tests or `-q`.
fn check_same(got: &Dest, want: &Dest) -> Result<(), CliError> {
    if got.qpn != want.qpn || got.psn != want.psn {
        return Err(CliError::new(format!(
            "the peer's handshake names QPN {:#x} PSN {:#x} where QPN {:#x} PSN {:#x} was due: the two sides run different tests, -q or -a",
            got.qpn, got.psn, want.qpn, want.psn
        )));
    }
    Ok(())
}
