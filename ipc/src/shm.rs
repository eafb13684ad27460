//! Shared memory (sealed memfds mapped MAP_SHARED) and the Unix
//! SOCK_SEQPACKET sockets that carry control messages and, with
//! SCM_RIGHTS, the memfds.

use nic::verbs::Memory;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Largest memfd the daemon maps for a client (16 GiB).
pub const MAX_MAP: usize = 16 << 30;

/// A shared mapping of a sealed memfd.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping lives until drop; all access goes through raw
// pointers with explicit bounds checks (data races with the other process
// are inherent to shared memory and only ever corrupt data, not memory
// safety, because every value read from it is validated).
unsafe impl Send for Mapping {}
// SAFETY: as for Send: shared access only goes through the same bounded
// raw-pointer accessors, which take `&self` and validate what they read.
unsafe impl Sync for Mapping {}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The size of a memfd from another process, which must be sealed against
/// shrinking (else it could be truncated under our mapping and make our
/// accesses fault).
fn sealed_size(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: F_GET_SEALS / fstat on an fd we own.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the memory fd is not a memfd sealed against shrinking",
        ));
    }
    // SAFETY: fstat into a local struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `stat` into the local struct.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st.st_size.max(0) as u64)
}

impl Mapping {
    /// A new zeroed memfd of `len` bytes, sealed against shrinking and
    /// growing, mapped read-write.
    pub fn create(name: &str, len: usize) -> io::Result<Mapping> {
        if len == 0 || len > MAX_MAP {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad length"));
        }
        let cname = CString::new(name).unwrap_or_else(|_| CString::new("softrnic").unwrap());
        // SAFETY: plain syscalls on a fresh fd.
        let fd = unsafe {
            let raw = cvt(libc::memfd_create(
                cname.as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            ))?;
            OwnedFd::from_raw_fd(raw)
        };
        // SAFETY: fd is ours.
        unsafe {
            cvt(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t))?;
            cvt(libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            ))?;
        }
        Mapping::map(fd, len)
    }

    /// Maps a memfd received from another process. It must be sealed
    /// against shrinking (else the other side could truncate it and make
    /// our accesses fault) and at least `min_len` bytes long.
    pub fn from_untrusted_fd(fd: OwnedFd, min_len: usize) -> io::Result<Mapping> {
        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
        let size = sealed_size(&fd)? as usize;
        if size < min_len || size == 0 || size > MAX_MAP {
            return Err(bad("the memory fd is smaller than the region or too large"));
        }
        Mapping::map(fd, size)
    }

    /// Maps only the pages of `[offset, offset + len)` of a memfd received
    /// from another process (a memory region): sealed against shrinking,
    /// at least `offset + len` bytes long. Returns the mapping and where
    /// byte `offset` lies in it. The file may be large and sparse (a
    /// client's registered pages stored at their virtual addresses); only
    /// the window is ever mapped, so nothing outside it is reachable.
    pub fn window_from_untrusted_fd(
        fd: OwnedFd,
        offset: u64,
        len: usize,
    ) -> io::Result<(Mapping, usize)> {
        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
        if len == 0 || len > MAX_MAP {
            return Err(bad("bad region length"));
        }
        let size = sealed_size(&fd)?;
        let end = offset
            .checked_add(len as u64)
            .ok_or_else(|| bad("region overflows"))?;
        if size < end {
            return Err(bad("the memory fd is smaller than the region"));
        }
        let page = page_size() as u64;
        let start = offset & !(page - 1);
        let stop = end.div_ceil(page) * page;
        let win = (stop - start) as usize;
        // SAFETY: mapping a window of an fd at least `end` bytes long (the
        // seal keeps it so), page aligned.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                win,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                start as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok((
            Mapping {
                ptr: ptr as *mut u8,
                len: win,
                fd,
            },
            (offset - start) as usize,
        ))
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: mapping a whole fd of known size.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr as *mut u8,
            len,
            fd,
        })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The address of byte 0 in this process (the MR's virtual address).
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    fn in_bounds(&self, off: usize, len: usize) -> bool {
        off.checked_add(len).is_some_and(|e| e <= self.len)
    }

    fn atomic(&self, off: usize) -> Option<&AtomicU64> {
        if off & 7 != 0 || !self.in_bounds(off, 8) {
            return None;
        }
        // SAFETY: in bounds, aligned (the mapping is page aligned).
        Some(unsafe { AtomicU64::from_ptr(self.ptr.add(off) as *mut u64) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what we mapped.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Zero-copy memory for an MR: the engine reads and writes the client's
/// buffer in place. Out-of-range accesses (the MR table rules them out)
/// are ignored rather than trusted.
impl Memory for Mapping {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        if self.in_bounds(offset, dst.len()) {
            // SAFETY: bounds checked.
            unsafe { std::ptr::copy(self.ptr.add(offset), dst.as_mut_ptr(), dst.len()) }
        } else {
            dst.fill(0);
        }
    }

    /// The payload of a frame being sent: copied out of the client's buffer
    /// and covered by the ICRC in one pass; the ICRC covers exactly the
    /// bytes copied even if the client writes the buffer meanwhile.
    fn read_icrc(&self, offset: usize, dst: &mut [u8], icrc: &mut wire::icrc::Icrc) {
        if self.in_bounds(offset, dst.len()) {
            // SAFETY: bounds checked; `dst` is the engine's frame buffer, a
            // `&mut`, so not inside this mapping.
            unsafe { icrc.copy_raw(self.ptr.add(offset), dst) }
        } else {
            dst.fill(0);
            icrc.update(dst);
        }
    }

    fn write(&self, offset: usize, src: &[u8]) {
        if self.in_bounds(offset, src.len()) {
            // SAFETY: bounds checked.
            unsafe { std::ptr::copy(src.as_ptr(), self.ptr.add(offset), src.len()) }
        }
    }

    fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        self.atomic(offset)
            .map(|a| a.fetch_add(add, Ordering::AcqRel))
            .unwrap_or(0)
    }

    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        match self.atomic(offset) {
            Some(a) => match a.compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(v) | Err(v) => v,
            },
            None => 0,
        }
    }
}

