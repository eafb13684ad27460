//! The AF_PACKET TX ring on a device whose reader falls behind: a tap
//! whose owner (this test, standing in for QEMU) does not read. The kernel
//! then stops taking ring frames (the socket's send buffer is held by
//! frames queued on the tap) and the ring fills with frames still to send.
//! Once the reader catches up, the port must get them out again: the
//! kernel takes ring frames only when kicked, so a port that stops kicking
//! at a full ring stays full for good. And a frame too long for the device
//! is dropped and counted, never left in the ring where the kernel would
//! stop at it. The tests make their own namespaces and remove them even
//! when they fail.

mod enginecommon;

use enginecommon::{can_run, wait_for, wait_until, STUCK};
use nic::io::afpacket::{AfPacketPort, RingConfig};
use nic::io::{FrameBatch, Port};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use testkit::netns::{self, Namespaces};

/// Creates tap `name` in the calling thread's namespace, owned by the
/// returned (non-blocking) descriptor.
fn tap(name: &str) -> OwnedFd {
    // SAFETY: open(2) of a path we own the string of.
    let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK) };
    assert!(
        fd >= 0,
        "open /dev/net/tun: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // struct ifreq: the name, then the flags (IFF_TAP | IFF_NO_PI)
    let mut req = [0u8; 40];
    req[..name.len()].copy_from_slice(name.as_bytes());
    req[16..18].copy_from_slice(&(0x0002u16 | 0x1000).to_ne_bytes());
    // SAFETY: TUNSETIFF with a 40-byte ifreq that outlives the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), 0x4004_54ca, req.as_mut_ptr()) };
    assert_eq!(r, 0, "TUNSETIFF: {}", std::io::Error::last_os_error());
    fd
}

/// Reads every frame the tap holds; returns how many.
fn drain(fd: &OwnedFd) -> usize {
    let mut buf = vec![0u8; 65536];
    let mut n = 0;
    loop {
        // SAFETY: read(2) into a buffer we own.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r <= 0 {
            return n;
        }
        n += 1;
    }
}

/// A tap (MTU 1500, up) in namespace `tag`, its owner's descriptor and
/// an AF_PACKET port on it with a 64-frame TX ring.
fn tap_port(tag: &str) -> (Namespaces, OwnedFd, AfPacketPort) {
    let name = netns::ns_name(tag);
    let ns = Namespaces::create(std::slice::from_ref(&name)).expect("namespace");
    let dev = format!("r{tag}{}", std::process::id() % 100_000);
    let cfg = RingConfig {
        tx_frames: 64,
        ..RingConfig::default()
    };
    let (tun, port) = netns::run_in(&name, || {
        let tun = tap(&dev);
        netns::exec(&name, &["ip", "link", "set", &dev, "up"]).expect("link up");
        let port = AfPacketPort::open(&dev, cfg).expect("open port");
        (tun, port)
    })
    .unwrap();
    (ns, tun, port)
}

/// An Ethernet frame of `len` bytes (local experimental EtherType).
fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f
}

#[test]
fn a_full_tx_ring_drains_once_the_device_takes_frames_again() {
    if !can_run(
        "a_full_tx_ring_drains_once_the_device_takes_frames_again",
        &[],
    ) {
        return;
    }
    let (_ns, tun, mut port) = tap_port("tapq");
    let mut batch = FrameBatch::new(16);
    for _ in 0..16 {
        batch.push(&frame(1400));
    }
    // nobody reads the tap: offer frames until the ring refuses them
    let mut refused = 0;
    wait_until(STUCK, "the ring refused 50 batches", || {
        if port.send(&batch) == 0 {
            refused += 1;
        }
        refused >= 50
    });
    // the reader catches up; the port must send again
    let mut read = drain(&tun);
    let mut sent = 0;
    wait_for(
        STUCK,
        "the TX ring sending again after the tap was read",
        || {
            sent += port.send(&batch);
            read += drain(&tun);
            if sent > 0 && read >= 64 + 16 {
                Ok(())
            } else {
                Err(format!("{sent} frames taken, {read} read"))
            }
        },
    );
}

#[test]
fn a_frame_too_long_for_the_device_is_dropped_and_the_rest_goes_out() {
    if !can_run(
        "a_frame_too_long_for_the_device_is_dropped_and_the_rest_goes_out",
        &[],
    ) {
        return;
    }
    let (_ns, tun, mut port) = tap_port("tapl");
    let before = port.counters().tx_dropped;
    let mut long = FrameBatch::new(2);
    long.push(&frame(1500 + 14 + 200));
    long.push(&frame(100));
    // the long frame and the one behind it are dropped (a prefix is sent)
    assert_eq!(port.send(&long), 0);
    assert_eq!(port.counters().tx_dropped, before + 2);
    // 200 ordinary frames, three times the ring, all reach the tap
    let mut batch = FrameBatch::new(10);
    for _ in 0..10 {
        batch.push(&frame(1000));
    }
    let (mut sent, mut read) = (0, 0);
    wait_for(STUCK, "200 frames through the tap", || {
        if sent < 200 {
            sent += port.send(&batch);
        }
        read += drain(&tun);
        if read >= 200 {
            Ok(())
        } else {
            Err(format!("{read} of {sent} frames reached the tap"))
        }
    });
}
