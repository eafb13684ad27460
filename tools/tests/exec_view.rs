//! `rnic exec`'s view of the devices, against an `rnicd --mem-pair` of the
//! test's own (t0 at 127.0.0.1, t1 at 127.0.0.2): what a program reads in
//! `/sys/class/infiniband`, `/sys/class/infiniband_verbs` and
//! `/dev/infiniband` agrees with what the libibverbs drop-in answers
//! (`ibv_devinfo`, the `ibv_device` fields, pyverbs' `query_gid_ex`),
//! rdma-core's test suite finds the device's address through
//! `device/net/` (UCX, `ibstat` and RDMA netlink in the view:
//! exec_view_tools.rs), nothing of the view shows
//! outside the program, the drop-in still works without it, and without a
//! namespace to be had the program runs without the view. Then the
//! mem-pair's address is one the kernel answers: TCP and the RDMA CM reach
//! the peer at the same address. Each runs as the test's user, and also
//! as `nobody` when that is root.

mod common;

use common::view::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use testkit::abi::profile_dir;
use testkit::proc::{Finished, Running};
use testkit::rnicd::{is_root, Daemon, STUCK};
use testkit::Missing;

/// What the program in the view prints: `path=contents` of the view's
/// files, the drop-in's `ibv_device` fields, the rdma-core suite's
/// `device/net` lookup.
const LOOK: &str = r#"
import ctypes, os, stat, sys
def show(k, v):
    print(f"{k}={v}")
def cat(p):
    with open(p) as f:
        return f.read().rstrip("\n")
root = "/sys/class/infiniband"
show("devices", " ".join(sorted(os.listdir(root))))
for d in sorted(os.listdir(root)):
    base = f"{root}/{d}"
    for f in ["node_type", "node_guid", "sys_image_guid", "fw_ver", "parent"]:
        show(f"{d}/{f}", cat(f"{base}/{f}"))
    show(f"{d}/device/net", " ".join(os.listdir(f"{base}/device/net")))
    p = f"{base}/ports/1"
    for f in ["state", "phys_state", "rate", "link_layer", "lid", "cap_mask", "pkeys/0"]:
        show(f"{d}/ports/1/{f}", cat(f"{p}/{f}"))
    gids = sorted(os.listdir(f"{p}/gids"), key=int)
    show(f"{d}/gid_count", len(gids))
    empty = [i for i in gids if cat(f"{p}/gids/{i}") == ":".join(["0000"] * 8)]
    show(f"{d}/empty_gids", len(empty))
    show(f"{d}/empty_typed", sum(os.path.exists(f"{p}/gid_attrs/types/{i}") for i in empty))
    for i in gids:
        if i in empty:
            continue
        show(f"{d}/gids/{i}", cat(f"{p}/gids/{i}"))
        show(f"{d}/types/{i}", cat(f"{p}/gid_attrs/types/{i}"))
        show(f"{d}/ndevs/{i}", cat(f"{p}/gid_attrs/ndevs/{i}"))
# the drop-in's ibv_device (struct ibv_device of <infiniband/verbs.h>)
class Dev(ctypes.Structure):
    _fields_ = [("ops", ctypes.c_void_p * 2), ("node_type", ctypes.c_int),
                ("transport_type", ctypes.c_int), ("name", ctypes.c_char * 64),
                ("dev_name", ctypes.c_char * 64), ("dev_path", ctypes.c_char * 256),
                ("ibdev_path", ctypes.c_char * 256)]
lib = ctypes.CDLL("libibverbs.so.1")
lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.POINTER(Dev))
n = ctypes.c_int()
lst = lib.ibv_get_device_list(ctypes.byref(n))
for i in range(n.value):
    d = lst[i].contents
    name, dev = d.name.decode(), d.dev_name.decode()
    node = f"/dev/infiniband/{dev}"
    st = os.stat(node)
    show(f"{name}/dev_name", dev)
    show(f"{name}/dev_path/ibdev", cat(f"{d.dev_path.decode()}/ibdev"))
    show(f"{name}/ibdev_path/node_guid", cat(f"{d.ibdev_path.decode()}/node_guid"))
    show(f"{name}/node", "chr" if stat.S_ISCHR(st.st_mode) else "other")
    show(f"{name}/node_rw", os.access(node, os.R_OK | os.W_OK))
