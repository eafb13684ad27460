//! An engine's duty cycle under sustained load. A SCHED_FIFO engine that
//! always has work never leaves the CPU: on a small machine the programs
//! it serves then get only what the kernel's real-time throttling leaves
//! them (5 %): 64 busy-polling clients of one rnicd (benches/tenants.sh)
//! had not all brought their QPs up after 5 minutes. After `busy_max` of
//! running without a park
//! the engine steps aside for `busy_pause` (a plain sleep: no bell, so no
//! client wakes it early), as NAPI hands a softirq that keeps finding work
//! over to ksoftirqd.

use std::time::{Duration, Instant};

/// When the engine has run long enough without parking.
#[derive(Debug)]
pub(super) struct Duty {
    max: Duration,
    pause: Duration,
    /// When the engine last started running after a park or a pause.
    since: Option<Instant>,
}

impl Duty {
    /// `max` zero: never pause.
    pub(super) fn new(max: Duration, pause: Duration) -> Duty {
        Duty {
            max,
            pause,
            since: None,
        }
    }

    /// A turn did work at `now`: the pause to take now, if the engine has
    /// run `max` without parking.
    pub(super) fn worked(&mut self, now: Instant) -> Option<Duration> {
        if self.max.is_zero() || self.pause.is_zero() {
            return None;
        }
        let since = *self.since.get_or_insert(now);
        if now.saturating_duration_since(since) < self.max {
            return None;
        }
        // the time after the pause starts a new stretch
        self.since = None;
        Some(self.pause)
    }

    /// A turn that read the clock at `now` did work: sleeps the pause
    /// [`Duty::worked`] gives, if any, and counts it in `pauses`.
    pub(super) fn after_work(&mut self, now: Instant, pauses: &mut u64) {
        if let Some(p) = self.worked(now) {
            *pauses += 1;
            std::thread::sleep(p);
        }
    }

    /// The engine parked: the next work starts a new stretch.
    pub(super) fn parked(&mut self) {
        self.since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_steps_aside_only_after_running_busy_max_without_a_park() {
        let ms = Duration::from_millis;
        let mut d = Duty::new(ms(1), Duration::from_micros(100));
        let t0 = Instant::now();
        assert_eq!(d.worked(t0), None);
        assert_eq!(d.worked(t0 + Duration::from_micros(999)), None);
        assert_eq!(d.worked(t0 + ms(1)), Some(Duration::from_micros(100)));
        // a new stretch after the pause
        assert_eq!(d.worked(t0 + ms(2)), None);
        assert_eq!(d.worked(t0 + ms(3)), Some(Duration::from_micros(100)));
        // a park in between starts over
        assert_eq!(d.worked(t0 + ms(4)), None);
        d.parked();
        assert_eq!(d.worked(t0 + ms(5)), None);
        assert_eq!(d.worked(t0 + Duration::from_micros(5999)), None);
        // switched off
        let mut off = Duty::new(Duration::ZERO, Duration::from_micros(100));
        assert_eq!(off.worked(t0), None);
        assert_eq!(off.worked(t0 + ms(100)), None);
    }
}
