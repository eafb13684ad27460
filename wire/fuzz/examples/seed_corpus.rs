//! Writes the seed corpus of the `parse_frame` fuzz target:
//!
//! ```text
//! cd wire/fuzz && cargo run --example seed_corpus [-- OUT_DIR [PCAP_DIR_OR_FILE...]]
//! ```
//!
//! OUT_DIR defaults to `corpus/parse_frame`. The frames come from every
//! classic pcap under the given paths (default: the third-party Linux rxe
//! captures in `../shared/pcaps/rxe-public` beside the repository, or
//! `$SOFTRNIC_RXE_PCAPS`, and the repository's own `pcaps/`), plus frames the
//! codec emits itself: every opcode over IPv4 and IPv6, with and without a
//! VLAN tag, and PAUSE/PFC frames. Files are named by a hash of their
//! contents, so running it twice adds nothing.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use wire::opcode::Header;
use wire::{
    Aeth, AtomicEth, BthRepr, Deth, EthernetAddress, EthernetRepr, ExtHeaders, Feth, IpRepr,
    Ipv4Repr, Ipv6Repr, MacControl, MacControlRepr, Opcode, PayloadRule, Psn, Reth, RoceRepr,
    Syndrome, UdpChecksum, UdpRepr, VlanTag,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("corpus/parse_frame"));
    let inputs: Vec<PathBuf> = if args.len() > 1 {
        args[1..].iter().map(PathBuf::from).collect()
    } else {
        let rxe = std::env::var_os("SOFTRNIC_RXE_PCAPS")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest.join("../../../shared/pcaps/rxe-public"));
        vec![rxe, manifest.join("../../pcaps")]
    };
    std::fs::create_dir_all(&out).unwrap();

    let mut from_pcaps = 0;
    for input in &inputs {
        if !input.exists() {
            eprintln!("{}: missing, skipped", input.display());
            continue;
        }
        for file in pcap_files(input) {
            match read_pcap(&file) {
                Some(frames) => {
                    for f in &frames {
                        write(&out, f);
                    }
                    from_pcaps += frames.len();
                }
                None => eprintln!("{}: not a classic pcap, skipped", file.display()),
            }
        }
    }
    let emitted = codec_frames();
    for f in &emitted {
        write(&out, f);
    }
    let files = std::fs::read_dir(&out).unwrap().count();
    println!(
        "{from_pcaps} frames from pcaps + {} emitted by the codec -> {} ({files} distinct files)",
        emitted.len(),
        out.display()
    );
}

fn write(dir: &Path, frame: &[u8]) {
    // FNV-1a: a stable name, so identical frames are stored once
    let h = frame.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    std::fs::write(dir.join(format!("{h:016x}")), frame).unwrap();
}

fn pcap_files(p: &Path) -> Vec<PathBuf> {
    if p.is_file() {
        return vec![p.to_path_buf()];
    }
    let mut out = Vec::new();
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "pcap") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The frames of a classic (libpcap) file, either byte order, µs or ns.
fn read_pcap(path: &Path) -> Option<Vec<Vec<u8>>> {
    let b = std::fs::read(path).ok()?;
    let magic = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        _ => return None,
    };
    let u32_at = |at: usize| -> Option<u32> {
        let w: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        })
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let incl = u32_at(at + 8)? as usize;
        let data = b.get(at + 16..at + 16 + incl)?;
        frames.push(data.to_vec());
        at += 16 + incl;
    }
    Some(frames)
}

/// A small deterministic generator (xorshift64*), to vary the fields.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn u32(&mut self) -> u32 {
        self.next() as u32
    }
}

fn codec_frames() -> Vec<Vec<u8>> {
    let mut rng = Rng(0x5EED_F00D);
    let payload: Vec<u8> = (0..300).map(|_| rng.next() as u8).collect();
    let mut out = Vec::new();
    for info in Opcode::all() {
        for k in 0..4 {
            let len = match info.payload {
                PayloadRule::None => 0,
                PayloadRule::Exactly(n) => n as usize,
                PayloadRule::Any => [0, 1, 6, 300][k],
            };
            let v6 = k % 2 == 1;
            let ip = if v6 {
                IpRepr::V6(Ipv6Repr {
                    src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
                    dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
                    dscp: 26,
                    ecn: 2,
                    flow_label: rng.u32() & 0xF_FFFF,
                    hop_limit: 64,
                })
            } else {
                IpRepr::V4(Ipv4Repr {
                    src: Ipv4Addr::new(10, 0, 0, 1),
                    dst: Ipv4Addr::new(10, 0, 0, 2),
                    dscp: 26,
                    ecn: 2,
                    ident: rng.u32() as u16,
                    dont_frag: true,
                    ttl: 64,
                })
            };
            let has = |h| info.headers.contains(h);
            let ext = ExtHeaders {
                deth: has(Header::Deth).then(|| Deth {
                    qkey: 0x1111_1111,
                    src_qp: rng.u32() & 0xFF_FFFF,
                }),
                feth: has(Header::Feth).then_some(Feth {
                    selectivity: 1,
                    placement_type: 1,
                }),
                reth: has(Header::Reth).then(|| Reth {
                    va: rng.next(),
                    rkey: rng.u32(),
                    dma_len: len as u32,
                }),
                atomic: has(Header::AtomicEth).then(|| AtomicEth {
                    va: rng.next(),
                    rkey: rng.u32(),
                    swap_add: 1,
                    compare: 0,
                }),
                aeth: has(Header::Aeth).then_some(Aeth {
                    syndrome: Syndrome::Ack { credits: 31 },
                    msn: 7,
                }),
                atomic_ack: has(Header::AtomicAckEth).then_some(42),
                imm: has(Header::ImmDt).then_some(0xDEAD_BEEF),
                ieth: has(Header::Ieth).then_some(0x1234_5678),
            };
            let mut r = RoceRepr {
                eth: EthernetRepr {
                    dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                    src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                    vlan: (k >= 2).then_some(VlanTag {
                        pcp: 3,
                        dei: false,
                        vid: 100,
                    }),
                    ethertype: 0,
                },
                ip,
                udp: UdpRepr {
                    src_port: 0xC000 | rng.u32() as u16,
                    dst_port: wire::ROCEV2_PORT,
                },
                udp_checksum: if v6 {
                    UdpChecksum::Computed
                } else {
                    UdpChecksum::Zero
                },
                bth: BthRepr::new(Opcode(info.opcode), rng.u32(), Psn::new(rng.u32())),
                ext,
                payload: &payload[..len],
                trailer_len: 0,
            };
            r.trailer_len = 60usize.saturating_sub(r.buffer_len());
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b).unwrap();
            out.push(b);
        }
    }
    let src = EthernetAddress([2, 0, 0, 0, 0, 1]);
    for control in [
        MacControl::Pause { quanta: 0xFFFF },
        MacControl::Pfc {
            class_enable: 0x08,
            quanta: [0, 0, 0, 0xFFFF, 0, 0, 0, 0],
        },
    ] {
        let m = MacControlRepr {
            src,
            dst: EthernetAddress::MAC_CONTROL,
            control,
        };
        let mut b = vec![0u8; m.buffer_len()];
        m.emit(&mut b).unwrap();
        out.push(b);
    }
    out
}
