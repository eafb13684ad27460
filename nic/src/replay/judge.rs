//! The verdict: which answers were due before the capture ended
//! (`answers_due`), pairing our responses with the capture's by PSN
//! (`align`), field-by-field comparison (`compare`), what the capture
//! acknowledged (`acknowledged`), the memory check (`check_writes`), and
//! pre-filling READ and atomic targets from the capture (`prefill`), and
//! the judgement of our responses against the capture's
//! (`judge_responses`).

use super::*;

/// When, in nanoseconds, the responder owes the capture the answer to the
/// connection's last request (at `last_request`): the slowest answer the
/// capture shows on the connection, or `MIN_ANSWER_WINDOW` if longer,
/// after that request. A responder answers the requests of a connection
/// in the order they arrive (IBA 9.7.5: responses go back in PSN order),
/// so every response after the last one the capture holds is due by then
/// at the latest; a capture in which the responder's address sends no
/// frame later than that stops before it could show them.
pub(super) fn answers_due(
    requests: &[&Seen<'_>],
    responses: &[&Seen<'_>],
    last_request: Instant,
    mtu: u32,
) -> u64 {
    let window = slowest_answer(requests, responses, mtu).max(MIN_ANSWER_WINDOW);
    last_request.as_nanos().saturating_add(window)
}

/// The longest time, in nanoseconds, between a request and a capture
/// response answering it (0 if none pairs up). A response answers the
/// latest request before it with its PSN, or for a READ response, the
/// latest READ request whose PSN range holds its PSN.
pub(super) fn slowest_answer(requests: &[&Seen<'_>], responses: &[&Seen<'_>], mtu: u32) -> u64 {
    let mut by_psn: HashMap<Psn, Instant> = HashMap::new();
    let mut reads: VecDeque<(Psn, u32, Instant)> = VecDeque::new();
    let mut pending = requests.iter().peekable();
    let mut slowest = 0u64;
    for r in responses {
        while let Some(q) = pending.next_if(|q| q.frame < r.frame) {
            by_psn.insert(q.repr.bth.psn, q.at);
            if let (Some(Operation::ReadRequest), Some(reth)) =
                (operation(&q.repr), q.repr.ext.reth)
            {
                reads.push_back((q.repr.bth.psn, read_packets(reth.dma_len, mtu), q.at));
                if reads.len() > READS_REMEMBERED {
                    reads.pop_front();
                }
            }
        }
        let psn = r.repr.bth.psn;
        let asked = match operation(&r.repr) {
            Some(Operation::ReadResponse) => reads
                .iter()
                .rev()
                .find(|(first, n, _)| psn.in_window(*first, *n))
                .map(|&(_, _, at)| at),
            _ => by_psn.get(&psn).copied(),
        };
        if let Some(at) = asked {
            slowest = slowest.max(r.at.as_nanos().saturating_sub(at.as_nanos()));
        }
    }
    slowest
}

/// One step of pairing our responses with the capture's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Ours `i` and the capture's `j` are compared.
    Pair(usize, usize),
    /// Ours `i` has no counterpart, and a pair follows it.
    Ours(usize),
    /// Ours `i` has no counterpart and comes after every capture response.
    OursAfterLast(usize),
    /// The capture's `j` has no counterpart.
    Theirs(usize),
}

/// Pairs two response sequences by PSN, keeping each in order. Equal PSNs
/// pair. Otherwise the side whose PSN shows up next on the other side
/// (within `RESYNC_WINDOW`) has responses the other lacks; if neither
/// does, the two are paired anyway and compared (a response with a wrong
/// PSN). What is left of ours once the capture's run out comes after the
/// capture's last response.
pub(super) fn align(ours: &[Psn], theirs: &[Psn]) -> Vec<Step> {
    let mut steps = Vec::with_capacity(ours.len().max(theirs.len()));
    let (mut i, mut j) = (0, 0);
    while i < ours.len() && j < theirs.len() {
        if ours[i] == theirs[j] {
            steps.push(Step::Pair(i, j));
            i += 1;
            j += 1;
            continue;
        }
        let ahead = |seq: &[Psn], from: usize, psn: Psn| {
            (1..RESYNC_WINDOW).find(|&d| seq.get(from + d) == Some(&psn))
        };
        match (ahead(theirs, j, ours[i]), ahead(ours, i, theirs[j])) {
            (Some(d), e) if e.is_none_or(|e| d <= e) => {
                steps.extend((j..j + d).map(Step::Theirs));
                j += d;
            }
            (_, Some(e)) => {
                steps.extend((i..i + e).map(Step::Ours));
                i += e;
            }
            _ => {
                steps.push(Step::Pair(i, j));
                i += 1;
                j += 1;
            }
        }
    }
    steps.extend((j..theirs.len()).map(Step::Theirs));
    steps.extend((i..ours.len()).map(Step::OursAfterLast));
    steps
}

/// READ targets get the data the capture's READ responses carry; atomic
/// targets the value the first atomic ACK at that address returned.
pub(super) fn prefill(
    requests: &[&Seen<'_>],
    responses: &[&Seen<'_>],
    mtu: u32,
    regions: &HashMap<u32, (u32, u64, Arc<HeapMemory>)>,
) {
    for s in requests.iter().rev() {
        let r = &s.repr;
        match operation(r) {
            Some(Operation::ReadRequest) => {
                let Some(reth) = r.ext.reth else { continue };
                let Some((_, lo, mem)) = regions.get(&reth.rkey) else {
                    continue;
                };
                let npkts = read_packets(reth.dma_len, mtu);
                for resp in responses.iter().map(|x| &x.repr).filter(|x| {
                    x.bth.psn.in_window(r.bth.psn, npkts)
                        && operation(x) == Some(Operation::ReadResponse)
                }) {
                    let off = r.bth.psn.distance_to(resp.bth.psn) as u64 * mtu as u64;
                    let Some(at) = reth
                        .va
                        .checked_add(off)
                        .and_then(|va| va.checked_sub(*lo))
                        .and_then(|at| usize::try_from(at).ok())
                    else {
                        continue;
                    };
                    if at.saturating_add(resp.payload.len()) <= mem.len() {
                        mem.write(at, resp.payload);
                    }
                }
            }
            Some(Operation::CompareSwap | Operation::FetchAdd) => {
                // iterate from the last request back so the first one wins
                let Some(a) = r.ext.atomic else { continue };
                let Some((_, lo, mem)) = regions.get(&a.rkey) else {
                    continue;
                };
                let ack = responses
                    .iter()
                    .find(|x| x.repr.bth.psn == r.bth.psn && x.repr.ext.atomic_ack.is_some());
                let at =
                    a.va.checked_sub(*lo)
                        .and_then(|at| usize::try_from(at).ok());
                if let (Some(orig), Some(at)) = (ack.and_then(|x| x.repr.ext.atomic_ack), at) {
                    if at.saturating_add(8) <= mem.len() {
                        mem.write(at, &orig.to_ne_bytes());
                    }
                }
            }
            _ => {}
        }
    }
}

/// Compares our response with the capture's, one line per field that
/// differs.
pub(super) fn compare(ours: &RoceRepr<'_>, theirs: &Seen<'_>, out: &mut Vec<String>) {
    let name = format!("frame {} ({})", theirs.frame, describe(&theirs.repr));
    let theirs_icrc = theirs.icrc_ok;
    let theirs = &theirs.repr;
    let mut diff = |field: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name}: {field}: ours {a}, capture {b}"));
        }
    };
    diff(
        "opcode",
        ours.bth.opcode.to_string(),
        theirs.bth.opcode.to_string(),
    );
    diff("psn", ours.bth.psn.to_string(), theirs.bth.psn.to_string());
    diff(
        "dest_qp",
        format!("{:#x}", ours.bth.dest_qp),
        format!("{:#x}", theirs.bth.dest_qp),
    );
    diff(
        "aeth.syndrome",
        format!("{:?}", ours.ext.aeth.map(|a| a.syndrome)),
        format!("{:?}", theirs.ext.aeth.map(|a| a.syndrome)),
    );
    diff(
        "aeth.msn",
        format!("{:?}", ours.ext.aeth.map(|a| a.msn)),
        format!("{:?}", theirs.ext.aeth.map(|a| a.msn)),
    );
    diff(
        "atomic_ack",
        format!("{:?}", ours.ext.atomic_ack),
        format!("{:?}", theirs.ext.atomic_ack),
    );
    diff(
        "payload length",
        ours.payload.len().to_string(),
        theirs.payload.len().to_string(),
    );
    // ours always carries a good ICRC
    diff(
        "icrc",
        "valid".into(),
        if theirs_icrc { "valid" } else { "invalid" }.into(),
    );
    if let Some(k) = ours
        .payload
        .iter()
        .zip(theirs.payload)
        .position(|(a, b)| a != b)
    {
        out.push(format!("{name}: payload bytes differ from byte {k}"));
    }
}

