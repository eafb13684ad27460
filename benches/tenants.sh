#!/usr/bin/env bash
# Many tenants on one rnicd: CLIENTS client processes, each an unmodified
# `ib_write_bw -q QPS` through the drop-in, all at once against as many
# servers, on one `rnicd --mem-pair` (the clients on device tn1, the
# servers on tn0). Against one client alone with the same QPs, alternated
# in every round. Each client prints its bandwidth every second
# (--run_infinitely); once all of them run, a WINDOW is measured:
#   aggregate   the bytes device tn1 sent in the window (rnicd's tx_bytes),
#               as a share of the lone client's
#   fairness    Jain's index over the clients' own figures in the window:
#               (Σx)² / (n·Σx²), 1 = equal; a client with none counts 0
#   CPU         rnicd's CPU during each run, % of one CPU, and cycles per
#               byte moved (rnicd's CPU time × the CPU's clock / bytes)
# The per-QP idle cost is `cargo bench -p benches --bench idle_turn`.
#
# Needs perftest and a release build; no root (the pair is in memory).
# Usage: benches/tenants.sh [OUT_DIR]
# (env: ROUNDS (3), CLIENTS (64), QPS (16), SIZE (65536), WINDOW (10 s
# measured once every client runs), STARTUP (300 s for them to start),
# RNICD_ARGS (more rnicd flags), QUIET_IDLE, QUIET_WAIT). Not run by CI: benchmarks measure, tests assert.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-64}
QPS=${QPS:-16}
SIZE=${SIZE:-65536}
WINDOW=${WINDOW:-10}
STARTUP=${STARTUP:-300}
RNICD_ARGS=${RNICD_ARGS:-}
OUT=${1:-target/tenants-bench}
. benches/common.sh

command -v ib_write_bw >/dev/null || { echo "tenants.sh: ib_write_bw is missing (apt-get install perftest)" >&2; exit 1; }
[ -x "$BIN/rnicd" ] && [ -x "$BIN/rnic" ] || { echo "tenants.sh: build first: cargo build --release" >&2; exit 1; }

SOCK=$OUT/sock
PORT0=$((20000 + ($$ % 2000) * 10))
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

mkdir -p "$SOCK"
# shellcheck disable=SC2086
"$BIN/rnicd" --mem-pair --name tn --sock-dir "$SOCK" $RNICD_ARGS >"$OUT/rnicd.log" 2>&1 &
D=$!
PIDS+=("$D")
t0=$SECONDS
until grep -q READY "$OUT/rnicd.log"; do
  [ $((SECONDS - t0)) -lt 20 ] || { cat "$OUT/rnicd.log" >&2; exit 1; }
  sleep 0.1
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# bytes device tn1 (the clients' side) has sent so far
tx_bytes() {
  "$BIN/rnic" stats --daemon --sock-dir "$SOCK" | awk '$2 == "tn1/1" {for (i = 3; i < NF; i++) if ($i == "tx_bytes") print $(i + 1)}'
}
HZ=$(getconf CLK_TCK)
MHZ=$(awk -F: '/^cpu MHz/ {print $2; exit}' /proc/cpuinfo | tr -d ' ')

# stamps each line of stdin with the time (s since the epoch)
stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }

# the mean of a client's per-second BW lines stamped within [$2, $3]
window_mean() {
  awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b && $2 ~ /^[0-9]+$/ && NF >= 6 {s += $5; n++}
    END {if (n) printf "%.2f\n", s / n; else print "nan"}' "$1"
}

