//! Memory regions and memory windows with their keys and checks.
//!
//! Keys follow what rxe and ConnectX do: the upper 24 bits index the key
//! table, the low 8 bits are a key byte drawn at random for each
//! registration, so keys are neither sequential nor reusable after
//! deregistration (IBA 10.6.2: an R_Key must be validated on every access).
//! Regions and windows share the one index space, so an R_Key names either.
//!
//! Memory windows (IBA 10.6.7) are type 1 (bound by the Bind Memory Window
//! verb, tied to their PD) or type 2B (bound by a BIND_MW work request,
//! usable only through the QP that bound them, invalidated by LOCAL_INV or
//! by a SEND with Invalidate). A bind chooses a new key byte ("tag"), so
//! the window's previous R_Key stops working.
//!
//! Regions and windows share the key table and its checks, so both live
//! here; the unit tests are in `tests.rs`.

use super::memory::Memory;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// `IBV_ACCESS_*` flags.
pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 2;
    pub const REMOTE_READ: u32 = 4;
    pub const REMOTE_ATOMIC: u32 = 8;
    /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to the region.
    pub const MW_BIND: u32 = 16;
    /// `IBV_ACCESS_ZERO_BASED`: a window's addresses count from 0.
    pub const ZERO_BASED: u32 = 32;
    /// The rights a memory window may grant.
    pub const MW_RIGHTS: u32 = REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC | ZERO_BASED;
}

/// Whether `len` bytes from `mem_offset` lie inside `mem`, and `len` bytes
/// from the virtual address `addr` do not wrap (a region's range, checked
/// without overflow: the lengths come from clients).
fn range_fits(mem: &dyn Memory, mem_offset: usize, addr: u64, len: u64) -> bool {
    (mem_offset as u64)
        .checked_add(len)
        .is_some_and(|end| end <= mem.len() as u64)
        && addr.checked_add(len).is_some()
}

/// Why a key lookup failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum KeyError {
    #[error("no memory region has key {0:#010x}")]
    NoSuchKey(u32),
    #[error("memory region belongs to another protection domain")]
    WrongPd,
    #[error("access {need:#x} not granted (region allows {have:#x})")]
    Access { need: u32, have: u32 },
    #[error("[{addr:#x}, +{len}) lies outside the region")]
    Bounds { addr: u64, len: u64 },
    #[error("the key has been invalidated")]
    Invalidated,
    #[error("memory window {0:#010x} is bound to another QP")]
    WrongQp(u32),
}

/// `enum ibv_mw_type`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MwType {
    /// `IBV_MW_TYPE_1`: bound by the Bind Memory Window verb.
    Type1,
    /// `IBV_MW_TYPE_2` (type 2B): bound by a BIND_MW work request to one QP.
    Type2,
}

impl MwType {
    /// The `ibv_mw_type` value.
    pub fn ibv(self) -> u32 {
        match self {
            MwType::Type1 => 1,
            MwType::Type2 => 2,
        }
    }

    pub fn from_ibv(v: u32) -> Option<MwType> {
        match v {
            1 => Some(MwType::Type1),
            2 => Some(MwType::Type2),
            _ => None,
        }
    }
}

/// Why a bind, an invalidation or a deregistration was refused; each
/// variant names the rule it enforces.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum MwError {
    #[error("no memory window has key {0:#010x}")]
    NoSuchWindow(u32),
    #[error("no memory region has local key {0:#010x}")]
    NoSuchRegion(u32),
    #[error("the window, the region and the QP are not in one PD (C10-72)")]
    WrongPd,
    #[error("a bound type 2 window must be invalidated before it is bound again (o10-37.2.30)")]
    Type2Bound,
    #[error("a type 2 window cannot be bound with no region or zero length (o10-37.2.40)")]
    Type2ZeroLength,
    #[error("a type 1 window cannot be zero based (o10-36.2.2)")]
    Type1ZeroBased,
    #[error("the region was not registered with IBV_ACCESS_MW_BIND (C10-73)")]
    NoBindAccess,
    #[error("remote write or atomic rights need a region with local write (C10-74)")]
    NeedsLocalWrite,
    #[error("the window lies outside its region (C10-75)")]
    OutsideRegion,
    #[error("access flags {0:#x} are not rights a window can grant")]
    BadRights(u32),
    #[error("a type 1 window cannot be invalidated (o10-37.2.26)")]
    Type1Invalidate,
    #[error("the window is not bound")]
    NotBound,
    #[error("key {0:#010x} names a memory region, which only a fast-registration region could make invalidatable")]
    RegionNotInvalidatable(u32),
    #[error("the window is bound to another QP (type 2B)")]
    WrongQp,
    #[error("{0} memory window(s) are still bound to the region")]
    RegionBusy(u32),
}

