//! CE marking on the queues' real depth. The switch's nftables table
//! ([`super::net::ruleset`]) CE-marks the ECN-capable RoCEv2 frames toward
//! a port while that port's interface index is in the set [`DEEP_SET`];
//! the switch stage ([`super::pfc`]), which reads every tbf backlog each
//! 0.5 ms, puts a port in the set when its backlog passes the threshold
//! and takes it out when it is back at or below it ([`Marking`]).
//!
//! The set is changed over nfnetlink (a batch of one NEWSETELEM or
//! DELSETELEM, the messages `nft add element` sends), on a socket the
//! stage keeps: no process per change. This kernel (6.18) has no RED,
//! codel or pie qdisc and nftables cannot read a qdisc, so the queue's
//! depth reaches the marking this way: sampled, at most 0.5 ms late.

use super::LabError;
use nldev::msg::{self, NLMSG_ERROR, NLM_F_ACK, NLM_F_REQUEST};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The set of ports whose queue is above the ECN threshold.
pub const DEEP_SET: &str = "deep";

const NETLINK_NETFILTER: i32 = 12;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
const NFPROTO_BRIDGE: u8 = 7;
const NLM_F_CREATE: u16 = 0x400;
// nf_tables.h: NFTA_SET_ELEM_LIST_{TABLE, SET, ELEMENTS}, NFTA_LIST_ELEM,
// NFTA_SET_ELEM_KEY, NFTA_DATA_VALUE
const LIST_TABLE: u16 = 1;
const LIST_SET: u16 = 2;
const LIST_ELEMENTS: u16 = 3;
const LIST_ELEM: u16 = 1;
const ELEM_KEY: u16 = 1;
const DATA_VALUE: u16 = 1;

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let what = what.into();
    move |source| LabError::Io { what, source }
}

/// One message: header, nfgenmsg (family, version 0, res_id big-endian),
/// then the attributes `attrs` adds.
fn message(
    kind: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: impl FnOnce(&mut msg::Builder),
) -> Vec<u8> {
    let mut b = msg::Builder::new(kind, flags, seq, 0);
    let [hi, lo] = res_id.to_be_bytes();
    b.raw(&[family, 0, hi, lo]);
    attrs(&mut b);
    b.finish()
}

/// The batch that adds (`add`) or deletes interface index `ifindex` in
/// set `set` of bridge table `table`; the element message asks for an
/// acknowledgement, with sequence number `seq` + 1.
pub fn set_batch(table: &str, set: &str, ifindex: u32, add: bool, seq: u32) -> Vec<u8> {
    let (op, flags) = if add {
        (NFT_MSG_NEWSETELEM, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE)
    } else {
        (NFT_MSG_DELSETELEM, NLM_F_REQUEST | NLM_F_ACK)
    };
    let kind = NFNL_SUBSYS_NFTABLES << 8 | op;
    let bracket = |ty, seq| message(ty, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES, |_| {});
    let mut b = bracket(NFNL_MSG_BATCH_BEGIN, seq);
    b.extend(message(kind, flags, seq + 1, NFPROTO_BRIDGE, 0, |b| {
        b.str(LIST_TABLE, table)
            .str(LIST_SET, set)
            .nested(LIST_ELEMENTS, |b| {
                b.nested(LIST_ELEM, |b| {
                    b.nested(ELEM_KEY, |b| {
                        b.bytes(DATA_VALUE, &ifindex.to_ne_bytes());
                    });
                });
            });
    }));
    b.extend(bracket(NFNL_MSG_BATCH_END, seq + 2));
    b
}

/// The errno of the first NLMSG_ERROR in `reply` (0: an acknowledgement),
/// if it holds one before anything malformed.
pub fn reply_errno(reply: &[u8]) -> Option<i32> {
    msg::messages(reply)
        .map_while(Result::ok)
        .find(|(h, _)| h.ty == NLMSG_ERROR)
        .and_then(|(_, m)| m.get(msg::HDRLEN..msg::HDRLEN + 4))
        .map(|e| -i32::from_ne_bytes(e.try_into().unwrap_or_default()))
}

/// The marking of a switch: which ports are in [`DEEP_SET`], changed as
/// their backlogs cross their thresholds.
pub struct Marking {
    sock: OwnedFd,
    table: String,
    /// Per port: its interface index, its threshold in bytes (0: never
    /// marked) and whether it is marked now.
    ports: Vec<(u32, u64, bool)>,
    seq: u32,
    /// Times a port's marking was switched on.
    pub switched_on: u64,
}

