//! How the kernel runs an engine thread. A parked engine must run the
//! moment a frame, a doorbell or a timer wakes it — as an interrupt
//! handler does — even when busy-polling applications hold every core: on
//! two cores with two spinning programs, an engine with the default
//! policy waits for a program's time slice to end (milliseconds) before it
//! answers a doorbell. Linux rxe has no such wait: its work runs in the
//! caller's system call and in softirq.

use std::time::Duration;

/// The scheduling an engine thread asks for when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Priority {
    /// The kernel's default for a thread (SCHED_OTHER, default slice).
    #[default]
    Normal,
    /// SCHED_FIFO at this priority (1..=99): a woken engine preempts any
    /// normal thread at once. Needs CAP_SYS_NICE or an RLIMIT_RTPRIO that
    /// allows it. The engine parks when idle, so it takes the CPU only
    /// while it has work (and for its idle spin).
    Realtime(u8),
    /// SCHED_OTHER with a short time slice (EEVDF's per-task slice, Linux
    /// 6.12 and later; older kernels accept and ignore it): a woken
    /// engine gets an earlier virtual deadline than a program that has
    /// been spinning, and so preempts it. No privilege needed.
    ShortSlice(Duration),
    /// `Realtime(1)` where permitted, else `ShortSlice(SHORT_SLICE)`.
    Auto,
}

/// The shortest slice the kernel accepts (100 µs).
pub const SHORT_SLICE: Duration = Duration::from_micros(100);

/// What the engine thread got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granted {
    Normal,
    Realtime(u8),
    ShortSlice(Duration),
}

impl std::fmt::Display for Granted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Granted::Normal => write!(f, "SCHED_OTHER"),
            Granted::Realtime(p) => write!(f, "SCHED_FIFO {p}"),
            Granted::ShortSlice(s) => write!(f, "SCHED_OTHER, {} µs slice", s.as_micros()),
        }
    }
}

/// Why the asked-for scheduling was not granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    #[error("realtime priority {0} is outside 1..=99")]
    BadPriority(u8),
    /// The kernel refused (the errno).
    #[error("sched_setattr: {}", std::io::Error::from_raw_os_error(*.0))]
    Kernel(i32),
}

/// Applies `p` to the calling thread.
pub fn apply(p: Priority) -> Result<Granted, SchedError> {
    match p {
        Priority::Normal => Ok(Granted::Normal),
        Priority::Realtime(prio) => {
            if !(1..=99).contains(&prio) {
                return Err(SchedError::BadPriority(prio));
            }
            set(libc::SCHED_FIFO as u32, prio as u32, Duration::ZERO)?;
            Ok(Granted::Realtime(prio))
        }
        Priority::ShortSlice(slice) => {
            set(libc::SCHED_OTHER as u32, 0, slice)?;
            Ok(Granted::ShortSlice(slice))
        }
        Priority::Auto => {
            apply(Priority::Realtime(1)).or_else(|_| apply(Priority::ShortSlice(SHORT_SLICE)))
        }
    }
}

/// sched_setattr(2) on the calling thread.
fn set(policy: u32, priority: u32, slice: Duration) -> Result<(), SchedError> {
    let attr = libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: policy,
        sched_flags: 0,
        sched_nice: 0,
        sched_priority: priority,
        // for SCHED_OTHER, the slice the thread asks for (ns)
        sched_runtime: slice.as_nanos() as u64,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: sched_setattr(2) on pid 0 (the calling thread) reads `size`
    // bytes of `attr`, a live, initialised sched_attr of that size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0,
            &attr as *const libc::sched_attr,
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(SchedError::Kernel(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f` on a fresh thread (each test thread keeps what it was given).
    fn on_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn normal_and_a_short_slice_are_always_granted() {
        assert_eq!(
            on_thread(|| apply(Priority::Normal).unwrap()),
            Granted::Normal
        );
        let slice = on_thread(|| apply(Priority::ShortSlice(SHORT_SLICE)).unwrap());
        assert_eq!(slice, Granted::ShortSlice(SHORT_SLICE));
        assert!(matches!(
            apply(Priority::Realtime(0)),
            Err(SchedError::BadPriority(0))
        ));
    }

    #[test]
    fn auto_is_realtime_where_permitted_and_a_short_slice_elsewhere() {
        let rt = on_thread(|| {
            apply(Priority::Realtime(1))
                .ok()
                // SAFETY: sched_getscheduler(0) asks about the calling thread.
                .map(|g| (g, unsafe { libc::sched_getscheduler(0) }))
        });
        let auto = on_thread(|| apply(Priority::Auto).unwrap());
        match rt {
            Some((g, policy)) => {
                assert_eq!(g, Granted::Realtime(1));
                assert_eq!(policy, libc::SCHED_FIFO);
                assert_eq!(auto, Granted::Realtime(1));
            }
            None => assert_eq!(auto, Granted::ShortSlice(SHORT_SLICE)),
        }
    }
}
