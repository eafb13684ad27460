//! `rnic pcap replay` on the third-party Linux Soft-RoCE captures: our
//! responder answers as rxe did, and the replay tells apart what a cut
//! capture stops before, and reports the differences of altered copies.

mod common;

use common::{cut_inside, damaged, rnic, rxe_dir, Pcap};
use predicates::prelude::*;

/// The last line of `pcap replay`'s output.
fn summary(out: &assert_cmd::assert::Assert) -> String {
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    text.lines().last().unwrap_or_default().to_string()
}

#[test]
fn replay_reports_our_responder_identical_to_rxe() {
    let Some(dir) = rxe_dir("replay_reports_our_responder_identical_to_rxe") else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    for (name, responses) in [
        ("rdma_write_bw.pcap", 5),
        ("rdma_read_bw.pcap", 15),
        ("rdma_atomic_bw.pcap", 5),
    ] {
        let out = rnic(state.path())
            .args(["pcap", "replay"])
            .arg(dir.join(name))
            .assert()
            .success()
            .stdout(predicate::str::contains("10.1.16.62 -> 10.1.16.61"))
            .stdout(predicate::str::contains(": identical\n"));
        assert_eq!(
            summary(&out),
            format!("{responses} responses matched, 0 differed, 0 after the end of the capture")
        );
    }
    // a capture with no RC traffic has nothing to replay
    let out = rnic(state.path())
        .args(["pcap", "replay"])
        .arg(dir.join("pingpong_ud.pcap"))
        .assert()
        .success()
        .stdout(predicate::str::contains("nothing to replay"));
    assert_eq!(
        summary(&out),
        "0 responses matched, 0 differed, 0 after the end of the capture"
    );
}

/// rdma_write_bw.pcap cut right before its last ACK (and `more` applied to
/// what is left).
fn write_bw_cut_before_the_last_ack(
    test: &str,
    more: impl FnOnce(&mut Pcap),
) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let dir = rxe_dir(test)?;
    let mut p = Pcap::read(&dir.join("rdma_write_bw.pcap"));
    let last = p
        .records
        .iter()
        .rposition(|(_, d)| {
            wire::RoceRepr::parse(d).is_ok_and(|r| r.bth.opcode.name() == "RC_ACKNOWLEDGE")
        })
        .unwrap();
    p.records.truncate(last);
    more(&mut p);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("cut.pcap");
    p.write(&path);
    Some((tmp, path))
}

#[test]
fn replay_counts_an_ack_the_capture_stops_before_apart() {
    let Some((_t, path)) = write_bw_cut_before_the_last_ack(
        "replay_counts_an_ack_the_capture_stops_before_apart",
        |_| {},
    ) else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["pcap", "replay"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "4 responses in the capture, 5 from our responder: identical up to the end of the capture, 1 response after it\n",
        ))
        .stdout(predicate::str::contains(
            "\n  after the end of the capture: our response 5 (RC_ACKNOWLEDGE psn 5454397)\n",
        ))
        .stderr("");
    assert_eq!(
        summary(&out),
        "4 responses matched, 0 differed, 1 after the end of the capture"
    );
}

#[test]
fn replay_judges_the_frames_before_a_file_cut_inside_one() {
    // the file ends inside the second READ's MIDDLE response, as when the
    // capturing tool is killed mid-write
    let Some(dir) = rxe_dir("replay_judges_the_frames_before_a_file_cut_inside_one") else {
        return;
    };
    let p = Pcap::read(&dir.join("rdma_read_bw.pcap"));
    let first = p.find("RC_RDMA_READ_RESPONSE_FIRST");
    let cut_in = first + 4;
    let (_tmp, path) = cut_inside(&p, cut_in);
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["pcap", "replay"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::starts_with(format!(
            "{}: frame {}: truncated capture file: the file ends after ",
            path.display(),
            cut_in + 1
        )))
        .stdout(predicate::str::contains(format!(
            "replaying the {cut_in} frames before it\n"
        )))
        .stdout(predicate::str::contains(
            "our response 5 (RC_RDMA_READ_RESPONSE_MIDDLE psn 6433914)",
        ));
    assert_eq!(
        summary(&out),
        "4 responses matched, 0 differed, 11 after the end of the capture"
    );
}

#[test]
fn replay_reports_differences() {
    // the capture's responses altered: our responder's differ from them
    let Some((_t, path, _)) = damaged("replay_reports_differences", "rdma_write_bw.pcap", |p| {
        let i = p.find("RC_ACKNOWLEDGE");
        alter_msn(p, i);
        i + 1
    }) else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["pcap", "replay"])
        .arg(&path)
        .assert()
        .failure()
        .code(1)
        .stdout(predicate::str::contains(
            "aeth.msn: ours Some(1), capture Some(8)",
        ))
        .stderr(predicate::str::contains(
            "answered differently from the capture",
        ));
    assert_eq!(
        summary(&out),
        "4 responses matched, 1 differed, 0 after the end of the capture"
    );
}

/// Re-emits record `i` (an ACK) with another MSN, so the frame stays valid.
fn alter_msn(p: &mut Pcap, i: usize) {
    let mut r = wire::RoceRepr::parse(&p.records[i].1).unwrap();
    let mut aeth = r.ext.aeth.unwrap();
    aeth.msn += 7;
    r.ext.aeth = Some(aeth);
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut buf).unwrap();
    let n = buf.len() as u32;
    p.set_data(i, buf, n);
}

#[test]
fn replay_reports_an_altered_response_of_a_cut_capture_as_a_difference() {
    let Some((_t, path)) = write_bw_cut_before_the_last_ack(
        "replay_reports_an_altered_response_of_a_cut_capture_as_a_difference",
        |p| {
            let i = p.find("RC_ACKNOWLEDGE");
            alter_msn(p, i);
        },
    ) else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let out = rnic(state.path())
        .args(["pcap", "replay"])
        .arg(&path)
        .assert()
        .failure()
        .code(1)
        .stdout(predicate::str::contains(": 1 difference\n"))
        .stdout(predicate::str::contains(
            "(RC_ACKNOWLEDGE psn 5454385): aeth.msn: ours Some(1), capture Some(8)",
        ))
        .stdout(predicate::str::contains(
            "after the end of the capture: our response 5 (RC_ACKNOWLEDGE psn 5454397)",
        ))
        .stderr(predicate::str::contains(
            "1 of 1 connections answered differently from the capture",
        ));
    assert_eq!(
        summary(&out),
        "3 responses matched, 1 differed, 1 after the end of the capture"
    );
}
