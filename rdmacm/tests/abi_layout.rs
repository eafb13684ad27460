//! The structures of `src/abi/` against rdma-core's own header: a C
//! program compiled with the installed `<rdma/rdma_cma.h>` (librdmacm-dev)
//! prints `offsetof` / `sizeof` of everything listed in
//! `rdmacm::abi::LAYOUT`; every value must match.

use std::process::Command;

const HEADER: &str = "/usr/include/rdma/rdma_cma.h";

#[test]
fn every_listed_offset_and_size_matches_the_system_header() {
    if !std::path::Path::new(HEADER).exists() {
        return testkit::skip_or_fail(
            "the layout test",
            &format!("{HEADER} not found: install librdmacm-dev to check the ABI layouts"),
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    for (name, _) in rdmacm::abi::LAYOUT {
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
    for (line, (name, ours)) in text.lines().zip(rdmacm::abi::LAYOUT) {
        let (n, v) = line.split_once(' ').expect("name value");
        assert_eq!(n, *name);
        let theirs: usize = v.parse().expect("a number");
        if theirs != *ours {
            wrong.push(format!("{name}: header {theirs}, ours {ours}"));
        }
        seen += 1;
    }
    assert_eq!(
        seen,
        rdmacm::abi::LAYOUT.len(),
        "the program printed every entry"
    );
    assert!(wrong.is_empty(), "layouts differ:\n{}", wrong.join("\n"));
}
