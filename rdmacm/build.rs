//! Links librdmacm.so as rdma-core's librdmacm.so.1 is linked: SONAME
//! `librdmacm.so.1` and the version nodes RDMACM_1.0 … RDMACM_1.3 (each
//! the child of the one before, as in rdma-core 44). Which symbol lives in
//! which node is said by `.symver` directives in `src/symbols.rs`.
//!
//! It also makes `target/<profile>/softrnic-rdmacm/librdmacm.so.1`, a
//! link to `../deps/librdmacm.so`, so that `LD_LIBRARY_PATH` can name a
//! folder holding only this drop-in.

use std::path::PathBuf;

const NODES: &[(&str, Option<&str>)] = &[
    ("RDMACM_1.0", None),
    ("RDMACM_1.1", Some("RDMACM_1.0")),
    ("RDMACM_1.2", Some("RDMACM_1.1")),
    ("RDMACM_1.3", Some("RDMACM_1.2")),
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
    let map = out.join("librdmacm.map");
    std::fs::write(&map, script).expect("write the version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rerun-if-changed=build.rs");

    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out
    if let Some(profile_dir) = out.ancestors().nth(3) {
        let dir = profile_dir.join("softrnic-rdmacm");
        let _ = std::fs::create_dir_all(&dir);
        let link = dir.join("librdmacm.so.1");
        if std::fs::read_link(&link).ok() != Some(PathBuf::from("../deps/librdmacm.so")) {
            let _ = std::fs::remove_file(&link);
            let _ = std::os::unix::fs::symlink("../deps/librdmacm.so", &link);
        }
    }
}
