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
/// `summary.json`).
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
    // the hosts' ports: a trunk's carry the same bytes again
    let ports = a.ports.iter().zip(&b.ports).take(n);
    let link: u64 = ports
        .clone()
        .map(|(p, q)| q.sent.saturating_sub(p.sent))
        .sum();
    let roce: u64 = ports.map(|(p, q)| q.seen.saturating_sub(p.seen)).sum();
    let around = link > 0 && rdma.saturating_mul(2) < link;
    let verdict = format!(
        "RDMA moved {}; the links moved {}: {}",
        bytes(rdma),
        bytes(link),
        if around {
            "traffic went around the RNIC"
        } else {
            "the traffic went through the RNICs"
        }
    );
    json!({
        "rdma_bytes": rdma,
        "link_bytes": link,
        "roce_frames": roce,
        "cnps_sent": d("np_cnp_sent"),
        "ucx_endpoints": endpoints,
        "around_the_rnic": around,
        "verdict": verdict,
    })
}

/// The signs as output lines.
pub fn lines(s: &Value) -> Vec<String> {
    let mut v = vec![s["verdict"].as_str().unwrap_or("").to_string()];
    v.push(format!(
        "RoCEv2 frames through the switch {}, CNPs sent {}, UCX endpoints on {}",
        s["roce_frames"],
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
        s["link_bytes"],
        s["roce_frames"],
        s["cnps_sent"],
        esc(&endpoint_text(&s["ucx_endpoints"])),
        if around {
            "<p>The job ran and its results were right, but its bytes went over TCP sockets of \
             the hosts' kernels (the link pcaps hold TCP, not UDP 4791): no RDMA, no ECN \
             reaction, no CNP.</p>"
        } else {
            ""
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::sample::PortStat;
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
}
