//! Management datagrams on the General Services Interface and the messages
//! of the Communication Manager (CM) that RDMA CM speaks over them.
//!
//! A MAD is the 256-byte payload of a UD SEND to QP1 (the GSI, IBA 13.5.1;
//! on RoCE there is no QP0): a 24-byte common header (IBA 13.4.2) and 232
//! bytes of class data. The CM class (management class 0x07, class version
//! 2, IBA 12.6) carries REQ, MRA, REJ, REP, RTU, DREQ and DREP, and the
//! Service ID Resolution messages SIDR_REQ and SIDR_REP (IBA 12.11); every field
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

mod cm;
mod ip_cm;

pub use cm::*;
pub use ip_cm::*;

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
    /// Base version of the MAD format ([`MAD_BASE_VERSION`]).
    pub base_version: u8,
    /// Management class ([`MGMT_CLASS_CM`] for the CM).
    pub mgmt_class: u8,
    /// Version of the class ([`CM_CLASS_VERSION`] for the CM).
    pub class_version: u8,
    /// The method with the response bit (bit 7).
    pub method: u8,
    /// Status of a response; 0 in a request.
    pub status: u16,
    /// Defined by each management class; [`MadHeader::cm`] leaves it 0.
    pub class_specific: u16,
    /// Transaction ID, chosen by the requester and echoed in the response.
    pub transaction_id: u64,
    /// Which attribute the method acts on; for the CM, the message ([`attr`]).
    pub attribute_id: u16,
    /// Reserved, kept as received.
    pub reserved: u16,
    /// Attribute-specific qualifier; [`MadHeader::cm`] leaves it 0.
    pub attribute_modifier: u32,
}

impl MadHeader {
    /// Reads the header from the first 24 bytes of `b`.
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
    /// ClassPortInfo: the class's capabilities.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// ConnectRequest (REQ): the active side asks for a connection.
    pub const REQ: u16 = 0x0010;
    /// MsgRcptAck (MRA): a message arrived, the reply will take longer.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject (REJ): refuses a REQ or REP.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply (REP): the passive side accepts a REQ.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse (RTU): the active side accepts the REP.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest (DREQ).
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply (DREP).
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResReq (SIDR_REQ): resolves a service ID to a UD QP.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResReqResp (SIDR_REP): the answer to a SIDR_REQ.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath (LAP).
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse (APR): the answer to a LAP.
    pub const APR: u16 = 0x001A;
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
    /// The 24-byte common header.
    pub header: MadHeader,
    /// The 232 bytes of class data.
    pub body: MadBody,
}

