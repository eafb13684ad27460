//! Helpers shared by the integration tests: where the third-party captures
//! live and how to read a classic pcap file.
#![allow(dead_code)]
pub mod sample_frames;
pub mod tshark;
pub mod tshark_fields;

use std::path::Path;

pub use testkit::pcap::pcap_files;

/// The frames of a classic pcap file.
pub fn read_frames(path: &Path) -> Vec<Vec<u8>> {
    let file = std::fs::File::open(path).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// Every frame of every third-party capture, or None (with a loud message)
/// when `../shared` is not there.
pub fn rxe_frames(test: &str) -> Option<Vec<(String, Vec<Vec<u8>>)>> {
    let dir = testkit::pcap::rxe_pcaps(test)?;
    Some(
        pcap_files(&dir)
            .into_iter()
            .map(|p| {
                (
                    p.strip_prefix(&dir).unwrap().display().to_string(),
                    read_frames(&p),
                )
            })
            .collect(),
    )
}

/// Independent opinion (etherparse) on whether a frame is UDP to port 4791.
pub fn is_rocev2(frame: &[u8]) -> bool {
    match etherparse::SlicedPacket::from_ethernet(frame) {
        Ok(s) => {
            matches!(s.transport, Some(etherparse::TransportSlice::Udp(u)) if u.destination_port() == 4791)
        }
        Err(_) => false,
    }
}
