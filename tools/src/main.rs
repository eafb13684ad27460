//! `rnic`: the softrnic command.

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use tools::perf::request::PerfRequest;
use tools::perf::{Mode, Verb};
use tools::CliError;

#[derive(Parser)]
#[command(
    name = "rnic",
    version,
    about = "softrnic: a userspace RoCEv2 RDMA NIC — demo, perftest-style runs, capture checks, counters",
    after_help = "Examples:\n  rnic demo                             # the main job: no root, no configuration\n  rnic perf write lat --loopback        # ib_write_lat on the in-process loopback\n  rnic perf write bw --dev eth0 HOST    # ib_write_bw against `rnic perf write bw --dev IFACE` on HOST\n  rnic pingpong -d eth0 HOST            # ibv_rc_pingpong\n  rnic pcap check capture.pcap          # validate every RoCEv2 frame\n  rnic stats                            # counters of the last run\n\nEvery subcommand has --help with examples."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a short perftest suite on two emulated NICs and write demo.pcap.
    #[command(
        long_about = "Two soft RNICs on the in-memory wire, in one process, run a short suite: \
RDMA WRITE, READ, SEND and atomic latency, WRITE, READ and SEND bandwidth, a few sizes each. \
It prints perftest's tables with HDR percentiles, writes the frames of every test's warm-up \
to a pcap that Wireshark reads, and checks that pcap as `rnic pcap check` does.\n\n\
Measurements: in-process loopback: both NICs in one thread; wall-clock time of the software \
path (post → requester → frame → ICRC → responder → ACK → completion). No root, no \
configuration, no network.",
        after_help = "Examples:\n  rnic demo\n  rnic demo --out /tmp/demo.pcap --json demo.json\n  rnic demo --quick            # fewer iterations"
    )]
    Demo(DemoArgs),
    /// Run an unmodified RDMA program (linked to libibverbs) on softrnic.
    #[command(
        long_about = "Runs PROGRAM with softrnic's drop-in libibverbs.so.1 first on its library \
path (LD_LIBRARY_PATH), so its ibverbs devices are the running rnicd daemons: every \
<name>.sock in --sock-dir (else $SOFTRNIC_SOCK_DIR, else /run/softrnic). The library is \
looked for in $SOFTRNIC_IBVERBS_DIR, else in softrnic-ibverbs/ beside this rnic. The \
program replaces rnic: its exit status and signals are the program's. Use GID index 3 \
(the RoCE v2 GID of the device's address).\n\n\
The program and its children see the devices as the kernel shows an rxe device: \
/sys/class/infiniband/DEV (ports, state, rate, GIDs and their types, device/net/NETDEV), \
/sys/class/infiniband_verbs/uverbsN and /dev/infiniband/uverbsN, in mount (and, without \
root's CAP_SYS_ADMIN, user) namespaces of their own; nothing outside them changes. They \
see them over RDMA netlink too (rdma link, rdma dev): rnic exec preloads its netlink shim \
(LD_PRELOAD, from $SOFTRNIC_NLSHIM_DIR, else softrnic-nlshim/ beside softrnic-ibverbs/). \
Where no namespace can be made the program runs without this view (a line on stderr \
says so); --no-view asks for none, and preloads nothing.",
        after_help = "Examples:\n  rnicd --mem-pair --name t --sock-dir /tmp/srnic &\n  rnic exec --sock-dir /tmp/srnic -- ibv_devinfo -v\n  rnic exec --sock-dir /tmp/srnic -- ibv_rc_pingpong -d t0 -g 3 &\n  rnic exec --sock-dir /tmp/srnic -- ibv_rc_pingpong -d t1 -g 3 127.0.0.1\n  rnic exec -- ib_write_bw -d srnic0 -x 3 192.0.2.1\n  rnic exec --sock-dir /tmp/srnic -- cat /sys/class/infiniband/t0/ports/1/gid_attrs/types/3"
    )]
    Exec {
        /// Where the rnicd sockets are (sets SOFTRNIC_SOCK_DIR).
        #[arg(long)]
        sock_dir: Option<PathBuf>,
        /// Do not show the program the devices in /sys/class/infiniband
        /// and /dev/infiniband (no namespaces) nor over RDMA netlink.
        #[arg(long)]
        no_view: bool,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        argv: Vec<std::ffi::OsString>,
    },
    /// perftest-style bandwidth and latency tests (ib_write_bw, ib_read_lat, ...).
    #[command(
        long_about = "perftest-style tests: `rnic perf write bw` is ib_write_bw, `rnic perf read lat` \
is ib_read_lat, and so on, with perftest's flags where they make sense and the same report \
columns, plus an HDR histogram (p50, p90, p99, p99.9, p99.99, max).\n\n\
--loopback: in-process loopback: both NICs in one thread; wall-clock time of the software \
path (post → requester → frame → ICRC → responder → ACK → completion). WRITE and SEND latency \
are ping-pong (half the round trip, as ib_write_lat); READ and atomic latency are post to \
completion; bandwidth keeps -t operations outstanding per QP.\n\n\
--dev IFACE: perftest's model on a real interface, speaking perftest's own exchange, so either \
side can be the real ib_write_bw, ib_send_lat, ... (Debian bookworm's perftest): the server \
when no peer address is given, the client otherwise; the two meet on TCP port -p (18515), \
exchange versions, MTU and each QP's LID:out_reads:QPN:PSN:rkey:address:GID:SRQN, connect \
their QPs and run perftest's test (ib_write_lat's server posts first; the SEND server counts \
receives; READ and atomic servers are passive). As with perftest, give both sides the same \
test, -s/-a, -n/-D, -q and -c; an rnic server facing an rnic client adopts the client's \
settings and the two verify the data. The client measures; the bw server prints the client's \
report, the ping-pong and SEND servers their own. -m defaults to the interface's largest MTU \
(perftest: the port's active MTU); -x and -F are accepted and ignored. The polling engine \
runs on the interface through AF_XDP (else AF_PACKET; on a veth AF_PACKET with UDP GSO; --backend), inline in the measuring \
thread by default (--engine thread gives it a thread of its own); frames go to the next hop's \
MAC from the kernel's route and neighbour tables; our GID is the interface's address (--gid). \
--json carries both devices' port, device and per-QP counters; --pcap records the port's first \
--pcap-frames frames.",
        after_help = "Examples:\n  rnic perf write lat --loopback\n  rnic perf write bw --loopback -s 4096 -n 20000\n  rnic perf read bw --loopback -a -n 200 --report_gbits\n  rnic perf send lat --loopback -D 5 --hgrm send.hgrm --plot send.svg\n  rnic perf write bw --loopback -q 4 -t 64 --json bw.json\n  ip netns exec ns1 rnic perf write bw --dev veth1                 # server\n  ip netns exec ns2 rnic perf write bw --dev veth2 -m 4096 192.0.2.1  # client\n  rnic perf send lat -d eth0 -s 64                                 # server for: ib_send_lat -x 1 -s 64 HOST\n  rnic perf write lat --dev eth0 -s 64 -n 100000 --json lat.json 10.0.0.1"
    )]
    Perf(PerfArgs),
    /// Check the data of an `rnic perf --dev --dump-mem` run against the real perftest's memory dump.
    #[command(
        long_about = "perftest never checks the data it moves. The interop suite records both sides' \
buffers: `rnic perf --dev --dump-mem OURS` writes our region before and after the test, and \
tools/rxe-peer/perftest/memdump.c, preloaded into perftest with SRNIC_MEMDUMP=THEIRS, writes \
perftest's registered regions before its QP reaches RTR and when it deregisters them. This \
command decides whether every byte each receiver holds came from the sender at the same offset \
(WRITE and SEND: client to server, READ: server to client, the latency tests both ways), and \
whether the atomic target grew by exactly one addition per FETCH_AND_ADD. Exit status 1 and the \
first wrong byte otherwise.",
        after_help = "Examples:\n  rnic memcheck out/mem/write-bw.rnic out/mem/write-bw.rxe\n  rnic perf write bw --dev tap0 --dump-mem out/mem/write-bw.rnic 10.88.0.2"
    )]
    Memcheck {
        /// The PREFIX given to rnic perf --dump-mem.
        ours: PathBuf,
        /// The SRNIC_MEMDUMP prefix perftest ran with.
        theirs: PathBuf,
    },
    /// ibv_rc_pingpong / ibv_ud_pingpong / ibv_uc_pingpong on a real interface (same flags, exchange and output).
    #[command(
        long_about = "rdma-core's ibv_rc_pingpong (with --ud: ibv_ud_pingpong, with --uc: \
ibv_uc_pingpong) on a soft RNIC on a \
network interface: without a peer address it is the server, with one the client. The two \
exchange LID:QPN:PSN:GID records over TCP port 18515 exactly as the examples do (so either side \
can be the real tool), then SEND -s bytes back and forth -n times — the client first, each side \
again once its last SEND completed and a message arrived — and print the examples' two lines: \
bytes and Mbit/sec, iterations and usec/iter.\n\n\
-d names the interface (default: the one the route to the peer takes; a server: the only one \
with an address). -g is accepted and ignored: our one GID is the interface's address (or \
--gid). A peer that sends an all-zero GID (the real tool without -g) is reached at its TCP \
address. A UD message is one packet: -s is at most the port's active MTU, the largest IB MTU \
the interface MTU carries (4096 needs an interface MTU of 4160 or more over IPv4; 1500 gives 1024). \
-c checks the data as the examples do (the client marks each page, the server prints \
`invalid data in page N`); rnic also checks every byte and exits non-zero on a difference.",
        after_help = "Examples:\n  ip netns exec ns1 rnic pingpong -d veth1                 # server\n  ip netns exec ns2 rnic pingpong -d veth2 192.0.2.1       # client\n  rnic pingpong -d eth0 -s 64 -n 100000 10.0.0.1\n  rnic pingpong --ud -d eth0 -s 1024 10.0.0.1\n  rnic pingpong --uc -c -d eth0 10.0.0.1"
    )]
    Pingpong(PingpongArgs),
    /// Check, dump or replay capture files (pcap, pcapng).
    #[command(
        after_help = "Examples:\n  rnic pcap check demo.pcap\n  rnic pcap dump --roce demo.pcap | less\n  rnic pcap replay ../shared/pcaps/rxe-public/rdma_read_bw.pcap"
    )]
    Pcap {
        #[command(subcommand)]
        cmd: PcapCmd,
    },
    /// Counters of the last `rnic perf` / `rnic demo` run (rdma statistic and ethtool names), or of the running rnicd devices.
    #[command(
        long_about = "Prints the device, port and per-QP counters, named as `rdma statistic` and \
`ethtool -S` name them, from the last run: every `rnic perf` and `rnic demo` run saves its \
counters to last-run.json in $SOFTRNIC_STATE_DIR, else $XDG_RUNTIME_DIR/softrnic, else \
<temp dir>/softrnic-$USER, and this prints the last one. With --daemon it asks every running \
rnicd device (the sockets in --sock-dir, $SOFTRNIC_SOCK_DIR or /run/softrnic) for its RDMA CM \
counters: messages sent and received by kind (cm_tx_req, cm_rx_rep, ...), cm_retries, \
cm_timeouts, the reasons of dropped MADs and QP 1's own counters (gsi_*). With --qp it adds a \
line per QP with its DCQCN reaction point's state: rc_bps (current rate), rt_bps (target rate), \
alpha, limited (1 while a CNP's cut holds), cuts and rp_cnp_handled.",
        after_help = "Examples:\n  rnic stats\n  rnic stats --json | jq '.devices[0].counters'\n  rnic stats --file saved-run.json\n  rnic stats --daemon --sock-dir /run/softrnic\n  rnic stats --daemon --qp"
    )]
    Stats(StatsArgs),
    /// Build a RoCE fabric of namespaces, run an ib_write_bw incast or an MPI collective through it, and plot what happened.
    #[command(
        long_about = "Builds N hosts (network namespaces, each with its own rnicd on AF_XDP, else \
AF_PACKET, on a veth) around one switch namespace (a bridge; toward each host an egress queue: tbf \
at the link rate, and nftables CE-marking RoCEv2 frames above a threshold: a PROXY of the queue's \
depth, see docs/lab.md), runs unmodified ib_write_bw from h1..h(N-1) to h0 at once through the \
drop-in (rnic exec), samples every host's counters, the senders' DCQCN state (Rc, Rt, α per QP) and the switch's queues and marks every \
100 ms, and writes CSV, SVG plots and index.html into --out. --workload allreduce|alltoall runs an MPI \
collective of ours instead (Open MPI over UCX, one rank per host; --ucx-tls tcp forces UCX onto TCP \
sockets, the RNIC bypassed) and plots each iteration's completion time. DCQCN is on (rnicd's default). \
Needs root. Everything it creates carries the prefix rnlab-<pid> and is torn down on exit, on \
error and on SIGINT/SIGTERM. With [[machine]] tables in --file, the incast runs across real hosts \
instead, one rnicd each, every program started through each machine's launcher (ssh, kubectl exec, \
srun...): docs/lab.md, \"Across machines\".",
        after_help = "Examples:\n  sudo rnic lab --hosts 3 --rate 100mbit --ecn-kb 30 --duration 10 --out /tmp/lab\n  sudo rnic lab --file incast.toml --out /tmp/lab\n  sudo rnic lab --hosts 5 --ecn-kb 0 --out /tmp/no-ecn      # no marking: no CNPs\n  sudo rnic lab --hosts 4 --workload allreduce --size 1048576 --out /tmp/ar\n  sudo rnic lab --hosts 4 --workload allreduce --ucx-tls tcp --out /tmp/ar-tcp   # the TCP fallback\n  rnic lab --file machines.toml --out /tmp/across   # across real hosts over SSH"
    )]
    Lab(LabArgs),
    /// Draw an SVG line plot of a CSV of `series,x,y` rows (x: message sizes, log2 axis).
    #[command(
        long_about = "Reads a CSV of `series,x,y` rows (a header line, blank lines and # comments \
are skipped; a y of `-` or `nan` is a point not measured) and writes an SVG: one line per \
series, in the order they first appear, x on a log2 axis labelled as message sizes (2, 1K, \
8M), y linear from 0 or, with --log-y, log10. benches/compare-all.sh draws its bandwidth and \
latency curves with it.",
        after_help = "Examples:\n  rnic plot bw.csv --out bw.svg --title 'ib_write_bw' --y-label 'MB/s'\n  rnic plot lat.csv --out lat.svg --y-label 'usec' --log-y"
    )]
    Plot(PlotArgs),
}

