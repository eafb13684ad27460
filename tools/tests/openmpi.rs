//! Debian's unmodified Open MPI (openmpi-bin 4.1) with its UCX PML, UCX
//! restricted to the verbs transports (`UCX_TLS=rc_verbs,ud_verbs,self`;
//! `self` is a rank's loopback to itself, no wire), running an MPI
//! program of ours (`tests/c/mpi_check.c`, built with `mpicc`:
//! allreduce, alltoall and point-to-point bandwidth, every result
//! checked by the program) on hosts that are network namespaces on a
//! switch (testkit's [`Switched`]: a bridge, one veth per host, an rnicd
//! over AF_PACKET on each).
//!
//! `mpirun` runs in host 0 through `rnic exec`; it starts its daemon
//! (`orted`) on every other host through a launcher agent of the test's
//! own (`plm_rsh_agent`): `ip netns exec HOST rnic exec -- ...`, so each
//! rank sees its host's device only. Its out-of-band TCP runs over the
//! same bridge; the byte transfer layer is `self` alone, so the MPI
//! traffic has no path but UCX.
//!
//! A run must end with exit 0 and every rank's checks passed, each rank's
//! UCX endpoints on `rc_verbs` of its host's device (UCX's own report at
//! `UCX_LOG_LEVEL=info`), every device's counters grown by at least the
//! bandwidth test's bytes, and the capture of host 0's switch port
//! holding the RDMA READ responses of the rendezvous both ways (UCX
//! moves 1 MiB messages by the receiver READing them). A rank killed
//! mid-run must end the job with an error from Open MPI, not a hang, and
//! the daemons must serve the next job. Without Open MPI: a loud
//! SKIPPED, a failure under CI=true.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::abi::profile_dir;
use testkit::netns;
use testkit::proc::{Finished, Running};
use testkit::rnicd::{built, counter, counters, have, STUCK};
use testkit::switched::{host_addr, Switched};
use tools::lab::mpi::{self, AgentHost};

/// How long one MPI job may run.
const DEADLINE: Duration = Duration::from_secs(120);

/// The bytes each rank sends its neighbour in one bandwidth round
/// (mpi_check.c's MSGS x MSG).
const P2P_BYTES: u64 = 32 << 20;

/// Whether the build, Open MPI (openmpi-bin, libopenmpi-dev), tcpdump
/// and root (namespaces) are here.
fn mpi_ready() -> Result<(), testkit::Missing> {
    built()?;
    for (p, pkg) in [
        ("mpirun", "openmpi-bin"),
        ("mpicc", "libopenmpi-dev"),
        ("tcpdump", "tcpdump"),
    ] {
        if !have(p) {
            return Err(testkit::Missing::new(format!("{p} not installed ({pkg})")));
        }
    }
    Ok(netns::available()?)
}

/// tests/c/mpi_check.c built with `mpicc` in `dir`.
fn mpi_check(dir: &Path) -> PathBuf {
    let bin = dir.join("mpi_check");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mpi_check.c");
    let out = Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(
        out.status.success(),
        "mpicc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// Writes the launcher agent into `dir` (`tools::lab::mpi`, as `rnic
/// lab` launches its collectives): `agent HOST COMMAND...` runs the
/// command in HOST's namespace through `rnic exec` on HOST's rnicd, with
/// a session folder of HOST's own.
fn agent(dir: &Path, net: &Switched) -> PathBuf {
    let hosts: Vec<AgentHost> = net
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| AgentHost {
            addr: host_addr(i),
            ns: &h.ns,
            sock_dir: h.rnicd.sock_dir(),
            session: dir.join(format!("session-{i}")),
            env: Vec::new(),
        })
        .collect();
    mpi::write_agent(dir, &profile_dir().join("rnic"), &hosts).expect("write the agent")
}

/// `mpirun` of `bin ARGS` on the first `ranks` hosts, one rank each,
/// started in host 0 through `rnic exec`, UCX on the verbs transports.
fn mpirun(net: &Switched, agent: &Path, ranks: usize, bin: &Path, args: &[&str]) -> Command {
    let hosts: Vec<_> = (0..ranks).map(host_addr).collect();
    let h0 = &net.hosts[0];
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &h0.ns])
        .arg(profile_dir().join("rnic"))
        .arg("exec")
        .arg("--sock-dir")
        .arg(h0.rnicd.sock_dir())
        .arg("--")
        .args(mpi::mpirun_args(
            &hosts,
            agent,
            "192.0.2.0/24",
            "rc_verbs,ud_verbs,self",
        ))
        .arg(bin)
        .args(args)
        .envs(mpi::AS_ROOT)
        .stdin(Stdio::null());
    c
}

