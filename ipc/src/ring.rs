//! The shared-memory rings: layouts, WQE/CQE encodings and their
//! validation. Everything the daemon reads from a ring is copied out first
//! and then checked: the client may change it at any moment.
//!
//! A ring is a 128-byte header — producer index (u32) at byte 0, consumer
//! index (u32) at byte 64, each on its own cache line, and a work ring's
//! doorbell slot (u32) at byte 108 ([`SLOT_AT`]) — followed by
//! `entries` fixed-size slots (`entries` a power of two). Indices are free
//! running u32s; slot = index & (entries - 1). The producer writes slots,
//! then publishes with a release store of the producer index (the
//! doorbell); the consumer acquires the producer index, reads the slots,
//! then release-stores its consumer index.

use nic::verbs::{
    MwBind, RecvWr, SendFlags, SendOp, SendWr, Sge, Sgl, Wc, WcOpcode, WcStatus, MAX_SGE,
};
use std::sync::atomic::AtomicU32;

pub const RING_HDR: usize = 128;
/// In a send, receive or SRQ ring's header: the ring's slot in its
/// client's doorbell page ([`crate::doorbell`]), written by the daemon
/// when it makes the ring. A producer publishes its index, then sets that
/// bit.
pub const SLOT_AT: usize = 108;
/// In a CQ ring's header: the client's request for a completion event
/// (`ibv_req_notify_cq`): 0 none, [`ARM_NEXT`] the next completion,
/// [`ARM_SOLICITED`] the next solicited or unsuccessful one (IBTA 11.4.2.2,
/// Request Completion Notification). The daemon takes it back to 0 when it
/// writes the event (once per request, as the verb says).
pub const ARMED_AT: usize = 100;
/// In a CQ ring's header: the daemon's count of the events it fired, as it
/// stood when it fired this CQ's latest (written before the "armed" word
/// goes to 0): of several CQs found fired at once, the one with the
/// lowest fired first.
pub const EVENT_SEQ_AT: usize = 104;
pub const ARM_NEXT: u32 = 1;
pub const ARM_SOLICITED: u32 = 2;
pub const WQE_SIZE: usize = 192;
pub const CQE_SIZE: usize = 32;
/// Largest ring the daemon makes: a CQ of rnicd's `MAX_CQE`
/// entries (work queues are held to `MAX_QP_WR`, smaller). A ring's
/// memfd takes memory only for the slots written.
pub const MAX_ENTRIES: u32 = 1 << 22;

/// Send opcodes in a WQE.
pub mod opcode {
    pub const SEND: u8 = 0;
    pub const SEND_WITH_IMM: u8 = 1;
    pub const RDMA_WRITE: u8 = 2;
    pub const RDMA_WRITE_WITH_IMM: u8 = 3;
    pub const RDMA_READ: u8 = 4;
    pub const ATOMIC_CMP_AND_SWP: u8 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u8 = 6;
    pub const SEND_WITH_INV: u8 = 7;
    /// A memory window bind: `rkey` the window's R_Key, `imm` its new one,
    /// `remote_addr`/`compare_add` the window's address and length,
    /// `swap` the region's lkey (high 32 bits) and the rights (low 32).
    pub const BIND_MW: u8 = 8;
    /// Local invalidate of the R_Key in `imm`.
    pub const LOCAL_INV: u8 = 9;
}

/// WQE flags.
pub mod flags {
    pub const SIGNALED: u8 = 1;
    pub const FENCE: u8 = 2;
    pub const SOLICITED: u8 = 4;
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct SgeRaw {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// A send or receive WQE as it sits in a ring slot (192 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct WqeRaw {
    pub wr_id: u64,
    pub opcode: u8,
    pub flags: u8,
    pub num_sge: u8,
    pub _r0: u8,
    /// Immediate data, or the rkey to invalidate for SEND_WITH_INV.
    pub imm: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub _r1: u32,
    /// Compare (CAS) or add (FAA).
    pub compare_add: u64,
    pub swap: u64,
    pub sge: [SgeRaw; MAX_SGE],
    /// UD sends only: the address handle (from `CreateAh`), the remote
    /// QPN and the remote Q_Key (IBA 9.8.3: the DETH carries it). RC and
    /// UC sends leave them zero, and their decoding ignores them.
    pub ah: u32,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub _r2: u32,
}

/// A completion as it sits in a CQ ring slot (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CqeRaw {
    pub wr_id: u64,
    pub status: u8,
    pub opcode: u8,
    pub flags: u8,
    pub _r: u8,
    pub qp_num: u32,
    pub byte_len: u32,
    pub imm: u32,
    pub inv_rkey: u32,
    pub src_qp: u32,
}

