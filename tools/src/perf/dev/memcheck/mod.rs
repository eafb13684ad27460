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
mod tests;
