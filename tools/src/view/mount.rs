//! The namespaces and mounts of the view: a mount namespace of the
//! program's own (in a user namespace of its own without CAP_SYS_ADMIN),
//! a tmpfs over a folder that holds every entry the folder had (bind-mounted back
//! from the covered folder, reached through a descriptor opened before)
//! but those the view replaces, then the view's entries.

use super::sysfs::Node;
use super::ViewError;
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

fn cstr(p: &Path) -> Result<CString, ViewError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| ViewError::Nul(p.to_path_buf()))
}

fn last_os(call: &'static str, path: &Path) -> ViewError {
    ViewError::Mount {
        call,
        path: path.to_path_buf(),
        source: std::io::Error::last_os_error(),
    }
}

/// mount(2): `src` onto `dst`, of file system type `fstype` with
/// options `data` (each left out when None).
fn mount(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), ViewError> {
    let src = src.map(cstr).transpose()?;
    let dst_c = cstr(dst)?;
    let p = |c: Option<&CStr>| c.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: NUL-terminated strings (or NULL) alive for the call; mount
    // changes only this process's mount namespace.
    let rc = unsafe {
        libc::mount(
            p(src.as_deref()),
            dst_c.as_ptr(),
            p(fstype),
            flags,
            p(data) as *const libc::c_void,
        )
    };
    if rc != 0 {
        return Err(last_os("mount", dst));
    }
    Ok(())
}

fn write_proc(file: &str, text: &str) -> Result<(), ViewError> {
    std::fs::write(file, text).map_err(|source| ViewError::IdMap {
        file: file.into(),
        source,
    })
}

fn unshare_flags(flags: libc::c_int) -> std::io::Result<()> {
    // SAFETY: unshare takes no memory of ours.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Moves this process into a mount namespace of its own, whose mounts
/// propagate nowhere: root's own (CAP_SYS_ADMIN), else one in a user
/// namespace of its own in which the process keeps its user and group ids
/// (for a user, or a root without the capability). Must run while the
/// process has one thread.
pub fn unshare() -> Result<(), ViewError> {
    // SAFETY: get*id have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let plain = uid == 0 && unshare_flags(libc::CLONE_NEWNS).is_ok();
    if !plain {
        unshare_flags(libc::CLONE_NEWUSER | libc::CLONE_NEWNS).map_err(ViewError::Unshare)?;
        // an unprivileged map of one id each (setgroups off first, as
        // user_namespaces(7) requires for the gid map)
        write_proc("/proc/self/setgroups", "deny")?;
        write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
        write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1"))?;
    }
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
}

/// An entry of the covered folder and what it is.
enum Entry {
    Dir,
    Link(PathBuf),
    /// A file, device node, socket or FIFO (bound onto an empty file).
    Other,
}

fn entries(dir: &Path, skip: &dyn Fn(&str) -> bool) -> Result<Vec<(PathBuf, Entry)>, ViewError> {
    let io = |source| ViewError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        let e = e.map_err(io)?;
        let name = PathBuf::from(e.file_name());
        if skip(&name.to_string_lossy()) {
            continue;
        }
        let t = e.file_type().map_err(io)?;
        let entry = if t.is_symlink() {
            Entry::Link(std::fs::read_link(e.path()).map_err(io)?)
        } else if t.is_dir() {
            Entry::Dir
        } else if t.is_file()
            || t.is_char_device()
            || t.is_block_device()
            || t.is_socket()
            || t.is_fifo()
        {
            Entry::Other
        } else {
            continue;
        };
        v.push((name, entry));
    }
    Ok(v)
}

fn make(path: &Path, node: &Node) -> Result<(), ViewError> {
    let io = |source| ViewError::Write {
        path: path.to_path_buf(),
        source,
    };
    match node {
        Node::Dir => std::fs::DirBuilder::new()
            .mode(0o755)
            .create(path)
            .map_err(io),
        Node::File(text) => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .map_err(io),
        Node::Link(to) => std::os::unix::fs::symlink(to, path).map_err(io),
    }
}

/// Covers `dir` with a tmpfs holding what `dir` held but the entries
/// `skip` names (each bind-mounted back, a symbolic link made again),
/// then `tree`'s entries, and `binds` (a file there with `source` mounted
/// onto it); the tmpfs is then made read-only.
pub fn cover(
    dir: &Path,
    skip: &dyn Fn(&str) -> bool,
    tree: &[(PathBuf, Node)],
    binds: &[(PathBuf, PathBuf)],
) -> Result<(), ViewError> {
    let old = entries(dir, skip)?;
    // the covered folder, reachable through /proc/self/fd once covered
    let fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|source| ViewError::Read {
            path: dir.to_path_buf(),
            source,
        })?
        .into();
    let covered = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    mount(None, dir, Some(c"tmpfs"), flags, Some(c"mode=755"))?;
    for (name, e) in &old {
        let at = dir.join(name);
        match e {
            Entry::Link(to) => make(&at, &Node::Link(to.clone()))?,
            Entry::Dir | Entry::Other => {
                let node = match e {
                    Entry::Dir => Node::Dir,
                    _ => Node::File(String::new()),
                };
                make(&at, &node)?;
                let src = covered.join(name);
                mount(Some(&src), &at, None, libc::MS_BIND | libc::MS_REC, None)?;
            }
        }
    }
    for (rel, node) in tree {
        make(&dir.join(rel), node)?;
    }
    for (rel, src) in binds {
        let at = dir.join(rel);
        make(&at, &Node::File(String::new()))?;
        mount(Some(src), &at, None, libc::MS_BIND, None)?;
    }
    drop(fd);
    mount(
        None,
        dir,
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
        None,
    )
}
