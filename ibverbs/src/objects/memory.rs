//! Protection domains, memory regions, memory windows and the fork
//! verbs.

use super::*;

#[repr(C)]
pub struct Pd {
    pub ibv: ibv_pd,
    pub inner: softrnic::Pd,
}

/// # Safety
/// `p` is NULL or a PD from `ibv_alloc_pd` not yet deallocated.
pub unsafe fn pd_of<'a>(p: *mut ibv_pd) -> Option<&'a Pd> {
    // SAFETY: Pd starts with its ibv_pd.
    (!p.is_null()).then(|| unsafe { &*(p as *const Pd) })
}

/// `ibv_alloc_pd`.
///
/// # Safety
/// `c` is an open context.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: `c` is NULL or an open context of this library's (this
    // function's contract), as Ctx::from requires.
    let Some(ctx) = (unsafe { Ctx::from(c) }) else {
        return null_errno(libc::EINVAL);
    };
    match ctx.inner.alloc_pd() {
        Ok(pd) => {
            let handle = pd.handle;
            boxed(Pd {
                ibv: ibv_pd { context: c, handle },
                inner: pd,
            }) as *mut ibv_pd
        }
        Err(e) => {
            complain("ibv_alloc_pd", &e);
            null_errno(errno_of(&e))
        }
    }
}

/// `ibv_dealloc_pd`: EBUSY (and the PD kept) while objects use it.
///
/// # Safety
/// `p` is a PD from `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_dealloc_pd(p: *mut ibv_pd) -> c_int {
    if p.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by alloc_pd.
    let pd = unsafe { &*(p as *const Pd) };
    match pd.inner.dealloc_by_ref() {
        Ok(()) => {
            // SAFETY: made by Box in alloc_pd; the daemon has let it go.
            drop(unsafe { Box::from_raw(p as *mut Pd) });
            0
        }
        Err(e) => {
            complain("ibv_dealloc_pd", &e);
            libc::EBUSY
        }
    }
}

// ---- memory regions -------------------------------------------------------

#[repr(C)]
pub struct Mr {
    pub ibv: ibv_mr,
    pub inner: softrnic::Mr,
    /// The `IBV_ACCESS_*` flags it was registered with.
    pub access: c_int,
}

const ACCESS_KNOWN: c_int = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB;
/// `IBV_ACCESS_OPTIONAL_RANGE`: hints a device may ignore.
const ACCESS_OPTIONAL: c_int = 0x3ff0_0000;

/// The device's access bits of a registration of `[addr, addr + len)`
/// at `iova` with `IBV_ACCESS_*` flags `access` (what the `ibv_reg_mr`
/// family and `ibv_rereg_mr` share), or the errno.
fn device_access(addr: *mut c_void, len: usize, iova: u64, access: c_int) -> Result<u32, c_int> {
    let access = access & !ACCESS_OPTIONAL;
    if access & !ACCESS_KNOWN != 0 || addr.is_null() || len == 0 {
        return Err(libc::EINVAL);
    }
    // IBA 10.6.3.1: remote write or atomic access needs local write.
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
        && access & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return Err(libc::EINVAL);
    }
    if access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED) != 0 || iova != addr as u64 {
        complain(
            "ibv_reg_mr",
            "on-demand paging, zero-based regions and an iova other than the address are not supported",
        );
        return Err(libc::EOPNOTSUPP);
    }
    Ok((access & 0x1f) as u32)
}

/// Registers `[addr, addr + len)` in `p` with `access`: the region, or
/// the errno.
fn register(
    p: &Pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> Result<softrnic::Mr, c_int> {
    let acc = device_access(addr, len, iova, access)?;
    p.inner.reg_user_mr(addr as u64, len, acc).map_err(|e| {
        complain("ibv_reg_mr", &e);
        errno_of(&e)
    })
}

/// The `ibv_reg_mr` family: registers `[addr, addr + len)` of `pd`.
///
/// # Safety
/// `pd` is NULL or a PD from `ibv_alloc_pd` not yet deallocated. The range
/// is examined through `/proc/self/maps` and moved with `mremap`, never
/// dereferenced here.
unsafe fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the application's PD.
    let Some(p) = (unsafe { pd_of(pd) }) else {
        return null_errno(libc::EINVAL);
    };
    match register(p, addr, len, iova, access) {
        Ok(mr) => boxed(Mr {
            ibv: ibv_mr {
                context: p.ibv.context,
                pd,
                addr,
                length: len,
                handle: mr.lkey,
                lkey: mr.lkey,
                rkey: mr.rkey,
            },
            inner: mr,
            access,
        }) as *mut ibv_mr,
        Err(e) => null_errno(e),
    }
}

