//! One AF_XDP socket: the UMEM it shares with the kernel, the socket
//! options that size and map its four rings, the bind, and the few
//! syscalls the data path needs (kick TX, wake RX, poll, statistics).

use super::ring::{MmapOffsets, Ring, Side, XdpDesc};
use super::{AfXdpConfig, FRAME_SIZE};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

// linux/if_xdp.h and linux/socket.h
const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_PGOFF_RX_RING: u64 = 0;
const XDP_PGOFF_TX_RING: u64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: u64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: u64 = 0x1_8000_0000;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_USE_SG: u16 = 1 << 4;

/// The kernel's own AF_XDP drop counters (`struct xdp_statistics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct XdpStatistics {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// Anonymous page-aligned memory registered as the UMEM.
pub(super) struct Umem {
    area: *mut u8,
    pub len: usize,
}

impl Umem {
    pub fn new(frames: u32) -> io::Result<Umem> {
        let len = frames as usize * FRAME_SIZE as usize;
        // SAFETY: a fresh private anonymous mapping at an address the
        // kernel picks; nothing else refers to it yet.
        let area = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if area == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Umem {
            area: area as *mut u8,
            len,
        })
    }

    /// `len` bytes at UMEM address `addr`, if they lie inside one frame.
    pub fn bytes(&self, addr: u64, len: u32) -> Option<&[u8]> {
        let (a, l) = (addr as usize, len as usize);
        let same_frame = l == 0 || a / FRAME_SIZE as usize == (a + l - 1) / FRAME_SIZE as usize;
        if a.checked_add(l)? > self.len || !same_frame {
            return None;
        }
        // SAFETY: [a, a + l) lies inside the mapping (checked above) and
        // inside one frame, which the caller holds (taken off the RX ring,
        // not yet back in the fill ring): the kernel does not write it
        // while the returned borrow of self lives.
        Some(unsafe { std::slice::from_raw_parts(self.area.add(a), l) })
    }

    pub fn frame_mut(&mut self, addr: u64) -> &mut [u8] {
        let fits = (addr as usize)
            .checked_add(FRAME_SIZE as usize)
            .is_some_and(|end| end <= self.len);
        assert!(fits, "UMEM frame {addr:#x} outside the UMEM");
        // SAFETY: a whole frame inside the mapping (asserted above) that is
        // in no ring, so the kernel does not touch it; &mut self makes the
        // slice the only reference into the UMEM.
        unsafe { std::slice::from_raw_parts_mut(self.area.add(addr as usize), FRAME_SIZE as usize) }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: area/len are the mapping `new` made; the port drops its
        // socket (and the kernel's registration with it) before the UMEM.
        unsafe { libc::munmap(self.area as *mut libc::c_void, self.len) };
    }
}

/// A bound socket and its four rings.
pub(super) struct Xsk {
    fd: OwnedFd,
    pub fill: Ring<u64>,
    pub comp: Ring<u64>,
    pub rx: Ring<XdpDesc>,
    pub tx: Ring<XdpDesc>,
}

