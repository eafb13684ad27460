//! `rnic lab` end to end: a 3-host incast (h1, h2 → h0) through the
//! switch namespace with ECN marking on, DCQCN on (rnicd's default). The
//! results folder has per-flow rates above zero for each flow, CE marks at
//! the switch, CNPs sent by h0 and handled by each sender, the senders'
//! DCQCN state for each of their QPs with a rate cut below the line rate
//! among it, and an index.html that headless Chromium renders with every
//! plot loaded and no console message; afterwards, and after a SIGINT mid-run, no
//! namespace, link or process of the lab is left. Without root it refuses
//! in one line. With `--pfc` and no ECN marking, the switch's PFC stage
//! pauses both senders: it counts PFC frames sent toward each, each
//! sender counts them received and a paused time, the page shows the PFC
//! plots, and every link's pcap holds those frames and decodes in tshark
//! with no malformed frame. With `--dcqcn off --probe`, the senders count
//! every CNP as ignored and none as handled, no QP's rate is ever cut, and
//! the latency probe's percentiles are in summary.json, the output and the
//! page.
//!
//! A 3-host ring allreduce over UCX on the RNICs: a positive completion
//! time for every iteration, every host's rnicd sending, UCX's endpoints
//! on each host's device, the page showing `collective.svg`; the same
//! forced onto TCP: the links carry it while the RNICs move next to
//! nothing, no RoCEv2 frame or CNP, TCP in the pcap, and the output,
//! `summary.json` and the page say the traffic went around the RNIC.
//!
//! Needs root, tc, nft, ib_write_bw (perftest), tcpdump, tshark and chromium,
//! and for the collectives Open MPI (mpirun, mpicc): a loud SKIPPED line
//! without them, a failure under CI.

mod common;

use common::lab::{an_allreduce_on_the_rnics, collective_times};
use common::{poll_within, STUCK};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The tests' incast: h1, h2 → h0 at 50 Mbit/s for 3 s.
const INCAST: [&str; 6] = ["--hosts", "3", "--rate", "50mbit", "--duration", "3"];

/// One lab at a time: each is five busy processes on a small machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn rnic() -> PathBuf {
    assert_cmd::cargo::cargo_bin("rnic")
}

/// Whether `test` can run: root and every tool the lab (and the page's
/// check) uses.
fn runs_here(test: &str, chromium: bool) -> bool {
    if !common::netns::can_run(test) {
        return false;
    }
    let tools: &[(&str, &str, &str)] = &[
        ("tc", "-V", "iproute2"),
        ("nft", "--version", "nftables"),
        ("ib_write_bw", "--version", "perftest"),
        ("tcpdump", "--version", "tcpdump"),
        ("tshark", "--version", "tshark"),
        ("chromium", "--version", "chromium"),
    ];
    tools
        .iter()
        .take(if chromium { 6 } else { 5 })
        .all(|&(tool, flag, package)| tool_here(test, tool, flag, package))
}

/// Whether `tool flag` starts: a loud SKIPPED naming its Debian
/// `package` (a failure under CI) when not.
fn tool_here(test: &str, tool: &str, flag: &str, package: &str) -> bool {
    let there = Command::new(tool)
        .arg(flag)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !there {
        testkit::skip_or_fail(
            test,
            &format!("{tool} is not installed (Debian package {package}; .ci/run installs it)"),
        );
    }
    there
}

/// `rnic lab` with `args`, its stderr into `err`.
fn start(args: &[&str], out: &Path, err: &Path) -> Child {
    Command::new(rnic())
        .arg("lab")
        .args(args)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .expect("start rnic lab")
}

fn finish(mut c: Child, err: &Path) -> std::process::ExitStatus {
    match poll_within(STUCK, || c.try_wait().ok().flatten()) {
        Some(st) => st,
        None => {
            let _ = c.kill();
            let _ = c.wait();
            panic!("rnic lab did not end: {}", read(err));
        }
    }
}

/// Runs `rnic lab` with `args` to its end in a fresh folder: it
/// succeeds and leaves no namespace, link or process behind. The folder
/// (kept while the first value lives), the results folder and what the
/// lab said.
fn run_to_the_end(args: &[&str]) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("results"), dir.path().join("lab.err"));
    let lab = start(args, &out, &err);
    let pid = lab.id();
    let st = finish(lab, &err);
    let said = read(&err);
    eprintln!("{said}");
    assert!(st.success(), "rnic lab: {st}\n{said}");
    assert_eq!(
        leftovers(pid),
        Vec::<String>::new(),
        "left behind after the run"
    );
    (dir, out, said)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// What lab `pid` left: its namespaces, links in this namespace named
/// after it, and processes whose command line or environment names its
/// folder (rnicd's --sock-dir, the clients' SOFTRNIC_SOCK_DIR).
fn leftovers(pid: u32) -> Vec<String> {
    let mut left = Vec::new();
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let prefix = format!("rnlab-{pid}-");
    for l in String::from_utf8_lossy(&ns.stdout).lines() {
        if l.starts_with(&prefix) {
            left.push(format!("namespace {l}"));
        }
    }
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let link = format!("rnl{pid}");
    for l in String::from_utf8_lossy(&links.stdout).lines() {
        if l.contains(&link) {
            left.push(format!("link {l}"));
        }
    }
    let folder = format!("rnlab-{pid}/");
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let p = e.path();
        for f in ["cmdline", "environ"] {
            let b = std::fs::read(p.join(f)).unwrap_or_default();
            if String::from_utf8_lossy(&b).contains(&folder) {
                left.push(format!("process {}", p.display()));
                break;
            }
        }
    }
    left
}

