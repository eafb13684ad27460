//! A lab across machines: the `[[machine]]` tables of a lab file, each a
//! real host with its RoCE interface and the command that runs a program
//! there (its *launcher*: `ssh node0`, `kubectl exec POD --`,
//! `srun -w node0`, `ip netns exec m0`), and the command lines that run,
//! sample and stop the lab's programs through it.
//!
//! ```toml
//! [[machine]]
//! name = "h0"                                 # its rnicd device; the first machine receives
//! launcher = "ssh -o BatchMode=yes node0"     # a command prefix, split on blanks
//! iface = "eth1"                              # its RoCE interface
//! ip = "10.0.0.1"                             # that interface's IPv4 address (its GID)
//! bin_dir = "/opt/softrnic/bin"               # rnicd and rnic there (default: this rnic's folder)
//! rate = "25gbit"                             # rnicd --line-rate, DCQCN's ceiling (default: the interface's speed)
//! ```
//!
//! Every program the lab starts on a machine runs in a session of its
//! own whose leader writes its pid into the machine's scratch folder
//! (`/tmp/rnlab-<pid>-<name>` there), so one command through the
//! launcher ([`teardown_script`]) ends them all, whatever the launcher
//! did with its local end.

use super::setting::{parse_rate, rate_text, setting, MAX_HOSTS};
use super::LabError;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// One `[[machine]]` table as the file gives it.
#[derive(Debug, Default, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MachineFile {
    pub name: Option<String>,
    pub launcher: Option<String>,
    pub iface: Option<String>,
    pub ip: Option<String>,
    pub bin_dir: Option<String>,
    pub rate: Option<String>,
}

/// A checked machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// Its rnicd device's name (`-d` of the perftest programs).
    pub name: String,
    /// The command prefix that runs a program there.
    pub launcher: Vec<String>,
    pub iface: String,
    pub addr: Ipv4Addr,
    /// The folder of `rnicd` and `rnic` there; `None`: this rnic's own
    /// folder (the same path on every machine).
    pub bin_dir: Option<PathBuf>,
    /// rnicd's `--line-rate` (DCQCN's ceiling and steps; it paces
    /// nothing), bits per second; `None`: the interface's speed.
    pub rate_bps: Option<u64>,
}

/// Checks the `[[machine]]` tables against the rest of the file: no
/// `[switch]` (the network's own switches queue and mark), `hosts` absent
/// or the number of machines. Every workload runs across machines (a
/// trace names them h0, h1... in their order). An empty list is the
/// lab's own fabric.
pub fn check(
    machines: &[MachineFile],
    hosts: Option<usize>,
    switch_keys: &[String],
) -> Result<Vec<Machine>, LabError> {
    if machines.is_empty() {
        return Ok(Vec::new());
    }
    if !switch_keys.is_empty() {
        return Err(setting(
            "switch",
            format!(
                "{}: a lab across machines builds no switch (the network's own switches queue and \
                 mark); drop these keys or the [[machine]] tables",
                switch_keys.join(", ")
            ),
        ));
    }
    let n = machines.len();
    if !(2..=MAX_HOSTS).contains(&n) {
        return Err(setting(
            "machine",
            format!("{n} machines: want 2 to {MAX_HOSTS}"),
        ));
    }
    if hosts.is_some_and(|h| h != n) {
        return Err(setting(
            "hosts",
            format!(
                "{} but {n} [[machine]] tables: leave hosts out",
                hosts.unwrap_or(0)
            ),
        ));
    }
    let list = machines
        .iter()
        .enumerate()
        .map(|(i, m)| machine(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, m) in list.iter().enumerate() {
        if let Some(o) = list[..i]
            .iter()
            .find(|o| o.name == m.name || o.addr == m.addr)
        {
            return Err(setting(
                "machine",
                format!("{} and {} share a name or an ip", o.name, m.name),
            ));
        }
    }
    Ok(list)
}

/// Machine `i`'s table checked.
fn machine(i: usize, m: &MachineFile) -> Result<Machine, LabError> {
    let name = m.name.clone().unwrap_or_else(|| format!("h{i}"));
    let which = |key: &str| format!("machine {name}: {key}");
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(setting(
            "machine",
            format!("name {name:?}: want letters, digits, - and _"),
        ));
    }
    let launcher: Vec<String> = m
        .launcher
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(String::from)
        .collect();
    if launcher.is_empty() {
        return Err(setting(
            "machine",
            format!("{}: missing (e.g. \"ssh node0\")", which("launcher")),
        ));
    }
    let iface = m.iface.clone().unwrap_or_default();
    if iface.is_empty() || iface.len() > 15 || iface.contains(['/', ' ']) {
        return Err(setting(
            "machine",
            format!("{}: {iface:?} is not an interface name", which("iface")),
        ));
    }
    let ip = m.ip.as_deref().unwrap_or("");
    let addr: Ipv4Addr = ip.parse().map_err(|_| {
        setting(
            "machine",
            format!("{}: {ip:?} is not an IPv4 address", which("ip")),
        )
    })?;
    let rate_bps = m.rate.as_deref().map(parse_rate).transpose()?;
    Ok(Machine {
        name,
        launcher,
        iface,
        addr,
        bin_dir: m.bin_dir.as_ref().map(PathBuf::from),
        rate_bps,
    })
}