fn set<T>(fd: &OwnedFd, opt: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: the kernel reads size_of::<T>() bytes from `v`, a live,
    // initialised T of the layout `opt` takes; it keeps no pointer to it
    // (XDP_UMEM_REG's UMEM address is pinned, not this struct).
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt(SOL_XDP, opt)` into a T; how many bytes the kernel wrote.
fn get<T>(fd: &OwnedFd, opt: libc::c_int, v: &mut T) -> io::Result<usize> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, a live,
    // writable T of plain integers (any bytes are a valid value), and
    // updates `len`, a live socklen_t.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            opt,
            v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r == 0 {
        Ok(len as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(super) fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; the result is checked below.
    let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: raw is a descriptor socket(2) just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl Xsk {
    /// A socket on `umem` bound to (`ifindex`, `cfg.queue`), its fill
    /// ring full of the receive frames; on failure, the step that failed.
    pub fn bind(
        umem: &Umem,
        cfg: &AfXdpConfig,
        ifindex: i32,
        zero_copy: bool,
        multi_buffer: bool,
    ) -> Result<Xsk, (&'static str, io::Error)> {
        let flags = XDP_USE_NEED_WAKEUP
            | if zero_copy { XDP_ZEROCOPY } else { XDP_COPY }
            | if multi_buffer { XDP_USE_SG } else { 0 };
        let fd = xdp_socket().map_err(|e| ("socket(AF_XDP)", e))?;
        /// `struct xdp_umem_reg` (with flags and tx_metadata_len zero).
        #[repr(C)]
        struct UmemReg {
            addr: u64,
            len: u64,
            chunk_size: u32,
            headroom: u32,
            flags: u32,
            tx_metadata_len: u32,
        }
        let reg = UmemReg {
            addr: umem.area as u64,
            len: umem.len as u64,
            chunk_size: FRAME_SIZE,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        set(&fd, XDP_UMEM_REG, &reg).map_err(|e| ("XDP_UMEM_REG", e))?;
        set(&fd, XDP_UMEM_FILL_RING, &cfg.rx_frames).map_err(|e| ("XDP_UMEM_FILL_RING", e))?;
        set(&fd, XDP_UMEM_COMPLETION_RING, &cfg.tx_frames)
            .map_err(|e| ("XDP_UMEM_COMPLETION_RING", e))?;
        set(&fd, XDP_RX_RING, &cfg.rx_frames).map_err(|e| ("XDP_RX_RING", e))?;
        set(&fd, XDP_TX_RING, &cfg.tx_frames).map_err(|e| ("XDP_TX_RING", e))?;
        let mut off = MmapOffsets::default();
        let n = get(&fd, XDP_MMAP_OFFSETS, &mut off).map_err(|e| ("XDP_MMAP_OFFSETS", e))?;
        if n != std::mem::size_of::<MmapOffsets>() {
            return Err((
                "XDP_MMAP_OFFSETS",
                io::Error::other("ring offsets without flags: Linux ≥ 5.4 needed"),
            ));
        }
        let raw = fd.as_raw_fd();
        let mut fill = Ring::map(
            raw,
            &off.fr,
            cfg.rx_frames,
            XDP_UMEM_PGOFF_FILL_RING,
            Side::Producer,
        )
        .map_err(|e| ("mmap(fill ring)", e))?;
        let comp = Ring::map(
            raw,
            &off.cr,
            cfg.tx_frames,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            Side::Consumer,
        )
        .map_err(|e| ("mmap(completion ring)", e))?;
        let rx = Ring::map(
            raw,
            &off.rx,
            cfg.rx_frames,
            XDP_PGOFF_RX_RING,
            Side::Consumer,
        )
        .map_err(|e| ("mmap(RX ring)", e))?;
        let tx = Ring::map(
            raw,
            &off.tx,
            cfg.tx_frames,
            XDP_PGOFF_TX_RING,
            Side::Producer,
        )
        .map_err(|e| ("mmap(TX ring)", e))?;
        // every receive frame starts in the fill ring
        for i in 0..cfg.rx_frames {
            fill.write(i, i as u64 * FRAME_SIZE as u64);
        }
        fill.submit(cfg.rx_frames);
        /// `struct sockaddr_xdp`.
        #[repr(C)]
        struct SockaddrXdp {
            family: u16,
            flags: u16,
            ifindex: u32,
            queue_id: u32,
            shared_umem_fd: u32,
        }
        let sa = SockaddrXdp {
            family: AF_XDP as u16,
            flags,
            ifindex: ifindex as u32,
            queue_id: cfg.queue,
            shared_umem_fd: 0,
        };
        // SAFETY: `sa` is a live `#[repr(C)]` struct sockaddr_xdp and the
        // length its size; the kernel copies it during the call.
        let r = unsafe {
            libc::bind(
                raw,
                &sa as *const SockaddrXdp as *const libc::sockaddr,
                std::mem::size_of::<SockaddrXdp>() as u32,
            )
        };
        if r != 0 {
            return Err(("bind(AF_XDP)", io::Error::last_os_error()));
        }
        Ok(Xsk {
            fd,
            fill,
            comp,
            rx,
            tx,
        })
    }
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// A zero-length sendto: the kernel sends what the TX ring holds (in
    /// copy mode at most 32 descriptors, then EAGAIN while more remain).
    pub fn kick_tx(&self) -> io::Result<()> {
        crate::io::kick_tx(self.fd.as_raw_fd())
    }

    /// A zero-length recvfrom: wakes a driver that waits for fill-ring
    /// entries (zero-copy with need_wakeup).
    pub fn wake_rx(&self) {
        // SAFETY: recvfrom(2) with a null buffer of length 0 and null
        // address pointers writes no memory.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }

    /// The socket, to wait on with other descriptors.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// poll(2) until the RX ring holds a frame or `timeout` passes.
    pub fn poll(&self, timeout: Duration) {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().clamp(0, 1000) as i32;
        // SAFETY: one live, writable pollfd, and nfds = 1.
        unsafe { libc::poll(&mut p, 1, ms.max(if timeout.is_zero() { 0 } else { 1 })) };
    }

    /// The kernel's drop counters (XDP_STATISTICS); older kernels fill only
    /// the first three fields, the rest stay 0.
    pub fn statistics(&self) -> Option<XdpStatistics> {
        let mut s = XdpStatistics::default();
        get(&self.fd, XDP_STATISTICS, &mut s).ok().map(|_| s)
    }
}
