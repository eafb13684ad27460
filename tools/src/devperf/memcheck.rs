//! The data check of a run against the real perftest, which never checks
//! data itself (it fills its buffer with `rand()`): `rnic perf --dev
//! --dump-mem PREFIX` writes our region before and after the test, an
//! LD_PRELOAD library beside perftest (`tools/rxe-peer/perftest/memdump.c`)
//! writes perftest's registered regions before its QP reaches RTR and when
//! it deregisters them, and `rnic memcheck OURS THEIRS` decides whether
//! what each receiver holds at the end came from the sender:
//!
//! - WRITE and SEND bandwidth: client → server; READ (both modes): server
//!   → client; WRITE and SEND latency: both ways. Both sides lay out their
//!   region alike: a local half (what WRITEs and SENDs go out from, where
//!   READ responses land; ours at 0, perftest's the lower half) and the
//!   half whose address goes into the handshake (what the peer WRITEs to
//!   and READs from, where receives are posted; ours at `h`, perftest's the
//!   upper half). Every message goes from offset o of one to offset o of
//!   the other (perftest advances source and target together; with its
//!   cycling, used for messages below half its 4 KiB cycle buffer, too).
//!   Every byte of the last message size must hold a byte the sender had
//!   at that offset (before or after the test: a SEND ping-pong's buffer
//!   takes the peer's data); every further byte of the receiving span must
//!   be unchanged or such a byte, so nothing lands where no message went.
//!   ib_write_lat's iteration number (the last byte) is perftest's own
//!   check and left out.
//! - atomics (FETCH_AND_ADD of 1, perftest's default): summed over the
//!   server's buffer as 64-bit words, the final values exceed the initial
//!   ones by exactly the number of operations the client completed —
//!   every operation executed once, none lost or repeated (perftest cycles
//!   the target address for bandwidth; the sum does not mind where).
//!
//! With several QPs, each perftest QP has its span of the region (perftest
//! gives QP q the address it sent in its handshake); ours share one.

use crate::netdev::NetDev;
use crate::perf::{Settings, Verb};
use crate::report::write_file;
use crate::CliError;
use nic::verbs::Memory;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn with_ext(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

fn read(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|e| CliError::new(format!("{}: {e}", path.display())))
}

fn region(nd: &NetDev, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    nd.mem.read(0, &mut b);
    b
}

/// Our region before the test (after the pattern is in place).
pub fn dump_init(prefix: &Path, nd: &NetDev, s: &Settings) -> Result<(), CliError> {
    Ok(write_file(
        &with_ext(prefix, "init"),
        region(nd, s.mem_len()),
    )?)
}

/// Our region after the test, and what the check needs to know of it.
pub fn dump_final(
    prefix: &Path,
    nd: &NetDev,
    s: &Settings,
    client: bool,
    peer_vaddrs: &[u64],
    ops: u64,
) -> Result<(), CliError> {
    write_file(&with_ext(prefix, "final"), region(nd, s.mem_len()))?;
    let doc = json!({
        "verb": s.verb.name(),
        "mode": s.mode.name(),
        "role": if client { "client" } else { "server" },
        "size": s.sizes.last().copied().unwrap_or(0),
        "qps": s.qps,
        "iters": s.iters,
        "half": s.mem_len() / 2,
        "peer_vaddrs": peer_vaddrs,
        "ops": ops,
        "atomic_add": 1,
    });
    Ok(write_file(&with_ext(prefix, "json"), doc.to_string())?)
}

/// What `rnic perf --dump-mem` recorded.
struct Ours {
    verb: Verb,
    bw: bool,
    client: bool,
    size: usize,
    half: usize,
    peer_vaddrs: Vec<u64>,
    /// Operations we completed (a client's count includes its warm-up).
    ops: u64,
    /// -n × -q: what a perftest client completes (it does not warm up).
    their_ops: u64,
    add: u64,
    init: Vec<u8>,
    fin: Vec<u8>,
}

