//! Keys, checks, type 2 windows and reregistration.

use super::*;
use crate::verbs::memory::HeapMemory;

#[test]
fn a_range_that_wraps_or_overruns_is_refused() {
    let mut t = MrTable::new(7);
    let mem: Arc<dyn Memory> = Arc::new(HeapMemory::new(4096));
    // offset + length past the memory, wrapping around u64
    assert!(t.register(1, mem.clone(), 16, 0, u64::MAX - 8, 0).is_none());
    assert!(t.register(1, mem.clone(), 0, 0, 4097, 0).is_none());
    assert!(t.register(1, mem.clone(), 0, u64::MAX, 2, 0).is_none());
    assert!(t.register(1, mem, 0, 0x1000, 4096, 0).is_some());
}

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
        .check_remote(r1, 1, 0, 0x10000, 4096, access::REMOTE_WRITE)
        .is_ok());
    assert_eq!(
        t.check_remote(r1, 2, 0, 0x10000, 1, access::REMOTE_WRITE)
            .err(),
        Some(KeyError::WrongPd)
    );
    assert!(matches!(
        t.check_remote(r1, 1, 0, 0x10000, 1, access::REMOTE_READ),
        Err(KeyError::Access { .. })
    ));
    assert!(matches!(
        t.check_remote(r1, 1, 0, 0x10FFF, 2, access::REMOTE_WRITE),
        Err(KeyError::Bounds { .. })
    ));
    assert!(matches!(
        t.check_remote(r1, 1, 0, u64::MAX, 2, access::REMOTE_WRITE),
        Err(KeyError::Bounds { .. })
    ));
    assert!(matches!(
        t.check_remote(r1 ^ 1, 1, 0, 0x10000, 1, 0),
        Err(KeyError::NoSuchKey(_))
    ));
    assert!(t.deregister(l1).is_ok());
    assert!(t.deregister(l1).is_err());
    // the slot is reused with a fresh key byte (almost surely different)
    let mut reused = Vec::new();
    for _ in 0..4 {
        let (k, _) = t.register(1, mem.clone(), 0, 0, 1, 0).unwrap();
        reused.push(k);
        t.deregister(k).unwrap();
    }
    assert!(reused.iter().any(|&k| k != l1));
    assert!(t
        .check_remote(r1, 1, 0, 0x10000, 1, access::REMOTE_WRITE)
        .is_err());
}

/// A table with a 4 KiB region at 0x1000 in PD 1 that allows windows,
/// a free type 2 window, and a bind of its first 64 bytes with `tag`
/// and `rights`; (table, region lkey, bind).
fn one_type_2_window(tag: u32, rights: u32) -> (MrTable, u32, MwBind) {
    let mut t = MrTable::new(3);
    let mem: Arc<dyn Memory> = Arc::new(HeapMemory::new(4096));
    let acc = access::LOCAL_WRITE | access::MW_BIND;
    let (lkey, _) = t.register(1, mem, 0, 0x1000, 4096, acc).unwrap();
    let mw = t.alloc_window(1, MwType::Type2).unwrap();
    let b = MwBind {
        mw_rkey: mw,
        new_rkey: tag,
        mr_lkey: lkey,
        addr: 0x1000,
        len: 64,
        access: rights,
    };
    (t, lkey, b)
}

#[test]
fn a_type_2_window_serves_only_the_qp_that_bound_it() {
    let (mut t, _, b) = one_type_2_window(0x77, access::REMOTE_WRITE);
    // C10-72: a QP of another PD cannot bind it
    assert_eq!(t.bind_window(17, 2, &b), Err(MwError::WrongPd));
    let k = t.bind_window(17, 1, &b).unwrap();
    assert_eq!(k & 0xff, 0x77);
    assert!(t
        .check_remote(k, 1, 17, 0x1000, 8, access::REMOTE_WRITE)
        .is_ok());
    // IBA 10.6.7.2, type 2B: through another QP of the same PD, no
    assert_eq!(
        t.check_remote(k, 1, 18, 0x1000, 8, access::REMOTE_WRITE)
            .err(),
        Some(KeyError::WrongQp(k))
    );
    assert_eq!(t.invalidate(k, 1, Some(18)), Err(MwError::WrongQp));
    assert_eq!(t.invalidate(k, 1, Some(17)), Ok(()));
    assert_eq!(t.invalidate(k, 1, Some(17)), Err(MwError::NotBound));
    assert_eq!(t.windows(), 1);
    assert_eq!(t.len(), 1);
}

#[test]
fn a_type_2_window_of_a_destroyed_qp_is_out_of_reach_until_invalidated() {
    let (mut t, lkey, b) = one_type_2_window(1, access::REMOTE_READ);
    let k = t.bind_window(17, 1, &b).unwrap();
    t.orphan_qp_windows(17);
    // a later QP 17 cannot use or remotely invalidate it
    assert_eq!(
        t.check_remote(k, 1, 17, 0x1000, 8, access::REMOTE_READ)
            .err(),
        Some(KeyError::WrongQp(k))
    );
    assert_eq!(t.invalidate(k, 1, Some(17)), Err(MwError::WrongQp));
    assert_eq!(t.deregister(lkey), Err(MwError::RegionBusy(1)));
    // LOCAL_INV on any QP of the PD frees it
    assert_eq!(t.invalidate(k, 1, None), Ok(()));
    assert_eq!(t.deregister(lkey), Ok(()));
}

#[test]
fn a_reregistered_region_keeps_its_keys_and_takes_the_new_rules() {
    let (mut t, lkey, b) = one_type_2_window(5, access::REMOTE_READ);
    let mem: Arc<dyn Memory> = Arc::new(HeapMemory::new(8192));
    let rw = access::LOCAL_WRITE | access::REMOTE_WRITE;
    // refused while a window is bound to it, as deregistering is
    let k = t.bind_window(17, 1, &b).unwrap();
    let spec = |mem: &Arc<dyn Memory>, mem_offset| MrSpec {
        pd: 2,
        mem: mem.clone(),
        mem_offset,
        addr: 0x8000,
        len: 8192,
        access: rw,
    };
    assert_eq!(
        t.reregister(lkey, spec(&mem, 0)),
        Err(MwError::RegionBusy(1))
    );
    assert_eq!(t.invalidate(k, 1, None), Ok(()));
    // past its memory: refused, the region as it was
    assert_eq!(
        t.reregister(lkey, spec(&mem, 4096)),
        Err(MwError::OutsideRegion)
    );
    assert!(t.check_local(lkey, 1, 0x1000, 8, 0).is_ok());
    // another PD, range and access under the same keys
    assert_eq!(t.reregister(lkey, spec(&mem, 0)), Ok((lkey, lkey)));
    assert_eq!(
        t.check_remote(lkey, 1, 0, 0x8000, 8, access::REMOTE_WRITE)
            .err(),
        Some(KeyError::WrongPd)
    );
    assert!(t
        .check_remote(lkey, 2, 0, 0x9ff8, 8, access::REMOTE_WRITE)
        .is_ok());
    assert!(matches!(
        t.check_remote(lkey, 2, 0, 0x1000, 8, access::REMOTE_WRITE),
        Err(KeyError::Bounds { .. })
    ));
    assert_eq!(
        t.reregister(lkey ^ 1, spec(&mem, 0)),
        Err(MwError::NoSuchRegion(lkey ^ 1))
    );
}
