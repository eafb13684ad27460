//! `rnic lab` across machines, with namespaces standing in for them: three
//! namespaces `labremote-m0..m2` on a bridge (a fourth namespace, the
//! "real network"), a lab file whose `[[machine]]` launchers are `ip
//! netns exec labremote-mN`, and for m2 a stand-in for `ssh` that, as
//! ssh does, hands its words to a shell there as one line. The incast h1, h2 → h0 runs through the
//! launchers with the latency probe h1 → h0 beside it; the results
//! folder has each flow's rate with bytes moved and the probe's
//! percentiles, and says the switch is not observable (no queue plot), and afterwards
//! nothing the lab started is left: no process naming its scratch
//! folders, no folder, no namespace but the test's own. A machine whose
//! launcher fails is refused in one line naming it, and what the lab had
//! started on the others is gone too. A SIGINT mid-run tears it all down
//! (exit status 130).
//!
//! On machines of their own (`labmpi2-m0..m2`, the same way) a ring
//! allreduce runs as one MPI job over the machines' RNICs: each
//! machine's orted started through its launcher (the ssh stand-in for
//! m2), every iteration's completion time in the results, UCX's
//! endpoints on each machine's own device, the RNICs' bytes at least the
//! collective's; forced onto TCP the same job runs around the RNICs and
//! the lab says so; a SIGINT mid-job ends it on every machine; and
//! nothing the lab started is left.
//!
//! Needs root, ip, setsid and ib_write_bw (perftest), and for the
//! allreduce Open MPI (mpirun, mpicc): a loud SKIPPED line without them,
//! a failure under CI.

mod common;

use common::lab::{an_allreduce_on_the_rnics, collective_times};
use common::{poll_within, STUCK};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use testkit::netns::{ip, Namespaces};

/// The stand-in machines and their network.
struct Machines {
    _ns: Namespaces,
}

/// One test's stand-in machines: namespaces `<prefix>-m0..m2` and
/// `<prefix>-net`, interfaces `<dev>0..2`, addresses `10.<net>.0.1..3`
/// (each test its own, as the tests run side by side).
#[derive(Clone, Copy)]
struct Site {
    prefix: &'static str,
    dev: &'static str,
    net: u8,
}

/// The incast's machines.
const INCAST: Site = Site {
    prefix: "labremote",
    dev: "lrm",
    net: 77,
};

/// The collectives' machines.
const MPI: Site = Site {
    prefix: "labmpi2",
    dev: "lmp",
    net: 78,
};

/// The trace's machines.
const TRACE: Site = Site {
    prefix: "labmpi2t",
    dev: "lmt",
    net: 79,
};

/// One lab at a time: each runs three rnicds on a machine of few CPUs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Site {
    fn machine_ns(self, i: usize) -> String {
        format!("{}-m{i}", self.prefix)
    }

    fn net_ns(self) -> String {
        format!("{}-net", self.prefix)
    }

    fn addr(self, i: usize) -> String {
        format!("10.{}.0.{}", self.net, i + 1)
    }
}

/// Namespaces m0..m2, each with `<dev><i>` (its address /24) on a veth
/// to a bridge in the network's namespace.
fn machines(site: Site) -> Machines {
    let net = site.net_ns();
    let mut names: Vec<String> = (0..3).map(|i| site.machine_ns(i)).collect();
    names.push(net.clone());
    let ns = Namespaces::create(&names).expect("namespaces");
    ip(&["-n", &net, "link", "add", "br0", "type", "bridge"]).unwrap();
    ip(&["-n", &net, "link", "set", "br0", "up"]).unwrap();
    for i in 0..3 {
        let m = site.machine_ns(i);
        let (dev, peer) = (format!("{}{i}", site.dev), format!("{}{i}p", site.dev));
        ip(&[
            "link", "add", &dev, "netns", &m, "type", "veth", "peer", "name", &peer, "netns", &net,
        ])
        .unwrap();
        ip(&["-n", &net, "link", "set", &peer, "master", "br0", "up"]).unwrap();
        let addr = format!("{}/24", site.addr(i));
        ip(&["-n", &m, "addr", "add", &addr, "dev", &dev]).unwrap();
        ip(&["-n", &m, "link", "set", &dev, "up"]).unwrap();
    }
    Machines { _ns: ns }
}

