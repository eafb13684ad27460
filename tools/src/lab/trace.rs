//! A trace of flows to replay (`[workload] kind = "trace"`, `trace =
//! "file.csv"`): one flow a line,
//!
//! ```text
//! # start_ms,src,dst,bytes[,op]
//! 0,h1,h0,4000000
//! 20,h2,h0,4000000,send
//! ```
//!
//! `start_ms`: when the flow starts, in milliseconds after the servers
//! listen; `src`, `dst`: hosts by name (`h0`..`h(N-1)`, not the same);
//! `bytes`: what the flow moves (more than 0); `op`: `write` (ib_write_bw,
//! the default) or `send` (ib_send_bw). Blank lines and lines starting
//! with `#` are skipped; a first line `start_ms,src,dst,bytes[,op]` is a
//! header. Lines need not be in time order. [`super::replay`] runs them.

use super::LabError;
use std::path::{Path, PathBuf};

/// The most flows a trace may hold (each is a perftest server and client).
pub const MAX_FLOWS: usize = 256;
/// The most bytes a flow may move.
pub const MAX_BYTES: u64 = 1 << 40;

/// The verb a flow moves its bytes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE (ib_write_bw).
    Write,
    /// SEND/RECV (ib_send_bw).
    Send,
}

impl Op {
    /// The perftest program.
    pub fn program(self) -> &'static str {
        match self {
            Op::Write => "ib_write_bw",
            Op::Send => "ib_send_bw",
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Send => "send",
        }
    }
}

/// One flow of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceFlow {
    pub start_ms: u64,
    /// Host indexes.
    pub src: usize,
    pub dst: usize,
    pub bytes: u64,
    pub op: Op,
}

/// A parsed trace: its file and its flows, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub path: PathBuf,
    pub flows: Vec<TraceFlow>,
}

/// What is wrong with a trace's line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("{0} fields: want start_ms,src,dst,bytes[,op]")]
    Fields(usize),
    #[error("{field} {text:?}: not a whole number")]
    Number { field: &'static str, text: String },
    #[error("host {0:?}: want h0 to h{1}")]
    Host(String, usize),
    #[error("a flow from {0} to itself")]
    SameHost(String),
    #[error("bytes {0}: want 1 to {MAX_BYTES}")]
    Bytes(u64),
    #[error("op {0:?}: want write or send")]
    Op(String),
    #[error("more than {MAX_FLOWS} flows")]
    TooMany,
    #[error("no flow")]
    Empty,
    #[error("cannot read it: {0}")]
    Read(String),
}

impl Trace {
    /// The trace of `[workload] trace` (a path) for `hosts` hosts.
    pub fn of_setting(path: Option<&str>, hosts: usize) -> Result<Trace, LabError> {
        let path = path.ok_or_else(|| {
            super::setting::setting("workload.trace", "kind = \"trace\" needs trace = \"FILE\"")
        })?;
        let path = PathBuf::from(path);
        let err = |line, why| LabError::Trace {
            path: path.clone(),
            line,
            why,
        };
        let text =
            std::fs::read_to_string(&path).map_err(|e| err(0, TraceError::Read(e.to_string())))?;
        let flows = parse(&text, hosts).map_err(|(line, why)| err(line, why))?;
        Ok(Trace { path, flows })
    }

    /// Where the trace is for the lab file in `dir`: as given when
    /// absolute, else relative to `dir`.
    pub fn resolve(trace: &str, dir: &Path) -> String {
        let p = Path::new(trace);
        if p.is_absolute() {
            trace.to_string()
        } else {
            dir.join(p).display().to_string()
        }
    }
}

/// `:N` for line N of a file, nothing for the whole file (0).
pub fn line_suffix(line: usize) -> String {
    match line {
        0 => String::new(),
        n => format!(":{n}"),
    }
}

/// The flows of `text` for `hosts` hosts, in time order (a stable sort:
/// flows of one instant keep the file's order); the first bad line's
/// number (from 1) and what is wrong with it.
pub fn parse(text: &str, hosts: usize) -> Result<Vec<TraceFlow>, (usize, TraceError)> {
    let mut flows = Vec::new();
    let mut first = true;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let header = first && line.starts_with("start_ms");
        first = false;
        if header {
            continue;
        }
        let flow = parse_line(line, hosts).map_err(|e| (n + 1, e))?;
        if flows.len() == MAX_FLOWS {
            return Err((n + 1, TraceError::TooMany));
        }
        flows.push(flow);
    }
    if flows.is_empty() {
        return Err((0, TraceError::Empty));
    }
    flows.sort_by_key(|f| f.start_ms);
    Ok(flows)
}

fn parse_line(line: &str, hosts: usize) -> Result<TraceFlow, TraceError> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if !(4..=5).contains(&f.len()) {
        return Err(TraceError::Fields(f.len()));
    }
    let number = |field, text: &str| {
        text.parse::<u64>().map_err(|_| TraceError::Number {
            field,
            text: text.into(),
        })
    };
    let host = |text: &str| {
        text.strip_prefix('h')
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|&i| i < hosts && !text[1..].starts_with('+'))
            .ok_or_else(|| TraceError::Host(text.into(), hosts - 1))
    };
    let start_ms = number("start_ms", f[0])?;
    let (src, dst) = (host(f[1])?, host(f[2])?);
    if src == dst {
        return Err(TraceError::SameHost(f[1].into()));
    }
    let bytes = number("bytes", f[3])?;
    if !(1..=MAX_BYTES).contains(&bytes) {
        return Err(TraceError::Bytes(bytes));
    }
    let op = match f.get(4).copied().unwrap_or("write") {
        "write" => Op::Write,
        "send" => Op::Send,
        o => return Err(TraceError::Op(o.into())),
    };
    Ok(TraceFlow {
        start_ms,
        src,
        dst,
        bytes,
        op,
    })
}

