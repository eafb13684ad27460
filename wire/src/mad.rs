//! Management datagrams on the General Services Interface and the messages
//! of the Communication Manager (CM) that RDMA CM speaks over them.
//!
//! A MAD is the 256-byte payload of a UD SEND to QP1 (the GSI, IBA 13.5.1;
//! on RoCE there is no QP0): a 24-byte common header (IBA 13.4.2) and 232
//! bytes of class data. The CM class (management class 0x07, class version
//! 2, IBA 12.6) carries REQ, MRA, REJ, REP, RTU, DREQ and DREP; every field
//! of those keeps its IBA position, reserved bits included, so that
//! `parse` then `emit` gives back the same bytes. The RDMA IP CM service
//! (IBA Annex A11) puts the connection's IP addresses and ports in the REQ's
//! private data and its port space and port in the service ID:
//! [`IpCmPrivateData`], [`ip_cm_service_id`].
//!
//! Byte offsets below are within the class data (after the common header),
//! as the IBA tables count them.

use crate::bytes::{array, be16, be24, be32, be64, put16, put24, put32, put64};
use crate::error::{need, Error, Layer, Result};
use core::fmt;

/// A MAD: the common header and the class data.
pub const MAD_LEN: usize = 256;
/// The common MAD header (IBA 13.4.2).
pub const MAD_HEADER_LEN: usize = 24;
/// The class data that follows it.
pub const MAD_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// The General Services Interface's QP (IBA 13.5.1).
pub const GSI_QPN: u32 = 1;
/// The Q_Key every GSI datagram carries (IBA 13.5.1: 0x80010000).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The management class of the Communication Manager (IBA 13.4.4).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version of IBA 1.2 and later, which rxe and rdma-core send.
pub const CM_CLASS_VERSION: u8 = 2;
/// The MAD base version.
pub const MAD_BASE_VERSION: u8 = 1;
/// Method `Send()` (IBA 13.4.5): every CM message is one.
pub const METHOD_SEND: u8 = 0x03;

/// The common MAD header (IBA 13.4.2, 24 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct MadHeader {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// The method with the response bit (bit 7).
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub transaction_id: u64,
    pub attribute_id: u16,
    pub reserved: u16,
    pub attribute_modifier: u32,
}

impl MadHeader {
    pub fn parse(b: &[u8]) -> Result<MadHeader> {
        need(Layer::Mad, b, MAD_HEADER_LEN)?;
        Ok(MadHeader {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: be16(b, 4),
            class_specific: be16(b, 6),
            transaction_id: be64(b, 8),
            attribute_id: be16(b, 16),
            reserved: be16(b, 18),
            attribute_modifier: be32(b, 20),
        })
    }

    /// Writes the header into the first 24 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, MAD_HEADER_LEN)?;
        b[0] = self.base_version;
        b[1] = self.mgmt_class;
        b[2] = self.class_version;
        b[3] = self.method;
        put16(b, 4, self.status);
        put16(b, 6, self.class_specific);
        put64(b, 8, self.transaction_id);
        put16(b, 16, self.attribute_id);
        put16(b, 18, self.reserved);
        put32(b, 20, self.attribute_modifier);
        Ok(())
    }

    /// A CM `Send()` header for `attribute_id`.
    pub fn cm(attribute_id: u16, transaction_id: u64) -> MadHeader {
        MadHeader {
            base_version: MAD_BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            transaction_id,
            attribute_id,
            ..MadHeader::default()
        }
    }
}

fn room(b: &[u8], n: usize) -> Result<()> {
    if b.len() < n {
        Err(Error::BufferTooSmall {
            need: n,
            have: b.len(),
        })
    } else {
        Ok(())
    }
}

/// The CM attribute IDs (IBA 12.6, Table 97 in IBA 1.3).
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001A;
}

/// One path of a REQ (IBA 12.6.5: the primary and the alternate path, 44
/// bytes each, the same layout).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct CmPath {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// The 6 reserved bits after the flow label.
    pub reserved1: u8,
    /// 6 bits.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// The 3 reserved bits after Subnet Local.
    pub reserved2: u8,
    /// 5 bits.
    pub local_ack_timeout: u8,
    /// The 3 reserved bits after it.
    pub reserved3: u8,
}