show("rdma_cm", stat.S_ISCHR(os.stat("/dev/infiniband/rdma_cm").st_mode))
# pyverbs (rdma-core's Python verbs) on the drop-in: ibv_query_gid_ex
import pyverbs.device as pvd
for name in sorted(os.listdir(root)):
    ctx = pvd.Context(name=name)
    for i in range(4):
        e = ctx.query_gid_ex(1, i)
        show(f"{name}/gid_ex/{i}", f"{e.gid_type} {e.ndev_ifindex}")
    ctx.close()
# rdma-core's test suite: the device's address through device/net/
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from tests.base import RDMATestCase
net = RDMATestCase.get_net_name("t0")
show("suite/t0", (net,) + RDMATestCase.get_ip_mac_address(net)[:1])
"#;

/// rdma-core's test suite (python3-pyverbs' documentation) unpacked in a
/// folder `nobody` may read.
fn rdma_core_suite() -> Result<tempfile::TempDir, Missing> {
    let src = Path::new("/usr/share/doc/rdma-core/tests");
    if !src.join("base.py.gz").exists() {
        return Err(format!("{} not installed (rdma-core)", src.display()).into());
    }
    let dir = open_dir();
    let tests = dir.path().join("tests");
    let ok = Command::new("cp")
        .arg("-r")
        .arg(src)
        .arg(&tests)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new("sh")
            .arg("-c")
            .arg(format!(
                "gunzip -f {0}/*.gz && chmod -R a+rX {0}",
                tests.display()
            ))
            .status()
            .is_ok_and(|s| s.success());
    ok.then_some(dir)
        .ok_or_else(|| "could not unpack rdma-core's tests".into())
}

/// `ibv_devinfo -v -d dev`'s GID table: (index, GID, type).
fn devinfo_gids(text: &str) -> Vec<(usize, std::net::Ipv6Addr, String)> {
    text.lines()
        .filter_map(|l| {
            let (i, rest) = l.trim().strip_prefix("GID[")?.split_once("]:")?;
            let (gid, ty) = rest.trim().split_once(", ")?;
            Some((i.trim().parse().ok()?, gid.parse().ok()?, ty.to_string()))
        })
        .collect()
}

fn field<'a>(m: &'a BTreeMap<String, String>, k: &str, ctx: &str) -> &'a str {
    m.get(k)
        .unwrap_or_else(|| panic!("no {k} in the view's report\n{ctx}"))
}

