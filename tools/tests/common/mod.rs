//! Helpers shared by the CLI tests: the `rnic` binary with a private state
//! directory, the third-party captures, and a minimal classic-pcap codec
//! for making damaged copies.
#![allow(dead_code)]

pub mod lab;
pub mod netns;
pub mod view;

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a test waits for a process or a condition: far more than a
/// loaded machine needs, so only a stuck run reaches it.
pub const STUCK: Duration = Duration::from_secs(120);

// each test binary uses some of them
#[allow(unused_imports)]
pub use testkit::{poll_within, wait_for};

/// The rdma-statistic counters every device of `rnic perf --json` carries
/// (scripts written for real RNICs read them), and its port's.
const HW_COUNTERS: [&str; 8] = [
    "sent_pkts",
    "rcvd_pkts",
    "out_of_sequence",
    "duplicate_request",
    "packet_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "retransmitted_pkts",
];
const PORT_COUNTERS: [&str; 5] = [
    "tx_packets",
    "tx_bytes",
    "rx_packets",
    "rx_bytes",
    "rx_dropped",
];

/// Asserts that `d`, one device of `rnic perf --json`, carries the
/// standard counters, `extra` ones, and its port's counters.
pub fn assert_device_counters(d: &serde_json::Value, extra: &[&str]) {
    for name in HW_COUNTERS.iter().chain(extra) {
        assert!(d["counters"][name].is_u64(), "{name} missing from {d}");
    }
    for name in PORT_COUNTERS {
        assert!(d["port_counters"][name].is_u64(), "{name} missing from {d}");
    }
}

/// `rnic` with its own state directory (so parallel tests do not share
/// `last-run.json`) and no progress bar.
pub fn rnic(state: &Path) -> Command {
    let mut c = Command::cargo_bin("rnic").expect("the rnic binary is built");
    c.env("SOFTRNIC_STATE_DIR", state);
    c.env_remove("XDG_RUNTIME_DIR");
    c
}

/// The rxe captures' folder, or None after `testkit::skip_or_fail`.
pub fn rxe_dir(test: &str) -> Option<PathBuf> {
    testkit::pcap::rxe_pcaps(test)
}

#[allow(unused_imports)]
pub use testkit::pcap::pcap_files;

/// A classic little-endian pcap file: the 24-byte header and the records
/// (record header, data).
pub struct Pcap {
    pub header: Vec<u8>,
    pub records: Vec<([u8; 16], Vec<u8>)>,
}

impl Pcap {
    pub fn read(path: &Path) -> Pcap {
        let b = std::fs::read(path).unwrap();
        assert_eq!(
            &b[..4],
            &[0xD4, 0xC3, 0xB2, 0xA1],
            "{}: little-endian pcap expected",
            path.display()
        );
        let mut records = Vec::new();
        let mut off = 24;
        while off < b.len() {
            let mut h = [0u8; 16];
            h.copy_from_slice(&b[off..off + 16]);
            let incl = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
            records.push((h, b[off + 16..off + 16 + incl].to_vec()));
            off += 16 + incl;
        }
        Pcap {
            header: b[..24].to_vec(),
            records,
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = self.header.clone();
        for (h, d) in &self.records {
            out.extend_from_slice(h);
            out.extend_from_slice(d);
        }
        out
    }

    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.bytes()).unwrap();
    }

    /// Replaces record `i`'s data, setting the captured length to the new
    /// length and the original length to `orig`.
    pub fn set_data(&mut self, i: usize, data: Vec<u8>, orig: u32) {
        let h = &mut self.records[i].0;
        h[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.records[i].1 = data;
    }

    /// Index of the first record whose RoCEv2 opcode is `name`.
    pub fn find(&self, name: &str) -> usize {
        self.records
            .iter()
            .position(|(_, d)| wire::RoceRepr::parse(d).is_ok_and(|r| r.bth.opcode.name() == name))
            .unwrap_or_else(|| panic!("no {name} frame"))
    }
}

/// What tshark-judge printed about a capture it refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// tshark-judge's verdict on a capture (Wireshark with its payload
/// heuristics off): `Some(Ok(text))` clean, `Some(Err(text))` not, `None`
/// when tshark or the judge is missing here (after
/// [`testkit::skip_or_fail`] for `test`, so under CI the test fails).
pub fn tshark_verdict(test: &str, file: &Path) -> Option<Result<String, Refused>> {
    if !testkit::tshark_runs(test) {
        return None;
    }
    let judge = testkit::tshark_judge(test)?;
    let out = std::process::Command::new("bash")
        .arg(&judge)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", judge.display()));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    Some(if out.status.success() {
        Ok(text)
    } else {
        Err(Refused(text))
    })
}

/// Skips (loudly) or, when CI is set, fails for a missing tool.
pub fn missing_tool(test: &str, tool: &str) {
    testkit::skip_or_fail(
        test,
        &format!("{tool} is not installed (Debian package tshark; .ci/run installs it)"),
    );
}

/// A copy of the rxe capture `name` with `damage` done to it (which
/// returns the frame it damaged), in a temporary folder; None after a
/// SKIPPED line when the captures are missing.
pub fn damaged(
    test: &str,
    name: &str,
    damage: impl FnOnce(&mut Pcap) -> usize,
) -> Option<(tempfile::TempDir, std::path::PathBuf, usize)> {
    let dir = rxe_dir(test)?;
    let mut p = Pcap::read(&dir.join(name));
    let frame = damage(&mut p);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(format!("damaged-{name}"));
    p.write(&path);
    Some((tmp, path, frame))
}

/// A copy of `p` that ends 500 bytes before the end of record `i` (as
/// when the capturing tool is killed mid-write), in a temporary folder.
pub fn cut_inside(p: &Pcap, i: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let keep = Pcap {
        header: p.header.clone(),
        records: p.records[..=i].to_vec(),
    };
    let mut bytes = keep.bytes();
    bytes.truncate(bytes.len() - 500);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cut.pcap");
    std::fs::write(&path, bytes).unwrap();
    (tmp, path)
}
