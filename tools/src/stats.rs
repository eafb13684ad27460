//! `rnic stats`: the counters of the last `rnic perf` or `rnic demo` run,
//! or (`--daemon`) those of the running rnicd devices.
//!
//! Every `rnic perf` and `rnic demo` run saves its devices' counters to
//! `last-run.json` in the state directory (plain `rnic stats` reads that
//! file): `$SOFTRNIC_STATE_DIR` when set,
//! else `$XDG_RUNTIME_DIR/softrnic`, else `<temp dir>/softrnic-$USER`.
//! `rnic stats --daemon` asks every device socket in rnicd's socket
//! directory for its statistics and shows its transport, port and drop
//! counters and its RDMA CM counters.

use crate::out::write_or_quit;
use crate::report::{write_file, WriteError};
use crate::CliError;
use serde_json::{json, Value};
use std::io;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where runs leave their counters.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SOFTRNIC_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("softrnic");
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    std::env::temp_dir().join(format!("softrnic-{user}"))
}

pub fn last_run_path() -> PathBuf {
    state_dir().join("last-run.json")
}

/// Why a run's counters were not saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("cannot create {}: {source}", .dir.display())]
    CreateDir { dir: PathBuf, source: io::Error },
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("cannot write {}: {source}", .path.display())]
    Rename { path: PathBuf, source: io::Error },
}