const PATH_LEN: usize = 44;

impl CmPath {
    fn parse(b: &[u8]) -> CmPath {
        let w = be32(b, 36);
        CmPath {
            local_lid: be16(b, 0),
            remote_lid: be16(b, 2),
            local_gid: array(b, 4),
            remote_gid: array(b, 20),
            flow_label: w >> 12,
            reserved1: ((w >> 6) & 0x3F) as u8,
            packet_rate: (w & 0x3F) as u8,
            traffic_class: b[40],
            hop_limit: b[41],
            sl: b[42] >> 4,
            subnet_local: b[42] & 0x08 != 0,
            reserved2: b[42] & 0x07,
            local_ack_timeout: b[43] >> 3,
            reserved3: b[43] & 0x07,
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put16(b, 0, self.local_lid);
        put16(b, 2, self.remote_lid);
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        put32(
            b,
            36,
            (self.flow_label & 0xF_FFFF) << 12
                | u32::from(self.reserved1 & 0x3F) << 6
                | u32::from(self.packet_rate & 0x3F),
        );
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = (self.sl & 0x0F) << 4 | u8::from(self.subnet_local) << 3 | (self.reserved2 & 0x07);
        b[43] = (self.local_ack_timeout & 0x1F) << 3 | (self.reserved3 & 0x07);
    }
}

/// ConnectRequest (IBA 12.6.5).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmReq {
    pub local_comm_id: u32,
    pub reserved0: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub reserved1: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits: 4.096 µs × 2^n.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 2 RD.
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// 4 bits, the IBA MTU code (1: 256 ... 5: 4096).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits.
    pub extended_transport_type: u8,
    pub primary: CmPath,
    pub alternate: CmPath,
    pub private_data: [u8; CmReq::PRIVATE_DATA_LEN],
}

impl CmReq {
    pub const PRIVATE_DATA_LEN: usize = 92;

    fn parse(b: &[u8]) -> CmReq {
        CmReq {
            local_comm_id: be32(b, 0),
            reserved0: be32(b, 4),
            service_id: be64(b, 8),
            local_ca_guid: be64(b, 16),
            reserved1: be32(b, 24),
            local_qkey: be32(b, 28),
            local_qpn: be24(b, 32),
            responder_resources: b[35],
            local_eecn: be24(b, 36),
            initiator_depth: b[39],
            remote_eecn: be24(b, 40),
            remote_cm_response_timeout: b[43] >> 3,
            transport_service_type: (b[43] >> 1) & 0x03,
            end_to_end_flow_control: b[43] & 0x01 != 0,
            starting_psn: be24(b, 44),
            local_cm_response_timeout: b[47] >> 3,
            retry_count: b[47] & 0x07,
            pkey: be16(b, 48),
            path_mtu: b[50] >> 4,
            rdc_exists: b[50] & 0x08 != 0,
            rnr_retry_count: b[50] & 0x07,
            max_cm_retries: b[51] >> 4,
            srq: b[51] & 0x08 != 0,
            extended_transport_type: b[51] & 0x07,
            primary: CmPath::parse(&b[52..52 + PATH_LEN]),
            alternate: CmPath::parse(&b[96..96 + PATH_LEN]),
            private_data: array(b, 140),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.reserved0);
        put64(b, 8, self.service_id);
        put64(b, 16, self.local_ca_guid);
        put32(b, 24, self.reserved1);
        put32(b, 28, self.local_qkey);
        put24(b, 32, self.local_qpn);
        b[35] = self.responder_resources;
        put24(b, 36, self.local_eecn);
        b[39] = self.initiator_depth;
        put24(b, 40, self.remote_eecn);
        b[43] = (self.remote_cm_response_timeout & 0x1F) << 3
            | (self.transport_service_type & 0x03) << 1
            | u8::from(self.end_to_end_flow_control);
        put24(b, 44, self.starting_psn);
        b[47] = (self.local_cm_response_timeout & 0x1F) << 3 | (self.retry_count & 0x07);
        put16(b, 48, self.pkey);
        b[50] = (self.path_mtu & 0x0F) << 4
            | u8::from(self.rdc_exists) << 3
            | (self.rnr_retry_count & 0x07);
        b[51] = (self.max_cm_retries & 0x0F) << 4
            | u8::from(self.srq) << 3
            | (self.extended_transport_type & 0x07);
        self.primary.emit(&mut b[52..52 + PATH_LEN]);
        self.alternate.emit(&mut b[96..96 + PATH_LEN]);
        b[140..].copy_from_slice(&self.private_data);
    }
}