/// A stand-in for `ssh` in `dir`: `ssh HOST WORDS...` runs the words
/// joined by blanks in a shell in namespace HOST, as ssh hands them to
/// the remote user's shell (so the lab must quote them).
fn fake_ssh(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let ssh = bin.join("ssh");
    std::fs::write(
        &ssh,
        "#!/bin/sh\nhost=$1; shift\nexec ip netns exec \"$host\" sh -c \"$*\"\n",
    )
    .unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&ssh, mode).unwrap();
    ssh
}

/// An incast of `secs`.
fn incast(secs: u32) -> String {
    format!("[workload]\nduration_s = {secs}\nsample_ms = 200\n")
}

/// The lab file: `workload` on machines h0..h2 of `site` (h2 through
/// `ssh`, [`fake_ssh`]), the launcher of `h<bad>` a namespace that does
/// not exist when given.
fn lab_file(site: Site, workload: &str, ssh: &Path, bad: Option<usize>) -> String {
    let mut s = workload.to_string();
    for i in 0..3 {
        let ns = match bad {
            Some(b) if b == i => format!("{}-nowhere", site.prefix),
            _ => site.machine_ns(i),
        };
        let launcher = match i {
            2 => format!("{} {ns}", ssh.display()),
            _ => format!("ip netns exec {ns}"),
        };
        s += &format!(
            "\n[[machine]]\nname = \"h{i}\"\nlauncher = \"{launcher}\"\niface = \"{}{i}\"\n\
             ip = \"{}\"\nrate = \"200mbit\"\n",
            site.dev,
            site.addr(i)
        );
    }
    s
}

const PERFTEST: (&str, &str) = ("ib_write_bw", "perftest");
const SETSID: (&str, &str) = ("setsid", "util-linux");
const MPIRUN: (&str, &str) = ("mpirun", "openmpi-bin");
const MPICC: (&str, &str) = ("mpicc", "libopenmpi-dev");

/// Whether the test can run here with `tools` (program, Debian package)
/// besides: a loud SKIPPED line (a failure under CI) otherwise.
fn runs_here(test: &str, tools: &[(&str, &str)]) -> bool {
    if !common::netns::can_run(test) {
        return false;
    }
    tools.iter().all(|&(tool, package)| {
        let there = testkit::rnicd::have(tool);
        if !there {
            testkit::skip_or_fail(
                test,
                &format!("{tool} is not installed (Debian package {package})"),
            );
        }
        there
    })
}