#[derive(Args)]
struct LabArgs {
    /// The lab file (TOML; see docs/lab.md). Flags given here win over it.
    #[arg(long, value_name = "LAB.toml")]
    file: Option<PathBuf>,
    /// The results folder (CSV, SVG, index.html, logs/).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Hosts h0..h(N-1): h1..h(N-1) send to h0 [default: 3].
    #[arg(long, value_name = "N")]
    hosts: Option<usize>,
    /// Switches: 1, or 2 joined by a trunk (h0..h(N/2-1) on switch 0; the trunk table of the file sets more) [default: 1].
    #[arg(long, value_name = "N")]
    switches: Option<usize>,
    /// Each switch egress queue's rate (tc's bit rates: kbit, mbit, gbit; also 100m) [default: 100mbit].
    #[arg(long)]
    rate: Option<String>,
    /// CE-mark RoCEv2 frames while a queue holds more than this many KB (0: none) [default: 30].
    #[arg(long, value_name = "KB")]
    ecn_kb: Option<u32>,
    /// Each egress queue's capacity in KB (tail drop beyond) [default: 1000].
    #[arg(long, value_name = "KB")]
    queue_kb: Option<u32>,
    /// The links' MTU [default: 1500].
    #[arg(long)]
    mtu: Option<u32>,
    /// The switch sends 802.1Qbb PFC toward the senders when a queue passes --xoff-kb.
    #[arg(long)]
    pfc: bool,
    /// PFC: pause the senders when a queue holds this many KB [default: 300].
    #[arg(long, value_name = "KB")]
    xoff_kb: Option<u32>,
    /// PFC: resume them when it falls to this many KB [default: 250].
    #[arg(long, value_name = "KB")]
    xon_kb: Option<u32>,
    /// The workload's length in seconds (ib_write_bw -D) [default: 10].
    #[arg(long, value_name = "SECONDS")]
    duration: Option<u32>,
    /// ib_write_bw's message size in bytes (-s) [default: 65536].
    #[arg(long, short)]
    size: Option<u32>,
    /// rnicd's port: auto (AF_XDP, else AF_PACKET) | afxdp | afpacket [default: auto].
    #[arg(long)]
    backend: Option<String>,
    /// Sampling period of the counters in ms [default: 100].
    #[arg(long, value_name = "MS")]
    sample_ms: Option<u32>,
    /// The hosts' DCQCN reaction points: on | off (rnicd --dcqcn-rp) [default: on].
    #[arg(long, value_parser = ["on", "off"])]
    dcqcn: Option<String>,
    /// Also measure latency: ib_send_lat h1 → h0 through the same switch queue.
    #[arg(long)]
    probe: bool,
    /// The workload: incast (ib_write_bw) | allreduce | alltoall (MPI over UCX, a rank per host) | trace (--trace) [default: incast].
    #[arg(long, value_name = "KIND")]
    workload: Option<String>,
    /// A collective's iterations (0: as many as --duration holds) [default: 0].
    #[arg(long, value_name = "N")]
    iterations: Option<u32>,
    /// A collective's UCX transports: rdma (the verbs of each host's rnicd) | tcp (sockets: the RNIC bypassed) [default: rdma].
    #[arg(long, value_name = "TLS")]
    ucx_tls: Option<String>,
    /// The trace to replay with --workload trace: a line of start_ms,src,dst,bytes and an optional op (docs/lab.md).
    #[arg(long, value_name = "CSV")]
    trace: Option<String>,
}

