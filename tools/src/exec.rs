//! `rnic exec`: runs an unmodified program on softrnic by putting the
//! libibverbs drop-in, and the librdmacm one beside it when built, first
//! on its library path, and (unless asked not to) showing it the devices
//! in `/sys/class/infiniband` and `/dev/infiniband` ([`crate::view`]).

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

/// Where `librdmacm.so.1` of the drop-in is, when it is there:
/// `$SOFTRNIC_RDMACM_DIR`, else `softrnic-rdmacm/` beside the libibverbs
/// drop-in's folder.
pub fn rdmacm_dir(ibverbs: &Path) -> Option<PathBuf> {
    let dir = match std::env::var_os("SOFTRNIC_RDMACM_DIR") {
        Some(d) => PathBuf::from(d),
        None => ibverbs.parent()?.join("softrnic-rdmacm"),
    };
    dir.join("librdmacm.so.1").exists().then_some(dir)
}

/// Replaces this process by `argv` with the drop-ins on its library path
/// (and SOFTRNIC_SOCK_DIR = `sock_dir` if given), in the view of the
/// devices when `view`. Returns only on error.
pub fn run(sock_dir: Option<&Path>, view: bool, argv: &[OsString]) -> Result<(), CliError> {
    let (prog, args) = argv.split_first().ok_or_else(|| {
        CliError::usage("rnic exec: no program given (rnic exec -- PROGRAM ARGS...)")
    })?;
    let dir = library_dir()?;
    let mut path = library_path(&dir, std::env::var_os("LD_LIBRARY_PATH"));
    if let Some(cm) = rdmacm_dir(&dir) {
        path = library_path(&cm, Some(path));
    }
    if view {
        let socks = sock_dir.map_or_else(softrnic::client::sock_dir, Path::to_path_buf);
        match crate::view::enter(&crate::view::devices(&socks)) {
            Ok(()) => {}
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
    let mut c = std::process::Command::new(prog);
    c.args(args).env("LD_LIBRARY_PATH", path);
    if let Some(s) = sock_dir {
        c.env("SOFTRNIC_SOCK_DIR", s);
    }
    let e = c.exec();
    Err(CliError::new(format!("{}: {e}", Path::new(prog).display())))
}