/// Starts `rnic lab --file` with `text` into `dir/results`, its stderr
/// into `dir/lab.err`.
fn start(dir: &Path, text: &str) -> (Child, PathBuf) {
    let file = dir.join("lab.toml");
    std::fs::write(&file, text).unwrap();
    let err = dir.join("lab.err");
    let c = Command::new(assert_cmd::cargo::cargo_bin("rnic"))
        .arg("lab")
        .arg("--file")
        .arg(&file)
        .arg("--out")
        .arg(dir.join("results"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    (c, err)
}

/// Runs `rnic lab --file` with `text` into `dir/results`: its exit
/// status, what it said and its pid.
fn lab(dir: &Path, text: &str) -> (std::process::ExitStatus, String, u32) {
    let (c, err) = start(dir, text);
    finish(c, &err)
}

/// The last lines of each log a lab left in `dir/results/logs` (they go
/// with the temporary folder), for a failed lab's message.
fn logs_tail(dir: &Path) -> String {
    let logs = dir.join("results").join("logs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(logs)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut s = String::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        s += &format!("\n=== {} (last lines)\n{tail}", f.display());
    }
    s
}

/// Fails unless the lab in `dir` ended well, with what it said and the
/// tails of its logs.
fn ran(st: std::process::ExitStatus, said: &str, dir: &Path) {
    assert!(st.success(), "rnic lab: {st}\n{said}{}", logs_tail(dir));
}

/// Waits for lab `c` to end: its exit status, what it said and its pid.
/// A lab stuck that long is sent SIGTERM (it tears down what it started
/// on the machines, which SIGKILL would leave), then SIGKILL.
fn finish(mut c: Child, err: &Path) -> (std::process::ExitStatus, String, u32) {
    let pid = c.id();
    let st = poll_within(STUCK, || c.try_wait().ok().flatten());
    let said = std::fs::read_to_string(err).unwrap();
    let Some(st) = st else {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        if poll_within(STUCK, || c.try_wait().ok().flatten()).is_none() {
            let _ = c.kill();
            let _ = c.wait();
        }
        panic!("rnic lab did not end: {said}");
    };
    eprintln!("{said}");
    (st, said, pid)
}

/// Starts the lab of `text`, sends it SIGINT once what it said is
/// `running`, and checks it ended with status 130, torn down, leaving
/// nothing.
fn interrupted(text: &str, running: impl Fn(&str) -> bool) {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, err) = start(dir.path(), text);
    let pid = c.id();
    let up = poll_within(STUCK, || {
        if let Ok(Some(st)) = c.try_wait() {
            panic!("rnic lab ended ({st}) before its workload");
        }
        running(&std::fs::read_to_string(&err).unwrap_or_default()).then_some(())
    });
    assert!(up.is_some(), "no workload");
    assert!(!leftovers(pid).is_empty(), "the probe sees no lab running");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
    let (st, said, _) = finish(c, &err);
    assert_eq!(st.code(), Some(130), "{said}{}", logs_tail(dir.path()));
    assert!(said.contains("interrupted by signal 2"), "{said}");
    assert!(said.contains("torn down"), "{said}");
    assert_eq!(leftovers(pid), Vec::<String>::new(), "left after SIGINT");
}

/// What lab `pid` left: processes naming its scratch folders
/// (`/tmp/rnlab-<pid>-<machine>`), the folders, namespaces of its own.
fn leftovers(pid: u32) -> Vec<String> {
    let scratch = format!("rnlab-{pid}-");
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let b = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&b).contains(&scratch) {
            left.push(format!("process {}", e.path().display()));
        }
    }
    for e in std::fs::read_dir("/tmp").unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&scratch) {
            left.push(format!("folder {}", e.path().display()));
        }
    }
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    for l in String::from_utf8_lossy(&ns.stdout).lines() {
        if l.starts_with(&scratch) {
            left.push(format!("namespace {l}"));
        }
    }
    left
}