/// Counter `name` of host `i`'s device.
fn dev_counter(net: &Switched, i: usize, name: &str) -> u64 {
    counter(
        &counters(net.hosts[i].rnicd.sock_dir()),
        &format!("r{i}"),
        name,
    )
}

/// The counters of every host's device, one report.
fn report(net: &Switched) -> String {
    net.hosts
        .iter()
        .map(|h| counters(h.rnicd.sock_dir()))
        .collect()
}

/// Payload bytes of the RDMA READ responses in `dump` from `from` to
/// `to` (`rnic pcap dump --roce`: `len=` of each RC_RDMA_READ_RESPONSE).
fn read_response_bytes(dump: &str, from: &str, to: &str) -> u64 {
    let way = format!("{from}:");
    let dest = format!("> {to}:4791");
    dump.lines()
        .filter(|l| l.contains("RC_RDMA_READ_RESPONSE") && l.contains(&dest))
        .filter(|l| {
            l.split_whitespace()
                .nth(2)
                .is_some_and(|a| a.starts_with(&way))
        })
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("len="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// Runs mpi_check on `ranks` hosts, capturing host 0's port, and checks
/// the outcome: exit 0, every rank's checks passed on its own device's
/// `rc_verbs`, every device's counters grown by the bandwidth test's
/// bytes, the capture holding the rendezvous READs both ways.
fn job(net: &mut Switched, dir: &Path, bin: &Path, ranks: usize) {
    let agent = agent(dir, net);
    let before: Vec<(u64, u64, u64)> = (0..ranks)
        .map(|i| {
            (
                dev_counter(net, i, "tx_bytes"),
                dev_counter(net, i, "rx_bytes"),
                dev_counter(net, i, "rx_read_requests"),
            )
        })
        .collect();
    let cap = net.capture(0, &dir.join(format!("host0-{ranks}.pcap")));
    let run = Running::spawn(
        format!("mpirun -np {ranks} mpi_check"),
        mpirun(net, &agent, ranks, bin, &[]),
    )
    .finish(Instant::now() + DEADLINE);
    let (pcap, tcpdump) = cap.stop();
    net.check_alive();
    let after = report(net);
    let say = || format!("{run}\ncounters after:\n{after}");
    assert!(run.ok(), "{}", say());
    let text = run.text();
    assert!(
        run.stdout.contains(&format!("mpi_check ok: {ranks} ranks")),
        "{}",
        say()
    );
    for (i, &(tx, rx, reads)) in before.iter().enumerate() {
        assert!(
            text.contains(&format!("rank {i}: allreduce ok, alltoall ok, p2p ok")),
            "rank {i}\n{}",
            say()
        );
        // UCX's report of its endpoints: every rank's on its host's device
        assert!(
            text.contains(&format!("tag(rc_verbs/r{i}:1)")),
            "rank {i} not on rc_verbs/r{i}:1\n{}",
            say()
        );
        let grew = |name: &str, was: u64| dev_counter(net, i, name) - was;
        assert!(
            grew("tx_bytes", tx) >= P2P_BYTES && grew("rx_bytes", rx) >= P2P_BYTES,
            "r{i} carried less than {P2P_BYTES} bytes each way\n{}",
            say()
        );
        assert!(
            grew("rx_read_requests", reads) > 0,
            "r{i}: no READ\n{}",
            say()
        );
    }
    let ep_lines: Vec<&str> = text.lines().filter(|l| l.contains("ep_cfg[")).collect();
    assert!(
        ep_lines.len() >= ranks
            && ep_lines
                .iter()
                .all(|l| !l.contains("tcp") && !l.contains("posix") && !l.contains("cma")),
        "UCX endpoints beyond the verbs transports: {ep_lines:#?}\n{}",
        say()
    );
    // the wire: host 0 READs its left neighbour's messages, its right
    // neighbour READs host 0's (a ring; with 2 ranks both are host 1)
    let dump = Command::new(profile_dir().join("rnic"))
        .args(["pcap", "dump", "--roce"])
        .arg(&pcap)
        .output()
        .expect("rnic pcap dump");
    let dump = String::from_utf8_lossy(&dump.stdout);
    let (me, left, right) = (host_addr(0), host_addr(ranks - 1), host_addr(1));
    let (got, gave) = (
        read_response_bytes(&dump, &left.to_string(), &me.to_string()),
        read_response_bytes(&dump, &me.to_string(), &right.to_string()),
    );
    // tcpdump may lose frames on a loaded machine (it says how many): then
    // the full amount is the counters' to prove, the capture shows the way
    let lost = tcpdump
        .lines()
        .find_map(|l| l.strip_suffix(" packets dropped by kernel"))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let want = if lost == 0 { P2P_BYTES } else { 1 };
    assert!(
        got >= want && gave >= want,
        "capture of host 0's port: READ responses {left} -> {me}: {got} B, {me} -> {right}: {gave} B, want {want} each ({tcpdump})"
    );
    eprintln!(
        "{ranks} ranks: {}; capture: {got} B of READ responses {left} -> {me}, {gave} B {me} -> {right}",
        run.stdout
            .lines()
            .find(|l| l.starts_with("rank 0: p2p"))
            .unwrap_or("")
    );
}

/// For `test`: when Open MPI and namespaces are here, a temp folder with
/// mpi_check built in it and `hosts` hosts on a switch (namespace tag
/// `tag`), an rnicd over AF_PACKET on each; None after a SKIPPED (or a
/// failure under CI).
fn setting(test: &str, tag: &str, hosts: usize) -> Option<(tempfile::TempDir, PathBuf, Switched)> {
    if !testkit::runs_here(test, mpi_ready()) {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = mpi_check(dir.path());
    match Switched::try_start(tag, hosts, "afpacket") {
        Ok(net) => Some((dir, bin, net)),
        Err(why) => {
            testkit::skip_or_fail(test, &why);
            None
        }
    }
}

#[test]
fn open_mpi_runs_over_rc_verbs_on_2_and_4_hosts() {
    let Some((dir, bin, mut net)) = setting("Open MPI over UCX on softrnic", "mpi", 4) else {
        return;
    };
    job(&mut net, dir.path(), &bin, 2);
    job(&mut net, dir.path(), &bin, 4);
}

/// The pids of running processes whose executable is `bin` and whose
/// environment says they are MPI rank `rank`.
fn rank_pids(bin: &Path, rank: usize) -> Vec<i32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|x| x == bin))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == want.as_bytes()))
        })
        .collect()
}