/// `ibv_reg_mr`: any memory of the process (the client library moves the
/// pages onto shared memory at the same address, `softrnic::usermem`).
///
/// # Safety
/// `pd` from `ibv_alloc_pd`; [addr, addr+len) memory of this process.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: this function's contract is reg's.
    unsafe { reg(pd, addr, len, addr as u64, access) }
}

/// `ibv_reg_mr_iova`.
///
/// # Safety
/// As `ibv_reg_mr`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: this function's contract is reg's.
    unsafe { reg(pd, addr, len, iova, access) }
}

/// `ibv_reg_mr_iova2` (what the inline `ibv_reg_mr` calls when the access
/// flags are not a constant or carry optional bits).
///
/// # Safety
/// As `ibv_reg_mr`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    // SAFETY: this function's contract is reg's.
    unsafe { reg(pd, addr, len, iova, access as c_int) }
}

/// `ibv_dereg_mr`.
///
/// # Safety
/// `m` from `ibv_reg_mr*`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_dereg_mr(m: *mut ibv_mr) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by reg(); freed only once deregistered.
    let mr = unsafe { &*(m as *const Mr) };
    // refused, and the region kept, while memory windows are bound to it
    match mr.inner.try_dereg() {
        Ok(()) => {
            // SAFETY: made by reg() as a Box; the application is done with it.
            drop(unsafe { Box::from_raw(m as *mut Mr) });
            0
        }
        Err(e) => errno_of(&e),
    }
}

// ---- memory windows -----------------------------------------------------------

/// An `ibv_mw` and the daemon's window behind it.
#[repr(C)]
pub struct Mw {
    pub ibv: ibv_mw,
    pub inner: softrnic::Mw,
}

/// # Safety
/// `m` is NULL or a window from `ibv_alloc_mw` not yet deallocated.
pub unsafe fn mw_of<'a>(m: *mut ibv_mw) -> Option<&'a Mw> {
    // SAFETY: Mw starts with its ibv_mw.
    (!m.is_null()).then(|| unsafe { &*(m as *const Mw) })
}

/// `ops.alloc_mw` (the inline `ibv_alloc_mw`): a type 1 or type 2 (2B)
/// window in the PD.
///
/// # Safety
/// Called through the ops table with the application's PD (or NULL).
pub unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: c_int) -> *mut ibv_mw {
    // SAFETY: the application's PD.
    let Some(p) = (unsafe { pd_of(pd) }) else {
        return null_errno(libc::EINVAL);
    };
    let Some(kind) = nic::verbs::MwType::from_ibv(mw_type as u32) else {
        return null_errno(libc::EINVAL);
    };
    match p.inner.alloc_mw(kind) {
        Ok(mw) => boxed(Mw {
            ibv: ibv_mw {
                context: p.ibv.context,
                pd,
                rkey: mw.rkey,
                handle: mw.handle,
                mw_type,
            },
            inner: mw,
        }) as *mut ibv_mw,
        Err(e) => {
            complain("ibv_alloc_mw", &e);
            null_errno(errno_of(&e))
        }
    }
}

