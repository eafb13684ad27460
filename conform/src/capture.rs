//! Reading and writing capture files.
//!
//! Classic pcap is read by a small parser of its own, record by record, so
//! that a damaged file is reported precisely ("frame 7: the file ends after
//! 300 of the record's 1082 bytes") and so that frames cut by a short snap
//! length are still handed over (pcap-file refuses records whose original
//! length exceeds the snap length). pcapng goes through pcap-file. Writing
//! uses pcap-file.

use pcap_file::pcapng::{Block, PcapNgReader};
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The link type of Ethernet frames (tcpdump.org LINKTYPE_ETHERNET).
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Records longer than this are taken for garbage, whatever the header says.
const MAX_RECORD: u32 = 1 << 20;

/// One captured frame.
#[derive(Clone, Debug)]
pub struct Record {
    /// 1-based position in the file, as Wireshark numbers frames.
    pub number: u64,
    /// Time since the Unix epoch.
    pub ts: Duration,
    /// The bytes captured (possibly fewer than `orig_len`).
    pub data: Vec<u8>,
    /// The frame's length on the wire.
    pub orig_len: u32,
    /// tcpdump.org link type of the frame.
    pub linktype: u32,
}

impl Record {
    /// True when the capture kept fewer bytes than the frame had.
    pub fn is_cut(&self) -> bool {
        (self.data.len() as u64) < self.orig_len as u64
    }
}

/// Why a capture could not be read.
#[derive(Debug)]
pub enum CaptureError {
    Open {
        path: PathBuf,
        err: io::Error,
    },
    NotACapture {
        path: PathBuf,
        what: String,
    },
    /// The file ends in the middle of frame `frame`.
    Truncated {
        frame: u64,
        what: String,
    },
    /// Frame `frame`'s record is damaged.
    Corrupt {
        frame: u64,
        what: String,
    },
    Io {
        frame: u64,
        err: io::Error,
    },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Open { path, err } => {
                write!(f, "cannot read {}: {}", path.display(), io_reason(err))
            }
            CaptureError::NotACapture { path, what } => {
                write!(f, "{} is not a pcap or pcapng file: {what}", path.display())
            }
            CaptureError::Truncated { frame, what } => {
                write!(f, "frame {frame}: truncated capture file: {what}")
            }
            CaptureError::Corrupt { frame, what } => {
                write!(f, "frame {frame}: damaged record: {what}")
            }
            CaptureError::Io { frame, err } => {
                write!(f, "frame {frame}: read error: {}", io_reason(err))
            }
        }
    }
}

impl std::error::Error for CaptureError {}

/// "No such file or directory" without Rust's "(os error 2)".
fn io_reason(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

enum Inner {
    Classic {
        r: BufReader<File>,
        big_endian: bool,
        nanos: bool,
        snaplen: u32,
        linktype: u32,
    },
    Ng(Box<PcapNgReader<BufReader<File>>>),
}

/// Reads the frames of a pcap or pcapng file one by one.
pub struct CaptureReader {
    inner: Inner,
    next_number: u64,
    done: bool,
}

impl CaptureReader {
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        let open_err = |err| CaptureError::Open {
            path: path.to_path_buf(),
            err,
        };
        let meta = std::fs::metadata(path).map_err(open_err)?;
        if meta.is_dir() {
            return Err(open_err(io::Error::other("it is a directory")));
        }
        let mut file = File::open(path).map_err(open_err)?;
        let mut head = [0u8; 24];
        let n = read_full(&mut file, &mut head).map_err(open_err)?;
        let not = |what: String| CaptureError::NotACapture {
            path: path.to_path_buf(),
            what,
        };
        if n < 4 {
            return Err(not(format!("the file holds only {n} bytes")));
        }
        let magic = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let classic = match magic {
            0xA1B2_C3D4 => Some((true, false)),
            0xA1B2_3C4D => Some((true, true)),
            0xD4C3_B2A1 => Some((false, false)),
            0x4D3C_B2A1 => Some((false, true)),
            _ => None,
        };
        if let Some((big_endian, nanos)) = classic {
            if n < 24 {
                return Err(not(format!(
                    "the pcap file header needs 24 bytes, the file has {n}"
                )));
            }
            let u32_at = |i: usize| {
                let b = [head[i], head[i + 1], head[i + 2], head[i + 3]];
                if big_endian {
                    u32::from_be_bytes(b)
                } else {
                    u32::from_le_bytes(b)
                }
            };
            let snaplen = u32_at(16);
            // The upper bits of the link type field carry FCS information.
            let linktype = u32_at(20) & 0x03FF_FFFF;
            return Ok(CaptureReader {
                inner: Inner::Classic {
                    r: BufReader::with_capacity(1 << 16, file),
                    big_endian,
                    nanos,
                    snaplen,
                    linktype,
                },
                next_number: 1,
                done: false,
            });
        }
        if magic == 0x0A0D_0D0A {
            let file = File::open(path).map_err(open_err)?;
            let r = PcapNgReader::new(BufReader::new(file))
                .map_err(|e| not(format!("bad pcapng section header: {e}")))?;
            return Ok(CaptureReader {
                inner: Inner::Ng(Box::new(r)),
                next_number: 1,
                done: false,
            });
        }
        Err(not(format!("unknown magic number {magic:#010x}")))
    }

    /// The next frame, `None` at the end of the file. After an error the
    /// reader yields nothing more.
    pub fn next_record(&mut self) -> Option<Result<Record, CaptureError>> {
        if self.done {
            return None;
        }
        let number = self.next_number;
        let r = match &mut self.inner {
            Inner::Classic {
                r,
                big_endian,
                nanos,
                snaplen,
                linktype,
            } => read_classic(r, number, *big_endian, *nanos, *snaplen, *linktype),
            Inner::Ng(r) => read_ng(r, number),
        };
        match &r {
            None | Some(Err(_)) => self.done = true,
            Some(Ok(_)) => self.next_number += 1,
        }
        r
    }
}