impl LabArgs {
    /// The flags as a lab file, to lay over --file.
    fn flags(&self) -> tools::lab::LabFile {
        use tools::lab::config::{LabFile, SwitchFile, WorkloadFile};
        LabFile {
            hosts: self.hosts,
            backend: self.backend.clone(),
            dcqcn: self.dcqcn.as_deref().map(|d| d == "on"),
            switches: self.switches,
            trunk: Default::default(),
            dcqcn_reference: None,
            switch: SwitchFile {
                rate: self.rate.clone(),
                ecn_kb: self.ecn_kb,
                queue_kb: self.queue_kb,
                mtu: self.mtu,
                pfc: self.pfc.then_some(true),
                xoff_kb: self.xoff_kb,
                xon_kb: self.xon_kb,
            },
            workload: WorkloadFile {
                kind: self.workload.clone(),
                duration_s: self.duration,
                size: self.size,
                sample_ms: self.sample_ms,
                probe: self.probe.then_some(true),
                iterations: self.iterations,
                ucx_tls: self.ucx_tls.clone(),
                trace: self.trace.clone(),
            },
            machine: Vec::new(),
        }
    }
}

#[derive(Args)]
struct PlotArgs {
    /// The CSV: `series,x,y` rows.
    #[arg(value_name = "CSV")]
    csv: PathBuf,
    /// Where to write the SVG.
    #[arg(long, short, value_name = "FILE")]
    out: PathBuf,
    /// The plot's title.
    #[arg(long, default_value = "")]
    title: String,
    /// The x axis's label.
    #[arg(long, default_value = "message size [bytes]")]
    x_label: String,
    /// The y axis's label.
    #[arg(long, default_value = "")]
    y_label: String,
    /// A log10 y axis.
    #[arg(long)]
    log_y: bool,
    /// A linear x axis from 0 (time), not log2 (message sizes).
    #[arg(long)]
    linear_x: bool,
}

