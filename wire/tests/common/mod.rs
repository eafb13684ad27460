//! Helpers shared by the integration tests: where the third-party captures
//! live and how to read a classic pcap file.
#![allow(dead_code)]
pub mod sample_frames;

use std::path::{Path, PathBuf};

/// `../shared/pcaps/rxe-public` beside the repository root, or the folder
/// named by `SOFTRNIC_RXE_PCAPS`.
pub fn rxe_pcaps_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("SOFTRNIC_RXE_PCAPS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/pcaps/rxe-public"),
    };
    dir.is_dir().then_some(dir)
}

/// Every `.pcap` below `dir`, sorted.
pub fn pcap_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "pcap") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

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
    let Some(dir) = rxe_pcaps_dir() else {
        eprintln!(
            "SKIPPED {test}: ../shared/pcaps/rxe-public is missing (set SOFTRNIC_RXE_PCAPS to the folder); \
             the third-party captures are not in this checkout"
        );
        return None;
    };
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
