//! What the lab measures, every `sample_ms`: each host's rnicd counters
//! (through its control socket, as `rnic stats --daemon` reads them), and
//! on each switch each egress queue's backlog, drops and bytes (`tc -s -j
//! qdisc`) and each port's RoCEv2 frames and CE marks (the nftables
//! counters), and each sender's QPs' DCQCN state (Rc, Rt, α: [`super::dcqcn`]
//! writes and draws it).

use super::host::Daemon;
use super::net::{Fabric, TABLE};
use super::pfc::PfcStage;
use super::sys::{in_ns, run};
use super::LabError;
use serde_json::Value;
use softrnic::proto::CcStates;
use std::collections::BTreeMap;

/// One switch port's egress queue and marking, at one instant.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PortStat {
    /// Bytes in the tbf queue now.
    pub backlog: u64,
    /// Frames in the tbf queue now.
    pub qlen: u64,
    /// Frames the queue dropped so far (tail drop).
    pub drops: u64,
    /// Bytes the queue sent so far.
    pub sent: u64,
    /// RoCEv2 frames toward the port so far (nftables `seen_hI`).
    pub seen: u64,
    /// Of those, CE-marked (nftables `marked_hI`).
    pub marked: u64,
}

/// Everything sampled at `t` seconds into the workload.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub t: f64,
    /// Each host's device counters (`rdma statistic` and port names).
    pub hosts: Vec<BTreeMap<String, u64>>,
    /// Each switch port's egress queue, in the fabric's order
    /// ([`Fabric::ports`]): toward each host, then across the trunk.
    pub ports: Vec<PortStat>,
    /// Each host's QPs' DCQCN state (the senders'; none for the receiver).
    pub cc: Vec<CcStates>,
    /// PFC frames the switches sent out of each port so far, per priority
    /// ([`super::pfc`]; empty without PFC).
    pub pfc_sent: super::pfc::SentCounts,
    /// The pauses each trunk port honoured so far (empty without PFC).
    pub pfc_held: Vec<super::pfc_hold::Held>,
}

/// Takes one snapshot of the hosts and the switch, the DCQCN state of
/// the senders from host `first_sender` on (h1 in the incast, every host
/// in a collective).
/// With a PFC stage, its sent counts as of now too (an error once the
/// stage has stopped on one).
pub fn snapshot(
    t: f64,
    daemons: &[Daemon],
    fabric: &Fabric,
    pfc: Option<&PfcStage>,
    first_sender: usize,
) -> Result<Snapshot, LabError> {
    let hosts = daemons
        .iter()
        .map(Daemon::counters)
        .collect::<Result<Vec<_>, _>>()?;
    // the senders' DCQCN state; none for the incast's receiver h0
    let cc = daemons
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if i < first_sender {
                Ok(CcStates::default())
            } else {
                d.cc_states()
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut ports = vec![PortStat::default(); fabric.ports.len()];
    for sw in fabric.switches() {
        let qdisc = run("tc", &["-n", &sw, "-s", "-j", "qdisc", "show"])?;
        let nft = in_ns(
            &sw,
            &["nft", "-j", "list", "counters", "table", "bridge", TABLE],
        )?;
        for (p, stat) in fabric.ports.iter().zip(&mut ports) {
            if p.switch == sw {
                *stat = port_stat(&qdisc, &nft, &p.iface, &p.name);
            }
        }
    }
    let counts = pfc.map(PfcStage::counts).transpose()?.unwrap_or_default();
    Ok(Snapshot {
        t,
        hosts,
        ports,
        cc,
        pfc_sent: counts.sent,
        pfc_held: counts.held,
    })
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// Port `port`'s root qdisc statistics from `tc -s -j qdisc show` and the
/// counters `seen_<host>`, `marked_<host>` from `nft -j list counters`.
pub fn port_stat(qdisc: &str, nft: &str, port: &str, host: &str) -> PortStat {
    let mut s = PortStat::default();
    let q = json(qdisc);
    if let Some(q) = q
        .as_array()
        .into_iter()
        .flatten()
        .find(|q| q["dev"] == port && q["root"] == true)
    {
        let n = |k: &str| q[k].as_u64().unwrap_or(0);
        (s.backlog, s.qlen, s.drops, s.sent) = (n("backlog"), n("qlen"), n("drops"), n("bytes"));
    }
    let n = json(nft);
    for c in n["nftables"].as_array().into_iter().flatten() {
        let c = &c["counter"];
        let packets = c["packets"].as_u64().unwrap_or(0);
        match c["name"].as_str() {
            Some(name) if name == format!("seen_{host}") => s.seen = packets,
            Some(name) if name == format!("marked_{host}") => s.marked = packets,
            _ => {}
        }
    }
    s
}

/// Counter `name` of host `i` (0 when the daemon has no such counter).
pub fn counter(s: &Snapshot, i: usize, name: &str) -> u64 {
    s.hosts
        .get(i)
        .and_then(|c| c.get(name))
        .copied()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_reads_its_root_qdisc_and_its_own_counters() {
        let qdisc = r#"[{"kind":"noqueue","handle":"0:","dev":"lo","root":true,"bytes":0},
            {"kind":"tbf","handle":"8001:","dev":"p1","root":true,"bytes":9000,"packets":6,
             "drops":2,"overlimits":5,"requeues":0,"backlog":3000,"qlen":2}]"#;
        let nft = r#"{"nftables":[{"metainfo":{}},
            {"counter":{"family":"bridge","name":"seen_h1","table":"rnlab","packets":8,"bytes":1}},
            {"counter":{"family":"bridge","name":"marked_h1","table":"rnlab","packets":3,"bytes":1}},
            {"counter":{"family":"bridge","name":"seen_h10","table":"rnlab","packets":99,"bytes":1}}]}"#;
        let s = port_stat(qdisc, nft, "p1", "h1");
        assert_eq!(
            s,
            PortStat {
                backlog: 3000,
                qlen: 2,
                drops: 2,
                sent: 9000,
                seen: 8,
                marked: 3
            }
        );
        assert_eq!(port_stat("garbage", "", "p1", "h1"), PortStat::default());
    }
}
