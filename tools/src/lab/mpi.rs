//! Open MPI across hosts that are network namespaces on one machine, the
//! way docs/dropin.md ("Open MPI") runs it: `mpirun` in one host through
//! `rnic exec`, its `orted` on every other host started by a launcher
//! agent of ours in place of ssh ([`agent_script`]), the MPI traffic on
//! the UCX PML alone (`--mca btl self`), UCX held to the transports asked
//! for ([`mpirun_args`]). `rnic lab`'s collectives and
//! tools/tests/openmpi.rs both launch this way. Across machines the
//! agent's route to each host is that machine's launcher instead
//! ([`routed_agent`], used by [`super::remote_collective`]).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// One host as the launcher agent reaches it.
pub struct AgentHost<'a> {
    /// The address `mpirun --host` names it by.
    pub addr: Ipv4Addr,
    /// Its network namespace.
    pub ns: &'a str,
    /// Its rnicd's socket folder (`rnic exec --sock-dir`).
    pub sock_dir: &'a Path,
    /// A session folder of its own (`orte_tmpdir_base`): the namespaces
    /// share one file system and one host name, and orteds sharing a
    /// session folder collide in it (mkdir "File exists", the hwloc
    /// topology file).
    pub session: PathBuf,
    /// More of its environment, exported before its `orted` starts (a
    /// rank inherits it from its orted): e.g. its `UCX_NET_DEVICES`.
    pub env: Vec<(String, String)>,
}

/// How the launcher agent starts a command on one host.
pub struct Route {
    /// The address `mpirun --host` names the host by.
    pub addr: Ipv4Addr,
    /// Shell text (words already quoted) that runs its last argument, a
    /// command line, on the host: e.g. `ip netns exec NS rnic exec
    /// --sock-dir DIR -- sh -c`.
    pub prefix: String,
    /// Whether that command line reaches a remote shell as text to parse
    /// once more (ssh): the agent then quotes it for that shell.
    pub remote_shell: bool,
    /// Exported before the command runs, on the host.
    pub env: Vec<(String, String)>,
}

/// The launcher agent (Open MPI's `plm_rsh_agent`) over `routes`: `agent
/// HOST COMMAND...` runs the command (the orted line, through a shell as
/// ssh would) on HOST by its route.
pub fn routed_agent(routes: &[Route]) -> String {
    let mut cases = String::new();
    for r in routes {
        let mut line = String::new();
        for (k, v) in &r.env {
            let _ = write!(line, "export {k}={}; ", super::machines::quote(v));
        }
        let arg = if r.remote_shell {
            "\"$(q \"$line\")\""
        } else {
            "\"$line\""
        };
        let _ = writeln!(
            cases,
            "  {}) line={}\"$*\"; exec {} {arg} ;;",
            r.addr,
            super::machines::quote(&line),
            r.prefix
        );
    }
    format!(
        "#!/bin/sh\n# Open MPI's plm_rsh_agent: HOST COMMAND...\nhost=$1; shift\n\
         q() {{ printf \"'%s'\" \"$(printf %s \"$1\" | sed \"s/'/'\\\\\\\\''/g\")\"; }}\n\
         case \"$host\" in\n{cases}  *) echo \"agent: no host $host\" >&2; exit 1 ;;\nesac\n"
    )
}

/// The launcher agent for hosts that are namespaces here: each command
/// runs in HOST's namespace through `rnic exec` (`rnic`) on HOST's
/// rnicd, so each rank sees its host's device only.
pub fn agent_script(rnic: &Path, hosts: &[AgentHost]) -> String {
    let routes: Vec<Route> = hosts
        .iter()
        .map(|h| {
            let mut env = vec![(
                "OMPI_MCA_orte_tmpdir_base".to_string(),
                h.session.display().to_string(),
            )];
            env.extend(h.env.iter().cloned());
            let words = [
                "ip".to_string(),
                "netns".into(),
                "exec".into(),
                h.ns.into(),
                rnic.display().to_string(),
                "exec".into(),
                "--sock-dir".into(),
                h.sock_dir.display().to_string(),
                "--".into(),
                "sh".into(),
                "-c".into(),
            ];
            Route {
                addr: h.addr,
                prefix: words
                    .iter()
                    .map(|w| super::machines::quote(w))
                    .collect::<Vec<_>>()
                    .join(" "),
                remote_shell: false,
                env,
            }
        })
        .collect();
    routed_agent(&routes)
}

/// Writes [`agent_script`] as `dir/agent.sh`, executable, making each
/// host's session folder; its path.
pub fn write_agent(dir: &Path, rnic: &Path, hosts: &[AgentHost]) -> std::io::Result<PathBuf> {
    for h in hosts {
        std::fs::create_dir_all(&h.session)?;
    }
    let path = dir.join("agent.sh");
    std::fs::write(&path, agent_script(rnic, hosts))?;
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&path, mode)?;
    Ok(path)
}

/// `mpirun` and its options for one rank on each of `hosts` (rank i on
/// `hosts[i]`; run it in the first), launched by `agent`, as
/// [`mpirun_options`] says. The program and its arguments follow.
pub fn mpirun_args(
    hosts: &[Ipv4Addr],
    agent: &Path,
    oob_net: &str,
    ucx_tls: &str,
) -> Vec<OsString> {
    let list: Vec<String> = hosts.iter().map(Ipv4Addr::to_string).collect();
    let mut a: Vec<OsString> = ["mpirun", "--allow-run-as-root", "-np"]
        .iter()
        .map(OsString::from)
        .collect();
    a.push(hosts.len().to_string().into());
    a.extend(["--host".into(), list.join(",").into()]);
    a.extend(mpirun_options(agent, oob_net));
    a.extend(ucx_env(ucx_tls));
    a
}

