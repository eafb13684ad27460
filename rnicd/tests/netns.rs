//! rnicd over a real wire: two daemons, each bound to one end of a
//! veth pair in its own network namespace (AF_XDP if it opens, else
//! AF_PACKET), and a client process in each namespace (`ip netns exec`)
//! doing SEND, WRITE, WRITE_WITH_IMM, READ and both atomics. The second
//! daemon drops root once its port is open (`--user nobody`): its AF_XDP
//! (or AF_PACKET) socket keeps working without privileges.

mod common;

use common::{can_run, pair, tempdir, Client, Daemon};
use testkit::netns::{self, Namespaces};

#[test]
fn two_daemons_two_namespaces_every_verb() {
    if !can_run("two_daemons_two_namespaces_every_verb") {
        return;
    }
    let id = std::process::id() % 10_000;
    let (na, nb) = (netns::ns_name("da"), netns::ns_name("db"));
    let _ns = Namespaces::create(&[na.clone(), nb.clone()]).expect("namespaces");
    let (va, vb) = (format!("sra{id}"), format!("srb{id}"));
    netns::veth(&na, &va, "192.0.2.1/24", &nb, &vb, "192.0.2.2/24", 9000).expect("veth");
    let (da, db) = (tempdir("nsa"), tempdir("nsb"));
    let _a = Daemon::start(
        Some(&na),
        &["--iface", &va, "--gid", "192.0.2.1", "--name", "ra"],
        &da,
    );
    let _b = Daemon::start(
        Some(&nb),
        &[
            "--iface",
            &vb,
            "--gid",
            "192.0.2.2",
            "--name",
            "rb",
            "--user",
            "nobody",
        ],
        &db,
    );
    let mut a = Client::spawn("a", Some(&na), "verbs-a", &_a.sock("ra"), &[]);
    let mut b = Client::spawn("b", Some(&nb), "verbs-b", &_b.sock("rb"), &[]);
    pair(&mut a, &mut b);
    b.expect("READY");
    a.send("GO");
    a.expect("OK verbs-a");
    b.send("CHECK");
    b.expect("OK verbs-b");
    assert_eq!(a.finish(), Some(0));
    assert_eq!(b.finish(), Some(0));
}