#[test]
fn the_view_shows_each_device_as_rxe_does_and_as_the_drop_in_answers() {
    if let Err(why) = prerequisites(&[PYTHON, "ibv_devinfo", "setpriv"]) {
        return testkit::skip_or_fail("the view test", &why);
    }
    let suite = match rdma_core_suite() {
        Ok(s) => s,
        Err(why) => return testkit::skip_or_fail("the view test", &why),
    };
    let lo = std::fs::read_to_string("/sys/class/net/lo/ifindex").expect("lo's index");
    let lo = lo.trim();
    let d = Daemon::start();
    let script = suite.path().join("look.py");
    std::fs::write(&script, LOOK).expect("script");
    for nobody in users() {
        let argv = [
            PYTHON,
            script.to_str().unwrap(),
            suite.path().to_str().unwrap(),
        ];
        let out = run("python3 look.py", exec(&d, nobody, &[], &argv));
        assert!(out.ok(), "as nobody: {nobody}\n{out}");
        assert!(!out.stderr.contains("without it"), "{out}");
        let m = lines(&out.stdout);
        let ctx = out.to_string();
        let f = |k: &str| field(&m, k, &ctx).to_string();
        assert_eq!(f("devices"), "t0 t1", "{ctx}");
        for (i, (dev, ip)) in [("t0", "127.0.0.1"), ("t1", "127.0.0.2")]
            .iter()
            .enumerate()
        {
            // what rxe on lo shows
            assert_eq!(f(&format!("{dev}/node_type")), "1: CA");
            assert_eq!(f(&format!("{dev}/parent")), "lo");
            assert_eq!(f(&format!("{dev}/device/net")), "lo");
            assert_eq!(f(&format!("{dev}/ports/1/state")), "4: ACTIVE");
            assert_eq!(f(&format!("{dev}/ports/1/phys_state")), "5: LinkUp");
            assert_eq!(f(&format!("{dev}/ports/1/link_layer")), "Ethernet");
            assert_eq!(f(&format!("{dev}/ports/1/pkeys/0")), "0xffff");
            // ibv_query_gid_ex's netdev and RoCE version agree with
            // gid_attrs (IBV_GID_TYPE_ROCE_V1 1, _V2 2)
            for g in 0..4 {
                assert_eq!(f(&format!("{dev}/ndevs/{g}")), "lo");
                let ty = if f(&format!("{dev}/types/{g}")) == "RoCE v2" {
                    2
                } else {
                    1
                };
                assert_eq!(f(&format!("{dev}/gid_ex/{g}")), format!("{ty} {lo}"));
            }
            // the drop-in's numbering: uverbsN, its sysfs folder and node
            assert_eq!(f(&format!("{dev}/dev_name")), format!("uverbs{i}"));
            assert_eq!(f(&format!("{dev}/dev_path/ibdev")), *dev);
            assert_eq!(f(&format!("{dev}/node")), "chr");
            assert_eq!(f(&format!("{dev}/node_rw")), "True");
            // ibv_devinfo through the drop-in, in the same view
            let info = run(
                "ibv_devinfo",
                exec(&d, nobody, &[], &["ibv_devinfo", "-v", "-d", dev]),
            );
            assert!(info.ok(), "{info}");
            let guid = f(&format!("{dev}/node_guid"));
            assert!(
                info.stdout.contains(&format!("node_guid:\t\t\t{guid}")),
                "{guid}\n{info}"
            );
            assert_eq!(f(&format!("{dev}/ibdev_path/node_guid")), guid);
            assert_eq!(f(&format!("{dev}/sys_image_guid")), guid);
            assert!(
                info.stdout
                    .contains(&format!("fw_ver:\t\t\t\t{}", f(&format!("{dev}/fw_ver")))),
                "{info}"
            );
            let gids = devinfo_gids(&info.stdout);
            assert_eq!(gids.len(), 4, "{info}");
            // rxe's table length, the entries past the four empty
            assert!(info.stdout.contains("gid_tbl_len:\t\t1024"), "{info}");
            assert_eq!(f(&format!("{dev}/gid_count")), "1024");
            assert_eq!(f(&format!("{dev}/empty_gids")), "1020");
            assert_eq!(f(&format!("{dev}/empty_typed")), "0");
            for (g, addr, ty) in gids {
                let shown: std::net::Ipv6Addr =
                    f(&format!("{dev}/gids/{g}")).parse().expect("a GID");
                assert_eq!(shown, addr, "{dev} GID {g}\n{ctx}");
                let want = if ty == "RoCE v2" {
                    "RoCE v2"
                } else {
                    "IB/RoCE v1"
                };
                assert_eq!(f(&format!("{dev}/types/{g}")), want, "{dev} GID {g}");
            }
            // the RoCE v2 GID, index 3, is the device's loopback address
            let v2: std::net::Ipv6Addr = f(&format!("{dev}/gids/3")).parse().unwrap();
            assert_eq!(v2.to_ipv4_mapped().unwrap().to_string(), *ip);
            assert_eq!(f(&format!("{dev}/types/3")), "RoCE v2");
        }
        assert_eq!(f("rdma_cm"), "True");
        // rdma-core's suite finds t0's address through device/net/
        assert_eq!(f("suite/t0"), "('lo', '127.0.0.1')", "{ctx}");
    }
}

/// The PID written to `file` once it is there.
fn pid_in(file: &Path) -> u32 {
    testkit::wait_for(STUCK, "the program's pid", || {
        std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or("not yet")
    })
}

