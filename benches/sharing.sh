#!/usr/bin/env bash
# An engine that shares the CPU: unmodified perftest latency over a veth
# pair between two network namespaces, one rnicd in each (BACKEND, default
# auto: AF_PACKET with UDP GSO on a veth), the
# programs on the drop-in through `rnic exec`, with nothing pinned: on a
# two-core machine two perftest processes and two engines share two CPUs.
#   spinning   ib_write_lat and ib_send_lat: both programs busy-poll
#   sleeping   ib_send_lat -e: both programs sleep on CQ events
#   small bw   ib_write_bw and ib_send_bw of 32 B messages: batches
#   shared     ib_write_bw -s 32 with the client and its engine pinned to
#              one CPU (rnicd --core 1, taskset -c 1): the engine wakes on
#              the CPU of the program that feeds it
# for each engine scheduling in PRIORITIES (rnicd --priority), idle spin
# in SPINS (rnicd --spin: idle turns before the engine parks) and
# SELF_WAKES (rnicd --self-wake-us: 0 makes every post on a parked engine
# wake it at once), against the
# kernel's UDP ping-pong (sockperf, 64 B) on the same veth in the same
# round. perftest's t_typical (its median) and 99 % percentile, half the
# round trip; sockperf's p50 and p99, half the round trip too. Beside each:
# the CPU both rnicd processes used, idle (the IDLE_SECS before the run)
# and during the run, in % of one CPU.
#
# Needs root, iproute2, perftest, sockperf and a release build (cargo build
# --release). Usage: benches/sharing.sh [OUT_DIR]
# (env: BACKEND (auto), ROUNDS (5), ITERS (20000), SIZE (64), PRIORITIES ("normal auto"),
# SPINS (300), SELF_WAKES (50), IDLE_SECS (3), QUIET_IDLE, QUIET_WAIT). Not run by CI: benchmarks
# measure, tests assert.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-20000}
SIZE=${SIZE:-64}
PRIORITIES=${PRIORITIES:-normal auto}
SPINS=${SPINS:-300}
SELF_WAKES=${SELF_WAKES:-50}
IDLE_SECS=${IDLE_SECS:-3}
OUT=${1:-target/sharing-bench}
. benches/common.sh

preflight sharing.sh "iproute2 perftest sockperf" ip ib_write_lat ib_send_lat sockperf

A=rnic-sha-$$ B=rnic-shb-$$ IA=rsva$$ IB=rsvb$$
ADDR_A=192.0.2.1 ADDR_B=192.0.2.2
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  del_netns
}
trap cleanup EXIT INT TERM
veth_pair
ip -n "$A" addr add "$ADDR_A/24" dev "$IA"; ip -n "$A" link set "$IA" up
ip -n "$B" addr add "$ADDR_B/24" dev "$IB"; ip -n "$B" link set "$IB" up

# CPU ticks (user + system) of the processes $@
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
pct() { awk -v t="$1" -v s="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", 100 * t / hz / s}'; }

# starts one rnicd per namespace with --priority $1 --spin $2
# --self-wake-us $3 (and rnicd b pinned to CPU 1 when PIN is set); sets DA,
# DB (pids)
start_rnicds() {
  local n
  for n in a b; do
    local ns=$A ifc=$IA addr=$ADDR_A pin=()
    [ $n = b ] && ns=$B ifc=$IB addr=$ADDR_B
    [ $n = b ] && [ -n "${PIN:-}" ] && pin=(--core 1)
    mkdir -p "$OUT/sock-$n"
    ip netns exec "$ns" "$BIN/rnicd" --iface "$ifc" --gid "$addr" --name "sh$n" \
      --sock-dir "$OUT/sock-$n" --backend "${BACKEND:-auto}" --priority "$1" --spin "$2" \
      --self-wake-us "$3" "${pin[@]}" >"$OUT/rnicd-$n.log" 2>&1 &
    PIDS+=($!)
    [ $n = a ] && DA=$! || DB=$!
  done
  local t0=$SECONDS
  until grep -q READY "$OUT/rnicd-a.log" && grep -q READY "$OUT/rnicd-b.log"; do
    [ $((SECONDS - t0)) -lt 20 ] || { cat "$OUT"/rnicd-*.log >&2; exit 1; }
    sleep 0.1
  done
}

stop_rnicds() { kill "$DA" "$DB" 2>/dev/null || true; wait "$DA" "$DB" 2>/dev/null || true; }

