//! The kernel's routing, neighbour, link and address tables, read over
//! rtnetlink (rtnetlink(7)) with the `netlink-packet-route` message types
//! on a blocking `netlink-sys` socket.
//!
//! Each [`Rtnl`] opens its own socket; a netlink socket belongs to the
//! network namespace its creating thread was in, so the answers are those
//! of the namespace the caller is in when it calls [`Rtnl::open`] (the test
//! rigs enter a namespace with setns(2) on the calling thread). Nothing is
//! cached between calls: this is the control path, asked once per address
//! handle or port.

use netlink_packet_core::{
    DecodeError, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteVia};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcStats2};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::io;
use std::net::IpAddr;

/// Why a query of the kernel's tables failed.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("opening a netlink socket: {0}")]
    Socket(#[source] io::Error),
    #[error("{what}: sending the netlink request: {source}")]
    Send {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{what}: reading the kernel's netlink answer: {source}")]
    Recv {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{what}: the kernel's netlink answer does not parse: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: DecodeError,
    },
    #[error("{what}: the kernel answered: {source}")]
    Kernel {
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

impl NetlinkError {
    /// The errno the kernel answered with, if it refused the request.
    pub fn kernel_errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// The route the kernel picked for one destination (RTM_GETROUTE, the
/// question `ip route get` asks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteReply {
    /// The output interface (RTA_OIF).
    pub oif: Option<u32>,
    /// The gateway (RTA_GATEWAY, or RTA_VIA for a gateway of the other
    /// family); `None` when the destination is on-link.
    pub gateway: Option<IpAddr>,
    /// The preferred source address (RTA_PREFSRC).
    pub pref_src: Option<IpAddr>,
}

/// One entry of the neighbour table (ARP / ND).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    pub ifindex: u32,
    pub dst: IpAddr,
    pub state: NeighbourState,
    /// NDA_LLADDR, when the entry has one.
    pub lladdr: Option<Vec<u8>>,
}

impl Neighbour {
    /// Whether the entry holds a link-layer address worth using: the
    /// states `ip neigh show` lists (not NOARP or NONE) less FAILED and
    /// INCOMPLETE.
    pub fn usable(&self) -> bool {
        matches!(
            self.state,
            NeighbourState::Reachable
                | NeighbourState::Stale
                | NeighbourState::Delay
                | NeighbourState::Probe
                | NeighbourState::Permanent
        )
    }
}

/// One interface address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceAddress {
    pub ifindex: u32,
    pub addr: IpAddr,
    pub prefix_len: u8,
    pub scope: AddressScope,
}

/// A root qdisc's queue at one instant (RTM_GETQDISC, the numbers
/// `tc -s qdisc show` prints as `backlog`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QdiscQueue {
    pub ifindex: u32,
    /// Bytes queued.
    pub backlog: u64,
    /// Frames queued.
    pub qlen: u64,
}

/// A route netlink socket in the calling thread's network namespace.
pub struct Rtnl {
    sock: Socket,
    seq: u32,
}