/// `mpirun`'s global options for any placement of the ranks: launched by
/// `agent`, its out-of-band TCP on `oob_net` (e.g. `192.0.2.0/24`, or a
/// list of them), the MPI traffic on the UCX PML alone.
pub fn mpirun_options(agent: &Path, oob_net: &str) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["--mca".into(), "plm_rsh_agent".into(), agent.into()];
    for w in [
        "--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "osc", "ucx",
    ] {
        a.push(w.into());
    }
    a.extend(["--mca".into(), "oob_tcp_if_include".into(), oob_net.into()]);
    // UCX_TLS alone decides: Open MPI would refuse its UCX PML unless
    // UCX offers one of its own list of transports (verbs, mlx5)
    for w in [
        "--mca",
        "pml_ucx_tls",
        "any",
        "--mca",
        "pml_ucx_devices",
        "any",
    ] {
        a.push(w.into());
    }
    a
}

/// The ranks' UCX environment, options of one app context (`-x` is
/// mpirun's per app context): UCX held to `ucx_tls`, reporting each
/// endpoint's transports (`UCX_LOG_LEVEL=info`: the `ep_cfg[...]` lines).
pub fn ucx_env(ucx_tls: &str) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["-x".into(), format!("UCX_TLS={ucx_tls}").into()];
    for w in [
        "-x",
        "UCX_LOG_LEVEL=info",
        "-x",
        "UCX_WARN_UNUSED_ENV_VARS=n",
    ] {
        a.push(w.into());
    }
    a
}

/// The environment `mpirun` needs to run as root (Open MPI refuses
/// otherwise).
pub const AS_ROOT: [(&str, &str); 2] = [
    ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
    ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
];

/// The transports of each UCX endpoint a job's output reports (UCX's
/// `ep_cfg[...]` lines at `UCX_LOG_LEVEL=info`, e.g. `tag(rc_verbs/h1:1)`
/// or `tag(tcp/rnl7h1)`): the `tag(...)` parts, as they appear.
pub fn endpoint_transports(output: &str) -> Vec<String> {
    output
        .lines()
        .filter(|l| l.contains("ep_cfg["))
        .filter_map(|l| {
            let t = l.split("tag(").nth(1)?;
            Some(t.split(')').next()?.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_maps_each_address_to_its_namespace_and_device() {
        let s0 = PathBuf::from("/tmp/l/h0");
        let hosts = [AgentHost {
            addr: Ipv4Addr::new(192, 0, 2, 1),
            ns: "lab-h0",
            sock_dir: &s0,
            session: "/tmp/l/session-0".into(),
            env: vec![("UCX_NET_DEVICES".into(), "v0".into())],
        }];
        let s = agent_script(Path::new("/bin/rnic"), &hosts);
        assert!(s.contains("  192.0.2.1) line='export OMPI_MCA_orte_tmpdir_base=/tmp/l/session-0; export UCX_NET_DEVICES=v0; '\"$*\"; exec ip netns exec lab-h0 /bin/rnic exec --sock-dir /tmp/l/h0 -- sh -c \"$line\" ;;\n"), "{s}");
        let a = mpirun_args(
            &[hosts[0].addr, Ipv4Addr::new(192, 0, 2, 2)],
            Path::new("/a.sh"),
            "192.0.2.0/24",
            "tcp,self",
        );
        let a: Vec<String> = a.iter().map(|w| w.to_string_lossy().into_owned()).collect();
        let at = |w: &str| a.iter().position(|x| x == w).unwrap();
        assert_eq!(a[at("-np") + 1], "2");
        assert_eq!(a[at("--host") + 1], "192.0.2.1,192.0.2.2");
        assert!(a.contains(&"UCX_TLS=tcp,self".to_string()), "{a:?}");
    }

    #[test]
    fn a_route_through_a_remote_shell_gets_the_line_quoted_once_more() {
        // `ssh` stands in: it joins its words and a shell parses them
        let ssh = "sh -c 'sh -c \"$*\"' ssh";
        let routes = [Route {
            addr: Ipv4Addr::new(192, 0, 2, 7),
            prefix: format!("{ssh} sh -c"),
            remote_shell: true,
            env: vec![("V".into(), "x y".into())],
        }];
        let out = std::process::Command::new("sh")
            .args(["-c", &routed_agent(&routes), "agent", "192.0.2.7"])
            .args(["echo", "\"$V\"", "'a  b'", "it\\'s"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "x y a  b it's\n");
        let out = std::process::Command::new("sh")
            .args(["-c", &routed_agent(&routes), "agent", "192.0.2.8", "true"])
            .output()
            .unwrap();
        assert!(!out.status.success());
    }

    #[test]
    fn endpoints_come_from_ucxs_report() {
        let out = "[1] ucp_worker.c:1855 INFO ep_cfg[1]: tag(rc_verbs/h1:1 rc_verbs/h1:1);\n\
                   noise\n[2] INFO ep_cfg[0]: tag(tcp/rnl7h0);\n";
        assert_eq!(
            endpoint_transports(out),
            ["rc_verbs/h1:1 rc_verbs/h1:1", "tcp/rnl7h0"]
        );
    }
}
