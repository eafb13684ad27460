//! rdma-core's own test suite (Debian python3-pyverbs, vendor modules
//! aside) on softrnic: every test alone, bounded in time, through
//! `rnic exec` on a test rnicd's device t0, as an unprivileged user
//! (`tools/rdma-core-suite/run`). A test that does worse than
//! `tools/rdma-core-suite/softrnic.tsv` expects — a pass that no longer
//! passes, a skip for another reason, any hang — fails this test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use testkit::rnicd::{built, cmd, Daemon};

const TEST: &str = "rdma_core_suite";

/// A verdict's rank: what "worse" means.
fn rank(v: &str) -> u8 {
    match v {
        "PASS" => 3,
        "SKIP" => 2,
        "FAIL" | "ERROR" => 1,
        _ => 0,
    }
}

/// name → (verdict, reason), from the runner's lines (comments aside).
fn verdicts(text: &str) -> BTreeMap<String, (String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let name = f.next()?.to_string();
            let v = f.next()?.to_string();
            Some((name, (v, f.next().unwrap_or("").to_string())))
        })
        .collect()
}

/// What is worse in `got` than in `want`, one line each.
fn regressions(
    want: &BTreeMap<String, (String, String)>,
    got: &BTreeMap<String, (String, String)>,
) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, (wv, wr)) in want {
        match got.get(name) {
            None => bad.push(format!("{name}: expected {wv}, did not run")),
            Some((gv, gr)) if rank(gv) < rank(wv) || gv == "HANG" => {
                bad.push(format!("{name}: expected {wv}, got {gv}: {gr}"))
            }
            Some((gv, gr)) if gv == "SKIP" && wv == "SKIP" && gr != wr => {
                bad.push(format!("{name}: skipped for `{gr}`, expected `{wr}`"))
            }
            _ => {}
        }
    }
    for (name, (gv, gr)) in got {
        if !want.contains_key(name) && rank(gv) < 2 {
            bad.push(format!("{name}: not in the expectation, got {gv}: {gr}"));
        }
    }
    bad
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ready() -> Result<(), String> {
    built()?;
    if !Path::new("/usr/share/doc/rdma-core/tests/run_tests.py").exists() {
        return Err("rdma-core's test suite is not installed (Debian: python3-pyverbs)".into());
    }
    if !Path::new("/usr/bin/python3").exists() {
        return Err("/usr/bin/python3 is missing".into());
    }
    Ok(())
}

#[test]
fn the_suite_does_no_worse_than_expected() {
    if !testkit::runs_here(TEST, ready()) {
        return;
    }
    let want_text = std::fs::read_to_string(repo().join("tools/rdma-core-suite/softrnic.tsv"))
        .expect("the expectation file");
    let want = verdicts(&want_text);
    let d = Daemon::start();
    let rnic = testkit::abi::profile_dir().join("rnic");
    let exec = format!(
        "{} exec --sock-dir {} --",
        rnic.display(),
        d.sock_dir().display()
    );
    let out = cmd("bash")
        .arg(repo().join("tools/rdma-core-suite/run"))
        .args(["--exec", &exec])
        .output()
        .expect("run the suite");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the runner failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let got = verdicts(&text);
    let bad = regressions(&want, &got);
    let count = |v: &str| got.values().filter(|(g, _)| g == v).count();
    eprintln!(
        "rdma-core suite on softrnic: {} pass, {} skip, {} fail or error, {} hang",
        count("PASS"),
        count("SKIP"),
        count("FAIL") + count("ERROR"),
        count("HANG")
    );
    assert!(
        bad.is_empty(),
        "worse than tools/rdma-core-suite/softrnic.tsv:\n{}\n\nthe whole run:\n{text}\n{}",
        bad.join("\n"),
        testkit::rnicd::counters(d.sock_dir())
    );
}

#[test]
fn worse_means_a_lower_verdict_a_hang_or_another_skip_reason() {
    let want = verdicts("# c\na\tPASS\t\nb\tSKIP\tno XRC\nc\tERROR\tx\nd\tSKIP\tno DM\n");
    let same = verdicts("a\tPASS\t\nb\tSKIP\tno XRC\nc\tPASS\t\nd\tPASS\t\n");
    assert!(regressions(&want, &same).is_empty());
    let got = verdicts("a\tSKIP\tgone\nb\tSKIP\tEOPNOTSUPP\nc\tHANG\tslow\ne\tFAIL\tnew\n");
    let bad = regressions(&want, &got);
    assert_eq!(bad.len(), 5, "{bad:?}");
    for name in ["a:", "b:", "c:", "d:", "e:"] {
        assert!(bad.iter().any(|l| l.starts_with(name)), "{name} {bad:?}");
    }
}
