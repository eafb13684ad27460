#!/usr/bin/env bash
# Real ports: two soft RNICs in two network namespaces joined by a veth pair
# (MTU 9000, IB MTU 4096), against the kernel's UDP over the same pair in
# the same run:
#   bandwidth  rnic perf write bw, 64 KiB messages, over AF_XDP (native and
#              generic XDP) and AF_PACKET (TPACKET_V2, the default ring, and
#              TPACKET_V3, afpacket-v3), vs iperf3 -u at the same payload
#              per frame (4096 bytes: a RoCE packet at IB MTU 4096 carries
#              4096 payload bytes) and per message (65507 bytes, the largest
#              UDP datagram, the closest to 64 KiB: the kernel fragments it
#              into 9000-byte frames); also 8972 bytes, one datagram per
#              9000-byte frame: what the receiver got
#   latency    rnic perf write lat, 64 B, half the round trip (as
#              ib_write_lat), vs sockperf ping-pong, 64 B, half the round
#              trip too: p50 / p99 / p99.9
# rnic's server runs on CPU 0 and its client on CPU 1 (each side is one
# busy-polling thread). The kernel's tools run both that way and in the
# placement that suits them best (sockperf: both on one CPU, which spares
# the wake-up IPI; iperf3: where the scheduler puts them). Each measurement
# runs ROUNDS times (default 3); the summary gives the median of the rounds
# and every round. RPS=1 steers each veth's receive processing to its own
# side's CPU (rps_cpus) for every measurement, rnic's and the kernel's.
#
# Needs root, iproute2, iperf3, sockperf, jq, util-linux (taskset): Debian
# apt-get install iperf3 sockperf jq; and a release build:
# cargo build --release -p tools.
# Usage: benches/veth.sh [OUT_DIR]   (env: ROUNDS, SECONDS_PER_RUN, LAT_ITERS,
#        RPS, QUIET_IDLE, QUIET_WAIT, RNIC; AFPACKET_ONLY=1 runs only the
#        AF_PACKET cases, V3 and V2 interleaved)
# AF_PACKET with TPACKET_V3 waits for the 1 ms block timer on every hop: its
# latency runs take 3000 samples, not LAT_ITERS.
# Not run by CI: benchmarks measure, tests assert.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
SECS=${SECONDS_PER_RUN:-5}
LAT_ITERS=${LAT_ITERS:-100000}
RPS=${RPS:-0}
AFPACKET_ONLY=${AFPACKET_ONLY:-0}
OUT=${1:-target/veth-bench}
RNIC=${RNIC:-$PWD/target/release/rnic}
# quiet-machine wait (QUIET_IDLE, QUIET_WAIT), the namespaces, the medians
. benches/common.sh

for t in ip iperf3 sockperf jq taskset; do
  command -v "$t" >/dev/null || { echo "veth.sh: $t is missing (apt-get install iproute2 iperf3 sockperf jq util-linux)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "veth.sh: needs root (network namespaces)" >&2; exit 1; }
[ -x "$RNIC" ] || { echo "veth.sh: build first: cargo build --release -p tools" >&2; exit 1; }

A=rnic-bencha-$$ B=rnic-benchb-$$ IA=rbva$$ IB=rbvb$$
ADDR_A=192.0.2.1 ADDR_B=192.0.2.2
trap del_netns EXIT INT TERM
veth_pair
for x in "$A $IA $ADDR_A 1" "$B $IB $ADDR_B 2"; do
  set -- $x
  ip -n "$1" link set "$2" mtu 9000
  ip -n "$1" addr add "$3/24" dev "$2"
  ip -n "$1" link set "$2" up
  if [ "$RPS" = 1 ]; then
    ip netns exec "$1" sh -c "echo $4 > /sys/class/net/$2/queues/rx-0/rps_cpus"
  fi
done

# where each side runs: "rnic" placement (server CPU 0, client CPU 1),
# "same" (both on CPU 0), "free" (the scheduler decides)
cpu_a() { case $1 in rnic) echo "taskset -c 0" ;; same) echo "taskset -c 0" ;; *) ;; esac; }
cpu_b() { case $1 in rnic) echo "taskset -c 1" ;; same) echo "taskset -c 0" ;; *) ;; esac; }