/// The points of each series of a `series,time_s,value` CSV.
fn series(csv: &str) -> Vec<(String, Vec<f64>)> {
    let mut out: Vec<(String, Vec<f64>)> = Vec::new();
    for l in csv.lines().skip(1) {
        let c: Vec<&str> = l.split(',').collect();
        assert_eq!(c.len(), 3, "{l}");
        let y: f64 = c[2].parse().unwrap();
        match out.iter_mut().find(|s| s.0 == c[0]) {
            Some(s) => s.1.push(y),
            None => out.push((c[0].to_string(), vec![y])),
        }
    }
    out
}

fn max_of(s: &[(String, Vec<f64>)], name: &str) -> f64 {
    let (_, ys) = s
        .iter()
        .find(|x| x.0 == name)
        .unwrap_or_else(|| panic!("no series {name}"));
    ys.iter().copied().fold(0.0, f64::max)
}

/// Headless Chromium's view of `dir/index.html`: each `<img>`'s src and
/// natural width (through a probe page that frames it), and the console
/// messages of loading the page itself.
fn render(dir: &Path) -> (Vec<(String, u64)>, Vec<String>) {
    let probe = dir.join("probe.html");
    std::fs::write(
        &probe,
        "<!DOCTYPE html><html><body><iframe id=\"f\" src=\"index.html\"></iframe><script>\n\
         document.getElementById('f').onload = () => {\n\
           const d = document.getElementById('f').contentDocument;\n\
           const r = d ? [...d.images].map(i => i.getAttribute('src') + '=' + i.naturalWidth).join(' ') : 'no-access';\n\
           const p = document.createElement('pre'); p.id = 'result'; p.textContent = r; document.body.appendChild(p);\n\
         };\n</script></body></html>\n",
    )
    .unwrap();
    let chromium = |page: &Path, extra: &[&str]| {
        let o = Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu"])
            .arg(format!(
                "--user-data-dir={}",
                dir.join("chromium-profile").display()
            ))
            .args(extra)
            .arg("--dump-dom")
            .arg(format!("file://{}", page.display()))
            .output()
            .expect("run chromium");
        assert!(
            o.status.success(),
            "chromium: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    };
    let o = chromium(
        &probe,
        &[
            "--allow-file-access-from-files",
            "--virtual-time-budget=10000",
        ],
    );
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    let result = dom
        .split("<pre id=\"result\">")
        .nth(1)
        .and_then(|r| r.split("</pre>").next())
        .unwrap_or_else(|| panic!("the probe saw no page: {dom}"));
    let imgs = result
        .split_whitespace()
        .map(|i| {
            let (src, w) = i.rsplit_once('=').expect("src=width");
            (src.to_string(), w.parse().expect("width"))
        })
        .collect();
    let o = chromium(
        &dir.join("index.html"),
        &["--enable-logging=stderr", "--v=0"],
    );
    let console = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains("CONSOLE"))
        .map(String::from)
        .collect();
    (imgs, console)
}

/// The frames of pcap `f` that tshark's display filter `filter` matches.
/// Two of tshark's guesses at what an RDMA message's payload holds are
/// off: its heuristics for InfiniBand payloads take some of UCX's small
/// messages for RPC-over-RDMA, or for an EtherType whose XNS IDP header
/// they then fail to read, and call the frame malformed; with those two
/// dissectors off, the headers up to the payload are what is checked.
fn count(f: &Path, filter: &str) -> usize {
    let o = Command::new("tshark")
        .arg("-r")
        .arg(f)
        .args([
            "--disable-protocol",
            "rpcordma",
            "--disable-protocol",
            "idp",
        ])
        .args(["-Y", filter])
        .output()
        .expect("run tshark");
    assert!(
        o.status.success(),
        "tshark {}: {}",
        f.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).lines().count()
}

/// Every `link-hI.pcap` in `out` decodes in tshark with no malformed
/// frame; the senders' links hold 802.1Qbb frames (the switch's pauses)
/// and h0's link holds RoCEv2 frames.
fn pcaps_are_clean(out: &Path, pfc: bool) {
    for h in ["h0", "h1", "h2"] {
        let f = out.join(format!("link-{h}.pcap"));
        assert!(f.is_file(), "no {}", f.display());
        assert_eq!(
            count(&f, "_ws.malformed"),
            0,
            "malformed frames in {h}'s pcap"
        );
        if h == "h0" {
            assert!(count(&f, "infiniband") > 0, "no RoCEv2 frame toward h0");
        } else if pfc {
            assert!(
                count(&f, "macc.opcode == 0x0101") > 0,
                "no PFC frame toward {h}"
            );
        }
    }
}

/// `dcqcn.csv` has rows, over several samples, for every QP each sender's
/// ib_write_bw reports (its `local address: ... QPN 0x...` line), and
/// some sender's Rc was below the line rate: a CNP's cut, sampled.
fn dcqcn_rows_cover_every_sender_qp_and_a_cut(out: &Path, sum: &Value) {
    let csv = read(&out.join("dcqcn.csv"));
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("t_s,host,qpn,rc_mbps,rt_mbps,alpha,limited,cuts")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 8), "{csv}");
    for h in ["h1", "h2"] {
        let log = read(&out.join(format!("logs/ib_write_bw-client-{h}.txt")));
        let qpns: Vec<u32> = log
            .lines()
            .filter(|l| l.contains("local address"))
            .filter_map(|l| l.split("QPN ").nth(1)?.split_whitespace().next())
            .map(|q| u32::from_str_radix(q.trim_start_matches("0x"), 16).unwrap())
            .collect();
        assert!(
            !qpns.is_empty(),
            "no QPN in {h}'s ib_write_bw output: {log}"
        );
        for q in qpns {
            let n = rows
                .iter()
                .filter(|r| r[1] == h && r[2] == q.to_string())
                .count();
            assert!(n >= 2, "{h} QP {q}: {n} rows in dcqcn.csv\n{csv}");
        }
    }
    let line = sum["dcqcn"]["line_mbps"].as_f64().unwrap();
    let rc = |r: &Vec<&str>| r[3].parse::<f64>().unwrap();
    assert!(line > 0.0, "{sum}");
    assert!(
        rows.iter()
            .all(|r| rc(r) <= line && r[4].parse::<f64>().unwrap() <= line),
        "{csv}"
    );
    let lowest = rows.iter().map(rc).fold(f64::INFINITY, f64::min);
    assert!(
        lowest < line,
        "no sender's Rc was ever below the line rate ({line} Mbit/s) though CNPs were handled"
    );
}

