//! Protection domains and memory regions with their keys and checks.
//!
//! Keys follow what rxe and ConnectX do: the upper 24 bits index the region
//! table, the low 8 bits are a key byte drawn at random for each
//! registration, so keys are neither sequential nor reusable after
//! deregistration (IBA 10.6.2: an R_Key must be validated on every access).

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

/// The device's table of memory regions.
pub struct MrTable {
    slots: Vec<Option<Mr>>,
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
        if mem_offset as u64 + len > mem.len() as u64 || addr.checked_add(len).is_none() {
            return None;
        }
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        if idx >= 1 << 24 {
            return None;
        }
        let key_byte: u8 = self.rng.gen();
        let key = ((idx as u32) << 8) | key_byte as u32;
        self.slots[idx] = Some(Mr {
            pd,
            addr,
            len,
            access,
            lkey: key,
            rkey: key,
            mem,
            mem_offset,
            valid: true,
        });
        Some((key, key))
    }

    pub fn deregister(&mut self, lkey: u32) -> bool {
        let idx = (lkey >> 8) as usize;
        match self.slots.get(idx) {
            Some(Some(mr)) if mr.lkey == lkey => {
                self.slots[idx] = None;
                self.free.push(idx);
                true
            }
            _ => false,
        }
    }

    pub fn get(&self, key: u32) -> Option<&Mr> {
        match self.slots.get((key >> 8) as usize) {
            Some(Some(mr)) if mr.lkey == key || mr.rkey == key => Some(mr),
            _ => None,
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

    /// Remote access through an rkey (a RETH or AtomicETH).
    pub fn check_remote(
        &self,
        rkey: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<(&Mr, usize), KeyError> {
        let mr = self
            .get(rkey)
            .filter(|m| m.rkey == rkey)
            .ok_or(KeyError::NoSuchKey(rkey))?;
        Self::check(mr, pd, addr, len, need)
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

    /// SEND_WITH_INVALIDATE (IBA 10.6.7.3): invalidate the region with this
    /// rkey if it belongs to `pd`.
    pub fn invalidate(&mut self, rkey: u32, pd: u32) -> bool {
        match self.slots.get_mut((rkey >> 8) as usize) {
            Some(Some(mr)) if mr.rkey == rkey && mr.pd == pd && mr.valid => {
                mr.valid = false;
                true
            }
            _ => false,
        }
    }

    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::memory::HeapMemory;

    #[test]
    fn keys_and_checks() {
        let mut t = MrTable::new(7);
        let mem: Arc<dyn Memory> = Arc::new(HeapMemory::new(4096));
        let (l1, r1) = t
            .register(1, mem.clone(), 0, 0x10000, 4096, access::REMOTE_WRITE)
            .unwrap();
        let (l2, _) = t
            .register(1, mem.clone(), 0, 0x20000, 100, access::LOCAL_WRITE)
            .unwrap();
        assert_eq!(l1 >> 8, 0);
        assert_eq!(l2 >> 8, 1);
        assert!(t
            .check_remote(r1, 1, 0x10000, 4096, access::REMOTE_WRITE)
            .is_ok());
        assert_eq!(
            t.check_remote(r1, 2, 0x10000, 1, access::REMOTE_WRITE)
                .err(),
            Some(KeyError::WrongPd)
        );
        assert!(matches!(
            t.check_remote(r1, 1, 0x10000, 1, access::REMOTE_READ),
            Err(KeyError::Access { .. })
        ));
        assert!(matches!(
            t.check_remote(r1, 1, 0x10FFF, 2, access::REMOTE_WRITE),
            Err(KeyError::Bounds { .. })
        ));
        assert!(matches!(
            t.check_remote(r1, 1, u64::MAX, 2, access::REMOTE_WRITE),
            Err(KeyError::Bounds { .. })
        ));
        assert!(matches!(
            t.check_remote(r1 ^ 1, 1, 0x10000, 1, 0),
            Err(KeyError::NoSuchKey(_))
        ));
        assert!(t.deregister(l1));
        assert!(!t.deregister(l1));
        // the slot is reused with a fresh key byte (almost surely different)
        let mut reused = Vec::new();
        for _ in 0..4 {
            let (k, _) = t.register(1, mem.clone(), 0, 0, 1, 0).unwrap();
            reused.push(k);
            t.deregister(k);
        }
        assert!(reused.iter().any(|&k| k != l1));
        assert!(t
            .check_remote(r1, 1, 0x10000, 1, access::REMOTE_WRITE)
            .is_err());
    }
}
