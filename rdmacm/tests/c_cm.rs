//! The drop-in from C and from Debian's own tools, on an `rnicd
//! --mem-pair` through the libibverbs drop-in: tests/c/cm_check.c built
//! against rdma-core's headers (devices, event channel descriptors, IDs,
//! address info and the errors of what is not supported), and `rping`
//! ending with an error, never a crash, where the CM refuses it (no CM
//! service is wired yet).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const STUCK: Duration = Duration::from_secs(60);

fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// What the test needs built or installed, or why it cannot run.
fn prerequisites() -> Result<(), String> {
    for (p, why) in [
        ("/usr/include/rdma/rdma_cma.h", "librdmacm-dev"),
        ("/usr/bin/rping", "rdmacm-utils"),
    ] {
        if !Path::new(p).exists() {
            return Err(format!("{p} not installed ({why})"));
        }
    }
    for p in ["rnicd", "softrnic-ibverbs/libibverbs.so.1"] {
        if !profile_dir().join(p).exists() {
            return Err(format!(
                "{p} not built (cargo build --release -p softrnic -p softrnic-ibverbs)"
            ));
        }
    }
    Ok(())
}

/// `rnicd --mem-pair --name t` in its own socket folder; killed on drop.
struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let child = Command::new(profile_dir().join("rnicd"))
            .args(["--mem-pair", "--name", "t", "--one-thread", "--sock-dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start rnicd");
        let mut d = Daemon { child, dir };
        testkit::wait_for(STUCK, "rnicd's sockets t0 and t1", || {
            let up = ["t0.sock", "t1.sock"].map(|s| d.dir.path().join(s).exists());
            match d.child.try_wait() {
                Ok(Some(st)) => panic!("rnicd exited ({st})"),
                _ if up == [true, true] => Ok(()),
                _ => Err(format!("t0.sock, t1.sock exist: {up:?}")),
            }
        });
        d
    }

    /// `prog` with both drop-ins first on the library path.
    fn run(&self, prog: &Path, args: &[&str]) -> Output {
        let path = format!(
            "{}:{}",
            profile_dir().join("softrnic-rdmacm").display(),
            profile_dir().join("softrnic-ibverbs").display()
        );
        Command::new(prog)
            .args(args)
            .env("LD_LIBRARY_PATH", path)
            .env("LD_BIND_NOW", "1")
            .env("SOFTRNIC_SOCK_DIR", self.dir.path())
            .output()
            .expect("run")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_c_program_uses_the_cm_library_on_rnicd_devices() {
    if let Err(why) = prerequisites() {
        return testkit::skip_or_fail("the C CM test", &why);
    }
    let d = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("cm_check");
    let cc = Command::new("cc")
        .arg(format!("{}/tests/c/cm_check.c", env!("CARGO_MANIFEST_DIR")))
        .arg("-o")
        .arg(&bin)
        .arg(profile_dir().join("softrnic-rdmacm/librdmacm.so.1"))
        .arg(profile_dir().join("softrnic-ibverbs/libibverbs.so.1"))
        .output()
        .expect("cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = d.run(&bin, &[]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("0 failures"),
        "{text}"
    );
    assert!(text.contains("device t0\ndevice t1\n"), "{text}");
    // refusals say why, one line each
    assert!(
        text.contains("softrnic-rdmacm: rsocket: rsockets are not supported"),
        "{text}"
    );
}

#[test]
fn rping_ends_with_an_error_where_the_cm_refuses_it() {
    if let Err(why) = prerequisites() {
        return testkit::skip_or_fail("the rping test", &why);
    }
    let d = Daemon::start();
    let out = d.run(
        Path::new("/usr/bin/rping"),
        &["-s", "-a", "192.0.2.1", "-C", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("symbol lookup error"), "{err}");
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "rping: {:?} {err}",
        out.status
    );
    // 192.0.2.1 is t0's address (its GID through libibverbs), whose CM
    // answers ENODEV in this build
    assert!(err.contains("no RDMA CM service for device t0"), "{err}");
}
