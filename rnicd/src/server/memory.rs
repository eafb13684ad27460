//! Protection domains, memory regions and memory windows.

use super::registry::with_owned;
use super::{ok, one_fd, Object, Reply, RequestError, Shared};
use ipc::proto::Response;
use ipc::shm::Mapping;
use nic::verbs::{access, Memory, MrSpec, MwType};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// The access flags a region may have.
const ACCESS_KNOWN: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND;

/// `AllocPd`: a pooled PD number, or a new one.
pub(super) fn alloc_pd(sh: &Shared, id: u64) -> Result<Reply, RequestError> {
    let pooled = sh.reg.lock().expect("registry").pd_pool.pop();
    let pd = match pooled {
        Some(pd) => pd,
        None => super::call(sh, |r| r.alloc_pd())?,
    };
    with_owned(sh, id, |o| o.pds.insert(pd));
    Ok((Response::Pd { pd }, None))
}

/// `DeallocPd`: refused while any of the client's objects use the PD.
pub(super) fn dealloc_pd(sh: &Shared, id: u64, pd: u32) -> Result<Reply, RequestError> {
    let mut r = sh.reg.lock().expect("registry");
    let o = r.clients.entry(id).or_default();
    if !o.pds.contains(&pd) {
        return Err(RequestError::NotFound(Object::Pd(pd)));
    }
    if o.mrs.values().any(|p| *p == pd)
        || o.mws.values().any(|p| *p == pd)
        || o.qps.values().any(|q| q.pd == pd)
        || o.ahs.values().any(|p| *p == pd)
        || o.srqs.values().any(|p| *p == pd)
    {
        return Err(RequestError::PdInUse);
    }
    o.pds.remove(&pd);
    r.pd_pool.push(pd);
    ok()
}

/// A `RegMr` / `ReregMr` request's region.
#[derive(Clone, Copy)]
pub(super) struct Region {
    pub(super) pd: u32,
    /// Where the region starts in the memfd.
    pub(super) offset: u64,
    /// The client's virtual address of that byte.
    pub(super) addr: u64,
    pub(super) len: u64,
    pub(super) access: u32,
}

impl From<(u32, u64, u64, u64, u32)> for Region {
    /// (pd, offset, addr, len, access), as the requests carry them.
    fn from((pd, offset, addr, len, access): (u32, u64, u64, u64, u32)) -> Region {
        Region {
            pd,
            offset,
            addr,
            len,
            access,
        }
    }
}

/// The memory of a `RegMr` / `ReregMr` region: its checks (a PD of the
/// client's, known access bits, a sane range), then the region's pages of
/// the client's memfd mapped, and the region's offset in that mapping.
fn region_memory(
    sh: &Shared,
    id: u64,
    fds: Vec<OwnedFd>,
    m: &Region,
) -> Result<(Arc<dyn Memory>, usize), RequestError> {
    let fd = one_fd(fds, "reg_mr", "memfd")?;
    let Region {
        pd,
        offset,
        addr,
        len,
        access: acc,
    } = *m;
    if !with_owned(sh, id, |o| o.pds.contains(&pd)) {
        return Err(RequestError::NotFound(Object::Pd(pd)));
    }
    if acc & !ACCESS_KNOWN != 0 {
        return Err(RequestError::AccessFlags(acc & !ACCESS_KNOWN));
    }
    if len == 0 || len > ipc::shm::MAX_MAP as u64 || offset.checked_add(len).is_none() {
        return Err(RequestError::BadRegion { offset, len });
    }
    if addr.checked_add(len).is_none() {
        return Err(RequestError::BadAddress { addr, len });
    }
    // only the region's pages are mapped: the memfd may be a client's
    // sparse file of all its registered pages
    let (map, at) = Mapping::window_from_untrusted_fd(fd, offset, len as usize)?;
    Ok((Arc::new(map), at))
}

/// `RegMr` (`lkey` None): maps the region's pages of the client's memfd
/// and registers them. `ReregMr` (`lkey` the client's region): the region
/// becomes that one in place, its keys as they were; refused, the region
/// as it was, while windows are bound to it.
pub(super) fn reg_mr(
    sh: &Shared,
    id: u64,
    fds: Vec<OwnedFd>,
    lkey: Option<u32>,
    m: Region,
) -> Result<Reply, RequestError> {
    if let Some(lkey) = lkey {
        if !with_owned(sh, id, |o| o.mrs.contains_key(&lkey)) {
            return Err(RequestError::NotFound(Object::Mr(lkey)));
        }
    }
    let (mem, mem_offset) = region_memory(sh, id, fds, &m)?;
    let Region {
        pd,
        addr,
        len,
        access,
        ..
    } = m;
    let (lkey, rkey) = super::call(sh, move |r| match lkey {
        None => r.reg_mr(pd, mem, mem_offset, addr, len, access),
        Some(lkey) => {
            let spec = MrSpec {
                pd,
                mem,
                mem_offset,
                addr,
                len,
                access,
            };
            r.rereg_mr(lkey, spec)
        }
    })??;
    with_owned(sh, id, |o| o.mrs.insert(lkey, pd));
    Ok((Response::Mr { lkey, rkey }, None))
}

/// `DeregMr`: refused (by the transport) while memory windows are bound
/// to the region.
pub(super) fn dereg_mr(sh: &Shared, id: u64, lkey: u32) -> Result<Reply, RequestError> {
    if !with_owned(sh, id, |o| o.mrs.contains_key(&lkey)) {
        return Err(RequestError::NotFound(Object::Mr(lkey)));
    }
    super::call(sh, move |r| r.dereg_mr(lkey))??;
    with_owned(sh, id, |o| o.mrs.remove(&lkey));
    ok()
}

/// `AllocMw`: a type 1 or type 2 memory window on the PD.
pub(super) fn alloc_mw(sh: &Shared, id: u64, pd: u32, mw_type: u32) -> Result<Reply, RequestError> {
    if !with_owned(sh, id, |o| o.pds.contains(&pd)) {
        return Err(RequestError::NotFound(Object::Pd(pd)));
    }
    let kind = MwType::from_ibv(mw_type).ok_or(RequestError::MwType(mw_type))?;
    let rkey = super::call(sh, move |r| r.alloc_mw(pd, kind))??;
    with_owned(sh, id, |o| o.mws.insert(rkey >> 8, pd));
    Ok((Response::Mw { rkey }, None))
}

/// `DeallocMw`.
pub(super) fn dealloc_mw(sh: &Shared, id: u64, handle: u32) -> Result<Reply, RequestError> {
    if with_owned(sh, id, |o| o.mws.remove(&handle)).is_none() {
        return Err(RequestError::NotFound(Object::Mw(handle)));
    }
    super::call(sh, move |r| r.dealloc_mw(handle))??;
    ok()
}