/// The namespaces of `site` there are now.
fn our_namespaces(site: Site) -> Vec<String> {
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let prefix = format!("{}-", site.prefix);
    let mut v: Vec<String> = String::from_utf8_lossy(&ns.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(String::from)
        .collect();
    v.sort();
    v
}

#[test]
fn an_incast_across_machines_runs_through_their_launchers_and_leaves_nothing() {
    let test = "an_incast_across_machines_runs_through_their_launchers_and_leaves_nothing";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, &[PERFTEST, SETSID]) {
        return;
    }
    let m = machines(INCAST);
    let made = our_namespaces(INCAST);
    assert_eq!(made.len(), 4, "{made:?}");

    let tools = tempfile::tempdir().unwrap();
    let ssh = fake_ssh(tools.path());
    let dir = tempfile::tempdir().unwrap();
    // with the latency probe h1 → h0 through the launchers too
    let workload = format!("{}probe = true\n", incast(3));
    let (st, said, pid) = lab(dir.path(), &lab_file(INCAST, &workload, &ssh, None));
    ran(st, &said, dir.path());
    assert_eq!(leftovers(pid), Vec::<String>::new(), "left behind");
    assert_eq!(
        our_namespaces(INCAST),
        made,
        "namespaces other than the test's"
    );
    assert!(said.contains("torn down"), "{said}");
    assert!(said.contains("not observable"), "{said}");

    let out = dir.path().join("results");
    let sum: Value = summary(&out);
    let flows = sum["flows"].as_array().expect("flows");
    let from: Vec<&str> = flows.iter().filter_map(|f| f["from"].as_str()).collect();
    assert_eq!(from, ["h1", "h2"], "{sum}");
    for f in flows {
        assert_eq!(f["to"], "h0");
        let mbits = f["mbits_average"].as_f64().unwrap_or(0.0);
        assert!(mbits > 0.0, "a flow moved no bytes: {f}");
        // ib_write_bw's own figure, read from its output (0.00 when
        // perftest could not calibrate its clock on a loaded machine)
        assert!(
            f["ib_write_bw_gbits"].as_f64().is_some_and(|g| g >= 0.0),
            "ib_write_bw reported no rate: {f}"
        );
    }
    assert!(sum["switch"].is_string(), "{sum}");
    assert_eq!(sum["switch_ports"], serde_json::json!([]));
    // the receiver counted what the senders sent
    let rx = received(&out, "h0");
    assert!(
        rx.len() >= 2 && rx[rx.len() - 1] > rx[0] + 1_000_000,
        "h0 received too little: {rx:?}"
    );
    assert!(out.join("flows.svg").exists() && out.join("cnp.svg").exists());
    let p = &sum["probe"];
    assert_eq!(
        (p["from"].as_str(), p["to"].as_str()),
        (Some("h1"), Some("h0"))
    );
    assert!(p["samples"].as_u64().is_some_and(|n| n > 0), "{p}");
    assert!(p["p50_us"].as_f64().is_some_and(|t| t > 0.0), "{p}");
    assert!(out.join("probe.svg").exists(), "no probe plot");
    assert!(said.contains("latency probe h1→h0"), "{said}");
    assert!(!out.join("queue.svg").exists(), "a queue plot of no queue");
    let page = read(&out.join("index.html"));
    assert!(page.contains("not observable"), "the page hides it");
    let again = read(&out.join("lab.toml"));
    assert!(
        again.contains("[[machine]]") && again.contains("ip netns exec labremote-m1"),
        "{again}"
    );

    // a launcher that fails: refused in one line naming the machine, and
    // h0's rnicd, already started, is ended with the rest
    let dir = tempfile::tempdir().unwrap();
    let (st, said, pid) = lab(dir.path(), &lab_file(INCAST, &incast(3), &ssh, Some(1)));
    assert_eq!(st.code(), Some(1), "{said}");
    let last = said.lines().rev().find(|l| !l.is_empty()).unwrap_or("");
    assert!(
        last.contains("machine h1") && last.contains("labremote-nowhere"),
        "{said}"
    );
    assert!(said.contains("torn down"), "{said}");
    assert_eq!(leftovers(pid), Vec::<String>::new(), "left behind");
    assert_eq!(our_namespaces(INCAST), made);

    // SIGINT mid-run: torn down on every machine, status 130; the
    // progress line says the workload is sampled, every program is up
    let text = lab_file(INCAST, &incast(120), &ssh, None);
    interrupted(&text, |said| said.contains("Mbit/s: h1"));
    assert_eq!(our_namespaces(INCAST), made);
    drop(m);
    assert_eq!(our_namespaces(INCAST), Vec::<String>::new());
}

/// The text of file `p`.
fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `summary.json` of `out`.
fn summary(out: &Path) -> Value {
    serde_json::from_str(&read(&out.join("summary.json"))).unwrap()
}

