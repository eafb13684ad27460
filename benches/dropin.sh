#!/usr/bin/env bash
# The libibverbs drop-in against softrnic's own C API, in one run: the same
# program (benches/dropin/write_bench.c: ib_write_bw's and ib_write_lat's
# loops, both QPs driven from one thread) built once against libibverbs
# (run with softrnic's libibverbs.so.1 first on the library path) and once
# against srnic_* (libsoftrnic.so), on one `rnicd --mem-pair --one-thread`.
# For each size the two builds alternate ROUNDS times (default 5); the
# summary gives each one's median over the rounds and the ratio of the
# medians (bandwidth: drop-in / native; latency: drop-in - native).
#
# Needs a C compiler and libibverbs-dev (the headers; the program links
# rdma-core's libibverbs.so and loads ours at run time); no root.
# Usage: benches/dropin.sh [OUT_DIR]   (env: ROUNDS, BW_ITERS, LAT_ITERS,
#        SIZES_BW, SIZES_LAT)
# Not run by CI: benchmarks measure, tests assert.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
BW_ITERS=${BW_ITERS:-20000}
LAT_ITERS=${LAT_ITERS:-20000}
SIZES_BW=${SIZES_BW:-"64 4096 65536"}
SIZES_LAT=${SIZES_LAT:-"2 64 4096"}
OUT=${1:-target/bench-dropin}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
T=target/release

cargo build --release -q -p rnicd -p softrnic -p softrnic-ibverbs --bins --lib
INC=softrnic/include
cc -O2 -Wall -DAPI_VERBS -o "$OUT/bench_verbs" benches/dropin/write_bench.c -libverbs
cc -O2 -Wall -DAPI_SRNIC -I"$INC" -o "$OUT/bench_srnic" benches/dropin/write_bench.c \
  -L"$T" -lsoftrnic -Wl,-rpath,"$(realpath $T)"

SOCK=$(mktemp -d)
"$T/rnicd" --mem-pair --one-thread --name b --sock-dir "$SOCK" > "$OUT/rnicd.log" 2>&1 &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null; rm -rf "$SOCK"' EXIT
for _ in $(seq 100); do [ -S "$SOCK/b1.sock" ] && break; sleep 0.1; done
[ -S "$SOCK/b1.sock" ] || { cat "$OUT/rnicd.log"; exit 1; }

run() {  # run verbs|srnic bw|lat SIZE ITERS
  local api=$1; shift
  if [ "$api" = verbs ]; then
    LD_LIBRARY_PATH=$(realpath "$T/softrnic-ibverbs") "$OUT/bench_verbs" "$SOCK" b0 b1 "$@"
  else
    "$OUT/bench_srnic" "$SOCK" b0 b1 "$@"
  fi
}

: > "$OUT/raw.txt"
for r in $(seq "$ROUNDS"); do
  for s in $SIZES_BW; do
    for api in verbs srnic; do run $api bw "$s" "$BW_ITERS" | tee -a "$OUT/raw.txt"; done
  done
  for s in $SIZES_LAT; do
    for api in verbs srnic; do run $api lat "$s" "$LAT_ITERS" | tee -a "$OUT/raw.txt"; done
  done
done

echo
echo "---- medians of $ROUNDS rounds (machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs)"
awk '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  $2 == "bw"  { bw[$1 " " $3] = bw[$1 " " $3] " " $5; sizes_bw[$3] = 1 }
  $2 == "lat" { p50[$1 " " $3] = p50[$1 " " $3] " " $5; avg[$1 " " $3] = avg[$1 " " $3] " " $6; sizes_lat[$3] = 1 }
  END {
    printf "%-10s %12s %12s %10s\n", "bw size", "drop-in Gb/s", "srnic Gb/s", "ratio"
    for (s in sizes_bw) {
      v = median(bw["verbs " s]); n = median(bw["srnic " s])
      printf "%-10s %12.3f %12.3f %10.3f\n", s, v, n, v / n
    }
    printf "%-10s %12s %12s %10s %12s %12s %10s\n", "lat size", "drop-in p50", "srnic p50", "diff us", "drop-in avg", "srnic avg", "diff us"
    for (s in sizes_lat) {
      v = median(p50["verbs " s]); n = median(p50["srnic " s])
      va = median(avg["verbs " s]); na = median(avg["srnic " s])
      printf "%-10s %12.3f %12.3f %10.3f %12.3f %12.3f %10.3f\n", s, v, n, v - n, va, na, va - na
    }
  }' "$OUT/raw.txt" | tee "$OUT/summary.txt"