#[test]
fn the_view_is_the_programs_own() {
    let Some(d) = daemon_for("the view-is-private test", &["setpriv"]) else {
        return;
    };
    let mounts = || std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let before = mounts();
    let had_uverbs0 = Path::new("/dev/infiniband/uverbs0").exists();
    for nobody in users() {
        let dir = open_dir();
        let pidf = dir.path().join("pid");
        let script = format!("echo $$ > {}; exec sleep 600", pidf.display());
        let prog = Running::spawn("sh", exec(&d, nobody, &[], &["sh", "-c", &script]));
        let pid = pid_in(&pidf);
        // inside: the device; its children see it too
        let inside = PathBuf::from(format!(
            "/proc/{pid}/root/sys/class/infiniband/t0/ports/1/state"
        ));
        let state = std::fs::read_to_string(&inside).expect("the program's view");
        assert_eq!(state, "4: ACTIVE\n");
        // outside: nothing of it
        assert!(!Path::new("/sys/class/infiniband/t0").exists());
        assert_eq!(Path::new("/dev/infiniband/uverbs0").exists(), had_uverbs0);
        assert_eq!(mounts(), before, "the view's mounts show outside");
        drop(prog);
        // a child of the program sees the view
        let child = run(
            "sh -c sh -c cat",
            exec(
                &d,
                nobody,
                &[],
                &[
                    "sh",
                    "-c",
                    "sh -c 'cat /sys/class/infiniband_verbs/uverbs1/ibdev'",
                ],
            ),
        );
        assert!(child.ok(), "{child}");
        assert_eq!(child.stdout, "t1\n");
    }
    assert_eq!(mounts(), before);
}

#[test]
fn the_drop_in_works_without_the_view() {
    let Some(d) = daemon_for("the no-view test", &["ibv_devinfo", "setpriv"]) else {
        return;
    };
    for nobody in users() {
        // plain LD_LIBRARY_PATH: no rnic, no namespaces
        let mut c = if nobody {
            testkit::rnicd::cmd("ibv_devinfo")
        } else {
            Command::new("ibv_devinfo")
        };
        c.args(["-v", "-d", "t0"])
            .env("LD_LIBRARY_PATH", profile_dir().join("softrnic-ibverbs"))
            .env("SOFTRNIC_SOCK_DIR", d.sock_dir());
        let out = run("ibv_devinfo", c);
        assert!(out.ok(), "{out}");
        assert!(
            out.stdout
                .contains("GID[  3]:\t\t::ffff:127.0.0.1, RoCE v2"),
            "{out}"
        );
        // rnic exec --no-view: the drop-in, no view, no netlink shim
        let script = "test -e /sys/class/infiniband/t0 && echo shown || echo hidden; \
        echo \"preload=${LD_PRELOAD:-} table=${SOFTRNIC_NLDEV:-none}\"; ibv_devices";
        let out = run(
            "sh",
            exec(&d, nobody, &["--no-view"], &["sh", "-c", script]),
        );
        assert!(out.ok(), "{out}");
        assert!(out.stdout.starts_with("hidden\n"), "{out}");
        assert!(!out.stdout.contains("libsoftrnic_nlshim"), "{out}");
        assert!(out.stdout.contains(" table=none\n"), "{out}");
        assert!(
            out.stdout.contains("t0") && out.stdout.contains("t1"),
            "{out}"
        );
    }
}

/// The CM IDs listening on device `dev` of `d` (rnicd's `cm_listeners`).
fn listeners(d: &Daemon, dev: &str) -> u64 {
    let c = softrnic::Context::open(d.sock_dir().join(format!("{dev}.sock"))).expect("open");
    let s = c.stats().expect("stats");
    s.cm.get("cm_listeners").copied().unwrap_or(0)
}

/// Whether a TCP socket listens on `port` (from /proc/net/tcp, so that
/// no probe takes the server's one connection).
fn tcp_listening(port: u16) -> bool {
    let t = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    t.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[3] == "0A" && f[1].rsplit(':').next() == Some(&format!("{port:04X}"))
    })
}

/// Starts `server`, waits until `ready` (or the server ended), runs
/// `client` to its end, then the server to its.
fn server_and_client(
    server: Command,
    client: Command,
    ready: impl Fn() -> bool,
) -> (Finished, Finished) {
    let mut s = Running::spawn("server", server);
    testkit::wait_until(STUCK, "the server ready", || s.ended() || ready());
    let c = run("client", client);
    let s = s.finish(Instant::now() + DEADLINE);
    (s, c)
}

