//! A drop-in `libibverbs.so.1`: rdma-core 44's ABI (exported names,
//! symbol versions, struct layouts) over softrnic's client library, so an
//! unmodified program linked against libibverbs runs on `rnicd` devices
//! with no kernel module and no `/dev/infiniband`.
//!
//! - [`abi`]: the header's structures and constants (the `verbs-abi`
//!   crate, which librdmacm's drop-in shares).
//! - `symbols`: which function carries which versioned name.
//! - [`device`]: the device list (one device per `<sock-dir>/<name>.sock`),
//!   open/close, device/port/GID/P_Key queries.
//! - [`objects`]: PD, MR, CQ and completion channels, QP, SRQ, AH, async
//!   events.
//! - [`datapath`]: post send/recv/SRQ recv and poll, and the extended
//!   verbs' `ibv_wr_*` builder and `ibv_start_poll` polling — shared
//!   rings, no syscall.
//! - [`strings`]: the `*_str` helpers and rate conversions.
//!
//! Every exported function takes pointers from the application: each
//! checks them for NULL and takes the object the pointer names as one this
//! library made (as rdma-core does); errors come back the way rdma-core
//! returns them (an errno value, or NULL / -1 with `errno` set) with a
//! one-line reason on stderr where a caller would otherwise be left
//! guessing.

pub use verbs_abi as abi;
pub mod datapath;
pub mod device;
pub mod objects;
pub mod strings;
mod symbols;

pub use symbols::{COMPAT_TABLE, TABLE as SYMBOL_TABLE};

use libc::{c_int, c_void};

/// Sets `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// NULL with `errno` = `e`.
pub(crate) fn null_errno<T>(e: c_int) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

/// One line on stderr: why a verb failed, when the errno alone would not
/// say (the daemon's reason, a region that cannot be shared, ...).
pub(crate) fn complain(verb: &str, why: impl std::fmt::Display) {
    eprintln!("softrnic: {verb}: {why}");
}

/// The errno an error of the client library maps to.
pub(crate) fn errno_of(e: &softrnic::Error) -> c_int {
    match e {
        softrnic::Error::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        softrnic::Error::QueueFull => libc::ENOMEM,
        softrnic::Error::Timeout => libc::ETIMEDOUT,
        softrnic::Error::Daemon(_) => libc::EINVAL,
        softrnic::Error::Protocol(_) => libc::EIO,
        softrnic::Error::OutsideBuffer { .. }
        | softrnic::Error::NotArmed
        | softrnic::Error::NotUserMemory => libc::EINVAL,
        softrnic::Error::UserMem(u) => u.errno(),
        // as rdma-core's commands on a device that was disassociated
        softrnic::Error::DeviceGone => libc::EIO,
    }
}

// ---- unsupported entry points -------------------------------------------

/// An `IBVERBS_1.0` entry point (the ABI of 2006, before 1.1 changed the
/// structures): not supported.
#[no_mangle]
pub extern "C" fn srv_old_int() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn srv_old_null() -> *mut c_void {
    null_errno(libc::EOPNOTSUPP)
}

/// A verb this device does not have (ECE, importing objects from another
/// process, dma-buf regions, …): NULL with errno EOPNOTSUPP, as rdma-core
/// answers for a provider without the operation.
#[no_mangle]
pub extern "C" fn srv_new_null() -> *mut c_void {
    null_errno(libc::EOPNOTSUPP)
}

#[no_mangle]
pub extern "C" fn srv_new_int() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// Provider-side helpers (`ibv_cmd_*`, `execute_ioctl`): there is no
/// kernel command channel.
#[no_mangle]
pub extern "C" fn srv_priv_int() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// Functions without a result that have nothing to do here
/// (`verbs_register_driver_34` from a provider's constructor, …).
#[no_mangle]
pub extern "C" fn srv_void() {}

/// `verbs_allow_disassociate_destroy` (a flag providers read).
#[no_mangle]
pub static mut srv_verbs_allow_disassociate_destroy: bool = false;

/// `ibv_read_sysfs_file` / `ibv_read_ibdev_sysfs_file`: the devices have
/// no sysfs entries; -1 with errno ENOENT, as for a missing file.
#[no_mangle]
pub extern "C" fn srv_ibv_read_sysfs_file() -> c_int {
    set_errno(libc::ENOENT);
    -1
}

/// `ibv_get_sysfs_path`: the path rdma-core reports when sysfs is where
/// it usually is.
#[no_mangle]
pub extern "C" fn srv_ibv_get_sysfs_path() -> *const libc::c_char {
    c"/sys".as_ptr()
}

/// The `ibv_copy_*_from_kern` / `_to_kern` converters of kernel command
/// structures (used by librdmacm for InfiniBand path records): nothing to
/// convert without a kernel.
#[no_mangle]
pub extern "C" fn srv_ibv_copy_path_rec_from_kern() {}
#[no_mangle]
pub extern "C" fn srv_ibv_copy_path_rec_to_kern() {}
#[no_mangle]
pub extern "C" fn srv_ibv_copy_qp_attr_from_kern() {}
#[no_mangle]
pub extern "C" fn srv_ibv_copy_ah_attr_from_kern() {}