/// A connected SOCK_SEQPACKET Unix socket: one message per packet.
pub struct SeqPacket {
    fd: OwnedFd,
}

/// Largest control message.
pub const MAX_MSG: usize = 64 * 1024;
const MAX_FDS: usize = 4;

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let b = path.as_os_str().as_encoded_bytes();
    if b.len() >= a.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    for (d, s) in a.sun_path.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + b.len() + 1;
    Ok((a, len as libc::socklen_t))
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2).
    let raw =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: socket(2) succeeded: `raw` is a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl SeqPacket {
    pub fn connect(path: &Path) -> io::Result<SeqPacket> {
        let fd = seqpacket_socket()?;
        let (a, len) = sockaddr(path)?;
        // SAFETY: a valid sockaddr_un.
        cvt(unsafe {
            libc::connect(fd.as_raw_fd(), &a as *const _ as *const libc::sockaddr, len)
        })?;
        Ok(SeqPacket { fd })
    }

    /// Sends one message with `fds` attached.
    pub fn send(&self, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
        let mut iov = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let mut cbuf = [0u64; 16];
        // SAFETY: msghdr is plain old data; all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let fds = &fds[..fds.len().min(MAX_FDS)];
            let bytes = std::mem::size_of_val(fds) as u32;
            // SAFETY: cbuf is large enough for MAX_FDS descriptors.
            unsafe {
                msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
                msg.msg_controllen = libc::CMSG_SPACE(bytes) as _;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(bytes) as _;
                std::ptr::copy_nonoverlapping(
                    fds.as_ptr(),
                    libc::CMSG_DATA(c) as *mut RawFd,
                    fds.len(),
                );
            }
        }
        // SAFETY: msg points at live buffers.
        let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one message; Ok(None) when the peer has closed. Truncated
    /// messages and control data other than SCM_RIGHTS are errors.
    pub fn recv(&self, buf: &mut Vec<u8>) -> io::Result<Option<Vec<OwnedFd>>> {
        buf.resize(MAX_MSG, 0);
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let mut cbuf = [0u64; 16];
        // SAFETY: msghdr is plain old data; all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = loop {
            // SAFETY: msg points at live buffers.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            break n as usize;
        };
        let mut fds = Vec::new();
        // SAFETY: walking the control buffer the kernel filled in.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c) as *const RawFd;
                    let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for i in 0..bytes / std::mem::size_of::<RawFd>() {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message or descriptors truncated",
            ));
        }
        if n == 0 {
            return Ok(None);
        }
        buf.truncate(n);
        Ok(Some(fds))
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The process ID of the peer (SO_PEERCRED: the process that connected
    /// or made the pair), if the kernel tells it.
    pub fn peer_pid(&self) -> Option<i32> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: getsockopt(2) writes at most `len` bytes into `cred`, a
        // live ucred of that size; `len` lives across the call.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        (r == 0 && cred.pid > 0).then_some(cred.pid)
    }

    /// A connected pair; the first end does not block (a send that does
    /// not fit fails with `WouldBlock`).
    pub fn pair() -> io::Result<(SeqPacket, OwnedFd)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: socketpair(2) writes two descriptors into `fds`.
        cvt(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        // SAFETY: socketpair succeeded: both are new descriptors nothing
        // else owns.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl(2) on a descriptor we own; no memory is passed.
        cvt(unsafe {
            let fl = libc::fcntl(a.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(a.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK)
        })?;
        Ok((SeqPacket { fd: a }, b))
    }

    /// The socket of a descriptor (one end of a pair handed over).
    pub fn from_fd(fd: OwnedFd) -> SeqPacket {
        SeqPacket { fd }
    }
}

