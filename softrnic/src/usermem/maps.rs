//! Reading `/proc/self/maps` and `/proc/self/smaps`: the mappings a
//! registration is checked against.

use super::*;

/// One line of /proc/self/maps: its fields (through `Deref`) and path.
#[derive(Clone, Debug)]
pub(super) struct MapLine {
    pub(super) head: Head,
    pub(super) path: String,
}

impl std::ops::Deref for MapLine {
    type Target = Head;
    fn deref(&self) -> &Head {
        &self.head
    }
}

impl MapLine {
    pub(super) fn len(&self) -> u64 {
        (self.end - self.start) as u64
    }
}

/// The fields of a maps line before the path.
#[derive(Clone, Copy, Debug)]
pub(super) struct Head {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) prot: i32,
    pub(super) private: bool,
    pub(super) offset: u64,
    pub(super) dev: u64,
    pub(super) ino: u64,
}

/// Parses the fields before the path (allocates nothing: the fork child
/// handler uses it); the rest of the line's words.
pub(super) fn parse_head(l: &str) -> Option<(Head, std::str::SplitWhitespace<'_>)> {
    let mut w = l.split_whitespace();
    let (a, b) = w.next()?.split_once('-')?;
    let perms = w.next()?.as_bytes();
    let offset = u64::from_str_radix(w.next()?, 16).ok()?;
    let (maj, min) = w.next()?.split_once(':')?;
    let ino: u64 = w.next()?.parse().ok()?;
    if perms.len() < 4 {
        return None;
    }
    let mut prot = 0;
    if perms[0] == b'r' {
        prot |= libc::PROT_READ;
    }
    if perms[1] == b'w' {
        prot |= libc::PROT_WRITE;
    }
    if perms[2] == b'x' {
        prot |= libc::PROT_EXEC;
    }
    let dev = libc::makedev(
        u32::from_str_radix(maj, 16).ok()?,
        u32::from_str_radix(min, 16).ok()?,
    );
    let (start, end) = (
        usize::from_str_radix(a, 16).ok()?,
        usize::from_str_radix(b, 16).ok()?,
    );
    if end <= start {
        return None;
    }
    let h = Head {
        start,
        end,
        prot,
        private: perms[3] == b'p',
        offset,
        dev,
        ino,
    };
    Some((h, w))
}

pub(super) fn parse_line(l: &str) -> Option<MapLine> {
    let (head, rest) = parse_head(l)?;
    Some(MapLine {
        head,
        path: rest.collect::<Vec<_>>().join(" "),
    })
}

pub(super) fn read_maps() -> Result<Vec<MapLine>, UserMemError> {
    let text = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| UserMemError::Os("/proc/self/maps", e))?;
    Ok(text.lines().filter_map(parse_line).collect())
}

/// The `VmFlags` of the mappings starting at `starts`, from an smaps text.
pub(super) fn vm_flags(smaps: &str, starts: &[usize]) -> BTreeMap<usize, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut cur = None;
    for l in smaps.lines() {
        if let Some(m) = parse_line(l) {
            cur = starts.contains(&m.start).then_some(m.start);
        } else if let (Some(s), Some(f)) = (cur, l.strip_prefix("VmFlags:")) {
            out.insert(s, f.split_whitespace().map(String::from).collect());
        }
    }
    out
}

/// Why a private mapping with these smaps `VmFlags` cannot be copied.
pub(super) fn special_flags(flags: &[String]) -> Option<&'static str> {
    let has = |f: &str| flags.iter().any(|x| x == f);
    if has("ht") {
        Some("hugetlb memory")
    } else if has("io") || has("pf") || has("mm") {
        Some("device memory")
    } else {
        None
    }
}
