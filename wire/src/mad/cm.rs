//! The CM messages (IBA 12.6): REQ, MRA, REJ, REP, RTU, DREQ, DREP and
//! the path they carry, and Service ID Resolution's SIDR_REQ and SIDR_REP
//! (IBA 12.11), each field at its IBA offset within the class data.
//!
//! Length: Nine message layouts, each with its parse and emit beside its
//! fields, in the order of the IBA tables; one file keeps that order.

use super::*;
use core::fmt;

/// One path of a REQ (IBA 12.6.5: the primary and the alternate path, 44
/// bytes each, the same layout).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct CmPath {
    /// LID of the active side's port; RoCE has no LRH and routes by GID.
    pub local_lid: u16,
    /// LID of the passive side's port.
    pub remote_lid: u16,
    /// GID of the active side's port (on RoCEv2, its IP address as a GID).
    pub local_gid: [u8; 16],
    /// GID of the passive side's port.
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// The 6 reserved bits after the flow label.
    pub reserved1: u8,
    /// 6 bits.
    pub packet_rate: u8,
    /// Traffic class of the GRH; on RoCEv2, the IP DSCP and ECN byte.
    pub traffic_class: u8,
    /// Hop limit of the GRH; on RoCEv2, the IP TTL or hop limit.
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    /// Subnet Local: both ends are in one subnet.
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
    /// Local Communication ID: the sender's handle for the connection.
    pub local_comm_id: u32,
    /// Reserved (bytes 4-7).
    pub reserved0: u32,
    /// Service ID the REQ is addressed to (RDMA CM: [`ip_cm_service_id`]).
    pub service_id: u64,
    /// GUID of the sender's channel adapter.
    pub local_ca_guid: u64,
    /// Reserved (bytes 24-27).
    pub reserved1: u32,
    /// Local Q_Key (used by RD only).
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// Responder Resources: RDMA READ and atomic requests the sender accepts
    /// outstanding at once.
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    /// Initiator Depth: RDMA READ and atomic requests the sender keeps
    /// outstanding at once.
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits: 4.096 µs × 2^n.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 2 RD.
    pub transport_service_type: u8,
    /// End-to-end flow control: the sender's responder reports credits in the
    /// AETH.
    pub end_to_end_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    /// Partition key of the connection.
    pub pkey: u16,
    /// 4 bits, the IBA MTU code (1: 256 ... 5: 4096).
    pub path_mtu: u8,
    /// RDC Exists (RD only).
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    /// SRQ: the sender's QP takes its receives from a shared receive queue.
    pub srq: bool,
    /// 3 bits.
    pub extended_transport_type: u8,
    /// Primary path (class data bytes 52-95).
    pub primary: CmPath,
    /// Alternate path (bytes 96-139); all zeros when there is none.
    pub alternate: CmPath,
    /// Consumer private data (bytes 140-231); RDMA CM puts an
    /// [`IpCmPrivateData`] here.
    pub private_data: [u8; CmReq::PRIVATE_DATA_LEN],
}

impl CmReq {
    /// Bytes of private data in a REQ.
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
    /// Local Communication ID of the sender.
    pub local_comm_id: u32,
    /// Communication ID of the receiver, from the message being acknowledged.
    pub remote_comm_id: u32,
    /// 2 bits: 0 REQ, 1 REP, 2 LAP.
    pub message_mraed: u8,
    /// Reserved (the 6 bits after Message MRAed).
    pub reserved0: u8,
    /// 5 bits: 4.096 µs × 2^n.
    pub service_timeout: u8,
    /// Reserved (the 3 bits after the service timeout).
    pub reserved1: u8,
    /// Consumer private data (bytes 10-231).
    pub private_data: [u8; CmMra::PRIVATE_DATA_LEN],
}

impl CmMra {
    /// Bytes of private data in an MRA.
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
    /// Local Communication ID of the sender.
    pub local_comm_id: u32,
    /// Communication ID of the receiver, from the message being rejected.
    pub remote_comm_id: u32,
    /// 2 bits: 0 REQ, 1 REP, 2 no message (a stale connection).
    pub message_rejected: u8,
    /// Reserved (the 6 bits after Message Rejected).
    pub reserved0: u8,
    /// 7 bits: how many bytes of `ari` count.
    pub reject_info_length: u8,
    /// Reserved (the bit after Reject Info Length).
    pub reserved1: u8,
    /// IBA Table 104 (e.g. 1 no QP, 8 invalid service ID, 28 consumer reject).
    pub reason: u16,
    /// Additional Rejection Information.
    pub ari: [u8; 72],
    /// Consumer private data (bytes 84-231).
    pub private_data: [u8; CmRej::PRIVATE_DATA_LEN],
}

