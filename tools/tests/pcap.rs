//! `rnic pcap check | dump` on the third-party Linux Soft-RoCE captures,
//! and on damaged copies of them made here: one corrupted byte, one
//! dropped frame, one truncated frame, a truncated file. `pcap replay` is
//! in pcap_replay.rs.

mod common;

use common::{cut_inside, damaged, pcap_files, rnic, rxe_dir, Pcap};
use predicates::prelude::*;
use std::path::Path;

/// Every frame of every rxe capture passes, and the checker counts as
/// RoCEv2 exactly the frames the wire crate parses.
#[test]
fn every_rxe_capture_passes_the_check() {
    let Some(dir) = rxe_dir("every_rxe_capture_passes_the_check") else {
        return;
    };
    let files = pcap_files(&dir);
    assert!(
        files.len() >= 20,
        "expected 11 + 9 captures, found {}",
        files.len()
    );
    assert!(files.iter().any(|f| f.to_string_lossy().contains("nccl")));
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .arg("pcap")
        .arg("check")
        .args(&files)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    for f in &files {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{}: ok: ", f.display())))
            .unwrap_or_else(|| panic!("no verdict for {}:\n{text}", f.display()));
        let roce: u64 = line
            .split(" frames: ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("cannot read the RoCE count in {line}"));
        let p = Pcap::read(f);
        let parsed = p
            .records
            .iter()
            .filter(|(_, d)| wire::RoceRepr::parse(d).is_ok())
            .count() as u64;
        assert!(parsed > 0, "{}: no RoCE frame", f.display());
        assert_eq!(roce, parsed, "{line}");
    }
}

fn fails_with(path: &Path, needles: &[&str]) {
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["pcap", "check"])
        .arg(path)
        .assert()
        .failure()
        .code(1);
    let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
    assert_eq!(err.lines().count(), 1, "one line expected:\n{err}");
    assert!(err.starts_with("rnic: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} missing from: {err}");
    }
}

/// A copy of capture `name` changed by `damage` (which returns the number
/// of the frame the check must name) fails the check with one line naming
/// that frame and holding every one of `needles`.
fn damage_fails_at(
    test: &str,
    name: &str,
    damage: impl FnOnce(&mut Pcap) -> usize,
    needles: &[&str],
) {
    let Some((_t, path, frame)) = damaged(test, name, damage) else {
        return;
    };
    let at = format!("frame {frame}: ");
    let all: Vec<&str> = std::iter::once(at.as_str())
        .chain(needles.iter().copied())
        .collect();
    fails_with(&path, &all);
}

#[test]
fn a_corrupted_byte_fails_the_icrc_naming_the_frame() {
    // a byte of the payload of the first RDMA WRITE MIDDLE packet
    damage_fails_at(
        "a_corrupted_byte_fails_the_icrc_naming_the_frame",
        "rdma_write_bw.pcap",
        |p| {
            let i = p.find("RC_RDMA_WRITE_MIDDLE");
            let n = p.records[i].1.len();
            p.records[i].1[n - 100] ^= 0x01;
            i + 1
        },
        &["ICRC", "RC_RDMA_WRITE_MIDDLE"],
    );
}

#[test]
fn a_corrupted_psn_fails_the_icrc() {
    // the BTH (PSN field) of the first ACK: covered by the ICRC
    damage_fails_at(
        "a_corrupted_psn_fails_the_icrc",
        "rdma_read_bw.pcap",
        |p| {
            let i = p.find("RC_RDMA_READ_RESPONSE_MIDDLE");
            p.records[i].1[14 + 20 + 8 + 11] ^= 0x80;
            i + 1
        },
        &["ICRC"],
    );
}

#[test]
fn a_dropped_frame_fails_the_psn_sequence() {
    damage_fails_at(
        "a_dropped_frame_fails_the_psn_sequence",
        "rdma_write_bw.pcap",
        |p| {
            let i = p.find("RC_RDMA_WRITE_MIDDLE");
            p.records.remove(i);
            // the frame that now has that number is the WRITE LAST
            i + 1
        },
        &["PSN gap", "missing", "RC_RDMA_WRITE_LAST"],
    );
}