fn load_ours(prefix: &Path) -> Result<Ours, CliError> {
    let jp = with_ext(prefix, "json");
    let bad = |what: &str| CliError::new(format!("{}: {what}", jp.display()));
    let v: Value = serde_json::from_slice(&read(&jp)?).map_err(|e| bad(&e.to_string()))?;
    let verb = v["verb"]
        .as_str()
        .and_then(|n| <Verb as clap::ValueEnum>::from_str(n, false).ok())
        .ok_or_else(|| bad("no verb"))?;
    let num = |k: &str| v[k].as_u64().ok_or_else(|| bad(&format!("no {k}")));
    let ours = Ours {
        verb,
        bw: v["mode"] == "bw",
        client: v["role"] == "client",
        size: num("size")? as usize,
        half: num("half")? as usize,
        peer_vaddrs: v["peer_vaddrs"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default(),
        ops: num("ops")?,
        their_ops: num("iters")?.saturating_mul(num("qps")?),
        add: num("atomic_add")?,
        init: read(&with_ext(prefix, "init"))?,
        fin: read(&with_ext(prefix, "final"))?,
    };
    if ours.peer_vaddrs.is_empty() {
        return Err(bad("no peer addresses"));
    }
    if ours.init.len() != 2 * ours.half || ours.fin.len() != ours.init.len() {
        return Err(bad(
            "the .init/.final dumps do not match the recorded region",
        ));
    }
    Ok(ours)
}

/// perftest's region (the one holding the addresses it sent us).
struct Theirs {
    addr: u64,
    init: Vec<u8>,
    fin: Vec<u8>,
}

fn load_theirs(prefix: &Path, vaddr: u64) -> Result<Theirs, CliError> {
    let rp = with_ext(prefix, "regions");
    let text = String::from_utf8_lossy(&read(&rp)?).into_owned();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(k), Some(a), Some(l)) = (f.first(), f.get(1), f.get(2)) else {
            continue;
        };
        let (Ok(addr), Ok(len)) = (u64::from_str_radix(a, 16), l.parse::<u64>()) else {
            continue;
        };
        if vaddr < addr || vaddr >= addr.saturating_add(len) {
            continue;
        }
        let init = read(&with_ext(prefix, &format!("init.{k}")))?;
        let fin = read(&with_ext(prefix, &format!("final.{k}")))?;
        if init.len() as u64 != len || fin.len() as u64 != len {
            return Err(CliError::new(format!(
                "{}: region {k} is {len} bytes, its dumps {} and {}",
                rp.display(),
                init.len(),
                fin.len()
            )));
        }
        return Ok(Theirs { addr, init, fin });
    }
    Err(CliError::new(format!(
        "{}: no registered region holds the address {vaddr:#x} perftest sent",
        rp.display()
    )))
}

/// A buffer span before and after the test.
#[derive(Clone, Copy)]
struct Span<'a> {
    init: &'a [u8],
    fin: &'a [u8],
}

impl<'a> Span<'a> {
    fn of(init: &'a [u8], fin: &'a [u8], at: usize, len: usize) -> Option<Self> {
        Some(Span {
            init: init.get(at..at.checked_add(len)?)?,
            fin: fin.get(at..at + len)?,
        })
    }
}

/// Bytes a receiver holds that no sender had at their offset.
#[derive(Debug, thiserror::Error)]
#[error(
    "{what}: {bad} of {len} bytes hold what the sender never had at their offset; \
     the first at offset {at} (message size {size}): {got:#04x}, the sender had {senders} \
     (the receiver had {before:#04x} before the test)"
)]
pub struct FlowError {
    /// The direction ("perftest → rnic", ...).
    pub what: String,
    pub bad: usize,
    pub len: usize,
    /// The first wrong byte: its offset, value, and value before the test.
    pub at: usize,
    pub size: usize,
    pub got: u8,
    pub before: u8,
    /// What each sender had there, before/after the test.
    pub senders: String,
}