impl CmRej {
    /// Bytes of private data in a REJ.
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
    /// Local Communication ID of the sender (the passive side).
    pub local_comm_id: u32,
    /// Communication ID of the receiver, from its REQ.
    pub remote_comm_id: u32,
    /// Local Q_Key (used by RD only).
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// Reserved (byte 15).
    pub reserved0: u8,
    /// 24 bits.
    pub local_eecn: u32,
    /// Reserved (byte 19).
    pub reserved1: u8,
    /// 24 bits.
    pub starting_psn: u32,
    /// Reserved (byte 23).
    pub reserved2: u8,
    /// Responder Resources: RDMA READ and atomic requests the sender accepts
    /// outstanding at once.
    pub responder_resources: u8,
    /// Initiator Depth: RDMA READ and atomic requests the sender keeps
    /// outstanding at once.
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits: 0 accepted, 1 not supported, 2 rejected.
    pub failover_accepted: u8,
    /// End-to-end flow control: the sender's responder reports credits in the
    /// AETH.
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// SRQ: the sender's QP takes its receives from a shared receive queue.
    pub srq: bool,
    /// 4 bits.
    pub reserved3: u8,
    /// GUID of the sender's channel adapter.
    pub local_ca_guid: u64,
    /// Consumer private data (bytes 36-231).
    pub private_data: [u8; CmRep::PRIVATE_DATA_LEN],
}

impl CmRep {
    /// Bytes of private data in a REP.
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
    /// Local Communication ID of the sender.
    pub local_comm_id: u32,
    /// Communication ID of the receiver.
    pub remote_comm_id: u32,
    /// Consumer private data (bytes 8-231).
    pub private_data: [u8; CmIds::PRIVATE_DATA_LEN],
}

impl CmIds {
    /// Bytes of private data in an RTU or DREP.
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
    /// Local Communication ID of the sender.
    pub local_comm_id: u32,
    /// Communication ID of the receiver.
    pub remote_comm_id: u32,
    /// 24 bits: the QPN (or EECN) the receiver disconnects.
    pub remote_qpn: u32,
    /// Reserved (byte 11).
    pub reserved0: u8,
    /// Consumer private data (bytes 12-231).
    pub private_data: [u8; CmDreq::PRIVATE_DATA_LEN],
}

impl CmDreq {
    /// Bytes of private data in a DREQ.
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

/// ServiceIDResReq (SIDR_REQ, IBA 12.11.2): asks the CM at the
/// destination which UD QP serves a service ID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmSidrReq {
    /// Request ID: the sender's handle for the request, echoed in the
    /// SIDR_REP.
    pub request_id: u32,
    /// Partition key the requester will send under.
    pub pkey: u16,
    /// Reserved (bytes 6-7).
    pub reserved0: u16,
    /// Service ID to resolve (RDMA CM: [`ip_cm_service_id`] of RDMA_PS_UDP).
    pub service_id: u64,
    /// Consumer private data (bytes 16-231); RDMA CM puts an
    /// [`IpCmPrivateData`] at its head, as in a REQ.
    pub private_data: [u8; CmSidrReq::PRIVATE_DATA_LEN],
}

impl CmSidrReq {
    /// Bytes of private data in a SIDR_REQ.
    pub const PRIVATE_DATA_LEN: usize = 216;

    fn parse(b: &[u8]) -> CmSidrReq {
        CmSidrReq {
            request_id: be32(b, 0),
            pkey: be16(b, 4),
            reserved0: be16(b, 6),
            service_id: be64(b, 8),
            private_data: array(b, 16),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.request_id);
        put16(b, 4, self.pkey);
        put16(b, 6, self.reserved0);
        put64(b, 8, self.service_id);
        b[16..].copy_from_slice(&self.private_data);
    }
}

/// The SIDR_REP status values (IBA 12.11.3, the SIDR_REP Status table).
pub mod sidr_status {
    /// The QPN and Q_Key are valid.
    pub const VALID: u8 = 0;
    /// Nobody serves the service ID here.
    pub const SERVICE_ID_NOT_SUPPORTED: u8 = 1;
    /// The service provider rejected the request.
    pub const REJECTED: u8 = 2;
    /// No QP is available for the service.
    pub const NO_QP: u8 = 3;
    /// The request must go elsewhere (the additional information holds a
    /// ClassPortInfo).
    pub const REDIRECT: u8 = 4;
    /// The SIDR version is not supported.
    pub const VERSION_NOT_SUPPORTED: u8 = 5;
}

