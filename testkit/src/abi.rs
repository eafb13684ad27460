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
    let cc = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
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

/// `target/<profile>` of the running test binary (which cargo puts in
/// `target/<profile>/deps`), where the crates' libraries and programs are.
pub fn profile_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>")
        .to_path_buf()
}
