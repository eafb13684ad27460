//! No two files of a product crate import each other, unless the pair is
//! one of the few in [`ALLOWED`], each with its reason: where one side only
//! borrows a type or a constant from the other, the type lives where both
//! can import it without a cycle.
//!
//! A file's imports are the `crate::` and `super::` paths in its code (use
//! trees expanded), resolved to the file of the module they name; a path
//! into a module's re-exports names that module's `mod.rs`. Comments and
//! doc links are not imports (they are read, never compiled), and neither
//! is test code (`#[cfg(test)]` items and the files they declare). A file
//! and its own ancestors or descendants are one module tree and are not
//! pairs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The product crates, each a folder of the workspace with a `src/`.
const CRATES: [&str; 11] = [
    "wire", "nic", "conform", "ipc", "softrnic", "rnicd", "ibverbs", "rdmacm", "tools", "nldev",
    "nlshim",
];

/// Sibling files that may import each other: (crate, file, file), each
/// file named by its module path under `src/`.
const ALLOWED: &[(&str, &str, &str)] = &[
    // The requester and the completer are two roles of one QP that talk
    // through a few named methods (ARCHITECTURE.md, "nic::transport: one
    // QP, three roles"): the requester asks the completer how far the
    // peer has acknowledged (`una`, `acked`, `rnr_wait`) and arms its
    // timer for what it sent (`on_request_sent`); the completer sends the
    // requester back (`handle_retry`, go-back-N).
    ("nic", "transport/completer", "transport/requester"),
    // The send queue both roles share (as rxe's): the requester retires
    // the WQEs it completes itself (UC, UD, local errors) through
    // `SendCtx::complete_front`, and retiring or flushing a WQE moves the
    // requester's cursor into the queue (`on_front_retired`, `on_flushed`).
    ("nic", "transport/requester", "transport/sq"),
    // `ibv_open_device` builds the context whose function table points at
    // the objects' verbs (`create_qp_ex`, `create_cq_ex`, `alloc_mw`, ...),
    // as rdma-core's providers fill `verbs_context`; every object is made
    // in that context (`Ctx`) and a QP resolves its path through the
    // device (`resolve_mac`, `ROCE_V2_GID_INDEX`).
    ("ibverbs", "device", "objects"),
];

/// `text` without comments and with every string and character literal
/// emptied (`""`, `' '`), so that neither adds a path or a brace; line
/// breaks stay.
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let (mut depth, mut j) = (0usize, 0);
            loop {
                if rest[j..].starts_with("/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with("*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else if j >= rest.len() {
                    break;
                } else {
                    j += rest[j..].chars().next().map_or(1, char::len_utf8);
                }
            }
            i += j;
        } else if let Some(len) = string_len(rest) {
            out.push_str("\"\"");
            i += len;
        } else if let Some(len) = char_len(rest) {
            out.push_str("' '");
            i += len;
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of the string literal `s` starts with (`"…"`, `b"…"`,
/// `r#"…"#`, `br"…"`, `c"…"`), if it starts with one.
fn string_len(s: &str) -> Option<usize> {
    let after_prefix = ["br", "cr", "b", "c", "r", ""]
        .iter()
        .find(|p| s.starts_with(*p) && s[p.len()..].starts_with(['"', '#']))?;
    let raw = after_prefix.ends_with('r');
    let body = &s[after_prefix.len()..];
    let hashes = if raw {
        body.chars().take_while(|&c| c == '#').count()
    } else {
        0
    };
    if !body[hashes..].starts_with('"') {
        return None;
    }
    let open = after_prefix.len() + hashes + 1;
    let close = format!("\"{}", "#".repeat(hashes));
    let mut j = open;
    while j < s.len() {
        if !raw && s[j..].starts_with('\\') {
            j += 1 + s[j + 1..].chars().next().map_or(0, char::len_utf8);
        } else if s[j..].starts_with(&close) {
            return Some(j + close.len());
        } else {
            j += s[j..].chars().next().map_or(1, char::len_utf8);
        }
    }
    Some(s.len())
}

/// The length of the character literal `s` starts with (`'x'`, `'\n'`,
/// `b'x'`, `'\u{1F600}'`), if it starts with one rather than a lifetime.
fn char_len(s: &str) -> Option<usize> {
    let q = if s.starts_with("b'") { 1 } else { 0 };
    let body = s[q..].strip_prefix('\'')?;
    let inner = if body.starts_with('\\') {
        body.find('\'').filter(|&e| e > 1)?
    } else {
        body.chars().next()?.len_utf8()
    };
    body[inner..].starts_with('\'').then_some(q + 1 + inner + 1)
}

/// Rust tokens of `code` (from [`code_of`]): identifiers, `::`, and every
/// other character alone.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_whitespace() {
            continue;
        }
        if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            out.push(code[i..end].to_string());
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            out.push("::".into());
        } else {
            out.push(c.to_string());
        }
    }
    out
}