impl Marking {
    /// Opens the nfnetlink socket in the calling thread's namespace, for
    /// the ports of bridge table `table` given as (interface index,
    /// threshold in bytes, 0 for none); none marked.
    pub fn open(table: &str, ports: &[(u32, u64)]) -> Result<Marking, LabError> {
        // SAFETY: socket(2) with constant arguments; the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_NETFILTER,
            )
        };
        if fd < 0 {
            return Err(io("an nfnetlink socket")(std::io::Error::last_os_error()));
        }
        Ok(Marking {
            // SAFETY: `fd` is a new socket that nothing else owns.
            sock: unsafe { OwnedFd::from_raw_fd(fd) },
            table: table.to_string(),
            ports: ports.iter().map(|&(i, t)| (i, t, false)).collect(),
            seq: 1,
            switched_on: 0,
        })
    }

    /// Marks port `j` (index in the ports given) when `backlog` bytes are
    /// above its threshold, unmarks it when not; a change costs one
    /// netlink round trip, no change nothing.
    pub fn follow(&mut self, j: usize, backlog: u64) -> Result<(), LabError> {
        let Some(&(ifindex, threshold, on)) = self.ports.get(j) else {
            return Ok(());
        };
        let want = threshold > 0 && backlog > threshold;
        if want == on {
            return Ok(());
        }
        self.set(ifindex, want)?;
        self.ports[j].2 = want;
        self.switched_on += u64::from(want);
        Ok(())
    }

    fn set(&mut self, ifindex: u32, add: bool) -> Result<(), LabError> {
        let what = format!("CE marking of interface {ifindex} in set {DEEP_SET}");
        let b = set_batch(&self.table, DEEP_SET, ifindex, add, self.seq);
        self.seq = self.seq.wrapping_add(3);
        // SAFETY: send(2) of `b`'s initialised bytes on our own socket
        // (unbound: the kernel is the destination).
        let n = unsafe { libc::send(self.sock.as_raw_fd(), b.as_ptr().cast(), b.len(), 0) };
        if n < 0 {
            return Err(io(what)(std::io::Error::last_os_error()));
        }
        let mut reply = [0u8; 512];
        // SAFETY: recv(2) into our buffer of its length.
        let n = unsafe {
            libc::recv(
                self.sock.as_raw_fd(),
                reply.as_mut_ptr().cast(),
                reply.len(),
                0,
            )
        };
        if n < 0 {
            return Err(io(what)(std::io::Error::last_os_error()));
        }
        match reply_errno(&reply[..n as usize]) {
            Some(0) => Ok(()),
            Some(e) => Err(io(what)(std::io::Error::from_raw_os_error(e))),
            None => Err(io(what)(std::io::ErrorKind::InvalidData.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_change_is_a_batch_of_three_with_the_element_acknowledged() {
        let b = set_batch("rnlab", "deep", 7, true, 10);
        let len = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let kind = |at: usize| u16::from_ne_bytes(b[at + 4..at + 6].try_into().unwrap());
        let flags = |at: usize| u16::from_ne_bytes(b[at + 6..at + 8].try_into().unwrap());
        let (m1, m2) = (len(0), len(0) + len(len(0)));
        assert_eq!(len(0), 20);
        assert_eq!((kind(0), kind(m1), kind(m2)), (0x10, 0x0a0c, 0x11));
        assert_eq!(flags(m1), NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE);
        assert_eq!(m2 + len(m2), b.len());
        // the batch's res_id: the nftables subsystem, big-endian
        assert_eq!(&b[18..20], &[0, 10]);
        // the element's family is the bridge's, its key the index
        assert_eq!(b[m1 + 16], NFPROTO_BRIDGE);
        let body = &b[m1 + 20..m2];
        assert!(body.windows(6).any(|w| w == b"rnlab\0"));
        assert!(body.ends_with(&[8, 0, 1, 0, 7, 0, 0, 0]) || cfg!(target_endian = "big"));
        let del = set_batch("rnlab", "deep", 7, false, 10);
        assert_eq!(u16::from_ne_bytes(del[24..26].try_into().unwrap()), 0x0a0e);
    }

    #[test]
    fn an_acknowledgement_and_a_refusal_read_apart() {
        let mut ack = message(NLMSG_ERROR, 0, 11, 0, 0, |_| {});
        ack.truncate(16);
        ack.extend_from_slice(&0i32.to_ne_bytes());
        ack[0..4].copy_from_slice(&20u32.to_ne_bytes());
        assert_eq!(reply_errno(&ack), Some(0));
        ack[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(reply_errno(&ack), Some(libc::ENOENT));
        assert_eq!(reply_errno(&[0u8; 8]), None);
    }
}