/// The first PSN a capture response does not acknowledge, if it
/// acknowledges any: an ACK acknowledges its PSN and every one before
/// (IBA 9.7.5.2: coalesced ACKs), a NAK or RNR NAK every PSN before its
/// own (IBA 9.7.5.2.2), and a READ response or atomic ACK the PSNs before
/// its own, as the requester's completer takes them (implied ACKs).
pub(super) fn acknowledged_until(r: &RoceRepr<'_>) -> Option<Psn> {
    match operation(r)? {
        Operation::Acknowledge => match r.ext.aeth?.syndrome {
            Syndrome::Ack { .. } => Some(r.bth.psn.next()),
            Syndrome::RnrNak { .. } | Syndrome::Nak(_) => Some(r.bth.psn),
            Syndrome::Reserved(_) => None,
        },
        Operation::ReadResponse | Operation::AtomicAcknowledge => Some(r.bth.psn),
        _ => None,
    }
}

/// For each request, whether a capture response after it acknowledges it.
pub(super) fn acknowledged(requests: &[&Seen<'_>], responses: &[&Seen<'_>]) -> Vec<bool> {
    let mut out = vec![false; requests.len()];
    // the furthest PSN acknowledged by the responses after the request
    let mut until: Option<Psn> = None;
    let mut later = responses.iter().rev().peekable();
    for (k, q) in requests.iter().enumerate().rev() {
        while let Some(r) = later.next_if(|r| r.frame > q.frame) {
            if let Some(p) = acknowledged_until(&r.repr) {
                if until.is_none_or(|u| u.before(p)) {
                    until = Some(p);
                }
            }
        }
        out[k] = until.is_some_and(|u| q.repr.bth.psn.before(u));
    }
    out
}

