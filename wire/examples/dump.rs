//! Prints one line per RoCEv2 frame of a pcap: `cargo run -p wire --example dump FILE`.
fn main() {
    let path = std::env::args().nth(1).expect("usage: dump FILE.pcap");
    let mut r =
        pcap_file::pcap::PcapReader::new(std::fs::File::open(path).expect("open")).expect("pcap");
    let mut i = 0;
    while let Some(p) = r.next_packet() {
        i += 1;
        let p = p.expect("packet");
        match wire::Frame::parse(&p.data) {
            Ok(f) => println!("{i:5} {f}"),
            Err(e) => println!("{i:5} -- {e}"),
        }
    }
}