/// `--lossy`: the same dropped frame is a counted loss, not a failure; the
/// ICRC and every other rule still apply.
#[test]
fn lossy_mode_counts_a_dropped_frame_and_still_checks_the_rest() {
    let Some((_t, path, _)) = damaged(
        "lossy_mode_counts_a_dropped_frame",
        "rdma_write_bw.pcap",
        |p| {
            let i = p.find("RC_RDMA_WRITE_MIDDLE");
            p.records.remove(i);
            i + 1
        },
    ) else {
        return;
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rnic"))
        .args(["pcap", "check", "--lossy"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("1 places where packets were lost upstream"),
        "{text}"
    );
    // a corrupted byte still fails in lossy mode
    let Some((_t2, bad, frame)) = damaged(
        "lossy_mode_still_checks_the_icrc",
        "rdma_write_bw.pcap",
        |p| {
            let i = p.find("RC_RDMA_WRITE_MIDDLE");
            let n = p.records[i].1.len();
            p.records[i].1[n - 100] ^= 0x20;
            i + 1
        },
    ) else {
        return;
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rnic"))
        .args(["pcap", "check", "--lossy"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(&format!("frame {frame}: ")) && err.contains("ICRC"),
        "{err}"
    );
}

#[test]
fn a_dropped_read_request_fails() {
    // the third READ request (the first two show the path MTU: 3000 bytes
    // take 3 PSNs): the next one's PSN then jumps by two READs
    damage_fails_at(
        "a_dropped_read_request_fails",
        "rdma_read_bw.pcap",
        |p| {
            let i = p.find("RC_RDMA_READ_REQUEST");
            p.records.remove(i + 2);
            i + 3
        },
        &["PSN gap"],
    );
}

#[test]
fn a_dropped_write_last_fails_the_ack_check() {
    damage_fails_at(
        "a_dropped_write_last_fails_the_ack_check",
        "rdma_write_bw.pcap",
        |p| {
            let i = p.find("RC_RDMA_WRITE_LAST");
            p.records.remove(i);
            // the next frame is the ACK of the missing LAST: it names a PSN
            // that was never sent
            i + 1
        },
        &["RC_ACKNOWLEDGE for PSN"],
    );
}

#[test]
fn a_truncated_frame_fails_naming_the_frame() {
    damage_fails_at(
        "a_truncated_frame_fails_naming_the_frame",
        "rdma_write_bw.pcap",
        |p| {
            let i = p.find("RC_RDMA_WRITE_FIRST");
            let cut = p.records[i].1[..60].to_vec();
            p.set_data(i, cut, 60);
            i + 1
        },
        &["IPv4: total length"],
    );
}

#[test]
fn a_frame_cut_by_the_snap_length_fails() {
    damage_fails_at(
        "a_frame_cut_by_the_snap_length_fails",
        "rdma_send_bw.pcap",
        |p| {
            let i = p.find("RC_SEND_MIDDLE");
            let orig = p.records[i].1.len() as u32;
            let cut = p.records[i].1[..128].to_vec();
            p.set_data(i, cut, orig);
            i + 1
        },
        &["snap length"],
    );
}

#[test]
fn a_truncated_file_fails_naming_the_frame() {
    let Some(dir) = rxe_dir("a_truncated_file_fails_naming_the_frame") else {
        return;
    };
    let p = Pcap::read(&dir.join("rdma_read_bw.pcap"));
    let i = p.find("RC_RDMA_READ_RESPONSE_FIRST");
    let (_tmp, path) = cut_inside(&p, i);
    fails_with(
        &path,
        &[&format!("frame {}: truncated capture file", i + 1)],
    );
    // and dump reports it the same way after printing the frames before it
    let state = tempfile::tempdir().unwrap();
    rnic(state.path())
        .args(["pcap", "dump"])
        .arg(&path)
        .assert()
        .failure()
        .stdout(predicate::str::contains("RC_RDMA_READ_REQUEST"))
        .stderr(predicate::str::contains(format!(
            "frame {}: truncated capture file",
            i + 1
        )));
}

#[test]
fn unreadable_files_fail_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("notes.txt");
    std::fs::write(&text, "this is not a capture\n").unwrap();
    let empty = tmp.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let header_only = tmp.path().join("short.pcap");
    std::fs::write(&header_only, [0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0]).unwrap();
    let missing = tmp.path().join("missing.pcap");
    let cases: [(&Path, &str); 5] = [
        (&missing, "No such file or directory"),
        (tmp.path(), "it is a directory"),
        (&text, "is not a pcap or pcapng file: unknown magic number"),
        (&empty, "is not a pcap or pcapng file"),
        (&header_only, "the pcap file header needs 24 bytes"),
    ];
    for sub in ["check", "dump", "replay"] {
        for (path, why) in cases {
            let state = tempfile::tempdir().unwrap();
            let out = rnic(state.path())
                .args(["pcap", sub])
                .arg(path)
                .assert()
                .failure()
                .code(1);
            let err = String::from_utf8(out.get_output().stderr.clone()).unwrap();
            assert_eq!(
                err.lines().count(),
                1,
                "pcap {sub} {}: {err}",
                path.display()
            );
            assert!(
                err.contains(why),
                "pcap {sub} {}: {why:?} missing from {err}",
                path.display()
            );
            assert!(
                !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
                "{err}"
            );
        }
    }
}

#[test]
fn dump_prints_one_line_per_frame() {
    let Some(dir) = rxe_dir("dump_prints_one_line_per_frame") else {
        return;
    };
    let file = dir.join("rdma_read_bw.pcap");
    let frames = Pcap::read(&file).records.len();
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["pcap", "dump"])
        .arg(&file)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), frames, "{text}");
    let first_read = text
        .lines()
        .find(|l| l.contains("RC_RDMA_READ_REQUEST"))
        .expect("a READ request line");
    for field in [
        "10.1.16.62:",
        "> 10.1.16.61:4791",
        "qp=0x",
        "psn=",
        "len=0",
        "frame=",
        "icrc=ok",
    ] {
        assert!(
            first_read.contains(field),
            "{field} missing from {first_read}"
        );
    }
    assert!(text.lines().any(|l| l.contains("not RoCE: TCP")), "{text}");
    // --roce and -c
    let out = rnic(state.path())
        .args(["pcap", "dump", "--roce", "-c", "3"])
        .arg(&file)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.lines().all(|l| l.contains("RC_RDMA_READ")), "{text}");
}