#[test]
fn an_ecn_incast_marks_sends_cnps_plots_and_leaves_nothing_behind() {
    let test = "an_ecn_incast_marks_sends_cnps_plots_and_leaves_nothing_behind";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, true) {
        return;
    }
    let args = [&INCAST[..], &["--ecn-kb", "30"]].concat();
    let (_dir, out, said) = run_to_the_end(&args);
    assert!(
        said.contains("rnicd on AfXdp") || said.contains("rnicd on AfPacket"),
        "{said}"
    );

    let flows = series(&read(&out.join("flows.csv")));
    for f in ["h1→h0", "h2→h0", "h0 received"] {
        assert!(max_of(&flows, f) > 0.0, "{f} never moved: {flows:?}");
    }
    let marks = series(&read(&out.join("marks.csv")));
    assert!(max_of(&marks, "CE marks to h0") > 0.0, "{marks:?}");
    let cnp = series(&read(&out.join("cnp.csv")));
    assert!(max_of(&cnp, "h0 np_cnp_sent") > 0.0, "{cnp:?}");
    let sum: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    let (marked, cnps) = (
        sum["switch_ports"][0]["ce_marked"].as_u64().unwrap(),
        sum["receiver"]["np_cnp_sent"].as_u64().unwrap(),
    );
    let received = sum["receiver"]["np_ecn_marked_roce_packets"]
        .as_u64()
        .unwrap();
    // the marks the switch made arrive (no more than it made), and the
    // notification point answers at most one CNP per marked packet (IBTA
    // RoCEv2 annex A17.9.3: one per QP per min_time_between_cnps)
    assert!(received > 0 && received <= marked, "{sum}");
    assert!(cnps > 0 && cnps <= received, "{sum}");
    for f in sum["flows"].as_array().unwrap() {
        assert!(f["mbits_average"].as_f64().unwrap() > 0.0, "{f}");
        assert!(
            f["rp_cnp_handled"].as_u64().unwrap() > 0,
            "no CNP handled: {f}"
        );
    }
    dcqcn_rows_cover_every_sender_qp_and_a_cut(&out, &sum);
    pcaps_are_clean(&out, false);
    assert!(read(&out.join("samples.csv")).starts_with("t_s,source,name,value\n"));
    assert!(read(&out.join("lab.toml")).contains("rate = \"50mbit\""));

    let svgs = every_svg_is_shown(&out);
    assert_eq!(svgs.len(), 6, "{svgs:?}");
}

/// One sender alone (h1 → h0): its rnicd paces it to the line rate, so
/// the queue toward h0 never nears the ECN threshold and the switch marks
/// nothing, though every frame is ECN-capable and counted; the marking
/// follows the queue, not the traffic (the incast above, whose queue is
/// deep, is marked).
#[test]
fn a_lone_paced_sender_builds_no_queue_and_is_never_marked() {
    let test = "a_lone_paced_sender_builds_no_queue_and_is_never_marked";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, false) {
        return;
    }
    let args = [
        "--hosts",
        "2",
        "--rate",
        "50mbit",
        "--duration",
        "3",
        "--ecn-kb",
        "30",
    ];
    let (_dir, out, said) = run_to_the_end(&args);
    assert!(
        said.contains("CE marking toward a port while its queue holds more than 30 KB"),
        "{said}"
    );
    let sum: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    let to_h0 = &sum["switch_ports"][0];
    assert!(to_h0["roce_frames"].as_u64().unwrap() > 1000, "{sum}");
    assert!(
        to_h0["max_backlog_bytes"].as_u64().unwrap() < 30_000,
        "{sum}"
    );
    assert_eq!(to_h0["ce_marked"].as_u64(), Some(0), "{sum}");
    assert_eq!(to_h0["drops"].as_u64(), Some(0), "{sum}");
    assert_eq!(sum["receiver"]["np_cnp_sent"].as_u64(), Some(0), "{sum}");
    // paced: never above the line rate on average
    let f = &sum["flows"][0];
    let mbits = f["mbits_average"].as_f64().unwrap();
    assert!(mbits > 0.0 && mbits <= 50.5, "{f}");
}

