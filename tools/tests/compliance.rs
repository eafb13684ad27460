//! docs/compliance.md against the repository: every rule appears once,
//! every status is one of the three forms, every `supported` or `partial`
//! row names at least one test, and every test a row names exists — a
//! `fn name(` under `#[test]` (and not `#[ignore]`d) in the named file, or
//! a step of the C program. A renamed or deleted test turns its rows red.
//! The mutation checks at the end of the document must name rules of the
//! matrix that are `supported`, and tests that exist.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const MATRIX_HEADER: [&str; 4] = ["Rule", "Requires", "Status", "Tests"];
const MUTATION_HEADER: [&str; 4] = ["Rule", "Broken how", "Test run", "Result"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tools sits in the workspace")
        .to_path_buf()
}

/// The cells of a Markdown table row, or `None` for any other line.
fn cells(line: &str) -> Option<Vec<String>> {
    let t = line.trim();
    if !(t.starts_with('|') && t.ends_with('|') && t.len() > 1) {
        return None;
    }
    Some(
        t[1..t.len() - 1]
            .split('|')
            .map(|c| c.trim().to_string())
            .collect(),
    )
}

/// The rows (line number, cells) of every table whose header is `header`.
fn tables(doc: &str, header: &[&str]) -> Vec<(usize, Vec<String>)> {
    let mut rows = Vec::new();
    let mut lines = doc.lines().enumerate().peekable();
    while let Some((_, line)) = lines.next() {
        let is_header =
            cells(line).is_some_and(|c| c.iter().map(String::as_str).eq(header.iter().copied()));
        if !is_header {
            continue;
        }
        // the |---|---| line
        lines.next();
        while let Some(&(n, line)) = lines.peek() {
            let Some(c) = cells(line) else { break };
            rows.push((n + 1, c));
            lines.next();
        }
    }
    rows
}

/// The `code spans` of a cell.
fn spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// Whether `src` defines `fn name(` under a `#[test]` attribute; `Err`
/// says why not.
fn has_test(src: &str, name: &str) -> Result<(), &'static str> {
    let lines: Vec<&str> = src.lines().collect();
    let def = format!("fn {name}(");
    let mut found_fn = false;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if !(t.starts_with(&def) || t.starts_with(&format!("pub {def}"))) {
            continue;
        }
        found_fn = true;
        // the attributes and comments right above the function
        let mut test = false;
        let mut ignored = false;
        for above in lines[..i].iter().rev().take(8) {
            let a = above.trim();
            if a == "#[test]" {
                test = true;
            } else if a.starts_with("#[ignore") {
                ignored = true;
            } else if !(a.starts_with("#[") || a.starts_with("//")) {
                break;
            }
        }
        match (test, ignored) {
            (true, false) => return Ok(()),
            (true, true) => return Err("the test is #[ignore]d"),
            _ => {}
        }
    }
    Err(if found_fn {
        "the function is not a #[test]"
    } else {
        "no such function"
    })
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Why a test reference in the matrix names nothing that exists.
#[derive(Debug, thiserror::Error)]
enum BrokenReference {
    #[error("`{0}` is not of the form path::name")]
    Form(String),
    #[error("`{reference}`: no file {path}")]
    NoFile { reference: String, path: String },
    #[error("`{reference}`: {why} in {path}")]
    NoTest {
        reference: String,
        why: &'static str,
        path: String,
    },
    #[error("`{reference}`: no step \"{name}\" in {path}")]
    NoStep {
        reference: String,
        name: String,
        path: String,
    },
    #[error("`{reference}`: no crate {path}")]
    NoCrate { reference: String, path: String },
    #[error("`{reference}`: no test {name} in crate {path}")]
    NotInCrate {
        reference: String,
        name: String,
        path: String,
    },
    #[error("`{0}`: name a .rs file, a .c program or a crate")]
    Kind(String),
}

/// Checks one test reference: `path/file.rs::name`, `crate::name` (any
/// test of the crate's tests/ or src/), or `path/program.c::step`.
fn check_test(
    root: &Path,
    reference: &str,
    cache: &mut BTreeMap<PathBuf, String>,
) -> Result<(), BrokenReference> {
    let Some((path, name)) = reference.split_once("::") else {
        return Err(BrokenReference::Form(reference.into()));
    };
    let mut read = |p: PathBuf| -> Option<String> {
        if !cache.contains_key(&p) {
            let text = std::fs::read_to_string(&p).ok()?;
            cache.insert(p.clone(), text);
        }
        cache.get(&p).cloned()
    };
    let (reference, name, path) = (reference.to_string(), name.to_string(), path.to_string());
    if path.ends_with(".rs") {
        let Some(src) = read(root.join(&path)) else {
            return Err(BrokenReference::NoFile { reference, path });
        };
        has_test(&src, &name).map_err(|why| BrokenReference::NoTest {
            reference,
            why,
            path,
        })
    } else if path.ends_with(".c") {
        let Some(src) = read(root.join(&path)) else {
            return Err(BrokenReference::NoFile { reference, path });
        };
        // a step is the string literal that names it in the transcript
        if src.contains(&format!("\"{name}")) {
            Ok(())
        } else {
            Err(BrokenReference::NoStep {
                reference,
                name,
                path,
            })
        }
    } else if !path.contains('.') && !path.contains('/') {
        let mut files = Vec::new();
        rust_files(&root.join(&path).join("tests"), &mut files);
        rust_files(&root.join(&path).join("src"), &mut files);
        if files.is_empty() {
            return Err(BrokenReference::NoCrate { reference, path });
        }
        for f in files {
            if read(f).is_some_and(|src| has_test(&src, &name).is_ok()) {
                return Ok(());
            }
        }
        Err(BrokenReference::NotInCrate {
            reference,
            name,
            path,
        })
    } else {
        Err(BrokenReference::Kind(reference))
    }
}

