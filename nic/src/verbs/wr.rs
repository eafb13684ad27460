//! Work requests and work completions, in the shape of libibverbs'
//! `ibv_send_wr`, `ibv_recv_wr` and `ibv_wc`.

use core::fmt;
use wire::Gid;

/// Most scatter/gather entries one work request may carry.
pub const MAX_SGE: usize = 8;

/// One scatter/gather entry: `length` bytes at virtual address `addr` of the
/// memory region whose local key is `lkey`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// A scatter/gather list of at most `MAX_SGE` entries, stored inline so a
/// work request needs no allocation.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Sgl {
    len: u8,
    items: [Sge; MAX_SGE],
}

impl Sgl {
    pub fn new(sges: &[Sge]) -> Option<Sgl> {
        if sges.len() > MAX_SGE {
            return None;
        }
        let mut s = Sgl {
            len: sges.len() as u8,
            ..Default::default()
        };
        s.items[..sges.len()].copy_from_slice(sges);
        Some(s)
    }

    pub fn single(addr: u64, length: u32, lkey: u32) -> Sgl {
        Sgl::new(&[Sge { addr, length, lkey }]).expect("one entry fits")
    }

    pub fn as_slice(&self) -> &[Sge] {
        &self.items[..self.len as usize]
    }

    /// Sum of the entry lengths.
    pub fn total_len(&self) -> u64 {
        self.as_slice().iter().map(|s| s.length as u64).sum()
    }
}

impl fmt::Debug for Sgl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// Send-queue operations (`ibv_wr_opcode`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SendOp {
    Send,
    SendWithImm {
        imm: u32,
    },
    SendWithInv {
        invalidate_rkey: u32,
    },
    Write {
        remote_addr: u64,
        rkey: u32,
    },
    WriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    Read {
        remote_addr: u64,
        rkey: u32,
    },
    CompareSwap {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    /// `IBV_WR_BIND_MW` (and what `ibv_bind_mw` posts): binds a memory
    /// window; executed by the requester in order, nothing on the wire.
    BindMw(super::MwBind),
    /// `IBV_WR_LOCAL_INV`: invalidates a type 2 window's R_Key.
    LocalInv {
        rkey: u32,
    },
}

impl SendOp {
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
    pub fn is_atomic(&self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
    pub fn is_send(&self) -> bool {
        matches!(
            self,
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }
        )
    }
    /// A local operation: executed by the requester, no packet sent.
    pub fn is_local(&self) -> bool {
        matches!(self, SendOp::BindMw(_) | SendOp::LocalInv { .. })
    }
    pub fn is_write(&self) -> bool {
        matches!(self, SendOp::Write { .. } | SendOp::WriteWithImm { .. })
    }
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
                WcOpcode::Send
            }
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::BindMw(_) => WcOpcode::BindMw,
            SendOp::LocalInv { .. } => WcOpcode::LocalInv,
        }
    }
}

/// `IBV_SEND_*` flags.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SendFlags {
    /// Generate a completion (always on for QPs created with `sq_sig_all`).
    pub signaled: bool,
    /// Wait for earlier READs and atomics to complete first (IBA 10.8.3.3).
    pub fence: bool,
    /// Set the solicited-event bit on the last packet.
    pub solicited: bool,
    /// Copy the data into the work request at post time.
    pub inline: bool,
}

/// Where a UD send goes (address handle + remote QPN + Q_Key).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct UdDest {
    pub ah: AhAttr,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// Address vector: how to reach a peer on Ethernet (RoCEv2: IP + MAC).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AhAttr {
    pub dgid: Gid,
    pub dmac: wire::EthernetAddress,
    /// IP traffic class: DSCP << 2 | ECN.
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 20-bit flow label; 0 lets the UDP source port follow the QPNs.
    pub flow_label: u32,
    /// 802.1Q tag to send with, if any.
    pub vlan: Option<wire::VlanTag>,
}

impl AhAttr {
    pub fn new(dgid: Gid, dmac: wire::EthernetAddress) -> AhAttr {
        AhAttr {
            dgid,
            dmac,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            vlan: None,
        }
    }

    /// Whether each value is one the wire can carry: what arrives from
    /// another process is checked with this before it is used.
    pub fn check(&self) -> Result<(), AhError> {
        // RFC 8200: IPv6 flow labels have 20 bits.
        if self.flow_label > 0xf_ffff {
            return Err(AhError::FlowLabel(self.flow_label));
        }
        // IEEE 802.1Q 9.6: PCP 0..=7; VID 0..=4094 (4095 is reserved).
        match self.vlan {
            Some(v) if v.pcp > 7 || v.vid > 4094 => Err(AhError::Vlan {
                pcp: v.pcp,
                vid: v.vid,
            }),
            _ => Ok(()),
        }
    }
}

/// Why an address vector cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AhError {
    #[error("flow label {0:#x} does not fit in 20 bits")]
    FlowLabel(u32),
    #[error("VLAN pcp {pcp} vid {vid}: pcp 0..=7, vid 0..=4094")]
    Vlan { pcp: u8, vid: u16 },
}

/// A send work request.
#[derive(Clone, Debug)]
pub struct SendWr {
    pub wr_id: u64,
    pub op: SendOp,
    pub sgl: Sgl,
    pub flags: SendFlags,
    pub ud: Option<UdDest>,
}

impl SendWr {
    pub fn new(wr_id: u64, op: SendOp, sgl: Sgl) -> SendWr {
        SendWr {
            wr_id,
            op,
            sgl,
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
            ud: None,
        }
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sgl: Sgl,
}

/// `ibv_wc_status`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum WcStatus {
    Success,
    LocLenErr,
    LocQpOpErr,
    LocProtErr,
    WrFlushErr,
    MwBindErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
    BadRespErr,
    GeneralErr,
}

impl WcStatus {
    /// The libibverbs name, as `ibv_wc_status_str` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory bind operation error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// `ibv_wc_opcode`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    BindMw,
    LocalInv,
    Recv,
    RecvRdmaWithImm,
}

/// A work completion.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub qp_num: u32,
    pub byte_len: u32,
    pub imm: Option<u32>,
    pub invalidated_rkey: Option<u32>,
    /// UD: the sender's QPN.
    pub src_qp: u32,
    /// UD: a GRH (40 bytes) precedes the data in the receive buffer.
    pub grh: bool,
    /// UD over RoCEv2: the datagram came over IPv4, so the GRH area holds
    /// an IPv4 header in its last 20 bytes (RoCEv2 Annex A17.4.5.1: a UD
    /// completion says whether the frame was IPv4 or IPv6).
    pub grh_ipv4: bool,
    pub solicited: bool,
}

impl Wc {
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            qp_num,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            src_qp: 0,
            grh: false,
            grh_ipv4: false,
            solicited: false,
        }
    }
}
