//! The XDP program and the few bpf(2) calls it takes: create the XSKMAP,
//! load a program section of the object build.rs compiled from
//! `nic/bpf/xdp_roce.c`, attach it to an interface through a BPF link.
//!
//! The loader is deliberately tiny: the object has one map (created here,
//! not from the object) and programs without global data or calls, so
//! loading is "take the section's instructions, point each reference to
//! the map at our map's fd". A link, unlike a netlink attachment, is owned
//! by its file descriptor: closing it — or the process dying — detaches
//! the program, from any thread in any network namespace.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The object compiled from `nic/bpf/xdp_roce.c`; empty when build.rs
/// could not compile it.
pub static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xdp_roce.o"));
/// "ok", or why build.rs could not compile the program.
pub const BUILD_STATUS: &str = env!("SOFTRNIC_XDP_BUILD");

/// Section of the single-buffer program.
pub const SECTION: &str = "xdp";
/// Section of the multi-buffer program (BPF_F_XDP_HAS_FRAGS).
pub const SECTION_FRAGS: &str = "xdp.frags";
const MAPS_SECTION: &str = ".maps";

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type` BPF_XDP.
const BPF_XDP: u32 = 37;
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
const BPF_PSEUDO_MAP_FD: u8 = 1;
/// BPF_LD | BPF_IMM | BPF_DW: the 16-byte load of a 64-bit immediate.
const LD_IMM64: u8 = 0x18;
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// What is wrong with the embedded object (a build problem, not a runtime one).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ObjectError {
    #[error("not a 64-bit ELF object of this machine's byte order")]
    NotElf,
    #[error("truncated or malformed ELF object")]
    Malformed,
    #[error("no section {0}")]
    NoSection(String),
    #[error("a relocation in {0} refers to something other than the XSKMAP in .maps")]
    UnsupportedRelocation(String),
}

/// A program section ready for BPF_PROG_LOAD.
#[derive(Debug)]
pub struct Program {
    pub section: String,
    /// Raw 8-byte instructions.
    pub insns: Vec<u8>,
    /// Indices of the LD_IMM64 instructions that load the XSKMAP.
    pub map_refs: Vec<usize>,
    pub license: CString,
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// One ELF64 section header (the fields we use).
struct Section<'a> {
    name: &'a [u8],
    kind: u32,
    data: &'a [u8],
    link: u32,
    info: u32,
}

const SHT_SYMTAB: u32 = 2;
const SHT_REL: u32 = 9;

fn sections(obj: &[u8]) -> Result<Vec<Section<'_>>, ObjectError> {
    let native = if cfg!(target_endian = "little") { 1 } else { 2 };
    if obj.get(..4) != Some(b"\x7fELF") || obj.get(4) != Some(&2) || obj.get(5) != Some(&native) {
        return Err(ObjectError::NotElf);
    }
    let bad = ObjectError::Malformed;
    let shoff = u64_at(obj, 0x28).ok_or(ObjectError::Malformed)? as usize;
    let shentsize = u16_at(obj, 0x3a).ok_or(ObjectError::Malformed)? as usize;
    let shnum = u16_at(obj, 0x3c).ok_or(ObjectError::Malformed)? as usize;
    let shstrndx = u16_at(obj, 0x3e).ok_or(ObjectError::Malformed)? as usize;
    if shentsize < 64 {
        return Err(bad);
    }
    let mut raw = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let h = shoff
            .checked_add(i * shentsize)
            .ok_or(ObjectError::Malformed)?;
        let field = |o| u32_at(obj, h + o).ok_or(ObjectError::Malformed);
        let (off, size) = (u64_at(obj, h + 24), u64_at(obj, h + 32));
        let (off, size) = (
            off.ok_or(ObjectError::Malformed)? as usize,
            size.ok_or(ObjectError::Malformed)? as usize,
        );
        let kind = field(4)?;
        // SHT_NOBITS (.bss) has no bytes in the file
        let data = if kind == 8 {
            &[][..]
        } else {
            obj.get(off..off.checked_add(size).ok_or(ObjectError::Malformed)?)
                .ok_or(ObjectError::Malformed)?
        };
        raw.push((field(0)?, kind, data, field(40)?, field(44)?));
    }
    let strtab = raw.get(shstrndx).ok_or(ObjectError::Malformed)?.2;
    raw.into_iter()
        .map(|(name, kind, data, link, info)| {
            let name = strtab.get(name as usize..).ok_or(ObjectError::Malformed)?;
            let name = &name[..name
                .iter()
                .position(|&c| c == 0)
                .ok_or(ObjectError::Malformed)?];
            Ok(Section {
                name,
                kind,
                data,
                link,
                info,
            })
        })
        .collect()
}

/// Takes program `section` out of ELF object `obj`.
pub fn extract(obj: &[u8], section: &str) -> Result<Program, ObjectError> {
    let secs = sections(obj)?;
    let find = |n: &str| secs.iter().position(|s| s.name == n.as_bytes());
    let prog = find(section).ok_or_else(|| ObjectError::NoSection(section.into()))?;
    let maps = find(MAPS_SECTION);
    let insns = secs[prog].data.to_vec();
    if insns.is_empty() || insns.len() % 8 != 0 {
        return Err(ObjectError::Malformed);
    }
    let license = find("license")
        .map(|i| secs[i].data)
        .ok_or_else(|| ObjectError::NoSection("license".into()))?;
    let license = CString::new(license.split(|&c| c == 0).next().unwrap_or_default())
        .map_err(|_| ObjectError::Malformed)?;
    let mut map_refs = Vec::new();
    for rel in secs
        .iter()
        .filter(|s| s.kind == SHT_REL && s.info as usize == prog)
    {
        let symtab = secs
            .get(rel.link as usize)
            .filter(|s| s.kind == SHT_SYMTAB)
            .ok_or(ObjectError::Malformed)?;
        for r in rel.data.chunks_exact(16) {
            let (off, info) = (
                u64_at(r, 0).unwrap_or(u64::MAX) as usize,
                u64_at(r, 8).unwrap_or(0),
            );
            let sym = (info >> 32) as usize;
            let shndx = u16_at(symtab.data, sym * 24 + 6).ok_or(ObjectError::Malformed)? as usize;
            let unsupported = || ObjectError::UnsupportedRelocation(section.into());
            if Some(shndx) != maps || off % 8 != 0 || insns.get(off) != Some(&LD_IMM64) {
                return Err(unsupported());
            }
            map_refs.push(off / 8);
        }
    }
    Ok(Program {
        section: section.into(),
        insns,
        map_refs,
        license,
    })
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: bpf(2) reads and writes at most size_of::<T>() bytes of
    // `attr`, a live, writable, zero-padded `#[repr(C)]` prefix of union
    // bpf_attr for `cmd`; pointers inside it (instructions, license, log)
    // point to buffers the caller keeps alive across the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn fd_of(r: libc::c_long) -> OwnedFd {
    // SAFETY: the callers pass the non-negative result of a bpf(2) command
    // that returns a new descriptor, owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(r as i32) }
}

fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, c) in n[..15].iter_mut().zip(s.bytes()) {
        *d = c;
    }
    n
}

/// A new XSKMAP of `entries` queues.
pub fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct MapCreate {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
        inner_map_fd: u32,
        numa_node: u32,
        map_name: [u8; 16],
    }
    let mut a = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_flags: 0,
        inner_map_fd: 0,
        numa_node: 0,
        map_name: name16("xsks"),
    };
    bpf(BPF_MAP_CREATE, &mut a).map(fd_of)
}

/// `map[key] = value` for a map of u32 → u32.
pub fn map_update(map: &OwnedFd, key: u32, value: u32) -> io::Result<()> {
    #[repr(C)]
    struct MapUpdate {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let mut a = MapUpdate {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0,
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// Why the kernel refused the program, with the verifier's last words.
#[derive(Debug, thiserror::Error)]
#[error("BPF_PROG_LOAD {section}: {source}{}", if log.is_empty() { String::new() } else { format!("; verifier: {log}") })]
pub struct LoadError {
    pub section: String,
    pub source: io::Error,
    pub log: String,
}

/// Loads `prog` with its map references pointing at `map`.
pub fn load(prog: &Program, map: &OwnedFd) -> Result<OwnedFd, LoadError> {
    #[repr(C)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
    }
    let mut insns = prog.insns.clone();
    for &i in &prog.map_refs {
        // dst register in the low nibble, src (the pseudo tag) in the high one
        insns[i * 8 + 1] = (insns[i * 8 + 1] & 0x0f) | (BPF_PSEUDO_MAP_FD << 4);
        insns[i * 8 + 4..i * 8 + 8].copy_from_slice(&map.as_raw_fd().to_ne_bytes());
    }
    let frags = prog.section == SECTION_FRAGS;
    let mut log = vec![0u8; 0];
    let attempt = |log: &mut Vec<u8>| {
        let mut a = ProgLoad {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: (insns.len() / 8) as u32,
            insns: insns.as_ptr() as u64,
            license: prog.license.as_ptr() as u64,
            log_level: u32::from(!log.is_empty()),
            log_size: log.len() as u32,
            log_buf: if log.is_empty() {
                0
            } else {
                log.as_mut_ptr() as u64
            },
            kern_version: 0,
            prog_flags: if frags { BPF_F_XDP_HAS_FRAGS } else { 0 },
            prog_name: name16(if frags { "xdp_roce_frags" } else { "xdp_roce" }),
            prog_ifindex: 0,
            expected_attach_type: BPF_XDP,
        };
        bpf(BPF_PROG_LOAD, &mut a).map(fd_of)
    };
    match attempt(&mut log) {
        Ok(fd) => Ok(fd),
        Err(source) => {
            // again with the verifier's log, as libbpf does
            log = vec![0u8; 1 << 16];
            let _ = attempt(&mut log);
            let text =
                String::from_utf8_lossy(&log[..log.iter().position(|&c| c == 0).unwrap_or(0)])
                    .into_owned();
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            let log = tail.into_iter().rev().collect::<Vec<_>>().join(" / ");
            Err(LoadError {
                section: prog.section.clone(),
                source,
                log,
            })
        }
    }
}

/// Attaches `prog` to interface `ifindex` in `mode` (XDP_FLAGS_SKB_MODE or
/// XDP_FLAGS_DRV_MODE); the program stays attached while the link lives.
pub fn attach(prog: &OwnedFd, ifindex: i32, mode: u32) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct LinkCreate {
        prog_fd: u32,
        target_ifindex: u32,
        attach_type: u32,
        flags: u32,
    }
    let mut a = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex as u32,
        attach_type: BPF_XDP,
        flags: mode,
    };
    bpf(BPF_LINK_CREATE, &mut a).map(fd_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_object_has_both_programs_with_one_map_reference_each() {
        if OBJECT.is_empty() {
            return testkit::skip_or_fail(
                "the_embedded_object_has_both_programs_with_one_map_reference_each",
                &format!("the XDP program was not built: {BUILD_STATUS}"),
            );
        }
        for s in [SECTION, SECTION_FRAGS] {
            let p = extract(OBJECT, s).unwrap();
            assert_eq!(p.map_refs.len(), 1, "{s}");
            assert_eq!(p.insns[p.map_refs[0] * 8], LD_IMM64);
            assert_eq!(p.license.to_str().unwrap(), "MIT OR Apache-2.0");
        }
        assert_eq!(
            extract(OBJECT, "tc").unwrap_err(),
            ObjectError::NoSection("tc".into())
        );
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        assert_eq!(extract(b"", SECTION).unwrap_err(), ObjectError::NotElf);
        let mut obj = OBJECT.to_vec();
        if obj.is_empty() {
            return;
        }
        for cut in [16, 64, obj.len() / 2, obj.len() - 1] {
            let _ = extract(&obj[..cut], SECTION);
        }
        for i in (0..obj.len()).step_by(7) {
            obj[i] ^= 0xa5;
            let _ = extract(&obj, SECTION);
            let _ = extract(&obj, SECTION_FRAGS);
        }
    }
}