const _: () = assert!(std::mem::size_of::<WqeRaw>() == WQE_SIZE);
const _: () = assert!(std::mem::size_of::<CqeRaw>() == CQE_SIZE);

/// A type [`Ring::read`] and [`Ring::write`] copy in and out of slots.
///
/// # Safety
/// Implementors are `#[repr(C)]` plain old data: every bit pattern of
/// their size is a valid value, and they have no padding bytes (a slot's
/// bytes are shared with another process).
pub unsafe trait Slot: Copy {}
// SAFETY: repr(C), integer fields only, no padding (the size asserts).
unsafe impl Slot for WqeRaw {}
// SAFETY: repr(C), integer fields only, no padding (the size asserts).
unsafe impl Slot for CqeRaw {}

/// CQE flag bits.
pub mod cqe_flags {
    pub const IMM: u8 = 1;
    pub const INV: u8 = 2;
    pub const GRH: u8 = 4;
    pub const SOLICITED: u8 = 8;
    /// With GRH: the UD datagram came over IPv4.
    pub const GRH_IPV4: u8 = 16;
}

/// Bytes a ring of `entries` slots of `slot` bytes takes.
pub fn ring_bytes(entries: u32, slot: usize) -> usize {
    RING_HDR + entries as usize * slot
}

/// Rounds a requested depth to the ring size (a power of two, 1..=MAX).
pub fn ring_entries(req: u32) -> Option<u32> {
    if req == 0 || req > MAX_ENTRIES {
        None
    } else {
        Some(req.next_power_of_two())
    }
}

/// A view of one ring inside a mapping. The mapping must outlive it.
#[derive(Clone, Copy, Debug)]
pub struct Ring {
    base: *mut u8,
    pub entries: u32,
    slot: usize,
}

// SAFETY: a Ring is a pointer into a shared mapping kept alive by its owner.
unsafe impl Send for Ring {}
// SAFETY: every access through a shared Ring is a bounded volatile or
// atomic access to the shared mapping, which another process writes
// concurrently anyway; values read are validated by their users.
unsafe impl Sync for Ring {}

impl Ring {
    /// # Safety
    /// `base` must point at `ring_bytes(entries, slot)` mapped bytes that
    /// stay mapped while the ring is used; `entries` a power of two.
    pub unsafe fn new(base: *mut u8, entries: u32, slot: usize) -> Ring {
        Ring {
            base,
            entries,
            slot,
        }
    }

    #[inline]
    pub fn producer(&self) -> &AtomicU32 {
        // SAFETY: inside the header, aligned (page-aligned mapping + 0).
        unsafe { AtomicU32::from_ptr(self.base as *mut u32) }
    }

    #[inline]
    pub fn consumer(&self) -> &AtomicU32 {
        // SAFETY: inside the header, aligned.
        unsafe { AtomicU32::from_ptr(self.base.add(64) as *mut u32) }
    }

    /// A CQ ring's "armed" word ([`ARMED_AT`]).
    #[inline]
    pub fn armed(&self) -> &AtomicU32 {
        // SAFETY: inside the header, aligned.
        unsafe { AtomicU32::from_ptr(self.base.add(ARMED_AT) as *mut u32) }
    }

    /// A CQ ring's event sequence word ([`EVENT_SEQ_AT`]).
    #[inline]
    pub fn event_seq(&self) -> &AtomicU32 {
        // SAFETY: inside the header, aligned.
        unsafe { AtomicU32::from_ptr(self.base.add(EVENT_SEQ_AT) as *mut u32) }
    }

    /// A work ring's doorbell slot ([`SLOT_AT`]).
    #[inline]
    pub fn slot(&self) -> &AtomicU32 {
        // SAFETY: inside the header, aligned.
        unsafe { AtomicU32::from_ptr(self.base.add(SLOT_AT) as *mut u32) }
    }

