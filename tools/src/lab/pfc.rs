//! The switch stage: 802.1Qbb pause generation where the kernel's bridge
//! has none, and CE marking on the queues' depth. A thread of `rnic lab`
//! enters the switch namespace and reads every egress tbf queue's backlog
//! each [`POLL`]. With an ECN threshold it marks the ports whose queue is
//! above it ([`super::mark::Marking`]). With PFC, per switch port, it feeds
//! a [`PfcTx`] (the NIC's XOFF/XON hysteresis and refresh) the
//! backlog that port's ingress feeds; the PFC frames it asks for leave that
//! port with AF_PACKET, toward the host behind it (a bridge does not
//! forward 01:80:C2:00:00:01, so the stage sends them itself).
//!
//! What is a proxy: a real switch accounts its buffer per ingress port and
//! priority; here the bridge keeps no such account, so a port's ingress is
//! taken to hold the deepest egress queue other than its own (the queue its
//! traffic can be in). The whole tbf queue counts as priority
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
use super::sys::ip;
use super::LabError;
use nic::cc::{PfcTx, PfcTxParams, PRIORITIES};
use nic::io::netlink::Rtnl;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use wire::{EthernetAddress, MacControl, MacControlRepr};

/// The priority the stage pauses: rnicd's RoCEv2 data (DSCP 26 → 3).
pub const ROCE_PRIORITY: u8 = 3;

/// How often the queues are read.
pub const POLL: Duration = Duration::from_micros(500);

/// One switch port, as the stage sees it.
#[derive(Debug, Clone)]
pub struct StagePort {
    /// The port's interface in the switch namespace.
    pub iface: String,
    /// Its MAC address: the source of the PFC frames it sends.
    pub mac: EthernetAddress,
}

/// PFC frames the switch sent out of each port, per priority named (empty
/// without PFC).
pub type SentCounts = Vec<[u64; PRIORITIES]>;

/// The running stage: stopped and joined on drop.
pub struct PfcStage {
    stop: Arc<AtomicBool>,
    /// Why the thread ended early, once it has.
    failed: Arc<Mutex<Option<String>>>,
    sent: Arc<Mutex<SentCounts>>,
    thread: Option<JoinHandle<Result<(), LabError>>>,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
    let what = what.into();
    move |source| LabError::Io { what, source }
}