/// `ops.dealloc_mw` (the inline `ibv_dealloc_mw`).
///
/// # Safety
/// Called through the ops table with a window from `alloc_mw`, not used
/// afterwards.
pub unsafe extern "C" fn dealloc_mw(m: *mut ibv_mw) -> c_int {
    if m.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: made by alloc_mw() as a Box; the application is done with it.
    let mw = unsafe { Box::from_raw(m as *mut Mw) };
    match mw.inner.dealloc() {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// `ibv_rereg_mr`: the region gets another PD
/// (`IBV_REREG_MR_CHANGE_PD`), access (`_CHANGE_ACCESS`) or range
/// (`_CHANGE_TRANSLATION`), the rest as it was, in place: its keys stay
/// (programs, rdma-core's tests among them, go on using them). As rdma-core: 0, or `IBV_REREG_MR_ERR_INPUT` (bad
/// flags or arguments; errno EINVAL) or `IBV_REREG_MR_ERR_CMD` (the
/// device refused, errno says why; the region is then as it was — windows
/// bound to it make it refuse), all with errno set.
///
/// # Safety
/// `m` from `ibv_reg_mr*`, not used by another thread meanwhile; `pd`
/// NULL or a PD from `ibv_alloc_pd`.
#[no_mangle]
pub unsafe extern "C" fn srv_ibv_rereg_mr(
    m: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let fail = |code: c_int, e: c_int| {
        set_errno(e);
        code
    };
    let translate = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
    if m.is_null()
        || flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0
        || (translate && (length == 0 || addr.is_null()))
        || (access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0)
    {
        return fail(IBV_REREG_MR_ERR_INPUT, libc::EINVAL);
    }
    if flags == 0 {
        // the kernel refuses a reregistration that changes nothing
        return fail(IBV_REREG_MR_ERR_CMD, libc::EINVAL);
    }
    // SAFETY: made by reg(), used by no one else meanwhile (this
    // function's contract).
    let mr = unsafe { &mut *(m as *mut Mr) };
    let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
        pd
    } else {
        mr.ibv.pd
    };
    let (new_addr, new_len) = if translate {
        (addr, length)
    } else {
        (mr.ibv.addr, mr.ibv.length)
    };
    let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
        access
    } else {
        mr.access
    };
    // SAFETY: the application's PD, or the region's own (the contract).
    let Some(p) = (unsafe { pd_of(new_pd) }) else {
        return fail(IBV_REREG_MR_ERR_CMD, libc::EINVAL);
    };
    let acc = match device_access(new_addr, new_len, new_addr as u64, new_access) {
        Ok(acc) => acc,
        Err(e) => return fail(IBV_REREG_MR_ERR_CMD, e),
    };
    if let Err(e) = mr.inner.rereg_user(&p.inner, new_addr as u64, new_len, acc) {
        complain("ibv_rereg_mr", &e);
        return fail(IBV_REREG_MR_ERR_CMD, errno_of(&e));
    }
    mr.ibv.pd = new_pd;
    mr.ibv.addr = new_addr;
    mr.ibv.length = new_len;
    mr.access = new_access;
    0
}

// ---- fork -------------------------------------------------------------------

/// `ibv_fork_init`: registered pages are not inherited by children
/// (MADV_DONTFORK, as rdma-core does); without it a child gets private
/// copies of them.
#[no_mangle]
pub extern "C" fn srv_ibv_fork_init() -> c_int {
    softrnic::usermem::fork_init()
}

/// `ibv_is_fork_initialized`.
#[no_mangle]
pub extern "C" fn srv_ibv_is_fork_initialized() -> c_int {
    if softrnic::usermem::fork_initialized() {
        IBV_FORK_ENABLED
    } else {
        IBV_FORK_DISABLED
    }
}

fn madvise_range(base: *mut c_void, size: usize, advice: c_int) -> c_int {
    let page = 4096usize;
    let start = (base as usize) & !(page - 1);
    let end = (base as usize).saturating_add(size).div_ceil(page) * page;
    // SAFETY: madvise only changes fork inheritance of the caller's pages.
    let r = unsafe { libc::madvise(start as *mut c_void, end - start, advice) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    }
}

/// `ibv_dontfork_range`.
#[no_mangle]
pub extern "C" fn srv_ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    madvise_range(base, size, libc::MADV_DONTFORK)
}

/// `ibv_dofork_range`.
#[no_mangle]
pub extern "C" fn srv_ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    madvise_range(base, size, libc::MADV_DOFORK)
}