impl Machine {
    /// Its table, for the lab file written into the results folder.
    pub fn to_file(&self) -> MachineFile {
        MachineFile {
            name: Some(self.name.clone()),
            launcher: Some(self.launcher.join(" ")),
            iface: Some(self.iface.clone()),
            ip: Some(self.addr.to_string()),
            bin_dir: self.bin_dir.as_ref().map(|p| p.display().to_string()),
            rate: self.rate_bps.map(rate_text),
        }
    }

    /// Whether its launcher hands the command to a remote shell as one
    /// line (ssh joins its arguments with blanks), so each word must be
    /// quoted for that shell; other launchers (`ip netns exec`,
    /// `kubectl exec --`, `srun`) pass the words on as they are.
    pub fn through_shell(&self) -> bool {
        Path::new(&self.launcher[0])
            .file_name()
            .is_some_and(|p| p == "ssh")
    }

    /// The command line that runs `cmd` there.
    pub fn argv(&self, cmd: &[String]) -> Vec<String> {
        let mut a = self.launcher.clone();
        if self.through_shell() {
            a.extend(cmd.iter().map(|w| quote(w)));
        } else {
            a.extend(cmd.iter().cloned());
        }
        a
    }

    /// `prog` (`rnicd`, `rnic`) there: in `bin_dir`, else beside `local`,
    /// this machine's copy.
    pub fn program(&self, prog: &str, local: &Path) -> String {
        match &self.bin_dir {
            Some(d) => d.join(prog).display().to_string(),
            None => local.with_file_name(prog).display().to_string(),
        }
    }

    /// Its scratch folder there (the pid files, rnicd's socket folder).
    pub fn scratch(&self, lab_id: &str) -> String {
        format!("/tmp/{lab_id}-{}", self.name)
    }

    /// `cmd` there in a session of its own, its leader's pid in
    /// `SCRATCH/<tag>.pid` while it runs (so [`teardown_script`] can end
    /// the session); its exit status is `cmd`'s.
    pub fn session(&self, scratch: &str, tag: &str, cmd: &[String]) -> Vec<String> {
        let pid = format!("{scratch}/{tag}.pid");
        let script = format!(
            "mkdir -p {s} && echo $$ > {p} && {{ \"$@\"; rc=$?; rm -f {p}; exit $rc; }}",
            s = quote(scratch),
            p = quote(&pid)
        );
        let mut c: Vec<String> = ["setsid", "-w", "sh", "-c", &script, "sh"]
            .map(String::from)
            .to_vec();
        c.extend(cmd.iter().cloned());
        self.argv(&c)
    }
}