fn family(ip: IpAddr) -> AddressFamily {
    match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

impl Rtnl {
    /// Opens a NETLINK_ROUTE socket.
    pub fn open() -> Result<Rtnl, NetlinkError> {
        let sock = Socket::new(NETLINK_ROUTE).map_err(NetlinkError::Socket)?;
        Ok(Rtnl { sock, seq: 0 })
    }

    /// Sends `msg` (a dump when `dump`) and collects the kernel's answers
    /// up to NLMSG_DONE (a dump) or the first answer (a get).
    fn ask(
        &mut self,
        what: &'static str,
        msg: RouteNetlinkMessage,
        dump: bool,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
        header.sequence_number = self.seq;
        let mut req = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        req.finalize();
        let mut buf = vec![0u8; req.buffer_len()];
        req.serialize(&mut buf);
        self.sock
            .send_to(&buf, &SocketAddr::new(0, 0), 0)
            .map_err(|source| NetlinkError::Send { what, source })?;
        let mut out = Vec::new();
        loop {
            let (data, _) = self
                .sock
                .recv_from_full()
                .map_err(|source| NetlinkError::Recv { what, source })?;
            let mut off = 0;
            while off < data.len() {
                let bytes = &data[off..];
                let len = NetlinkBuffer::new_checked(bytes)
                    .map_err(|source| NetlinkError::Decode { what, source })?
                    .length() as usize;
                let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bytes[..len])
                    .map_err(|source| NetlinkError::Decode { what, source })?;
                // messages are 4-byte aligned (NLMSG_ALIGN)
                off += (len + 3) & !3;
                if m.header.sequence_number != self.seq {
                    continue;
                }
                match m.payload {
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) if e.code.is_some() => {
                        return Err(NetlinkError::Kernel {
                            what,
                            source: e.to_io(),
                        })
                    }
                    NetlinkPayload::InnerMessage(inner) => {
                        out.push(inner);
                        if !dump {
                            return Ok(out);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// The route the kernel would use to send to `dst`.
    pub fn route_get(&mut self, dst: IpAddr) -> Result<RouteReply, NetlinkError> {
        let mut q = RouteMessage::default();
        q.header.address_family = family(dst);
        q.header.destination_prefix_length = if dst.is_ipv4() { 32 } else { 128 };
        q.attributes
            .push(RouteAttribute::Destination(RouteAddress::from(dst)));
        let mut reply = RouteReply {
            oif: None,
            gateway: None,
            pref_src: None,
        };
        for m in self.ask("RTM_GETROUTE", RouteNetlinkMessage::GetRoute(q), false)? {
            let RouteNetlinkMessage::NewRoute(r) = m else {
                continue;
            };
            for a in r.attributes {
                match a {
                    RouteAttribute::Oif(i) => reply.oif = Some(i),
                    RouteAttribute::Gateway(g) => reply.gateway = route_ip(g),
                    RouteAttribute::Via(RouteVia::Inet(v)) => reply.gateway = Some(v.into()),
                    RouteAttribute::Via(RouteVia::Inet6(v)) => reply.gateway = Some(v.into()),
                    RouteAttribute::PrefSource(s) => reply.pref_src = route_ip(s),
                    _ => {}
                }
            }
        }
        Ok(reply)
    }

    /// The neighbour table of `dst`'s family, filtered to `dst` on
    /// interface `ifindex`.
    pub fn neighbours(
        &mut self,
        ifindex: u32,
        dst: IpAddr,
    ) -> Result<Vec<Neighbour>, NetlinkError> {
        let mut q = NeighbourMessage::default();
        q.header.family = family(dst);
        let mut out = Vec::new();
        for m in self.ask("RTM_GETNEIGH", RouteNetlinkMessage::GetNeighbour(q), true)? {
            let RouteNetlinkMessage::NewNeighbour(n) = m else {
                continue;
            };
            if n.header.ifindex != ifindex {
                continue;
            }
            let mut addr = None;
            let mut lladdr = None;
            for a in n.attributes {
                match a {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(v)) => {
                        addr = Some(IpAddr::V4(v))
                    }
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(v)) => {
                        addr = Some(IpAddr::V6(v))
                    }
                    NeighbourAttribute::LinkLayerAddress(l) => lladdr = Some(l),
                    _ => {}
                }
            }
            if addr == Some(dst) {
                out.push(Neighbour {
                    ifindex,
                    dst,
                    state: n.header.state,
                    lladdr,
                });
            }
        }
        Ok(out)
    }

    /// Every root qdisc's backlog in this namespace (one RTM_GETQDISC
    /// dump: TCA_STATS2's queue statistics, else the older TCA_STATS).
    pub fn root_qdisc_queues(&mut self) -> Result<Vec<QdiscQueue>, NetlinkError> {
        let msgs = self.ask(
            "the qdiscs",
            RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()),
            true,
        )?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewQueueDiscipline(q) if q.header.parent == TcHandle::ROOT => {
                    Some(q)
                }
                _ => None,
            })
            .map(|q| {
                let mut out = QdiscQueue {
                    ifindex: u32::try_from(q.header.index).unwrap_or(0),
                    ..QdiscQueue::default()
                };
                for a in &q.attributes {
                    match a {
                        TcAttribute::Stats2(v) => {
                            for st in v {
                                if let TcStats2::Queue(sq) = st {
                                    out.backlog = u64::from(sq.backlog);
                                    out.qlen = u64::from(sq.qlen);
                                }
                            }
                        }
                        TcAttribute::Stats(st) if out.backlog == 0 && out.qlen == 0 => {
                            out.backlog = u64::from(st.backlog);
                            out.qlen = u64::from(st.qlen);
                        }
                        _ => {}
                    }
                }
                out
            })
            .collect())
    }

    /// The index of interface `name`; `None` when there is no such
    /// interface in this namespace.
    pub fn link_index(&mut self, name: &str) -> Result<Option<u32>, NetlinkError> {
        let mut q = LinkMessage::default();
        q.attributes.push(LinkAttribute::IfName(name.into()));
        match self.ask("RTM_GETLINK", RouteNetlinkMessage::GetLink(q), false) {
            Ok(ms) => Ok(ms.into_iter().find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(l.header.index),
                _ => None,
            })),
            Err(e) if e.kernel_errno() == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The name of interface `index`; `None` when there is none.
    pub fn link_name(&mut self, index: u32) -> Result<Option<String>, NetlinkError> {
        let mut q = LinkMessage::default();
        q.header.index = index;
        match self.ask("RTM_GETLINK", RouteNetlinkMessage::GetLink(q), false) {
            Ok(ms) => Ok(ms.into_iter().find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => l.attributes.into_iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n),
                    _ => None,
                }),
                _ => None,
            })),
            Err(e) if e.kernel_errno() == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The addresses of interface `ifindex` in `fam`ily, in the kernel's
    /// order (what `ip addr show dev` lists).
    pub fn addresses(
        &mut self,
        ifindex: u32,
        fam: AddressFamily,
    ) -> Result<Vec<InterfaceAddress>, NetlinkError> {
        let mut q = AddressMessage::default();
        q.header.family = fam;
        let mut out = Vec::new();
        for m in self.ask("RTM_GETADDR", RouteNetlinkMessage::GetAddress(q), true)? {
            let RouteNetlinkMessage::NewAddress(a) = m else {
                continue;
            };
            if a.header.index != ifindex || a.header.family != fam {
                continue;
            }
            // IFA_LOCAL is the interface's own address (IFA_ADDRESS is the
            // peer's on a point-to-point link); IPv6 gives only IFA_ADDRESS.
            let (mut local, mut address) = (None, None);
            for attr in a.attributes {
                match attr {
                    AddressAttribute::Local(ip) => local = Some(ip),
                    AddressAttribute::Address(ip) => address = Some(ip),
                    _ => {}
                }
            }
            if let Some(addr) = local.or(address) {
                out.push(InterfaceAddress {
                    ifindex,
                    addr,
                    prefix_len: a.header.prefix_len,
                    scope: a.header.scope,
                });
            }
        }
        Ok(out)
    }
}