    fn slot_ptr(&self, idx: u32) -> *mut u8 {
        let i = (idx & (self.entries - 1)) as usize;
        // SAFETY: i < entries, so the slot is inside the ring.
        unsafe { self.base.add(RING_HDR + i * self.slot) }
    }

    /// Copies slot `idx` out.
    ///
    /// # Panics
    /// If `T` is larger than the ring's slot (a programming error).
    pub fn read<T: Slot>(&self, idx: u32) -> T {
        assert!(std::mem::size_of::<T>() <= self.slot);
        // SAFETY: the slot is inside the ring and holds a T (checked
        // above); any bits are a valid T (`Slot`); volatile because the
        // other process may write concurrently.
        unsafe { std::ptr::read_volatile(self.slot_ptr(idx) as *const T) }
    }

    /// Copies `v` into slot `idx`.
    ///
    /// # Panics
    /// If `T` is larger than the ring's slot (a programming error).
    pub fn write<T: Slot>(&self, idx: u32, v: &T) {
        assert!(std::mem::size_of::<T>() <= self.slot);
        // SAFETY: the slot is inside the ring and has room for a T
        // (checked above).
        unsafe { std::ptr::write_volatile(self.slot_ptr(idx) as *mut T, *v) }
    }

    /// Raw bytes of the whole ring, header included (for tests that play
    /// a hostile client).
    pub fn raw_bytes(&self) -> (*mut u8, usize) {
        (self.base, ring_bytes(self.entries, self.slot))
    }
}

/// Why a WQE was refused before reaching the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadWqe {
    Opcode,
    SgeCount,
    /// A UD send whose address handle the client does not own (or whose
    /// PD differs from the QP's).
    Ah,
}

impl BadWqe {
    pub fn status(self) -> WcStatus {
        match self {
            BadWqe::Opcode => WcStatus::LocQpOpErr,
            BadWqe::SgeCount => WcStatus::LocLenErr,
            BadWqe::Ah => WcStatus::LocQpOpErr,
        }
    }
}

fn sgl(w: &WqeRaw) -> Result<Sgl, BadWqe> {
    let n = w.num_sge as usize;
    if n > MAX_SGE {
        return Err(BadWqe::SgeCount);
    }
    let sges: Vec<Sge> = w.sge[..n]
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect();
    Sgl::new(&sges).ok_or(BadWqe::SgeCount)
}

/// Decodes a send WQE; keys and lengths are checked by the transport.
pub fn decode_send(w: &WqeRaw) -> Result<SendWr, BadWqe> {
    let (remote_addr, rkey) = (w.remote_addr, w.rkey);
    let op = match w.opcode {
        opcode::SEND => SendOp::Send,
        opcode::SEND_WITH_IMM => SendOp::SendWithImm { imm: w.imm },
        opcode::SEND_WITH_INV => SendOp::SendWithInv {
            invalidate_rkey: w.imm,
        },
        opcode::RDMA_WRITE => SendOp::Write { remote_addr, rkey },
        opcode::RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm {
            remote_addr,
            rkey,
            imm: w.imm,
        },
        opcode::RDMA_READ => SendOp::Read { remote_addr, rkey },
        opcode::ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare: w.compare_add,
            swap: w.swap,
        },
        opcode::ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote_addr,
            rkey,
            add: w.compare_add,
        },
        opcode::BIND_MW => SendOp::BindMw(MwBind {
            mw_rkey: rkey,
            new_rkey: w.imm,
            mr_lkey: (w.swap >> 32) as u32,
            addr: remote_addr,
            len: w.compare_add,
            access: w.swap as u32,
        }),
        opcode::LOCAL_INV => SendOp::LocalInv { rkey: w.imm },
        _ => return Err(BadWqe::Opcode),
    };
    if w.flags & !(flags::SIGNALED | flags::FENCE | flags::SOLICITED) != 0 {
        return Err(BadWqe::Opcode);
    }
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        sgl: sgl(w)?,
        flags: SendFlags {
            signaled: w.flags & flags::SIGNALED != 0,
            fence: w.flags & flags::FENCE != 0,
            solicited: w.flags & flags::SOLICITED != 0,
            inline: false,
        },
        ud: None,
    })
}

