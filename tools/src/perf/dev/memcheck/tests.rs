//! `rnic memcheck` on dumps made up to pass and to fail.

use super::*;

const BASE: u64 = 0x7f00_0000_1000;

/// Writes both sides' dumps as the tools do; returns (ours, theirs).
fn dumps(
    dir: &Path,
    meta: Value,
    ours: (&[u8], &[u8]),
    theirs: (&[u8], &[u8]),
) -> (PathBuf, PathBuf) {
    let o = dir.join("case.rnic");
    let t = dir.join("case.rxe");
    std::fs::write(with_ext(&o, "init"), ours.0).unwrap();
    std::fs::write(with_ext(&o, "final"), ours.1).unwrap();
    std::fs::write(with_ext(&o, "json"), meta.to_string()).unwrap();
    let regions = format!("0 {BASE:x} {}\n", theirs.0.len());
    std::fs::write(with_ext(&t, "regions"), regions).unwrap();
    std::fs::write(with_ext(&t, "init.0"), theirs.0).unwrap();
    std::fs::write(with_ext(&t, "final.0"), theirs.1).unwrap();
    (o, t)
}

/// Both regions are 2h long; perftest's advertised half starts at h.
fn meta(verb: &str, mode: &str, role: &str, size: usize, h: usize, ops: u64) -> Value {
    json!({"verb": verb, "mode": mode, "role": role, "size": size, "qps": 1, "iters": ops,
           "half": h, "peer_vaddrs": [BASE + h as u64], "ops": ops, "atomic_add": 1})
}

fn noise(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

#[test]
fn a_write_from_us_must_land_byte_for_byte_and_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let h = 8192;
    let size = 5000;
    let ours = noise(2 * h, 1);
    let their_init = noise(2 * h, 99);
    let mut their_fin = their_init.clone();
    their_fin[h..h + size].copy_from_slice(&ours[..size]);
    let m = meta("write", "bw", "client", size, h, 10);
    let (o, t) = dumps(
        dir.path(),
        m.clone(),
        (&ours, &ours),
        (&their_init, &their_fin),
    );
    let said = check(&o, &t).expect("the data arrived");
    assert!(said.contains("rnic → perftest (QP 0): the last 5000-byte message and the rest of its 8192-byte span checked"), "{said}");

    // one byte of the message wrong
    let mut bad = their_fin.clone();
    bad[h + 1234] ^= 0x40;
    let (o, t) = dumps(dir.path(), m.clone(), (&ours, &ours), (&their_init, &bad));
    let e = check(&o, &t).unwrap_err().to_string();
    assert!(
        e.contains("1 of 8192 bytes") && e.contains("offset 1234"),
        "{e}"
    );

    // a message that never arrived: the receiver kept its own bytes
    let (o, t) = dumps(
        dir.path(),
        m.clone(),
        (&ours, &ours),
        (&their_init, &their_init),
    );
    assert!(check(&o, &t).is_err());

    // a stray byte past the message that no sender had
    let mut stray = their_fin.clone();
    stray[h + 6000] = !ours[6000];
    if stray[h + 6000] == their_init[h + 6000] {
        stray[h + 6000] ^= 0x81;
    }
    let (o, t) = dumps(dir.path(), m.clone(), (&ours, &ours), (&their_init, &stray));
    let e = check(&o, &t).unwrap_err().to_string();
    assert!(e.contains("offset 6000"), "{e}");

    // landed in perftest's local half instead of the address it gave
    let mut wrong_half = their_init.clone();
    wrong_half[..size].copy_from_slice(&ours[..size]);
    let (o, t) = dumps(dir.path(), m, (&ours, &ours), (&their_init, &wrong_half));
    assert!(check(&o, &t).is_err());
}