#[derive(Args)]
struct DemoArgs {
    /// Where to write the capture.
    #[arg(long, short, value_name = "FILE", default_value = "demo.pcap")]
    out: PathBuf,
    /// Also write the results and counters as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Fewer iterations per test.
    #[arg(long)]
    quick: bool,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// Congestion control on a real interface (`--dev`).
#[derive(Args, Clone)]
struct CcArgs {
    /// Congestion control: nvidia (DCQCN and CNPs with NVIDIA's firmware
    /// values, data ECT(0) at DSCP 26, PFC obeyed: a ConnectX as shipped),
    /// sigcomm15 (the DCQCN paper's values) or off (as Linux rxe: no DCQCN,
    /// no CNPs, data not-ECT, PFC ignored).
    #[arg(long = "cc", value_name = "PRESET", default_value = "nvidia")]
    cc: String,
    /// Send PFC pauses when the port's receive backlog reaches XOFF bytes,
    /// resume at XON (e.g. 262144:131072); off by default.
    #[arg(long = "pfc-tx", value_name = "XOFF:XON")]
    pfc_tx: Option<String>,
}

#[derive(Args)]
struct PerfArgs {
    /// The operation.
    #[arg(value_enum)]
    verb: Verb,
    /// Bandwidth or latency.
    #[arg(value_enum)]
    mode: Mode,
    /// Server's address (client mode); without it, server mode (with --dev).
    peer: Option<String>,
    /// Message size in bytes (perftest: 2 for lat, 65536 for bw; atomics: 8).
    #[arg(short = 's', long = "size", value_name = "BYTES")]
    size: Option<usize>,
    /// Iterations per size (perftest: 5000 for write bw, 1000 for the others).
    #[arg(short = 'n', long = "iters", value_name = "N")]
    iters: Option<u64>,
    /// Every size from 2 to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Run each size for this many seconds instead of -n iterations.
    #[arg(short = 'D', long = "duration", value_name = "SECONDS")]
    duration: Option<u64>,
    /// Number of QPs (bw tests).
    #[arg(short = 'q', long = "qp", value_name = "N", default_value_t = 1)]
    qps: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: --loopback 1024; --dev the interface's largest, as perftest takes the port's active MTU).
    #[arg(short = 'm', long = "mtu", value_name = "BYTES")]
    mtu: Option<u32>,
    /// perftest's GID index (accepted; the soft RNIC has one GID, the interface's address or --gid).
    #[arg(short = 'x', long = "gid-index", value_name = "N")]
    #[allow(dead_code)]
    gid_index: Option<u32>,
    /// perftest's -F / --CPU-freq (accepted; rnic measures wall-clock time, not CPU cycles).
    #[arg(short = 'F', long = "CPU-freq")]
    #[allow(dead_code)]
    cpu_freq: bool,
    /// perftest's IB port (a soft RNIC has port 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u32,
    /// TCP port of the out-of-band exchange (real interfaces).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Operations outstanding per QP (bw tests; perftest: 128).
    #[arg(short = 't', long = "tx-depth", value_name = "N")]
    tx_depth: Option<u32>,
    /// Connection type: RC or UC.
    #[arg(
        short = 'c',
        long = "connection",
        value_name = "TYPE",
        default_value = "RC"
    )]
    connection: String,
    /// Report bandwidth in Gb/s (10^9 bits) instead of MB/s (2^20 bytes).
    #[arg(long = "report_gbits", alias = "report-gbits")]
    report_gbits: bool,
    /// Network interface to run on (client: default the one the route to the peer takes).
    #[arg(short = 'd', long = "dev", alias = "ib-dev", value_name = "NAME")]
    dev: Option<String>,
    /// Port backend on the interface: auto (AF_XDP, else AF_PACKET), afxdp, afxdp-generic (XDP in SKB mode), afpacket (TPACKET_V2 ring: each frame handed over at once) or afpacket-v3 (TPACKET_V3 blocks: a lone frame waits up to the kernel's 1 ms block timer).
    #[arg(long, value_name = "KIND", default_value = "auto")]
    backend: String,
    /// Our GID (32 hex digits) or IP address instead of the interface's address.
    #[arg(long, alias = "ip", value_name = "GID|ADDR")]
    gid: Option<String>,
    /// Pin the polling engine (inline: this thread) to this core.
    #[arg(long, value_name = "N")]
    core: Option<usize>,
    /// inline: the measuring thread turns the engine (one busy thread); thread: the engine polls on its own thread.
    #[arg(long, value_name = "MODE", default_value = "inline")]
    engine: String,
    /// Run both NICs in this process (in-process loopback: both NICs in one thread; wall-clock time of the software path).
    #[arg(long)]
    loopback: bool,
    /// Write the results, percentiles and device, port and per-QP counters as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the HDR histogram in HdrHistogram's percentile-distribution format (usec).
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Write the latency distribution as an SVG plot.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Write the frames of the warm-up (--loopback) or the port's first frames (--dev) to a pcap.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// How many frames --pcap keeps (per size with --loopback).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pcap_frames: usize,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// --dev: write our memory region before and after the test to PREFIX.init and PREFIX.final (and PREFIX.json), for `rnic memcheck`.
    #[arg(long, value_name = "PREFIX")]
    dump_mem: Option<PathBuf>,
    #[command(flatten)]
    cc: CcArgs,
}