/// MessageReceiptAcknowledgement (IBA 12.6.6).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmMra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits: 0 REQ, 1 REP, 2 LAP.
    pub message_mraed: u8,
    pub reserved0: u8,
    /// 5 bits: 4.096 µs × 2^n.
    pub service_timeout: u8,
    pub reserved1: u8,
    pub private_data: [u8; CmMra::PRIVATE_DATA_LEN],
}

impl CmMra {
    pub const PRIVATE_DATA_LEN: usize = 222;

    fn parse(b: &[u8]) -> CmMra {
        CmMra {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            message_mraed: b[8] >> 6,
            reserved0: b[8] & 0x3F,
            service_timeout: b[9] >> 3,
            reserved1: b[9] & 0x07,
            private_data: array(b, 10),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[8] = (self.message_mraed & 0x03) << 6 | (self.reserved0 & 0x3F);
        b[9] = (self.service_timeout & 0x1F) << 3 | (self.reserved1 & 0x07);
        b[10..].copy_from_slice(&self.private_data);
    }
}

/// Reject (IBA 12.6.7).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmRej {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits: 0 REQ, 1 REP, 2 no message (a stale connection).
    pub message_rejected: u8,
    pub reserved0: u8,
    /// 7 bits: how many bytes of `ari` count.
    pub reject_info_length: u8,
    pub reserved1: u8,
    /// IBA Table 104 (e.g. 1 no QP, 8 invalid service ID, 28 consumer reject).
    pub reason: u16,
    /// Additional Rejection Information.
    pub ari: [u8; 72],
    pub private_data: [u8; CmRej::PRIVATE_DATA_LEN],
}

impl CmRej {
    pub const PRIVATE_DATA_LEN: usize = 148;

    fn parse(b: &[u8]) -> CmRej {
        CmRej {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            message_rejected: b[8] >> 6,
            reserved0: b[8] & 0x3F,
            reject_info_length: b[9] >> 1,
            reserved1: b[9] & 0x01,
            reason: be16(b, 10),
            ari: array(b, 12),
            private_data: array(b, 84),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[8] = (self.message_rejected & 0x03) << 6 | (self.reserved0 & 0x3F);
        b[9] = (self.reject_info_length & 0x7F) << 1 | (self.reserved1 & 0x01);
        put16(b, 10, self.reason);
        b[12..84].copy_from_slice(&self.ari);
        b[84..].copy_from_slice(&self.private_data);
    }
}

/// ConnectReply (IBA 12.6.8).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmRep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub reserved0: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub reserved1: u8,
    /// 24 bits.
    pub starting_psn: u32,
    pub reserved2: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits: 0 accepted, 1 not supported, 2 rejected.
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// 4 bits.
    pub reserved3: u8,
    pub local_ca_guid: u64,
    pub private_data: [u8; CmRep::PRIVATE_DATA_LEN],
}

impl CmRep {
    pub const PRIVATE_DATA_LEN: usize = 196;