/// With `--dcqcn off --probe`: the reaction points off and no QP ever cut
/// (every sampled Rc the line rate, a sender other than h0 among them),
/// and the probe's percentiles of the samples while the workload ran, in
/// order, in the output; `lab.toml` repeats both settings.
fn no_cut_and_the_probe_measured(out: &Path, sum: &Value, said: &str) {
    assert_eq!(sum["dcqcn"]["reaction_point"], "off", "{sum}");
    let line = sum["dcqcn"]["line_mbps"].as_f64().unwrap();
    let csv = read(&out.join("dcqcn.csv"));
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert!(rows.iter().any(|r| r[1] != "h0"), "{csv}");
    for r in &rows {
        assert_eq!((r[6], r[7]), ("0", "0"), "a cut: {r:?}");
        assert_eq!(r[3].parse::<f64>().unwrap(), line, "{r:?}");
    }
    let p = &sum["probe"];
    let n = p["samples"].as_u64().unwrap();
    assert!(n > 0 && n <= p["samples_all"].as_u64().unwrap(), "{p}");
    let q: Vec<f64> = ["p50_us", "p99_us", "p999_us", "max_us"]
        .iter()
        .map(|k| p[*k].as_f64().unwrap())
        .collect();
    assert!(q[0] > 0.0 && q.windows(2).all(|w| w[0] <= w[1]), "{p}");
    assert!(said.contains("latency probe h1→h0"), "{said}");
    let toml = read(&out.join("lab.toml"));
    assert!(
        toml.contains("probe = true") && toml.contains("dcqcn = false"),
        "{toml}"
    );
}

#[test]
fn dcqcn_off_ignores_cnps_and_the_probe_measures_latency() {
    let test = "dcqcn_off_ignores_cnps_and_the_probe_measures_latency";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, true) {
        return;
    }
    let args = [
        &INCAST[..],
        &["--ecn-kb", "30", "--dcqcn", "off", "--probe"],
    ]
    .concat();
    let (_dir, out, said) = run_to_the_end(&args);
    let sum: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    // h0's notification point still answers the marks with CNPs, and the
    // senders' reaction points, off, count every one as ignored
    assert!(
        sum["receiver"]["np_cnp_sent"].as_u64().unwrap() > 0,
        "{sum}"
    );
    let samples = read(&out.join("samples.csv"));
    let last = |host: &str, name: &str| -> u64 {
        let key = format!(",{host},{name},");
        let l = samples.lines().rfind(|l| l.contains(&key));
        l.unwrap_or_else(|| panic!("no {name} of {host} in samples.csv"))
            .rsplit(',')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    // the switch's CE remark updates the IP checksum incrementally, now
    // and then to 0xFFFF ("-0", RFC 1624): h0 takes those headers
    // (a drop reason is sampled from its first drop on)
    let refused = samples
        .lines()
        .find(|l| l.contains(",h0,bad_ip_checksum,") && !l.ends_with(",0"));
    assert_eq!(refused, None, "h0 refused a header");
    for h in ["h1", "h2"] {
        assert_eq!(last(h, "rp_cnp_handled"), 0, "{h} handled a CNP");
        assert!(last(h, "rp_cnp_ignored") > 0, "{h} ignored no CNP");
    }
    no_cut_and_the_probe_measured(&out, &sum, &said);
    // the run says how far it can be trusted
    let level = sum["trust"]["level"].as_str().unwrap();
    assert!(["ok", "caution", "untrustworthy"].contains(&level), "{sum}");
    assert!(said.contains("lab: trust: "), "{said}");
    let svgs = every_svg_is_shown(&out);
    assert!(svgs.iter().any(|s| s == "probe.svg"), "{svgs:?}");
}

/// Every SVG of the results folder is on the page and Chromium shows it,
/// with no console message; returns their names.
fn every_svg_is_shown(out: &Path) -> Vec<String> {
    let html = read(&out.join("index.html"));
    let svgs: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    let (imgs, console) = render(out);
    for s in &svgs {
        assert!(
            html.contains(&format!("src=\"{s}\"")),
            "index.html lacks {s}"
        );
        let w = imgs.iter().find(|i| &i.0 == s).map(|i| i.1);
        assert!(w.is_some_and(|w| w > 0), "{s} not shown: {imgs:?}");
    }
    assert!(console.is_empty(), "console messages: {console:?}");
    svgs
}

/// The last value of column `name` of `pfc.csv`.
fn pfc_last(csv: &str, name: &str) -> u64 {
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = head
        .iter()
        .position(|h| *h == name)
        .unwrap_or_else(|| panic!("no column {name} in pfc.csv"));
    let last = lines.last().expect("pfc.csv has rows");
    last.split(',').nth(col).unwrap().parse().unwrap()
}

