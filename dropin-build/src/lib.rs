//! Links a drop-in C library as rdma-core links its own: a SONAME and named
//! symbol version nodes, plus a folder holding only the drop-in.
//!
//! rustc's own version script for a cdylib is anonymous (it lists every
//! exported name), so it cannot name versions. A second script given here
//! declares the nodes; which symbol lives in which node is said by `.symver`
//! directives in the library's source, the versioned names being aliases
//! of its internal exports.
//!
//! Cargo leaves the library in `target/<profile>/deps/` for both `cargo
//! build` and `cargo test` (only `cargo build` copies it up to
//! `target/<profile>/`), next to every other library it built. The link
//! `target/<profile>/<folder>/<soname>` → `../deps/<file>` lets
//! `LD_LIBRARY_PATH` name a folder holding only the drop-in.

use std::path::{Path, PathBuf};

/// A drop-in library: what its build script tells the linker.
pub struct Dropin<'a> {
    /// The file cargo writes, e.g. `libibverbs.so`.
    pub file: &'a str,
    /// Its SONAME, e.g. `libibverbs.so.1`.
    pub soname: &'a str,
    /// The folder under `target/<profile>/` that holds only this library.
    pub folder: &'a str,
    /// Version nodes in order, each with its parent (`None`: a root);
    /// none for a library of unversioned names (no version script).
    pub nodes: &'a [(&'a str, Option<&'a str>)],
}

/// The text of a linker version script declaring `nodes`, each empty (the
/// `.symver` directives fill them).
pub fn version_script(nodes: &[(&str, Option<&str>)]) -> String {
    let mut script = String::new();
    for (node, parent) in nodes {
        match parent {
            Some(p) => script.push_str(&format!("{node} {{ }} {p};\n")),
            None => script.push_str(&format!("{node} {{ }};\n")),
        }
    }
    script
}

impl Dropin<'_> {
    /// Everything a build script does for the drop-in: writes the version
    /// script (if there are nodes) into `OUT_DIR`, passes it and the SONAME to the cdylib link,
    /// and makes the drop-in folder's link.
    pub fn link(&self) {
        let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        if !self.nodes.is_empty() {
            let map = out.join(format!("{}.map", self.soname));
            std::fs::write(&map, version_script(self.nodes)).expect("write the version script");
            println!(
                "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
                map.display()
            );
        }
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{}", self.soname);
        println!("cargo:rerun-if-changed=build.rs");
        // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out
        if let Some(profile_dir) = out.ancestors().nth(3) {
            self.make_folder(profile_dir);
        }
    }

    /// `profile_dir/<folder>/<soname>` → `../deps/<file>`, replaced when it
    /// points elsewhere. Best effort: a build without the link still builds
    /// the library, and the tests that need the folder say it is missing.
    fn make_folder(&self, profile_dir: &Path) {
        let dir = profile_dir.join(self.folder);
        let _ = std::fs::create_dir_all(&dir);
        let link = dir.join(self.soname);
        let target = PathBuf::from("../deps").join(self.file);
        if std::fs::read_link(&link).ok() != Some(target.clone()) {
            let _ = std::fs::remove_file(&link);
            let _ = std::os::unix::fs::symlink(&target, &link);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_declares_each_node_with_its_parent() {
        let s = version_script(&[("A_1.0", None), ("A_1.1", Some("A_1.0")), ("P_1", None)]);
        assert_eq!(s, "A_1.0 { };\nA_1.1 { } A_1.0;\nP_1 { };\n");
    }

    #[test]
    fn the_folder_link_points_at_the_deps_copy_and_is_mended() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = tmp.path();
        let d = Dropin {
            file: "libx.so",
            soname: "libx.so.1",
            folder: "x",
            nodes: &[],
        };
        let link = tmp.join("x/libx.so.1");
        std::fs::create_dir_all(tmp.join("x")).unwrap();
        std::os::unix::fs::symlink("elsewhere", &link).unwrap();
        d.make_folder(tmp);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../deps/libx.so")
        );
    }
}