/// The class data of a MAD.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MadBody {
    /// A CM message (management class 0x07).
    Cm(CmMessage),
    /// The class data of any other management class, as is.
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
            attr::SIDR_REQ,
            attr::SIDR_REP,
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
    fn sidr_fields_sit_where_the_iba_puts_them() {
        let mut b = [0u8; MAD_DATA_LEN];
        b[0..4].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        b[4..6].copy_from_slice(&0xFFFFu16.to_be_bytes());
        b[8..16].copy_from_slice(&ip_cm_service_id(0x11, 7174).to_be_bytes());
        b[16] = 0xAB;
        b[231] = 0xCD;
        let CmMessage::SidrReq(r) = CmMessage::parse(attr::SIDR_REQ, &b).unwrap() else {
            panic!("not a SIDR_REQ");
        };
        assert_eq!(
            (r.request_id, r.pkey, r.service_id),
            (0x1234_5678, 0xFFFF, 0x0111_1c06)
        );
        assert_eq!((r.private_data[0], r.private_data[215]), (0xAB, 0xCD));

        let mut b = [0u8; MAD_DATA_LEN];
        b[0..4].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        b[4] = sidr_status::REJECTED;
        b[5] = 8;
        b[8..11].copy_from_slice(&[0x00, 0x00, 0x42]);
        b[12..20].copy_from_slice(&ip_cm_service_id(0x11, 7174).to_be_bytes());
        b[20..24].copy_from_slice(&0x0123_4567u32.to_be_bytes());
        b[24] = 0xEE;
        b[96] = 0xAB;
        b[231] = 0xCD;
        let CmMessage::SidrRep(r) = CmMessage::parse(attr::SIDR_REP, &b).unwrap() else {
            panic!("not a SIDR_REP");
        };
        assert_eq!(
            (r.request_id, r.status, r.additional_info_length, r.qpn),
            (0x1234_5678, 2, 8, 0x42)
        );
        assert_eq!((r.service_id, r.qkey), (0x0111_1c06, 0x0123_4567));
        assert_eq!(r.additional_info[0], 0xEE);
        assert_eq!((r.private_data[0], r.private_data[135]), (0xAB, 0xCD));
        let text = CmMessage::SidrRep(r).to_string();
        assert!(
            text.starts_with("CM SIDR_REP req=0x12345678 status=2 qpn=0x000042"),
            "{text}"
        );
    }

    proptest::proptest! {
        /// Any SIDR_REQ or SIDR_REP the reprs can hold comes back from its
        /// bytes (the 24-bit QPN masked as the field is), and any 232 bytes
        /// under those attributes re-emit unchanged.
        #[test]
        fn sidr_messages_round_trip(
            id in proptest::prelude::any::<u32>(),
            pkey in proptest::prelude::any::<u16>(),
            sid in proptest::prelude::any::<u64>(),
            status in proptest::prelude::any::<u8>(),
            qpn in proptest::prelude::any::<u32>(),
            qkey in proptest::prelude::any::<u32>(),
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), MAD_DATA_LEN),
        ) {
            let req = CmMessage::SidrReq(CmSidrReq {
                request_id: id,
                pkey,
                reserved0: pkey.rotate_left(3),
                service_id: sid,
                private_data: array(&data, 0),
            });
            let rep = CmMessage::SidrRep(CmSidrRep {
                request_id: id,
                status,
                additional_info_length: status.wrapping_mul(3),
                reserved0: pkey,
                qpn: qpn & 0x00FF_FFFF,
                reserved1: (qpn >> 24) as u8,
                service_id: sid,
                qkey,
                additional_info: array(&data, 100),
                private_data: array(&data, 0),
            });
            for m in [req, rep] {
                let mut b = [0u8; MAD_DATA_LEN];
                m.emit(&mut b).unwrap();
                proptest::prop_assert_eq!(CmMessage::parse(m.attribute_id(), &b).unwrap(), m);
            }
            for a in [attr::SIDR_REQ, attr::SIDR_REP] {
                let m = CmMessage::parse(a, &data).unwrap();
                let mut b = [0u8; MAD_DATA_LEN];
                m.emit(&mut b).unwrap();
                proptest::prop_assert_eq!(&b[..], &data[..]);
            }
        }
    }

    #[test]
    fn a_sidr_req_shows_its_rdma_ip_cm_addresses() {
        let mut pd = [0u8; CmSidrReq::PRIVATE_DATA_LEN];
        IpCmPrivateData {
            major_version: 0,
            minor_version: 0,
            ip_version: 4,
            reserved: 0,
            src_port: 0xc001,
            src_ip: core::net::Ipv4Addr::new(192, 0, 2, 2)
                .to_ipv6_compatible()
                .octets(),
            dst_ip: core::net::Ipv4Addr::new(192, 0, 2, 1)
                .to_ipv6_compatible()
                .octets(),
        }
        .emit(&mut pd)
        .unwrap();
        let m = CmMessage::SidrReq(CmSidrReq {
            request_id: 9,
            pkey: 0xFFFF,
            reserved0: 0,
            service_id: ip_cm_service_id(0x11, 7174),
            private_data: pd,
        });
        assert_eq!(
            m.to_string(),
            "CM SIDR_REQ req=0x00000009 pkey=0xffff sid=0x0000000001111c06 \
             ip 192.0.2.2:49153 > 192.0.2.1:7174"
        );
        assert_eq!(m.local_comm_id(), None);
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
