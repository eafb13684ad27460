//! A collective (`kind = "allreduce"` or `"alltoall"`) across machines
//! ([`super::machines`]), one rank per machine, rank i on machine i:
//!
//! - the program ([`super::collective::SOURCE`]) is built with `mpicc` in
//!   each machine's scratch folder, through its launcher;
//! - `mpirun` runs on the first machine through its launcher, under
//!   `rnic exec` of its rnicd, in a session recorded in its scratch
//!   folder, as every program of the lab there ([`Station::spawn`]);
//! - it starts each other machine's `orted` with a launcher agent
//!   ([`super::mpi::routed_agent`]) written into the first machine's
//!   scratch folder, whose route to a machine is that machine's launcher
//!   running `rnic exec` of its rnicd in a session recorded in its
//!   scratch folder: the lab's teardown ends the orted and its rank there
//!   with the rest. So the first machine must reach the others' launchers
//!   (an ssh key there, or an orchestrator's client);
//! - the ranks run each machine's own build (an MPMD job: the scratch
//!   folders differ), and Open MPI's out-of-band TCP is held to the
//!   machines' addresses.

use super::collective::{self, Job};
use super::machines::quote;
use super::mpi::{self, Route};
use super::remote::{self, words, Station};
use super::workload::UcxTls;
use super::{LabConfig, LabError};
use std::ffi::OsString;
use std::path::Path;

/// Builds the program on every machine, writes the launcher agent on the
/// first and starts `mpirun` there, its output into `logs/mpirun.txt`.
pub fn start(cfg: &LabConfig, st: &[Station], logs: &Path) -> Result<Job, LabError> {
    for s in st {
        build(s)?;
    }
    let h0 = &st[0];
    let agent = format!("{}/agent.sh", h0.scratch);
    let routes: Vec<Route> = st.iter().map(|s| route(cfg, s)).collect();
    let script = mpi::routed_agent(&routes);
    remote::put_file(&h0.machine, "writing the MPI agent", &agent, &script, true)?;
    let log = logs.join("mpirun.txt");
    let mpirun = h0.spawn("mpirun", &mpirun_argv(cfg, st, &agent), &log, "mpirun")?;
    Ok(Job {
        mpirun,
        log,
        iterations: cfg.iterations,
    })
}

/// Builds the program as `SCRATCH/collective` on `s`'s machine, making
/// the MPI session folder beside it.
fn build(s: &Station) -> Result<(), LabError> {
    let script = "mkdir -p \"$1/session\" && printf %s \"$2\" > \"$1/collective.c\" && \
                  mpicc -O2 -o \"$1/collective\" \"$1/collective.c\"";
    let cmd = words(&["sh", "-c", script, "sh", &s.scratch, collective::SOURCE]);
    remote::run_on(&s.machine, "building the collective with mpicc", &cmd).map(drop)
}

/// The MPI processes' environment on `s`'s machine: allowed to run as
/// root (a launcher such as ssh passes no environment on), their session
/// folder in its scratch folder, and with TCP UCX's device its interface.
///
/// The session folder is `TMPDIR` (Open MPI's default `orte_tmpdir_base`),
/// not `OMPI_MCA_orte_tmpdir_base`: mpirun copies every `OMPI_MCA_*` of
/// its environment onto each orted's command line
/// (`plm_rsh_pass_environ_mca_params`), where it would override the
/// machine's own, and machines that share a file system and a host name
/// (namespaces of one host) would then race to create one folder.
fn env(cfg: &LabConfig, s: &Station) -> Vec<(String, String)> {
    let mut e: Vec<(String, String)> = mpi::AS_ROOT
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    e.push(("TMPDIR".into(), format!("{}/session", s.scratch)));
    if cfg.ucx_tls == UcxTls::Tcp {
        e.push(("UCX_NET_DEVICES".into(), s.machine.iface.clone()));
    }
    e
}

/// How the agent starts a command line (an orted) on `s`'s machine: its
/// launcher, a session recorded as `orted`, `rnic exec` of its rnicd.
fn route(cfg: &LabConfig, s: &Station) -> Route {
    let cmd = words(&[&s.rnic, "exec", "--sock-dir", &s.sock_dir, "--", "sh", "-c"]);
    let argv = s.machine.session(&s.scratch, "orted", &cmd);
    Route {
        addr: s.machine.addr,
        prefix: argv.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "),
        remote_shell: s.machine.through_shell(),
        env: env(cfg, s),
    }
}