# one perftest run: priority spin self_wake name tool args... ->
# "typical p99 idle_cpu% load_cpu%" (bandwidth: "MB/s - idle% load%");
# PIN set: the client on CPU 1 with rnicd b's engine
perftest_lat() {
  local prio=$1 spin=$2 self_wake=$3 name=$4; shift 4
  local client=()
  [ -n "${PIN:-}" ] && client=(taskset -c 1)
  wait_quiet
  start_rnicds "$prio" "$spin" "$self_wake"
  local i0 i1 l0 l1 t0 t1
  i0=$(ticks "$DA" "$DB"); sleep "$IDLE_SECS"; i1=$(ticks "$DA" "$DB")
  ip netns exec "$A" "$BIN/rnic" exec --sock-dir "$OUT/sock-a" -- \
    "$@" -d sha -x 3 >"$OUT/$name.server.txt" 2>&1 &
  local srv=$!
  sleep 0.5
  l0=$(ticks "$DA" "$DB"); t0=$(date +%s.%N)
  timeout 300 ip netns exec "$B" "$BIN/rnic" exec --sock-dir "$OUT/sock-b" -- \
    "${client[@]}" "$@" -d shb -x 3 "$ADDR_A" >"$OUT/$name.client.txt" 2>&1 || true
  t1=$(date +%s.%N); l1=$(ticks "$DA" "$DB")
  wait "$srv" 2>/dev/null || true
  stop_rnicds
  local line
  line=$(grep -A1 '#bytes' "$OUT/$name.client.txt" | tail -1 || true)
  local cpu_idle cpu_run
  cpu_idle=$(pct $((i1 - i0)) "$IDLE_SECS")
  cpu_run=$(pct $((l1 - l0)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')")
  case $1 in
    *_bw)
      # #bytes #iterations BW_peak BW_average MsgRate (MB/s = 2^20 B/s)
      read -r _ _ _ bw _ <<<"${line:-x x x nan x}"
      printf '%s - %s %s\n' "$bw" "$cpu_idle" "$cpu_run" ;;
    *)
      # #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
      read -r _ _ _ _ typ _ _ p99 _ <<<"${line:-x x x x nan x x nan x}"
      printf '%s %s %s %s\n' "$typ" "$p99" "$cpu_idle" "$cpu_run" ;;
  esac
}

sockperf_lat() { # round -> "p50 p99"
  wait_quiet
  ip netns exec "$A" sockperf server -i "$ADDR_A" -p 11111 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local t="$OUT/sockperf-$1.txt"
  ip netns exec "$B" sockperf ping-pong -i "$ADDR_A" -p 11111 -m "$SIZE" -t 5 >"$t" 2>&1 || true
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  local p q out=""
  for p in 50.000 99.000; do
    q=$(grep -o "percentile $p = *[0-9.]*" "$t" | awk '{print $NF}')
    out+="${q:-nan} "
  done
  echo "$out"
}

{
  echo "# sharing.sh $(date -u +%FT%TZ)"
  echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs, kernel $(uname -r)"
  echo "# $("$BIN/rnic" --version), commit $(git rev-parse --short HEAD), rounds $ROUNDS, $ITERS iterations, $SIZE B"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/summary.txt"

CONFIGS=$(for p in $PRIORITIES; do for s in $SPINS; do for w in $SELF_WAKES; do echo "$p/$s/$w"; done; done; done)
LAT="-s $SIZE -n $ITERS"
CASES=("write_lat:ib_write_lat $LAT" "send_lat:ib_send_lat $LAT" "send_lat_e:ib_send_lat -e $LAT"
  "write_bw:ib_write_bw -s 65536 -D 5" "write_bw_32:ib_write_bw -s 32 -n $ITERS"
  "send_bw_32:ib_send_bw -s 32 -n $ITERS" "shared_write_bw_32:ib_write_bw -s 32 -n $ITERS")
for r in $(seq 1 "$ROUNDS"); do
  for p in $CONFIGS; do
    IFS=/ read -r prio spin wake <<<"$p"
    for c in "${CASES[@]}"; do
      key=${c%%:*} tool=${c#*:}
      PIN=
      [[ $key = shared_* ]] && PIN=1
      # shellcheck disable=SC2086
      read -r typ p99 idle load <<<"$(PIN=$PIN perftest_lat "$prio" "$spin" "$wake" "$key-${p//\//-}-$r" $tool)"
      add "typ_${key}_$p" "$typ"; add "p99_${key}_$p" "$p99"
      add "idle_${key}_$p" "$idle"; add "load_${key}_$p" "$load"
    done
  done
  read -r x y <<<"$(sockperf_lat "$r")"
  add u50 "$x"; add u99 "$y"
  echo "# round $r done" >&2
done

{
  echo
  echo "| median of $ROUNDS ($SIZE B latency: half round trip) | --priority / --spin / --self-wake-us | typical / p50 µs, or MB/s | p99 µs | rnicd CPU idle % | rnicd CPU during % |"
  echo "|---|---|---|---|---|---|"
  for p in $CONFIGS; do
    for c in "${CASES[@]}"; do
      key=${c%%:*} tool=${c#*:}
      pin=""
      [[ $key = shared_* ]] && pin=", client and engine on CPU 1"
      echo "| $tool (drop-in$pin) | $p | $(m "typ_${key}_$p") | $(m "p99_${key}_$p") | $(m "idle_${key}_$p") | $(m "load_${key}_$p") |"
    done
  done
  echo "| sockperf ping-pong (kernel UDP) | | $(m u50) | $(m u99) | | |"
  echo
  for p in $CONFIGS; do
    for c in "${CASES[@]}"; do
      key=${c%%:*}
      echo "typical per round, $key $p: $(all "typ_${key}_$p")"
    done
  done
  echo "sockperf p50 per round: $(all u50)"
  echo "# CPU idle % in the second before each measurement: $(tr '\n' ' ' <"$OUT/idle.txt")"
  echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee -a "$OUT/summary.txt"