    fn parse(b: &[u8]) -> CmRep {
        CmRep {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            local_qkey: be32(b, 8),
            local_qpn: be24(b, 12),
            reserved0: b[15],
            local_eecn: be24(b, 16),
            reserved1: b[19],
            starting_psn: be24(b, 20),
            reserved2: b[23],
            responder_resources: b[24],
            initiator_depth: b[25],
            target_ack_delay: b[26] >> 3,
            failover_accepted: (b[26] >> 1) & 0x03,
            end_to_end_flow_control: b[26] & 0x01 != 0,
            rnr_retry_count: b[27] >> 5,
            srq: b[27] & 0x10 != 0,
            reserved3: b[27] & 0x0F,
            local_ca_guid: be64(b, 28),
            private_data: array(b, 36),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put32(b, 8, self.local_qkey);
        put24(b, 12, self.local_qpn);
        b[15] = self.reserved0;
        put24(b, 16, self.local_eecn);
        b[19] = self.reserved1;
        put24(b, 20, self.starting_psn);
        b[23] = self.reserved2;
        b[24] = self.responder_resources;
        b[25] = self.initiator_depth;
        b[26] = (self.target_ack_delay & 0x1F) << 3
            | (self.failover_accepted & 0x03) << 1
            | u8::from(self.end_to_end_flow_control);
        b[27] =
            (self.rnr_retry_count & 0x07) << 5 | u8::from(self.srq) << 4 | (self.reserved3 & 0x0F);
        put64(b, 28, self.local_ca_guid);
        b[36..].copy_from_slice(&self.private_data);
    }
}

/// ReadyToUse (IBA 12.6.9), DisconnectReply (IBA 12.6.11): the two
/// communication IDs and private data.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmIds {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; CmIds::PRIVATE_DATA_LEN],
}

impl CmIds {
    pub const PRIVATE_DATA_LEN: usize = 224;

    fn parse(b: &[u8]) -> CmIds {
        CmIds {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            private_data: array(b, 8),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[8..].copy_from_slice(&self.private_data);
    }
}

/// DisconnectRequest (IBA 12.6.10).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmDreq {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits: the QPN (or EECN) the receiver disconnects.
    pub remote_qpn: u32,
    pub reserved0: u8,
    pub private_data: [u8; CmDreq::PRIVATE_DATA_LEN],
}

impl CmDreq {
    pub const PRIVATE_DATA_LEN: usize = 220;

    fn parse(b: &[u8]) -> CmDreq {
        CmDreq {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            remote_qpn: be24(b, 8),
            reserved0: b[11],
            private_data: array(b, 12),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put24(b, 8, self.remote_qpn);
        b[11] = self.reserved0;
        b[12..].copy_from_slice(&self.private_data);
    }
}

/// The class data of a CM MAD, by attribute.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmMessage {
    Req(CmReq),
    Mra(CmMra),
    Rej(CmRej),
    Rep(CmRep),
    Rtu(CmIds),
    Dreq(CmDreq),
    Drep(CmIds),
    /// Another attribute (SIDR, LAP, APR, ClassPortInfo...), kept raw.
    Other {
        attribute_id: u16,
        data: [u8; MAD_DATA_LEN],
    },
}

impl CmMessage {
    /// Parses the 232 bytes of class data of a CM MAD with `attribute_id`.
    pub fn parse(attribute_id: u16, data: &[u8]) -> Result<CmMessage> {
        need(Layer::Mad, data, MAD_DATA_LEN)?;
        let b = &data[..MAD_DATA_LEN];
        Ok(match attribute_id {
            attr::REQ => CmMessage::Req(CmReq::parse(b)),
            attr::MRA => CmMessage::Mra(CmMra::parse(b)),
            attr::REJ => CmMessage::Rej(CmRej::parse(b)),
            attr::REP => CmMessage::Rep(CmRep::parse(b)),
            attr::RTU => CmMessage::Rtu(CmIds::parse(b)),
            attr::DREQ => CmMessage::Dreq(CmDreq::parse(b)),
            attr::DREP => CmMessage::Drep(CmIds::parse(b)),
            _ => CmMessage::Other {
                attribute_id,
                data: array(b, 0),
            },
        })
    }

    /// The attribute ID this message goes under.
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::Other { attribute_id, .. } => *attribute_id,
        }
    }

    /// The message's name as Wireshark and the IBA spell it.
    pub fn name(&self) -> &'static str {
        attribute_name(self.attribute_id())
    }

    /// Writes the 232 bytes of class data.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, MAD_DATA_LEN)?;
        let b = &mut b[..MAD_DATA_LEN];
        match self {
            CmMessage::Req(m) => m.emit(b),
            CmMessage::Mra(m) => m.emit(b),
            CmMessage::Rej(m) => m.emit(b),
            CmMessage::Rep(m) => m.emit(b),
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.emit(b),
            CmMessage::Dreq(m) => m.emit(b),
            CmMessage::Other { data, .. } => b.copy_from_slice(data),
        }
        Ok(())
    }

    /// The sender's communication ID (every CM message but `Other` has one).
    pub fn local_comm_id(&self) -> Option<u32> {
        Some(match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
            CmMessage::Other { .. } => return None,
        })
    }
}

