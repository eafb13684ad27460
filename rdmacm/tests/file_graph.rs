//! The library's files use one another without a cycle (the graph drawn
//! in `src/lib.rs`'s docs): each file of `src/` names the others it uses
//! as `crate::<file>` (`lib.rs` as `<file>::`), and following those names
//! from any file never leads back to it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The names a line of code gives after `prefix`: `prefix name` or
/// `prefix{a, b::c, ...}` (the first segment of each).
fn names_after(line: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in line.match_indices(prefix) {
        let before = line[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &line[i + prefix.len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                out.extend(group.split(',').map(|p| ident(p.trim())));
            }
            None => out.push(ident(rest)),
        }
    }
    out
}

/// Each file of `src/` (tests and the test-only fake aside) and the files
/// it uses.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, String> = std::fs::read_dir(src)
        .expect("rdmacm/src")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| Some(f.strip_suffix(".rs")?.to_string()))
        .filter(|m| m != "fake")
        .map(|m| {
            let text = std::fs::read_to_string(src.join(format!("{m}.rs"))).expect("source");
            (m, text)
        })
        .collect();
    files.insert(
        "abi".into(),
        std::fs::read_to_string(src.join("abi/mod.rs")).unwrap(),
    );
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let root_fns = ["global", "SYMBOL_TABLE"];
    let mut g = BTreeMap::new();
    for (m, text) in &files {
        let code = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .filter(|l| !l.trim_start().starts_with("mod ") && !l.contains(" mod "));
        let mut uses = BTreeSet::new();
        for line in code {
            let names = if m == "lib" {
                modules
                    .iter()
                    .flat_map(|n| {
                        names_after(line, &format!("{n}::"))
                            .into_iter()
                            .map(move |_| n.clone())
                    })
                    .collect()
            } else {
                names_after(line, "crate::")
            };
            for n in names {
                if root_fns.contains(&n.as_str()) {
                    uses.insert("lib".to_string());
                } else if modules.contains(&n) && n != *m {
                    uses.insert(n);
                }
            }
        }
        g.insert(m.clone(), uses);
    }
    g
}

/// A cycle through `at`, if one is reachable from it.
fn cycle(
    g: &BTreeMap<String, BTreeSet<String>>,
    at: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == at) {
        let mut c = path[i..].to_vec();
        c.push(at.to_string());
        return Some(c);
    }
    if done.contains(at) {
        return None;
    }
    path.push(at.to_string());
    for next in g.get(at).into_iter().flatten() {
        if let Some(c) = cycle(g, next, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(at.to_string());
    None
}

#[test]
fn the_files_use_one_another_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    // the graph is read at all: the hub of the ID's state is used
    let users: Vec<_> = g.iter().filter(|(_, u)| u.contains("state")).collect();
    assert!(users.len() >= 5, "files that use state.rs: {users:?}");
    assert!(
        g["lib"].contains("rnicd"),
        "lib.rs chooses the backend: {g:?}"
    );
    assert!(!g["id"].contains("rnicd"), "id.rs names no backend: {g:?}");
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(c) = cycle(&g, m, &mut Vec::new(), &mut done) {
            panic!("a cycle of files: {}", c.join(" → "));
        }
    }
}
