//! What `rnic lab`'s tests check of a collective's results, on the lab's
//! own fabric and across machines alike.

use serde_json::Value;
use std::path::Path;

/// `collective.csv` of `out`: its header and a positive time for each of
/// the `iterations`, in order.
pub fn collective_times(out: &Path, iterations: usize) -> Vec<f64> {
    let csv = std::fs::read_to_string(out.join("collective.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("iteration,time_us"), "{csv}");
    let times: Vec<f64> = lines
        .enumerate()
        .map(|(i, l)| {
            let (n, t) = l.split_once(',').expect("iteration,time_us");
            assert_eq!(n, i.to_string(), "{csv}");
            t.parse().unwrap()
        })
        .collect();
    assert_eq!(times.len(), iterations, "{csv}");
    assert!(times.iter().all(|t| *t > 0.0), "{csv}");
    times
}

/// `collective` of `summary.json`: an allreduce of a rank on each of
/// `hosts` with a positive median, UCX's endpoints on each host's own
/// device and none on TCP.
pub fn an_allreduce_on_the_rnics(sum: &Value, hosts: &[&str]) {
    let c = &sum["collective"];
    assert_eq!(
        (c["kind"].as_str(), c["ranks"].as_u64()),
        (Some("allreduce"), Some(hosts.len() as u64)),
        "{c}"
    );
    assert!(c["median_us"].as_f64().unwrap() > 0.0, "{c}");
    let eps = c["ucx_endpoints"].to_string();
    for h in hosts {
        assert!(eps.contains(&format!("rc_verbs/{h}:1")), "{eps}");
    }
    assert!(!eps.contains("tcp"), "{eps}");
}