pub fn decode_recv(w: &WqeRaw) -> Result<RecvWr, BadWqe> {
    Ok(RecvWr {
        wr_id: w.wr_id,
        sgl: sgl(w)?,
    })
}

/// Encodes a send WR (client side).
pub fn encode_send(wr: &SendWr) -> WqeRaw {
    let mut w = WqeRaw {
        wr_id: wr.wr_id,
        ..Default::default()
    };
    let (op, ra, rk, imm, ca, sw) = match wr.op {
        SendOp::Send => (opcode::SEND, 0, 0, 0, 0, 0),
        SendOp::SendWithImm { imm } => (opcode::SEND_WITH_IMM, 0, 0, imm, 0, 0),
        SendOp::SendWithInv { invalidate_rkey } => {
            (opcode::SEND_WITH_INV, 0, 0, invalidate_rkey, 0, 0)
        }
        SendOp::Write { remote_addr, rkey } => (opcode::RDMA_WRITE, remote_addr, rkey, 0, 0, 0),
        SendOp::WriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (opcode::RDMA_WRITE_WITH_IMM, remote_addr, rkey, imm, 0, 0),
        SendOp::Read { remote_addr, rkey } => (opcode::RDMA_READ, remote_addr, rkey, 0, 0, 0),
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => (
            opcode::ATOMIC_CMP_AND_SWP,
            remote_addr,
            rkey,
            0,
            compare,
            swap,
        ),
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => (opcode::ATOMIC_FETCH_AND_ADD, remote_addr, rkey, 0, add, 0),
        SendOp::BindMw(b) => (
            opcode::BIND_MW,
            b.addr,
            b.mw_rkey,
            b.new_rkey,
            b.len,
            ((b.mr_lkey as u64) << 32) | b.access as u64,
        ),
        SendOp::LocalInv { rkey } => (opcode::LOCAL_INV, 0, 0, rkey, 0, 0),
    };
    w.opcode = op;
    w.remote_addr = ra;
    w.rkey = rk;
    w.imm = imm;
    w.compare_add = ca;
    w.swap = sw;
    let f = &wr.flags;
    w.flags = (f.signaled as u8 * flags::SIGNALED)
        | (f.fence as u8 * flags::FENCE)
        | (f.solicited as u8 * flags::SOLICITED);
    set_sgl(&mut w, &wr.sgl);
    w
}

/// Encodes a UD send (client side): `ah` is the daemon's AH handle.
pub fn encode_send_ud(wr: &SendWr, ah: u32, remote_qpn: u32, remote_qkey: u32) -> WqeRaw {
    let mut w = encode_send(wr);
    w.ah = ah;
    w.remote_qpn = remote_qpn & 0x00ff_ffff;
    w.remote_qkey = remote_qkey;
    w
}

pub fn encode_recv(wr: &RecvWr) -> WqeRaw {
    let mut w = WqeRaw {
        wr_id: wr.wr_id,
        ..Default::default()
    };
    set_sgl(&mut w, &wr.sgl);
    w
}

