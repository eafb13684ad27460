//! rdma-core's own test suite (Debian python3-pyverbs, vendor modules
//! aside) on softrnic: every test alone, bounded in time, through
//! `rnic exec` on a test rnicd's device t0, as an unprivileged user
//! (`tools/rdma-core-suite/run`). A test that does worse than
//! `tools/rdma-core-suite/softrnic.tsv` expects — a pass that no longer
//! passes, a skip for another reason, any hang — fails this test.
//!
//! `tools/rdma-core-suite/rxe.tsv` holds the same suite's verdicts on Linux
//! rxe (`tools/rxe-peer/rxe-peer suite`, a QEMU guest: too slow for `cargo
//! test`, so it is run by hand and checked in). What rxe passes, softrnic's
//! expectation must pass too, but for the gaps listed in
//! [`RXE_PASSES_SOFTRNIC_DOES_NOT`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use testkit::rnicd::{built, cmd, Daemon};

const TEST: &str = "rdma_core_suite";

/// The verdicts the runner prints.
const VERDICTS: [&str; 5] = ["PASS", "SKIP", "FAIL", "ERROR", "HANG"];

/// Tests that Linux rxe passes (`rxe.tsv`) and softrnic's expectation
/// (`softrnic.tsv`) does not, yet, each with why (none today). Every
/// other test
/// rxe passes must be a PASS in `softrnic.tsv`. When softrnic passes one of
/// these, its expectation says PASS and the entry must leave this list (the
/// check fails on a stale entry), so the list only shrinks.
const RXE_PASSES_SOFTRNIC_DOES_NOT: &[&str] = &[];

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

/// What is wrong with a verdict file's text (the runner's lines under a
/// header naming the kernel, the packages and how it was produced).
fn malformed(text: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let header: String = text.lines().take_while(|l| l.starts_with('#')).collect();
    for word in ["kernel", "rdma-core", "python3-pyverbs", "Produced by"] {
        if !header.contains(word) {
            bad.push(format!("the header does not give `{word}`"));
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, l) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#'))
    {
        let f: Vec<&str> = l.split('\t').collect();
        let line = i + 1;
        if f.len() != 3 {
            bad.push(format!("line {line}: {} fields, not 3: {l:?}", f.len()));
            continue;
        }
        if !f[0].starts_with("tests.test_") || f[0].contains(' ') {
            bad.push(format!("line {line}: `{}` is not a test's name", f[0]));
        }
        if !VERDICTS.contains(&f[1]) {
            bad.push(format!("line {line}: `{}` is not a verdict", f[1]));
        }
        if f[1] == "SKIP" && f[2].is_empty() {
            bad.push(format!("line {line}: a skip without its reason"));
        }
        if !seen.insert(f[0]) {
            bad.push(format!("line {line}: {} again", f[0]));
        }
    }
    if seen.is_empty() {
        bad.push("no verdict at all".into());
    }
    bad
}

/// Where softrnic's expectation falls short of rxe's passes, against the
/// `known` gaps: a new gap and a stale entry of `known` each make one line.
fn gaps(
    rxe: &BTreeMap<String, (String, String)>,
    softrnic: &BTreeMap<String, (String, String)>,
    known: &[&str],
) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, (rv, _)) in rxe.iter().filter(|(_, (v, _))| v == "PASS") {
        let sv = softrnic.get(name).map_or("absent", |(v, _)| v.as_str());
        if sv != "PASS" && !known.contains(&name.as_str()) {
            bad.push(format!("{name}: {rv} on rxe, {sv} in softrnic.tsv"));
        }
    }
    for name in known {
        let rv = rxe.get(*name).map_or("absent", |(v, _)| v.as_str());
        let sv = softrnic.get(*name).map_or("absent", |(v, _)| v.as_str());
        if rv != "PASS" || sv == "PASS" {
            bad.push(format!(
                "{name}: listed as a gap, but {rv} on rxe and {sv} in softrnic.tsv: remove it"
            ));
        }
    }
    bad
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ready() -> Result<(), testkit::Missing> {
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

#[test]
fn softrnic_expects_a_pass_wherever_rxe_passes() {
    let read = |f: &str| {
        std::fs::read_to_string(repo().join("tools/rdma-core-suite").join(f))
            .unwrap_or_else(|e| panic!("tools/rdma-core-suite/{f}: {e}"))
    };
    let (rxe_text, softrnic_text) = (read("rxe.tsv"), read("softrnic.tsv"));
    let bad = malformed(&rxe_text);
    assert!(bad.is_empty(), "rxe.tsv:\n{}", bad.join("\n"));
    let (rxe, softrnic) = (verdicts(&rxe_text), verdicts(&softrnic_text));
    let names = |m: &BTreeMap<String, (String, String)>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&rxe),
        names(&softrnic),
        "rxe.tsv and softrnic.tsv must list the same tests (the same suite, the same version)"
    );
    let bad = gaps(&rxe, &softrnic, RXE_PASSES_SOFTRNIC_DOES_NOT);
    assert!(
        bad.is_empty(),
        "softrnic.tsv against rxe.tsv and RXE_PASSES_SOFTRNIC_DOES_NOT:\n{}",
        bad.join("\n")
    );
}