fn route_ip(a: RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v) => Some(v.into()),
        RouteAddress::Inet6(v) => Some(v.into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The loopback interface exists in every namespace, as index 1.

    #[test]
    fn links_resolve_both_ways() {
        let mut nl = Rtnl::open().unwrap();
        assert_eq!(nl.link_index("lo").unwrap(), Some(1));
        assert_eq!(nl.link_name(1).unwrap().as_deref(), Some("lo"));
        assert_eq!(nl.link_index("no-such-if0").unwrap(), None);
    }

    #[test]
    fn loopback_routes_through_lo_and_has_its_address() {
        let mut nl = Rtnl::open().unwrap();
        let r = nl.route_get("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(r.oif, Some(1));
        assert_eq!(r.gateway, None);
        let v4 = nl.addresses(1, AddressFamily::Inet).unwrap();
        assert!(
            v4.iter()
                .any(|a| a.addr == "127.0.0.1".parse::<IpAddr>().unwrap() && a.prefix_len == 8),
            "{v4:?}"
        );
    }
    #[test]
    fn the_loopback_root_qdisc_reads_as_a_queue() {
        let mut nl = Rtnl::open().unwrap();
        let qs = nl.root_qdisc_queues().unwrap();
        // lo's root qdisc (noqueue) is listed, and holds nothing
        let lo = qs.iter().find(|q| q.ifindex == 1);
        assert_eq!(lo.map(|q| (q.backlog, q.qlen)), Some((0, 0)), "{qs:?}");
        assert!(qs.iter().all(|q| q.ifindex > 0), "{qs:?}");
    }
}
