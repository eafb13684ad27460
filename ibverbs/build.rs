//! Links libibverbs.so as rdma-core's libibverbs.so.1 is linked: SONAME
//! `libibverbs.so.1` and the version nodes IBVERBS_1.0 … IBVERBS_1.14 and
//! IBVERBS_PRIVATE_34 (parents as in rdma-core 44). Which symbol lives in
//! which node is said by `.symver` directives in `src/symbols.rs`; rustc's
//! own version script (anonymous, listing every exported name) cannot name
//! versions, so the versioned names are aliases of internal exports.
//!
//! It also makes `target/<profile>/softrnic-ibverbs/libibverbs.so.1`, a
//! link to `../deps/libibverbs.so` (where both `cargo build` and `cargo
//! test` leave the library; only `cargo build` copies it up to
//! target/<profile>/), so that `LD_LIBRARY_PATH` can name a folder holding
//! only the drop-in.

use std::path::PathBuf;

const NODES: &[(&str, Option<&str>)] = &[
    ("IBVERBS_1.0", None),
    ("IBVERBS_1.1", Some("IBVERBS_1.0")),
    ("IBVERBS_1.5", Some("IBVERBS_1.1")),
    ("IBVERBS_1.6", Some("IBVERBS_1.5")),
    ("IBVERBS_1.7", Some("IBVERBS_1.6")),
    ("IBVERBS_1.8", Some("IBVERBS_1.7")),
    ("IBVERBS_1.9", Some("IBVERBS_1.8")),
    ("IBVERBS_1.10", Some("IBVERBS_1.9")),
    ("IBVERBS_1.11", Some("IBVERBS_1.10")),
    ("IBVERBS_1.12", Some("IBVERBS_1.11")),
    ("IBVERBS_1.13", Some("IBVERBS_1.12")),
    ("IBVERBS_1.14", Some("IBVERBS_1.13")),
    ("IBVERBS_PRIVATE_34", None),
];

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let mut script = String::new();
    for (node, parent) in NODES {
        match parent {
            Some(p) => script.push_str(&format!("{node} {{ }} {p};\n")),
            None => script.push_str(&format!("{node} {{ }};\n")),
        }
    }
    let map = out.join("libibverbs.map");
    std::fs::write(&map, script).expect("write the version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rerun-if-changed=build.rs");

    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let dir = profile_dir.join("softrnic-ibverbs");
        let _ = std::fs::create_dir_all(&dir);
        let link = dir.join("libibverbs.so.1");
        if std::fs::read_link(&link).ok() != Some(PathBuf::from("../deps/libibverbs.so")) {
            let _ = std::fs::remove_file(&link);
            let _ = std::os::unix::fs::symlink("../deps/libibverbs.so", &link);
        }
    }
}