/// The name of a CM attribute.
pub fn attribute_name(attribute_id: u16) -> &'static str {
    match attribute_id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "ConnectRequest",
        attr::MRA => "MsgRcptAck",
        attr::REJ => "ConnectReject",
        attr::REP => "ConnectReply",
        attr::RTU => "ReadyToUse",
        attr::DREQ => "DisconnectRequest",
        attr::DREP => "DisconnectReply",
        attr::SIDR_REQ => "ServiceIDResReq",
        attr::SIDR_REP => "ServiceIDResReqResp",
        attr::LAP => "LoadAlternatePath",
        attr::APR => "AlternatePathResponse",
        _ => "unknown CM attribute",
    }
}

/// A whole MAD: the header and, for the CM class, its message; other
/// classes keep their data raw.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Mad {
    pub header: MadHeader,
    pub body: MadBody,
}

/// The class data of a MAD.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MadBody {
    Cm(CmMessage),
    Raw([u8; MAD_DATA_LEN]),
}

impl Mad {
    /// Parses the payload of a UD SEND to QP1, which must be one MAD of
    /// exactly 256 bytes (IBA 13.4.1).
    pub fn parse(b: &[u8]) -> Result<Mad> {
        need(Layer::Mad, b, MAD_LEN)?;
        if b.len() != MAD_LEN {
            return Err(Error::BadMadLength(b.len()));
        }
        let header = MadHeader::parse(b)?;
        let data = &b[MAD_HEADER_LEN..];
        let body = if header.mgmt_class == MGMT_CLASS_CM {
            MadBody::Cm(CmMessage::parse(header.attribute_id, data)?)
        } else {
            MadBody::Raw(array(data, 0))
        };
        Ok(Mad { header, body })
    }

    /// Writes the 256 bytes of the MAD.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, MAD_LEN)?;
        self.header.emit(b)?;
        let data = &mut b[MAD_HEADER_LEN..MAD_LEN];
        match &self.body {
            MadBody::Cm(m) => m.emit(data),
            MadBody::Raw(d) => {
                data.copy_from_slice(d);
                Ok(())
            }
        }
    }

    /// The CM message, if this is a CM MAD.
    pub fn cm(&self) -> Option<&CmMessage> {
        match &self.body {
            MadBody::Cm(m) => Some(m),
            MadBody::Raw(_) => None,
        }
    }
}

/// The RDMA IP CM service's service ID (IBA Annex A11): the prefix
/// 0x0000000001, the port space (its low byte: 0x06 TCP, 0x11 UDP, 0x3F IB)
/// and the port.
pub fn ip_cm_service_id(port_space: u8, port: u16) -> u64 {
    0x0000_0000_0100_0000 | u64::from(port_space) << 16 | u64::from(port)
}

/// The port space and the port of an RDMA IP CM service ID, or None when the
/// ID is not one.
pub fn ip_cm_service(service_id: u64) -> Option<(u8, u16)> {
    (service_id >> 24 == 1).then_some(((service_id >> 16) as u8, service_id as u16))
}

/// The head of a REQ's private data under the RDMA IP CM service (IBA Annex
/// A11.6): version, IP version, the client's port and both addresses; the
/// consumer's own private data follows it (56 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct IpCmPrivateData {
    /// 4 bits each.
    pub major_version: u8,
    pub minor_version: u8,
    /// 4 bits: 4 or 6.
    pub ip_version: u8,
    /// 4 bits.
    pub reserved: u8,
    pub src_port: u16,
    /// IPv4 addresses sit in the last four bytes, the first twelve zero.
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
}

impl IpCmPrivateData {
    /// Its length; the consumer's private data starts there.
    pub const LEN: usize = 36;

