//! What two rnic sides add to perftest's exchange (the parent module
//! documents when): the client's settings, which the server adopts, and
//! the server's data checks at the end.

use super::exchange::Peer;
use super::measure::check_pattern;
use crate::netdev::NetDev;
use crate::perf::{conn_name, half, DataError, Mode, Settings, Verb};
use crate::CliError;
use nic::verbs::Memory;
use serde_json::{json, Value};
use std::time::Duration;

/// Why a server refuses the client's settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdoptError {
    #[error("the server runs {ours}, the client asked for {theirs}")]
    OtherTest { ours: String, theirs: String },
    #[error("the client's settings are malformed: {0}")]
    Malformed(Value),
    #[error(
        "the client asks for {asked}-byte messages; this server takes at most {limit} \
         (start it with -s {asked} to allow more)"
    )]
    TooLarge { asked: usize, limit: usize },
}

/// What the server's data checks found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServerCheckError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("the FETCH_AND_ADD counter is {got} after {ops} additions of 1")]
    Counter { got: u64, ops: u64 },
}

fn settings_json(s: &Settings) -> Value {
    json!({
        "verb": s.verb.name(),
        "mode": s.mode.name(),
        "connection": conn_name(s.qp_type),
        "sizes": s.sizes,
        "iters": s.iters,
        "duration": s.duration.map_or(0, |d| d.as_secs()),
        "qps": s.qps,
        "tx_depth": s.tx_depth,
    })
}

/// Adopts the client's settings (the server was started for `s`'s test).
fn adopt(s: &mut Settings, v: &Value) -> Result<(), AdoptError> {
    let str_of = |k: &str| v[k].as_str().unwrap_or("?").to_string();
    let (verb, mode, conn) = (str_of("verb"), str_of("mode"), str_of("connection"));
    if (verb.as_str(), mode.as_str(), conn.as_str())
        != (s.verb.name(), s.mode.name(), conn_name(s.qp_type))
    {
        return Err(AdoptError::OtherTest {
            ours: format!(
                "{} {} {}",
                s.verb.name(),
                s.mode.name(),
                conn_name(s.qp_type)
            ),
            theirs: format!("{verb} {mode} {conn}"),
        });
    }
    let bad = || AdoptError::Malformed(v.clone());
    let sizes: Vec<usize> = v["sizes"]
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|x| x.as_u64().map(|x| x as usize))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    // The server allocates for the largest size: a client may ask for up
    // to perftest's largest (-a: 2^23 bytes) or what the server itself was
    // started with, not more (untrusted input must not make it allocate
    // gigabytes).
    let limit = s
        .sizes
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(MAX_CLIENT_SIZE);
    if let Some(&x) = sizes.iter().find(|&&x| x > limit) {
        return Err(AdoptError::TooLarge { asked: x, limit });
    }
    if sizes.is_empty() || sizes.len() > 64 || sizes.contains(&0) {
        return Err(bad());
    }
    let iters = v["iters"].as_u64().filter(|&x| x > 0).ok_or_else(bad)?;
    let duration = v["duration"]
        .as_u64()
        .filter(|&d| d <= 86_400)
        .ok_or_else(bad)?;
    let qps = v["qps"]
        .as_u64()
        .filter(|&q| (1..=256).contains(&q))
        .ok_or_else(bad)?;
    let tx = v["tx_depth"]
        .as_u64()
        .filter(|&t| (1..=8192).contains(&t))
        .ok_or_else(bad)?;
    s.sizes = sizes;
    s.iters = iters;
    s.duration = (duration > 0).then(|| Duration::from_secs(duration));
    s.qps = qps as u32;
    s.tx_depth = tx as u32;
    Ok(())
}

/// The peer's next line, `prefix` and a JSON document.
pub(super) fn recv_json(peer: &mut Peer, prefix: &str) -> Result<Value, CliError> {
    let l = peer.ctrl.recv_line()?;
    l.strip_prefix(prefix)
        .and_then(|j| serde_json::from_str(j).ok())
        .ok_or_else(|| {
            let who = if peer.client { "server" } else { "client" };
            CliError::new(format!("the {who} said {l:?}"))
        })
}

/// The rnic line after perftest's preamble (both sides are rnic).
pub(super) fn settings(peer: &mut Peer, s: &mut Settings) -> Result<(), CliError> {
    if peer.client {
        peer.ctrl
            .send_line(&format!("rnic-settings {}", settings_json(s)))?;
        let l = peer.ctrl.recv_line()?;
        if let Some(why) = l.strip_prefix("rnic-error ") {
            return Err(CliError::new(format!("the peer refused: {why}")));
        }
        if l != "rnic-ok" {
            return Err(CliError::new(format!(
                "the peer said {l:?} where rnic-ok was due"
            )));
        }
        Ok(())
    } else {
        let v = recv_json(peer, "rnic-settings ")?;
        if let Err(why) = adopt(s, &v) {
            let _ = peer.ctrl.send_line(&format!("rnic-error {why}"));
            return Err(CliError::new(why.to_string()));
        }
        peer.ctrl.send_line("rnic-ok")
    }
}

/// The largest message a server takes from a client by default: perftest's
/// largest (`-a` runs 2 B .. 8 MiB).
const MAX_CLIENT_SIZE: usize = 1 << 23;

/// Our data checks as the server of two rnic sides, once the client has
/// told its operation count.
pub(super) fn server_checks(
    s: &Settings,
    nd: &NetDev,
    client_ops: u64,
) -> Result<(), ServerCheckError> {
    let h = half(s.sizes.iter().copied().max().unwrap_or(8));
    let last = s.sizes.last().copied().unwrap_or(0);
    match (s.verb, s.mode) {
        (Verb::Write, Mode::Bw) => Ok(check_pattern(nd, h, last, "the last RDMA WRITE's data")?),
        (Verb::Atomic, _) => {
            let mut b = [0u8; 8];
            nd.mem.read(h, &mut b);
            let v = u64::from_le_bytes(b);
            if v == client_ops {
                Ok(())
            } else {
                Err(ServerCheckError::Counter {
                    got: v,
                    ops: client_ops,
                })
            }
        }
        _ => Ok(()),
    }
}
