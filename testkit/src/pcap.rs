//! Capture files the tests read: the repository's own `pcaps/` and the
//! third-party rxe captures kept beside the repository.

use std::path::{Path, PathBuf};

/// Every `.pcap` below `dir`, sorted.
pub fn pcap_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display()));
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "pcap") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The folder of the third-party rxe captures: `$SOFTRNIC_RXE_PCAPS`, or
/// `pcaps/rxe-public` in the [shared folder](crate::shared_dir). It may not
/// exist.
pub fn rxe_pcaps_path() -> PathBuf {
    match std::env::var_os("SOFTRNIC_RXE_PCAPS") {
        Some(d) => PathBuf::from(d),
        None => crate::shared_dir().join("pcaps/rxe-public"),
    }
}

/// The folder of the rxe captures when it is there; otherwise `None`
/// after [`crate::skip_or_fail`] (so under CI the test fails instead).
pub fn rxe_pcaps(test: &str) -> Option<PathBuf> {
    let dir = rxe_pcaps_path();
    if dir.is_dir() {
        return Some(dir);
    }
    crate::skip_or_fail(
        test,
        &format!(
            "{} is missing (set SOFTRNIC_RXE_PCAPS to the folder); the third-party \
             captures are not in this checkout",
            dir.display()
        ),
    );
    None
}