    pub fn parse(b: &[u8]) -> Result<IpCmPrivateData> {
        need(Layer::Mad, b, Self::LEN)?;
        Ok(IpCmPrivateData {
            major_version: b[0] >> 4,
            minor_version: b[0] & 0x0F,
            ip_version: b[1] >> 4,
            reserved: b[1] & 0x0F,
            src_port: be16(b, 2),
            src_ip: array(b, 4),
            dst_ip: array(b, 20),
        })
    }

    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, Self::LEN)?;
        b[0] = (self.major_version & 0x0F) << 4 | (self.minor_version & 0x0F);
        b[1] = (self.ip_version & 0x0F) << 4 | (self.reserved & 0x0F);
        put16(b, 2, self.src_port);
        b[4..20].copy_from_slice(&self.src_ip);
        b[20..36].copy_from_slice(&self.dst_ip);
        Ok(())
    }

    /// The source and destination as IP addresses (by `ip_version`).
    pub fn addrs(&self) -> Option<(core::net::IpAddr, core::net::IpAddr)> {
        let v4 = |a: &[u8; 16]| core::net::IpAddr::from([a[12], a[13], a[14], a[15]]);
        let v6 = |a: &[u8; 16]| core::net::IpAddr::from(*a);
        match self.ip_version {
            4 => Some((v4(&self.src_ip), v4(&self.dst_ip))),
            6 => Some((v6(&self.src_ip), v6(&self.dst_ip))),
            _ => None,
        }
    }
}

