#!/usr/bin/env bash
# UDP GSO over AF_PACKET on a veth: unmodified perftest through the drop-in
# between two namespaces, one rnicd in each, with the port
#   afxdp        rnicd --backend afxdp (copy mode on veth)
#   afpacket     rnicd --backend afpacket --gso off (frame by frame)
#   gso          rnicd --backend afpacket --gso on (trains as super-frames;
#                what --backend auto opens on a veth)
# against one kernel TCP stream (iperf3 -l SIZE) on the same veth, the four
# alternating within each round, for each veth MTU in MTUS (9000 1500):
# ib_write_bw -s SIZE -D SECS (SIZES: 65536 1048576), and ib_write_lat
# -s 64 -n LAT_ITERS (typical and 99 %, half the round trip) for the three
# ports. Prints the medians of ROUNDS rounds and every round.
#
# Needs root, iproute2, perftest, iperf3, jq and a release build (cargo
# build --release). Usage: benches/gso.sh [OUT_DIR] (env: ROUNDS (3), MTUS,
# SIZES, SECS (5), LAT_ITERS (20000), QUIET_IDLE, QUIET_WAIT). Not run by
# CI: benchmarks measure, tests assert.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
MTUS=${MTUS:-9000 1500}
SIZES=${SIZES:-65536 1048576}
SECS=${SECS:-5}
LAT_ITERS=${LAT_ITERS:-20000}
OUT=${1:-target/gso-bench}
. benches/common.sh

preflight gso.sh "iproute2 perftest iperf3 jq" ip ib_write_bw ib_write_lat iperf3 jq

A=rnic-gsoa-$$ B=rnic-gsob-$$ IA=rgsa$$ IB=rgsb$$
ADDR_A=192.0.2.1 ADDR_B=192.0.2.2
DA='' DB=''
stop_rnicd() { kill $DA $DB 2>/dev/null || true; wait $DA $DB 2>/dev/null || true; DA='' DB=''; }
trap 'stop_rnicd; del_netns' EXIT INT TERM
veth_pair
for x in "$A $IA $ADDR_A" "$B $IB $ADDR_B"; do
  set -- $x
  ip -n "$1" addr add "$3/24" dev "$2"
  ip -n "$1" link set "$2" up
done

declare -A FLAGS=([afxdp]="--backend afxdp" [afpacket]="--backend afpacket --gso off" [gso]="--backend afpacket --gso on")
PORTS="afxdp afpacket gso"

# Both rnicd with port $1's flags; READY before returning.
start_rnicd() {
  local d
  for d in a b; do rm -rf "$OUT/sock-$d"; mkdir -p "$OUT/sock-$d"; done
  ip netns exec "$A" "$BIN/rnicd" --iface "$IA" --gid $ADDR_A --name ga --sock-dir "$OUT/sock-a" ${FLAGS[$1]} > "$OUT/rnicd-a.log" 2>&1 & DA=$!
  ip netns exec "$B" "$BIN/rnicd" --iface "$IB" --gid $ADDR_B --name gb --sock-dir "$OUT/sock-b" ${FLAGS[$1]} > "$OUT/rnicd-b.log" 2>&1 & DB=$!
  until grep -q READY "$OUT/rnicd-a.log" && grep -q READY "$OUT/rnicd-b.log"; do
    kill -0 $DA $DB 2>/dev/null || { echo "gso.sh: rnicd failed: $(cat "$OUT"/rnicd-*.log)" >&2; exit 1; }
    sleep 0.1
  done
}

# perftest $1 (ib_write_bw | ib_write_lat) with args $2 through the
# drop-ins; the client's report in $OUT/pt.txt.
perftest() {
  ip netns exec "$A" "$BIN/rnic" exec --sock-dir "$OUT/sock-a" -- timeout 120 "$1" -d ga -x 3 -F $2 > "$OUT/pt-srv.txt" 2>&1 & local s=$!
  sleep 0.5
  ip netns exec "$B" "$BIN/rnic" exec --sock-dir "$OUT/sock-b" -- timeout 120 "$1" -d gb -x 3 -F $2 $ADDR_A > "$OUT/pt.txt" 2>&1 || true
  wait $s || true
}

tcp() { # size -> MB/s received
  ip netns exec "$A" iperf3 -s -1 > /dev/null 2>&1 & local s=$!
  sleep 0.5
  ip netns exec "$B" iperf3 -c $ADDR_A -t "$SECS" -l "$1" -J 2>/dev/null | jq '.end.sum_received.bits_per_second / 8e6' || echo -
  wait $s 2>/dev/null || true
}

for mtu in $MTUS; do
  ip -n "$A" link set "$IA" mtu "$mtu"
  ip -n "$B" link set "$IB" mtu "$mtu"
  for ((r = 1; r <= ROUNDS; r++)); do
    for p in $PORTS; do
      start_rnicd "$p"
      for s in $SIZES; do
        wait_quiet
        perftest ib_write_bw "-s $s -D $SECS"
        add "$mtu bw $s $p" "$(awk -v s="$s" '$1 == s && NF >= 4 { print $4 }' "$OUT/pt.txt" | tail -1)"
      done
      wait_quiet
      perftest ib_write_lat "-s 64 -n $LAT_ITERS"
      add "$mtu lat typ $p" "$(awk '$1 == 64 && NF >= 8 { print $5 }' "$OUT/pt.txt" | tail -1)"
      add "$mtu lat p99 $p" "$(awk '$1 == 64 && NF >= 8 { print $8 }' "$OUT/pt.txt" | tail -1)"
      stop_rnicd
    done
    for s in $SIZES; do
      wait_quiet
      add "$mtu bw $s tcp" "$(tcp "$s")"
    done
  done
done

echo "commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) CPUs, kernel $(uname -r), $ROUNDS rounds"
for mtu in $MTUS; do
  echo
  echo "| MTU $mtu | $(for s in $SIZES; do printf 'write_bw %s B MB/s | ' "$s"; done)write_lat 64 B typ / p99 µs |"
  echo "|---|$(for s in $SIZES; do printf -- '---|'; done)---|"
  for p in $PORTS tcp; do
    row="| $p |"
    for s in $SIZES; do row+=" $(m "$mtu bw $s $p") ($(all "$mtu bw $s $p")) |"; done
    if [ "$p" = tcp ]; then row+=" |"; else row+=" $(m "$mtu lat typ $p") / $(m "$mtu lat p99 $p") |"; fi
    echo "$row"
  done
done | tee "$OUT/summary.md"
