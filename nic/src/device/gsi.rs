//! QP1, the General Services Interface (IBA 13.5.1): management datagrams
//! (MADs) to and from the device's owner, which runs the Communication
//! Manager over them. An incoming UD SEND ONLY to QP 1 with the GSI Q_Key
//! and a MAD-sized payload is queued for [`Rnic::poll_gsi`]; anything else
//! sent to QP 1 is a counted drop. [`Rnic::send_gsi`] queues a MAD for the
//! wire: a UD SEND ONLY from QP 1 to QP 1 with the GSI Q_Key, sent by
//! [`Rnic::poll_transmit`] ahead of the QPs' frames.

use super::{DropReason, Rnic};
use crate::transport::HeaderTemplate;
use crate::verbs::AhAttr;
use std::collections::VecDeque;
use wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use wire::{BthRepr, Deth, EthernetAddress, ExtHeaders, Gid, Opcode, Psn, RoceRepr};

/// Most received MADs waiting for the owner; more are dropped
/// (`gsi_queue_full`), as a full QP1 receive queue drops them.
pub const GSI_RX_DEPTH: usize = 256;
/// Most MADs waiting for the wire; [`Rnic::send_gsi`] refuses more.
pub const GSI_TX_DEPTH: usize = 256;
/// The default partition (full membership): the P_Key of every GSI packet
/// this device sends and the one it takes (C9-43 as for any QP).
pub const GSI_PKEY: u16 = 0xFFFF;

/// A MAD received on QP 1, with where it came from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct GsiMad {
    /// The sender's port GID (its IP address).
    pub src_gid: Gid,
    /// The sender's Ethernet address (where an answer goes).
    pub src_mac: EthernetAddress,
    /// DETH source QP (1 for a GSI; any QP may send to QP 1).
    pub src_qp: u32,
    /// The BTH P_Key.
    pub pkey: u16,
    /// The 256-byte MAD.
    pub mad: Box<[u8; MAD_LEN]>,
}

/// Why [`Rnic::send_gsi`] refused a MAD.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
pub enum GsiError {
    #[error("a MAD is {MAD_LEN} bytes, not {0}")]
    Length(usize),
    #[error("the GSI send queue is full")]
    QueueFull,
}

/// GSI counters (names after rdma-core's umad / rxe statistics).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct GsiCounters {
    pub gsi_rcvd: u64,
    pub gsi_sent: u64,
}

/// QP 1's queues and PSN.
#[derive(Default)]
pub(crate) struct Gsi {
    rx: VecDeque<GsiMad>,
    tx: VecDeque<(AhAttr, Box<[u8; MAD_LEN]>)>,
    psn: u32,
    pub(crate) counters: GsiCounters,
}

impl Rnic {
    /// A frame for QP 1 (`repr` parsed, ICRC checked): queued for the
    /// owner, or dropped under its reason.
    pub(super) fn handle_gsi(&mut self, repr: &RoceRepr<'_>, src_mac: EthernetAddress) {
        // IBA 13.5.1: QP1 is a UD QP; only a UD SEND ONLY reaches it (a
        // MAD is one packet, without immediate data)
        if repr.bth.opcode != Opcode::UD_SEND_ONLY {
            return self.drop_frame(DropReason::GsiOpcode);
        }
        // C9-42: QP1 compares the P_Key with the port's P_Key table (the
        // default partition only)
        if !wire::bth::pkey_matches(repr.bth.pkey, GSI_PKEY) {
            return self.drop_frame(DropReason::PkeyMismatch);
        }
        let Some(deth) = repr.ext.deth else {
            return self.drop_frame(DropReason::GsiOpcode);
        };
        // IBA 13.5.1 / C13-4.1.1 (QP1 Q_Key): datagrams to QP1 carry the
        // well-known GSI Q_Key 0x80010000; others are dropped
        if deth.qkey != GSI_QKEY {
            return self.drop_frame(DropReason::GsiQkey);
        }
        // IBA 13.4.2: a MAD is exactly 256 bytes
        let Ok(mad) = <[u8; MAD_LEN]>::try_from(repr.payload) else {
            return self.drop_frame(DropReason::GsiLength);
        };
        if self.gsi.rx.len() >= GSI_RX_DEPTH {
            return self.drop_frame(DropReason::GsiQueueFull);
        }
        self.gsi.counters.gsi_rcvd += 1;
        self.gsi.rx.push_back(GsiMad {
            src_gid: Gid::from_ip(repr.ip.src()),
            src_mac,
            src_qp: deth.src_qp,
            pkey: repr.bth.pkey,
            mad: Box::new(mad),
        });
    }

    /// The next MAD received on QP 1.
    pub fn poll_gsi(&mut self) -> Option<GsiMad> {
        self.gsi.rx.pop_front()
    }

    /// Queues `mad` (256 bytes) for QP 1 of the port at `ah` (its GID and
    /// Ethernet address, resolved by the caller as for a UD address
    /// handle).
    pub fn send_gsi(&mut self, ah: &AhAttr, mad: &[u8]) -> Result<(), GsiError> {
        let mad = <[u8; MAD_LEN]>::try_from(mad).map_err(|_| GsiError::Length(mad.len()))?;
        if self.gsi.tx.len() >= GSI_TX_DEPTH {
            return Err(GsiError::QueueFull);
        }
        self.gsi.tx.push_back((*ah, Box::new(mad)));
        Ok(())
    }

    /// QP 1's counters.
    pub fn gsi_counters(&self) -> GsiCounters {
        self.gsi.counters
    }

    /// Writes the next queued MAD's frame into `buf`.
    pub(super) fn poll_gsi_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        while let Some((ah, mad)) = self.gsi.tx.pop_front() {
            let hdr =
                HeaderTemplate::new(self.res.cfg.mac, self.res.cfg.gid, &ah, GSI_QPN, GSI_QPN);
            let bth = BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                solicited: false,
                migreq: false,
                pad: 0,
                pkey: GSI_PKEY,
                fecn: false,
                becn: false,
                resv6: 0,
                dest_qp: GSI_QPN,
                // as rxe sends its MADs: AckReq on the last (only) packet;
                // a UD responder ignores it
                ack_req: true,
                resv7: 0,
                psn: Psn::new(self.gsi.psn),
            };
            let ext = ExtHeaders {
                // IBA 13.5.1: from QP1 with the GSI Q_Key
                deth: Some(Deth {
                    qkey: GSI_QKEY,
                    src_qp: GSI_QPN,
                }),
                ..ExtHeaders::default()
            };
            let sent = self
                .res
                .emit(&hdr, bth, ext, MAD_LEN, buf, |_, p| {
                    p.put(&mad[..]);
                    Ok::<(), ()>(())
                })
                .ok()
                .flatten();
            if let Some(n) = sent {
                self.gsi.psn = (self.gsi.psn + 1) & 0x00FF_FFFF;
                self.gsi.counters.gsi_sent += 1;
                return Some(n);
            }
        }
        None
    }
}
