//! What each client owns, and what the daemon holds for all of them:
//! the record every request is checked against, and the teardown when a
//! client goes away.

use super::Shared;
use ipc::proto::Stats;
use nic::transport::FIRST_QPN;
use nic::verbs::Wc;
use std::collections::{HashMap, HashSet};

/// Objects one client may hold (a bound, not a quota system).
pub(super) const MAX_OBJECTS: usize = 65536;

/// The objects one client holds.
#[derive(Default)]
pub(super) struct Owned {
    /// The client's process (SO_PEERCRED): its connections share QPs with
    /// its CM IDs.
    pub(super) pid: Option<i32>,
    pub(super) pds: HashSet<u32>,
    /// lkey → PD
    pub(super) mrs: HashMap<u32, u32>,
    /// memory window handle → PD
    pub(super) mws: HashMap<u32, u32>,
    pub(super) cqs: HashSet<u32>,
    /// QPN → what the QP uses
    pub(super) qps: HashMap<u32, OwnedQp>,
    /// AH handle → PD
    pub(super) ahs: HashMap<u32, u32>,
    /// SRQ → PD
    pub(super) srqs: HashMap<u32, u32>,
}

impl Owned {
    pub(super) fn count(&self) -> usize {
        self.pds.len()
            + self.mrs.len()
            + self.mws.len()
            + self.cqs.len()
            + self.qps.len()
            + self.ahs.len()
            + self.srqs.len()
    }
}

/// What one of a client's QPs uses (so that none of it goes first).
#[derive(Clone, Copy)]
pub(super) struct OwnedQp {
    pub(super) kind: ipc::proto::QpKind,
    pub(super) pd: u32,
    pub(super) send_cq: u32,
    pub(super) recv_cq: u32,
    pub(super) srq: Option<u32>,
}

/// Every client's objects and the daemon-wide pools.
#[derive(Default)]
pub(super) struct Registry {
    pub(super) clients: HashMap<u64, Owned>,
    pub(super) next_id: u64,
    pub(super) pd_pool: Vec<u32>,
    /// (CQN, capacity) of transport CQs no client holds (the transport has
    /// no destroy_cq: they are drained and reused).
    pub(super) cq_pool: Vec<(u32, usize)>,
    /// CQN → the capacity it was created with.
    pub(super) cq_cap: HashMap<u32, usize>,
    pub(super) max_qpn: u32,
    pub(super) reaped: u64,
    /// The last AH handle handed out (handles are daemon-wide, never 0).
    pub(super) last_ah: u32,
}
/// The QPs (number → type) of the process behind client connection `id`
/// (every connection of that process; only `id`'s when its process is
/// unknown).
pub(super) fn process_qps(sh: &Shared, id: u64) -> HashMap<u32, ipc::proto::QpKind> {
    let r = sh.reg.lock().expect("registry");
    let pid = r.clients.get(&id).and_then(|o| o.pid);
    r.clients
        .iter()
        .filter(|(c, o)| **c == id || (pid.is_some() && o.pid == pid))
        .flat_map(|(_, o)| o.qps.iter().map(|(n, q)| (*n, q.kind)))
        .collect()
}

/// Runs `f` on client `id`'s record.
pub(super) fn with_owned<R>(sh: &Shared, id: u64, f: impl FnOnce(&mut Owned) -> R) -> R {
    let mut r = sh.reg.lock().expect("registry");
    let o = r.clients.entry(id).or_default();
    f(o)
}

/// Takes the QPs out of the data plane and destroys them. As with a
/// hardware RNIC's destroy (rdma-core's mlx5 cleans the QP's entries out of
/// its CQs), no completion of a destroyed QP reaches a CQ ring afterwards:
/// its outstanding work requests are not flushed, and completions it left
/// in the device's CQs are taken out with it. A consumer that wants its
/// WRs back moves the QP to ERR and polls before destroying it.
pub(super) fn destroy_qps(sh: &Shared, qpns: Vec<u32>) {
    {
        let mut dp = sh.dataplane();
        for q in &qpns {
            dp.remove_qp(*q);
        }
    }
    let dp = sh.dp.clone();
    let _ = super::call(sh, move |r| {
        for q in &qpns {
            let _ = r.destroy_qp(*q);
        }
        // on the engine's thread, between two turns: no completion of
        // these QPs is produced or delivered while they are taken out
        dp.lock().expect("dp").forget_completions_of(r, &qpns);
    });
}