/// The shell script that ends every session recorded in `scratch` and
/// removes the folder: the programs first, then the machine's rnicd
/// (`rnicd.pid`), each SIGTERM to its process group and SIGKILL to what
/// is left after 5 s. A program whose RNIC vanished under it would see
/// its work requests flushed and its device fail (UCX aborts on that)
/// instead of ending by the signal.
pub fn teardown_script(scratch: &str) -> String {
    let d = quote(scratch);
    format!(
        "each() {{ for f in {d}/*.pid; do case $f in */rnicd.pid) g=rnicd ;; *) g=programs ;; esac; \
         [ $g = $2 ] && [ -e \"$f\" ] && kill -\"$1\" -\"$(cat \"$f\")\" 2>/dev/null && echo x; done; }}; \
         end() {{ each TERM $1 >/dev/null; i=0; \
         while [ $i -lt 50 ] && [ -n \"$(each 0 $1)\" ]; do sleep 0.1; i=$((i+1)); done; \
         each KILL $1 >/dev/null; }}; \
         end programs; end rnicd; rm -rf {d}"
    )
}

/// `w` quoted for a POSIX shell (as is when it has nothing the shell
/// would read).
pub fn quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::config::SwitchFile;
    use crate::lab::{LabConfig, LabFile};

    const TWO: &str = "[[machine]]\nname = \"a\"\nlauncher = \"ssh -o BatchMode=yes node0\"\n\
        iface = \"eth1\"\nip = \"10.0.0.1\"\nrate = \"25gbit\"\n\
        [[machine]]\nlauncher = \"ip netns exec m1\"\niface = \"eth1\"\nip = \"10.0.0.2\"\n\
        bin_dir = \"/opt/softrnic/bin\"\n";

    fn file(text: &str) -> LabFile {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn machines_parse_fill_in_and_read_back() {
        let c = LabConfig::from_file(file(TWO)).unwrap();
        assert_eq!(c.hosts, 2);
        let [a, b] = &c.machines[..] else {
            panic!("{:?}", c.machines)
        };
        assert_eq!(
            (a.name.as_str(), a.rate_bps, a.through_shell()),
            ("a", Some(25_000_000_000), true)
        );
        assert_eq!(
            (b.name.as_str(), b.addr, b.through_shell()),
            ("h1", Ipv4Addr::new(10, 0, 0, 2), false)
        );
        assert_eq!(
            b.program("rnicd", Path::new("/x/rnic")),
            "/opt/softrnic/bin/rnicd"
        );
        assert_eq!(a.program("rnicd", Path::new("/x/rnic")), "/x/rnicd");
        let again: LabFile = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(LabConfig::from_file(again).unwrap(), c);
    }

    #[test]
    fn commands_are_quoted_for_ssh_only() {
        let c = LabConfig::from_file(file(TWO)).unwrap();
        let cmd = ["echo".to_string(), "a b".into(), "it's".into()];
        assert_eq!(
            c.machines[0].argv(&cmd),
            [
                "ssh",
                "-o",
                "BatchMode=yes",
                "node0",
                "echo",
                "'a b'",
                "'it'\\''s'"
            ]
        );
        assert_eq!(
            c.machines[1].argv(&cmd),
            ["ip", "netns", "exec", "m1", "echo", "a b", "it's"]
        );
        let s = c.machines[1].session("/tmp/x", "rnicd", &cmd);
        assert_eq!(&s[4..9], ["setsid", "-w", "sh", "-c", &s[8]]);
        assert!(s[8].contains("echo $$ > /tmp/x/rnicd.pid"), "{}", s[8]);
        assert_eq!(&s[9..], ["sh", "echo", "a b", "it's"]);
    }

    /// A machine whose launcher runs the command here (`env`).
    fn here() -> Machine {
        Machine {
            name: "m".into(),
            launcher: vec!["env".into()],
            iface: "lo".into(),
            addr: Ipv4Addr::LOCALHOST,
            bin_dir: None,
            rate_bps: None,
        }
    }

    /// How long a session may take to start.
    const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);

    /// Runs the teardown of `scratch` here.
    fn tear_down(scratch: &str) {
        let st = std::process::Command::new("sh")
            .args(["-c", &teardown_script(scratch)])
            .status()
            .unwrap();
        assert!(st.success());
    }

    #[test]
    fn a_session_runs_records_its_pid_and_the_teardown_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("m").display().to_string();
        let m = here();
        let argv = m.session(&scratch, "s", &["sleep".into(), "600".into()]);
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .spawn()
            .unwrap();
        let pid_file = Path::new(&scratch).join("s.pid");
        testkit::wait_until(MINUTE, "the pid file", || pid_file.exists());
        tear_down(&scratch);
        assert!(!Path::new(&scratch).exists());
        // the session ended by the signal, long before sleep's 600 s
        let t0 = std::time::Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed().as_secs() > 60 {
                let _ = child.kill();
                panic!("the session outlived its teardown");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert!(!st.success(), "{st}");
    }

    #[test]
    fn the_teardown_ends_the_programs_before_the_rnicd() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("m").display().to_string();
        let alive = dir.path().join("rnicd-alive").display().to_string();
        let seen = dir.path().join("seen").display().to_string();
        let m = here();
        let sh = |script: String| vec!["sh".to_string(), "-c".into(), script];
        // the "rnicd" notes that it runs until its SIGTERM; the program,
        // on its own SIGTERM, looks a moment later whether it still does
        let rnicd = sh(format!(
            "trap 'rm -f {alive}; exit 0' TERM; touch {alive}; while :; do sleep 0.05; done"
        ));
        let prog = sh(format!(
            "trap 'sleep 0.3; [ -e {alive} ] && echo alive > {seen}; exit 0' TERM; \
             while :; do sleep 0.05; done"
        ));
        let mut kids = Vec::new();
        for (tag, cmd) in [("rnicd", &rnicd), ("app", &prog)] {
            let argv = m.session(&scratch, tag, cmd);
            kids.push(
                std::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .spawn()
                    .unwrap(),
            );
        }
        testkit::wait_until(MINUTE, "the sessions", || {
            Path::new(&scratch).join("app.pid").exists() && Path::new(&alive).exists()
        });
        tear_down(&scratch);
        for mut k in kids {
            let _ = k.wait();
        }
        assert_eq!(
            std::fs::read_to_string(&seen).ok().as_deref(),
            Some("alive\n"),
            "the rnicd was ended before the program"
        );
        assert!(!Path::new(&alive).exists(), "the rnicd was not ended");
        assert!(!Path::new(&scratch).exists());
    }

    #[test]
    fn machines_and_a_switch_or_a_bad_table_are_refused() {
        let bad = |extra: &str| {
            LabConfig::from_file(file(&format!("{extra}\n{TWO}")))
                .unwrap_err()
                .to_string()
        };
        assert!(bad("[switch]\necn_kb = 30\npfc = true").contains("ecn_kb, pfc"));
        assert!(bad("hosts = 3").contains("hosts"));

        for w in [
            "kind = \"allreduce\"",
            "kind = \"alltoall\"",
            "probe = true",
        ] {
            let c = LabConfig::from_file(file(&format!("[workload]\n{w}\n{TWO}")));
            assert_eq!(c.map(|c| c.machines.len()).ok(), Some(2), "{w}");
        }
        assert!(bad("switches = 2").contains("nor a trunk"));
        assert!(bad("[trunk]\nrate = \"1gbit\"").contains("nor a trunk"));
        let one = "[[machine]]\nlauncher = \"ssh n\"\niface = \"e\"\nip = \"10.0.0.1\"\n";
        let err = |t: &str| LabConfig::from_file(file(t)).unwrap_err().to_string();
        assert!(err(one).contains("1 machines"));
        assert!(err(&format!("{one}{one}")).contains("share a name or an ip"));
        assert!(
            err(&format!("{one}{}", one.replace("10.0.0.1", "10.0.0.x")))
                .contains("not an IPv4 address")
        );
        assert!(err(&format!("{one}{}", one.replace("ssh n", " "))).contains("launcher"));
        assert!(
            err(&format!("{one}{}", one.replace("\"e\"", "\"a/b\""))).contains("interface name")
        );
        assert!(toml::from_str::<LabFile>("[[machine]]\nhost = \"x\"\n").is_err());
        // flags over a file of machines: a switch flag is refused too
        let flags = LabFile {
            switch: SwitchFile {
                rate: Some("1gbit".into()),
                ..SwitchFile::default()
            },
            ..LabFile::default()
        };
        let e = LabConfig::from_file(file(TWO).overridden_by(flags)).unwrap_err();
        assert!(e.to_string().contains("rate"), "{e}");
    }
}
