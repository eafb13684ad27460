#!/usr/bin/env bash
# Many tenants on one rnicd: CLIENTS client processes, each an unmodified
# `ib_write_bw -q QPS` through the drop-in, all at once against as many
# servers, on one `rnicd --mem-pair` (the clients on device tn1, the
# servers on tn0). Against one client alone with the same QPs, alternated
# in every round:
#   aggregate   the sum of the clients' BW average, as a share of the lone
#               client's (every client's QPs share one engine per device)
#   fairness    Jain's index over the clients: (Σx)² / (n·Σx²), 1 = equal
#   CPU         rnicd's CPU during each run, % of one CPU, and cycles per
#               byte moved (rnicd's CPU time × the CPU's clock / bytes)
# The per-QP idle cost is `cargo bench -p benches --bench idle_turn`.
#
# Needs perftest and a release build; no root (the pair is in memory).
# Usage: benches/tenants.sh [OUT_DIR]
# (env: ROUNDS (3), CLIENTS (64), QPS (16), SIZE (65536), DURATION (10),
# QUIET_IDLE, QUIET_WAIT). Not run by CI: benchmarks measure, tests assert.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-64}
QPS=${QPS:-16}
SIZE=${SIZE:-65536}
DURATION=${DURATION:-10}
OUT=${1:-target/tenants-bench}
BIN=$PWD/target/release
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT/idle.txt"
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
"$BIN/rnicd" --mem-pair --name tn --sock-dir "$SOCK" >"$OUT/rnicd.log" 2>&1 &
D=$!
PIDS+=("$D")
t0=$SECONDS
until grep -q READY "$OUT/rnicd.log"; do
  [ $((SECONDS - t0)) -lt 20 ] || { cat "$OUT/rnicd.log" >&2; exit 1; }
  sleep 0.1
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
MHZ=$(awk -F: '/^cpu MHz/ {print $2; exit}' /proc/cpuinfo | tr -d ' ')

# n clients at once -> one line per client: "MB/s" (or "nan"); then a
# line "cpu PCT CYCLES_PER_BYTE"
run() {
  local n=$1 tag=$2 i
  wait_quiet
  local srv=()
  for i in $(seq 0 $((n - 1))); do
    "$BIN/rnic" exec --sock-dir "$SOCK" -- ib_write_bw -d tn0 -x 3 -F -q "$QPS" -s "$SIZE" \
      -D "$DURATION" -p $((PORT0 + i)) >"$OUT/$tag-s$i.txt" 2>&1 &
    srv+=($!)
  done
  sleep 1
  local c0 w0 w1 c1
  c0=$(ticks "$D"); w0=$(date +%s.%N)
  local cli=()
  for i in $(seq 0 $((n - 1))); do
    timeout $((DURATION * 4 + 60)) "$BIN/rnic" exec --sock-dir "$SOCK" -- ib_write_bw -d tn1 -x 3 -F \
      -q "$QPS" -s "$SIZE" -D "$DURATION" -p $((PORT0 + i)) 127.0.0.1 >"$OUT/$tag-c$i.txt" 2>&1 &
    cli+=($!)
  done
  wait "${cli[@]}" 2>/dev/null || true
  w1=$(date +%s.%N); c1=$(ticks "$D")
  wait "${srv[@]}" 2>/dev/null || true
  local bws
  bws=$(for i in $(seq 0 $((n - 1))); do
    awk '/^ *#bytes/ {t=1; next} t && /^ *[0-9]+ +[0-9]+/ {print $4; f=1; exit} END {if (!f) print "nan"}' "$OUT/$tag-c$i.txt"
  done)
  echo "$bws"
  # bytes moved: the clients' MB/s (2^20 B) over the duration
  local total
  total=$(echo "$bws" | awk '$1 != "nan" {s += $1} END {print s + 0}')
  awk -v c=$((c1 - c0)) -v hz="$HZ" -v a="$w0" -v b="$w1" -v tot="$total" -v dur="$DURATION" -v mhz="$MHZ" 'BEGIN {
    secs = c / hz; pct = 100 * secs / (b - a); bytes = tot * 1048576 * dur;
    printf "cpu %.1f %s\n", pct, (bytes > 0 ? sprintf("%.3f", secs * mhz * 1e6 / bytes) : "nan") }'
}

{
  echo "# tenants.sh $(date -u +%FT%TZ)"
  echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs, kernel $(uname -r)"
  echo "# $("$BIN/rnic" --version), commit $(git rev-parse --short HEAD), rounds $ROUNDS"
  echo "# $CLIENTS clients x $QPS QPs, ib_write_bw -s $SIZE -D $DURATION, one rnicd --mem-pair"
} | tee "$OUT/summary.txt"

for r in $(seq 1 "$ROUNDS"); do
  out=$(run 1 "one-$r")
  one=$(echo "$out" | head -1)
  read -r _ cpu1 cpb1 <<<"$(echo "$out" | tail -1)"
  add one "$one"; add cpu1 "$cpu1"; add cpb1 "$cpb1"
  out=$(run "$CLIENTS" "many-$r")
  echo "$out" | grep -v '^cpu' >"$OUT/many-$r.bw"
  read -r _ cpun cpbn <<<"$(echo "$out" | tail -1)"
  read -r agg jain got <<<"$(awk '$1 != "nan" {s += $1; q += $1 * $1; n++} END {
    if (n) printf "%.2f %.3f %d\n", s, s * s / (n * q), n; else print "nan nan 0" }' "$OUT/many-$r.bw")"
  add agg "$agg"; add jain "$jain"; add cpun "$cpun"; add cpbn "$cpbn"
  add share "$(awk -v a="$agg" -v o="$one" 'BEGIN {printf "%.3f", (o > 0 ? a / o : 0)}')"
  echo "# round $r: one $one MB/s; $got of $CLIENTS clients reported, sum $agg MB/s, Jain $jain" | tee -a "$OUT/summary.txt" >&2
done

{
  echo
  echo "| median of $ROUNDS | MB/s | share of one client | Jain | rnicd CPU % | rnicd cycles/B |"
  echo "|---|---|---|---|---|---|"
  echo "| one client, $QPS QPs | $(m one) | 1 | - | $(m cpu1) | $(m cpb1) |"
  echo "| $CLIENTS clients × $QPS QPs, sum | $(m agg) | $(m share) | $(m jain) | $(m cpun) | $(m cpbn) |"
  echo
  echo "one client per round: $(all one)"
  echo "sum per round: $(all agg)"
  echo "Jain per round: $(all jain)"
  echo "# CPU idle % in the second before each measurement: $(tr '\n' ' ' <"$OUT/idle.txt")"
} | tee -a "$OUT/summary.txt"
