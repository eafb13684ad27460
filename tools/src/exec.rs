//! `rnic exec`: runs an unmodified program on softrnic by putting the
//! libibverbs drop-in, and the librdmacm one beside it when built, first
//! on its library path, and (unless asked not to) showing it the devices
//! in `/sys/class/infiniband` and `/dev/infiniband` ([`crate::view`]) and
//! over RDMA netlink (the preloaded netlink shim, `nlshim/`).

use crate::CliError;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Where `libibverbs.so.1` of the drop-in is: `$SOFTRNIC_IBVERBS_DIR`,
/// else `softrnic-ibverbs/` beside the running `rnic` (the workspace build
/// puts both in `target/<profile>/`).
pub fn library_dir() -> Result<PathBuf, CliError> {
    let dir = match std::env::var_os("SOFTRNIC_IBVERBS_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .map_err(|e| CliError::new(format!("where is rnic: {e}")))?
            .parent()
            .map(|p| p.join("softrnic-ibverbs"))
            .ok_or_else(|| CliError::new("rnic has no folder"))?,
    };
    if !dir.join("libibverbs.so.1").exists() {
        return Err(CliError::new(format!(
            "{}: no libibverbs.so.1 there; build the workspace (cargo build --release --workspace) or set SOFTRNIC_IBVERBS_DIR",
            dir.display()
        )));
    }
    Ok(dir)
}

/// LD_LIBRARY_PATH with `dir` first.
pub fn library_path(dir: &Path, old: Option<OsString>) -> OsString {
    let mut v = OsString::from(dir);
    if let Some(o) = old.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(o);
    }
    v
}

/// The folder `$env` names, else `folder` beside the libibverbs drop-in's
/// folder, if `file` is there.
fn beside(ibverbs: &Path, env: &str, folder: &str, file: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os(env) {
        Some(d) => PathBuf::from(d),
        None => ibverbs.parent()?.join(folder),
    };
    dir.join(file).exists().then_some(dir)
}

/// Where `librdmacm.so.1` of the drop-in is, when it is there:
/// `$SOFTRNIC_RDMACM_DIR`, else `softrnic-rdmacm/` beside the libibverbs
/// drop-in's folder.
pub fn rdmacm_dir(ibverbs: &Path) -> Option<PathBuf> {
    beside(
        ibverbs,
        "SOFTRNIC_RDMACM_DIR",
        "softrnic-rdmacm",
        "librdmacm.so.1",
    )
}

/// The netlink shim's file name.
pub const NLSHIM: &str = "libsoftrnic_nlshim.so";

/// The netlink shim (`nlshim/`), when it is there: in
/// `$SOFTRNIC_NLSHIM_DIR`, else in `softrnic-nlshim/` beside the
/// libibverbs drop-in's folder.
pub fn nlshim(ibverbs: &Path) -> Option<PathBuf> {
    beside(ibverbs, "SOFTRNIC_NLSHIM_DIR", "softrnic-nlshim", NLSHIM).map(|d| d.join(NLSHIM))
}

/// Has the program preload the netlink shim, with the view's devices as
/// its table, so that `rdma link` and `rdma dev` see them.
fn answer_netlink(c: &mut std::process::Command, ibverbs: &Path, devs: &[crate::view::Shown]) {
    let Some(shim) = nlshim(ibverbs) else {
        eprintln!(
            "rnic exec: no {NLSHIM} beside {}: rdma link and rdma dev will not see the devices \
             (build the workspace or set SOFTRNIC_NLSHIM_DIR)",
            ibverbs.display()
        );
        return;
    };
    // LD_PRELOAD's list is separated by spaces or colons
    let mut preload = OsString::from(shim);
    if let Some(o) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(o);
    }
    c.env("LD_PRELOAD", preload)
        .env(nldev::table::ENV, crate::view::netlink::table(devs));
}

/// Replaces this process by `argv` with the drop-ins on its library path
/// (and SOFTRNIC_SOCK_DIR = `sock_dir` if given), in the view of the
/// devices when `view`, where the netlink shim answers RDMA netlink for
/// them. Returns only on error.
pub fn run(sock_dir: Option<&Path>, view: bool, argv: &[OsString]) -> Result<(), CliError> {
    let (prog, args) = argv.split_first().ok_or_else(|| {
        CliError::usage("rnic exec: no program given (rnic exec -- PROGRAM ARGS...)")
    })?;
    let dir = library_dir()?;
    let mut path = library_path(&dir, std::env::var_os("LD_LIBRARY_PATH"));
    if let Some(cm) = rdmacm_dir(&dir) {
        path = library_path(&cm, Some(path));
    }
    let mut c = std::process::Command::new(prog);
    c.args(args).env("LD_LIBRARY_PATH", path);
    // without its table a shim (an outer rnic exec's) answers nothing
    c.env_remove(nldev::table::ENV);
    if view {
        // a program that hosts its device lists that one alone
        let devs = match softrnic::client::local::requested() {
            Some((ifname, name)) => crate::view::hosted(&ifname, &name)
                .map(|d| vec![d])
                .unwrap_or_else(|e| {
                    eprintln!("rnic exec: the device the program hosts: {e}; the view shows none");
                    Vec::new()
                }),
            None => crate::view::devices(
                &sock_dir.map_or_else(softrnic::client::sock_dir, Path::to_path_buf),
            ),
        };
        match crate::view::enter(&devs) {
            Ok(()) => answer_netlink(&mut c, &dir, &devs),
            Err(e @ crate::view::ViewError::Unshare(_)) => eprintln!(
                "rnic exec: no view of /sys/class/infiniband and /dev/infiniband ({e}); running without it"
            ),
            Err(e) => {
                return Err(CliError::new(format!(
                    "rnic exec: the view of the devices: {e} (--no-view runs without it)"
                )))
            }
        }
    }
    if let Some(s) = sock_dir {
        c.env("SOFTRNIC_SOCK_DIR", s);
    }
    let e = c.exec();
    Err(CliError::new(format!("{}: {e}", Path::new(prog).display())))
}
