//! The switches' stage: 802.1Qbb pause generation where the kernel's
//! bridge has none, and CE marking on the queues' depth. A thread of
//! `rnic lab` enters each switch namespace (opening its sockets there) and
//! reads every egress tbf queue's backlog each [`POLL`]. With an ECN
//! threshold it marks the ports whose queue is above it
//! ([`super::mark::Marking`]). With PFC, per switch port, it feeds a
//! [`PfcTx`] (the NIC's
//! XOFF/XON hysteresis and refresh) the backlog that port's ingress feeds;
//! the PFC frames it asks for leave that port with AF_PACKET, toward the
//! host or the switch behind it (a bridge does not forward
//! 01:80:C2:00:00:01, so the stage sends them itself). On a trunk port it
//! also honours the pauses the other switch sends, holding that egress
//! queue ([`super::pfc_hold`]): so a pause spreads from switch to switch.
//!
//! What is a proxy: a real switch accounts its buffer per ingress port and
//! priority; here the bridge keeps no such account, so a port's ingress is
//! taken to hold the deepest egress queue other than its own (the queue its
//! traffic can be in), among the ports of the same switch. The whole tbf queue counts as priority
//! [`ROCE_PRIORITY`]: the RoCEv2 data and ACKs leave the hosts at DSCP 26,
//! priority 26 >> 3 = 3 under rnicd's default DSCP trust; CNPs (priority 6)
//! are never paused.
//!
//! The backlog is read over rtnetlink (RTM_GETQDISC with nic's
//! `netlink-packet-route` reader, one dump a poll) rather than by running
//! `tc -s qdisc` each time: a process per poll costs milliseconds, longer
//! than the poll period.

use super::config::{LabConfig, PfcThresholds};
use super::host::Daemon;
use super::mark::Marking;
use super::net::{Fabric, TABLE};
use super::packet::packet_socket;
use super::pfc_hold::{nudge, Held, Holder};
use super::sys::ip;
use super::LabError;
use nic::cc::{PfcTx, PfcTxParams, PRIORITIES};
use nic::io::netlink::Rtnl;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use wire::{EthernetAddress, MacControl, MacControlRepr};

pub use super::packet::ROCE_PRIORITY;

/// How often the queues are read.
pub const POLL: Duration = Duration::from_micros(500);

/// One switch port, as the stage sees it.
#[derive(Debug, Clone)]
pub struct StagePort {
    /// The port's interface in the switch namespace.
    pub iface: String,
    /// Its MAC address: the source of the PFC frames it sends.
    pub mac: EthernetAddress,
    /// Its switch: an index into the stage's namespaces.
    pub switch: usize,
    /// The speed its pause quanta count in.
    pub link_bps: u64,
    /// A trunk port: it honours the pauses it receives, holding its tbf
    /// of `link_bps` (limit bytes, frames of MTU).
    pub hold: Option<(u64, u32)>,
    /// CE-mark toward the port while its queue holds more (0: never).
    pub ecn_bytes: u64,
}

/// PFC frames the switches sent out of each port, per priority named
/// (empty without PFC).
pub type SentCounts = Vec<[u64; PRIORITIES]>;

/// What the stage counted, per port (in the fabric's port order).
#[derive(Debug, Clone, Default)]
pub struct StageCounts {
    pub sent: SentCounts,
    /// The pauses each trunk port honoured (zero elsewhere).
    pub held: Vec<Held>,
}

/// The running stage: stopped and joined on drop.
pub struct PfcStage {
    stop: Arc<AtomicBool>,
    /// Why the thread ended early, once it has.
    failed: Arc<Mutex<Option<String>>>,
    counts: Arc<Mutex<StageCounts>>,
    thread: Option<JoinHandle<Result<(), LabError>>>,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let what = what.into();
    move |source| LabError::Io { what, source }
}