/// RDMA CM's MADs to QP1: each dump line names the CM message with its
/// IDs, QPN and (REQ) the service ID and the addresses of the IP CM private
/// data; check counts them.
#[test]
fn dump_and_check_name_the_cm_messages() {
    let Some(dir) = rxe_dir("dump_and_check_name_the_cm_messages") else {
        return;
    };
    let file = dir.join("rping.pcap");
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["pcap", "dump", "--roce"])
        .arg(&file)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let cm: Vec<&str> = text.lines().filter(|l| l.contains("[CM ")).collect();
    let want = [
        "CM REQ comm=0x6ec0c56d qpn=0x00002c psn=15782 sid=0x0000000001061c06 ip 10.1.16.62:48489 > 10.1.16.61:7174",
        "CM REP comm=0x9d88f456 remote=0x6ec0c56d qpn=0x00002b psn=16694589",
        "CM RTU comm=0x6ec0c56d remote=0x9d88f456",
        "CM DREQ comm=0x6ec0c56d remote=0x9d88f456 qpn=0x00002b",
        "CM DREP comm=0x9d88f456 remote=0x6ec0c56d",
    ];
    assert_eq!(cm.len(), want.len(), "{text}");
    for (line, w) in cm.iter().zip(want) {
        assert!(
            line.contains("qp=0x000001") && line.contains(w),
            "{line}\nwant {w}"
        );
    }
    let out = rnic(state.path())
        .args(["pcap", "check"])
        .arg(&file)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains("(RC 60, UC 0, UD 5, CNP 0) in 2 QP streams, 5 CM MADs;"),
        "{text}"
    );
}

