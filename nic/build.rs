//! Compiles the XDP program (bpf/xdp_roce.c) with `clang -target bpf` into
//! `$OUT_DIR/xdp_roce.o`, which the AF_XDP port embeds. Without clang (or
//! the kernel's UAPI headers) the build still succeeds: the object is left
//! empty, the reason goes into `SOFTRNIC_XDP_BUILD`, and the AF_XDP port
//! reports itself unavailable at run time (ports fall back to AF_PACKET).
//!
//! `CLANG` names another compiler; `SOFTRNIC_NO_XDP=1` skips the step.

use std::path::{Path, PathBuf};
use std::process::Command;

const SRC: &str = "bpf/xdp_roce.c";

fn main() {
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=SOFTRNIC_NO_XDP");
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("xdp_roce.o");
    let status = match build(&out) {
        Ok(()) => "ok".to_string(),
        Err(why) => {
            println!("cargo:warning=AF_XDP disabled: {why}; ports will fall back to AF_PACKET");
            std::fs::write(&out, b"").expect("write an empty object into OUT_DIR");
            why.to_string()
        }
    };
    println!("cargo:rustc-env=SOFTRNIC_XDP_BUILD={status}");
}

/// Why the XDP program was not built; its text goes into
/// `SOFTRNIC_XDP_BUILD`.
#[derive(Debug, thiserror::Error)]
enum XdpBuildError {
    #[error("SOFTRNIC_NO_XDP is set")]
    Disabled,
    #[error("not a Linux target")]
    NotLinux,
    #[error("`{clang}` could not run ({source}): install clang (Debian: clang) and rebuild")]
    NoClang {
        clang: String,
        source: std::io::Error,
    },
    #[error("`{clang} -target bpf` failed on {SRC}: {first} (Debian: clang, linux-libc-dev; then rebuild)")]
    Compile { clang: String, first: String },
}

fn build(out: &Path) -> Result<(), XdpBuildError> {
    if std::env::var_os("SOFTRNIC_NO_XDP").is_some_and(|v| v != "0") {
        return Err(XdpBuildError::Disabled);
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return Err(XdpBuildError::NotLinux);
    }
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-Wall", "-target", "bpf", "-c", SRC, "-o"])
        .arg(out);
    // <linux/types.h> includes <asm/types.h>, which Debian keeps in the
    // multiarch directory the bpf target does not search by itself
    for dir in multiarch_includes() {
        cmd.arg("-I").arg(dir);
    }
    let res = cmd.output().map_err(|source| XdpBuildError::NoClang {
        clang: clang.clone(),
        source,
    })?;
    if !res.status.success() {
        let err = String::from_utf8_lossy(&res.stderr);
        let first = err
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("no message")
            .trim()
            .to_string();
        return Err(XdpBuildError::Compile { clang, first });
    }
    Ok(())
}

fn multiarch_includes() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(o) = Command::new("cc").arg("-print-multiarch").output() {
        let t = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if !t.is_empty() {
            dirs.push(Path::new("/usr/include").join(t));
        }
    }
    if let Ok(arch) = std::env::var("CARGO_CFG_TARGET_ARCH") {
        dirs.push(Path::new("/usr/include").join(format!("{arch}-linux-gnu")));
    }
    dirs.retain(|d| d.is_dir());
    dirs.dedup();
    dirs
}