# n clients at once, each `ib_write_bw --run_infinitely` printing its
# bandwidth every second; once every client prints, WINDOW seconds are
# measured -> one line per client: its mean MB/s in the window (or
# "nan"); then "cpu PCT CYCLES_PER_BYTE" for rnicd in the window
run() {
  local n=$1 tag=$2 i
  wait_quiet
  local pids=()
  for i in $(seq 0 $((n - 1))); do
    "$BIN/rnic" exec --sock-dir "$SOCK" -- timeout $((STARTUP + WINDOW + 10)) ib_write_bw -d tn0 -x 3 -F \
      -q "$QPS" -s "$SIZE" -D 1 --run_infinitely -p $((PORT0 + i)) >"$OUT/$tag-s$i.txt" 2>&1 &
    pids+=($!)
  done
  sleep 1
  for i in $(seq 0 $((n - 1))); do
    "$BIN/rnic" exec --sock-dir "$SOCK" -- timeout $((STARTUP + WINDOW + 10)) ib_write_bw -d tn1 -x 3 -F \
      -q "$QPS" -s "$SIZE" -D 1 --run_infinitely -p $((PORT0 + i)) 127.0.0.1 > >(stamp >"$OUT/$tag-c$i.txt") 2>&1 &
    pids+=($!)
  done
  # every client reports (two lines: past its first second)
  local t0=$SECONDS all
  while :; do
    all=1
    for i in $(seq 0 $((n - 1))); do
      [ "$(awk '$2 ~ /^[0-9]+$/ && NF >= 6' "$OUT/$tag-c$i.txt" 2>/dev/null | wc -l)" -ge 2 ] || { all=0; break; }
    done
    [ $all = 1 ] && break
    [ $((SECONDS - t0)) -lt "$STARTUP" ] || { echo "tenants.sh: not every client ran within ${STARTUP}s" >&2; break; }
    sleep 0.5
  done
  local c0 c1 w0 w1 b0 b1
  # the CPU and the clock read as soon as rnicd answered (an answer can
  # take seconds among busy-polling clients): CPU, bytes and time then
  # cover the same stretch
  b0=$(tx_bytes); c0=$(ticks "$D"); w0=$EPOCHREALTIME
  sleep "$WINDOW"
  b1=$(tx_bytes); c1=$(ticks "$D"); w1=$EPOCHREALTIME
  echo "# $tag: all $n running after $((SECONDS - t0)) s; window $(date -u -d "@${w0%.*}" +%T)-$(date -u -d "@${w1%.*}" +%T)" >&2
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  local bws
  bws=$(for i in $(seq 0 $((n - 1))); do window_mean "$OUT/$tag-c$i.txt" "$w0" "$w1"; done)
  echo "$bws"
  # the window's bytes and rnicd's CPU in it
  awk -v c=$((c1 - c0)) -v hz="$HZ" -v a="$w0" -v b="$w1" -v bytes=$((b1 - b0)) -v mhz="$MHZ" 'BEGIN {
    secs = c / hz; pct = 100 * secs / (b - a);
    printf "cpu %.1f %.2f %s\n", pct, bytes / 1048576 / (b - a),
      (bytes > 0 ? sprintf("%.3f", secs * mhz * 1e6 / bytes) : "nan") }'
}

{
  echo "# tenants.sh $(date -u +%FT%TZ)"
  echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs, kernel $(uname -r)"
  echo "# $("$BIN/rnic" --version), commit $(git rev-parse --short HEAD), rounds $ROUNDS"
  echo "# $CLIENTS clients x $QPS QPs, ib_write_bw -s $SIZE, a ${WINDOW} s window, one rnicd --mem-pair $RNICD_ARGS"
} | tee "$OUT/summary.txt"

for r in $(seq 1 "$ROUNDS"); do
  out=$(run 1 "one-$r")
  one=$(echo "$out" | head -1)
  read -r _ cpu1 dev1 cpb1 <<<"$(echo "$out" | tail -1)"
  add one "$one"; add dev1 "$dev1"; add cpu1 "$cpu1"; add cpb1 "$cpb1"
  out=$(run "$CLIENTS" "many-$r")
  echo "$out" | grep -v '^cpu' >"$OUT/many-$r.bw"
  read -r _ cpun devn cpbn <<<"$(echo "$out" | tail -1)"
  # Jain over the clients' own figures; a client with none in the window
  # counts as 0
  read -r agg jain got <<<"$(awk '{x = ($1 == "nan" ? 0 : $1); s += x; q += x * x; n++; if ($1 != "nan") g++}
    END {if (q > 0) printf "%.2f %.3f %d\n", s, s * s / (n * q), g; else print "0 0 0" }' "$OUT/many-$r.bw")"
  add agg "$agg"; add devn "$devn"; add jain "$jain"; add cpun "$cpun"; add cpbn "$cpbn"
  add share "$(awk -v a="$devn" -v o="$dev1" 'BEGIN {printf "%.3f", (o > 0 ? a / o : 0)}')"
  echo "# round $r: one client $dev1 MB/s (its own figure $one); $CLIENTS clients $devn MB/s (their figures: $got reported, sum $agg), Jain $jain" | tee -a "$OUT/summary.txt" >&2
done

{
  echo
  echo "| median of $ROUNDS | MB/s (rnicd tx_bytes) | share of one client | Jain (the clients' figures) | rnicd CPU % | rnicd cycles/B |"
  echo "|---|---|---|---|---|---|"
  echo "| one client, $QPS QPs | $(m dev1) | 1 | - | $(m cpu1) | $(m cpb1) |"
  echo "| $CLIENTS clients × $QPS QPs | $(m devn) | $(m share) | $(m jain) | $(m cpun) | $(m cpbn) |"
  echo
  echo "one client per round: $(all dev1)"
  echo "all clients per round: $(all devn)"
  echo "Jain per round: $(all jain)"
  echo "# CPU idle % in the second before each measurement: $(tr '\n' ' ' <"$OUT/idle.txt")"
} | tee -a "$OUT/summary.txt"