#[test]
fn a_pfc_incast_pauses_the_senders_and_every_link_pcap_is_clean() {
    let test = "a_pfc_incast_pauses_the_senders_and_every_link_pcap_is_clean";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, true) {
        return;
    }
    let pfc = [
        "--ecn-kb",
        "0",
        "--pfc",
        "--xoff-kb",
        "40",
        "--xon-kb",
        "20",
    ];
    let (_dir, out, said) = run_to_the_end(&[&INCAST[..], &pfc].concat());
    assert!(
        said.contains("PFC from the switch: priority 3 paused above 40 KB"),
        "{said}"
    );
    let csv = read(&out.join("pfc.csv"));
    // h0, the receiver, feeds no congested queue: never paused
    assert_eq!(pfc_last(&csv, "switch_to_h0_prio3_pause_sent"), 0, "{csv}");
    for h in ["h1", "h2"] {
        let sent = pfc_last(&csv, &format!("switch_to_{h}_prio3_pause_sent"));
        let got = pfc_last(&csv, &format!("{h}_rx_prio3_pause"));
        let paused = pfc_last(&csv, &format!("{h}_rx_prio3_pause_duration_us"));
        assert!(sent > 0, "the switch sent {h} no PFC frame\n{csv}");
        // the frames arrive (a veth loses none) and none is counted twice
        assert!(
            got > 0 && got <= sent,
            "{h}: {got} received of {sent}\n{csv}"
        );
        assert!(paused > 0, "{h} was never paused\n{csv}");
        // the capture runs from before the stage to after it: it holds
        // every frame the samples counted
        let f = out.join(format!("link-{h}.pcap"));
        let in_pcap = count(&f, "macc.opcode == 0x0101 && macc.cbfc.enbv.c3 == 1") as u64;
        assert!(
            in_pcap >= sent,
            "{h}: {in_pcap} PFC frames in its pcap, {sent} sent"
        );
    }
    assert!(read(&out.join("lab.toml")).contains("pfc = true"));
    let sum: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    for h in 1..3 {
        let t = &sum["pfc"]["hosts"][h];
        assert!(t["switch_sent"].as_u64().unwrap() > 0, "{sum}");
        assert!(t["paused_ms"].as_f64().unwrap() > 0.0, "{sum}");
    }
    // paused and resumed, every sender's ib_write_bw still completed
    // writes (a resume that left the QPs unscheduled stalled them)
    for f in sum["flows"].as_array().unwrap() {
        let gbits = f["ib_write_bw_gbits"].as_f64();
        assert!(gbits.is_some_and(|g| g > 0.0), "no write completed: {f}");
    }
    let svgs = every_svg_is_shown(&out);
    for s in ["pfc_frames.svg", "pfc_paused.svg"] {
        assert!(svgs.iter().any(|x| x == s), "no {s}: {svgs:?}");
    }
    pcaps_are_clean(&out, true);
}

/// The tests' collective: a ring allreduce of 256 KiB, 8 iterations, on
/// 3 hosts at 50 Mbit/s (about 65 ms an iteration).
const ALLREDUCE: [&str; 10] = [
    "--hosts",
    "3",
    "--rate",
    "50mbit",
    "--workload",
    "allreduce",
    "--size",
    "262144",
    "--iterations",
    "8",
];

/// Whether Open MPI (mpirun, mpicc) is here as well: a loud SKIPPED (a
/// failure under CI) without it.
fn mpi_here(test: &str) -> bool {
    [("mpirun", "openmpi-bin"), ("mpicc", "libopenmpi-dev")]
        .iter()
        .all(|&(tool, package)| tool_here(test, tool, "--version", package))
}

#[test]
fn an_allreduce_runs_over_every_hosts_rnic_and_its_page_shows_the_times() {
    let test = "an_allreduce_runs_over_every_hosts_rnic_and_its_page_shows_the_times";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, true) || !mpi_here(test) {
        return;
    }
    // with DCQCN's reaction points off and the probe beside it; 48
    // iterations: every host sends for about 3 s, twice a probe round
    // (each round starts two perftest processes, about 1.5 s here), so
    // that some round's ping-pongs fall while the collective runs
    let mut args = [&ALLREDUCE[..], &["--dcqcn", "off", "--probe"]].concat();
    let at = args.iter().position(|a| *a == "--iterations").unwrap();
    args[at + 1] = "48";
    let (_dir, out, said) = run_to_the_end(&args);
    collective_times(&out, 48);
    let sum: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    no_cut_and_the_probe_measured(&out, &sum, &said);
    // no trust verdict for a collective, and the output and page say why
    assert!(sum["trust"].is_null(), "{sum}");
    assert!(
        said.contains("lab: trust: no verdict for a collective"),
        "{said}"
    );
    assert!(read(&out.join("index.html")).contains("no verdict for a collective"));
    // UCX's endpoints on each host's own device
    an_allreduce_on_the_rnics(&sum, &["h0", "h1", "h2"]);
    // every host sent and received through its rnicd: the collective's
    // bytes at least (a ring sends 2(N-1)/N of them from each rank)
    let flows = series(&read(&out.join("flows.csv")));
    for f in ["h0 sent", "h1 sent", "h2 sent", "h0 received"] {
        assert!(max_of(&flows, f) > 0.0, "{f} never moved: {flows:?}");
    }
    let fb = &sum["fallback"];
    assert!(fb["rdma_bytes"].as_u64().unwrap() >= 8 * 262_144, "{fb}");
    assert!(fb["roce_frames"].as_u64().unwrap() > 0, "{fb}");
    assert_eq!(fb["around_the_rnic"], false, "{fb}");
    assert!(
        said.contains("the traffic went through the RNICs"),
        "{said}"
    );
    // every host sends: every host's QPs' DCQCN state is sampled
    let dcqcn = read(&out.join("dcqcn.csv"));
    for h in ["h0", "h1", "h2"] {
        assert!(
            dcqcn.lines().any(|l| l.split(',').nth(1) == Some(h)),
            "no DCQCN row of {h}\n{dcqcn}"
        );
    }
    assert!(read(&out.join("lab.toml")).contains("kind = \"allreduce\""));
    let svgs = every_svg_is_shown(&out);
    assert!(svgs.iter().any(|s| s == "collective.svg"), "{svgs:?}");
    assert!(svgs.iter().any(|s| s == "probe.svg"), "{svgs:?}");
    pcaps_are_clean(&out, false);
}