impl PfcStage {
    /// Starts the stage in the switch namespaces `switches` on `ports`
    /// (in the fabric's port order): with `pfc`, pausing at its XOFF and
    /// resuming at its XON; CE-marking toward the ports with an ECN
    /// threshold while their queue holds more.
    pub fn start(
        switches: &[String],
        ports: Vec<StagePort>,
        pfc: Option<PfcThresholds>,
    ) -> Result<PfcStage, LabError> {
        let netns = switches
            .iter()
            .map(|ns| {
                let path = format!("/run/netns/{ns}");
                std::fs::File::open(&path).map_err(io(path))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let stop = Arc::new(AtomicBool::new(false));
        let n = if pfc.is_some() { ports.len() } else { 0 };
        let counts = Arc::new(Mutex::new(StageCounts {
            sent: vec![[0u64; PRIORITIES]; n],
            held: vec![Held::default(); n],
        }));
        let failed = Arc::new(Mutex::new(None));
        let (s, c, f) = (stop.clone(), counts.clone(), failed.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let names = switches.to_vec();
        let thread = std::thread::Builder::new()
            .name("lab-switch".into())
            .spawn(move || {
                let ready = Stage::open(&netns, &names, ports, pfc);
                let (stage, said) = match ready {
                    Ok(st) => (Some(st), Ok(())),
                    Err(e) => (None, Err(e)),
                };
                let _ = tx.send(said);
                let Some(mut st) = stage else { return Ok(()) };
                let ran = st.run(&s, &c);
                if let (Err(e), Ok(mut slot)) = (&ran, f.lock()) {
                    *slot = Some(e.to_string());
                }
                ran
            })
            .map_err(io("the switch stage's thread"))?;
        let mut stage = PfcStage {
            stop,
            failed,
            counts,
            thread: Some(thread),
        };
        match rx.recv() {
            Ok(Ok(())) => Ok(stage),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(stage.finish().err().unwrap_or(LabError::Io {
                what: "the PFC stage's thread".into(),
                source: std::io::ErrorKind::BrokenPipe.into(),
            })),
        }
    }

    /// The PFC frames sent so far, per port and priority, and the pauses
    /// honoured; an error once the stage has stopped on one (the run
    /// would go on without PFC).
    pub fn counts(&self) -> Result<StageCounts, LabError> {
        if let Some(why) = self.failed.lock().ok().and_then(|g| g.clone()) {
            return Err(LabError::PfcStage(why));
        }
        Ok(self.counts.lock().map(|g| g.clone()).unwrap_or_default())
    }

    /// Stops the thread; its error, if it ended on one.
    pub fn finish(&mut self) -> Result<(), LabError> {
        self.stop.store(true, Ordering::Release);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(LabError::Io {
                what: "the PFC stage's thread panicked".into(),
                source: std::io::ErrorKind::Other.into(),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for PfcStage {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The stage's state, on its own thread (in the last switch's namespace,
/// its sockets in each switch's).
struct Stage {
    /// Each switch's rtnetlink socket.
    rtnl: Vec<Rtnl>,
    ports: Vec<StagePort>,
    ifindex: Vec<u32>,
    /// PFC's sockets and generators, one per port (empty: no PFC).
    sockets: Vec<OwnedFd>,
    tx: Vec<PfcTx>,
    holders: Vec<Option<Holder>>,
    /// Each switch's marking (none without a port that marks).
    marking: Vec<Option<Marking>>,
    /// Each port's place in its switch's marking.
    mark_slot: Vec<usize>,
    t0: std::time::Instant,
}

impl Stage {
    fn open(
        netns: &[std::fs::File],
        names: &[String],
        ports: Vec<StagePort>,
        pfc: Option<PfcThresholds>,
    ) -> Result<Stage, LabError> {
        // a switch reacts in hardware: the stage asks for the CPU first
        // (SCHED_FIFO 1 where permitted, else a short EEVDF slice; it
        // sleeps between polls), so a busy machine does not hold a pause
        // or a mark back by other threads' time slices.
        let _ = nic::engine::apply_priority(nic::engine::Priority::Auto);
        let mut st = Stage {
            rtnl: Vec::new(),
            ports: Vec::new(),
            ifindex: Vec::new(),
            sockets: Vec::new(),
            tx: Vec::new(),
            holders: Vec::new(),
            marking: Vec::new(),
            mark_slot: Vec::new(),
            t0: std::time::Instant::now(),
        };
        for ns in netns {
            enter(ns)?;
            st.rtnl.push(Rtnl::open()?);
        }
        for p in ports {
            // its sockets are made in its switch's namespace
            enter(&netns[p.switch])?;
            st.add_port(p.clone(), &names[p.switch], pfc)?;
        }
        for (k, ns) in netns.iter().enumerate() {
            let of_k: Vec<(u32, u64)> = (st.ports.iter().zip(&st.ifindex))
                .filter(|(p, _)| p.switch == k)
                .map(|(p, &i)| (i, p.ecn_bytes))
                .collect();
            let marks = of_k.iter().any(|&(_, e)| e > 0);
            enter(ns)?;
            st.marking.push(if marks {
                Some(Marking::open(TABLE, &of_k)?)
            } else {
                None
            });
        }
        Ok(st)
    }

    /// Port `p` of the switch whose namespace (`ns`) this thread is in.
    fn add_port(
        &mut self,
        p: StagePort,
        ns: &str,
        pfc: Option<PfcThresholds>,
    ) -> Result<(), LabError> {
        let idx = self.rtnl[p.switch].link_index(&p.iface)?.ok_or_else(|| {
            io(format!("switch port {}", p.iface))(std::io::ErrorKind::NotFound.into())
        })?;
        self.mark_slot
            .push(self.ports.iter().filter(|q| q.switch == p.switch).count());
        if let Some(th) = pfc {
            self.sockets.push(
                packet_socket(idx).map_err(io(format!("an AF_PACKET socket on {}", p.iface)))?,
            );
            let mut params = PfcTxParams::new(p.link_bps, th.xoff_bytes, th.xon_bytes);
            params.enabled = 1 << ROCE_PRIORITY;
            self.tx.push(PfcTx::new(params));
            let holder = match p.hold {
                Some((limit, mtu)) => Some(
                    Holder::open(idx, (ns, &p.iface), p.link_bps, limit, mtu)
                        .map_err(io(format!("a MAC control socket on {}", p.iface)))?,
                ),
                None => None,
            };
            self.holders.push(holder);
        }
        self.ifindex.push(idx);
        self.ports.push(p);
        Ok(())
    }

    fn now(&self) -> nic::Instant {
        nic::Instant::from_nanos(self.t0.elapsed().as_nanos() as u64)
    }

    /// Each port's egress backlog now.
    fn backlogs(&mut self) -> Result<Vec<u64>, LabError> {
        let mut queues = Vec::new();
        for r in &mut self.rtnl {
            queues.push(r.root_qdisc_queues()?);
        }
        Ok(self
            .ports
            .iter()
            .zip(&self.ifindex)
            .map(|(p, i)| {
                queues[p.switch]
                    .iter()
                    .find(|q| q.ifindex == *i)
                    .map_or(0, |q| q.backlog)
            })
            .collect())
    }

    fn run(&mut self, stop: &AtomicBool, counts: &Mutex<StageCounts>) -> Result<(), LabError> {
        while !stop.load(Ordering::Acquire) {
            let backlog = self.backlogs()?;
            for (j, b) in backlog.iter().enumerate() {
                let (k, slot) = (self.ports[j].switch, self.mark_slot[j]);
                if let Some(m) = self.marking.get_mut(k).and_then(Option::as_mut) {
                    m.follow(slot, *b)?;
                }
            }
            for j in 0..self.tx.len() {
                let own: Vec<u64> = (0..backlog.len())
                    .map(|i| {
                        let same = self.ports[i].switch == self.ports[j].switch;
                        if same {
                            backlog[i]
                        } else {
                            0
                        }
                    })
                    .collect();
                self.tx[j].on_backlog(ROCE_PRIORITY, ingress_backlog(&own, j));
                let now = self.now();
                while let Some(control) = self.tx[j].poll_transmit(now) {
                    let sent = self.send(j, control)?;
                    if let (true, Ok(mut c), MacControl::Pfc { class_enable, .. }) =
                        (sent, counts.lock(), control)
                    {
                        for (p, n) in c.sent[j].iter_mut().enumerate() {
                            *n += u64::from(class_enable >> p & 1);
                        }
                    }
                }
                self.honour(j, now, counts)?;
            }
            std::thread::sleep(POLL);
        }
        Ok(())
    }

    /// Port `j`'s received pauses (a trunk port's): holds or releases its
    /// queue, and wakes it on release.
    fn honour(
        &mut self,
        j: usize,
        now: nic::Instant,
        counts: &Mutex<StageCounts>,
    ) -> Result<(), LabError> {
        let Some(h) = self.holders[j].as_mut() else {
            return Ok(());
        };
        let released = h.poll(now)? == Some(true);
        if let Ok(mut c) = counts.lock() {
            c.held[j] = h.held(now);
        }
        if released {
            // dropped by a full queue, the attempt still ran the qdisc
            self.send(j, nudge(self.ports[j].mac).control)?;
        }
        Ok(())
    }

    /// Sends `control` out of port `j` (only `wire` writes its bytes);
    /// whether it left: the frame goes through the port's tbf like any
    /// other, and a full queue (a held trunk's) drops it (ENOBUFS).
    fn send(&self, j: usize, control: MacControl) -> Result<bool, LabError> {
        let MacControl::Pfc {
            class_enable,
            quanta,
        } = control
        else {
            return Ok(false);
        };
        let repr = MacControlRepr::pfc(self.ports[j].mac, class_enable, quanta);
        let mut buf = [0u8; 64];
        let len = repr.emit(&mut buf).unwrap_or(0);
        // SAFETY: send(2) of `len` initialised bytes of `buf` on our own
        // AF_PACKET socket, bound to the port.
        let n = unsafe { libc::send(self.sockets[j].as_raw_fd(), buf.as_ptr().cast(), len, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOBUFS) {
                return Ok(false);
            }
            return Err(io(format!("a PFC frame out of {}", self.ports[j].iface))(e));
        }
        Ok(true)
    }
}

/// Starts the stage when `cfg` asks for PFC or CE marking: every switch port with its
/// MAC, pause times in quanta of its link's speed (the hosts' ports: the
/// speed a port and its host agree on, rnicd's `line_bps`; the trunk's:
/// its rate), the trunk's ports honouring the pauses they receive.
pub fn start(
    cfg: &LabConfig,
    fabric: &Fabric,
    daemons: &[Daemon],
) -> Result<Option<PfcStage>, LabError> {
    if cfg.pfc.is_none() && fabric.ports.iter().all(|p| p.ecn_bytes == 0) {
        return Ok(None);
    }
    let host_bps = daemons
        .iter()
        .filter_map(|d| d.cc_states().ok().map(|c| c.line_bps))
        .max()
        .filter(|&b| b > 0)
        .unwrap_or(cfg.rate_bps);
    let switches = fabric.switches();
    let mut ports = Vec::new();
    for (i, p) in fabric.ports.iter().enumerate() {
        let link = ip(&["-n", &p.switch, "-o", "link", "show", "dev", &p.iface])?;
        let mac = mac_of(&link).ok_or_else(|| {
            io(format!("{}'s MAC in: {link}", p.iface))(std::io::ErrorKind::InvalidData.into())
        })?;
        let trunk = i >= fabric.hosts.len();
        ports.push(StagePort {
            iface: p.iface.clone(),
            mac,
            switch: switches.iter().position(|s| *s == p.switch).unwrap_or(0),
            link_bps: if trunk { p.rate_bps } else { host_bps },
            hold: trunk.then_some((p.queue_bytes, cfg.mtu)),
            ecn_bytes: p.ecn_bytes,
        });
    }
    let stage = PfcStage::start(&switches, ports, cfg.pfc)?;
    if let Some(th) = cfg.pfc {
        super::say(&format!(
            "PFC from the switch{}: priority {ROCE_PRIORITY} paused above {} KB of a queue, resumed at {} KB{}",
            if switches.len() > 1 { "es" } else { "" },
            th.xoff_bytes / 1000,
            th.xon_bytes / 1000,
            if switches.len() > 1 { "; the trunk's pauses honoured" } else { "" },
        ));
    }
    if cfg.ecn_bytes > 0 {
        super::say(&format!(
            "CE marking toward a port while its queue holds more than {} KB (read every {} µs)",
            cfg.ecn_bytes / 1000,
            POLL.as_micros()
        ));
    }
    Ok(Some(stage))
}

/// Moves this thread (not the process) into the namespace `ns` opens.
fn enter(ns: &std::fs::File) -> Result<(), LabError> {
    // SAFETY: setns(2) on an open namespace file; it moves only the
    // calling thread into that network namespace.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io("entering a switch namespace")(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// The backlog port `j`'s ingress is taken to hold: the deepest egress
/// queue other than its own (see the module's proxy note).
pub fn ingress_backlog(backlog: &[u64], j: usize) -> u64 {
    backlog
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != j)
        .map(|(_, b)| *b)
        .max()
        .unwrap_or(0)
}

/// A port's MAC from `ip -o link show` output (`link/ether xx:..`).
pub fn mac_of(ip_link: &str) -> Option<EthernetAddress> {
    let w = ip_link
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)?;
    let mut b = [0u8; 6];
    let mut it = w.split(':');
    for x in &mut b {
        *x = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    Some(EthernetAddress(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ingress_holds_the_deepest_queue_but_its_own() {
        let b = [400_000, 10, 20];
        assert_eq!(ingress_backlog(&b, 0), 20);
        assert_eq!(ingress_backlog(&b, 1), 400_000);
        assert_eq!(ingress_backlog(&b, 2), 400_000);
        assert_eq!(ingress_backlog(&[5], 0), 0);
    }

    #[test]
    fn a_mac_reads_from_ip_link() {
        let l = "7: rnl1s0@if6: <BROADCAST> mtu 1500 qdisc tbf state UP \\    link/ether 3a:0b:cc:01:02:ff brd ff:ff:ff:ff:ff:ff";
        assert_eq!(
            mac_of(l),
            Some(EthernetAddress([0x3a, 0x0b, 0xcc, 1, 2, 0xff]))
        );
        assert_eq!(mac_of("no mac"), None);
    }
}