/// The QP of a type 2 window whose QP was destroyed (QPNs have 24 bits).
const NO_QP: u32 = u32::MAX;

/// What a window is bound to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MwBinding {
    /// The parent region's local key.
    pub mr_lkey: u32,
    /// First byte of the window in the region's address space.
    pub addr: u64,
    pub len: u64,
    /// Remote rights (`access::REMOTE_*`), and `ZERO_BASED`.
    pub access: u32,
    /// Type 2B: the only QP that may use or remotely invalidate it.
    pub qpn: Option<u32>,
}

/// An allocated memory window.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Mw {
    pub pd: u32,
    pub kind: MwType,
    pub rkey: u32,
    /// `None`: free (type 2) or bound to nothing (type 1, length 0).
    pub binding: Option<MwBinding>,
}

/// A bind request: a BIND_MW work request, or what the Bind Memory Window
/// verb posts (`struct ibv_mw_bind_info` plus the keys).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MwBind {
    /// The window: its handle in the upper 24 bits (any R_Key it had).
    pub mw_rkey: u32,
    /// Its R_Key once bound: only the low 8 bits (the tag) are taken.
    pub new_rkey: u32,
    /// The parent region's local key (ignored when `len` is 0).
    pub mr_lkey: u32,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

/// What a reregistration makes a region: `len` bytes of `mem` from
/// `mem_offset`, at virtual address `addr`, in PD `pd`, with `access`.
pub struct MrSpec {
    pub pd: u32,
    pub mem: Arc<dyn Memory>,
    pub mem_offset: usize,
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

/// A registered memory region.
pub struct Mr {
    pub pd: u32,
    /// Virtual address of the first byte (what SGEs and RETHs name).
    pub addr: u64,
    pub len: u64,
    pub access: u32,
    pub lkey: u32,
    pub rkey: u32,
    pub mem: Arc<dyn Memory>,
    /// Offset of `addr` within `mem`.
    pub mem_offset: usize,
    pub valid: bool,
    /// Memory windows bound to this region.
    pub bound_windows: u32,
}

impl Mr {
    /// Offset into `mem` of `[addr, addr + len)`, if inside the region.
    pub fn offset_of(&self, addr: u64, len: u64) -> Result<usize, KeyError> {
        let end = addr
            .checked_add(len)
            .ok_or(KeyError::Bounds { addr, len })?;
        if addr < self.addr || end > self.addr + self.len {
            return Err(KeyError::Bounds { addr, len });
        }
        Ok(self.mem_offset + (addr - self.addr) as usize)
    }
}

/// One entry of the key table.
enum Entry {
    Mr(Mr),
    Mw(Mw),
}

/// The device's table of memory regions and windows.
pub struct MrTable {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    rng: SmallRng,
}

impl MrTable {
    pub fn new(seed: u64) -> MrTable {
        MrTable {
            slots: Vec::new(),
            free: Vec::new(),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// A free slot and a fresh key for it.
    fn new_key(&mut self) -> Option<(usize, u32)> {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() >= 1 << 24 {
                    return None;
                }
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let key_byte: u8 = self.rng.gen();
        Some((idx, ((idx as u32) << 8) | key_byte as u32))
    }

    /// Registers `[addr, addr + len)` backed by `mem[mem_offset..]`.
    pub fn register(
        &mut self,
        pd: u32,
        mem: Arc<dyn Memory>,
        mem_offset: usize,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Option<(u32, u32)> {
        if !range_fits(&*mem, mem_offset, addr, len) {
            return None;
        }
        let (idx, key) = self.new_key()?;
        self.slots[idx] = Some(Entry::Mr(Mr {
            pd,
            addr,
            len,
            access,
            lkey: key,
            rkey: key,
            mem,
            mem_offset,
            valid: true,
            bound_windows: 0,
        }));
        Some((key, key))
    }

    /// Reregisters region `lkey` in place (`ibv_rereg_mr`): its PD, range,
    /// memory and access become `spec`'s; its keys stay (rdma-core's
    /// tests use the old ones after a rereg, as a kernel's in-place rereg
    /// keeps them). Refused, and the region left as it was, while memory windows
    /// are bound to it (as deregistering is, IBA 10.6.7.1) or when the
    /// range lies outside its memory.
    pub fn reregister(&mut self, lkey: u32, spec: MrSpec) -> Result<(u32, u32), MwError> {
        let Some(Some(Entry::Mr(mr))) = self.slots.get_mut((lkey >> 8) as usize) else {
            return Err(MwError::NoSuchRegion(lkey));
        };
        if mr.lkey != lkey {
            return Err(MwError::NoSuchRegion(lkey));
        }
        if mr.bound_windows > 0 {
            return Err(MwError::RegionBusy(mr.bound_windows));
        }
        if !range_fits(&*spec.mem, spec.mem_offset, spec.addr, spec.len) {
            return Err(MwError::OutsideRegion);
        }
        mr.pd = spec.pd;
        mr.addr = spec.addr;
        mr.len = spec.len;
        mr.access = spec.access;
        mr.mem = spec.mem;
        mr.mem_offset = spec.mem_offset;
        mr.valid = true;
        Ok((mr.lkey, mr.rkey))
    }

    /// Deregisters a region. IBA 10.6.7.1 (as rxe enforces it): a region
    /// with windows bound to it cannot be deregistered.
    pub fn deregister(&mut self, lkey: u32) -> Result<(), MwError> {
        let idx = (lkey >> 8) as usize;
        match self.slots.get(idx) {
            Some(Some(Entry::Mr(mr))) if mr.lkey == lkey => {
                if mr.bound_windows > 0 {
                    return Err(MwError::RegionBusy(mr.bound_windows));
                }
                self.slots[idx] = None;
                self.free.push(idx);
                Ok(())
            }
            _ => Err(MwError::NoSuchRegion(lkey)),
        }
    }

    /// The region a key names (its lkey or rkey).
    pub fn get(&self, key: u32) -> Option<&Mr> {
        match self.slots.get((key >> 8) as usize) {
            Some(Some(Entry::Mr(mr))) if mr.lkey == key || mr.rkey == key => Some(mr),
            _ => None,
        }
    }

    fn mr_mut(&mut self, lkey: u32) -> Option<&mut Mr> {
        match self.slots.get_mut((lkey >> 8) as usize) {
            Some(Some(Entry::Mr(mr))) if mr.lkey == lkey => Some(mr),
            _ => None,
        }
    }

    /// The window with this R_Key (exactly: an older tag names nothing).
    pub fn window(&self, rkey: u32) -> Option<&Mw> {
        match self.slots.get((rkey >> 8) as usize) {
            Some(Some(Entry::Mw(mw))) if mw.rkey == rkey => Some(mw),
            _ => None,
        }
    }

    /// The window in slot `handle` (`ibv_mw.handle`), whatever its tag.
    pub fn window_by_handle(&self, handle: u32) -> Option<&Mw> {
        match self.slots.get(handle as usize) {
            Some(Some(Entry::Mw(mw))) => Some(mw),
            _ => None,
        }
    }

    fn window_mut(&mut self, rkey: u32) -> Option<&mut Mw> {
        match self.slots.get_mut((rkey >> 8) as usize) {
            Some(Some(Entry::Mw(mw))) if mw.rkey == rkey => Some(mw),
            _ => None,
        }
    }

    /// Allocates a memory window in `pd` (`ibv_alloc_mw`). A type 1 window
    /// starts valid with nothing bound, a type 2 window free (as rxe).
    /// Returns its R_Key; its handle is `rkey >> 8`.
    pub fn alloc_window(&mut self, pd: u32, kind: MwType) -> Option<u32> {
        let (idx, rkey) = self.new_key()?;
        self.slots[idx] = Some(Entry::Mw(Mw {
            pd,
            kind,
            rkey,
            binding: None,
        }));
        Some(rkey)
    }

    /// Frees a window (`ibv_dealloc_mw`) by its handle; a binding ends.
    pub fn dealloc_window(&mut self, handle: u32) -> bool {
        let idx = handle as usize;
        let Some(Some(Entry::Mw(mw))) = self.slots.get(idx) else {
            return false;
        };
        if let Some(b) = mw.binding {
            self.unbind_from(b.mr_lkey);
        }
        self.slots[idx] = None;
        self.free.push(idx);
        true
    }

    fn unbind_from(&mut self, mr_lkey: u32) {
        if let Some(mr) = self.mr_mut(mr_lkey) {
            mr.bound_windows = mr.bound_windows.saturating_sub(1);
        }
    }

    /// Binds a window (a BIND_MW work request executed by QP `qpn` of PD
    /// `qp_pd`). Returns the window's new R_Key. IBA 10.6.7.2; the checks
    /// are rxe's, each variant of [`MwError`] names its rule.
    pub fn bind_window(&mut self, qpn: u32, qp_pd: u32, b: &MwBind) -> Result<u32, MwError> {
        // IBA 10.6.7.2: the work request names the window by its handle
        // (the key index); the tag it had does not matter.
        let mw = *self
            .window_by_handle(b.mw_rkey >> 8)
            .ok_or(MwError::NoSuchWindow(b.mw_rkey))?;
        // A window grants remote rights only (IBA 10.6.7.2); a local write
        // right in the bind request is meaningless for it and ignored, as
        // rxe ignores it (rdma-core's suite asks for it); anything else
        // outside the window rights is refused.
        if b.access & !(access::MW_RIGHTS | access::LOCAL_WRITE) != 0 {
            return Err(MwError::BadRights(b.access));
        }
        let rights = b.access & access::MW_RIGHTS;
        let zero_based = b.access & access::ZERO_BASED != 0;
        match mw.kind {
            MwType::Type1 => {
                // o10-36.2.2: a type 1 window is never zero based.
                if zero_based {
                    return Err(MwError::Type1ZeroBased);
                }
            }
            MwType::Type2 => {
                // o10-37.2.30: only a free type 2 window may be bound.
                if mw.binding.is_some() {
                    return Err(MwError::Type2Bound);
                }
                // C10-72: the QP binding a type 2 window is in its PD.
                if qp_pd != mw.pd {
                    return Err(MwError::WrongPd);
                }
                // o10-37.2.40: a type 2 window is not unbound by binding
                // it to nothing.
                if b.len == 0 {
                    return Err(MwError::Type2ZeroLength);
                }
            }
        }
        let binding = if b.len == 0 {
            // Type 1: a zero-length bind unbinds the window.
            None
        } else {
            let mr = self
                .get(b.mr_lkey)
                .filter(|m| m.lkey == b.mr_lkey)
                .ok_or(MwError::NoSuchRegion(b.mr_lkey))?;
            // C10-72 (and ibv_bind_mw): region and window share the PD.
            if mr.pd != mw.pd {
                return Err(MwError::WrongPd);
            }
            // C10-73: the region allows windows.
            if mr.access & access::MW_BIND == 0 {
                return Err(MwError::NoBindAccess);
            }
            // C10-74: writable windows need a locally writable region.
            if b.access & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
                && mr.access & access::LOCAL_WRITE == 0
            {
                return Err(MwError::NeedsLocalWrite);
            }
            // C10-75: the window lies inside the region.
            // (a zero-based window covers the same bytes; only the
            // addresses remote requests use for them start at 0)
            let inside = b.addr >= mr.addr
                && b.addr
                    .checked_add(b.len)
                    .is_some_and(|end| end <= mr.addr + mr.len);
            if !inside {
                return Err(MwError::OutsideRegion);
            }
            Some(MwBinding {
                mr_lkey: b.mr_lkey,
                addr: b.addr,
                len: b.len,
                access: rights,
                qpn: (mw.kind == MwType::Type2).then_some(qpn),
            })
        };
        if let Some(old) = mw.binding {
            self.unbind_from(old.mr_lkey);
        }
        if let Some(new) = binding {
            if let Some(mr) = self.mr_mut(new.mr_lkey) {
                mr.bound_windows += 1;
            }
        }
        let rkey = (mw.rkey & !0xff) | (b.new_rkey & 0xff);
        let Some(Some(Entry::Mw(w))) = self.slots.get_mut((b.mw_rkey >> 8) as usize) else {
            unreachable!("looked up above")
        };
        w.rkey = rkey;
        w.binding = binding;
        Ok(rkey)
    }

    /// Invalidates the window `rkey` names: LOCAL_INV (`qpn` None) or the
    /// IETH of a SEND with Invalidate received by QP `qpn` (IBA 10.6.7.3).
    /// Only a bound type 2 window of `pd` can be invalidated, and remotely
    /// only through the QP it is bound to; a regular region cannot (this
    /// device has no fast-registration regions), nor a type 1 window
    /// (o10-37.2.26).
    pub fn invalidate(&mut self, rkey: u32, pd: u32, qpn: Option<u32>) -> Result<(), MwError> {
        if self.get(rkey).is_some() {
            return Err(MwError::RegionNotInvalidatable(rkey));
        }
        let mw = *self.window(rkey).ok_or(MwError::NoSuchWindow(rkey))?;
        if mw.pd != pd {
            return Err(MwError::WrongPd);
        }
        if mw.kind == MwType::Type1 {
            return Err(MwError::Type1Invalidate);
        }
        let b = mw.binding.ok_or(MwError::NotBound)?;
        if qpn.is_some_and(|q| b.qpn != Some(q)) {
            return Err(MwError::WrongQp);
        }
        self.unbind_from(b.mr_lkey);
        self.window_mut(rkey).expect("looked up above").binding = None;
        Ok(())
    }

    /// QP `qpn` is destroyed: the type 2 windows bound to it stay bound
    /// (and their region busy) until invalidated or deallocated, as in
    /// rxe, but no QP can use them any more — not even a later QP that
    /// gets the same number.
    pub fn orphan_qp_windows(&mut self, qpn: u32) {
        for s in self.slots.iter_mut() {
            if let Some(Entry::Mw(Mw {
                binding: Some(b), ..
            })) = s
            {
                if b.qpn == Some(qpn) {
                    b.qpn = Some(NO_QP);
                }
            }
        }
    }

    /// Local access through an lkey (a work request's SGE).
    pub fn check_local(
        &self,
        lkey: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(&Mr, usize), KeyError> {
        let mr = self
            .get(lkey)
            .filter(|m| m.lkey == lkey)
            .ok_or(KeyError::NoSuchKey(lkey))?;
        Self::check(mr, pd, addr, len, need)
    }

    /// Remote access through an rkey (a RETH or AtomicETH) arriving on QP
    /// `qpn` of PD `pd`: a region's, or a window's (IBA 10.6.7: the
    /// window's rights and range, then its parent region's memory).
    /// Inlined for the region case every request packet takes.
    #[inline]
    pub fn check_remote(
        &self,
        rkey: u32,
        pd: u32,
        qpn: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(&Mr, usize), KeyError> {
        match self.slots.get((rkey >> 8) as usize) {
            Some(Some(Entry::Mr(mr))) if mr.rkey == rkey => Self::check(mr, pd, addr, len, need),
            Some(Some(Entry::Mw(mw))) if mw.rkey == rkey => {
                self.check_window(mw, pd, qpn, addr, len, need)
            }
            _ => Err(KeyError::NoSuchKey(rkey)),
        }
    }

    /// [`MrTable::check_remote`] through window `mw`.
    #[inline(never)]
    fn check_window(
        &self,
        mw: &Mw,
        pd: u32,
        qpn: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(&Mr, usize), KeyError> {
        let b = mw.binding.ok_or(KeyError::Invalidated)?;
        if mw.pd != pd {
            return Err(KeyError::WrongPd);
        }
        // IBA 10.6.7.2 (type 2B): only the QP the window is bound to.
        if b.qpn.is_some_and(|q| q != qpn) {
            return Err(KeyError::WrongQp(mw.rkey));
        }
        if b.access & need != need {
            return Err(KeyError::Access {
                need,
                have: b.access,
            });
        }
        // a zero-based window is addressed from 0
        let base = if b.access & access::ZERO_BASED != 0 {
            0
        } else {
            b.addr
        };
        let end = addr
            .checked_add(len)
            .ok_or(KeyError::Bounds { addr, len })?;
        if addr < base || end > base + b.len {
            return Err(KeyError::Bounds { addr, len });
        }
        let mr = self.get(b.mr_lkey).ok_or(KeyError::NoSuchKey(b.mr_lkey))?;
        // the parent region's own remote rights do not matter: the window
        // grants them (IBA 10.6.7.1)
        Self::check(mr, pd, b.addr + (addr - base), len, 0)
    }

    fn check(mr: &Mr, pd: u32, addr: u64, len: u64, need: u32) -> Result<(&Mr, usize), KeyError> {
        if !mr.valid {
            return Err(KeyError::Invalidated);
        }
        if mr.pd != pd {
            return Err(KeyError::WrongPd);
        }
        if mr.access & need != need {
            return Err(KeyError::Access {
                need,
                have: mr.access,
            });
        }
        let off = mr.offset_of(addr, len)?;
        Ok((mr, off))
    }

    /// Registered regions.
    pub fn len(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Some(Entry::Mr(_))))
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Allocated windows.
    pub fn windows(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Some(Entry::Mw(_))))
            .count()
    }
}

#[cfg(test)]
mod tests;
