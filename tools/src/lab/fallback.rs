//! The signs that give a silent fallback from RDMA to TCP away, for a
//! collective run: what the hosts' RNICs moved (their rnicds' `tx_bytes`)
//! against what the links moved (the switch's egress queues' bytes), the
//! RoCEv2 frames the switch saw (its nftables counters of UDP 4791), the
//! CNPs, and the transports UCX reported. When the RNICs moved less than
//! half of what the links did, the traffic went around them.

use super::run_info::RunInfo;
use super::sample::{counter, Snapshot};
use serde_json::{json, Value};

/// Bytes in a readable unit, and exact.
fn bytes(b: u64) -> String {
    match b {
        b if b >= 1_000_000 => format!("{:.1} MB ({b} B)", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.1} KB ({b} B)", b as f64 / 1e3),
        b => format!("{b} B"),
    }
}

/// The signs between the first and last snapshot (`fallback` in
/// `summary.json`). Across machines no link is observable: the RNICs'
/// bytes are weighed against the bytes the collective sent at least
/// ([`super::run_info::CollectiveRun::bytes_sent`]) instead, and the
/// link's and the switch's entries are null.
pub fn signs(info: &RunInfo, snaps: &[Snapshot], endpoints: &Value) -> Value {
    let (Some(a), Some(b)) = (snaps.first(), snaps.last()) else {
        return json!({});
    };
    let n = info.hosts.len();
    let d = |k: &str| -> u64 {
        (0..n)
            .map(|i| counter(b, i, k).saturating_sub(counter(a, i, k)))
            .sum()
    };
    let rdma = d("tx_bytes");
    let sent = info.collective.map_or(0, |c| c.bytes_sent(n));
    let (link, roce, verdict_of) = if a.ports.is_empty() {
        let ref_text = format!("the collective sent at least {}", bytes(sent));
        (None, None, (sent, ref_text))
    } else {
        // the hosts' ports: a trunk's carry the same bytes again
        let ports = a.ports.iter().zip(&b.ports).take(n);
        let link: u64 = ports
            .clone()
            .map(|(p, q)| q.sent.saturating_sub(p.sent))
            .sum();
        let roce: u64 = ports.map(|(p, q)| q.seen.saturating_sub(p.seen)).sum();
        (
            Some(link),
            Some(roce),
            (link, format!("the links moved {}", bytes(link))),
        )
    };
    let (reference, ref_text) = verdict_of;
    let around = reference > 0 && rdma.saturating_mul(2) < reference;
    let verdict = format!(
        "RDMA moved {}; {ref_text}: {}",
        bytes(rdma),
        match (reference, around) {
            (0, _) => "no traffic to judge",
            (_, true) => "traffic went around the RNIC",
            (_, false) => "the traffic went through the RNICs",
        }
    );
    json!({
        "rdma_bytes": rdma,
        "link_bytes": link,
        "collective_bytes": sent,
        "roce_frames": roce,
        "cnps_sent": d("np_cnp_sent"),
        "ucx_endpoints": endpoints,
        "around_the_rnic": around,
        "verdict": verdict,
    })
}

/// A count of the signs, or `not observable` when null.
fn seen(v: &Value) -> String {
    if v.is_null() {
        "not observable".into()
    } else {
        v.to_string()
    }
}

/// The signs as output lines.
pub fn lines(s: &Value) -> Vec<String> {
    let mut v = vec![s["verdict"].as_str().unwrap_or("").to_string()];
    v.push(format!(
        "RoCEv2 frames through the switch {}, CNPs sent {}, UCX endpoints on {}",
        seen(&s["roce_frames"]),
        s["cnps_sent"],
        endpoint_text(&s["ucx_endpoints"])
    ));
    v
}

fn endpoint_text(e: &Value) -> String {
    let list: Vec<&str> = e
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if list.is_empty() {
        "(none reported)".into()
    } else {
        list.join("; ")
    }
}