#[test]
fn the_mem_pair_answers_tcp_and_rdma_cm_at_one_address() {
    let Some(d) = daemon_for(
        "the loopback-address test",
        &["rping", "ib_write_bw", "setpriv"],
    ) else {
        return;
    };
    for (n, nobody) in users().into_iter().enumerate() {
        // TCP: perftest's client reaches its server at t0's address
        // (127.0.0.1), then writes to the GID it learnt there
        let port = (18600 + n).to_string();
        let bw = |peer: &[&str]| {
            let mut a = vec![
                "ib_write_bw",
                "-x",
                "3",
                "-n",
                "200",
                "-s",
                "4096",
                "-p",
                &port,
            ];
            a.extend_from_slice(peer);
            exec(&d, nobody, &[], &a)
        };
        let (s, c) = server_and_client(bw(&["-d", "t0"]), bw(&["-d", "t1", "127.0.0.1"]), || {
            tcp_listening(18600 + n as u16)
        });
        assert!(
            s.ok() && c.ok(),
            "{s}\n{c}\n{}",
            testkit::rnicd::counters(d.sock_dir())
        );
        let row = |l: &str| l.split_whitespace().take(2).eq(["4096", "200"]);
        assert!(
            c.stdout.lines().any(row),
            "no 4096-byte row of 200 iterations: {c}"
        );
        // the RDMA CM at the same address: rping's server binds t0's
        // address, its client resolves it and connects from t1
        let before = listeners(&d, "t0");
        let port = (7600 + n).to_string();
        let rping = |role: &str| {
            exec(
                &d,
                nobody,
                &[],
                &[
                    "rping",
                    role,
                    "-a",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-C",
                    "20",
                    "-v",
                    "-V",
                ],
            )
        };
        let (s, c) = server_and_client(rping("-s"), rping("-c"), || listeners(&d, "t0") > before);
        assert!(
            s.ok() && c.ok(),
            "{s}\n{c}\n{}",
            testkit::rnicd::counters(d.sock_dir())
        );
        assert_eq!(c.stdout.matches("ping data: rdma-ping-").count(), 20, "{c}");
        testkit::wait_until(STUCK, "rping's listener gone", || {
            listeners(&d, "t0") <= before
        });
    }
}

/// `argv` inside 33 user namespaces nested by `unshare -c` (each mapping
/// the user to itself), where the kernel's limit of 32 nested ones is
/// reached: the next `unshare(CLONE_NEWUSER)` fails.
fn nested_full(argv: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.arg("-c");
    for _ in 1..33 {
        c.args(["unshare", "-c"]);
    }
    c.args(argv).stdin(Stdio::null());
    c
}

#[test]
fn without_a_namespace_the_program_runs_without_the_view_and_is_told() {
    if let Err(why) = prerequisites(&["unshare", "ibv_devices"]) {
        return testkit::skip_or_fail("the no-namespace test", &why);
    }
    let probe = run("unshare -c true", nested_full(&["unshare", "-c", "true"]));
    if probe.ok() || !probe.stderr.contains("No space left") {
        return testkit::skip_or_fail(
            "the no-namespace test",
            &format!("33 nested user namespaces do not exhaust the kernel's limit here:\n{probe}"),
        );
    }
    let d = Daemon::start();
    let rnic = profile_dir().join("rnic");
    // without the view, no netlink shim either
    let script = "test -e /sys/class/infiniband/t0 && echo shown || echo hidden; \
        echo \"preload=${LD_PRELOAD:-} table=${SOFTRNIC_NLDEV:-none}\"; ibv_devices";
    let mut argv = vec![rnic.to_str().unwrap(), "exec", "--sock-dir"];
    argv.push(d.sock_dir().to_str().unwrap());
    argv.extend(["--", "sh", "-c", script]);
    let mut c = nested_full(&argv);
    if is_root() {
        // the namespaces as nobody: a root rnic needs no user namespace
        let mut s = Command::new("setpriv");
        s.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        s.arg(c.get_program())
            .args(c.get_args())
            .stdin(Stdio::null());
        c = s;
    }
    let out = run("rnic exec in full namespaces", c);
    assert!(out.ok(), "{out}");
    assert!(out.stdout.starts_with("hidden\n"), "{out}");
    assert!(!out.stdout.contains("libsoftrnic_nlshim"), "{out}");
    assert!(out.stdout.contains(" table=none\n"), "{out}");
    assert!(
        out.stdout.contains("t0") && out.stdout.contains("t1"),
        "{out}"
    );
    assert!(
        out.stderr
            .contains("rnic exec: no view of /sys/class/infiniband")
            && out.stderr.contains("running without it"),
        "{out}"
    );
}