/// `mpirun` on the first machine under `rnic exec`, launched by `agent`
/// there: one app context per machine, its build of the program with the
/// UCX environment.
fn mpirun_argv(cfg: &LabConfig, st: &[Station], agent: &str) -> Vec<String> {
    let text = |v: Vec<OsString>| {
        v.into_iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    };
    let h0 = &st[0];
    let mut a = vec!["env".to_string()];
    a.extend(env(cfg, h0).into_iter().map(|(k, v)| format!("{k}={v}")));
    a.extend(words(&[&h0.rnic, "exec", "--sock-dir", &h0.sock_dir, "--"]));
    a.extend(words(&["mpirun", "--allow-run-as-root"]));
    let oob: Vec<String> = st
        .iter()
        .map(|s| format!("{}/32", s.machine.addr))
        .collect();
    a.extend(text(mpi::mpirun_options(Path::new(agent), &oob.join(","))));
    // mpirun starts every orted itself (the agent is on its machine
    // only), and each stays attached to its launcher (not daemonized, as
    // Open MPI does without a tree spawn): in its session, which the
    // teardown ends, its output back through the launcher
    a.extend(words(&["--mca", "plm_rsh_no_tree_spawn", "1"]));
    a.extend(words(&["--mca", "orte_leave_session_attached", "1"]));
    a.extend(text(collective::algorithm_options(cfg)));
    for (i, s) in st.iter().enumerate() {
        if i > 0 {
            a.push(":".into());
        }
        let host = s.machine.addr.to_string();
        let bin = format!("{}/collective", s.scratch);
        a.extend(words(&["-np", "1", "--host", &host]));
        a.extend(text(mpi::ucx_env(cfg.ucx_tls.tls())));
        a.push(bin);
        a.extend(text(collective::program_args(cfg)));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::{LabConfig, LabFile};

    /// Stations of `cfg`'s machines as the lab would have them (no
    /// rnicd); their launchers run nothing (`true`) or reach no machine
    /// (`/nonexistent/ssh`), so their teardown on drop touches nothing.
    fn stations(cfg: &LabConfig) -> Vec<Station> {
        cfg.machines
            .iter()
            .map(|m| {
                let scratch = m.scratch("rnlab-1");
                Station {
                    machine: m.clone(),
                    sock_dir: format!("{scratch}/sock"),
                    scratch,
                    rnic: "/opt/bin/rnic".into(),
                    rnicd: None,
                    log: "/dev/null".into(),
                    backend: String::new(),
                }
            })
            .collect()
    }

    fn config(tls: &str) -> LabConfig {
        let text = format!(
            "[workload]\nkind = \"allreduce\"\nucx_tls = \"{tls}\"\niterations = 3\n\
             [[machine]]\nname = \"a\"\nlauncher = \"true\"\niface = \"eth1\"\nip = \"10.0.0.1\"\n\
             [[machine]]\nname = \"b\"\nlauncher = \"/nonexistent/ssh -p 22 b\"\niface = \"eth2\"\n\
             ip = \"10.0.0.2\"\n"
        );
        LabConfig::from_file(toml::from_str::<LabFile>(&text).unwrap()).unwrap()
    }

    #[test]
    fn mpirun_runs_one_app_context_per_machine_with_its_build_and_ucx() {
        let cfg = config("rdma");
        let st = stations(&cfg);
        let a = mpirun_argv(&cfg, &st, "/tmp/rnlab-1-a/agent.sh");
        let at = |w: &str| a.iter().position(|x| x == w).unwrap();
        assert_eq!(a[at("mpirun") - 1], "--");
        assert_eq!(a[at("--sock-dir") + 1], "/tmp/rnlab-1-a/sock");
        assert_eq!(a[at("plm_rsh_agent") + 1], "/tmp/rnlab-1-a/agent.sh");
        assert_eq!(a[at("oob_tcp_if_include") + 1], "10.0.0.1/32,10.0.0.2/32");
        assert_eq!(a[at("orte_leave_session_attached") + 1], "1");
        assert_eq!(a[at("coll_tuned_allreduce_algorithm") + 1], "4");
        let contexts: Vec<&[String]> = a[at("-np")..].split(|w| w == ":").collect();
        assert_eq!(contexts.len(), 2, "{a:?}");
        for (c, (ip, m)) in contexts.iter().zip([("10.0.0.1", "a"), ("10.0.0.2", "b")]) {
            assert_eq!(&c[..4], ["-np", "1", "--host", ip]);
            assert!(
                c.contains(&"UCX_TLS=rc_verbs,ud_verbs,self".to_string()),
                "{c:?}"
            );
            let bin = format!("/tmp/rnlab-1-{m}/collective");
            let i = c.iter().position(|w| *w == bin).expect("its own build");
            assert_eq!(c[i + 1..], ["allreduce", "1048576", "3", "10"]);
        }
        // ssh passes no environment on: the agent exports it; nothing of
        // it is an MCA parameter mpirun would pass on to every orted
        assert!(a.contains(&"TMPDIR=/tmp/rnlab-1-a/session".to_string()));
        assert!(!a.iter().any(|w| w.starts_with("OMPI_MCA_")), "{a:?}");
    }

    #[test]
    fn each_route_is_its_machines_launcher_in_a_session_under_rnic_exec() {
        let cfg = config("tcp");
        let st = stations(&cfg);
        let (a, b) = (route(&cfg, &st[0]), route(&cfg, &st[1]));
        assert!(!a.remote_shell && b.remote_shell);
        assert!(
            a.prefix.starts_with("true setsid -w sh -c "),
            "{}",
            a.prefix
        );
        assert!(
            a.prefix.contains("/tmp/rnlab-1-a/orted.pid"),
            "{}",
            a.prefix
        );
        assert!(
            a.prefix
                .ends_with(" sh /opt/bin/rnic exec --sock-dir /tmp/rnlab-1-a/sock -- sh -c"),
            "{}",
            a.prefix
        );
        assert!(
            b.prefix.starts_with("/nonexistent/ssh -p 22 b setsid"),
            "{}",
            b.prefix
        );
        let env = |r: &Route, k: &str| r.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(env(&b, "UCX_NET_DEVICES").as_deref(), Some("eth2"));
        assert_eq!(env(&b, "OMPI_ALLOW_RUN_AS_ROOT").as_deref(), Some("1"));
        assert_eq!(env(&a, "TMPDIR").as_deref(), Some("/tmp/rnlab-1-a/session"));
        assert!(env(&route(&config("rdma"), &st[0]), "UCX_NET_DEVICES").is_none());
    }
}