#[test]
fn a_collective_forced_onto_tcp_bypasses_the_rnics_and_says_so() {
    let test = "a_collective_forced_onto_tcp_bypasses_the_rnics_and_says_so";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, true) || !mpi_here(test) {
        return;
    }
    let (_dir, out, said) = run_to_the_end(&[&ALLREDUCE[..], &["--ucx-tls", "tcp"]].concat());
    collective_times(&out, 8);
    let sum: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    let fb = &sum["fallback"];
    let (rdma, link) = (
        fb["rdma_bytes"].as_u64().unwrap(),
        fb["link_bytes"].as_u64().unwrap(),
    );
    // the links carried the collective's bytes; the RNICs next to nothing
    // (a stray frame at most), and the switch saw no RoCEv2 frame
    assert!(link >= 8 * 262_144, "{fb}");
    assert!(rdma < 16 * 1024, "{fb}");
    assert_eq!(fb["roce_frames"], 0, "{fb}");
    assert_eq!(fb["cnps_sent"], 0, "{fb}");
    assert_eq!(fb["around_the_rnic"], true, "{fb}");
    let eps = sum["collective"]["ucx_endpoints"].to_string();
    assert!(eps.contains("tcp/") && !eps.contains("rc_verbs"), "{eps}");
    assert!(said.contains("traffic went around the RNIC"), "{said}");
    let html = read(&out.join("index.html"));
    assert!(
        html.contains("class=\"fallback\"") && html.contains("traffic went around the RNIC"),
        "the page does not flag the fallback"
    );
    // the wire: TCP toward h0, no RoCEv2
    let h0 = out.join("link-h0.pcap");
    assert!(count(&h0, "tcp.len > 0") > 0, "no TCP payload toward h0");
    assert_eq!(count(&h0, "udp.port == 4791"), 0, "RoCEv2 toward h0");
    every_svg_is_shown(&out);
}

#[test]
fn a_collective_without_open_mpi_refuses_in_one_line() {
    let test = "a_collective_without_open_mpi_refuses_in_one_line";
    if !common::netns::can_run(test) {
        return;
    }
    // a PATH with the lab's system tools and no Open MPI
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for tool in ["ip", "tc", "nft"] {
        let o = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
        assert!(!path.is_empty(), "no {tool}");
        std::os::unix::fs::symlink(path, bin.join(tool)).unwrap();
    }
    let o = Command::new(rnic())
        .args(["lab", "--workload", "allreduce", "--out"])
        .arg(dir.path().join("r"))
        .env("PATH", &bin)
        .output()
        .expect("run rnic lab");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("`mpicc` is not installed (libopenmpi-dev)"),
        "{err}"
    );
    assert!(!dir.path().join("r").exists(), "it wrote results");
}

#[test]
fn sigint_mid_run_tears_everything_down() {
    let test = "sigint_mid_run_tears_everything_down";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, false) {
        return;
    }
    let (lab, _dir, err) = running_lab("120");
    let pid = lab.id();
    assert!(
        !leftovers(pid).is_empty(),
        "the probe sees no lab while it runs"
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
    let st = finish(lab, &err);
    let said = read(&err);
    assert_eq!(st.code(), Some(130), "{said}");
    assert!(said.contains("interrupted by signal 2"), "{said}");
    assert!(said.contains("torn down"), "{said}");
    assert_eq!(
        leftovers(pid),
        Vec::<String>::new(),
        "left behind after SIGINT"
    );
}

/// Starts a 3-host lab of `secs` and waits until its workload is
/// sampled (every process of it up): the lab, its folder, its stderr.
fn running_lab(secs: &str) -> (Child, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("results"), dir.path().join("lab.err"));
    let mut lab = start(&["--hosts", "3", "--duration", secs], &out, &err);
    let running = poll_within(STUCK, || {
        if let Ok(Some(st)) = lab.try_wait() {
            panic!("rnic lab ended ({st}) before its workload: {}", read(&err));
        }
        // the progress line (its `queue→h0`): the workload is sampled,
        // so every process of the lab is up
        read(&err).contains("queue→h0").then_some(())
    });
    assert!(running.is_some(), "no workload: {}", read(&err));
    (lab, dir, err)
}

