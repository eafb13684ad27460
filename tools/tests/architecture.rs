//! ARCHITECTURE.md stays true: every hop its walks name (a file, and a
//! function in it, with its type where one is named) exists; and the
//! Cargo graph keeps the shape the map describes (the client and the
//! daemon meet only in `ipc`; the drop-ins and tools use the client side;
//! path dependencies are declared once, in the workspace).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The text of the `## Walk` sections.
fn walks(doc: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in doc.lines() {
        if line.starts_with("## ") {
            inside = line.starts_with("## Walk");
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The `path/file.rs::Type::function` references between backticks: the
/// file and the names after it.
fn hops(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (i, piece) in text.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let mut parts = piece.split("::");
        let file = parts.next().unwrap_or_default();
        let is_file = file.contains('/')
            && [".rs", ".c", ".h", ".md"].iter().any(|e| file.ends_with(e))
            && file
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_.-".contains(c));
        if is_file {
            out.push((file.to_string(), parts.map(str::to_string).collect()));
        }
    }
    out
}

/// Whether `src` defines function `name` and, when `ty` is given, has an
/// `impl` of (or for) that type.
fn defines(src: &str, ty: Option<&str>, name: &str) -> bool {
    let word = |line: &str, w: &str| {
        line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|t| t == w)
    };
    let has_fn = src.lines().any(|l| {
        let t = l.trim_start();
        t.contains("fn ") && {
            let after = &t[t.find("fn ").unwrap() + 3..];
            after.starts_with(name) && after[name.len()..].starts_with(['(', '<'])
        }
    });
    let has_ty = match ty {
        None => true,
        Some(ty) => src.lines().any(|l| {
            let t = l.trim_start();
            (t.starts_with("impl") || t.starts_with("pub trait") || t.starts_with("trait"))
                && word(t, ty)
        }),
    };
    has_fn && has_ty
}

#[test]
fn every_hop_of_the_walks_exists() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let hops = hops(&walks(&doc));
    let named_fns = hops.iter().filter(|(_, n)| !n.is_empty()).count();
    assert!(
        named_fns >= 30,
        "the walks name {named_fns} functions by file: the sections `## Walk` were not found or lost their hops"
    );
    let mut missing = Vec::new();
    for (file, names) in &hops {
        let Ok(src) = std::fs::read_to_string(root.join(file)) else {
            missing.push(format!("{file}: no such file"));
            continue;
        };
        if let Some(name) = names.last() {
            let ty = (names.len() >= 2).then(|| names[names.len() - 2].as_str());
            if !defines(&src, ty, name) {
                missing.push(format!("{file}::{}: not defined there", names.join("::")));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's walks name what is gone:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_hop_checker_refuses_what_is_not_there() {
    let src = "impl Qp {\n    pub(crate) fn post_send(&mut self) {}\n}\n";
    assert!(defines(src, Some("Qp"), "post_send"));
    assert!(defines(src, None, "post_send"));
    assert!(!defines(src, Some("Rnic"), "post_send"));
    assert!(!defines(src, Some("Qp"), "post"));
    let h = hops("see `a/b.rs::T::f`, `Loop::turn` and `c/d.md`");
    assert_eq!(
        h,
        vec![
            ("a/b.rs".to_string(), vec!["T".to_string(), "f".to_string()]),
            ("c/d.md".to_string(), vec![])
        ]
    );
}

/// Each workspace crate's dependencies on other workspace crates, by kind
/// ("normal", "dev", "build").
fn graph() -> BTreeMap<String, Vec<(String, String)>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let pkgs = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = pkgs
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    pkgs.iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| names.contains(d["name"].as_str().unwrap_or_default()))
                .map(|d| {
                    let kind = d["kind"].as_str().unwrap_or("normal").to_string();
                    (d["name"].as_str().expect("name").to_string(), kind)
                })
                .collect();
            (p["name"].as_str().expect("name").to_string(), deps)
        })
        .collect()
}

/// Whether `from` reaches `to` through normal and build dependencies.
fn reaches(g: &BTreeMap<String, Vec<(String, String)>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(c) = todo.pop() {
        if c == to {
            return true;
        }
        if seen.insert(c.clone()) {
            for (d, kind) in g.get(&c).into_iter().flatten() {
                if kind != "dev" {
                    todo.push(d.clone());
                }
            }
        }
    }
    false
}

#[test]
fn the_crate_graph_has_the_shape_of_the_map() {
    let g = graph();
    for c in [
        "ipc",
        "softrnic",
        "rnicd",
        "softrnic-ibverbs",
        "softrnic-rdmacm",
    ] {
        assert!(g.contains_key(c), "no crate {c} in the workspace");
    }
    let any_dep = |c: &str, d: &str| g[c].iter().any(|(n, _)| n == d);
    // the client and the daemon meet only in ipc
    assert!(!any_dep("softrnic", "rnicd"), "softrnic depends on rnicd");
    assert!(
        !reaches(&g, "rnicd", "softrnic"),
        "rnicd depends on softrnic"
    );
    assert!(!any_dep("ipc", "softrnic") && !any_dep("ipc", "rnicd"));
    assert!(reaches(&g, "softrnic", "ipc") && reaches(&g, "rnicd", "ipc"));
    // the drop-ins and the tools use the client side only; a device
    // hosted in the application's process joins the two in one crate,
    // which the libibverbs drop-in alone uses
    for c in [
        "softrnic-ibverbs",
        "softrnic-rdmacm",
        "tools",
        "softrnic-nlshim",
    ] {
        assert!(!any_dep(c, "rnicd"), "{c} depends on rnicd");
    }
    assert!(any_dep("softrnic-local", "rnicd") && any_dep("softrnic-local", "softrnic"));
    for (c, _) in g.iter() {
        if reaches(&g, c, "rnicd") && reaches(&g, c, "softrnic") {
            assert!(
                matches!(c.as_str(), "softrnic-local" | "softrnic-ibverbs"),
                "{c} reaches both the daemon and the client"
            );
        }
    }
    // no cycle, through tests either: a crate a test or example of `c`
    // needs does not itself need `c`
    for (c, deps) in &g {
        for (d, _) in deps {
            assert!(!reaches(&g, d, c), "{c} → {d} → ... → {c}: a cycle");
        }
    }
}

#[test]
fn path_dependencies_are_declared_once_in_the_workspace() {
    let root = root();
    let mut offenders = Vec::new();
    for c in graph().keys() {
        let dir = match c.as_str() {
            "softrnic-ibverbs" => "ibverbs",
            "softrnic-rdmacm" => "rdmacm",
            "softrnic-nlshim" => "nlshim",
            "softrnic-local" => "local",
            other => other,
        };
        let toml = std::fs::read_to_string(root.join(dir).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{dir}/Cargo.toml: {e}"));
        let mut in_deps = false;
        for line in toml.lines() {
            let t = line.trim();
            if t.starts_with('[') {
                in_deps = t.contains("dependencies");
            } else if in_deps && t.contains("path") && t.contains('=') {
                offenders.push(format!("{dir}/Cargo.toml: {t}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "path dependencies outside the workspace's table:\n{}",
        offenders.join("\n")
    );
}
