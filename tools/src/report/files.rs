//! The files a run leaves: `--hgrm` histograms, the `--plot` SVG and the
//! `--json` document, each announced on stderr as `rnic: wrote FILE`.

use crate::perf::{Settings, SizeResult};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A file that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {} is not a directory", .path.display(), .dir.display())]
    NoDir { path: PathBuf, dir: PathBuf },
}

impl crate::Failure for WriteError {}

/// Writes `text` to `path`.
pub fn write_file(path: &Path, text: impl AsRef<[u8]>) -> Result<(), WriteError> {
    std::fs::write(path, text).map_err(|source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Checks that each output's folder exists, before a run spends its time.
pub fn check_dirs<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Result<(), WriteError> {
    for p in paths {
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(WriteError::NoDir {
                    path: p.to_path_buf(),
                    dir: dir.to_path_buf(),
                });
            }
        }
    }
    Ok(())
}

/// `FILE` for one size; `stem-<size>B.ext` for each of several.
pub fn per_size_path(path: &Path, size: usize, several: bool) -> PathBuf {
    if !several {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map_or("hist".into(), |s| s.to_string_lossy().into_owned());
    let name = match path.extension() {
        Some(e) => format!("{stem}-{size}B.{}", e.to_string_lossy()),
        None => format!("{stem}-{size}B"),
    };
    path.with_file_name(name)
}

/// `--hgrm FILE`: each size's histogram (one file per size when there are
/// several, see [`per_size_path`]).
pub fn write_hgrms(path: &Path, results: &[SizeResult]) -> Result<(), WriteError> {
    let several = results.len() > 1;
    for r in results {
        let p = per_size_path(path, r.bytes, several);
        write_file(&p, super::hgrm(&r.hist))?;
        eprintln!("rnic: wrote {}", p.display());
    }
    Ok(())
}

/// `--plot FILE.svg`: the latency distribution of every size, titled with
/// the test and where it ran (`note`).
pub fn write_plot(
    path: &Path,
    s: &Settings,
    note: &str,
    results: &[SizeResult],
) -> Result<(), WriteError> {
    let t = format!("rnic perf {} {}: {note}", s.verb.name(), s.mode.name());
    write_file(path, super::svg(&t, results))?;
    eprintln!("rnic: wrote {}", path.display());
    Ok(())
}

/// `--json FILE`: the document, pretty-printed.
pub fn write_json(path: &Path, doc: &Value) -> Result<(), WriteError> {
    let text = serde_json::to_string_pretty(doc).expect("JSON of plain values");
    write_file(path, text + "\n")?;
    eprintln!("rnic: wrote {}", path.display());
    Ok(())
}