/// One direction of data: every byte of `rx` (the first `size` strictly,
/// the rest unless unchanged) holds a byte some sender span had at the
/// same offset (`skip`: a byte left out). Returns the number of bytes
/// checked.
fn flow(
    what: &str,
    rx: Span,
    senders: &[Span],
    size: usize,
    skip: Option<usize>,
) -> Result<usize, FlowError> {
    let len = rx.fin.len();
    let from_sender = |i: usize| {
        senders
            .iter()
            .any(|s| s.init[i] == rx.fin[i] || s.fin[i] == rx.fin[i])
    };
    let mut bad = 0usize;
    let mut first = None;
    for i in 0..len {
        let ok = Some(i) == skip || from_sender(i) || (i >= size && rx.fin[i] == rx.init[i]);
        if !ok {
            bad += 1;
            first.get_or_insert(i);
        }
    }
    match first {
        None => Ok(len),
        Some(i) => Err(FlowError {
            what: what.to_string(),
            bad,
            len,
            at: i,
            size,
            got: rx.fin[i],
            before: rx.init[i],
            senders: senders
                .iter()
                .map(|s| format!("{:#04x}/{:#04x}", s.init[i], s.fin[i]))
                .collect::<Vec<_>>()
                .join(" or "),
        }),
    }
}

/// The FETCH_AND_ADD total over a buffer: final − initial, as 64-bit words.
fn added(span: Span) -> u64 {
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    span.init
        .chunks_exact(8)
        .zip(span.fin.chunks_exact(8))
        .fold(0u64, |t, (a, b)| {
            t.wrapping_add(word(b).wrapping_sub(word(a)))
        })
}

