//! Tools in `rnic exec`'s view of a test rnicd's devices (see
//! exec_view.rs): UCX keeps the devices, `ibstat` lists them, iproute2's
//! `rdma link` and `rdma dev` see them over RDMA netlink, and a program
//! speaking RDMA netlink itself gets the kernel's framing.

mod common;

use common::view::*;

/// The `Device:` lines of `ucx_info -d` under each `Transport:`:
/// (transport, device).
fn ucx_devices(text: &str) -> Vec<(String, String)> {
    let mut tl = String::new();
    let mut v = Vec::new();
    for l in text.lines() {
        let l = l.trim_start_matches('#').trim();
        if let Some(t) = l.strip_prefix("Transport: ") {
            tl = t.to_string();
        } else if let Some(d) = l.strip_prefix("Device: ") {
            v.push((tl.clone(), d.to_string()));
        }
    }
    v
}

/// The capability lines (`name: value`) of `tl` on `dev` in `ucx_info -d`.
fn ucx_caps(text: &str, tl: &str, dev: &str) -> Vec<(String, String)> {
    let (mut in_tl, mut in_dev, mut caps) = (false, false, Vec::new());
    for l in text.lines() {
        let l = l.trim_start_matches('#').trim();
        if let Some(t) = l.strip_prefix("Transport: ") {
            in_tl = t == tl;
            in_dev = false;
        } else if let Some(d) = l.strip_prefix("Device: ") {
            in_dev = in_tl && d == dev;
        } else if in_dev {
            if let Some((k, v)) = l.split_once(':') {
                caps.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
    }
    caps
}

#[test]
fn ucx_keeps_the_devices_it_sees_in_the_view() {
    let Some(d) = daemon_for("the UCX test (ucx-utils)", &["ucx_info", "setpriv"]) else {
        return;
    };
    for nobody in users() {
        let out = run("ucx_info -d", exec(&d, nobody, &[], &["ucx_info", "-d"]));
        assert!(out.ok(), "{out}");
        let devs = ucx_devices(&out.stdout);
        for dev in ["t0:1", "t1:1"] {
            for tl in ["rc_verbs", "ud_verbs"] {
                assert!(
                    devs.contains(&(tl.to_string(), dev.to_string())),
                    "UCX has no {tl} on {dev}: {devs:?}\n{out}"
                );
            }
            // what UCX derives from the device's attributes: 64-bit
            // atomics (IBV_ATOMIC_HCA), the port's 4096-byte MTU, one
            // path, peer failure reported (RC retry errors)
            let rc = ucx_caps(&out.stdout, "rc_verbs", dev);
            for (k, v) in [
                ("atomic_fadd", "64 bit"),
                ("atomic_cswap", "64 bit"),
                ("put_align_mtu", "<= 4K"),
                ("device num paths", "1"),
            ] {
                assert!(
                    rc.contains(&(k.to_string(), v.to_string())),
                    "rc_verbs on {dev}: no {k}: {v} in {rc:?}"
                );
            }
            assert!(
                rc.iter()
                    .any(|(k, v)| k == "error handling" && v.contains("peer failure")),
                "rc_verbs on {dev}: {rc:?}"
            );
        }
        // without the view UCX drops them (no /dev/infiniband/uverbsN)
        let out = run(
            "ucx_info -d",
            exec(&d, nobody, &["--no-view"], &["ucx_info", "-d"]),
        );
        assert!(out.ok(), "{out}");
        let devs = ucx_devices(&out.stdout);
        assert!(
            !devs.iter().any(|(_, dev)| dev.starts_with("t0")),
            "{devs:?}"
        );
    }
}

#[test]
fn ibstat_reads_the_devices_from_the_view() {
    let Some(d) = daemon_for("the ibstat test (infiniband-diags)", &["ibstat", "setpriv"]) else {
        return;
    };
    for nobody in users() {
        let out = run("ibstat", exec(&d, nobody, &[], &["ibstat"]));
        assert!(out.ok(), "{out}");
        for (dev, guid) in [("t0", "0x005352fffe000001"), ("t1", "0x005352fffe000002")] {
            let at = out
                .stdout
                .find(&format!("CA '{dev}'"))
                .unwrap_or_else(|| panic!("no CA {dev}: {out}"));
            let ca: Vec<&str> = out.stdout[at..].lines().take(17).map(str::trim).collect();
            for want in [
                format!("Node GUID: {guid}"),
                format!("Port GUID: {guid}"),
                "Number of ports: 1".into(),
                "State: Active".into(),
                "Physical state: LinkUp".into(),
                "Rate: 100".into(),
                "Link layer: Ethernet".into(),
                "Capability mask: 0x04000000".into(),
            ] {
                assert!(ca.contains(&want.as_str()), "no {want:?} for {dev}: {ca:?}");
            }
        }
        // without the view there is nothing to read
        let out = run("ibstat", exec(&d, nobody, &["--no-view"], &["ibstat"]));
        assert!(!out.stdout.contains("CA 't0'"), "{out}");
    }
}

/// The lines of `out` that start with `prefix`, their trailing blanks cut.
fn lines_from<'a>(out: &'a str, prefix: &str) -> Vec<&'a str> {
    out.lines()
        .map(str::trim_end)
        .filter(|l| l.starts_with(prefix))
        .collect()
}