fn set_sgl(w: &mut WqeRaw, sgl: &Sgl) {
    let s = sgl.as_slice();
    w.num_sge = s.len() as u8;
    for (d, s) in w.sge.iter_mut().zip(s) {
        *d = SgeRaw {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
    }
}

/// A CQE's status code is its index here (new ones go at the end).
const STATUSES: [WcStatus; 14] = [
    WcStatus::Success,
    WcStatus::LocLenErr,
    WcStatus::LocQpOpErr,
    WcStatus::LocProtErr,
    WcStatus::WrFlushErr,
    WcStatus::LocAccessErr,
    WcStatus::RemInvReqErr,
    WcStatus::RemAccessErr,
    WcStatus::RemOpErr,
    WcStatus::RetryExcErr,
    WcStatus::RnrRetryExcErr,
    WcStatus::BadRespErr,
    WcStatus::GeneralErr,
    WcStatus::MwBindErr,
];

/// A CQE's opcode code is its index here (new ones go at the end).
const OPCODES: [WcOpcode; 9] = [
    WcOpcode::Send,
    WcOpcode::RdmaWrite,
    WcOpcode::RdmaRead,
    WcOpcode::CompSwap,
    WcOpcode::FetchAdd,
    WcOpcode::Recv,
    WcOpcode::RecvRdmaWithImm,
    WcOpcode::BindMw,
    WcOpcode::LocalInv,
];

/// The numeric status in a CQE (the order of `ibv_wc_status` for these).
pub fn status_code(s: WcStatus) -> u8 {
    STATUSES.iter().position(|x| *x == s).unwrap_or(12) as u8
}

pub fn opcode_code(o: WcOpcode) -> u8 {
    OPCODES.iter().position(|x| *x == o).unwrap_or(0) as u8
}

pub fn encode_cqe(wc: &Wc) -> CqeRaw {
    CqeRaw {
        wr_id: wc.wr_id,
        status: status_code(wc.status),
        opcode: opcode_code(wc.opcode),
        flags: (wc.imm.is_some() as u8 * cqe_flags::IMM)
            | (wc.invalidated_rkey.is_some() as u8 * cqe_flags::INV)
            | (wc.grh as u8 * cqe_flags::GRH)
            | (wc.solicited as u8 * cqe_flags::SOLICITED)
            | (wc.grh_ipv4 as u8 * cqe_flags::GRH_IPV4),
        _r: 0,
        qp_num: wc.qp_num,
        byte_len: wc.byte_len,
        imm: wc.imm.unwrap_or(0),
        inv_rkey: wc.invalidated_rkey.unwrap_or(0),
        src_qp: wc.src_qp,
    }
}

/// Decodes a CQE (client side; the daemon wrote it, but the memory is
/// shared, so unknown codes map to GeneralErr rather than panicking).
pub fn decode_cqe(c: &CqeRaw) -> Wc {
    let mut wc = Wc::new(
        c.wr_id,
        *STATUSES
            .get(c.status as usize)
            .unwrap_or(&WcStatus::GeneralErr),
        *OPCODES.get(c.opcode as usize).unwrap_or(&WcOpcode::Send),
        c.qp_num,
    );
    wc.byte_len = c.byte_len;
    wc.imm = (c.flags & cqe_flags::IMM != 0).then_some(c.imm);
    wc.invalidated_rkey = (c.flags & cqe_flags::INV != 0).then_some(c.inv_rkey);
    wc.grh = c.flags & cqe_flags::GRH != 0;
    wc.grh_ipv4 = wc.grh && c.flags & cqe_flags::GRH_IPV4 != 0;
    wc.solicited = c.flags & cqe_flags::SOLICITED != 0;
    wc.src_qp = c.src_qp;
    wc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_roundtrip_and_garbage() {
        let wr = SendWr::new(
            7,
            SendOp::CompareSwap {
                remote_addr: 0x1000,
                rkey: 9,
                compare: 1,
                swap: 2,
            },
            Sgl::single(0x2000, 8, 3),
        );
        let back = decode_send(&encode_send(&wr)).unwrap();
        assert_eq!(back.op, wr.op);
        assert_eq!(back.sgl, wr.sgl);
        let mut bad = encode_send(&wr);
        bad.num_sge = 200;
        assert_eq!(decode_send(&bad).unwrap_err(), BadWqe::SgeCount);
        bad.opcode = 99;
        assert!(decode_send(&bad).is_err());
        // RC decoding ignores the UD fields
        let ud = encode_send_ud(
            &SendWr::new(1, SendOp::Send, Sgl::single(0, 4, 1)),
            9,
            0x1ff_ffff,
            7,
        );
        assert_eq!((ud.ah, ud.remote_qpn, ud.remote_qkey), (9, 0xff_ffff, 7));
        assert!(decode_send(&ud).unwrap().ud.is_none());
        for s in STATUSES {
            let mut wc = Wc::new(1, s, WcOpcode::Recv, 5);
            wc.imm = Some(3);
            assert_eq!(decode_cqe(&encode_cqe(&wc)), wc);
        }
        // a UD receive keeps whether its GRH area holds IPv4 or IPv6
        for ipv4 in [false, true] {
            let mut wc = Wc::new(2, WcStatus::Success, WcOpcode::Recv, 5);
            (wc.grh, wc.grh_ipv4, wc.src_qp) = (true, ipv4, 0x11);
            assert_eq!(decode_cqe(&encode_cqe(&wc)), wc);
        }
    }
}