# rnic perf: server in A on CPU 0, client in B on CPU 1
rnic_perf() { # name args...
  local name=$1; shift
  wait_quiet
  ip netns exec "$A" taskset -c 0 "$RNIC" perf "$@" --dev "$IA" --no-progress >"$OUT/$name.server.txt" 2>&1 &
  local srv=$!
  ip netns exec "$B" taskset -c 1 "$RNIC" perf "$@" --dev "$IB" --no-progress \
    --json "$OUT/$name.json" "$ADDR_A" >"$OUT/$name.client.txt" 2>&1 || true
  wait "$srv" || true
}

bw_rnic() { # backend round -> Gbit/s
  rnic_perf "bw-$1-$2" write bw -m 4096 -s 65536 -D "$SECS" --backend "$1"
  jq '.results[0].bytes_per_sec * 8 / 1e9' "$OUT/bw-$1-$2.json" 2>/dev/null || echo nan
}

lat_rnic() { # backend iters round -> "p50 p99 p99.9" usec
  rnic_perf "lat-$1-$3" write lat -m 4096 -s 64 -n "$2" --backend "$1"
  jq -r '.results[0] | [.t_typical_usec, .p99_usec, .p99_9_usec] | @tsv' "$OUT/lat-$1-$3.json" 2>/dev/null ||
    printf 'nan\tnan\tnan\n'
}

bw_udp() { # payload placement round -> Gbit/s received
  wait_quiet
  ip netns exec "$A" $(cpu_a "$2") iperf3 -s -1 -B "$ADDR_A" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local f="$OUT/udp-$1-$2-$3.json"
  ip netns exec "$B" $(cpu_b "$2") iperf3 -u -c "$ADDR_A" -b 0 -l "$1" -t "$SECS" -J >"$f" 2>"${f%.json}.err" || true
  wait "$srv" || true
  jq '.end.sum.bits_per_second * (1 - .end.sum.lost_percent / 100) / 1e9' "$f" 2>/dev/null || echo nan
}

lat_udp() { # placement round -> "p50 p99 p99.9" usec (sockperf: half the round trip)
  wait_quiet
  ip netns exec "$A" $(cpu_a "$1") sockperf server -i "$ADDR_A" -p 11111 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local t="$OUT/sockperf-$1-$2.txt"
  ip netns exec "$B" $(cpu_b "$1") sockperf ping-pong -i "$ADDR_A" -p 11111 -m 64 -t "$SECS" >"$t" 2>&1 || true
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  local p q
  for p in 50.000 99.000 99.900; do
    q=$(grep -o "percentile $p = *[0-9.]*" "$t" | awk '{print $NF}')
    printf '%s\t' "${q:-nan}"
  done
  echo
}