/// Takes the CQs out of the data plane and pools those that drain.
pub(super) fn release_cqs(sh: &Shared, cqs: Vec<u32>) {
    {
        let mut dp = sh.dataplane();
        for c in &cqs {
            dp.remove_cq(*c);
        }
    }
    // drain what is left; an overrun CQ cannot be reset and is not reused
    let reusable = super::call(sh, move |r| {
        let mut out: Vec<Wc> = Vec::new();
        let mut keep = Vec::new();
        for c in cqs {
            loop {
                out.clear();
                match r.poll_cq(c, 4096, &mut out) {
                    Ok(0) => {
                        keep.push(c);
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        }
        keep
    })
    .unwrap_or_default();
    let mut r = sh.reg.lock().expect("registry");
    for c in reusable {
        let cap = r.cq_cap.get(&c).copied().unwrap_or(0);
        r.cq_pool.push((c, cap));
    }
}

/// Tears down everything client `id` owned: its QPs go to the error state
/// (their WQEs flush; peers' packets to them are dropped, so peers see
/// retry-exceeded errors) and are destroyed, memory windows freed, MRs
/// deregistered (the
/// mappings are unmapped when the transport drops its last reference),
/// CQs drained and pooled, SRQs destroyed (their rings no longer polled),
/// AHs dropped, PDs pooled.
pub(super) fn cleanup(sh: &Shared, id: u64) {
    let o = {
        let mut r = sh.reg.lock().expect("registry");
        r.clients.remove(&id).unwrap_or_default()
    };
    // its CM IDs (a connected one sends a DREQ) and event channels
    sh.cm.lock().expect("cm").cleanup(id);
    let svc = sh.cm_arc();
    let _ = super::call(sh, move |r| {
        if let Ok(mut s) = svc.lock() {
            s.pump(r)
        }
    });
    destroy_qps(sh, o.qps.keys().copied().collect());
    {
        let mut dp = sh.dataplane();
        for s in o.srqs.keys() {
            dp.remove_srq(*s);
        }
        for a in o.ahs.keys() {
            dp.ahs.remove(a);
        }
        dp.events.remove(&id);
        dp.remove_client(id);
    }
    // its QPs are gone, so its SRQs have none attached
    let srqs: Vec<u32> = o.srqs.keys().copied().collect();
    let _ = super::call(sh, move |r| {
        for s in srqs {
            let _ = r.destroy_srq(s);
        }
    });
    // windows before regions: a region with bound windows stays
    let handles: Vec<u32> = o.mws.keys().copied().collect();
    let lkeys: Vec<u32> = o.mrs.keys().copied().collect();
    let _ = super::call(sh, move |r| {
        for h in handles {
            let _ = r.dealloc_mw(h);
        }
        for k in lkeys {
            let _ = r.dereg_mr(k);
        }
    });
    release_cqs(sh, o.cqs.into_iter().collect());
    let mut r = sh.reg.lock().expect("registry");
    r.pd_pool.extend(o.pds);
    r.reaped += 1;
}

/// Daemon-wide object counts.
pub(super) fn stats(sh: &Shared) -> Stats {
    let (mut s, max_qpn) = {
        let r = sh.reg.lock().expect("registry");
        let mut s = Stats {
            clients: r.clients.len() as u32,
            clients_reaped: r.reaped,
            ..Default::default()
        };
        for o in r.clients.values() {
            s.pds += o.pds.len() as u32;
            s.mrs += o.mrs.len() as u32;
            s.cqs += o.cqs.len() as u32;
            s.qps += o.qps.len() as u32;
            s.ahs += o.ahs.len() as u32;
            s.srqs += o.srqs.len() as u32;
        }
        (s, r.max_qpn)
    };
    {
        let dp = sh.dataplane();
        s.active_qp_rings = dp.qps.len() as u32;
        s.active_cq_rings = dp.cqs.len() as u32;
        s.active_srq_rings = dp.srqs.len() as u32;
    }
    s.cm = sh.cm.lock().expect("cm").stats();
    // one engine call: QP 1's counters and drops go to `cm`, the
    // transport's counters and the other drops to `counters`
    let (gsi, transport) = super::call(sh, |r| {
        let (mut gsi, drops): (Vec<_>, Vec<_>) = r
            .drops()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .partition(|(k, _)| k.starts_with("gsi_"));
        let c = r.gsi_counters();
        gsi.push(("gsi_rcvd".into(), c.gsi_rcvd));
        gsi.push(("gsi_sent".into(), c.gsi_sent));
        let mut transport: Vec<(String, u64)> =
            r.counters().iter().map(|(k, v)| (k.into(), v)).collect();
        transport.extend(drops);
        // 802.1Qbb: rx/tx_prio{p}_pause and _pause_duration (µs)
        transport.extend(r.pfc_counters(r.last_now()).iter());
        (gsi, transport)
    })
    .unwrap_or_default();
    s.cm.extend(gsi);
    s.counters.extend(transport);
    if let Ok(p) = sh.dev.port_counters() {
        s.counters.extend(p.iter().map(|(k, v)| (k.to_string(), v)));
    }
    s.rnic_qps = super::call(sh, move |r| {
        (FIRST_QPN..=max_qpn)
            .filter(|q| r.query_qp(*q).is_ok())
            .count() as u32
    })
    .unwrap_or(0);
    s
}
