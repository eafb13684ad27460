//! The CM tests' harness: two CMs (`nic::cm`) on a virtual clock joined
//! by an in-test link that can drop chosen messages ([`Net`]), and the
//! parameters the tests connect with.
#![allow(dead_code)]

use nic::cm::{AcceptParams, Cm, CmAddr, CmEvent, CmId, ConnectParams};
use nic::Instant;
use std::time::Duration;
use wire::mad::{self, Mad};

pub const LAT: Duration = Duration::from_micros(10);
pub const SERVICE: u64 = 0x0106_0000_0000_4e20;
pub const A_QPN: u32 = 0x11;
pub const B_QPN: u32 = 0x22;
/// The RDMA CM's Q_Key for RDMA_PS_UDP (librdmacm's RDMA_UDP_QKEY).
pub const UDP_QKEY: u32 = 0x0123_4567;
/// An RDMA_PS_UDP service ID (IBA A11), port 7174.
pub const UDP_SERVICE: u64 = 0x0111_1c06;

pub fn addr(last: u8) -> CmAddr {
    CmAddr::from_ip(std::net::Ipv4Addr::new(10, 0, 0, last).into())
}

/// Which message the link drops: (sent by A?, attribute ID, n-th such
/// message from that side, counting from 1).
pub type DropRule = Box<dyn FnMut(bool, u16, usize) -> bool>;

pub struct Net {
    pub now: Instant,
    pub a: Cm,
    pub b: Cm,
    pub inflight: Vec<(Instant, bool, Mad)>,
    pub drop: DropRule,
    /// (time, sent by A?, attribute, dropped?, the MAD)
    pub log: Vec<(Instant, bool, u16, bool, Mad)>,
    pub ev_a: Vec<(Instant, CmEvent)>,
    pub ev_b: Vec<(Instant, CmEvent)>,
    pub auto_accept: bool,
}

pub fn accept_params() -> AcceptParams {
    AcceptParams {
        local_qpn: B_QPN,
        starting_psn: 0x00bb_bbbb,
        responder_resources: 4,
        initiator_depth: 4,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        srq: false,
        end_to_end_flow_control: false,
        private_data: b"accepted".to_vec(),
    }
}

pub fn connect_params() -> ConnectParams {
    let mut p = ConnectParams::new(addr(2), SERVICE, A_QPN, 0x00aa_aaaa);
    p.cm_response_timeout = 16; // ~268 ms
    p.max_cm_retries = 3;
    p.private_data = b"hello".to_vec();
    p
}

impl Net {
    pub fn new(drop: DropRule) -> Net {
        let mut b = Cm::new(addr(2), 0xb, 2);
        b.listen(SERVICE);
        b.listen(UDP_SERVICE);
        Net {
            now: Instant::ZERO,
            a: Cm::new(addr(1), 0xa, 1),
            b,
            inflight: Vec::new(),
            drop,
            log: Vec::new(),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            auto_accept: true,
        }
    }

    pub fn sent(&self, by_a: bool, attribute: u16) -> usize {
        self.log
            .iter()
            .filter(|l| l.1 == by_a && l.2 == attribute)
            .count()
    }

    pub fn flush(&mut self) {
        loop {
            let mut any = false;
            for by_a in [true, false] {
                loop {
                    let cm = if by_a { &mut self.a } else { &mut self.b };
                    let Some((to, m)) = cm.poll_transmit(self.now) else {
                        break;
                    };
                    any = true;
                    assert_eq!(to, if by_a { addr(2) } else { addr(1) });
                    let at = m.header.attribute_id;
                    let n = self.sent(by_a, at) + 1;
                    let dropped = (self.drop)(by_a, at, n);
                    self.log.push((self.now, by_a, at, dropped, m));
                    if !dropped {
                        self.inflight.push((self.now + LAT, by_a, m));
                    }
                }
            }
            while let Some(e) = self.a.poll_event() {
                self.ev_a.push((self.now, e));
            }
            while let Some(e) = self.b.poll_event() {
                if let CmEvent::ConnectRequest { id, .. } = &e {
                    if self.auto_accept {
                        any = true;
                        self.b.accept(self.now, *id, &accept_params()).unwrap();
                    }
                }
                if let CmEvent::SidrRequest { id, .. } = &e {
                    if self.auto_accept {
                        any = true;
                        self.b
                            .sidr_accept(self.now, *id, B_QPN, UDP_QKEY, b"ud accepted")
                            .unwrap();
                    }
                }
                self.ev_b.push((self.now, e));
            }
            if !any {
                break;
            }
        }
    }

    /// Advances the clock to the next delivery or timer; false when there
    /// is none.
    pub fn next_time(&self) -> Option<Instant> {
        self.inflight
            .iter()
            .map(|f| f.0)
            .chain(self.a.poll_timeout())
            .chain(self.b.poll_timeout())
            .min()
    }

    /// Runs everything due up to `t`, then sets the clock to `t`.
    pub fn run_to(&mut self, t: Instant) {
        self.flush();
        while self.next_time().is_some_and(|n| n <= t) {
            self.step();
        }
        self.now = t;
    }

    pub fn step(&mut self) -> bool {
        self.flush();
        let Some(next) = self.next_time() else {
            return false;
        };
        self.now = next;
        let mut due = Vec::new();
        self.inflight.retain(|f| {
            if f.0 <= next {
                due.push((f.1, f.2));
                false
            } else {
                true
            }
        });
        for (to_b, m) in due {
            if to_b {
                self.b.handle_mad(next, addr(1), &m);
            } else {
                self.a.handle_mad(next, addr(2), &m);
            }
        }
        self.a.handle_timeout(next);
        self.b.handle_timeout(next);
        self.flush();
        true
    }

    /// Steps until `done` holds (panics after many steps).
    pub fn run_until(&mut self, mut done: impl FnMut(&Net) -> bool) {
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            if !self.step() {
                break;
            }
        }
        assert!(done(self), "condition never held; log: {:?}", self.names());
    }

    pub fn run_to_quiet(&mut self) {
        while self.step() {}
    }

    pub fn names(&self) -> Vec<String> {
        self.log
            .iter()
            .map(|l| {
                format!(
                    "{:?} {}{} {}",
                    l.0,
                    if l.1 { "A>" } else { "B>" },
                    mad::attribute_name(l.2),
                    if l.3 { "(dropped)" } else { "" }
                )
            })
            .collect()
    }

    pub fn established(&self) -> bool {
        let a = self
            .ev_a
            .iter()
            .any(|e| matches!(e.1, CmEvent::Established { .. }));
        let b = self
            .ev_b
            .iter()
            .any(|e| matches!(e.1, CmEvent::Established { .. }));
        a && b
    }

    pub fn b_id(&self) -> CmId {
        self.ev_b
            .iter()
            .find_map(|e| match &e.1 {
                CmEvent::ConnectRequest { id, .. } => Some(*id),
                _ => None,
            })
            .expect("B saw a REQ")
    }
}

pub fn no_drops() -> DropRule {
    Box::new(|_, _, _| false)
}

pub fn connected(drop: DropRule) -> (Net, CmId, CmId) {
    let mut net = Net::new(drop);
    let a = net.a.connect(net.now, &connect_params());
    net.run_until(Net::established);
    let b = net.b_id();
    (net, a, b)
}
