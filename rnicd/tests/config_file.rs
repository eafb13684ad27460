//! `rnicd --config FILE`: keys are the flags' names with `_` or `-`
//! between words: a pair started from a file with `line_rate = 100m` and
//! `dcqcn-rp = off` is READY and reports the 100 Mbit/s line rate to its
//! clients (what the reaction point off does is checked end to end by
//! tools/tests/lab.rs); a value the flag refuses ends rnicd with status 2
//! and a message naming the flag.

mod common;

use common::{tempdir, Daemon};
use std::process::Command;

#[test]
fn a_config_file_sets_the_line_rate_and_the_reaction_point() {
    let dir = tempdir("config-file");
    let file = dir.join("rnicd.conf");
    std::fs::write(
        &file,
        "# a pair at 100 Mbit/s, no DCQCN reaction point\nmem_pair = true\nname = cf\nline_rate = 100m\ndcqcn-rp = off\n",
    )
    .unwrap();
    let _d = Daemon::start(None, &["--config", file.to_str().unwrap()], &dir);
    let ctx = softrnic::Context::open(dir.join("cf0.sock")).expect("connect to cf0");
    let cc = ctx.cc_states().expect("cc states");
    assert_eq!(cc.line_bps, 100_000_000);

    std::fs::write(&file, "mem_pair = true\ndcqcn_rp = maybe\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rnicd"))
        .arg("--config")
        .arg(&file)
        .arg("--sock-dir")
        .arg(&dir)
        .output()
        .expect("run rnicd");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--dcqcn-rp"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