/// Saves a run's devices. Failing to save is not the run's failure (see
/// [`save_or_warn`]).
pub fn save(command: &str, devices: Value) -> Result<PathBuf, SaveError> {
    let path = last_run_path();
    let finished = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let doc = json!({
        "command": command,
        "finished_unix": finished,
        "devices": devices,
    });
    let dir = state_dir();
    std::fs::create_dir_all(&dir).map_err(|source| SaveError::CreateDir {
        dir: dir.clone(),
        source,
    })?;
    let tmp = dir.join(format!("last-run.json.{}", std::process::id()));
    let text = serde_json::to_string_pretty(&doc).expect("JSON of plain values");
    write_file(&tmp, text + "\n")?;
    std::fs::rename(&tmp, &path).map_err(|source| SaveError::Rename {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// Saves a run's devices; a failure is a warning on stderr.
pub fn save_or_warn(command: &str, devices: Value) {
    if let Err(e) = save(command, devices) {
        eprintln!("rnic: warning: counters not saved for `rnic stats`: {e}");
    }
}

/// Prints the saved counters, as `rdma statistic show` lays them out (one
/// line per device and per QP, `name value` pairs), or as JSON.
pub fn show(as_json: bool, file: Option<PathBuf>) -> Result<(), CliError> {
    let path = file.unwrap_or_else(last_run_path);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CliError::new(format!(
                "no counters: {} does not exist (no daemon is running and no `rnic perf` or `rnic demo` has run yet)",
                path.display()
            )))
        }
        Err(e) => {
            return Err(CliError::new(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let doc: Value = serde_json::from_str(&text).map_err(|e| {
        CliError::new(format!(
            "{} is not a saved run (bad JSON: {e})",
            path.display()
        ))
    })?;
    let Some(devices) = doc.get("devices").and_then(|d| d.as_array()) else {
        return Err(CliError::new(format!(
            "{} is not a saved run (no \"devices\")",
            path.display()
        )));
    };
    let mut out = io::stdout().lock();
    if as_json {
        let s = serde_json::to_string_pretty(&doc).expect("JSON of plain values");
        return write_or_quit(&mut out, format_args!("{s}\n"));
    }
    let command = doc.get("command").and_then(|c| c.as_str()).unwrap_or("?");
    let ago = doc
        .get("finished_unix")
        .and_then(|t| t.as_u64())
        .and_then(|t| {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
            Some(now.saturating_sub(t))
        })
        .map_or(String::new(), |s| format!(", {s} s ago"));
    write_or_quit(
        &mut out,
        format_args!(
            "# counters of the last run (`{command}`{ago}), from {}\n",
            path.display()
        ),
    )?;
    for d in devices {
        let name = d.get("name").and_then(|n| n.as_str()).unwrap_or("?");
        let port = d.get("port").and_then(|n| n.as_u64()).unwrap_or(1);
        let link = format!("link {name}/{port}");
        let pairs = |v: Option<&Value>| -> String {
            v.and_then(|c| c.as_object())
                .map(|m| {
                    m.iter()
                        .filter(|(_, v)| v.is_number())
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default()
        };
        write_or_quit(
            &mut out,
            format_args!("{link} {}\n", pairs(d.get("counters"))),
        )?;
        write_or_quit(
            &mut out,
            format_args!("ethtool {name} {}\n", pairs(d.get("port_counters"))),
        )?;
        for q in d
            .get("qps")
            .and_then(|q| q.as_array())
            .into_iter()
            .flatten()
        {
            let get = |k: &str| q.get(k).map(|v| v.to_string().replace('"', ""));
            write_or_quit(
                &mut out,
                format_args!(
                    "{link} lqpn {} rqpn {} type {} state {} {}\n",
                    get("lqpn").unwrap_or_default(),
                    get("rqpn").unwrap_or_default(),
                    get("type").unwrap_or_default(),
                    get("state").unwrap_or_default(),
                    pairs(q.get("counters"))
                ),
            )?;
        }
    }
    Ok(())
}

/// `rnic stats --daemon`: the counters of every rnicd device whose socket
/// is in `dir` (default: `$SOFTRNIC_SOCK_DIR`, else /run/softrnic): a
/// `link DEV/1 name value ...` line with the transport (`rdma statistic`
/// names), port and drop counters, and a `cm DEV/1 ...` line with the RDMA
/// CM's (`cm_tx_*`, `cm_rx_*`, `cm_retries`, `cm_timeouts`, the drop
/// reasons, `gsi_*`). With `qps`, a `qp DEV/1 lqpn N ...` line per QP with
/// its DCQCN reaction point's state (`rc_bps`, `rt_bps`, `alpha`,
/// `limited`, `cuts`, `rp_cnp_handled`).
pub fn show_daemons(as_json: bool, dir: Option<PathBuf>, qps: bool) -> Result<(), CliError> {
    let dir = dir.unwrap_or_else(softrnic::client::sock_dir);
    let mut socks: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| CliError::new(format!("cannot read {}: {e}", dir.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    socks.sort();
    let mut devices = Vec::new();
    for p in &socks {
        match daemon_device(p, qps) {
            Ok(d) => devices.push(d),
            Err(e) => eprintln!("rnic: {}: {e}", p.display()),
        }
    }
    if devices.is_empty() {
        return Err(CliError::new(format!(
            "no running rnicd device in {} (give --sock-dir, or set SOFTRNIC_SOCK_DIR)",
            dir.display()
        )));
    }
    let mut out = io::stdout().lock();
    if as_json {
        let doc = json!({ "devices": devices });
        let s = serde_json::to_string_pretty(&doc).expect("JSON of plain values");
        return write_or_quit(&mut out, format_args!("{s}\n"));
    }
    write_or_quit(
        &mut out,
        format_args!(
            "# counters of the rnicd devices in {} (link: transport, port and drops; cm: RDMA CM and QP 1{})\n",
            dir.display(),
            if qps { "; qp: each QP's DCQCN state" } else { "" }
        ),
    )?;
    let line = |v: &Value| -> String {
        let pairs: Vec<String> = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        pairs.join(" ")
    };
    for d in &devices {
        let name = d["name"].as_str().unwrap_or("?");
        write_or_quit(
            &mut out,
            format_args!(
                "link {name}/1 {}\ncm {name}/1 {}\n",
                line(&d["counters"]),
                line(&d["cm_counters"])
            ),
        )?;
        for q in d["dcqcn"]["qps"].as_array().into_iter().flatten() {
            write_or_quit(
                &mut out,
                format_args!("qp {name}/1 lqpn {} {}\n", q["lqpn"], line(&q["state"])),
            )?;
        }
    }
    Ok(())
}

/// One device's counters (and, with `qps`, its QPs' DCQCN state) as JSON.
fn daemon_device(sock: &std::path::Path, qps: bool) -> Result<Value, softrnic::Error> {
    let c = softrnic::Context::open(sock)?;
    let st = c.stats()?;
    let p = c.query_port(1)?;
    let mut d = json!({
        "name": c.device.name,
        "port": 1,
        "port_state": p.state,
        "active_mtu": p.active_mtu,
        "socket": sock.display().to_string(),
        "cm_counters": st.cm,
        "counters": st.counters,
    });
    if qps {
        let cc = c.cc_states()?;
        let qps: Vec<Value> = cc
            .qps
            .iter()
            .map(|q| {
                json!({
                    "lqpn": q.qpn,
                    "state": {
                        "rc_bps": q.state.rc_bps,
                        "rt_bps": q.state.rt_bps,
                        "alpha": q.state.alpha,
                        "limited": u8::from(q.state.limited),
                        "enabled": u8::from(q.state.enabled),
                        "cuts": q.state.cuts,
                        "rp_cnp_handled": q.state.cnps_handled,
                    },
                })
            })
            .collect();
        d["dcqcn"] = json!({ "now_ns": cc.now_ns, "line_bps": cc.line_bps, "qps": qps });
    }
    Ok(d)
}
