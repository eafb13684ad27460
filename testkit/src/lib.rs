//! Support the workspace's tests share. Real-I/O tests wait on conditions,
//! never on sleeps: [`poll_within`] polls a probe at growing intervals
//! until it answers or a deadline passes; [`wait_for`] and [`wait_until`]
//! fail the test with what was awaited and what was seen last. The
//! deadlines are the callers' (generous, so only a stuck run reaches them).

use std::time::{Duration, Instant};

/// Polls `probe` until it gives `Some`, at growing intervals (1 ms, then
/// doubling up to 20 ms); `None` once `limit` has passed.
pub fn poll_within<R>(limit: Duration, mut probe: impl FnMut() -> Option<R>) -> Option<R> {
    let t0 = Instant::now();
    let mut nap = Duration::from_millis(1);
    loop {
        if let Some(r) = probe() {
            return Some(r);
        }
        if t0.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Waits until `probe` gives `Ok`; a wait over `limit` fails the test,
/// naming `what` and the last `Err` (what was seen instead).
pub fn wait_for<R>(limit: Duration, what: &str, mut probe: impl FnMut() -> Result<R, String>) -> R {
    let mut last = String::new();
    let got = poll_within(limit, || probe().map_err(|e| last = e).ok());
    got.unwrap_or_else(|| panic!("{what}: not within {limit:?}; last seen: {last}"))
}

/// Waits until `cond` holds; a wait over `limit` fails the test, naming
/// `what`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let got = poll_within(limit, || cond().then_some(()));
    assert!(got.is_some(), "{what}: not within {limit:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_answers_ends_the_wait_and_one_that_never_does_times_out() {
        let mut n = 0;
        let got = poll_within(Duration::from_secs(60), || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(got, Some(3));
        assert_eq!(poll_within(Duration::ZERO, || None::<()>), None);
        let r = std::panic::catch_unwind(|| {
            wait_for(Duration::ZERO, "a thing", || Err::<(), _>("no".to_string()))
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.contains("a thing") && msg.contains("last seen: no"),
            "{msg}"
        );
    }
}
