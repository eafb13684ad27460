//! benches/compare-all/report.sh: the medians, spreads, goal ratios and
//! plots it writes from a run's raw figures.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const RAW: &str = "\
guest,rxe,write_bw,65536,1,gbps,1
guest,rxe,write_bw,65536,2,gbps,1.5
guest,rxe,write_bw,65536,3,gbps,0.5
guest,softrnic,write_bw,65536,1,gbps,9
guest,softrnic,write_bw,65536,2,gbps,1
guest,softrnic,write_bw,65536,3,gbps,3
guest,softrnic,write_bw,65536,4,gbps,2
guest,softrnic,write_bw,65536,5,gbps,7
guest,softrnic,write_bw,65536,1,cpb_proc,10
guest,softrnic,write_bw,65536,2,cpb_proc,20
guest,softrnic,write_bw,2,1,gbps,0.001
guest,rxe,write_bw,2,1,gbps,0.002
guest,rxe,write_lat,2,1,p50,10
guest,rxe,write_lat,2,2,p50,12
guest,softrnic,write_lat,2,1,p50,5
guest,softrnic,write_lat,2,2,p50,6
guest,softrnic,write_lat,2,3,p50,100
guest,softrnic,write_lat,2,4,p50,1
guest,softrnic,write_lat,8,1,p50,7
";

#[test]
fn report_writes_medians_spreads_goals_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    std::fs::create_dir_all(out.join("logs")).unwrap();
    std::fs::write(out.join("raw.csv"), RAW).unwrap();
    std::fs::write(
        out.join("machine.txt"),
        "machine: test, 2 CPUs, cpu MHz 1000\n",
    )
    .unwrap();
    std::fs::write(
        out.join("stages.txt"),
        "mem SKIPPED (--skip-mem)\nguest ran\n",
    )
    .unwrap();
    std::fs::write(
        out.join("logs/failed.txt"),
        "guest rxe write_bw 2 r2 client-status-1\n",
    )
    .unwrap();
    let doc = dir.path().join("docs/t");
    let st = Command::new("bash")
        .arg(repo().join("benches/compare-all/report.sh"))
        .arg(&out)
        .arg(&doc)
        .env("RNIC", env!("CARGO_BIN_EXE_rnic"))
        .status()
        .unwrap();
    assert!(st.success());

    let sum = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    // odd count: the middle value; even: the mean of the middle two
    for line in [
        "guest,softrnic,write_bw,65536,gbps,5,3,1,9",
        "guest,rxe,write_bw,65536,gbps,3,1,0.5,1.5",
        "guest,softrnic,write_bw,65536,cpb_proc,2,15,10,20",
        "guest,softrnic,write_lat,2,p50,4,5.5,1,100",
    ] {
        assert!(sum.lines().any(|l| l == line), "{line} not in\n{sum}");
    }

    let md = std::fs::read_to_string(dir.path().join("docs/t.md")).unwrap();
    assert!(md.contains("machine: test"), "{md}");
    assert!(md.contains("**SKIPPED (--skip-mem)"), "{md}");
    assert!(md.contains("**1 runs failed**"), "{md}");
    // 3 / 1 against >= 3x: met; the worst size (2 B: 0.5x) against >= 1x:
    // missed; latency 5.5 / 11 = 0.5x against <= 0.7x: met
    let goal = |what: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {what}")))
            .unwrap_or_else(|| panic!("no goal row {what} in\n{md}"))
            .to_string()
    };
    let g = goal("guest: ib_write_bw 64 KiB");
    assert!(g.contains("| 3.00× |") && g.ends_with("| met |"), "{g}");
    let g = goal("guest: ib_write_bw every size");
    assert!(
        g.contains("(worst: 2 B)") && g.contains("| 0.50× |") && g.contains("**missed**"),
        "{g}"
    );
    let g = goal("guest: ib_write_lat 2 B p50");
    assert!(g.contains("| 0.50× |") && g.ends_with("| met |"), "{g}");
    let g = goal("veth: ib_write_lat 64 B p50");
    assert!(g.contains("not measured"), "{g}");
    assert!(
        md.contains("| write_bw | 65536 | softrnic (rnicd + drop-in) | 3 (1–9) |"),
        "{md}"
    );
    assert!(
        md.contains("| write_lat | 2 | softrnic (rnicd + drop-in) | 5.5 (1–100) |"),
        "{md}"
    );

    let bw = std::fs::read_to_string(dir.path().join("docs/t-guest-bw.svg")).unwrap();
    assert_eq!(bw.matches("<polyline").count(), 2, "{bw}");
    let lat = std::fs::read_to_string(dir.path().join("docs/t-guest-lat.svg")).unwrap();
    assert!(
        lat.contains("data-name=\"softrnic write_lat p50\""),
        "{lat}"
    );
    assert!(!dir.path().join("docs/t-mem-bw.svg").exists());
}