#[test]
fn every_row_names_tests_that_exist() {
    let root = root();
    let path = root.join("docs/compliance.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rows = tables(&doc, &MATRIX_HEADER);
    assert!(
        rows.len() >= 50,
        "only {} rows found in {}",
        rows.len(),
        path.display()
    );

    let mut broken: Vec<String> = Vec::new();
    let mut cache = BTreeMap::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut status_of: BTreeMap<String, String> = BTreeMap::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (line, c) in &rows {
        if c.len() != 4 {
            broken.push(format!("line {line}: {} cells, not 4", c.len()));
            continue;
        }
        let (rule, status, tests) = (&c[0], &c[2], &c[3]);
        let row = format!("line {line} `{rule}`");
        if rule.is_empty() {
            broken.push(format!("{row}: no rule"));
        }
        if let Some(first) = seen.insert(rule.clone(), *line) {
            broken.push(format!("{row}: the rule already has a row at line {first}"));
        }
        if c[1].is_empty() {
            broken.push(format!("{row}: says nothing of what the rule requires"));
        }
        let kind = match status.as_str() {
            "supported" => "supported",
            "partial" => "partial",
            s if s.starts_with("not supported: ") && s.len() > "not supported: ".len() => {
                "not supported"
            }
            s => {
                broken.push(format!(
                    "{row}: status `{s}` is none of supported, partial, not supported: <reason>"
                ));
                continue;
            }
        };
        *counts.entry(kind).or_default() += 1;
        status_of.insert(rule.clone(), kind.to_string());
        let named = spans(tests);
        if kind != "not supported" && named.is_empty() {
            broken.push(format!("{row}: {kind}, but no test is named"));
        }
        for t in named {
            if let Err(e) = check_test(&root, &t, &mut cache) {
                broken.push(format!("{row}: {e}"));
            }
        }
    }

    let mutations = tables(&doc, &MUTATION_HEADER);
    assert!(
        !mutations.is_empty(),
        "no mutation checks in {}",
        path.display()
    );
    for (line, c) in &mutations {
        if c.len() != 4 {
            broken.push(format!("mutation line {line}: {} cells, not 4", c.len()));
            continue;
        }
        let row = format!("mutation line {line} `{}`", c[0]);
        match status_of.get(&c[0]).map(String::as_str) {
            Some("supported") => {}
            Some(s) => broken.push(format!("{row}: the rule is {s}, not supported")),
            None => broken.push(format!("{row}: no such rule in the matrix")),
        }
        let named = spans(&c[2]);
        if named.is_empty() {
            broken.push(format!("{row}: no test named"));
        }
        for t in named {
            if let Err(e) = check_test(&root, &t, &mut cache) {
                broken.push(format!("{row}: {e}"));
            }
        }
        if !c[3].starts_with("failed") {
            broken.push(format!("{row}: the test run did not fail"));
        }
    }

    eprintln!(
        "{} rules: {counts:?}; {} mutation checks",
        rows.len(),
        mutations.len()
    );
    assert!(
        broken.is_empty(),
        "{} broken rows in docs/compliance.md:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_checker_sees_tests_and_ignores() {
    let src = "#[test]\nfn plain() {}\n\n/// doc\n#[test]\n#[ignore = \"slow\"]\nfn slow() {}\n\nfn helper() {}\n\nproptest! {\n    #[test]\n    fn prop(x in 0..3u8) {}\n}\n";
    assert_eq!(has_test(src, "plain"), Ok(()));
    assert_eq!(has_test(src, "prop"), Ok(()));
    assert_eq!(has_test(src, "slow"), Err("the test is #[ignore]d"));
    assert_eq!(
        has_test(src, "helper"),
        Err("the function is not a #[test]")
    );
    assert_eq!(has_test(src, "missing"), Err("no such function"));
    assert_eq!(has_test(src, "plai"), Err("no such function"));
    let doc = "| Rule | Requires | Status | Tests |\n|---|---|---|---|\n| A | x | supported | `a.rs::t`, `b.rs::u` |\n| B | y | not supported: no | |\n\ntext\n";
    let rows = tables(doc, &MATRIX_HEADER);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].0, 3);
    assert_eq!(spans(&rows[0].1[3]), ["a.rs::t", "b.rs::u"]);
    assert_eq!(rows[1].1, ["B", "y", "not supported: no", ""]);
}