/// The page's box: the verdict, and the signs under it (`esc` escapes
/// text for HTML).
pub fn html(s: &Value, esc: fn(&str) -> String) -> String {
    let around = s["around_the_rnic"] == true;
    format!(
        "<div class=\"{}\"><p><b>{}</b></p><ul><li>rnicd tx_bytes, all hosts: {}</li>\
         <li>bytes through the switch's egress queues (the links): {}</li>\
         <li>RoCEv2 frames (UDP 4791) through the switch: {}</li><li>CNPs sent: {}</li>\
         <li>UCX's endpoints: {}</li></ul>{}</div>\n",
        if around { "fallback" } else { "through" },
        esc(s["verdict"].as_str().unwrap_or("")),
        s["rdma_bytes"],
        seen(&s["link_bytes"]),
        seen(&s["roce_frames"]),
        s["cnps_sent"],
        esc(&endpoint_text(&s["ucx_endpoints"])),
        if around {
            "<p>The job ran and its results were right, but its bytes went over TCP sockets of \
             the hosts' kernels (on the wire TCP, not UDP 4791): no RDMA, no ECN reaction, no \
             CNP.</p>"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::run_info::CollectiveRun;
    use crate::lab::sample::PortStat;
    use crate::lab::workload::{UcxTls, Workload};
    use std::collections::BTreeMap;

    fn snap(tx: u64, sent: u64, seen: u64) -> Snapshot {
        let host: BTreeMap<String, u64> = [("tx_bytes".to_string(), tx)].into();
        let port = PortStat {
            sent,
            seen,
            ..PortStat::default()
        };
        Snapshot {
            t: 0.0,
            hosts: vec![host.clone(), host],
            ports: vec![port.clone(), port],
            cc: Vec::new(),
            pfc_sent: Vec::new(),
            pfc_held: Vec::new(),
        }
    }

    #[test]
    fn the_rnics_moving_little_of_the_links_bytes_is_the_fallback() {
        let hosts = ["h0".to_string(), "h1".to_string()];
        let info = RunInfo {
            hosts: &hosts,
            ..RunInfo::default()
        };
        let tcp = signs(
            &info,
            &[snap(0, 0, 0), snap(100, 5_000_000, 0)],
            &json!(["tcp/x"]),
        );
        assert_eq!(
            (tcp["rdma_bytes"].as_u64(), tcp["link_bytes"].as_u64()),
            (Some(200), Some(10_000_000))
        );
        assert_eq!(tcp["around_the_rnic"], true);
        assert!(
            tcp["verdict"]
                .as_str()
                .unwrap()
                .ends_with("went around the RNIC"),
            "{tcp}"
        );
        let rdma = signs(
            &info,
            &[snap(0, 0, 0), snap(5_000_000, 5_100_000, 4000)],
            &json!([]),
        );
        assert_eq!(rdma["around_the_rnic"], false);
        assert_eq!(rdma["roce_frames"], 8000);
    }

    #[test]
    fn across_machines_the_rnics_bytes_are_weighed_against_the_collectives() {
        let hosts = ["h0".to_string(), "h1".to_string()];
        // 4 iterations of a 1 MB ring allreduce on 2 ranks: each rank sends
        // 1 MB an iteration, 8 MB in all
        let run = CollectiveRun {
            workload: Workload::Allreduce,
            size: 1_000_000,
            ucx_tls: UcxTls::Tcp,
            times_us: vec![1.0; 4],
            endpoints: Vec::new(),
        };
        let info = RunInfo {
            hosts: &hosts,
            collective: Some(&run),
            ..RunInfo::default()
        };
        let unobserved = |tx: u64| {
            let [a, b] = [snap(0, 0, 0), snap(tx, 0, 0)].map(|mut s| {
                s.ports.clear();
                s
            });
            signs(&info, &[a, b], &json!([]))
        };
        let tcp = unobserved(10_000);
        assert_eq!(tcp["collective_bytes"], 8_000_000);
        assert!(tcp["link_bytes"].is_null() && tcp["roce_frames"].is_null());
        assert_eq!(tcp["around_the_rnic"], true, "{tcp}");
        assert!(lines(&tcp)[1].contains("switch not observable"));
        assert!(html(&tcp, str::to_string).contains("egress queues (the links): not observable"));
        let none = signs(&info, &[snap(0, 0, 0), snap(0, 0, 0)], &json!([]));
        assert!(none["verdict"]
            .as_str()
            .unwrap()
            .ends_with("no traffic to judge"));
        let rdma = unobserved(2_200_000);
        assert_eq!(rdma["around_the_rnic"], false, "{rdma}");
        assert!(
            rdma["verdict"]
                .as_str()
                .unwrap()
                .contains("the collective sent at least 8.0 MB"),
            "{rdma}"
        );
    }
}
