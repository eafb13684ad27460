//! What the drop-in's tests share: where the build put things, a
//! `rnicd --mem-pair` of their own, running as `nobody` when root
//! (`testkit::rnicd`), and the loud SKIPPED / CI rule for tools that are
//! not installed.
#![allow(dead_code)]

// each test binary uses some of them
#[allow(unused_imports)]
pub use testkit::rnicd::{cmd, have, is_root, Daemon, STUCK};
#[allow(unused_imports)]
pub use testkit::{poll_within, wait_for};

pub fn missing(why: &str) -> bool {
    testkit::skip_or_fail("this test", why);
    true
}

pub use testkit::abi::profile_dir;