#[derive(Args)]
struct PingpongArgs {
    /// The server's address (client mode); without it, server mode.
    peer: Option<String>,
    /// Listen on / connect to this TCP port.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// The network interface (our device).
    #[arg(short = 'd', long = "ib-dev", alias = "dev", value_name = "IFACE")]
    dev: Option<String>,
    /// Port of the device (a soft RNIC has port 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u32,
    /// Size of the messages (default 4096; --ud: 2048, at most the port's active MTU).
    #[arg(short = 's', long = "size", value_name = "BYTES")]
    size: Option<u32>,
    /// Path MTU (RC): 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: u32,
    /// Receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,
    /// Service level (accepted; the soft RNIC sends every QP on priority 0's class).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    sl: u8,
    /// Sleep on CQ events (accepted; rnic always polls).
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Local GID index (accepted and ignored: the device has one GID).
    #[arg(short = 'g', long = "gid-idx", value_name = "INDEX")]
    gid_idx: Option<i32>,
    /// ibv_ud_pingpong: UD QPs, Q_Key 0x11111111, 40-byte GRH in front of each received message.
    #[arg(long)]
    ud: bool,
    /// ibv_uc_pingpong: UC QPs (no acknowledgements; a lost packet loses its message).
    #[arg(long, conflicts_with = "ud")]
    uc: bool,
    /// Validate the received buffer (the examples' -c/--chk).
    #[arg(short = 'c', long = "chk")]
    chk: bool,
    /// The page size -c marks and checks at (default: this host's, as the examples' sysconf).
    #[arg(long, value_name = "BYTES")]
    page_size: Option<usize>,
    /// Port backend on the interface: auto (AF_XDP, else AF_PACKET), afxdp, afxdp-generic (XDP in SKB mode), afpacket (TPACKET_V2 ring: each frame handed over at once) or afpacket-v3 (TPACKET_V3 blocks: a lone frame waits up to the kernel's 1 ms block timer).
    #[arg(long, value_name = "KIND", default_value = "auto")]
    backend: String,
    /// Our GID (32 hex digits) or IP address instead of the interface's address.
    #[arg(long, alias = "ip", value_name = "GID|ADDR")]
    gid: Option<String>,
    /// Record every frame the port sends or receives to this pcap.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// inline: this thread turns the engine (one busy thread); thread: the engine polls on its own thread.
    #[arg(long, value_name = "MODE", default_value = "inline")]
    engine: String,
    /// Pin the polling engine (inline: this thread) to this core.
    #[arg(long, value_name = "N")]
    core: Option<usize>,
    #[command(flatten)]
    cc: CcArgs,
}