/// A listening SOCK_SEQPACKET socket.
pub struct Listener {
    fd: OwnedFd,
}

impl Listener {
    /// Binds `path` (replacing a stale socket) with permissions `mode`.
    /// The socket is bound under a temporary name beside `path` and renamed
    /// to it once it listens, so whoever sees `path` can connect: a client
    /// that finds the file between `bind` and `listen` would be refused.
    pub fn bind(path: &Path, mode: u32) -> io::Result<Listener> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}", std::process::id()));
        let tmp = Path::new(&tmp);
        let _ = std::fs::remove_file(tmp);
        let fd = seqpacket_socket()?;
        let (a, len) = sockaddr(tmp)?;
        // SAFETY: a valid sockaddr_un.
        cvt(unsafe { libc::bind(fd.as_raw_fd(), &a as *const _ as *const libc::sockaddr, len) })?;
        let ready = (|| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(mode))?;
            // SAFETY: listen(2) on a socket this listener owns.
            cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
            std::fs::rename(tmp, path)
        })();
        if let Err(e) = ready {
            let _ = std::fs::remove_file(tmp);
            return Err(e);
        }
        Ok(Listener { fd })
    }

    /// Waits up to `timeout_ms` for a connection.
    pub fn accept_timeout(&self, timeout_ms: i32) -> io::Result<Option<SeqPacket>> {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r <= 0 {
            return Ok(None);
        }
        // SAFETY: accept4 on a listening socket.
        let raw = unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(SeqPacket {
            // SAFETY: accept4(2) succeeded: `raw` is a new descriptor
            // nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
        }))
    }
}

/// The system's page size.
pub fn page_size() -> usize {
    static P: AtomicUsize = AtomicUsize::new(0);
    let p = P.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let p = if p > 0 { p as usize } else { 4096 };
    P.store(p, Ordering::Relaxed);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_file_that_exists_accepts_connections() {
        // A client spins until the socket file appears and connects at
        // once; a file that appeared before `listen` would refuse it.
        let dir = tempfile::tempdir().unwrap();
        for round in 0..2000 {
            let path = dir.path().join(format!("d{round}.sock"));
            let client = {
                let path = path.clone();
                std::thread::spawn(move || loop {
                    if path.exists() {
                        return SeqPacket::connect(&path).map(|_| ());
                    }
                    std::hint::spin_loop();
                })
            };
            let l = Listener::bind(&path, 0o600).unwrap();
            let r = client.join().unwrap();
            assert!(r.is_ok(), "round {round}: {r:?}");
            drop(l);
        }
        // only the sockets are left, no temporary names
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| n.ends_with(".sock")), "{names:?}");
    }
}