/// Where the item starting at `at` ends (the index after it): at its `;`
/// (or `,`, for a field), after the brace block that closes it, or before
/// the bracket that closes the block it is in.
fn item_end(t: &[String], mut at: usize) -> usize {
    // its other attributes and its visibility
    while t.get(at).is_some_and(|s| s == "#") {
        at = group_end(t, at + 1);
    }
    if t.get(at).is_some_and(|s| s == "pub") {
        at += 1;
        if t.get(at).is_some_and(|s| s == "(") {
            at = group_end(t, at);
        }
    }
    let to_semicolon = t
        .get(at)
        .is_some_and(|s| ["use", "const", "static", "type", "let"].contains(&s.as_str()));
    let mut depth = 0usize;
    while at < t.len() {
        match t[at].as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" if depth == 0 => return at,
            s @ (")" | "]" | "}") => {
                depth -= 1;
                if depth == 0 && s == "}" && !to_semicolon {
                    return at + 1;
                }
            }
            ";" | "," if depth == 0 => return at + 1,
            _ => {}
        }
        at += 1;
    }
    at
}

/// The index after the bracketed group that opens at `at`.
fn group_end(t: &[String], mut at: usize) -> usize {
    let mut depth = 0usize;
    while at < t.len() {
        match t[at].as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
        at += 1;
    }
    at
}

/// `t` without its `#[cfg(test)]` items, and the names of the test-only
/// module files they declare (`#[cfg(test)] mod tests;`).
fn without_tests(t: &[String]) -> (Vec<String>, Vec<String>) {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let (mut kept, mut test_mods) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < t.len() {
        if t[i..].starts_with(&CFG_TEST.map(String::from)) {
            let end = item_end(t, i + CFG_TEST.len());
            let item = &t[i + CFG_TEST.len()..end];
            if let Some(m) = item.iter().position(|s| s == "mod") {
                if item.last().is_some_and(|s| s == ";") {
                    test_mods.push(item[m + 1].clone());
                }
            }
            i = end;
        } else {
            kept.push(t[i].clone());
            i += 1;
        }
    }
    (kept, test_mods)
}

/// The paths of the use tree at `t[at..]` under `prefix` (`a::b`,
/// `a::{b, c::d}`, `a::{self, b}`, `a::*`), pushed to `out`; returns where
/// the tree ends.
fn use_tree(
    t: &[String],
    mut at: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        match t.get(at).map(String::as_str) {
            Some("{") => {
                at += 1;
                while at < t.len() && t[at] != "}" {
                    at = use_tree(t, at, prefix.clone(), out);
                    // past `as name` to the next `,` or the `}`
                    while at < t.len() && t[at] != "," && t[at] != "}" {
                        at += 1;
                    }
                    if t.get(at).is_some_and(|s| s == ",") {
                        at += 1;
                    }
                }
                return at + 1;
            }
            Some("self") => {
                out.push(prefix);
                return at + 1;
            }
            Some(s) if s.starts_with(|c: char| c.is_alphabetic() || c == '_') => {
                prefix.push(s.to_string());
                if t.get(at + 1).is_some_and(|s| s == "::") {
                    at += 2;
                } else {
                    out.push(prefix);
                    return at + 1;
                }
            }
            _ => {
                out.push(prefix);
                return at;
            }
        }
    }
}

/// The module paths that the code `t` of module `module` names through
/// `crate::` and `super::` (inline `mod name { … }` blocks taken into
/// account for `super::`).
fn named_paths(t: &[String], module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // the inline modules we are in, with the brace depth of each
    let (mut inline, mut depth): (Vec<(String, usize)>, usize) = (Vec::new(), 0);
    let mut i = 0;
    while i < t.len() {
        let s = t[i].as_str();
        if s == "mod" && t.get(i + 2).is_some_and(|b| b == "{") {
            inline.push((t[i + 1].clone(), depth));
        } else if s == "{" {
            depth += 1;
        } else if s == "}" {
            depth -= 1;
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
        }
        let after_path = i > 0 && t[i - 1] == "::";
        if (s == "crate" || s == "super") && !after_path && t.get(i + 1).is_some_and(|n| n == "::")
        {
            let mut base: Vec<String> = module.to_vec();
            base.extend(inline.iter().map(|(n, _)| n.clone()));
            if s == "crate" {
                base.clear();
                i += 2;
            } else {
                while t.get(i).is_some_and(|s| s == "super")
                    && t.get(i + 1).is_some_and(|n| n == "::")
                {
                    base.pop();
                    i += 2;
                }
            }
            use_tree(t, i, base, &mut out);
            continue;
        }
        i += 1;
    }
    out
}