#[test]
fn dump_annotates_retransmissions_and_marks_broken_frames() {
    let Some(dir) = rxe_dir("dump_annotates_retransmissions_and_marks_broken_frames") else {
        return;
    };
    let mut p = Pcap::read(&dir.join("rdma_write_bw.pcap"));
    // replay the first WRITE message after the second: a go-back-N retransmission
    let first = p.find("RC_RDMA_WRITE_FIRST");
    let again: Vec<_> = p.records[first..first + 3].to_vec();
    let at = p.find("RC_ACKNOWLEDGE") + 4;
    for (k, r) in again.into_iter().enumerate() {
        p.records.insert(at + k, r);
    }
    // and corrupt the last RoCE frame
    let last = p
        .records
        .iter()
        .rposition(|(_, d)| wire::RoceRepr::parse(d).is_ok())
        .unwrap();
    let n = p.records[last].1.len();
    p.records[last].1[n - 6] ^= 0xFF;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("retx.pcap");
    p.write(&path);
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["pcap", "dump"])
        .arg(&path)
        .assert()
        .success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    assert!(text.contains("[retransmission (go-back-N"), "{text}");
    assert!(text.contains("icrc=BAD !! ICRC: found"), "{text}");
    // check passes the retransmission and stops at the corrupted frame
    rnic(state.path())
        .args(["pcap", "check"])
        .arg(&path)
        .assert()
        .failure()
        .stderr(predicate::str::contains(format!(
            "frame {}: ICRC",
            last + 1
        )));
}

#[test]
fn pcapng_files_are_checked_too() {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::DataLink;
    let Some(dir) = rxe_dir("pcapng_files_are_checked_too") else {
        return;
    };
    let p = Pcap::read(&dir.join("rdma_read_bw.pcap"));
    let write = |path: &Path, skip: Option<usize>| {
        let f = std::fs::File::create(path).unwrap();
        let mut w = PcapNgWriter::new(f).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0))
            .unwrap();
        for (i, (_, d)) in p.records.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: std::time::Duration::from_micros(i as u64),
                original_len: d.len() as u32,
                data: std::borrow::Cow::Borrowed(d),
                options: vec![],
            })
            .unwrap();
        }
    };
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.pcapng");
    write(&good, None);
    let state = tempfile::tempdir().unwrap();
    rnic(state.path())
        .args(["pcap", "check"])
        .arg(&good)
        .assert()
        .success()
        .stdout(predicate::str::contains("20 RoCEv2"));
    // a dropped READ response MIDDLE
    let i = p.find("RC_RDMA_READ_RESPONSE_MIDDLE");
    let bad = tmp.path().join("bad.pcapng");
    write(&bad, Some(i));
    fails_with(
        &bad,
        &[&format!("frame {}: ", i + 1), "read response PSN gap"],
    );
}

/// Damaged input never makes the checker or the capture reader panic:
/// seeded random byte flips, cuts and extensions of every rxe frame, and of
/// the files' record headers.
#[test]
fn mutated_captures_never_panic() {
    use tools::capture::{CaptureReader, Record};
    use tools::check::Checker;
    let Some(dir) = rxe_dir("mutated_captures_never_panic") else {
        return;
    };
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut rand = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n.max(1) as u64) as usize
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0u64;
    for file in pcap_files(&dir) {
        let p = Pcap::read(&file);
        for round in 0..20 {
            let mut c = Checker::new();
            for (i, (_, d)) in p.records.iter().enumerate() {
                let mut d = d.clone();
                match rand(4) {
                    0 if !d.is_empty() => {
                        let at = rand(d.len());
                        d[at] ^= 1 << rand(8);
                    }
                    1 => d.truncate(rand(d.len() + 1)),
                    2 => d.extend((0..rand(64)).map(|_| rand(256) as u8)),
                    _ => {}
                }
                let orig = (d.len() + rand(2) * rand(100)) as u32;
                let _ = c.frame(&Record {
                    number: i as u64 + 1,
                    ts: std::time::Duration::ZERO,
                    data: d,
                    orig_len: orig,
                    linktype: [1, 1, 1, 113, 276, 7][rand(6)],
                });
                checked += 1;
            }
            // the file itself, with a damaged byte anywhere
            let mut bytes = p.bytes();
            for _ in 0..=round % 3 {
                let at = rand(bytes.len());
                bytes[at] = rand(256) as u8;
            }
            let path = tmp.path().join("m.pcap");
            std::fs::write(&path, &bytes).unwrap();
            if let Ok(r) = CaptureReader::open(&path) {
                let mut c = Checker::new();
                for rec in r {
                    match rec {
                        Ok(rec) => {
                            let _ = c.frame(&rec);
                        }
                        Err(e) => {
                            assert!(e.to_string().starts_with("frame "), "{e}");
                            break;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}