/// Two namespaces over a veth (tag `tag`) for `test`, which needs
/// `progs`; None after [`testkit::skip_or_fail`] when this machine cannot.
fn veth_for(test: &str, tag: &str, progs: &[&str]) -> Option<testkit::rnicd_pair::Veth> {
    if let Err(why) = testkit::netns::available() {
        testkit::skip_or_fail(test, &why.to_string());
        return None;
    }
    if let Err(why) = prerequisites(progs) {
        testkit::skip_or_fail(test, &why);
        return None;
    }
    Some(testkit::rnicd_pair::Veth::create(tag, 1500).expect("namespaces and veth"))
}

#[test]
fn a_device_on_an_interface_shows_that_interface_as_its_netdev() {
    let Some(veth) = veth_for("the interface view test", "xv", &["setpriv"]) else {
        return;
    };
    let pair = match testkit::rnicd_pair::RnicdPair::try_start(veth, "afpacket") {
        Ok(p) => p,
        Err(why) => return testkit::skip_or_fail("the interface view test", &why),
    };
    let a = &pair.a;
    let script = format!(
        "cd /sys/class/infiniband/{0}; n=$(ls device/net); echo \"$n $(cat parent) \
         $(cat ports/1/gid_attrs/ndevs/3) $(cat ports/1/gids/3)\"; ip -4 -o addr show dev $n",
        a.dev
    );
    let mut c = a.command(profile_dir().join("rnic").to_str().unwrap());
    c.args(["exec", "--", "sh", "-c", &script]);
    let out = run("rnic exec in A", c);
    assert!(out.ok(), "{out}");
    let mut lines = out.stdout.lines();
    let first: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    let ifa = pair.veth.if_a.as_str();
    assert_eq!(first[..3], [ifa, ifa, ifa], "{out}");
    let gid: std::net::Ipv6Addr = first[3].parse().expect("a GID");
    assert_eq!(gid.to_ipv4_mapped(), Some(a.addr), "{out}");
    assert!(
        lines
            .next()
            .unwrap_or("")
            .contains(&format!("inet {}/", a.addr)),
        "{out}"
    );
}

/// A program that hosts its device (`SOFTRNIC_LOCAL`) sees it in the view
/// as the drop-in in it answers: `srnic0` alone, its netdev, GID and port
/// state in sysfs and `/dev/infiniband/uverbs0`, the same that
/// `ibv_devinfo` reports once the program has opened the port (root: the
/// port needs CAP_NET_RAW). No rnicd runs.
#[test]
fn a_device_the_program_hosts_is_in_its_view() {
    let Some(veth) = veth_for("the hosted-device view test", "hv", &["ibv_devinfo"]) else {
        return;
    };
    let script = "cd /sys/class/infiniband; ls; cd srnic0; echo \"$(ls device/net) \
        $(cat ports/1/gid_attrs/ndevs/3) $(cat ports/1/gids/3) $(cat ports/1/state)\"; \
        cat /sys/class/infiniband_verbs/uverbs0/ibdev; test -c /dev/infiniband/uverbs0 && echo chr; \
        ibv_devinfo -v";
    let mut c = testkit::rnicd::rnic_exec_hosting(&veth.ns_a, &veth.if_a);
    c.args(["sh", "-c", script])
        .env_remove("SOFTRNIC_LOCAL_NAME");
    let out = run("rnic exec with SOFTRNIC_LOCAL", c);
    assert!(out.ok(), "{out}");
    let mut lines = out.stdout.lines();
    assert_eq!(
        lines.next(),
        Some("srnic0"),
        "the hosted device alone\n{out}"
    );
    let seen: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    let ifa = veth.if_a.as_str();
    assert_eq!(seen[..2], [ifa, ifa], "{out}");
    let gid: std::net::Ipv6Addr = seen[2].parse().expect("a GID");
    assert_eq!(
        gid.to_ipv4_mapped(),
        Some(testkit::rnicd_pair::ADDR_A),
        "{out}"
    );
    assert_eq!(seen[3..], ["4:", "ACTIVE"], "{out}");
    assert_eq!(lines.next(), Some("srnic0"), "uverbs0's device\n{out}");
    assert_eq!(lines.next(), Some("chr"), "{out}");
    // the drop-in, hosting the device, answers as the view shows it
    let devinfo = lines.collect::<Vec<_>>().join("\n");
    assert!(devinfo.contains("hca_id:\tsrnic0"), "{out}");
    assert!(devinfo.contains("PORT_ACTIVE (4)"), "{out}");
    assert!(devinfo.contains(&format!("{gid}, RoCE v2")), "{out}");
}