{
  echo "# veth.sh $(date -u +%FT%TZ)"
  echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs, kernel $(uname -r)"
  echo "# $("$RNIC" --version), rounds $ROUNDS, ${SECS} s per bandwidth run, $LAT_ITERS latency samples, RPS=$RPS"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/summary.txt"

for r in $(seq 1 "$ROUNDS"); do
  add bw_p3 "$(bw_rnic afpacket-v3 "$r")"
  add bw_pkt "$(bw_rnic afpacket "$r")"
  read -r x y z <<<"$(lat_rnic afpacket-v3 3000 "$r")"
  add l50_afpacket-v3 "$x"; add l99_afpacket-v3 "$y"; add l999_afpacket-v3 "$z"
  read -r x y z <<<"$(lat_rnic afpacket "$LAT_ITERS" "$r")"
  add l50_afpacket "$x"; add l99_afpacket "$y"; add l999_afpacket "$z"
  if [ "$AFPACKET_ONLY" = 1 ]; then
    echo "# round $r done" >&2
    continue
  fi
  add bw_xdp "$(bw_rnic afxdp "$r")"
  add bw_gen "$(bw_rnic afxdp-generic "$r")"
  for p in rnic free; do
    add "u4_$p" "$(bw_udp 4096 "$p" "$r")"
    add "u64_$p" "$(bw_udp 65507 "$p" "$r")"
    add "u9_$p" "$(bw_udp 8972 "$p" "$r")"
  done
  for b in afxdp afxdp-generic; do
    read -r x y z <<<"$(lat_rnic "$b" "$LAT_ITERS" "$r")"
    add "l50_$b" "$x"; add "l99_$b" "$y"; add "l999_$b" "$z"
  done
  for p in rnic same; do
    read -r x y z <<<"$(lat_udp "$p" "$r")"
    add "u50_$p" "$x"; add "u99_$p" "$y"; add "u999_$p" "$z"
  done
  echo "# round $r done" >&2
done

{
  echo
  echo "| bandwidth, 64 KiB payload | Gbit/s, median | each round |"
  echo "|---|---|---|"
  echo "| rnic perf write bw, AF_XDP (native XDP) | $(m bw_xdp) | $(all bw_xdp)|"
  echo "| rnic perf write bw, AF_XDP (generic XDP) | $(m bw_gen) | $(all bw_gen)|"
  echo "| rnic perf write bw, AF_PACKET (TPACKET_V2) | $(m bw_pkt) | $(all bw_pkt)|"
  echo "| rnic perf write bw, AF_PACKET (TPACKET_V3) | $(m bw_p3) | $(all bw_p3)|"
  echo "| iperf3 -u -l 4096, received; CPUs as rnic | $(m u4_rnic) | $(all u4_rnic)|"
  echo "| iperf3 -u -l 4096, received; CPUs free | $(m u4_free) | $(all u4_free)|"
  echo "| iperf3 -u -l 65507, received; CPUs as rnic | $(m u64_rnic) | $(all u64_rnic)|"
  echo "| iperf3 -u -l 65507, received; CPUs free | $(m u64_free) | $(all u64_free)|"
  echo "| iperf3 -u -l 8972, received; CPUs as rnic | $(m u9_rnic) | $(all u9_rnic)|"
  echo "| iperf3 -u -l 8972, received; CPUs free | $(m u9_free) | $(all u9_free)|"
  echo
  echo "| latency, 64 B, half round trip (median of rounds) | p50 µs | p99 µs | p99.9 µs |"
  echo "|---|---|---|---|"
  echo "| rnic perf write lat, AF_XDP (native XDP) | $(m l50_afxdp) | $(m l99_afxdp) | $(m l999_afxdp) |"
  echo "| rnic perf write lat, AF_XDP (generic XDP) | $(m l50_afxdp-generic) | $(m l99_afxdp-generic) | $(m l999_afxdp-generic) |"
  echo "| rnic perf write lat, AF_PACKET (TPACKET_V2) | $(m l50_afpacket) | $(m l99_afpacket) | $(m l999_afpacket) |"
  echo "| rnic perf write lat, AF_PACKET (TPACKET_V3) | $(m l50_afpacket-v3) | $(m l99_afpacket-v3) | $(m l999_afpacket-v3) |"
  echo "| sockperf ping-pong; CPUs as rnic (server 0, client 1) | $(m u50_rnic) | $(m u99_rnic) | $(m u999_rnic) |"
  echo "| sockperf ping-pong; both on CPU 0 | $(m u50_same) | $(m u99_same) | $(m u999_same) |"
  echo
  echo "rnic AF_XDP p50 per round: $(all l50_afxdp); sockperf on one CPU p50 per round: $(all u50_same)"
  echo "# CPU idle % in the second before each measurement: $(tr '\n' ' ' <"$OUT/idle.txt")"
  echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee -a "$OUT/summary.txt"
