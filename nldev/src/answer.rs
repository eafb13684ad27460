//! The kernel's answers to RDMA netlink requests (`rdma_nl_rcv_msg` and
//! `nldev.c`), for a table of devices: `RDMA_NLDEV_CMD_GET` and
//! `RDMA_NLDEV_CMD_PORT_GET`, each as a dump or for one device.
//!
//! Departures from the kernel, each named where it is decided: the
//! other nldev commands (resources, counters, renaming, links) answer
//! `EOPNOTSUPP` where the kernel would act; a datagram whose netlink
//! header is inconsistent is answered with `EINVAL` where the kernel
//! drops it without a word (a program would wait forever).

use crate::msg::{self, Builder, Header};
use crate::table::Device;

/// `RDMA_NL_NLDEV`: the client number of the device commands.
pub const RDMA_NL_NLDEV: u16 = 5;
/// `RDMA_NLDEV_CMD_GET`.
pub const CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_PORT_GET`.
pub const CMD_PORT_GET: u16 = 5;
/// `RDMA_NLDEV_NUM_OPS`: the kernel's nldev commands are below it.
pub const NUM_OPS: u16 = 25;
/// `RDMA_NL_NUM_CLIENTS`: client numbers the kernel knows are below it.
pub const NUM_CLIENTS: u16 = 8;

/// The attributes (`enum rdma_nldev_attr`) the answers use.
pub mod attr {
    pub const DEV_INDEX: u16 = 1;
    pub const DEV_NAME: u16 = 2;
    pub const PORT_INDEX: u16 = 3;
    pub const CAP_FLAGS: u16 = 4;
    pub const FW_VERSION: u16 = 5;
    pub const NODE_GUID: u16 = 6;
    pub const SYS_IMAGE_GUID: u16 = 7;
    pub const PORT_STATE: u16 = 12;
    pub const PORT_PHYS_STATE: u16 = 13;
    pub const DEV_NODE_TYPE: u16 = 14;
    pub const NDEV_INDEX: u16 = 50;
    pub const NDEV_NAME: u16 = 51;
    pub const DEV_PROTOCOL: u16 = 67;
    pub const DEV_DIM: u16 = 84;
}

/// `RDMA_NODE_IB_CA`: what an rxe device, and so a softrnic one, is.
const NODE_TYPE_CA: u8 = 1;
/// The one port of a softrnic device.
const PORT: u32 = 1;
/// The most a datagram of a dump holds: a page, as libmnl's
/// `MNL_SOCKET_BUFFER_SIZE` receives and the kernel's dumps fill.
pub const DATAGRAM_MAX: usize = 4096;

/// What the answers need of the socket that asked.
#[derive(Clone, Copy, Debug, Default)]
pub struct SockOpts {
    /// The socket's port id, which every answer carries.
    pub portid: u32,
    /// `NETLINK_CAP_ACK`: errors carry only the request's header.
    pub cap_ack: bool,
}

/// `nldev`'s type for a command.
pub const fn nl_type(cmd: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + cmd
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
enum Refused {
    /// An unknown command or client, or a device, port or attribute the
    /// command needs that is missing, not there or too short: the
    /// kernel's EINVAL.
    #[error("invalid request")]
    Invalid,
    /// A command the kernel has and softrnic has no answer to.
    #[error("not supported here")]
    Unsupported,
}

impl Refused {
    fn errno(self) -> i32 {
        match self {
            Refused::Invalid => libc::EINVAL,
            Refused::Unsupported => libc::EOPNOTSUPP,
        }
    }
}

/// The datagrams the kernel would queue on the socket after it sent
/// `datagram` (every message in it, in order).
pub fn answer(datagram: &[u8], sock: SockOpts, devs: &[Device]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    for m in msg::messages(datagram) {
        match m {
            Ok((h, whole)) => {
                at += msg::align(h.len as usize);
                one(h, whole, sock, devs, &mut out);
            }
            Err(_) => {
                // the rest of the datagram cannot be framed: the kernel
                // drops it; answering keeps a reader from waiting forever
                let rest = &datagram[at.min(datagram.len())..];
                out.push(msg::error(rest, libc::EINVAL, sock.portid, sock.cap_ack));
            }
        }
    }
    out
}

/// One message: its answer appended to `out`.
fn one(h: Header, whole: &[u8], sock: SockOpts, devs: &[Device], out: &mut Vec<Vec<u8>>) {
    let ack = h.flags & msg::NLM_F_ACK != 0;
    // netlink_rcv_skb: only requests of a family's own types are handed
    // on; the rest are acknowledged if asked
    if h.flags & msg::NLM_F_REQUEST == 0 || h.ty < msg::NLMSG_MIN_TYPE {
        if ack {
            out.push(msg::error(whole, 0, sock.portid, sock.cap_ack));
        }
        return;
    }
    let dump = h.flags & msg::NLM_F_DUMP != 0;
    match command(h, whole, sock, devs, dump) {
        Ok(replies) if dump => out.extend(pack(replies, msg::done(h.seq, sock.portid))),
        Ok(replies) => {
            out.extend(replies);
            if ack {
                out.push(msg::error(whole, 0, sock.portid, sock.cap_ack));
            }
        }
        // nldev_port_get_dumpit checks its device inside the dump: the
        // kernel's DONE carries the error (netlink_dump_done)
        Err(r) if dump && h.ty == nl_type(CMD_PORT_GET) => {
            out.push(msg::done_with(h.seq, sock.portid, -r.errno()))
        }
        Err(r) => out.push(msg::error(whole, r.errno(), sock.portid, sock.cap_ack)),
    }
}

/// The messages answering a command (a dump's without its DONE).
fn command(
    h: Header,
    whole: &[u8],
    sock: SockOpts,
    devs: &[Device],
    dump: bool,
) -> Result<Vec<Vec<u8>>, Refused> {
    let client = h.ty >> 10;
    let op = h.ty & 0x3ff;
    // rdma_nl_rcv_msg: an unknown client or operation is EINVAL
    if client >= NUM_CLIENTS || op >= NUM_OPS {
        return Err(Refused::Invalid);
    }
    if client != RDMA_NL_NLDEV {
        // the kernel's other clients (iWARP port mapper, SA address
        // resolution) talk to daemons softrnic does not replace
        return Err(Refused::Unsupported);
    }
    // the attributes, read only by the commands that read them (a
    // device dump reads none)
    let get_u32 = |ty: u16| -> Result<Option<u32>, Refused> {
        let attrs = msg::attrs(&whole[msg::HDRLEN..]).map_err(|_| Refused::Invalid)?;
        match attrs.iter().rev().find(|(t, _)| *t == ty) {
            Some((_, p)) => msg::get_u32(p).map(Some).ok_or(Refused::Invalid),
            None => Ok(None),
        }
    };
    let device = || -> Result<&Device, Refused> {
        let i = get_u32(attr::DEV_INDEX)?.ok_or(Refused::Invalid)?;
        devs.iter().find(|d| d.index == i).ok_or(Refused::Invalid)
    };
    let reply = |flags: u16, d: &Device, port: bool| {
        let (ty, flags) = if dump {
            (h.ty, flags | msg::NLM_F_MULTI)
        } else {
            // nldev_port_get_doit answers with CMD_GET's type
            (nl_type(CMD_GET), flags)
        };
        let mut b = Builder::new(ty, flags, h.seq, sock.portid);
        if port {
            port_info(&mut b, d);
        } else {
            dev_info(&mut b, d);
        }
        b.finish()
    };
    match (op, dump) {
        (CMD_GET, true) => Ok(devs.iter().map(|d| reply(0, d, false)).collect()),
        (CMD_GET, false) => Ok(vec![reply(0, device()?, false)]),
        (CMD_PORT_GET, true) => Ok(vec![reply(0, device()?, true)]),
        (CMD_PORT_GET, false) => {
            let d = device()?;
            match get_u32(attr::PORT_INDEX)? {
                Some(PORT) => Ok(vec![reply(0, d, true)]),
                _ => Err(Refused::Invalid),
            }
        }
        _ => Err(Refused::Unsupported),
    }
}

/// `fill_nldev_handle`: the device's index and name.
fn handle(b: &mut Builder, d: &Device) {
    b.u32(attr::DEV_INDEX, d.index).str(attr::DEV_NAME, &d.name);
}

/// `fill_dev_info` for a RoCE device: the port count, capabilities,
/// firmware, GUIDs, node type, adaptive moderation off, protocol "roce".
fn dev_info(b: &mut Builder, d: &Device) {
    handle(b, d);
    b.u32(attr::PORT_INDEX, PORT)
        .u64(attr::CAP_FLAGS, d.cap_flags);
    if !d.fw.is_empty() {
        b.str(attr::FW_VERSION, &d.fw);
    }
    b.u64(attr::NODE_GUID, d.node_guid)
        .u64(attr::SYS_IMAGE_GUID, d.node_guid)
        .u8(attr::DEV_NODE_TYPE, NODE_TYPE_CA)
        .u8(attr::DEV_DIM, 0)
        .str(attr::DEV_PROTOCOL, "roce");
}

/// `fill_port_info` for a RoCE port: no LID, SM or subnet prefix (IB
/// only), the states, and the netdev when there is one.
fn port_info(b: &mut Builder, d: &Device) {
    handle(b, d);
    b.u32(attr::PORT_INDEX, PORT)
        .u8(attr::PORT_STATE, d.port_state)
        .u8(attr::PORT_PHYS_STATE, d.phys_state);
    if let Some(n) = &d.netdev {
        b.u32(attr::NDEV_INDEX, n.index)
            .str(attr::NDEV_NAME, &n.name);
    }
}

/// A dump's messages and its DONE, packed into datagrams of at most
/// [`DATAGRAM_MAX`] bytes as the kernel fills its dump buffers.
fn pack(msgs: Vec<Vec<u8>>, done: Vec<u8>) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    for m in msgs.into_iter().chain(std::iter::once(done)) {
        if !cur.is_empty() && cur.len() + m.len() > DATAGRAM_MAX {
            out.push(std::mem::take(&mut cur));
        }
        cur.extend_from_slice(&m);
    }
    out.push(cur);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{attrs, messages, HDRLEN, NLMSG_DONE, NLMSG_ERROR};
    use crate::table::Netdev;
    use proptest::prelude::*;

    fn devs() -> Vec<Device> {
        let d = |index: u32, name: &str, up: bool| Device {
            index,
            name: name.into(),
            node_guid: 0x0053_52ff_fe00_0001 + index as u64,
            fw: "softrnic 0.1.0".into(),
            cap_flags: 0x0102_1800,
            port_state: if up { 4 } else { 1 },
            phys_state: if up { 5 } else { 3 },
            netdev: up.then(|| Netdev {
                name: "lo".into(),
                index: 1,
            }),
        };
        vec![d(0, "t0", true), d(1, "t1", false)]
    }

    const SOCK: SockOpts = SockOpts {
        portid: 77,
        cap_ack: true,
    };

    fn request(cmd: u16, flags: u16, seq: u32, a: &[(u16, u32)]) -> Vec<u8> {
        let mut b = Builder::new(nl_type(cmd), msg::NLM_F_REQUEST | flags, seq, 0);
        for (t, v) in a {
            b.u32(*t, *v);
        }
        b.finish()
    }

    /// Every message of every datagram: (header, attributes by type, the
    /// error number of an NLMSG_ERROR).
    type Parsed = (Header, Vec<(u16, Vec<u8>)>, Option<i32>);

    fn parse(dgrams: &[Vec<u8>]) -> Vec<Vec<Parsed>> {
        dgrams
            .iter()
            .map(|d| {
                messages(d)
                    .map(|m| {
                        let (h, whole) = m.expect("a well-framed answer");
                        let body = &whole[HDRLEN..];
                        if h.ty == NLMSG_ERROR || h.ty == NLMSG_DONE {
                            let e = i32::from_ne_bytes(body[..4].try_into().unwrap());
                            return (h, vec![], Some(e));
                        }
                        let a = attrs(body).expect("well-formed attributes");
                        (
                            h,
                            a.into_iter().map(|(t, p)| (t, p.to_vec())).collect(),
                            None,
                        )
                    })
                    .collect()
            })
            .collect()
    }

    fn get(a: &[(u16, Vec<u8>)], t: u16) -> &[u8] {
        &a.iter()
            .find(|(x, _)| *x == t)
            .unwrap_or_else(|| panic!("no {t}"))
            .1
    }

    #[test]
    fn a_device_dump_lists_each_device_then_done() {
        let req = request(CMD_GET, msg::NLM_F_DUMP | msg::NLM_F_ACK, 5, &[]);
        let out = parse(&answer(&req, SOCK, &devs()));
        assert_eq!(out.len(), 1, "one datagram: {out:?}");
        let m = &out[0];
        assert_eq!(m.len(), 3);
        for (i, name) in ["t0", "t1"].iter().enumerate() {
            let (h, a, _) = &m[i];
            assert_eq!(
                (h.ty, h.flags, h.seq, h.pid),
                (nl_type(CMD_GET), msg::NLM_F_MULTI, 5, 77)
            );
            assert_eq!(get(a, attr::DEV_INDEX), (i as u32).to_ne_bytes());
            assert_eq!(get(a, attr::DEV_NAME), format!("{name}\0").as_bytes());
            assert_eq!(get(a, attr::PORT_INDEX), 1u32.to_ne_bytes());
            assert_eq!(get(a, attr::DEV_NODE_TYPE), [1]);
            assert_eq!(get(a, attr::FW_VERSION), b"softrnic 0.1.0\0");
            assert_eq!(get(a, attr::DEV_PROTOCOL), b"roce\0");
            assert_eq!(get(a, attr::CAP_FLAGS), 0x0102_1800u64.to_ne_bytes());
            let guid = (0x0053_52ff_fe00_0001u64 + i as u64).to_ne_bytes();
            assert_eq!(get(a, attr::NODE_GUID), guid);
            assert_eq!(get(a, attr::SYS_IMAGE_GUID), guid);
        }
        let (h, _, e) = &m[2];
        assert_eq!(
            (h.ty, h.flags, h.seq, *e),
            (NLMSG_DONE, msg::NLM_F_MULTI, 5, Some(0))
        );
        // no devices: only the DONE
        let out = parse(&answer(&req, SOCK, &[]));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), 1);
        assert_eq!(out[0][0].0.ty, NLMSG_DONE);
    }

    #[test]
    fn a_port_query_answers_the_state_and_netdev_then_the_ack() {
        let req = request(
            CMD_PORT_GET,
            msg::NLM_F_ACK,
            9,
            &[(attr::DEV_INDEX, 0), (attr::PORT_INDEX, 1)],
        );
        let out = parse(&answer(&req, SOCK, &devs()));
        assert_eq!(out.len(), 2, "the reply, then the ACK: {out:?}");
        let (h, a, _) = &out[0][0];
        assert_eq!((h.ty, h.flags, h.seq, h.pid), (nl_type(CMD_GET), 0, 9, 77));
        assert_eq!(get(a, attr::DEV_NAME), b"t0\0");
        assert_eq!(get(a, attr::PORT_INDEX), 1u32.to_ne_bytes());
        assert_eq!(get(a, attr::PORT_STATE), [4]);
        assert_eq!(get(a, attr::PORT_PHYS_STATE), [5]);
        assert_eq!(get(a, attr::NDEV_NAME), b"lo\0");
        assert_eq!(get(a, attr::NDEV_INDEX), 1u32.to_ne_bytes());
        let (h, _, e) = &out[1][0];
        assert_eq!(
            (h.ty, h.flags, *e),
            (NLMSG_ERROR, msg::NLM_F_CAPPED, Some(0))
        );
        // a device without a netdev has no NDEV attributes, and DOWN
        let req = request(
            CMD_PORT_GET,
            0,
            9,
            &[(attr::DEV_INDEX, 1), (attr::PORT_INDEX, 1)],
        );
        let out = parse(&answer(&req, SOCK, &devs()));
        assert_eq!(out.len(), 1, "no ACK unless asked");
        let a = &out[0][0].1;
        assert_eq!(get(a, attr::PORT_STATE), [1]);
        assert_eq!(get(a, attr::PORT_PHYS_STATE), [3]);
        assert!(!a
            .iter()
            .any(|(t, _)| *t == attr::NDEV_NAME || *t == attr::NDEV_INDEX));
        // a port dump of one device
        let req = request(CMD_PORT_GET, msg::NLM_F_DUMP, 3, &[(attr::DEV_INDEX, 1)]);
        let out = parse(&answer(&req, SOCK, &devs()));
        assert_eq!(out[0].len(), 2);
        assert_eq!(out[0][0].0.ty, nl_type(CMD_PORT_GET));
        assert_eq!(out[0][0].0.flags, msg::NLM_F_MULTI);
        assert_eq!(out[0][1].0.ty, NLMSG_DONE);
    }

    /// (request, the errno the only answer, an NLMSG_ERROR, carries)
    #[test]
    fn refusals_as_the_kernel_answers_them() {
        let bad_u32 = {
            let mut b = Builder::new(nl_type(CMD_GET), msg::NLM_F_REQUEST, 1, 0);
            b.u8(attr::DEV_INDEX, 0);
            b.finish()
        };
        let cases: Vec<(&str, Vec<u8>, i32)> = vec![
            (
                "a device not in the table",
                request(CMD_GET, 0, 1, &[(attr::DEV_INDEX, 7)]),
                libc::EINVAL,
            ),
            ("no device index", request(CMD_GET, 0, 1, &[]), libc::EINVAL),
            (
                "port 2",
                request(
                    CMD_PORT_GET,
                    0,
                    1,
                    &[(attr::DEV_INDEX, 0), (attr::PORT_INDEX, 2)],
                ),
                libc::EINVAL,
            ),
            (
                "no port",
                request(CMD_PORT_GET, 0, 1, &[(attr::DEV_INDEX, 0)]),
                libc::EINVAL,
            ),
            ("a one-byte index", bad_u32, libc::EINVAL),
            (
                "resources",
                request(9, msg::NLM_F_DUMP, 1, &[]),
                libc::EOPNOTSUPP,
            ),
            (
                "renaming",
                request(2, msg::NLM_F_ACK, 1, &[(attr::DEV_INDEX, 0)]),
                libc::EOPNOTSUPP,
            ),
            (
                "an unknown operation",
                request(NUM_OPS, 0, 1, &[]),
                libc::EINVAL,
            ),
            (
                "the SA client",
                {
                    let mut b = Builder::new((4 << 10) + 1, msg::NLM_F_REQUEST, 1, 0);
                    b.u32(1, 0);
                    b.finish()
                },
                libc::EOPNOTSUPP,
            ),
            (
                "an unknown client",
                Builder::new((9 << 10) + 1, msg::NLM_F_REQUEST, 1, 0).finish(),
                libc::EINVAL,
            ),
            (
                "a truncated attribute",
                {
                    let mut r = request(CMD_GET, 0, 1, &[(attr::DEV_INDEX, 0)]);
                    r[HDRLEN] = 40;
                    r
                },
                libc::EINVAL,
            ),
            ("a header only", vec![1, 2, 3], libc::EINVAL),
            (
                "a length past the datagram",
                {
                    let mut r = request(CMD_GET, 0, 1, &[]);
                    r[0] = 200;
                    r
                },
                libc::EINVAL,
            ),
        ];
        for (what, req, errno) in cases {
            for cap_ack in [false, true] {
                let sock = SockOpts {
                    portid: 77,
                    cap_ack,
                };
                let out = parse(&answer(&req, sock, &devs()));
                assert_eq!(out.len(), 1, "{what}: {out:?}");
                assert_eq!(out[0].len(), 1, "{what}: {out:?}");
                let (h, _, e) = &out[0][0];
                assert_eq!((h.ty, *e), (NLMSG_ERROR, Some(-errno)), "{what}");
                assert_eq!(h.pid, 77, "{what}");
                let whole = &answer(&req, sock, &devs())[0];
                if cap_ack || req.len() < HDRLEN {
                    assert_eq!(whole.len(), HDRLEN + 4 + HDRLEN, "{what}");
                } else {
                    assert_eq!(
                        &whole[HDRLEN + 4..HDRLEN + 4 + req.len()],
                        &req[..],
                        "{what}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_port_dump_refused_ends_with_the_error_in_its_done() {
        let bad_attr = {
            let mut r = request(CMD_PORT_GET, msg::NLM_F_DUMP, 4, &[(attr::DEV_INDEX, 0)]);
            r[HDRLEN] = 40;
            r
        };
        for (what, req) in [
            ("no device", request(CMD_PORT_GET, msg::NLM_F_DUMP, 4, &[])),
            (
                "a device not there",
                request(CMD_PORT_GET, msg::NLM_F_DUMP, 4, &[(attr::DEV_INDEX, 9)]),
            ),
            ("a truncated attribute", bad_attr),
        ] {
            let out = parse(&answer(&req, SOCK, &devs()));
            assert_eq!(out.len(), 1, "{what}");
            assert_eq!(out[0].len(), 1, "{what}");
            let (h, _, e) = &out[0][0];
            assert_eq!(
                (h.ty, h.flags, h.seq, *e),
                (NLMSG_DONE, msg::NLM_F_MULTI, 4, Some(-libc::EINVAL)),
                "{what}"
            );
        }
        // a device dump reads no attribute: garbage after the header is
        // no reason to refuse
        let mut req = request(CMD_GET, msg::NLM_F_DUMP, 5, &[]);
        req.extend([40, 0, 1, 0]);
        req[0] = req.len() as u8;
        let out = parse(&answer(&req, SOCK, &devs()));
        assert_eq!(out[0].len(), 3);
    }

    #[test]
    fn messages_that_are_not_requests_are_only_acknowledged() {
        let mut noop = Builder::new(1, msg::NLM_F_REQUEST | msg::NLM_F_ACK, 4, 0).finish();
        let out = parse(&answer(&noop, SOCK, &devs()));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][0].2, Some(0));
        noop[6] = 0; // no flags: nothing at all
        assert!(answer(&noop, SOCK, &devs()).is_empty());
        // two requests in one datagram: both answered, in order
        let mut two = request(CMD_GET, 0, 1, &[(attr::DEV_INDEX, 1)]);
        two.extend(request(CMD_GET, 0, 2, &[(attr::DEV_INDEX, 0)]));
        let out = parse(&answer(&two, SOCK, &devs()));
        assert_eq!(out.len(), 2);
        assert_eq!(get(&out[0][0].1, attr::DEV_NAME), b"t1\0");
        assert_eq!(out[1][0].0.seq, 2);
    }

    #[test]
    fn a_long_dump_spans_datagrams_of_at_most_a_page() {
        let many: Vec<Device> = (0..100)
            .map(|i| Device {
                index: i,
                name: format!("dev{i}"),
                ..devs()[0].clone()
            })
            .collect();
        let req = request(CMD_GET, msg::NLM_F_DUMP, 8, &[]);
        let dgrams = answer(&req, SOCK, &many);
        assert!(dgrams.len() > 1);
        assert!(dgrams.iter().all(|d| d.len() <= DATAGRAM_MAX));
        let out = parse(&dgrams);
        let names: Vec<&[u8]> = out
            .iter()
            .flatten()
            .filter(|m| m.2.is_none())
            .map(|m| get(&m.1, attr::DEV_NAME))
            .collect();
        assert_eq!(names.len(), 100);
        assert_eq!(names[99], b"dev99\0");
        assert_eq!(out.last().unwrap().last().unwrap().0.ty, NLMSG_DONE);
    }

    proptest! {
        /// Any bytes at all: no panic, and every answer is well framed,
        /// carries the socket's port id and is an error, a DONE or a
        /// device's description.
        #[test]
        fn any_datagram_gets_well_framed_answers(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            for d in parse(&answer(&b, SOCK, &devs())).iter().flatten() {
                prop_assert_eq!(d.0.pid, 77);
            }
        }

        /// A request with random attributes after a valid nldev header.
        #[test]
        fn any_attributes_get_well_framed_answers(
            cmd in 0u16..30,
            flags in any::<u16>(),
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut b = Builder::new(nl_type(cmd), flags, 1, 0);
            b.raw(&body);
            let req = b.finish();
            for d in parse(&answer(&req, SOCK, &devs())).iter().flatten() {
                prop_assert_eq!(d.0.seq, 1);
            }
        }
    }
}
