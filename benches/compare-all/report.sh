#!/usr/bin/env bash
# benches/compare-all/report.sh OUT DOC: the table and plots of one
# benches/compare-all.sh run from OUT/raw.csv (stage,contender,test,size,
# round,metric,value), OUT/machine.txt and OUT/stages.txt:
#   OUT/summary.csv   stage,contender,test,size,metric,n,median,min,max
#   DOC.md            the Markdown tables: per stage bandwidth with CPU per
#                     byte and per message, latency percentiles, and the
#                     goals of issue #33 (item 2) as ratios, met or missed
#   DOC-STAGE-{bw,lat,cpb}.svg   bandwidth, latency (p50, p99) and cycles
#                     per byte against message size (`rnic plot`)
# Runs again on a finished run's OUT to rewrite the table.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: report.sh OUT_DIR DOC_PREFIX}
DOC=${2:?usage: report.sh OUT_DIR DOC_PREFIX}
RNIC=${RNIC:-target/release/rnic}
RAW=$OUT/raw.csv
SUM=$OUT/summary.csv
mkdir -p "$(dirname "$DOC")"

# the median (the mean of the middle two for an even count), min and max
sort -t, -k1,1 -k2,2 -k3,3 -k4,4n -k6,6 -k7,7g "$RAW" | awk -F, '
  function flush() {
    if (n == 0) return
    med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    printf "%s,%d,%.6g,%.6g,%.6g\n", key, n, med, v[1], v[n]
    n = 0
  }
  { k = $1 "," $2 "," $3 "," $4 "," $6
    if (k != key) { flush(); key = k }
    v[++n] = $7 }
  END { flush() }' > "$SUM"

MHZ=$(sed -n 's/.*cpu MHz \([0-9.]*\).*/\1/p' "$OUT/machine.txt" | head -n1)
# tables STAGE: bandwidth rows (with CPU) and latency rows of one stage,
# ordered by test, size and contender
tables() {
  awk -F, -v st="$1" '$1 == st' "$SUM" | sort -t, -k3,3 -k4,4n -k2,2 | awk -F, '
    function f(x) { return x == "" ? "-" : x }
    function spread(k) { return (k in med) ? sprintf("%s (%s–%s)", med[k], lo[k], hi[k]) : "-" }
    BEGIN {
      lab["rxe"] = "Linux rxe"; lab["softrnic"] = "softrnic (rnicd + drop-in)"
      lab["softrnic-local"] = "softrnic, device in each program (SOFTRNIC_LOCAL)"
      lab["softrnic-daemon"] = "softrnic, rnicd --mem-pair + drop-in"
      lab["softrnic-inproc"] = "softrnic in-process (rnic perf --loopback)"
      lab["icrc+copy-floor"] = "ICRC+copy floor (wire::crc_copy)"; lab["memcpy"] = "memcpy"
      lab["tcp"] = "kernel TCP (iperf3, 1 stream, -l size)"; lab["udp"] = "kernel UDP (iperf3 -u -b 0 -l 16 … 65507, received)"
      lab["sockperf"] = "kernel UDP ping-pong (sockperf, 14 B at least)"
    }
    { b = $2 "," $3 "," $4; k = b "," $5; med[k] = $7; lo[k] = $8; hi[k] = $9; nn[b] = $6
      if (!(b in seen)) { seen[b] = 1; order[++n] = b } }
    END {
      for (i = 1; i <= n; i++) {
        b = order[i]; split(b, a, ","); c = a[1]; t = a[2]; s = a[3]
        name = (c in lab) ? lab[c] : c
        if ((b ",gbps") in med)
          bw = bw sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t, s, name, spread(b ",gbps"),
            f(med[b ",mmps"]), f(med[b ",cpb_proc"]), f(med[b ",cpm_proc"]), f(med[b ",cpb_sys"]), nn[b])
        if ((b ",p50") in med)
          lat = lat sprintf("| %s | %s | %s | %s | %s | %s | %s |\n", t, s, name, spread(b ",p50"),
            f(med[b ",p99"]), f(med[b ",p999"]), nn[b])
      }
      if (bw != "") printf "Bandwidth (cycles: CPU time x %s MHz, the whole run with its set-up; its processes: rnicd + both perftest processes, or both iperf3 processes):\n\n| test | size [B] | contender | Gbit/s median (min–max) | M msg/s | cycles/B, its processes | cycles/msg, its processes | cycles/B, all CPUs | rounds |\n|---|---:|---|---|---:|---:|---:|---:|---:|\n%s\n", ENVIRON["MHZ"], bw
      if (lat != "") printf "Latency (half the round trip, as perftest and sockperf report it):\n\n| test | size [B] | contender | p50 µs median (min–max) | p99 µs | p99.9 µs | rounds |\n|---|---:|---|---|---:|---:|---:|\n%s\n", lat
      if (bw == "" && lat == "") print "No figures.\n"
    }'
}