/// In the view, then `rdma dev` and the view's sysfs files side by side.
const RDMA_DEV_AND_SYSFS: &str = "rdma dev && cd /sys/class/infiniband && \
    for d in t0 t1; do echo \"sysfs $d $(cat $d/fw_ver) $(cat $d/node_guid) $(cat $d/sys_image_guid)\"; done && \
    echo \"lo $(cat /sys/class/net/lo/ifindex)\"";

#[test]
fn rdma_link_and_rdma_dev_see_the_devices_over_netlink() {
    let Some(d) = daemon_for(
        "the rdma link test (iproute2)",
        &["rdma", "ibv_devinfo", "setpriv"],
    ) else {
        return;
    };
    for nobody in users() {
        let out = run("rdma link", exec(&d, nobody, &[], &["rdma", "link"]));
        assert!(out.ok(), "{out}");
        assert_eq!(
            lines_from(&out.stdout, "link "),
            [
                "link t0/1 state ACTIVE physical_state LINK_UP netdev lo",
                "link t1/1 state ACTIVE physical_state LINK_UP netdev lo",
            ],
            "{out}"
        );
        // one port of one device; the netdev's index is the kernel's
        let out = run(
            "rdma -j -d link show t1/1",
            exec(
                &d,
                nobody,
                &[],
                &["rdma", "-j", "-d", "link", "show", "t1/1"],
            ),
        );
        assert!(out.ok(), "{out}");
        let j: serde_json::Value = serde_json::from_str(&out.stdout).expect("rdma's JSON");
        assert_eq!(j.as_array().map(Vec::len), Some(1), "{out}");
        assert_eq!(j[0]["ifname"], "t1", "{out}");
        assert_eq!(j[0]["ifindex"], 1, "{out}");
        assert_eq!(j[0]["port"], 1, "{out}");
        assert_eq!(j[0]["state"], "ACTIVE", "{out}");
        assert_eq!(j[0]["netdev"], "lo", "{out}");

        // rdma dev says what the view's files say
        let out = run(
            "rdma dev",
            exec(&d, nobody, &[], &["sh", "-c", RDMA_DEV_AND_SYSFS]),
        );
        assert!(out.ok(), "{out}");
        let dev = lines_from(&out.stdout, "");
        for (i, name) in ["t0", "t1"].iter().enumerate() {
            let sysfs = lines_from(&out.stdout, &format!("sysfs {name} "));
            let f: Vec<&str> = sysfs.first().expect("sysfs line").split(' ').collect();
            // sysfs t0 softrnic 0.1.0 GUID GUID
            let (fw, guid, sys) = (format!("{} {}", f[2], f[3]), f[4], f[5]);
            let want =
                format!("{i}: {name}: node_type ca fw {fw} node_guid {guid} sys_image_guid {sys}");
            assert!(dev.contains(&want.as_str()), "no {want:?}:\n{out}");
        }
        assert_eq!(lines_from(&out.stdout, "lo "), ["lo 1"], "{out}");

        // its capabilities are what ibv_query_device says
        let out = run(
            "rdma -d dev show t0",
            exec(
                &d,
                nobody,
                &[],
                &["sh", "-c", "rdma -d dev show t0 && ibv_devinfo -v -d t0"],
            ),
        );
        assert!(out.ok(), "{out}");
        let devinfo: Vec<&str> = out
            .stdout
            .lines()
            .skip_while(|l| !l.trim().starts_with("device_cap_flags:"))
            .skip(1)
            .map(str::trim)
            .take_while(|l| {
                l.chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            })
            .collect();
        assert!(!devinfo.is_empty(), "{out}");
        let want = format!("caps: <{}>", devinfo.join(", "));
        assert_eq!(
            lines_from(&out.stdout, "    caps: "),
            [format!("    {want}")],
            "{out}"
        );

        // what it cannot answer, it says so; a device it has not, as the kernel
        let out = run(
            "rdma resource",
            exec(&d, nobody, &[], &["rdma", "resource"]),
        );
        assert!(out.failed_cleanly(), "{out}");
        assert!(out.stderr.contains("Operation not supported"), "{out}");
        let out = run(
            "rdma link show t9/1",
            exec(&d, nobody, &[], &["rdma", "link", "show", "t9/1"]),
        );
        assert!(out.failed_cleanly(), "{out}");
        assert!(out.stdout.is_empty(), "{out}");

        // --no-view: nothing answers for softrnic
        let out = run(
            "rdma link",
            exec(&d, nobody, &["--no-view"], &["rdma", "link"]),
        );
        assert!(!out.stdout.contains("t0"), "{out}");
    }
}