fn pingpong(a: PingpongArgs) -> Result<(), CliError> {
    let _ = (a.events, a.sl);
    tools::pingpong::run(&tools::pingpong::PingpongOptions {
        peer: a.peer,
        port: a.port,
        ifname: a.dev,
        ib_port: a.ib_port,
        size: a.size,
        mtu: a.mtu,
        rx_depth: a.rx_depth,
        iters: a.iters,
        sl: a.sl,
        gid_idx: a.gid_idx,
        ud: a.ud,
        uc: a.uc,
        chk: a.chk,
        page_size: a.page_size,
        backend: tools::netdev::parse_backend(&a.backend)?,
        gid: a.gid.as_deref().map(tools::netdev::parse_gid).transpose()?,
        pcap: a.pcap,
        inline: tools::netdev::parse_engine(&a.engine)?,
        core: a.core,
        cc: tools::netdev::parse_cc(&a.cc.cc, a.cc.pfc_tx.as_deref())?,
    })
}

#[derive(Subcommand)]
enum PcapCmd {
    /// Validate every RoCEv2 frame; exit non-zero on the first broken one.
    #[command(
        long_about = "Validates every RoCEv2 frame of each capture: lengths, pad and headers, the \
ICRC, the snap length, the opcode sequence of each message (FIRST → MIDDLE* → LAST), PSN \
continuity per QP (retransmissions and go-back-N replays are legal and counted), payload sizes \
against the path MTU and the RETH DMA length, ACK/NAK consistency (an ACK, NAK or RNR NAK names \
a PSN the requester has sent; MSNs count completed messages; read responses and atomic ACKs \
answer requests). Frames that are not RoCE (TCP, ARP, ...) are skipped and counted. The first \
broken frame ends the check with one line naming the file, the frame number and the reason, and \
exit status 1.",
        after_help = "Examples:\n  rnic pcap check demo.pcap\n  rnic pcap check captures/*.pcap\n  rnic pcap check -q capture.pcapng && echo clean"
    )]
    Check {
        /// Capture files (pcap or pcapng; Ethernet or Linux cooked).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Print nothing when the captures are clean.
        #[arg(short, long)]
        quiet: bool,
        /// The capture was taken behind a hop that loses, reorders or duplicates
        /// frames (e.g. a router's egress after a drop rule): count missing packets
        /// and stale copies instead of failing; every other rule still applies.
        #[arg(long)]
        lossy: bool,
    },
    /// One line per frame: time, addresses, QP, opcode, PSN, sizes, ICRC, annotations.
    #[command(
        long_about = "Prints one line per frame: number, time since the first frame, addresses and \
UDP ports, DSCP/ECN, opcode, destination QP, PSN, flags, extension headers, payload length \
(len=), frame length (frame=), ICRC status, and annotations in [brackets] (retransmission, \
out of sequence, NAK, RNR NAK, duplicate ACK, path MTU learned, ...). Frames that break a \
rule of `rnic pcap check` are marked with !! and the reason. A summary goes to stderr.",
        after_help = "Examples:\n  rnic pcap dump demo.pcap\n  rnic pcap dump --roce -c 20 capture.pcap\n  rnic pcap dump capture.pcap | grep retransmission"
    )]
    Dump {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Only RoCEv2 and PAUSE/PFC frames.
        #[arg(long)]
        roce: bool,
        /// Stop after this many lines.
        #[arg(short = 'c', long = "count", value_name = "N")]
        count: Option<u64>,
    },
    /// Feed a capture's RC requests to our responder; report every difference from the capture's responses.
    #[command(
        long_about = "For each RC connection of the capture, sets up our responder from what the \
capture shows (addresses, QPNs, first PSN, path MTU, one memory region per R_Key, READ and \
atomic targets pre-filled from the capture's responses), feeds it the capture's requests, pairs \
its responses with the capture's by PSN and compares them field by field (opcode, PSN, \
destination QP, AETH syndrome and MSN, atomic original value, payload, ICRC). Our responses \
after the last one the capture holds for the connection, when the capture shows no frame of \
the responder's address after they were due (the slowest answer it shows on that connection, \
at least 1 ms, after the connection's last request), are listed as after the end of the \
capture, not as differences: a requester retrying into a responder that went silent shows \
nothing of what the responder owed. \
Memory is judged where the capture shows the WRITE acknowledged. A file that ends inside a \
frame is replayed up to the frame before it. The last line counts the responses that matched, \
differed and fell after the end. Exit status 1 when any differs.",
        after_help = "Examples:\n  rnic pcap replay rdma_write_bw.pcap\n  rnic pcap replay rping.pcap"
    )]
    Replay {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

#[derive(Args)]
struct StatsArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Read this saved run instead of the last one.
    #[arg(long, value_name = "FILE", conflicts_with = "daemon")]
    file: Option<PathBuf>,
    /// Ask the running rnicd devices instead: their transport, port, drop
    /// and RDMA CM counters.
    #[arg(long)]
    daemon: bool,
    /// With --daemon: rnicd's socket directory (default $SOFTRNIC_SOCK_DIR,
    /// else /run/softrnic).
    #[arg(long, value_name = "DIR", requires = "daemon")]
    sock_dir: Option<PathBuf>,
    /// With --daemon: also each QP's DCQCN reaction-point state (current
    /// and target rate, α, whether it is rate-limited, cuts, CNPs handled).
    #[arg(long, requires = "daemon")]
    qp: bool,
}