impl PfcStage {
    /// Starts the stage in namespace `ns` on `ports` (index i: the port
    /// toward host i): with `pfc`, pausing at its XOFF and resuming at its
    /// XON, pause times in quanta of the hosts' link speed `link_bps`;
    /// with `ecn_bytes` > 0, CE-marking toward the ports whose queue holds
    /// more.
    pub fn start(
        ns: &str,
        ports: Vec<StagePort>,
        pfc: Option<PfcThresholds>,
        link_bps: u64,
        ecn_bytes: u64,
    ) -> Result<PfcStage, LabError> {
        let path = format!("/run/netns/{ns}");
        let netns = std::fs::File::open(&path).map_err(io(path))?;
        let stop = Arc::new(AtomicBool::new(false));
        let n = if pfc.is_some() { ports.len() } else { 0 };
        let sent = Arc::new(Mutex::new(vec![[0u64; PRIORITIES]; n]));
        let failed = Arc::new(Mutex::new(None));
        let (s, c, f) = (stop.clone(), sent.clone(), failed.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("lab-switch".into())
            .spawn(move || {
                let ready = Stage::open(&netns, ports, pfc, link_bps, ecn_bytes);
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
            .map_err(io("the PFC stage's thread"))?;
        let mut stage = PfcStage {
            stop,
            failed,
            sent,
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

    /// The PFC frames sent so far, per port and priority; an error once
    /// the stage has stopped on one (the run would go on without PFC).
    pub fn sent(&self) -> Result<SentCounts, LabError> {
        if let Some(why) = self.failed.lock().ok().and_then(|g| g.clone()) {
            return Err(LabError::PfcStage(why));
        }
        Ok(self.sent.lock().map(|g| g.clone()).unwrap_or_default())
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

/// The stage's state, on its own thread inside the switch namespace.
struct Stage {
    rtnl: Rtnl,
    ports: Vec<StagePort>,
    ifindex: Vec<u32>,
    /// PFC's sockets and generators, one per port (empty: no PFC).
    sockets: Vec<OwnedFd>,
    tx: Vec<PfcTx>,
    marking: Option<Marking>,
    t0: std::time::Instant,
}

impl Stage {
    fn open(
        netns: &std::fs::File,
        ports: Vec<StagePort>,
        pfc: Option<PfcThresholds>,
        link_bps: u64,
        ecn_bytes: u64,
    ) -> Result<Stage, LabError> {
        // SAFETY: setns(2) on an open namespace file; it moves only this
        // thread (not the process) into the switch's network namespace.
        if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io("entering the switch namespace")(
                std::io::Error::last_os_error(),
            ));
        }
        // a switch reacts in hardware: the stage asks for the CPU first
        // (SCHED_FIFO 1 where permitted, else a short EEVDF slice; it
        // sleeps between polls), so a busy machine does not hold a pause
        // or a mark back by other threads' time slices.
        let _ = nic::engine::apply_priority(nic::engine::Priority::Auto);
        let rtnl = Rtnl::open()?;
        let mut st = Stage {
            rtnl,
            ports: Vec::new(),
            ifindex: Vec::new(),
            sockets: Vec::new(),
            tx: Vec::new(),
            marking: None,
            t0: std::time::Instant::now(),
        };
        for p in ports {
            let idx = st.rtnl.link_index(&p.iface)?.ok_or_else(|| {
                io(format!("switch port {}", p.iface))(std::io::ErrorKind::NotFound.into())
            })?;
            if let Some(th) = pfc {
                st.sockets.push(
                    packet_socket(idx)
                        .map_err(io(format!("an AF_PACKET socket on {}", p.iface)))?,
                );
                let mut params = PfcTxParams::new(link_bps, th.xoff_bytes, th.xon_bytes);
                params.enabled = 1 << ROCE_PRIORITY;
                st.tx.push(PfcTx::new(params));
            }
            st.ifindex.push(idx);
            st.ports.push(p);
        }
        if ecn_bytes > 0 {
            st.marking = Some(Marking::open(TABLE, &st.ifindex, ecn_bytes)?);
        }
        Ok(st)
    }

    fn now(&self) -> nic::Instant {
        nic::Instant::from_nanos(self.t0.elapsed().as_nanos() as u64)
    }

    fn run(&mut self, stop: &AtomicBool, sent: &Mutex<SentCounts>) -> Result<(), LabError> {
        while !stop.load(Ordering::Acquire) {
            let queues = self.rtnl.root_qdisc_queues()?;
            let backlog: Vec<u64> = self
                .ifindex
                .iter()
                .map(|i| {
                    queues
                        .iter()
                        .find(|q| q.ifindex == *i)
                        .map_or(0, |q| q.backlog)
                })
                .collect();
            if let Some(m) = self.marking.as_mut() {
                for (j, b) in backlog.iter().enumerate() {
                    m.follow(j, *b)?;
                }
            }
            for j in 0..self.tx.len() {
                self.tx[j].on_backlog(ROCE_PRIORITY, ingress_backlog(&backlog, j));
                let now = self.now();
                while let Some(control) = self.tx[j].poll_transmit(now) {
                    self.send(j, control)?;
                    if let (Ok(mut c), MacControl::Pfc { class_enable, .. }) =
                        (sent.lock(), control)
                    {
                        for (p, n) in c[j].iter_mut().enumerate() {
                            *n += u64::from(class_enable >> p & 1);
                        }
                    }
                }
            }
            std::thread::sleep(POLL);
        }
        Ok(())
    }

    /// Sends `control` out of port `j` (only `wire` writes its bytes).
    fn send(&self, j: usize, control: MacControl) -> Result<(), LabError> {
        let MacControl::Pfc {
            class_enable,
            quanta,
        } = control
        else {
            return Ok(());
        };
        let repr = MacControlRepr::pfc(self.ports[j].mac, class_enable, quanta);
        let mut buf = [0u8; 64];
        let len = repr.emit(&mut buf).unwrap_or(0);
        // SAFETY: send(2) of `len` initialised bytes of `buf` on our own
        // AF_PACKET socket, bound to the port.
        let n = unsafe { libc::send(self.sockets[j].as_raw_fd(), buf.as_ptr().cast(), len, 0) };
        if n < 0 {
            return Err(io(format!("a PFC frame out of {}", self.ports[j].iface))(
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }
}

/// Starts the stage when `cfg` asks for PFC or CE marking: the switch's
/// ports with their MACs, pause times in quanta of the hosts' link speed
/// (what a switch port and its peer agree on; rnicd's `line_bps`).
pub fn start(
    cfg: &LabConfig,
    fabric: &Fabric,
    daemons: &[Daemon],
) -> Result<Option<PfcStage>, LabError> {
    if cfg.pfc.is_none() && cfg.ecn_bytes == 0 {
        return Ok(None);
    }
    let mut ports = Vec::new();
    for h in &fabric.hosts {
        let link = ip(&["-n", &fabric.switch, "-o", "link", "show", "dev", &h.port])?;
        let mac = mac_of(&link).ok_or_else(|| {
            io(format!("{}'s MAC in: {link}", h.port))(std::io::ErrorKind::InvalidData.into())
        })?;
        ports.push(StagePort {
            iface: h.port.clone(),
            mac,
        });
    }
    let link_bps = daemons
        .iter()
        .filter_map(|d| d.cc_states().ok().map(|c| c.line_bps))
        .max()
        .filter(|&b| b > 0)
        .unwrap_or(cfg.rate_bps);
    let stage = PfcStage::start(&fabric.switch, ports, cfg.pfc, link_bps, cfg.ecn_bytes)?;
    if let Some(th) = cfg.pfc {
        super::say(&format!(
            "PFC from the switch: priority {ROCE_PRIORITY} paused above {} KB of a queue, resumed at {} KB",
            th.xoff_bytes / 1000,
            th.xon_bytes / 1000
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

/// An AF_PACKET socket that sends on interface `ifindex` and receives
/// nothing (protocol 0).
fn packet_socket(ifindex: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: bind(2) with a sockaddr_ll of the length we pass.
    let r = unsafe {
        libc::bind(
            fd,
            std::ptr::addr_of!(sll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(owned)
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