/// One replayed flow's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowResult {
    pub src: String,
    pub dst: String,
    pub op: Op,
    /// The bytes the trace asked for; sent: `size` × `iterations`.
    pub bytes: u64,
    pub size: u64,
    pub iterations: u64,
    /// When its client started, s after the workload's start.
    pub start_s: f64,
    /// From its client's start to its exit, s.
    pub fct_s: f64,
    /// perftest's average rate, Gbit/s.
    pub reported_gbits: Option<f64>,
}

impl FlowResult {
    /// The transfer's own time, s: what was sent at perftest's average.
    pub fn transfer_s(&self) -> Option<f64> {
        let g = self.reported_gbits.filter(|g| *g > 0.0)?;
        Some((self.size * self.iterations) as f64 * 8.0 / (g * 1e9))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_of(text: &str) -> (usize, TraceError) {
        parse(text, 4).unwrap_err()
    }

    #[test]
    fn a_trace_parses_in_time_order_with_comments_and_a_header() {
        let t = "start_ms,src,dst,bytes,op\n# two flows\n\n20, h2, h0, 1000, send\n0,h1,h0,5000\n";
        let f = parse(t, 3).unwrap();
        assert_eq!(
            f,
            vec![
                TraceFlow {
                    start_ms: 0,
                    src: 1,
                    dst: 0,
                    bytes: 5000,
                    op: Op::Write
                },
                TraceFlow {
                    start_ms: 20,
                    src: 2,
                    dst: 0,
                    bytes: 1000,
                    op: Op::Send
                },
            ]
        );
    }

    #[test]
    fn too_few_or_too_many_fields_name_the_line() {
        assert_eq!(line_of("0,h1,h0,1\n0,h1,h0\n"), (2, TraceError::Fields(3)));
        assert_eq!(line_of("0,h1,h0,1,write,x\n"), (1, TraceError::Fields(6)));
    }

    #[test]
    fn a_time_or_size_that_is_not_a_number_is_refused() {
        assert!(matches!(
            line_of("# c\n-5,h1,h0,1\n"),
            (
                2,
                TraceError::Number {
                    field: "start_ms",
                    ..
                }
            )
        ));
        assert!(matches!(
            line_of("0,h1,h0,1.5e3\n"),
            (1, TraceError::Number { field: "bytes", .. })
        ));
    }

    #[test]
    fn an_unknown_host_is_refused() {
        assert_eq!(
            line_of("0,h1,h0,1\n0,h4,h0,1\n"),
            (2, TraceError::Host("h4".into(), 3))
        );
        assert_eq!(line_of("0,x1,h0,1\n").1, TraceError::Host("x1".into(), 3));
        assert_eq!(line_of("0,h1,h+2,1\n").1, TraceError::Host("h+2".into(), 3));
    }

    #[test]
    fn a_flow_to_itself_is_refused() {
        assert_eq!(
            line_of("0,h2,h2,1\n"),
            (1, TraceError::SameHost("h2".into()))
        );
    }

    #[test]
    fn zero_or_too_many_bytes_are_refused() {
        assert_eq!(line_of("0,h1,h0,0\n"), (1, TraceError::Bytes(0)));
        let huge = format!("0,h1,h0,{}\n", MAX_BYTES + 1);
        assert_eq!(line_of(&huge), (1, TraceError::Bytes(MAX_BYTES + 1)));
    }

    #[test]
    fn an_unknown_op_is_refused() {
        assert_eq!(
            line_of("0,h1,h0,1,read\n"),
            (1, TraceError::Op("read".into()))
        );
    }

    #[test]
    fn an_empty_or_overlong_trace_is_refused() {
        assert_eq!(line_of("# nothing\n\n"), (0, TraceError::Empty));
        let long = "0,h1,h0,1\n".repeat(MAX_FLOWS + 1);
        assert_eq!(line_of(&long), (MAX_FLOWS + 1, TraceError::TooMany));
    }

    #[test]
    fn the_error_names_the_file_and_line() {
        let dir = std::env::temp_dir().join(format!("labtopo-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.csv");
        std::fs::write(&file, "0,h1,h0,10\n5,h1,h9,10\n").unwrap();
        let e = Trace::of_setting(Some(&file.display().to_string()), 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}:2: host \"h9\": want h0 to h2", file.display())
        );
        assert_eq!(Trace::resolve("t.csv", &dir), file.display().to_string());
        let gone = dir.join("none.csv");
        let e = Trace::of_setting(Some(&gone.display().to_string()), 3).unwrap_err();
        let said = e.to_string();
        assert!(
            said.starts_with(&format!("{}: cannot read it: ", gone.display())),
            "{said}"
        );
        std::fs::write(&file, "# only a comment\n").unwrap();
        let e = Trace::of_setting(Some(&file.display().to_string()), 3).unwrap_err();
        assert_eq!(e.to_string(), format!("{}: no flow", file.display()));
        assert_eq!(Trace::resolve("/x/t.csv", &dir), "/x/t.csv");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