# the goals of issue #33 (item 2): ratio of the medians against its target
goals() {
  awk -F, -v mhz="${MHZ:-0}" '
    { med[$1 "," $2 "," $3 "," $4 "," $5] = $7 }
    function g(k) { return (k in med) ? med[k] + 0 : -1 }
    function row(what, num, den, target, le,   r, ok) {
      if (num < 0 || den <= 0) { printf "| %s | not measured | | %s%s× | not measured |\n", what, le ? "≤ " : "≥ ", target; return }
      r = num / den; ok = le ? r <= target : r >= target
      printf "| %s | %.4g / %.4g | %.2f× | %s%s× | %s |\n", what, num, den, r, le ? "≤ " : "≥ ", target, ok ? "met" : "**missed**"
    }
    function minratio(st, c, ref, t, from, what, target,   k, a, s, r, best, bs, num, den) {
      best = -1
      for (k in med) {
        split(k, a, ",")
        if (a[1] != st || a[2] != c || a[3] != t || a[5] != "gbps" || a[4] + 0 < from) continue
        s = a[4]; den = g(st "," ref "," t "," s ",gbps")
        if (den <= 0) continue
        r = med[k] / den
        if (best < 0 || r < best) { best = r; bs = s; num = med[k]; dn = den }
      }
      if (best < 0) { printf "| %s | not measured | | ≥ %s× | not measured |\n", what, target; return }
      row(what " (worst: " bs " B)", num, dn, target, 0)
    }
    END {
      print "| goal (issue #33 item 2) | measured (medians) | ratio | target | |"
      print "|---|---|---:|---:|---|"
      # the same goals for each way softrnic runs beside the others
      nc = split("softrnic|softrnic-local", cs, "|")
      cl["softrnic"] = "softrnic"; cl["softrnic-local"] = "device in each program"
      for (i = 1; i <= nc; i++) {
        c = cs[i]; l = cl[c]
        row("guest: ib_write_bw 64 KiB, " l " / rxe", g("guest," c ",write_bw,65536,gbps"), g("guest,rxe,write_bw,65536,gbps"), 3, 0)
        minratio("guest", c, "rxe", "write_bw", 0, "guest: ib_write_bw every size, " l " / rxe", 1)
        row("guest: ib_write_lat 2 B p50, " l " / rxe", g("guest," c ",write_lat,2,p50"), g("guest,rxe,write_lat,2,p50"), 0.7, 1)
        minratio("host", c, "tcp", "write_bw", 65536, "veth: ib_write_bw ≥ 64 KiB, " l " / kernel TCP", 1)
        row("veth: ib_write_lat 64 B p50, " l " / sockperf", g("host," c ",write_lat,64,p50"), g("host,sockperf,write_lat,64,p50"), 1, 1)
        row("veth: ib_write_lat 64 B p99, " l " / sockperf", g("host," c ",write_lat,64,p99"), g("host,sockperf,write_lat,64,p99"), 2, 1)
      }
      row("memory: 64 KiB WRITE, daemon / ICRC+copy floor", g("mem,softrnic-daemon,write_bw,65536,gbps"), g("mem,icrc+copy-floor,write_bw,65536,gbps"), 0.75, 0)
      row("memory: 64 KiB WRITE, in-process / ICRC+copy floor", g("mem,softrnic-inproc,write_bw,65536,gbps"), g("mem,icrc+copy-floor,write_bw,65536,gbps"), 0.75, 0)
      c = g("mem,softrnic-daemon,write_bw,64,cpm_proc")
      row("memory: 64 B WRITEs, daemon: M msg/s per core (MHz / cycles per msg) / 5", c > 0 ? mhz / c : -1, 5, 1, 0)
      c = g("mem,softrnic-inproc,write_bw,64,cpm_proc")
      row("memory: 64 B WRITEs, in-process: M msg/s per core / 5", c > 0 ? mhz / c : -1, 5, 1, 0)
    }' "$SUM"
}