/// The pid of the rnicd of host `host` of lab `lab`.
fn rnicd_of(lab: u32, host: &str) -> Option<libc::pid_t> {
    let folder = format!("rnlab-{lab}/{host}\0");
    let name = format!("\0--name\0{host}\0");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        (cmd.contains("rnicd") && cmd.contains(&folder) && cmd.contains(&name))
            .then(|| e.file_name().to_str()?.parse().ok())
            .flatten()
    })
}

#[test]
fn a_hosts_rnicd_killed_mid_run_ends_the_lab_and_tears_everything_down() {
    let test = "a_hosts_rnicd_killed_mid_run_ends_the_lab_and_tears_everything_down";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, false) {
        return;
    }
    let (lab, _dir, err) = running_lab("120");
    let pid = lab.id();
    let victim = rnicd_of(pid, "h1").expect("h1's rnicd among the processes");
    // SAFETY: kill(2) of a process of the lab this test started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let st = finish(lab, &err);
    let said = read(&err);
    assert!(!st.success(), "the lab went on without h1's rnicd: {said}");
    assert!(said.contains("h1"), "{said}");
    assert!(said.contains("torn down"), "{said}");
    assert_eq!(
        leftovers(pid),
        Vec::<String>::new(),
        "left behind after an rnicd crashed"
    );
}

#[test]
fn a_lab_killed_outright_leaves_no_process_and_the_next_lab_removes_its_namespaces() {
    let test = "a_lab_killed_outright_leaves_no_process_and_the_next_lab_removes_its_namespaces";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, false) {
        return;
    }
    let (mut lab, _dir, _err) = running_lab("120");
    let pid = lab.id();
    lab.kill().expect("SIGKILL the lab");
    let _ = lab.wait();
    // its children end by their parent-death signal
    let procs = poll_within(STUCK, || {
        let left: Vec<String> = leftovers(pid)
            .into_iter()
            .filter(|l| l.starts_with("process"))
            .collect();
        left.is_empty().then_some(())
    });
    assert!(
        procs.is_some(),
        "processes outlived the lab: {:?}",
        leftovers(pid)
    );
    assert!(
        leftovers(pid).iter().any(|l| l.starts_with("namespace")),
        "a lab killed outright cannot delete its namespaces; none were seen"
    );
    // the next lab deletes the namespaces of a lab whose pid is gone
    let (_dir2, _out, _said) = run_to_the_end(&["--hosts", "2", "--duration", "1"]);
    assert_eq!(
        leftovers(pid),
        Vec::<String>::new(),
        "the next lab left the killed lab's namespaces"
    );
}

#[test]
fn without_root_it_refuses_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut c = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(rnic());
        c
    } else {
        Command::new(rnic())
    };
    let o = c
        .args(["lab", "--hosts", "3", "--out"])
        .arg(dir.path().join("r"))
        .output()
        .expect("run rnic lab");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("needs root"), "{err}");
    assert!(
        !dir.path().join("r").exists(),
        "it wrote results without root"
    );
}

/// The sampled rows of `samples.csv` of switch port `port` (`t_s,source,
/// name,value`, source `switch:to_<port>`) named `name`: their values.
fn port_samples(out: &Path, port: &str, name: &str) -> Vec<u64> {
    let src = format!("switch:to_{port}");
    read(&out.join("samples.csv"))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f.len() == 4 && f[1] == src && f[2] == name).then(|| f[3].parse().unwrap())
        })
        .collect()
}

