//! Links the shim with SONAME `libsoftrnic_nlshim.so` and makes
//! `target/<profile>/softrnic-nlshim/libsoftrnic_nlshim.so`, the path
//! `rnic exec` preloads (see `dropin_build`). No symbol versions: the
//! shim's exports are libc's unversioned names.

fn main() {
    dropin_build::Dropin {
        file: "libsoftrnic_nlshim.so",
        soname: "libsoftrnic_nlshim.so",
        folder: "softrnic-nlshim",
        nodes: &[],
    }
    .link();
}
