//! What a UD ID's events add to the daemon's: the address handle
//! attributes of `rdma_ud_param` name the ID's own port and source GID
//! (its index in libibverbs' GID table), as the kernel's RDMA CM fills
//! them, so that `ibv_create_ah` takes them as they are.

use crate::abi::*;
use crate::state::IdPriv;

/// Sets the port and the source GID index of `ev.param.ud.ah_attr` (an
/// event whose UD parameters are written) to those of `idp`'s device and
/// bound address.
pub fn complete_ah(idp: &IdPriv, ev: &mut rdma_cm_event) {
    // SAFETY: every member of the `param` union is plain data (integers,
    // a pointer, arrays), valid for any bytes; the caller wrote `ud`.
    let ah = unsafe { &mut ev.param.ud.ah_attr };
    let raw = idp.raw();
    if raw.verbs.is_null() {
        return;
    }
    let sgid = raw.route.addr.ibaddr.sgid.raw;
    // SAFETY: the ID's context is one of the library's.
    if let Some(i) = unsafe { idp.lib.verbs.gid_index(raw.verbs, sgid) } {
        ah.grh.sgid_index = i;
    }
    ah.port_num = raw.port_num.max(1);
}