impl Iterator for CaptureReader {
    type Item = Result<Record, CaptureError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn read_classic(
    r: &mut BufReader<File>,
    number: u64,
    big_endian: bool,
    nanos: bool,
    snaplen: u32,
    linktype: u32,
) -> Option<Result<Record, CaptureError>> {
    let mut hdr = [0u8; 16];
    let n = match read_full(r, &mut hdr) {
        Ok(n) => n,
        Err(err) => return Some(Err(CaptureError::Io { frame: number, err })),
    };
    if n == 0 {
        return None;
    }
    if n < 16 {
        return Some(Err(CaptureError::Truncated {
            frame: number,
            what: format!("the file ends after {n} of the record header's 16 bytes"),
        }));
    }
    let u = |i: usize| {
        let b = [hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]];
        if big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let (sec, frac, incl, orig) = (u(0), u(4), u(8), u(12));
    // a damaged header may claim any snap length: do not trust it beyond 64 MiB
    let limit = MAX_RECORD.max(snaplen.min(64 << 20));
    if incl > limit {
        return Some(Err(CaptureError::Corrupt {
            frame: number,
            what: format!(
                "the record claims {incl} captured bytes (snap length {snaplen}); the file is damaged"
            ),
        }));
    }
    if incl > orig {
        return Some(Err(CaptureError::Corrupt {
            frame: number,
            what: format!("the record holds {incl} bytes of a frame it says was {orig} bytes long"),
        }));
    }
    let nsec = if nanos {
        frac
    } else {
        frac.saturating_mul(1000)
    };
    if nsec >= 1_000_000_000 {
        return Some(Err(CaptureError::Corrupt {
            frame: number,
            what: format!("the timestamp's fraction {frac} is out of range"),
        }));
    }
    let mut data = vec![0u8; incl as usize];
    let got = match read_full(r, &mut data) {
        Ok(n) => n,
        Err(err) => return Some(Err(CaptureError::Io { frame: number, err })),
    };
    if got < incl as usize {
        return Some(Err(CaptureError::Truncated {
            frame: number,
            what: format!("the file ends after {got} of the record's {incl} bytes"),
        }));
    }
    Some(Ok(Record {
        number,
        ts: Duration::new(sec as u64, nsec),
        data,
        orig_len: orig,
        linktype,
    }))
}

fn read_ng(
    r: &mut PcapNgReader<BufReader<File>>,
    number: u64,
) -> Option<Result<Record, CaptureError>> {
    loop {
        let block = match r.next_block()? {
            Ok(b) => b,
            Err(pcap_file::PcapError::IoError(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Some(Err(CaptureError::Truncated {
                    frame: number,
                    what: "the file ends inside a pcapng block".into(),
                }))
            }
            Err(e) => {
                return Some(Err(CaptureError::Corrupt {
                    frame: number,
                    what: format!("bad pcapng block: {e}"),
                }))
            }
        };
        // (interface, time, original length, bytes), owned so that the
        // reader can be asked about the interface afterwards
        let pkt = match block {
            Block::EnhancedPacket(p) => Some((
                p.interface_id,
                p.timestamp,
                p.original_len,
                p.data.into_owned(),
            )),
            Block::SimplePacket(p) => {
                Some((0, Duration::ZERO, p.original_len, p.data.into_owned()))
            }
            // obsolete Packet Block: microseconds
            Block::Packet(p) => Some((
                p.interface_id as u32,
                Duration::from_micros(p.timestamp),
                p.original_len,
                p.data.into_owned(),
            )),
            _ => None,
        };
        let Some((iface, ts, orig_len, data)) = pkt else {
            continue;
        };
        let Some(linktype) = r
            .interfaces()
            .get(iface as usize)
            .map(|i| u32::from(i.linktype))
        else {
            return Some(Err(CaptureError::Corrupt {
                frame: number,
                what: format!("packet of undeclared interface {iface}"),
            }));
        };
        return Some(Ok(Record {
            number,
            ts,
            data,
            orig_len,
            linktype,
        }));
    }
}

/// Writes Ethernet frames (time since the epoch, bytes) as a classic pcap
/// file with microsecond timestamps, which every tool reads.
pub fn write_pcap(path: &Path, frames: &[(Duration, Vec<u8>)]) -> io::Result<()> {
    use pcap_file::pcap::{PcapPacket, PcapWriter};
    let file = BufWriter::new(File::create(path)?);
    let mut w = PcapWriter::new(file).map_err(io::Error::other)?;
    for (ts, data) in frames {
        // microsecond resolution: drop the sub-microsecond part rather than
        // let the writer round a fraction up to 1_000_000
        let ts = Duration::new(ts.as_secs(), ts.subsec_micros() * 1000);
        w.write_packet(&PcapPacket::new(ts, data.len() as u32, data))
            .map_err(io::Error::other)?;
    }
    let mut inner = w.into_writer();
    io::Write::flush(&mut inner)
}