/// Two switches: h0 on switch 0, h1 and h2 on switch 1, a trunk twice
/// the hosts' rate between them, PFC on, no marking. The incast crosses
/// the trunk; h0's queue passes XOFF, so switch 0 pauses its ingress
/// ports, the trunk's among them; switch 1 honours the pauses by holding
/// its trunk queue, which builds until switch 1 pauses h1 and h2 — the
/// pause spread. Bytes arrive at h0, both switches' queues and counters
/// are sampled, the trunk's pcap holds the pauses and decodes cleanly,
/// the page shows every plot (the trunk's queues and held time among
/// them), and nothing of the lab is left.
#[test]
fn two_switches_spread_a_pfc_pause_across_the_trunk() {
    let test = "two_switches_spread_a_pfc_pause_across_the_trunk";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, true) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    std::fs::write(
        &file,
        "hosts = 3\nswitches = 2\n[switch]\nrate = \"50mbit\"\necn_kb = 0\npfc = true\n\
         xoff_kb = 40\nxon_kb = 20\n[trunk]\nsplit = 1\nrate = \"100mbit\"\n\
         [workload]\nduration_s = 3\n",
    )
    .unwrap();
    let (_d, out, said) = run_to_the_end(&["--file", file.to_str().unwrap()]);
    assert!(
        said.contains("two switches (h0..h0 | h1..h2; trunk 100mbit"),
        "{said}"
    );
    assert!(said.contains("the trunk's pauses honoured"), "{said}");
    let sum: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    for f in sum["flows"].as_array().unwrap() {
        let gbits = f["ib_write_bw_gbits"].as_f64();
        assert!(gbits.is_some_and(|g| g > 0.0), "no write arrived: {f}");
    }
    // every port of both switches sampled: the hosts' and the trunk's
    let ports: Vec<&str> = sum["switch_ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["to"].as_str().unwrap())
        .collect();
    assert_eq!(ports, ["h0", "h1", "h2", "sw1", "sw0"]);
    for p in ["h0", "sw0", "sw1"] {
        assert!(
            port_samples(&out, p, "backlog_bytes").len() > 2,
            "{p} unsampled"
        );
    }
    // the RoCE data crossed switch 1's trunk queue toward switch 0
    let seen = port_samples(&out, "sw0", "roce_frames");
    assert!(seen.last().is_some_and(|&n| n > 0), "{seen:?}");
    assert!(
        port_samples(&out, "h0", "backlog_bytes")
            .iter()
            .any(|&b| b > 0),
        "h0's queue never held a byte"
    );
    let csv = read(&out.join("pfc.csv"));
    // switch 0 paused the trunk; switch 1 received and honoured it ...
    assert!(
        pfc_last(&csv, "switch_to_sw1_prio3_pause_sent") > 0,
        "{csv}"
    );
    assert!(pfc_last(&csv, "trunk_to_sw0_pause_received") > 0, "{csv}");
    assert!(pfc_last(&csv, "trunk_to_sw0_held_us") > 0, "{csv}");
    // ... and its held queue made it pause its own senders
    for h in ["h1", "h2"] {
        assert!(
            pfc_last(&csv, &format!("switch_to_{h}_prio3_pause_sent")) > 0,
            "{csv}"
        );
        assert!(pfc_last(&csv, &format!("{h}_rx_prio3_pause")) > 0, "{csv}");
    }
    let trunk = &sum["pfc"]["trunk"];
    assert_eq!(trunk[1]["to"], "sw0", "{sum}");
    assert!(trunk[1]["held_ms"].as_f64().unwrap() > 0.0, "{sum}");
    let pcap = out.join("link-trunk.pcap");
    assert_eq!(
        count(&pcap, "_ws.malformed"),
        0,
        "malformed frames on the trunk"
    );
    assert!(
        count(&pcap, "macc.cbfc.enbv.c3 == 1") > 0,
        "no pause on the trunk"
    );
    assert!(count(&pcap, "infiniband") > 0, "no RoCEv2 on the trunk");
    pcaps_are_clean(&out, true);
    // the page draws both switches' queues, the trunk's held time among
    // the PFC plots
    let queue = read(&out.join("queue.csv"));
    assert!(
        queue.contains("\nto sw0,") && queue.contains("\nto sw1,"),
        "{queue}"
    );
    let paused = read(&out.join("pfc_paused.csv"));
    assert!(paused.contains("queue to sw0 (trunk) held,"), "{paused}");
    let svgs = every_svg_is_shown(&out);
    assert!(svgs.iter().any(|s| s == "pfc_paused.svg"), "{svgs:?}");
}

/// A trace of four flows (writes and a send, two starting later, one the
/// other way) replays: each flow's completion time and perftest's rate
/// in `flows.csv` and `summary.json`, the FCT plot on the page, and
/// nothing of the lab left.
#[test]
fn a_replayed_trace_records_each_flows_completion() {
    let test = "a_replayed_trace_records_each_flows_completion";
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !runs_here(test, true) || !tool_here(test, "ib_send_bw", "--version", "perftest") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(
        &trace,
        "start_ms,src,dst,bytes,op\n0,h1,h0,2000000\n0,h2,h0,1000000,send\n\
         300,h0,h2,300000\n500,h1,h2,65536\n",
    )
    .unwrap();
    let args = [
        "--hosts",
        "3",
        "--rate",
        "50mbit",
        "--workload",
        "trace",
        "--trace",
        trace.to_str().unwrap(),
    ];
    let (_d, out, said) = run_to_the_end(&args);
    assert!(said.contains("workload running: 4 flows of"), "{said}");
    let csv = read(&out.join("flows.csv"));
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 4, "{csv}");
    let want = [
        ("h1", "h0", "write", "2000000"),
        ("h2", "h0", "send", "1000000"),
        ("h0", "h2", "write", "300000"),
        ("h1", "h2", "write", "65536"),
    ];
    for (r, w) in rows.iter().zip(want) {
        assert_eq!((r[0], r[1], r[2], r[3]), w, "{csv}");
        let fct: f64 = r[7].parse().unwrap();
        let rate: f64 = r[9].parse().unwrap_or(0.0);
        assert!(fct > 0.0 && rate > 0.0, "{csv}");
    }
    // the later flows started later
    let start = |i: usize| rows[i][6].parse::<f64>().unwrap();
    assert!(
        start(2) >= 0.3 && start(3) >= 0.5 && start(0) < 0.3,
        "{csv}"
    );
    let sum: Value = serde_json::from_str(&read(&out.join("summary.json"))).unwrap();
    assert_eq!(sum["trace"].as_array().map(Vec::len), Some(4), "{sum}");
    assert!(read(&out.join("lab.toml")).contains("kind = \"trace\""));
    let svgs = every_svg_is_shown(&out);
    assert!(svgs.iter().any(|s| s == "fct.svg"), "{svgs:?}");
    assert!(read(&out.join("index.html")).contains("Replayed flows"));
}
