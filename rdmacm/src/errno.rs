//! How a failed call reaches the application: rdma-core's convention (-1
//! with `errno` set, or NULL) and, where the errno alone would leave a
//! caller guessing, one line on stderr.

use crate::backend::BackendError;
use libc::c_int;

/// Sets `errno`.
fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// -1 with `errno` = `e`: how librdmacm reports a failure.
pub fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// One line on stderr: why a call failed, when the errno alone would not
/// say.
pub fn complain(verb: &str, why: impl std::fmt::Display) {
    eprintln!("softrnic-rdmacm: {verb}: {why}");
}

/// The errno of a command the connection manager refused, its reason on
/// stderr under `verb`.
pub fn refused(verb: &str, e: BackendError) -> c_int {
    complain(verb, &e);
    e.errno
}