/// `rnic plot`: the CSV's series as an SVG.
fn plot(a: &PlotArgs) -> Result<(), CliError> {
    use tools::report::{read_csv, write_file, xy_svg, Labels};
    let series = read_csv(&a.csv)?;
    let labels = Labels {
        title: &a.title,
        x: &a.x_label,
        y: &a.y_label,
        log_y: a.log_y,
        log_x: !a.linear_x,
    };
    write_file(&a.out, xy_svg(&labels, &series))?;
    Ok(())
}

/// The subcommand words of the command line, for "see 'rnic perf --help'".
fn subcommand_path() -> String {
    let words = [
        "demo", "perf", "pingpong", "pcap", "check", "dump", "replay", "stats", "plot", "lab",
    ];
    let mut path = vec!["rnic".to_string()];
    for a in std::env::args().skip(1) {
        if words.contains(&a.as_str()) {
            path.push(a);
        } else {
            break;
        }
    }
    path.join(" ")
}

/// clap's error, in one line.
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut parts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if i == 0 {
            parts.push(l.trim_start_matches("error: ").to_string());
        } else if line.starts_with("  ")
            && (l.starts_with('[') || l.starts_with('<') || l.starts_with('-'))
        {
            parts.push(l.to_string());
        } else if l.starts_with("tip:") {
            parts.push(format!("({l})"));
        }
    }
    format!("{} (see '{} --help')", parts.join(" "), subcommand_path())
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
            s.to_string()
        } else if let Some(s) = info.payload().downcast_ref::<String>() {
            s.clone()
        } else {
            "unknown panic".to_string()
        };
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("rnic: internal error: {msg}{at} (a bug: please report it)");
    }));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                let _ = e.print();
                std::process::exit(0);
            }
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let _ = e.print();
                std::process::exit(2);
            }
            _ => {
                eprintln!("rnic: {}", one_line(&e));
                std::process::exit(2);
            }
        },
    };
    let command = std::iter::once("rnic".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let result: Result<(), CliError> = match cli.cmd {
        Cmd::Demo(a) => tools::demo::run(&tools::demo::DemoOptions {
            out: a.out,
            json: a.json,
            quick: a.quick,
            no_progress: a.no_progress,
            command,
        }),
        Cmd::Perf(a) if a.ib_port != 1 => Err(CliError::usage(format!(
            "-i {}: a soft RNIC has one port, port 1",
            a.ib_port
        ))),
        Cmd::Perf(a) => tools::perf::run(&PerfRequest {
            verb: Some(a.verb),
            mode: Some(a.mode),
            peer: a.peer,
            size: a.size,
            iters: a.iters,
            all: a.all,
            duration: a.duration,
            qps: a.qps,
            mtu: a.mtu.unwrap_or(0),
            port: a.port,
            tx_depth: a.tx_depth,
            connection: a.connection,
            report_gbits: a.report_gbits,
            dev: a.dev,
            loopback: a.loopback,
            json: a.json,
            hgrm: a.hgrm,
            plot: a.plot,
            pcap: a.pcap,
            pcap_frames: a.pcap_frames,
            no_progress: a.no_progress,
            backend: a.backend,
            gid: a.gid,
            core: a.core,
            engine: a.engine,
            cc: a.cc.cc,
            pfc_tx: a.cc.pfc_tx,
            dump_mem: a.dump_mem,
            command,
        }),
        Cmd::Exec {
            sock_dir,
            no_view,
            argv,
        } => tools::exec::run(sock_dir.as_deref(), !no_view, &argv),
        Cmd::Memcheck { ours, theirs } => tools::perf::dev::memcheck::check(&ours, &theirs)
            .and_then(|text| tools::say(&format!("{text}\n"))),
        Cmd::Pingpong(a) => pingpong(a),
        Cmd::Pcap { cmd } => match cmd {
            PcapCmd::Check {
                files,
                quiet,
                lossy,
            } => tools::pcapcmd::check(&files, quiet, lossy),
            PcapCmd::Dump { file, roce, count } => tools::pcapcmd::dump(&file, count, roce),
            PcapCmd::Replay { file } => tools::pcapcmd::replay(&file),
        },
        Cmd::Stats(a) if a.daemon => tools::stats::show_daemons(a.json, a.sock_dir, a.qp),
        Cmd::Stats(a) => tools::stats::show(a.json, a.file),
        Cmd::Plot(a) => plot(&a),
        Cmd::Lab(a) => tools::lab::run(a.file.as_deref(), a.flags(), &a.out),
    };
    if let Err(e) = result {
        eprintln!("rnic: {e}");
        std::process::exit(e.code);
    }
}
