//! Running tshark on frames we write: a classic pcap of them at fixed
//! timestamps ([`pcap_of`]) and tshark with tshark-judge's payload
//! heuristics off ([`tshark`]).

use std::process::Command;
use std::time::Duration;

/// The payload heuristics tshark-judge turns off: they misread small SEND
/// payloads as RPC-over-RDMA, iSER, SMB Direct, ... even in real captures.
pub const DISABLED_HEURISTICS: [&str; 9] = [
    "eth_over_ib",
    "fc_infiniband",
    "iser_infiniband",
    "lnet_ib",
    "rpcrdma_infiniband",
    "sdp_infiniband",
    "smb_direct_infiniband",
    "smcr_infiniband",
    "nvme_rdma",
];

/// First packet timestamp: fixed, so the pcap is byte-for-byte reproducible.
pub const EPOCH: Duration = Duration::from_secs(1_700_000_000);
/// Gap between packets.
pub const GAP: Duration = Duration::from_millis(1);

/// A classic pcap (Ethernet, microsecond timestamps, little-endian) of
/// `frames`, [`GAP`] apart from [`EPOCH`].
pub fn pcap_of(frames: &[Vec<u8>]) -> Vec<u8> {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        endianness: pcap_file::Endianness::Little,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let ts = EPOCH + GAP * i as u32;
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .unwrap();
    }
    w.into_writer()
}

/// `tshark -n ARGS` with the heuristics off; its stdout (it must succeed).
pub fn tshark(args: &[&str]) -> String {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n");
    for h in DISABLED_HEURISTICS {
        cmd.args(["--disable-heuristic", h]);
    }
    let out = cmd.args(args).output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tshark prints UTF-8")
}