#[test]
fn a_gap_is_an_rxe_pass_softrnic_lacks_and_a_stale_entry_is_one_too() {
    let rxe = verdicts("a\tPASS\t\nb\tPASS\t\nc\tPASS\t\nd\tSKIP\tno XRC\ne\tPASS\t\n");
    let softrnic = verdicts("a\tPASS\t\nb\tSKIP\tno ex\nc\tERROR\tx\nd\tSKIP\tno XRC\ne\tPASS\t\n");
    assert!(gaps(&rxe, &softrnic, &["b", "c"]).is_empty());
    // c is a new gap; e (softrnic passes) and d (rxe does not) are stale
    let bad = gaps(&rxe, &softrnic, &["b", "d", "e"]);
    assert_eq!(bad.len(), 3, "{bad:?}");
    for name in ["c:", "d:", "e:"] {
        assert!(bad.iter().any(|l| l.starts_with(name)), "{name} {bad:?}");
    }
}

#[test]
fn a_verdict_file_needs_its_header_three_fields_and_known_verdicts() {
    let head = "# kernel 6.1, rdma-core 44, python3-pyverbs 44\n# Produced by: x\n";
    let good = format!("{head}tests.test_pd.A.test_a\tPASS\t\ntests.test_pd.A.test_b\tSKIP\tno\n");
    assert!(malformed(&good).is_empty(), "{:?}", malformed(&good));
    assert_eq!(
        malformed("# kernel\n").len(),
        4,
        "no header words, no verdict"
    );
    let bad = format!(
        "{head}tests.test_pd.A.test_a\tPASS\ntests.test_pd.A.test_b\tMAYBE\t\n\
         tests.test_pd.A.test_c\tSKIP\t\nx y\tPASS\t\ntests.test_pd.A.test_b\tPASS\t\n"
    );
    let got = malformed(&bad);
    for what in [
        "2 fields",
        "not a verdict",
        "without its reason",
        "not a test",
        "again",
    ] {
        assert!(got.iter().any(|l| l.contains(what)), "{what}: {got:?}");
    }
}

/// Suite tests that move RC traffic on device t0: SENDs on a CQ with a
/// completion channel (`ibv_get_cq_event`), atomics, SENDs polled on an
/// extended CQ.
const TRAFFIC_TESTS: [&str; 3] = [
    "tests.test_cq_events.CqEventsTestCase.test_cq_events_rc",
    "tests.test_atomic.AtomicTest.test_atomic_fetch_and_add",
    "tests.test_cqex.CqExTestCase.test_rc_traffic_cq_ex",
];

/// How long the suite's tests may take to end once their device failed:
/// far more than they need (each wait is woken at once), far less than a
/// hang.
const AFTER_DEATH: std::time::Duration = std::time::Duration::from_secs(30);

/// Why t0's counters could not be read.
#[derive(Debug, thiserror::Error)]
enum CountersError {
    #[error("{sock}: {source}")]
    Open {
        sock: String,
        source: softrnic::Error,
    },
    #[error("stats: {0}")]
    Stats(softrnic::Error),
    #[error("no sent_pkts counter")]
    NoSentPkts,
}

/// Device t0's `sent_pkts` (every QP's, destroyed ones too).
fn sent_pkts(sock_dir: &Path) -> Result<u64, CountersError> {
    let sock = sock_dir.join("t0.sock");
    let c = softrnic::Context::open(&sock).map_err(|source| CountersError::Open {
        sock: sock.display().to_string(),
        source,
    })?;
    let s = c.stats().map_err(CountersError::Stats)?;
    s.counters
        .get("sent_pkts")
        .copied()
        .ok_or(CountersError::NoSentPkts)
}

/// `tools/rdma-core-suite/loop.py` with [`TRAFFIC_TESTS`] through `rnic
/// exec` on `d`'s t0: its stdout lines as they come, and its stderr (read
/// to its end on a thread).
struct SuiteLoop {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    err: std::thread::JoinHandle<String>,
}