#[test]
fn a_rank_killed_mid_run_ends_the_mpi_job_with_an_error() {
    let Some((dir, bin, mut net)) = setting("Open MPI with a rank killed", "mpk", 2) else {
        return;
    };
    let agent = agent(dir.path(), &net);
    let reads = dev_counter(&net, 1, "rx_read_requests");
    // rounds enough to outlast the test's patience: only the kill ends it
    let mut run = Running::spawn(
        "mpirun -np 2 mpi_check 100000",
        mpirun(&net, &agent, 2, &bin, &["100000"]),
    );
    // the bandwidth rounds are under way: rank 1's device serves READs
    testkit::wait_for(STUCK, "rank 1 reading its messages", || {
        if run.ended() {
            panic!("the job ended before the kill");
        }
        (dev_counter(&net, 1, "rx_read_requests") > reads + 64)
            .then_some(())
            .ok_or("no READs yet")
    });
    let victims = rank_pids(&bin, 1);
    assert_eq!(victims.len(), 1, "rank 1's process: {victims:?}");
    // SAFETY: kill(2) of the rank this test's mpirun started.
    unsafe { libc::kill(victims[0], libc::SIGKILL) };
    let out: Finished = run.finish(Instant::now() + DEADLINE);
    let say = format!("{out}\ncounters:\n{}", report(&net));
    assert!(out.failed_cleanly(), "not an error exit: {say}");
    assert!(
        out.text().contains("signal 9"),
        "Open MPI did not name the killed rank: {say}"
    );
    eprintln!(
        "rank 1 killed: {}",
        out.text()
            .lines()
            .find(|l| l.contains("signal 9"))
            .unwrap_or("")
    );
    testkit::wait_until(STUCK, "rank 0 gone", || rank_pids(&bin, 0).is_empty());
    net.check_alive();
    // the daemons serve the next job
    job(&mut net, dir.path(), &bin, 2);
}
