//! A device whose engine runs in this very process (the libibverbs
//! drop-in's local mode hosts rnicd's server in the application): the
//! client's own threads turn its loop when they post and when they find a
//! completion queue empty, as Linux rxe runs a post in the caller's
//! context, instead of waking an engine thread on another CPU. The client
//! and the server still meet only over the socket and the shared rings;
//! what is registered here is how to turn the loop. The host names its
//! socket folder in `SOFTRNIC_SOCK_DIR` ([`super::sock_dir`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The environment variable naming the interface a program hosts its
/// device on (crate `softrnic-local`).
pub const ENV_IFACE: &str = "SOFTRNIC_LOCAL";
/// The environment variable naming the hosted device.
pub const ENV_NAME: &str = "SOFTRNIC_LOCAL_NAME";
/// The hosted device's name when [`ENV_NAME`] gives none, as rnicd's.
pub const DEFAULT_NAME: &str = "srnic0";

/// The device this process's environment asks to host: `(interface,
/// device name)`, or `None` when [`ENV_IFACE`] is unset or empty.
pub fn requested() -> Option<(String, String)> {
    let ifname = std::env::var(ENV_IFACE).ok().filter(|s| !s.is_empty())?;
    let name = std::env::var(ENV_NAME).unwrap_or_else(|_| DEFAULT_NAME.into());
    Some((ifname, name))
}

/// How the client turns an engine in its process.
pub trait LocalEngine: Send + Sync {
    /// One turn on the calling thread; None when another thread is turning
    /// the loop (the work is then that thread's).
    fn try_turn(&self) -> Option<usize>;
    /// The client stops turning for a while (it blocks waiting for an
    /// event): the engine's own thread takes the port again.
    fn leave(&self);
}

/// The engines of this process, by the control socket they serve.
static ENGINES: Mutex<Vec<(PathBuf, Arc<dyn LocalEngine>)>> = Mutex::new(Vec::new());

/// Registers the engine serving the control socket `path`: a context
/// opened on it afterwards turns it.
pub fn register(path: &Path, engine: Arc<dyn LocalEngine>) {
    if let Ok(mut v) = ENGINES.lock() {
        v.retain(|(p, _)| p != path);
        v.push((path.to_path_buf(), engine));
    }
}

/// The engine registered for `path`.
pub fn lookup(path: &Path) -> Option<Arc<dyn LocalEngine>> {
    let v = ENGINES.lock().ok()?;
    v.iter().find(|(p, _)| p == path).map(|(_, e)| e.clone())
}