# plot STAGE KIND: one SVG of the stage's medians against size
plot() {
  local st=$1 kind=$2 csv=$OUT/plot-$1-$2.csv ylab title
  case $kind in
    bw) ylab="Gbit/s"; title="bandwidth, $st (median of the rounds)" ;;
    lat) ylab="usec (half round trip)"; title="latency p50 and p99, $st (median of the rounds)" ;;
    cpb) ylab="cycles per byte (its processes)"; title="CPU per byte, $st (median of the rounds)" ;;
  esac
  awk -F, -v st="$st" -v kind="$kind" '
    $1 != st { next }
    kind == "bw" && $5 == "gbps" { print $2 " " $3 "," $4 "," $7 }
    kind == "cpb" && $5 == "cpb_proc" { print $2 " " $3 "," $4 "," $7 }
    kind == "lat" && ($5 == "p50" || $5 == "p99") { print $2 " " $3 " " $5 "," $4 "," $7 }' "$SUM" |
    sort -t, -k1,1 -k2,2n > "$csv"
  [ -s "$csv" ] || return 1
  sed -i '1i series,size,value' "$csv"
  "$RNIC" plot "$csv" --out "$DOC-$st-$kind.svg" --title "$title" --y-label "$ylab" --log-y >/dev/null
}

export MHZ
{
  echo "# softrnic against software RDMA peers and the kernel: $(basename "$DOC")"
  echo
  echo "Written by \`benches/compare-all.sh\` (see docs/perf/README.md); each figure is the median of the rounds, the contenders alternating within each round, (min–max) the spread."
  echo
  sed 's/^/    /' "$OUT/machine.txt"
  echo
  while read -r st what; do
    case $what in
      ran*) echo "- stage **$st**: $what" ;;
      *) echo "- stage **$st**: **$what — its figures are missing below**" ;;
    esac
  done < "$OUT/stages.txt"
  if [ -s "$OUT/logs/failed.txt" ]; then
    echo "- **$(wc -l < "$OUT/logs/failed.txt") runs failed** (their figures are missing; logs in the run's logs/):"
    sed 's/^/  - /' "$OUT/logs/failed.txt"
  fi
  echo
  echo "## Goals"
  echo
  goals
  echo
  for st in guest host mem; do
    case $st in
      guest) echo "## In one QEMU guest: unmodified perftest on Linux rxe and on softrnic" ;;
      host) echo "## On the host: two namespaces over veth, softrnic against the kernel" ;;
      mem) echo "## In memory" ;;
    esac
    echo
    tables "$st"
    for k in bw lat cpb; do
      if plot "$st" "$k"; then echo "![$st $k]($(basename "$DOC")-$st-$k.svg)"; echo; fi
    done
  done
} > "$DOC.md"
echo "compare-all: wrote $DOC.md and its plots" >&2