/// Host `h`'s `tx_bytes` samples in `samples.csv` of `out`.
fn sent(out: &Path, h: &str) -> Vec<u64> {
    counted(out, h, "tx_bytes")
}

/// Host `h`'s `rx_bytes` samples in `samples.csv` of `out`.
fn received(out: &Path, h: &str) -> Vec<u64> {
    counted(out, h, "rx_bytes")
}

/// Host `h`'s samples of `counter` in `samples.csv` of `out`.
fn counted(out: &Path, h: &str, counter: &str) -> Vec<u64> {
    let csv = read(&out.join("samples.csv"));
    let tag = format!(",{h},{counter},");
    csv.lines()
        .filter(|l| l.contains(&tag))
        .filter_map(|l| l.rsplit(',').next()?.parse().ok())
        .collect()
}

/// A ring allreduce of 256 KiB, 8 iterations, over UCX `tls`.
fn allreduce(tls: &str) -> String {
    format!(
        "[workload]\nkind = \"allreduce\"\nsize = 262144\niterations = 8\nucx_tls = \"{tls}\"\n\
         sample_ms = 200\n"
    )
}

#[test]
fn an_allreduce_across_machines_runs_over_their_rnics_and_leaves_nothing() {
    let test = "an_allreduce_across_machines_runs_over_their_rnics_and_leaves_nothing";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, &[SETSID, MPIRUN, MPICC]) {
        return;
    }
    let m = machines(MPI);
    let made = our_namespaces(MPI);
    assert_eq!(made.len(), 4, "{made:?}");
    let tools = tempfile::tempdir().unwrap();
    let ssh = fake_ssh(tools.path());

    let dir = tempfile::tempdir().unwrap();
    let (st, said, pid) = lab(dir.path(), &lab_file(MPI, &allreduce("rdma"), &ssh, None));
    ran(st, &said, dir.path());
    assert_eq!(leftovers(pid), Vec::<String>::new(), "left behind");
    assert_eq!(
        our_namespaces(MPI),
        made,
        "namespaces other than the test's"
    );
    assert!(said.contains("torn down"), "{said}");
    let out = dir.path().join("results");
    collective_times(&out, 8);
    let sum: Value = summary(&out);
    // each rank on its own machine's device (h2's orted came through ssh)
    an_allreduce_on_the_rnics(&sum, &["h0", "h1", "h2"]);
    for h in ["h0", "h1", "h2"] {
        let tx = sent(&out, h);
        assert!(
            tx.len() >= 2 && tx[tx.len() - 1] > tx[0] + 262_144,
            "{h}'s RNIC sent too little: {tx:?}"
        );
    }
    // the RNICs carried the collective: its bytes at least; no link seen
    let fb = &sum["fallback"];
    let least = fb["collective_bytes"].as_u64().unwrap();
    assert!(least >= 8 * 262_144, "{fb}");
    assert!(fb["rdma_bytes"].as_u64().unwrap() >= least, "{fb}");
    assert!(fb["link_bytes"].is_null(), "{fb}");
    assert_eq!(fb["around_the_rnic"], false, "{fb}");
    assert!(
        said.contains("the traffic went through the RNICs"),
        "{said}"
    );
    let page = read(&out.join("index.html"));
    assert!(page.contains("collective.svg"), "the page shows no times");
    let again = read(&out.join("lab.toml"));
    assert!(
        again.contains("kind = \"allreduce\"") && again.contains("[[machine]]"),
        "{again}"
    );

    // forced onto TCP: the job runs, its bytes around the RNICs, and the
    // lab says so
    let dir = tempfile::tempdir().unwrap();
    let (st, said, pid) = lab(dir.path(), &lab_file(MPI, &allreduce("tcp"), &ssh, None));
    ran(st, &said, dir.path());
    assert_eq!(leftovers(pid), Vec::<String>::new(), "left behind");
    let out = dir.path().join("results");
    collective_times(&out, 8);
    let sum: Value = summary(&out);
    let fb = &sum["fallback"];
    assert!(fb["rdma_bytes"].as_u64().unwrap() < 16 * 1024, "{fb}");
    assert_eq!(fb["around_the_rnic"], true, "{fb}");
    let eps = sum["collective"]["ucx_endpoints"].to_string();
    assert!(
        eps.contains("tcp/lmp") && !eps.contains("rc_verbs"),
        "{eps}"
    );
    assert!(said.contains("traffic went around the RNIC"), "{said}");

    // SIGINT mid-job (for a duration, so it runs until then): mpirun,
    // every orted and rank ended on every machine, status 130
    let job = "[workload]\nkind = \"allreduce\"\nsize = 262144\niterations = 0\n\
               duration_s = 120\nsample_ms = 200\n";
    interrupted(&lab_file(MPI, job, &ssh, None), |said| {
        // the progress line's `iteration N`: rank 0 reported one
        said.lines()
            .any(|l| l.contains(" iteration ") && !l.contains(" iteration 0 "))
    });
    assert_eq!(our_namespaces(MPI), made);
    drop(m);
    assert_eq!(our_namespaces(MPI), Vec::<String>::new());
}