/// One crate's module files: module path (`transport/qp`; the root is
/// empty) to file.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut todo = vec![src.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                todo.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut module: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if ["mod", "lib", "main"].contains(&module.last().expect("a name").as_str()) {
                module.pop();
            }
            out.insert(module, path);
        }
    }
    out
}

/// Each module file of the crate at `src` and the other module files its
/// code imports (test code and test-only files aside).
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = modules(src);
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut code = BTreeMap::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).expect("a source file");
        let (t, test_mods) = without_tests(&tokens(&code_of(&text)));
        for m in test_mods {
            test_only.insert(module.iter().cloned().chain([m]).collect());
        }
        code.insert(module.clone(), t);
    }
    let is_test = |m: &Vec<String>| test_only.iter().any(|t| m.starts_with(t));
    let mut g = BTreeMap::new();
    for (module, t) in code.iter().filter(|(m, _)| !is_test(m)) {
        let mut uses = BTreeSet::new();
        for path in named_paths(t, module) {
            let target = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| files.contains_key(p));
            if let Some(target) = target.filter(|t| t != module && !is_test(t)) {
                uses.insert(target);
            }
        }
        g.insert(module.clone(), uses);
    }
    g
}

/// The files that import each other, neither within the other's module
/// tree, as `(a, b)` with `a < b`, named `x/y`.
fn mutual(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (a, uses) in g {
        for b in uses {
            let back = g.get(b).is_some_and(|u| u.contains(a));
            if a < b && back && !a.starts_with(b) && !b.starts_with(a) {
                out.push((a.join("/"), b.join("/")));
            }
        }
    }
    out
}

#[test]
fn no_two_files_import_each_other_but_the_allowed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = BTreeSet::new();
    let mut edges = 0;
    for krate in CRATES {
        let g = graph(&root.join(krate).join("src"));
        edges += g.values().map(BTreeSet::len).sum::<usize>();
        for (a, b) in mutual(&g) {
            found.insert((krate.to_string(), a, b));
        }
    }
    // the graph is read at all: the crates' files do import one another
    assert!(edges > 300, "only {edges} imports between files found");
    let allowed: BTreeSet<_> = ALLOWED
        .iter()
        .map(|(k, a, b)| (k.to_string(), a.to_string(), b.to_string()))
        .collect();
    let show = |s: &BTreeSet<(String, String, String)>| {
        s.iter()
            .map(|(k, a, b)| format!("  {k}: {a} <-> {b}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let new: BTreeSet<_> = found.difference(&allowed).cloned().collect();
    assert!(
        new.is_empty(),
        "files that import each other (move what one borrows from the other to where both can import it, or allow the pair in tools/tests/file_graph.rs with its reason):\n{}",
        show(&new)
    );
    let stale: BTreeSet<_> = allowed.difference(&found).cloned().collect();
    assert!(
        stale.is_empty(),
        "allowed pairs that no longer import each other (drop them from ALLOWED):\n{}",
        show(&stale)
    );
}

#[test]
fn the_reader_finds_imports_in_code_only() {
    let src = r#"
//! See [`crate::doc::Link`]: a comment.
use crate::{a::{self, X}, b::Y as Z, c};
use super::super::up;
const S: &str = "crate::in_a_string { ";
mod inline {
    use super::sibling_of_inline;
}
fn f<'a>(x: &'a u8) -> char { let _ = crate::d::e(); '{' }
#[cfg(test)]
use crate::tested;
#[cfg(test)]
mod tests {
    use crate::only_in_tests;
}
#[cfg(test)]
mod tests_file;
"#;
    let (t, test_mods) = without_tests(&tokens(&code_of(src)));
    let module = vec!["m".to_string(), "n".to_string()];
    let paths: Vec<String> = named_paths(&t, &module)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        paths,
        [
            "a",
            "a::X",
            "b::Y",
            "c",
            "up",
            "m::n::sibling_of_inline",
            "d::e"
        ]
    );
    assert_eq!(test_mods, ["tests_file"]);
}

#[test]
fn a_pair_is_two_files_that_import_each_other() {
    let m = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
    let g: BTreeMap<_, BTreeSet<_>> = [
        (m("a"), [m("b"), m("c/d")].into()),
        (m("b"), [m("a")].into()),
        (m("c"), [m("c/d")].into()),
        (m("c/d"), [m("c"), m("a")].into()),
    ]
    .into();
    assert_eq!(
        mutual(&g),
        [
            ("a".to_string(), "b".to_string()),
            ("a".to_string(), "c/d".to_string())
        ]
    );
}
