//! A host as the perftest programs the lab starts on it need it: its
//! name (its rnicd device's), where its programs run (a namespace here,
//! or a machine through its launcher, each program in a session recorded
//! in its scratch folder there, as [`super::remote`] starts them), its
//! `rnic`, its rnicd's socket folder and its address. The latency
//! probe's rounds ([`super::probe`]) and a trace's flows
//! ([`super::replay`]) start their servers and clients through it, on
//! the lab's own fabric and across machines alike.

use super::host::Daemon;
use super::incast::{perftest_argv, spawn};
use super::machines::Machine;
use super::remote::{self, Station};
use super::sys::{self, Proc};
use super::LabError;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Where a host's programs run.
#[derive(Clone)]
enum Place {
    /// A namespace here.
    Ns(String),
    /// A machine, through its launcher.
    Machine { machine: Machine, scratch: String },
}

/// A host as its perftest programs need it.
#[derive(Clone)]
pub struct Endpoint {
    pub name: String,
    place: Place,
    /// `rnic` there.
    rnic: PathBuf,
    sock_dir: PathBuf,
    pub addr: String,
}

impl Endpoint {
    /// Host `d` of the lab's own fabric, `rnic` this one.
    pub fn of_daemon(rnic: &Path, d: &Daemon) -> Endpoint {
        Endpoint {
            name: d.net.name.clone(),
            place: Place::Ns(d.net.ns.clone()),
            rnic: rnic.to_path_buf(),
            sock_dir: d.sock_dir.clone(),
            addr: d.net.addr.to_string(),
        }
    }

    /// Machine `s` of a lab across machines.
    pub fn of_station(s: &Station) -> Endpoint {
        Endpoint {
            name: s.machine.name.clone(),
            place: Place::Machine {
                machine: s.machine.clone(),
                scratch: s.scratch.clone(),
            },
            rnic: PathBuf::from(&s.rnic),
            sock_dir: PathBuf::from(&s.sock_dir),
            addr: s.machine.addr.to_string(),
        }
    }

    /// perftest program `prog` with `args` on TCP `port` through `rnic
    /// exec` on this host's device; to `peer` for a client.
    pub fn perftest(
        &self,
        prog: &str,
        args: &[String],
        port: u16,
        peer: Option<&str>,
    ) -> Vec<String> {
        let dev = (self.sock_dir.as_path(), self.name.as_str());
        perftest_argv(&self.rnic, dev, prog, args, port, peer)
    }

    /// Starts `argv` here (recorded as `tag` on a machine), its output
    /// into `log`.
    pub fn spawn(
        &self,
        tag: &str,
        argv: &[String],
        log: &Path,
        what: String,
    ) -> Result<Proc, LabError> {
        match &self.place {
            Place::Ns(ns) => spawn(ns, argv, log, what),
            Place::Machine { machine, scratch } => {
                let argv = machine.session(scratch, tag, argv);
                let args: Vec<&OsStr> = argv.iter().map(OsStr::new).collect();
                Proc::spawn_via(&args, log, what)
            }
        }
    }

    /// Whether `p`, started here, listens on TCP `port`.
    pub fn listening(&self, p: &Proc, port: u16) -> Result<bool, LabError> {
        match &self.place {
            Place::Ns(_) => Ok(sys::listening(p.child.id(), port)),
            Place::Machine { machine, .. } => remote::listens(machine, port),
        }
    }
}
