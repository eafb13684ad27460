//! Protection domains, shared buffers, memory regions and windows, and
//! the objects made on a PD.

use super::*;

/// A protection domain.
pub struct Pd {
    pub(super) ctx: Arc<Context>,
    pub handle: u32,
}

/// Memory shared with the daemon (a sealed memfd mapped here and, once
/// registered, in the daemon): the engine reads and writes it in place.
#[derive(Clone)]
pub struct Buffer {
    pub(super) map: Arc<Mapping>,
}

impl Buffer {
    /// A zeroed buffer of `len` bytes (page-aligned).
    pub fn new(len: usize) -> Result<Buffer> {
        Ok(Buffer {
            map: Arc::new(Mapping::create("softrnic-buf", len)?),
        })
    }

    /// The virtual address of byte 0 (what SGEs and remote addresses use).
    pub fn addr(&self) -> u64 {
        self.map.addr()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.map.ptr()
    }

    pub fn write(&self, off: usize, src: &[u8]) {
        nic::verbs::Memory::write(&*self.map, off, src);
    }

    pub fn read(&self, off: usize, dst: &mut [u8]) {
        nic::verbs::Memory::read(&*self.map, off, dst);
    }

    pub fn to_vec(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.read(off, &mut v);
        v
    }
}

/// A registered memory region.
pub struct Mr {
    pub(super) ctx: Arc<Context>,
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
    backing: Backing,
}

/// What an MR's pages are.
enum Backing {
    /// A shared buffer (kept alive while registered).
    Buffer(#[allow(dead_code)] Buffer),
    /// Process memory moved onto the process's memfd (`usermem`).
    User,
}

impl Mr {
    pub fn dereg(self) -> Result<()> {
        self.try_dereg()
    }

    /// Deregisters the region; refused, and the region kept, while memory
    /// windows are bound to it (the caller may try again after).
    pub fn try_dereg(&self) -> Result<()> {
        self.ctx.simple(Request::DeregMr { lkey: self.lkey })?;
        if let Backing::User = self.backing {
            crate::usermem::release(self.addr, self.len as usize);
        }
        Ok(())
    }
}

impl Mr {
    /// `ibv_rereg_mr` of a region of this process's memory
    /// (`Pd::reg_user_mr`): it becomes `len` bytes at `addr` in `pd` with
    /// `access`, its keys as they were. On an error the region is as it
    /// was.
    pub fn rereg_user(&mut self, pd: &Pd, addr: u64, len: usize, access: u32) -> Result<()> {
        if !matches!(self.backing, Backing::User) {
            return Err(Error::NotUserMemory);
        }
        let writable =
            access & (access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0;
        let (fd, offset) = crate::usermem::share(addr, len, writable).map_err(Error::UserMem)?;
        let req = Request::ReregMr {
            lkey: self.lkey,
            pd: pd.handle,
            offset,
            addr,
            len: len as u64,
            access,
        };
        let r = self.ctx.request(req, Some(fd)).map(|r| r.0);
        match r {
            Ok(Response::Mr { lkey, rkey }) => {
                // the old range's registration has ended
                crate::usermem::release(self.addr, self.len as usize);
                (self.lkey, self.rkey, self.addr, self.len) = (lkey, rkey, addr, len as u64);
                Ok(())
            }
            other => {
                crate::usermem::release(addr, len);
                Err(match other {
                    Ok(r) => unexpected(r),
                    Err(e) => e,
                })
            }
        }
    }
}

/// A memory window (`ibv_mw`): bound with a `SendOp::BindMw` work request,
/// invalidated with `SendOp::LocalInv` or by a peer's SEND with Invalidate.
pub struct Mw {
    pub(super) ctx: Arc<Context>,
    /// The R_Key it had when allocated (each bind gives it a new tag).
    pub rkey: u32,
    /// The daemon's handle (the key index, `rkey >> 8`).
    pub handle: u32,
    pub kind: MwType,
}

impl Mw {
    pub fn dealloc(self) -> Result<()> {
        self.ctx.simple(Request::DeallocMw {
            handle: self.handle,
        })
    }
}

/// All access rights (local write, remote write/read/atomic).
pub const ACCESS_ALL: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

impl Pd {
    pub fn alloc_buffer(&self, len: usize) -> Result<Buffer> {
        Buffer::new(len)
    }