impl fmt::Display for CmMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmMessage::Req(m) => {
                write!(
                    f,
                    "CM REQ comm={:#010x} qpn={:#08x} psn={} sid={:#018x}",
                    m.local_comm_id, m.local_qpn, m.starting_psn, m.service_id
                )?;
                let ip = ip_cm_service(m.service_id).and_then(|(_, port)| {
                    let p = IpCmPrivateData::parse(&m.private_data).ok()?;
                    let (src, dst) = p.addrs()?;
                    Some((
                        core::net::SocketAddr::new(src, p.src_port),
                        core::net::SocketAddr::new(dst, port),
                    ))
                });
                match ip {
                    Some((src, dst)) => write!(f, " ip {src} > {dst}"),
                    None => Ok(()),
                }
            }
            CmMessage::Rep(m) => write!(
                f,
                "CM REP comm={:#010x} remote={:#010x} qpn={:#08x} psn={}",
                m.local_comm_id, m.remote_comm_id, m.local_qpn, m.starting_psn
            ),
            CmMessage::Rtu(m) => write!(
                f,
                "CM RTU comm={:#010x} remote={:#010x}",
                m.local_comm_id, m.remote_comm_id
            ),
            CmMessage::Rej(m) => write!(
                f,
                "CM REJ comm={:#010x} remote={:#010x} reason={}",
                m.local_comm_id, m.remote_comm_id, m.reason
            ),
            CmMessage::Mra(m) => write!(
                f,
                "CM MRA comm={:#010x} remote={:#010x} timeout={}",
                m.local_comm_id, m.remote_comm_id, m.service_timeout
            ),
            CmMessage::Dreq(m) => write!(
                f,
                "CM DREQ comm={:#010x} remote={:#010x} qpn={:#08x}",
                m.local_comm_id, m.remote_comm_id, m.remote_qpn
            ),
            CmMessage::Drep(m) => write!(
                f,
                "CM DREP comm={:#010x} remote={:#010x}",
                m.local_comm_id, m.remote_comm_id
            ),
            CmMessage::Other { attribute_id, .. } => {
                write!(
                    f,
                    "CM {} ({attribute_id:#06x})",
                    attribute_name(*attribute_id)
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm_mad(attribute_id: u16, fill: impl Fn(usize) -> u8) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        MadHeader::cm(attribute_id, 0x1234_5678_9abc_def0)
            .emit(&mut b)
            .unwrap();
        for (i, x) in b[MAD_HEADER_LEN..].iter_mut().enumerate() {
            *x = fill(i);
        }
        b
    }

    #[test]
    fn every_cm_message_reemits_every_bit() {
        // every byte pattern: reserved bits and fields that share a byte
        // must all come back
        for attribute_id in [
            attr::REQ,
            attr::MRA,
            attr::REJ,
            attr::REP,
            attr::RTU,
            attr::DREQ,
            attr::DREP,
            attr::LAP,
        ] {
            for pattern in [0x00u8, 0xFF, 0xA5, 0x5A] {
                let b = cm_mad(attribute_id, |i| pattern.wrapping_add(i as u8 * 37));
                let m = Mad::parse(&b).unwrap();
                assert_eq!(m.cm().unwrap().attribute_id(), attribute_id);
                let mut out = [0u8; MAD_LEN];
                m.emit(&mut out).unwrap();
                assert_eq!(out, b, "attribute {attribute_id:#x} pattern {pattern:#x}");
            }
        }
    }

    #[test]
    fn req_fields_sit_where_the_iba_puts_them() {
        let mut b = [0u8; MAD_DATA_LEN];
        b[32..35].copy_from_slice(&[0x00, 0x00, 0x3d]);
        b[35] = 4; // responder resources
        b[43] = 0x14 << 3 | 0b01 << 1; // timeout 20, UC
        b[44..47].copy_from_slice(&[0x7c, 0xc2, 0x04]);
        b[47] = 0x14 << 3 | 7;
        b[50] = 0x3 << 4 | 7; // MTU 1024, RNR retry 7
        b[51] = 0xF << 4 | 0x08; // 15 CM retries, SRQ
        b[88..92].copy_from_slice(&0x0091_a091u32.to_be_bytes());
        let CmMessage::Req(r) = CmMessage::parse(attr::REQ, &b).unwrap() else {
            panic!("not a REQ");
        };
        assert_eq!((r.local_qpn, r.responder_resources), (0x3d, 4));
        assert_eq!(
            (r.remote_cm_response_timeout, r.transport_service_type),
            (20, 1)
        );
        assert_eq!(
            (r.starting_psn, r.local_cm_response_timeout, r.retry_count),
            (0x7cc204, 20, 7)
        );
        assert_eq!(
            (r.path_mtu, r.rnr_retry_count, r.max_cm_retries, r.srq),
            (3, 7, 15, true)
        );
        assert_eq!(
            (
                r.primary.flow_label,
                r.primary.reserved1,
                r.primary.packet_rate
            ),
            (0x0091a, 2, 0x11)
        );
    }

    #[test]
    fn a_mad_must_be_256_bytes() {
        let b = cm_mad(attr::RTU, |_| 0);
        assert!(matches!(
            Mad::parse(&b[..255]),
            Err(Error::Truncated {
                layer: Layer::Mad,
                ..
            })
        ));
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(Mad::parse(&long), Err(Error::BadMadLength(257)));
        let mut short = [0u8; 100];
        assert!(CmMessage::Rtu(CmIds {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; 224]
        })
        .emit(&mut short)
        .is_err());
    }

    #[test]
    fn ip_cm_service_ids() {
        let sid = ip_cm_service_id(0x06, 0x4853);
        assert_eq!(sid, 0x0000_0000_0106_4853);
        assert_eq!(ip_cm_service(sid), Some((0x06, 0x4853)));
        assert_eq!(ip_cm_service(0x0200_0000_0106_4853), None);
    }

    #[test]
    fn ip_cm_private_data_round_trip() {
        let mut b = [0u8; 92];
        b[1] = 0x40;
        b[2..4].copy_from_slice(&0xccf7u16.to_be_bytes());
        b[16..20].copy_from_slice(&[10, 1, 16, 62]);
        b[32..36].copy_from_slice(&[10, 1, 16, 61]);
        let p = IpCmPrivateData::parse(&b).unwrap();
        let (s, d) = p.addrs().unwrap();
        assert_eq!(
            (s.to_string(), d.to_string(), p.src_port),
            ("10.1.16.62".into(), "10.1.16.61".into(), 0xccf7)
        );
        let mut out = [0u8; 92];
        p.emit(&mut out).unwrap();
        assert_eq!(out, b);
    }
}