/// ServiceIDResReqResp (SIDR_REP, IBA 12.11.3): the answer to a SIDR_REQ.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmSidrRep {
    /// The Request ID of the SIDR_REQ answered.
    pub request_id: u32,
    /// [`sidr_status`]: 0 when `qpn` and `qkey` are valid.
    pub status: u8,
    /// How many bytes of `additional_info` count.
    pub additional_info_length: u8,
    /// Reserved (bytes 6-7).
    pub reserved0: u16,
    /// 24 bits: the QP that serves the service ID.
    pub qpn: u32,
    /// Reserved (byte 11).
    pub reserved1: u8,
    /// The service ID resolved.
    pub service_id: u64,
    /// The Q_Key to send to `qpn` with.
    pub qkey: u32,
    /// Additional information (bytes 24-95): a ClassPortInfo on redirect.
    pub additional_info: [u8; 72],
    /// Consumer private data (bytes 96-231).
    pub private_data: [u8; CmSidrRep::PRIVATE_DATA_LEN],
}

impl CmSidrRep {
    /// Bytes of private data in a SIDR_REP.
    pub const PRIVATE_DATA_LEN: usize = 136;

    fn parse(b: &[u8]) -> CmSidrRep {
        CmSidrRep {
            request_id: be32(b, 0),
            status: b[4],
            additional_info_length: b[5],
            reserved0: be16(b, 6),
            qpn: be24(b, 8),
            reserved1: b[11],
            service_id: be64(b, 12),
            qkey: be32(b, 20),
            additional_info: array(b, 24),
            private_data: array(b, 96),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.request_id);
        b[4] = self.status;
        b[5] = self.additional_info_length;
        put16(b, 6, self.reserved0);
        put24(b, 8, self.qpn);
        b[11] = self.reserved1;
        put64(b, 12, self.service_id);
        put32(b, 20, self.qkey);
        b[24..96].copy_from_slice(&self.additional_info);
        b[96..].copy_from_slice(&self.private_data);
    }
}

/// The class data of a CM MAD, by attribute.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmMessage {
    /// ConnectRequest ([`attr::REQ`]).
    Req(CmReq),
    /// MessageReceiptAcknowledgement ([`attr::MRA`]).
    Mra(CmMra),
    /// Reject ([`attr::REJ`]).
    Rej(CmRej),
    /// ConnectReply ([`attr::REP`]).
    Rep(CmRep),
    /// ReadyToUse ([`attr::RTU`]).
    Rtu(CmIds),
    /// DisconnectRequest ([`attr::DREQ`]).
    Dreq(CmDreq),
    /// DisconnectReply ([`attr::DREP`]).
    Drep(CmIds),
    /// ServiceIDResReq ([`attr::SIDR_REQ`]).
    SidrReq(CmSidrReq),
    /// ServiceIDResReqResp ([`attr::SIDR_REP`]).
    SidrRep(CmSidrRep),
    /// Another attribute (LAP, APR, ClassPortInfo...), kept raw.
    Other {
        /// The MAD header's attribute ID.
        attribute_id: u16,
        /// The 232 bytes of class data.
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
            attr::SIDR_REQ => CmMessage::SidrReq(CmSidrReq::parse(b)),
            attr::SIDR_REP => CmMessage::SidrRep(CmSidrRep::parse(b)),
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
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
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
            CmMessage::SidrReq(m) => m.emit(b),
            CmMessage::SidrRep(m) => m.emit(b),
            CmMessage::Other { data, .. } => b.copy_from_slice(data),
        }
        Ok(())
    }

    /// The sender's communication ID (every CM message but SIDR's and
    /// `Other` has one).
    pub fn local_comm_id(&self) -> Option<u32> {
        Some(match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
            CmMessage::SidrReq(_) | CmMessage::SidrRep(_) | CmMessage::Other { .. } => return None,
        })
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
                write_ip_cm(f, m.service_id, &m.private_data)
            }
            CmMessage::SidrReq(m) => {
                write!(
                    f,
                    "CM SIDR_REQ req={:#010x} pkey={:#06x} sid={:#018x}",
                    m.request_id, m.pkey, m.service_id
                )?;
                write_ip_cm(f, m.service_id, &m.private_data)
            }
            CmMessage::SidrRep(m) => write!(
                f,
                "CM SIDR_REP req={:#010x} status={} qpn={:#08x} qkey={:#010x} sid={:#018x}",
                m.request_id, m.status, m.qpn, m.qkey, m.service_id
            ),
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

/// The addresses of an RDMA IP CM request (IBA Annex A11: the service ID's
/// port, the private data's head), when it is one.
fn write_ip_cm(f: &mut fmt::Formatter<'_>, service_id: u64, private_data: &[u8]) -> fmt::Result {
    let ip = ip_cm_service(service_id).and_then(|(_, port)| {
        let p = IpCmPrivateData::parse(private_data).ok()?;
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