/// `rnic memcheck OURS THEIRS`: prints what was checked; an error names the
/// first byte (or the count) that is wrong.
pub fn check(ours: &Path, theirs: &Path) -> Result<String, CliError> {
    let o = load_ours(ours)?;
    let t = load_theirs(theirs, o.peer_vaddrs[0])?;
    let h = o.half;
    // perftest's layout (as ours): its region is two halves, the local one
    // (what it sends from, where its READs land) and the one whose
    // addresses it sends in its handshakes (what the peer WRITEs to and
    // READs from, where its receives are posted); QP q has its span in each
    let half_t = t.init.len() / 2;
    let mut adv = Vec::new();
    for &v in &o.peer_vaddrs {
        let off = v
            .checked_sub(t.addr)
            .map(|x| x as usize)
            .filter(|&x| x >= half_t && x < t.init.len());
        adv.push(off.ok_or_else(|| {
            CliError::new(format!(
                "perftest's address {v:#x} is not in the upper half of its region at {:#x} ({} bytes)",
                t.addr,
                t.init.len()
            ))
        })?);
    }
    let mut sorted = adv.clone();
    sorted.sort_unstable();
    let span_len = |off: usize| {
        let next = sorted
            .iter()
            .copied()
            .find(|&x| x > off)
            .unwrap_or(t.init.len());
        (next - off).min(h)
    };
    let len = adv.iter().map(|&x| span_len(x)).min().unwrap_or(0);
    let size = o.size.min(len);
    let spans = |offs: &mut dyn Iterator<Item = usize>| -> Vec<Span> {
        offs.filter_map(|x| Span::of(&t.init, &t.fin, x, len))
            .collect()
    };
    let their_adv = spans(&mut adv.iter().copied());
    let their_local = spans(&mut adv.iter().map(|&x| x - half_t));
    let small = || CliError::new("our dumped region is smaller than it says");
    // ours: the send half at 0, the advertised half at h (also where our READs land)
    let our_adv = Span::of(&o.init, &o.fin, h, len).ok_or_else(small)?;
    let our_local = Span::of(&o.init, &o.fin, 0, len).ok_or_else(small)?;
    let read = o.verb == Verb::Read;
    // (what a receiver holds, what a sender sends from)
    let (our_rx, our_tx) = (our_adv, if read { our_adv } else { our_local });
    let (their_rx, their_tx) = if read {
        (&their_local, &their_adv)
    } else {
        (&their_adv, &their_local)
    };
    // ib_write_lat's iteration number: each side writes it into its own
    // send buffer's last byte and polls for it (so perftest checks it)
    let skip = (o.verb == Verb::Write && !o.bw).then(|| size.saturating_sub(1));
    let mut said = Vec::new();
    let mut fail = Vec::new();
    let mut note = |r: Result<usize, FlowError>, what: &str| match r {
        Ok(n) => said.push(format!(
            "{what}: the last {size}-byte message and the rest of its {n}-byte span checked"
        )),
        Err(e) => fail.push(e.to_string()),
    };
    let (to_server, to_client) = match (o.verb, o.bw) {
        (Verb::Write | Verb::Send, true) => (true, false),
        (Verb::Write | Verb::Send, false) => (true, true),
        (Verb::Read, _) => (false, true),
        (Verb::Atomic, _) => (false, false),
    };
    // we receive when we are the server of a flow to the server, or the client of one to the client
    let we_receive = (to_server && !o.client) || (to_client && o.client);
    let they_receive = (to_server && o.client) || (to_client && !o.client);
    if we_receive {
        let what = "perftest → rnic";
        note(flow(what, our_rx, their_tx, size, skip), what);
    }
    if they_receive {
        for (q, s) in their_rx.iter().enumerate() {
            let what = format!("rnic → perftest (QP {q})");
            note(flow(&what, *s, &[our_tx], size, skip), &what);
        }
    }
    if o.verb == Verb::Atomic {
        // the server's buffer: all of perftest's region, or our receive half
        let (total, ops, who) = if o.client {
            let all = Span {
                init: &t.init,
                fin: &t.fin,
            };
            (added(all), o.ops, "perftest's buffer (we were the client)")
        } else {
            let half = Span::of(&o.init, &o.fin, h, h)
                .ok_or_else(|| CliError::new("our dumped region is smaller than it says"))?;
            (
                added(half),
                o.their_ops,
                "our buffer (perftest was the client)",
            )
        };
        let expect = ops.wrapping_mul(o.add);
        if total == expect {
            said.push(format!(
                "{who}: +{total} in all: {ops} FETCH_AND_ADDs of {} executed exactly once",
                o.add
            ));
        } else {
            fail.push(format!(
                "{who}: its 64-bit words grew by {total} in all; {ops} FETCH_AND_ADDs of {} make {expect}",
                o.add
            ));
        }
    }
    if fail.is_empty() {
        Ok(said.join("\n"))
    } else {
        Err(CliError::new(fail.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x7f00_0000_1000;

    /// Writes both sides' dumps as the tools do; returns (ours, theirs).
    fn dumps(
        dir: &Path,
        meta: Value,
        ours: (&[u8], &[u8]),
        theirs: (&[u8], &[u8]),
    ) -> (PathBuf, PathBuf) {
        let o = dir.join("case.rnic");
        let t = dir.join("case.rxe");
        std::fs::write(with_ext(&o, "init"), ours.0).unwrap();
        std::fs::write(with_ext(&o, "final"), ours.1).unwrap();
        std::fs::write(with_ext(&o, "json"), meta.to_string()).unwrap();
        let regions = format!("0 {BASE:x} {}\n", theirs.0.len());
        std::fs::write(with_ext(&t, "regions"), regions).unwrap();
        std::fs::write(with_ext(&t, "init.0"), theirs.0).unwrap();
        std::fs::write(with_ext(&t, "final.0"), theirs.1).unwrap();
        (o, t)
    }

    /// Both regions are 2h long; perftest's advertised half starts at h.
    fn meta(verb: &str, mode: &str, role: &str, size: usize, h: usize, ops: u64) -> Value {
        json!({"verb": verb, "mode": mode, "role": role, "size": size, "qps": 1, "iters": ops,
               "half": h, "peer_vaddrs": [BASE + h as u64], "ops": ops, "atomic_add": 1})
    }

    fn noise(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed) ^ (i >> 8) as u8)
            .collect()
    }

    #[test]
    fn a_write_from_us_must_land_byte_for_byte_and_nowhere_else() {
        let dir = tempfile::tempdir().unwrap();
        let h = 8192;
        let size = 5000;
        let ours = noise(2 * h, 1);
        let their_init = noise(2 * h, 99);
        let mut their_fin = their_init.clone();
        their_fin[h..h + size].copy_from_slice(&ours[..size]);
        let m = meta("write", "bw", "client", size, h, 10);
        let (o, t) = dumps(
            dir.path(),
            m.clone(),
            (&ours, &ours),
            (&their_init, &their_fin),
        );
        let said = check(&o, &t).expect("the data arrived");
        assert!(said.contains("rnic → perftest (QP 0): the last 5000-byte message and the rest of its 8192-byte span checked"), "{said}");

        // one byte of the message wrong
        let mut bad = their_fin.clone();
        bad[h + 1234] ^= 0x40;
        let (o, t) = dumps(dir.path(), m.clone(), (&ours, &ours), (&their_init, &bad));
        let e = check(&o, &t).unwrap_err().to_string();
        assert!(
            e.contains("1 of 8192 bytes") && e.contains("offset 1234"),
            "{e}"
        );

        // a message that never arrived: the receiver kept its own bytes
        let (o, t) = dumps(
            dir.path(),
            m.clone(),
            (&ours, &ours),
            (&their_init, &their_init),
        );
        assert!(check(&o, &t).is_err());

        // a stray byte past the message that no sender had
        let mut stray = their_fin.clone();
        stray[h + 6000] = !ours[6000];
        if stray[h + 6000] == their_init[h + 6000] {
            stray[h + 6000] ^= 0x81;
        }
        let (o, t) = dumps(dir.path(), m.clone(), (&ours, &ours), (&their_init, &stray));
        let e = check(&o, &t).unwrap_err().to_string();
        assert!(e.contains("offset 6000"), "{e}");

        // landed in perftest's local half instead of the address it gave
        let mut wrong_half = their_init.clone();
        wrong_half[..size].copy_from_slice(&ours[..size]);
        let (o, t) = dumps(dir.path(), m, (&ours, &ours), (&their_init, &wrong_half));
        assert!(check(&o, &t).is_err());
    }

    #[test]
    fn reads_and_latency_ping_pongs_are_checked_in_their_directions() {
        let dir = tempfile::tempdir().unwrap();
        let h = 4096;
        // we read perftest's advertised half into our receive half
        let their = noise(2 * h, 5);
        let our_init = noise(2 * h, 6);
        let mut our_fin = our_init.clone();
        our_fin[h..2 * h].copy_from_slice(&their[h..2 * h]);
        let m = meta("read", "bw", "client", 4096, h, 10);
        let (o, t) = dumps(
            dir.path(),
            m.clone(),
            (&our_init, &our_fin),
            (&their, &their),
        );
        let said = check(&o, &t).unwrap();
        assert!(said.contains("perftest → rnic"), "{said}");
        our_fin[h + 17] ^= 1;
        let (o, t) = dumps(dir.path(), m, (&our_init, &our_fin), (&their, &their));
        assert!(check(&o, &t).unwrap_err().to_string().contains("offset 17"));

        // perftest reads our advertised half into its local half
        let ours = noise(2 * h, 8);
        let mut their_fin = their.clone();
        their_fin[..64].copy_from_slice(&ours[h..h + 64]);
        let m = meta("read", "lat", "server", 64, h, 0);
        let (o, t) = dumps(dir.path(), m, (&ours, &ours), (&their, &their_fin));
        assert!(check(&o, &t).unwrap().contains("rnic → perftest"));

        // WRITE latency: both directions; the iteration byte is left out
        let size = 64;
        let our_init = noise(2 * h, 7);
        let their_init = vec![0u8; 2 * h];
        let mut their_fin = their_init.clone();
        their_fin[h..h + size].copy_from_slice(&our_init[..size]);
        their_fin[h + size - 1] = 44; // iteration 300
        their_fin[size - 1] = 44;
        let mut our_fin = our_init.clone();
        our_fin[h..h + size].copy_from_slice(&their_fin[..size]);
        let m = meta("write", "lat", "server", size, h, 300);
        let (o, t) = dumps(
            dir.path(),
            m.clone(),
            (&our_init, &our_fin),
            (&their_init, &their_fin),
        );
        let said = check(&o, &t).unwrap();
        assert!(
            said.contains("perftest → rnic") && said.contains("rnic → perftest"),
            "{said}"
        );
        their_fin[h + 3] ^= 0x10;
        let (o, t) = dumps(
            dir.path(),
            m,
            (&our_init, &our_fin),
            (&their_init, &their_fin),
        );
        assert!(check(&o, &t)
            .unwrap_err()
            .to_string()
            .contains("rnic → perftest"));
    }

    #[test]
    fn every_fetch_and_add_counts_once() {
        let dir = tempfile::tempdir().unwrap();
        let h = 4096;
        let ours = noise(2 * h, 3);
        let their_init = noise(2 * h, 4);
        let add = |buf: &mut [u8], at: usize, n: u64| {
            let v = u64::from_le_bytes(buf[at..at + 8].try_into().unwrap()).wrapping_add(n);
            buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
        };
        // 1000 operations of ours spread over two words of perftest's buffer
        let mut their_fin = their_init.clone();
        add(&mut their_fin, h, 600);
        add(&mut their_fin, h + 64, 400);
        let m = meta("atomic", "bw", "client", 8, h, 1000);
        let (o, t) = dumps(
            dir.path(),
            m.clone(),
            (&ours, &ours),
            (&their_init, &their_fin),
        );
        assert!(check(&o, &t).unwrap().contains("1000 FETCH_AND_ADDs"));
        add(&mut their_fin, h + 64, 1); // one executed twice
        let (o, t) = dumps(dir.path(), m, (&ours, &ours), (&their_init, &their_fin));
        assert!(check(&o, &t)
            .unwrap_err()
            .to_string()
            .contains("grew by 1001"));

        // perftest's 500 on our advertised half
        let mut our_fin = ours.clone();
        add(&mut our_fin, h + 8, 500);
        let m = meta("atomic", "lat", "server", 8, h, 500);
        let (o, t) = dumps(
            dir.path(),
            m.clone(),
            (&ours, &our_fin),
            (&their_init, &their_init),
        );
        assert!(check(&o, &t).is_ok());
        add(&mut our_fin, h + 8, u64::MAX); // one lost
        let (o, t) = dumps(dir.path(), m, (&ours, &our_fin), (&their_init, &their_init));
        assert!(check(&o, &t).is_err());
    }

    #[test]
    fn missing_or_inconsistent_dumps_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let o = dir.path().join("none.rnic");
        let e = check(&o, &dir.path().join("none.rxe"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("none.rnic.json"), "{e}");
        let h = 4096;
        let ours = noise(2 * h, 1);
        let their = noise(2 * h, 2);
        let mut m = meta("write", "bw", "client", 64, h, 1);
        m["peer_vaddrs"] = json!([BASE + 10 * h as u64]);
        let (o, t) = dumps(dir.path(), m.clone(), (&ours, &ours), (&their, &their));
        let e = check(&o, &t).unwrap_err().to_string();
        assert!(e.contains("no registered region holds"), "{e}");
        m["peer_vaddrs"] = json!([BASE + 8]);
        let (o, t) = dumps(dir.path(), m, (&ours, &ours), (&their, &their));
        let e = check(&o, &t).unwrap_err().to_string();
        assert!(e.contains("not in the upper half"), "{e}");
        let m = meta("write", "bw", "client", 64, h, 1);
        let (o, t) = dumps(dir.path(), m, (&ours[..100], &ours), (&their, &their));
        assert!(check(&o, &t)
            .unwrap_err()
            .to_string()
            .contains("do not match"));
    }
}
