//! C ABI layouts against the system's headers: a C program compiled with
//! the installed header prints `offsetof` / `sizeof` of every listed entry,
//! and each must equal the value the Rust side lists.

use std::path::Path;
use std::process::Command;

/// Checks `layout` — `("struct.field", offset)` and `("struct", size)` —
/// against `<include>` (the file `header`, from Debian package `package`).
/// A missing header goes through [`crate::skip_or_fail`] for `test`.
pub fn check_layout(
    test: &str,
    include: &str,
    header: &str,
    package: &str,
    layout: &[(&str, usize)],
) {
    if !Path::new(header).exists() {
        return crate::skip_or_fail(
            test,
            &format!("{header} not found: install {package} to check the ABI layouts"),
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <{include}>\nint main(void) {{\n"
    );
    for (name, _) in layout {
        let expr = match name.split_once('.') {
            Some((s, f)) => format!("offsetof(struct {s}, {f})"),
            None => format!("sizeof(struct {name})"),
        };
        c.push_str(&format!(
            "  printf(\"%s %zu\\n\", \"{name}\", (size_t)({expr}));\n"
        ));
    }
    c.push_str("  return 0;\n}\n");
    let src = dir.path().join("layout.c");
    let bin = dir.path().join("layout");
    std::fs::write(&src, c).expect("write");
    build_c(&src, &bin, &[]);
    let out = Command::new(&bin).output().expect("run the layout program");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (line, (name, ours)) in text.lines().zip(layout) {
        let (n, v) = line.split_once(' ').expect("name value");
        assert_eq!(n, *name);
        let theirs: usize = v.parse().expect("a number");
        if theirs != *ours {
            wrong.push(format!("{name}: header {theirs}, ours {ours}"));
        }
        seen += 1;
    }
    assert_eq!(seen, layout.len(), "the program printed every entry");
    assert!(wrong.is_empty(), "layouts differ:\n{}", wrong.join("\n"));
}

/// (version as `objdump -T` prints it, name) of the symbols `lib` defines
/// whose version contains `tag` (`"IBVERBS"`, `"RDMACM"`): what it exports
/// under rdma-core's version nodes.
pub fn exports(lib: &Path, tag: &str) -> std::collections::BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump (binutils)");
    assert!(out.status.success(), "objdump -T {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() < 4 || w.contains(&"*UND*") || w.contains(&"*ABS*") {
                return None;
            }
            let (ver, name) = (w[w.len() - 2], w[w.len() - 1]);
            ver.contains(tag)
                .then(|| (ver.to_string(), name.to_string()))
        })
        .collect()
}

/// Builds the C program `src` into `bin`, linked to `libs` (each a
/// library file's path, or a linker argument such as `-l:libucp.so.0`);
/// a failure fails the test with cc's messages.
pub fn build_c(src: &Path, bin: &Path, libs: &[std::path::PathBuf]) {
    let cc = Command::new("cc")
        .arg(src)
        .arg("-o")
        .arg(bin)
        .args(libs)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
}

/// `target/<profile>` of the running test binary (which cargo puts in
/// `target/<profile>/deps`), where the crates' libraries and programs are.
pub fn profile_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}

/// A drop-in library built by this workspace, as its tests see it.
pub struct Dropin<'a> {
    /// Its folder under `target/<profile>/` (`softrnic-ibverbs`).
    pub folder: &'a str,
    /// Its SONAME, the name of the link in that folder (`libibverbs.so.1`).
    pub soname: &'a str,
    /// The library cargo built, in `target/<profile>/deps/` (`libibverbs.so`).
    pub file: &'a str,
    /// The word in its version nodes' names (`IBVERBS`).
    pub tag: &'a str,
}

impl Dropin<'_> {
    /// The folder holding only the drop-in, for `LD_LIBRARY_PATH`.
    pub fn dir(&self) -> std::path::PathBuf {
        profile_dir().join(self.folder)
    }

    /// Checks that the drop-in exports what `system_lib` exports (every name
    /// with the same version and default-ness; at least `min` of them, so a
    /// broken `objdump` cannot pass), has the SONAME, and that its folder's
    /// link is the library cargo built. Fails under CI, or skips loudly,
    /// when `system_lib` is not installed (`package` says what installs it).
    pub fn check_exports(&self, system_lib: &str, min: usize, package: &str) {
        let ours = self.dir().join(self.soname);
        assert!(ours.exists(), "{} not built", ours.display());
        if !Path::new(system_lib).exists() {
            return crate::skip_or_fail(
                &format!("the {} export test", self.soname),
                &format!(
                    "{system_lib} not found: install {package} (rdma-core) to compare exports"
                ),
            );
        }
        let theirs = exports(Path::new(system_lib), self.tag);
        let mine = exports(&ours, self.tag);
        assert!(
            theirs.len() >= min,
            "the system library exports {}",
            theirs.len()
        );
        let lacking: Vec<_> = theirs.difference(&mine).collect();
        let extra: Vec<_> = mine.difference(&theirs).collect();
        assert!(lacking.is_empty(), "not exported here: {lacking:?}");
        assert!(extra.is_empty(), "exported here only: {extra:?}");
        let d = Command::new("readelf")
            .arg("-d")
            .arg(&ours)
            .output()
            .expect("readelf");
        let want = format!("Library soname: [{}]", self.soname);
        assert!(String::from_utf8_lossy(&d.stdout).contains(&want));
        assert_eq!(
            std::fs::canonicalize(&ours).expect("the drop-in's link"),
            std::fs::canonicalize(profile_dir().join("deps").join(self.file)).expect("the library")
        );
    }

    /// Runs each installed `(program, args)` with only the drop-in's folder
    /// on `LD_LIBRARY_PATH`, every symbol bound at start-up
    /// (`LD_BIND_NOW`) and no daemon to talk to: each must load (no
    /// symbol or version lookup error), exit rather than die of a signal,
    /// and have loaded this drop-in. Fails under CI, or skips loudly, when a
    /// program is missing (`packages` says what installs them).
    pub fn check_bind_now(&self, programs: &[(&str, &[&str])], packages: &str) {
        let dir = self.dir();
        let empty = tempfile::tempdir().expect("tempdir");
        for (prog, args) in programs {
            let Ok(out) = Command::new(prog)
                .args(*args)
                .env("LD_LIBRARY_PATH", &dir)
                .env("LD_BIND_NOW", "1")
                .env("LD_DEBUG", "libs")
                .env("SOFTRNIC_SOCK_DIR", empty.path())
                .output()
            else {
                return crate::skip_or_fail(
                    &format!("the {} BIND_NOW test", self.soname),
                    &format!("{prog} not installed (Debian packages {packages})"),
                );
            };
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !err.contains("symbol lookup error")
                    && !err.contains(&format!("version `{}", self.tag)),
                "{prog}: {err}"
            );
            // (a usage message may exit non-zero; a signal is a crash)
            assert!(out.status.code().is_some(), "{prog} died: {err}");
            assert!(
                err.contains(&format!("{}/{}", dir.display(), self.soname)),
                "{prog} did not load the drop-in: {err}"
            );
        }
    }
}