#[test]
fn a_trace_across_machines_replays_every_flow_through_the_launchers() {
    let test = "a_trace_across_machines_replays_every_flow_through_the_launchers";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let send = ("ib_send_bw", "perftest");
    if !runs_here(test, &[PERFTEST, send, SETSID]) {
        return;
    }
    let m = machines(TRACE);
    let made = our_namespaces(TRACE);
    assert_eq!(made.len(), 4, "{made:?}");
    let tools = tempfile::tempdir().unwrap();
    let ssh = fake_ssh(tools.path());
    let dir = tempfile::tempdir().unwrap();
    // h2 (through ssh) both sends and receives
    std::fs::write(
        dir.path().join("t.csv"),
        "start_ms,src,dst,bytes,op\n0,h1,h0,2000000\n50,h2,h0,1000000,send\n100,h0,h2,500000\n",
    )
    .unwrap();
    let workload = "[workload]\nkind = \"trace\"\ntrace = \"t.csv\"\nsample_ms = 200\n";
    let (st, said, pid) = lab(dir.path(), &lab_file(TRACE, workload, &ssh, None));
    ran(st, &said, dir.path());
    assert_eq!(leftovers(pid), Vec::<String>::new(), "left behind");
    assert_eq!(
        our_namespaces(TRACE),
        made,
        "namespaces other than the test's"
    );
    assert!(said.contains("torn down"), "{said}");
    let out = dir.path().join("results");
    let sum: Value = summary(&out);
    let flows = sum["trace"].as_array().expect("trace");
    let got: Vec<(&str, &str, &str, u64)> = flows
        .iter()
        .map(|f| {
            (
                f["src"].as_str().unwrap(),
                f["dst"].as_str().unwrap(),
                f["op"].as_str().unwrap(),
                f["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("h1", "h0", "write", 2_000_000),
            ("h2", "h0", "send", 1_000_000),
            ("h0", "h2", "write", 500_000)
        ],
        "{sum}"
    );
    for f in flows {
        assert!(f["fct_ms"].as_f64().is_some_and(|t| t > 0.0), "{f}");
        assert!(f["reported_mbits"].as_f64().is_some_and(|r| r > 0.0), "{f}");
    }
    // the receivers counted the flows' bytes
    for (h, least) in [("h0", 3_000_000), ("h2", 500_000)] {
        let rx = received(&out, h);
        assert!(
            rx.len() >= 2 && rx[rx.len() - 1] >= rx[0] + least,
            "{h} received too little: {rx:?}"
        );
    }
    assert!(out.join("fct.svg").exists(), "no FCT plot");
    drop(m);
    assert_eq!(our_namespaces(TRACE), Vec::<String>::new());
}