/// After the replay, every byte a WRITE put down holds what the last WRITE
/// to it carried — judged for the bytes whose last WRITE packet the
/// capture shows acknowledged. Bytes last written by a packet it does not
/// (the capture ends before its ACK, or the responder refused it) are
/// counted, not judged.
pub(super) fn check_writes(
    requests: &[&Seen<'_>],
    responses: &[&Seen<'_>],
    regions: &HashMap<u32, (u32, u64, Arc<HeapMemory>)>,
    report: &mut ConnectionReport,
) {
    let acked = acknowledged(requests, responses);
    // (rkey, va) -> (byte, acknowledged), in request order so later
    // writes win
    let mut expect: BTreeMap<(u32, u64), (u8, bool)> = BTreeMap::new();
    let mut cursor: Option<(u32, u64)> = None;
    for (s, &ack) in requests.iter().zip(&acked) {
        let r = &s.repr;
        if operation(r) != Some(Operation::Write) {
            continue;
        }
        if let Some(reth) = r.ext.reth {
            cursor = Some((reth.rkey, reth.va));
        }
        let Some((rkey, va)) = cursor else { continue };
        for (i, b) in r.payload.iter().enumerate() {
            if let Some(at) = va.checked_add(i as u64) {
                expect.insert((rkey, at), (*b, ack));
            }
        }
        cursor = va
            .checked_add(r.payload.len() as u64)
            .map(|next| (rkey, next));
    }
    let mut wrong = 0usize;
    for (&(rkey, va), &(b, ack)) in &expect {
        if !ack {
            report.unjudged_bytes += 1;
            continue;
        }
        report.judged_bytes += 1;
        let Some((_, lo, mem)) = regions.get(&rkey) else {
            continue;
        };
        let Some(at) = va
            .checked_sub(*lo)
            .and_then(|at| usize::try_from(at).ok())
            .filter(|&at| at < mem.len())
        else {
            continue;
        };
        let mut got = [0u8];
        mem.read(at, &mut got);
        if got[0] != b {
            wrong += 1;
        }
    }
    if wrong > 0 {
        report.mismatches.push(format!(
            "memory: {wrong} of {} written bytes differ after the replay",
            report.judged_bytes
        ));
    }
}

/// Pairs our responses (`produced`, in the order sent) with the capture's
/// (`expected`) by PSN and counts and describes every difference; ours
/// after the end of the capture (`end`) are listed apart when they were
/// due after it (`due`, from `answers_due`).
pub(super) fn judge_responses(
    produced: &[Vec<u8>],
    expected: &[&Seen<'_>],
    end: Instant,
    due: u64,
    report: &mut ConnectionReport,
) {
    let mut ours: Vec<(usize, RoceRepr<'_>)> = Vec::with_capacity(produced.len());
    for (k, f) in produced.iter().enumerate() {
        match RoceRepr::parse(f) {
            Ok(o) => ours.push((k + 1, o)),
            Err(e) => {
                report.differed += 1;
                report
                    .mismatches
                    .push(format!("our response {}: does not parse: {e}", k + 1));
            }
        }
    }
    let ours_psn: Vec<Psn> = ours.iter().map(|(_, o)| o.bth.psn).collect();
    let theirs_psn: Vec<Psn> = expected.iter().map(|s| s.repr.bth.psn).collect();
    for step in align(&ours_psn, &theirs_psn) {
        match step {
            Step::Pair(i, j) => {
                let before = report.mismatches.len();
                compare(&ours[i].1, expected[j], &mut report.mismatches);
                if report.mismatches.len() == before {
                    report.matched += 1;
                } else {
                    report.differed += 1;
                }
            }
            Step::Theirs(j) => {
                report.differed += 1;
                report.mismatches.push(format!(
                    "frame {} ({}): ours sent no such response",
                    expected[j].frame,
                    describe(&expected[j].repr)
                ));
            }
            Step::Ours(i) => {
                report.differed += 1;
                let (k, o) = &ours[i];
                report.mismatches.push(format!(
                    "our response {k} ({}): the capture has no such response",
                    describe(o)
                ));
            }
            Step::OursAfterLast(i) => {
                let (k, o) = &ours[i];
                if end.as_nanos() <= due {
                    report
                        .after_end
                        .push(format!("our response {k} ({})", describe(o)));
                } else {
                    report.differed += 1;
                    report.mismatches.push(format!(
                        "our response {k} ({}): the capture has no such response, and the responder's frames go on {} us past when it was due",
                        describe(o),
                        (end.as_nanos() - due) / 1000
                    ));
                }
            }
        }
    }
}
