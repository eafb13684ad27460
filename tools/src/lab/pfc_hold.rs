//! A switch honouring the PFC frames it receives on a trunk port: the
//! stage ([`super::pfc`]) reads the MAC control frames arriving on the
//! port (an AF_PACKET socket of every protocol, as the bridge consumes
//! 01:80:C2:00:00:01 before a socket of EtherType 0x8808 would see it,
//! with a classic BPF filter that keeps only EtherType 0x8808), keeps the pause state of priority
//! [`ROCE_PRIORITY`] in nic's [`PfcRx`] (802.1Qbb: a pause lasts its
//! quanta × 512 bit times at the link's speed, a zero quanta resumes), and
//! while it is paused holds the port's egress queue: its tbf's rate drops
//! to [`HOLD_BPS`] (`tc qdisc change` keeps the queued frames), and goes
//! back to the link's rate on resume.
//!
//! What is a proxy: a real switch stops only the paused priority; the tbf
//! is the port's one queue, so everything in it waits (the trunk carries
//! the data of priority 3, the ACKs and the CNPs alike). A tbf changed to
//! the hold rate starts with a full bucket, so up to its burst (two
//! frames) leaves after the pause began, and the change itself (a `tc`
//! process) takes a few milliseconds: the pause takes hold that late.

use super::net::tbf_args;
use super::packet::{packet_socket_with, ROCE_PRIORITY};
use super::sys::run;
use super::LabError;
use nic::cc::PfcRx;
use std::os::fd::{AsRawFd, OwnedFd};
use wire::{EthernetAddress, MacControlRepr};

/// The rate of a held queue: a 1500-byte frame every 12 s.
pub const HOLD_BPS: u64 = 1000;

/// ETH_P_8808: MAC control.
const ETH_P_MAC_CONTROL: u16 = 0x8808;

/// One trunk port that honours pauses.
pub struct Holder {
    sock: OwnedFd,
    rx: PfcRx,
    held: bool,
    ns: String,
    iface: String,
    rate_bps: u64,
    limit: u64,
    mtu: u32,
}

/// What a holder has seen: pause frames received for [`ROCE_PRIORITY`]
/// and the time its queue was held, in µs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub frames: u64,
    pub paused_us: u64,
}

impl Holder {
    /// Listens for MAC control frames on `ifindex` (`iface` in namespace
    /// `ns`, whose tbf is of `rate_bps`, `limit` bytes, frames of `mtu`);
    /// must run in that namespace.
    pub fn open(
        ifindex: u32,
        (ns, iface): (&str, &str),
        rate_bps: u64,
        limit: u64,
        mtu: u32,
    ) -> std::io::Result<Holder> {
        Ok(Holder {
            sock: control_socket(ifindex)?,
            rx: PfcRx::with_mask(rate_bps, 1 << ROCE_PRIORITY),
            held: false,
            ns: ns.into(),
            iface: iface.into(),
            rate_bps,
            limit,
            mtu,
        })
    }

    /// Reads the frames that came, updates the pause state as of `now`
    /// and holds or releases the queue; `Some(true)` when it was just
    /// released (the caller then sends a frame out of the port: a tbf
    /// dequeues only when a frame comes or its timer fires, and the timer
    /// was set for the hold rate).
    pub fn poll(&mut self, now: nic::Instant) -> Result<Option<bool>, LabError> {
        let mut buf = [0u8; 128];
        loop {
            // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: recvfrom(2) into our buffer of its length and into a
            // sockaddr_ll of the length we pass, on our non-blocking socket.
            let n = unsafe {
                libc::recvfrom(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    std::ptr::addr_of_mut!(from).cast(),
                    &mut len,
                )
            };
            if n <= 0 {
                break;
            }
            // our own frames out of the port come back as PACKET_OUTGOING
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            if let Ok(m) = MacControlRepr::parse(&buf[..n as usize]) {
                self.rx.handle(now, &m.control);
            }
        }
        self.rx.handle_timeout(now);
        let paused = self.rx.is_paused(ROCE_PRIORITY, now);
        if paused == self.held {
            return Ok(None);
        }
        self.held = paused;
        let rate = if paused { HOLD_BPS } else { self.rate_bps };
        let mut a = vec![
            "-n",
            &self.ns,
            "qdisc",
            "change",
            "dev",
            &self.iface,
            "root",
        ];
        let tbf = tbf_args(rate, self.limit, self.mtu);
        a.extend(tbf.iter().map(String::as_str));
        run("tc", &a)?;
        Ok(Some(!paused))
    }

    /// What it has seen up to `now`.
    pub fn held(&self, now: nic::Instant) -> Held {
        Held {
            frames: self.rx.pause_frames(ROCE_PRIORITY),
            paused_us: self.rx.pause_duration(ROCE_PRIORITY, now).as_micros() as u64,
        }
    }
}

/// A PFC frame that pauses nothing (no class enabled): what wakes a
/// released queue. The receiving stage's [`PfcRx`] counts no pause for it.
pub fn nudge(src: EthernetAddress) -> MacControlRepr {
    MacControlRepr::pfc(src, 0, [0; 8])
}

/// A non-blocking AF_PACKET socket receiving the MAC control frames of
/// interface `ifindex`: it taps every protocol (a protocol's own sockets
/// are served after the bridge, which drops the frame) and filters in
/// the kernel.
fn control_socket(ifindex: u32) -> std::io::Result<OwnedFd> {
    packet_socket_with(
        ifindex,
        libc::ETH_P_ALL as u16,
        libc::SOCK_NONBLOCK,
        keep_mac_control,
    )
}

/// Attaches to `fd` the classic BPF program that keeps EtherType 0x8808.
fn keep_mac_control(fd: &OwnedFd) -> std::io::Result<()> {
    // ldh [12]; jeq #0x8808, keep, drop; keep: ret #128; drop: ret #0
    let mut code = [
        libc::sock_filter {
            code: 0x28,
            jt: 0,
            jf: 0,
            k: 12,
        },
        libc::sock_filter {
            code: 0x15,
            jt: 0,
            jf: 1,
            k: u32::from(ETH_P_MAC_CONTROL),
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 128,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let prog = libc::sock_fprog {
        len: code.len() as u16,
        filter: code.as_mut_ptr(),
    };
    // SAFETY: setsockopt(2) with a sock_fprog pointing at `code`, which
    // outlives the call (the kernel copies the program).
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            std::ptr::addr_of!(prog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
