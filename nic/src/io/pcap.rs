//! Pcap ports: a replay port that feeds a capture's frames, and a tap that
//! records every frame a port sends or receives — "what exactly did the NIC
//! put on the wire", on demand.

use super::{FrameBatch, Port, PortBase};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wire::EthernetAddress;

/// Why a capture could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a pcap file: {msg}")]
    Format { path: String, msg: String },
    #[error("{path}: link type {link:?} is not Ethernet")]
    LinkType { path: String, link: DataLink },
}

/// Reads every frame of a classic pcap file with its timestamp.
pub fn read_pcap(path: &Path) -> Result<Vec<(Duration, Vec<u8>)>, PcapError> {
    let p = path.display().to_string();
    let f = File::open(path).map_err(|source| PcapError::Io {
        path: p.clone(),
        source,
    })?;
    let mut r = PcapReader::new(f).map_err(|e| PcapError::Format {
        path: p.clone(),
        msg: e.to_string(),
    })?;
    let link = r.header().datalink;
    if link != DataLink::ETHERNET {
        return Err(PcapError::LinkType { path: p, link });
    }
    let mut out = Vec::new();
    while let Some(pkt) = r.next_packet() {
        let pkt = pkt.map_err(|e| PcapError::Format {
            path: p.clone(),
            msg: e.to_string(),
        })?;
        out.push((pkt.timestamp, pkt.data.into_owned()));
    }
    Ok(out)
}

/// Feeds a capture's frames as received frames, each once its time (relative
/// to the first frame, scaled by `speed`; 0 = as fast as possible) has come.
/// What the engine sends is kept for inspection.
pub struct ReplayPort {
    frames: Vec<(Duration, Vec<u8>)>,
    next: usize,
    start: std::time::Instant,
    speed: f64,
    base: PortBase,
    per_recv: usize,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    done: Arc<AtomicBool>,
}

impl ReplayPort {
    /// `frames`: the frames to feed (already filtered to what this NIC should receive).
    pub fn new(frames: Vec<(Duration, Vec<u8>)>, mac: EthernetAddress, speed: f64) -> ReplayPort {
        let done = Arc::new(AtomicBool::new(frames.is_empty()));
        ReplayPort {
            frames,
            next: 0,
            start: std::time::Instant::now(),
            speed,
            base: PortBase::wire(mac),
            per_recv: usize::MAX,
            sent: Arc::new(Mutex::new(Vec::new())),
            done,
        }
    }

    /// Hands over at most one frame per `recv` (each request is answered
    /// before the next arrives, as in the capture).
    pub fn one_per_turn(mut self) -> ReplayPort {
        self.per_recv = 1;
        self
    }

    /// Every frame the NIC sent, shared with whoever holds the handle.
    pub fn sent(&self) -> Arc<Mutex<Vec<Vec<u8>>>> {
        self.sent.clone()
    }

    /// Set once every frame has been handed over.
    pub fn done_flag(&self) -> Arc<AtomicBool> {
        self.done.clone()
    }

    pub fn done(&self) -> bool {
        self.next >= self.frames.len()
    }
}

impl Port for ReplayPort {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        let base = self.frames.first().map(|f| f.0).unwrap_or_default();
        let elapsed = self.start.elapsed();
        let mut n = 0;
        while self.next < self.frames.len() && !batch.is_full() && n < self.per_recv {
            let (t, f) = &self.frames[self.next];
            if self.speed > 0.0 && (*t - base).div_f64(self.speed) > elapsed {
                break;
            }
            batch.push(f);
            self.base.counters.received(f.len());
            self.next += 1;
            n += 1;
        }
        if self.done() {
            self.done.store(true, Ordering::Release);
        }
        n
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        let mut sent = self.sent.lock().expect("not poisoned");
        for f in batch.iter() {
            self.base.counters.sent(f.len());
            sent.push(f.to_vec());
        }
        batch.len()
    }

    crate::forward_port!(field base: mac, mtu, link_speed_bps, counters);
}

/// Wraps a port and writes every frame it sends or receives to a pcap file
/// (or only the first `limit` of them).
pub struct PcapTap<P: Port> {
    inner: Option<P>,
    writer: Option<PcapWriter<BufWriter<File>>>,
    pub errors: u64,
    /// Frames still to record.
    left: u64,
}

impl<P: Port> PcapTap<P> {
    pub fn new(inner: P, path: &Path) -> Result<PcapTap<P>, PcapError> {
        let p = path.display().to_string();
        let f = File::create(path).map_err(|source| PcapError::Io {
            path: p.clone(),
            source,
        })?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: 65535,
            ..Default::default()
        };
        let writer =
            PcapWriter::with_header(BufWriter::new(f), header).map_err(|e| PcapError::Format {
                path: p,
                msg: e.to_string(),
            })?;
        Ok(PcapTap {
            inner: Some(inner),
            writer: Some(writer),
            errors: 0,
            left: u64::MAX,
        })
    }

    /// Records only the first `frames` frames (sent and received); the rest
    /// pass through unrecorded (a long run's capture stays small).
    pub fn with_limit(mut self, frames: u64) -> PcapTap<P> {
        self.left = frames;
        self
    }

    fn record(&mut self, frame: &[u8]) {
        if self.left == 0 {
            return;
        }
        self.left -= 1;
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let pkt = PcapPacket::new(ts, frame.len() as u32, frame);
        match self.writer.as_mut().map(|w| w.write_packet(&pkt)) {
            Some(Ok(_)) => {}
            _ => self.errors += 1,
        }
    }

    fn finish(&mut self) {
        if let Some(w) = self.writer.take() {
            if w.into_writer().flush().is_err() {
                self.errors += 1;
            }
        }
    }

    /// Flushes the file and gives the port back.
    pub fn into_inner(mut self) -> P {
        self.finish();
        self.inner.take().expect("present until into_inner")
    }

    fn port(&self) -> &P {
        self.inner.as_ref().expect("present until into_inner")
    }

    fn port_mut(&mut self) -> &mut P {
        self.inner.as_mut().expect("present until into_inner")
    }
}

impl<P: Port> Drop for PcapTap<P> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<P: Port> Port for PcapTap<P> {
    fn recv(&mut self, batch: &mut FrameBatch) -> usize {
        let before = batch.len();
        let n = self.port_mut().recv(batch);
        for i in before..batch.len() {
            self.record(batch.get(i));
        }
        n
    }

    fn send(&mut self, batch: &FrameBatch) -> usize {
        // only what went out (a prefix, see `Port::send`) is on the wire
        let n = self.port_mut().send(batch);
        for i in 0..n {
            self.record(batch.get(i));
        }
        n
    }
    fn loop_back(&mut self, frame: &mut [u8]) -> bool {
        // recorded once, as it leaves: a capture shows the frame as the
        // wire would carry it (before the impairments inside the tap)
        self.record(frame);
        self.port_mut().loop_back(frame)
    }
    crate::forward_port!(via port, port_mut: tx_room, tx_ready_in, train_bytes, mac, mtu, link_speed_bps, counters, wait, wait_or_ring, wait_unheld, attach_bell, pending, rx_backlog, link_up);
}