impl SuiteLoop {
    fn start(d: &Daemon) -> SuiteLoop {
        use std::io::{BufRead, Read};
        let rnic = testkit::abi::profile_dir().join("rnic");
        let mut child = cmd(rnic.to_str().expect("utf-8"))
            .args(["exec", "--sock-dir"])
            .arg(d.sock_dir())
            .args(["--", "/usr/bin/python3"])
            .arg(repo().join("tools/rdma-core-suite/loop.py"))
            .args(["--dev", "t0", "--gid", "3"])
            .args(TRAFFIC_TESTS)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start loop.py");
        let (tx, lines) = std::sync::mpsc::channel();
        let out = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let mut e = child.stderr.take().expect("piped");
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = e.read_to_string(&mut s);
            s
        });
        SuiteLoop { child, lines, err }
    }

    /// Waits until `rounds` rounds passed; false if the loop said
    /// anything else first (or nothing in time).
    fn rounds_passed(&self, rounds: u32, seen: &mut Vec<String>) -> bool {
        let want = format!("round {rounds} passed");
        while let Ok(l) = self.lines.recv_timeout(testkit::rnicd::STUCK) {
            seen.push(l.clone());
            if l == want {
                return true;
            }
            if !l.ends_with(" passed") {
                return false;
            }
        }
        false
    }

    /// Waits for its end until `deadline` (killed then: `None`); its
    /// status, the rest of its stdout and its stderr.
    fn finish(
        mut self,
        deadline: std::time::Instant,
    ) -> (Option<std::process::ExitStatus>, Vec<String>, String) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let status = testkit::poll_within(left, || self.child.try_wait().ok().flatten());
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let rest: Vec<String> = self.lines.try_iter().collect();
        (status, rest, self.err.join().unwrap_or_default())
    }
}

/// rnicd killed (SIGKILL) while rdma-core's own tests move traffic on its
/// device: the tests end soon after, in errors (a failed device: flushed
/// completions, verbs that fail, a device that no longer opens), with
/// every teardown succeeding; a new rnicd on the same socket folder then
/// passes the same tests.
#[test]
fn a_daemon_killed_under_the_suites_traffic_fails_its_tests_and_a_new_one_passes_them() {
    if !testkit::runs_here(TEST, ready()) {
        return;
    }
    let mut d = Daemon::start();
    let run = SuiteLoop::start(&d);
    let mut seen = Vec::new();
    // two rounds passed: every test moved its traffic on this device
    if !run.rounds_passed(2, &mut seen) {
        let daemon = d.child.try_wait();
        panic!(
            "the suite's traffic tests did not pass twice: {seen:?} (rnicd: {daemon:?})\n{}",
            run.finish(std::time::Instant::now()).2
        );
    }
    // and packets are moving now
    let before = sent_pkts(d.sock_dir()).expect("t0's counters");
    testkit::wait_for(testkit::rnicd::STUCK, "t0 sending", || {
        match sent_pkts(d.sock_dir()) {
            Ok(n) if n > before => Ok(()),
            Ok(n) => Err(format!("sent_pkts {n}")),
            Err(e) => Err(e.to_string()),
        }
    });
    d.kill();
    let (status, rest, err) = run.finish(std::time::Instant::now() + AFTER_DEATH);
    seen.extend(rest);
    let report = format!("stdout: {seen:?}\nstderr:\n{err}");
    assert!(
        status.is_some(),
        "the suite still ran {AFTER_DEATH:?} after its device failed:\n{report}"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{report}");
    assert!(
        seen.last().is_some_and(|l| l.ends_with("did not pass")),
        "{report}"
    );
    // unittest's summary of the round the device failed in
    assert!(err.contains("\nFAILED ("), "{report}");
    // pyverbs' errors of a failed device, not a test's wrong data
    assert!(err.contains("pyverbs.pyverbs_error.Pyverbs"), "{report}");
    // freeing objects of a failed device succeeds (pyverbs reports a
    // failed close as "Failed to dereg MR", "Failed to destroy QP", ...)
    for what in ["Failed to dereg", "Failed to dealloc", "Failed to destroy"] {
        assert!(!err.contains(what), "{what}:\n{report}");
    }
    eprintln!(
        "the suite on a failed device: {}\n{}",
        seen.last().map_or("", String::as_str),
        err.lines()
            .filter(|l| l.starts_with("ERROR: ")
                || l.starts_with("FAIL: ")
                || l.contains("_error."))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // a new rnicd on the same socket folder passes the same tests
    d.restart();
    let exec = format!(
        "{} exec --sock-dir {} --",
        testkit::abi::profile_dir().join("rnic").display(),
        d.sock_dir().display()
    );
    let out = cmd("bash")
        .arg(repo().join("tools/rdma-core-suite/run"))
        .args(["--exec", &exec, "--only", &TRAFFIC_TESTS.join("|")])
        .output()
        .expect("run the suite");
    let text = String::from_utf8_lossy(&out.stdout);
    let got = verdicts(&text);
    assert!(out.status.success(), "{text}");
    for t in TRAFFIC_TESTS {
        assert_eq!(
            got.get(t).map(|(v, _)| v.as_str()),
            Some("PASS"),
            "{t} on the new rnicd:\n{text}"
        );
    }
}