/// The shim's socket as a program that talks netlink itself sees it:
/// `getsockname`, the sender's address, a dump, refusals, and every
/// other socket still the kernel's.
const NETLINK_BY_HAND: &str = r#"
import os, socket, struct
HDR = "=IHHII"
def msgs(b):
    while len(b) >= 16:
        n, ty, fl, seq, pid = struct.unpack_from(HDR, b)
        yield ty, fl, seq, pid, b[16:n]
        b = b[(n + 3) & ~3:]
def attrs(b):
    out = {}
    while len(b) >= 4:
        n, t = struct.unpack_from("=HH", b)
        out[t] = b[4:n]
        b = b[(n + 3) & ~3:]
    return out
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20)
s.bind((0, 0))
pid = s.getsockname()[0]
print("bound", pid != 0)
s.sendto(struct.pack(HDR, 16, (5 << 10) + 1, 0x301, 7, 0), (0, 0))
names = []
done = False
while not done:
    data, addr = s.recvfrom(8192)
    print("from", addr)
    for ty, fl, seq, p, body in msgs(data):
        assert seq == 7 and p == pid, (seq, p, pid)
        if ty == 3:
            done = True
        else:
            names.append(attrs(body)[2].rstrip(b"\0").decode())
print("dump", " ".join(names))
def refusal(req):
    s.send(req)
    data = s.recv(8192)
    ty = struct.unpack_from(HDR, data)[1]
    return ty, struct.unpack_from("=i", data, 16)[0]
print("short", *refusal(b"\x01\x02\x03"))
print("resources", *refusal(struct.pack(HDR, 16, (5 << 10) + 9, 0x301, 8, 0)))
print("no device", *refusal(struct.pack(HDR, 16, (5 << 10) + 1, 1, 9, 0)))
s.close()
r = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
r.bind((0, 0))
r.sendto(struct.pack(HDR + "Bxxx", 20, 18, 0x301, 1, 0, 0), (0, 0))
ty = struct.unpack_from(HDR, r.recv(65536))[1]
print("route", ty == 16)
"#;

#[test]
fn a_program_talking_rdma_netlink_itself_gets_the_kernels_framing() {
    let Some(d) = daemon_for("the netlink shim test", &[PYTHON, "setpriv"]) else {
        return;
    };
    let out = run(
        "python3 netlink",
        exec(&d, false, &[], &[PYTHON, "-c", NETLINK_BY_HAND]),
    );
    assert!(out.ok(), "{out}");
    let einval = -libc::EINVAL;
    let eopnotsupp = -libc::EOPNOTSUPP;
    for want in [
        "bound True".to_string(),
        "from (0, 0)".into(),
        "dump t0 t1".into(),
        format!("short 2 {einval}"),
        format!("resources 2 {eopnotsupp}"),
        format!("no device 2 {einval}"),
        "route True".into(),
    ] {
        assert!(out.stdout.lines().any(|l| l == want), "no {want:?}:\n{out}");
    }
}