#[test]
fn reads_and_latency_ping_pongs_are_checked_in_their_directions() {
    let dir = tempfile::tempdir().unwrap();
    let h = 4096;
    // we read perftest's advertised half into our receive half
    let their = noise(2 * h, 5);
    let our_init = noise(2 * h, 6);
    let mut our_fin = our_init.clone();
    our_fin[h..2 * h].copy_from_slice(&their[h..2 * h]);
    let m = meta("read", "bw", "client", 4096, h, 10);
    let (o, t) = dumps(
        dir.path(),
        m.clone(),
        (&our_init, &our_fin),
        (&their, &their),
    );
    let said = check(&o, &t).unwrap();
    assert!(said.contains("perftest → rnic"), "{said}");
    our_fin[h + 17] ^= 1;
    let (o, t) = dumps(dir.path(), m, (&our_init, &our_fin), (&their, &their));
    assert!(check(&o, &t).unwrap_err().to_string().contains("offset 17"));

    // perftest reads our advertised half into its local half
    let ours = noise(2 * h, 8);
    let mut their_fin = their.clone();
    their_fin[..64].copy_from_slice(&ours[h..h + 64]);
    let m = meta("read", "lat", "server", 64, h, 0);
    let (o, t) = dumps(dir.path(), m, (&ours, &ours), (&their, &their_fin));
    assert!(check(&o, &t).unwrap().contains("rnic → perftest"));

    // WRITE latency: both directions; the iteration byte is left out
    let size = 64;
    let our_init = noise(2 * h, 7);
    let their_init = vec![0u8; 2 * h];
    let mut their_fin = their_init.clone();
    their_fin[h..h + size].copy_from_slice(&our_init[..size]);
    their_fin[h + size - 1] = 44; // iteration 300
    their_fin[size - 1] = 44;
    let mut our_fin = our_init.clone();
    our_fin[h..h + size].copy_from_slice(&their_fin[..size]);
    let m = meta("write", "lat", "server", size, h, 300);
    let (o, t) = dumps(
        dir.path(),
        m.clone(),
        (&our_init, &our_fin),
        (&their_init, &their_fin),
    );
    let said = check(&o, &t).unwrap();
    assert!(
        said.contains("perftest → rnic") && said.contains("rnic → perftest"),
        "{said}"
    );
    their_fin[h + 3] ^= 0x10;
    let (o, t) = dumps(
        dir.path(),
        m,
        (&our_init, &our_fin),
        (&their_init, &their_fin),
    );
    assert!(check(&o, &t)
        .unwrap_err()
        .to_string()
        .contains("rnic → perftest"));
}

#[test]
fn every_fetch_and_add_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let h = 4096;
    let ours = noise(2 * h, 3);
    let their_init = noise(2 * h, 4);
    let add = |buf: &mut [u8], at: usize, n: u64| {
        let v = u64::from_le_bytes(buf[at..at + 8].try_into().unwrap()).wrapping_add(n);
        buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
    };
    // 1000 operations of ours spread over two words of perftest's buffer
    let mut their_fin = their_init.clone();
    add(&mut their_fin, h, 600);
    add(&mut their_fin, h + 64, 400);
    let m = meta("atomic", "bw", "client", 8, h, 1000);
    let (o, t) = dumps(
        dir.path(),
        m.clone(),
        (&ours, &ours),
        (&their_init, &their_fin),
    );
    assert!(check(&o, &t).unwrap().contains("1000 FETCH_AND_ADDs"));
    add(&mut their_fin, h + 64, 1); // one executed twice
    let (o, t) = dumps(dir.path(), m, (&ours, &ours), (&their_init, &their_fin));
    assert!(check(&o, &t)
        .unwrap_err()
        .to_string()
        .contains("grew by 1001"));

    // perftest's 500 on our advertised half
    let mut our_fin = ours.clone();
    add(&mut our_fin, h + 8, 500);
    let m = meta("atomic", "lat", "server", 8, h, 500);
    let (o, t) = dumps(
        dir.path(),
        m.clone(),
        (&ours, &our_fin),
        (&their_init, &their_init),
    );
    assert!(check(&o, &t).is_ok());
    add(&mut our_fin, h + 8, u64::MAX); // one lost
    let (o, t) = dumps(dir.path(), m, (&ours, &our_fin), (&their_init, &their_init));
    assert!(check(&o, &t).is_err());
}

#[test]
fn missing_or_inconsistent_dumps_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("none.rnic");
    let e = check(&o, &dir.path().join("none.rxe"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("none.rnic.json"), "{e}");
    let h = 4096;
    let ours = noise(2 * h, 1);
    let their = noise(2 * h, 2);
    let mut m = meta("write", "bw", "client", 64, h, 1);
    m["peer_vaddrs"] = json!([BASE + 10 * h as u64]);
    let (o, t) = dumps(dir.path(), m.clone(), (&ours, &ours), (&their, &their));
    let e = check(&o, &t).unwrap_err().to_string();
    assert!(e.contains("no registered region holds"), "{e}");
    m["peer_vaddrs"] = json!([BASE + 8]);
    let (o, t) = dumps(dir.path(), m, (&ours, &ours), (&their, &their));
    let e = check(&o, &t).unwrap_err().to_string();
    assert!(e.contains("not in the upper half"), "{e}");
    let m = meta("write", "bw", "client", 64, h, 1);
    let (o, t) = dumps(dir.path(), m, (&ours[..100], &ours), (&their, &their));
    assert!(check(&o, &t)
        .unwrap_err()
        .to_string()
        .contains("do not match"));
}