    /// Allocates a memory window in this PD (`ibv_alloc_mw`).
    pub fn alloc_mw(&self, kind: MwType) -> Result<Mw> {
        let req = Request::AllocMw {
            pd: self.handle,
            mw_type: kind.ibv(),
        };
        match self.ctx.request(req, None)?.0 {
            Response::Mw { rkey } => Ok(Mw {
                ctx: self.ctx.clone(),
                rkey,
                handle: rkey >> 8,
                kind,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// Registers `len` bytes of `buf` from `offset` (zero-copy).
    pub fn reg_mr(&self, buf: &Buffer, offset: usize, len: usize, access: u32) -> Result<Mr> {
        if !matches!(offset.checked_add(len), Some(e) if e <= buf.len()) {
            return Err(Error::OutsideBuffer {
                offset,
                len,
                buf_len: buf.len(),
            });
        }
        let addr = buf.addr() + offset as u64;
        let b = Backing::Buffer(buf.clone());
        self.reg(buf.map.fd(), offset as u64, addr, len, access, b)
    }

    /// Registers `len` bytes of this process's own memory at `addr` (any
    /// private memory: malloc, posix_memalign, mmap): the pages move onto
    /// shared memory at the same address (`usermem`), the daemon maps
    /// them. Refused memory comes back as `Error::UserMem` with nothing
    /// changed: EOPNOTSUPP for memory that cannot be shared (shared
    /// mappings not ours, hugetlb, stacks), EFAULT for holes, unreadable
    /// pages and read-only pages with write access asked
    /// (`UserMemError::errno`).
    pub fn reg_user_mr(&self, addr: u64, len: usize, access: u32) -> Result<Mr> {
        let writable =
            access & (access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0;
        let (fd, offset) = crate::usermem::share(addr, len, writable).map_err(Error::UserMem)?;
        let r = self.reg(fd, offset, addr, len, access, Backing::User);
        if r.is_err() {
            crate::usermem::release(addr, len);
        }
        r
    }

    /// `RegMr` of `len` bytes at `offset` of memfd `fd`, which this process
    /// sees at `addr`.
    fn reg(
        &self,
        fd: RawFd,
        offset: u64,
        addr: u64,
        len: usize,
        access: u32,
        backing: Backing,
    ) -> Result<Mr> {
        let req = Request::RegMr {
            pd: self.handle,
            offset,
            addr,
            len: len as u64,
            access,
        };
        match self.ctx.request(req, Some(fd))?.0 {
            Response::Mr { lkey, rkey } => Ok(Mr {
                ctx: self.ctx.clone(),
                lkey,
                rkey,
                addr,
                len: len as u64,
                backing,
            }),
            r => Err(unexpected(r)),
        }
    }

    pub fn create_qp(&self, a: &QpInitAttr) -> Result<Qp> {
        let req = Request::CreateQp {
            pd: self.handle,
            init: *a,
        };
        let (r, mut fds) = self.ctx.request(req, None)?;
        match r {
            Response::Qp {
                qpn,
                sq_entries,
                rq_entries,
                rq_offset,
                map_len,
            } => {
                let ok = fds.len() == 1
                    && ring::ring_entries(sq_entries) == Some(sq_entries)
                    && ring::ring_entries(rq_entries) == Some(rq_entries)
                    && rq_offset as usize >= ring::ring_bytes(sq_entries, WQE_SIZE)
                    && rq_offset % 64 == 0
                    && map_len as usize
                        >= rq_offset as usize + ring::ring_bytes(rq_entries, WQE_SIZE);
                if !ok {
                    return Err(ProtocolError::BadRings("QP").into());
                }
                let map = Arc::new(Mapping::from_untrusted_fd(fds.remove(0), map_len as usize)?);
                // SAFETY: both rings lie inside the mapping the Qp keeps.
                let (sq, rq) = unsafe {
                    (
                        Ring::new(map.ptr(), sq_entries, WQE_SIZE),
                        Ring::new(map.ptr().add(rq_offset as usize), rq_entries, WQE_SIZE),
                    )
                };
                Ok(Qp {
                    ctx: self.ctx.clone(),
                    qpn,
                    kind: a.qp_type,
                    _map: map,
                    sq,
                    rq,
                    sq_prod: 0,
                    rq_prod: 0,
                })
            }
            r => Err(unexpected(r)),
        }
    }

    pub fn dealloc(self) -> Result<()> {
        self.dealloc_by_ref()
    }

    /// `dealloc` that leaves the PD usable when the daemon refuses (EBUSY
    /// while objects use it).
    pub fn dealloc_by_ref(&self) -> Result<()> {
        self.ctx.simple(Request::DeallocPd { pd: self.handle })
    }

    /// An address handle for UD sends (`ibv_create_ah`).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        let req = Request::CreateAh {
            pd: self.handle,
            attr: *attr,
        };
        match self.ctx.request(req, None)?.0 {
            Response::Ah { ah } => Ok(Ah {
                ctx: self.ctx.clone(),
                handle: ah,
                attr: *attr,
            }),
            r => Err(unexpected(r)),
        }
    }

    /// A shared receive queue of at least `max_wr` entries
    /// (`ibv_create_srq`).
    pub fn create_srq(&self, max_wr: u32) -> Result<Srq> {
        let req = Request::CreateSrq {
            pd: self.handle,
            max_wr,
        };
        let (r, mut fds) = self.ctx.request(req, None)?;
        match r {
            Response::Srq {
                srq,
                entries,
                map_len,
            } => {
                if fds.len() != 1
                    || ring::ring_entries(entries) != Some(entries)
                    || (map_len as usize) < ring::ring_bytes(entries, WQE_SIZE)
                {
                    return Err(ProtocolError::BadRings("SRQ").into());
                }
                let map = Arc::new(Mapping::from_untrusted_fd(fds.remove(0), map_len as usize)?);
                // SAFETY: the ring lies inside the mapping the Srq keeps.
                let ring = unsafe { Ring::new(map.ptr(), entries, WQE_SIZE) };
                Ok(Srq {
                    ctx: self.ctx.clone(),
                    handle: srq,
                    _map: map,
                    ring,
                    prod: 0,
                })
            }
            r => Err(unexpected(r)),
        }
    }
}
