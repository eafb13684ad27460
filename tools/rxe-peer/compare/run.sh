#!/usr/bin/env bash
# run.sh: softrnic against the kernel's Soft-RoCE (rdma_rxe) in ONE QEMU guest,
# over ONE veth pair, with the same perftest tests (the side-by-side
# comparison). See docs/interop-compare.md.
#
#   tools/rxe-peer/compare/run.sh [--repeat N] [--mtu 1024|4096] [--backend KIND]
#                                 [--only REGEX] [--out DIR] [--table-only DIR]
#
# Boots the rxe-peer guest once (RXE_PEER: the harness, default
# tools/rxe-peer/rxe-peer in this repository) with cmds.sh as its command list:
# perftest between rxeA@vethA and rxeB@vethB, then the rxe links removed and
# `rnic perf --dev` between the same two interfaces (RNIC: the binary, default
# target/release/rnic, copied into the guest). Writes DIR/compare.txt: the
# median of the runs per test and stack and the ratio softrnic/rxe.
#   --repeat N      runs per test and stack (3)
#   --mtu M         the path MTU both stacks use (-m): 1024 (default) on a veth
#                   of MTU 1500, or 4096 on a veth of MTU 9000. Debian's 6.1 has
#                   no AF_XDP multi-buffer (XDP_USE_SG, Linux 6.6), so a frame
#                   must fit one 4 KiB UMEM chunk: with MTU 9000 rnic falls
#                   back to AF_PACKET.
#   --backend KIND  rnic's --backend: auto (default), afxdp, afxdp-generic, afpacket, afpacket-v3
#   --only REGEX    only the tests (tests.txt names) that match
#   --table-only DIR  only (re)write DIR/compare.txt from an earlier run
# Environment: CMP_TIMEOUT (seconds per tool run, 150), CMP_TESTS (test list,
# default tests.txt here), CMP_PT_WARMUP (1: perftest's WRITE and READ bw
# with --perform_warm_up, as rnic perf always warms those up; 0: without);
# the harness's RXE_PEER_* variables.
# Under TCG (no KVM) absolute figures are slow for both stacks: only the ratios
# mean anything.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
RXE_PEER=${RXE_PEER:-$REPO/tools/rxe-peer/rxe-peer}
RNIC=${RNIC:-$REPO/target/release/rnic}
TESTS=${CMP_TESTS:-$HERE/tests.txt}
REPEAT=3 MTU=1024 BACKEND=auto ONLY= OUT= TABLE_ONLY=

say() { printf '[compare %(%T)T] %s\n' -1 "$*" >&2; }
die() { say "error: $*"; exit 1; }

while [ $# -gt 0 ]; do
  case $1 in
    --repeat) REPEAT=${2:?}; shift 2;;
    --mtu) MTU=${2:?}; shift 2;;
    --backend) BACKEND=${2:?}; shift 2;;
    --only) ONLY=${2:?}; shift 2;;
    --out) OUT=${2:?}; shift 2;;
    --table-only) TABLE_ONLY=${2:?}; shift 2;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0;;
    *) die "unknown argument $1 (see --help)";;
  esac
done
[[ $REPEAT =~ ^[1-9][0-9]?$ ]] || die "--repeat: a number 1-99"
case $MTU in 1024) VETH_MTU=1500;; 4096) VETH_MTU=9000;; *) die "--mtu: 1024 or 4096";; esac
case $BACKEND in auto|afxdp|afxdp-generic|afpacket|afpacket-v3) ;; *) die "--backend: auto, afxdp, afxdp-generic, afpacket or afpacket-v3";; esac

# The client's result line of one run: perftest's (and rnic's) line under the
# column headings, "#bytes #iterations ..." — the first line of two integers
# and then decimals. bw: BW average (MB/s, 2^20 bytes) is field 4; lat:
# t_typical (the median, usec) field 5, t_avg field 6.
result_line() { grep -m1 -E '^ *[0-9]+ +[0-9]+ +[0-9]+\.[0-9]+ ' "$1" 2>/dev/null || true; }

# Retransmissions of one run: softrnic's retransmitted_pkts (both sides,
# from --json), rxe's completer_retry_err (rxeA + rxeB, after - before).
retx() {
  local base=$1/compare/$2-$3-r$4
  if [ "$2" = softrnic ]; then
    python3 - "$base.client.json" "$base.server.json" <<'PY' 2>/dev/null || echo -
import json, sys
n = 0
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except Exception:
        print("-"); sys.exit(0)
    for dev in d.get("devices", [])[:1]:
        n += int(dev.get("counters", {}).get("retransmitted_pkts", 0))
print(n)
PY
  else
    awk '$3 == "completer_retry_err" { v[$1] += $4 } END { if (!("after" in v)) print "-"; else print v["after"] - v["before"] }' \
      "$base.counters" 2>/dev/null || echo -
  fi
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

table() {
  local d=$1 res=$1/compare.txt runs=$1/compare/runs.txt
  [ -s "$runs" ] || die "no $runs: the guest ran no test (see $d/logs/cmds.log, $d/logs/guest.log)"
  local name verb mode size iters stack rep f line vals metric r s ratio nrun nok backend xdp
  {
    local conf_mtu conf_veth
    conf_mtu=$(sed -n 's/^CMP_MTU=//p' "$d/compare.conf" 2>/dev/null)
    conf_veth=$(sed -n 's/^CMP_VETH_MTU=//p' "$d/compare.conf" 2>/dev/null)
    echo "softrnic vs the kernel's Soft-RoCE (rdma_rxe), one guest, one veth pair (vethA 10.77.0.1 <-> vethB 10.77.0.2, MTU ${conf_veth:-9000}, -m ${conf_mtu:-4096})"
    echo "guest: $(head -n1 "$d/compare/guest-info.txt" 2>/dev/null); $(sed -n "2,\$p" "$d/compare/guest-info.txt" 2>/dev/null | tr "\t\n" "  ")"
    echo "accel: $(sed -n 's/.*booting guest (-accel \([^ ,]*\).*/\1/p' "$d/run.log" 2>/dev/null | head -n1)"
    backend=$(grep -h -m1 -o 'Device *: vethA (.*, MTU' "$d"/compare/softrnic-*-r1.client.log 2>/dev/null | head -n1 | sed -e 's/^Device *: vethA (//' -e 's/, MTU$//')
    xdp=$(awk '$1 == "softrnic" { print $11 }' "$runs" | sort -u | tr '\n' ' ')
    echo "softrnic backend: ${backend:-?} (vethB's XDP attachment seen by ip link: ${xdp:-?}); engine inline (busy-polling)"
    echo "median of the runs of each test; bw: BW average [MB/s, 2^20 B], higher is better; lat: t_typical [usec], lower is better"
    echo "TCG (no KVM) slows both stacks by a large factor: compare the ratios, not the absolute figures."
    echo
    printf '%-11s %-7s %-7s %12s %12s %16s  %s\n' test size metric rxe softrnic softrnic/rxe "runs ok (rxe, softrnic)"
    while read -r name verb mode size iters; do
      case $name in ''|'#'*) continue;; esac
      if [ -n "$ONLY" ] && ! grep -qE -- "$ONLY" <<< "$name"; then continue; fi
      if [ "$mode" = bw ]; then f=4; metric=MB/s; else f=5; metric=usec; fi
      declare -A med=() okc=()
      for stack in rxe softrnic; do
        vals=() nrun=0 nok=0
        while read -r _ _ rep src crc _; do
          nrun=$((nrun + 1))
          line=$(result_line "$d/compare/$stack-$name-r$rep.client.log")
          if [ "$src" = 0 ] && [ "$crc" = 0 ] && [ -n "$line" ]; then
            nok=$((nok + 1)); vals+=("$(awk -v f=$f '{ print $f }' <<< "$line")")
          fi
        done < <(awk -v s="$stack" -v n="$name" '$1 == s && $2 == n' "$runs")
        med[$stack]=$(printf "%s\n" "${vals[@]:-}" | { grep . || true; } | median)
        okc[$stack]="$nok/$nrun"
      done
      r=${med[rxe]} s=${med[softrnic]} ratio=-
      if [ "$r" != - ] && [ "$s" != - ]; then ratio=$(awk -v r="$r" -v s="$s" 'BEGIN { if (r > 0) printf "%.2f", s / r; else print "-" }'); fi
      [ "$size" = - ] && size=8
      printf '%-11s %-7s %-7s %12s %12s %16s  %s\n' "$name" "$size" "$metric" "$r" "$s" "$ratio" "${okc[rxe]}, ${okc[softrnic]}"
      unset med okc
    done < "$TESTS"
    echo
    echo "softrnic/rxe: bw > 1 and lat < 1 mean softrnic is faster."
    echo
    echo "every run (veth counters: bytes/frames each end sent during the run; retx: softrnic's"
    echo "retransmitted_pkts of both sides, rxe's completer_retry_err of rxeA + rxeB):"
    printf '%-9s %-11s %3s %4s %4s %7s %12s %8s %12s %8s %-10s %4s %s\n' stack test rep srv cli seconds \
      vethA_tx_B frames vethB_tx_B frames xdp retx result
    while read -r stack name rep src crc secs ab ap bb bp xdp; do
      line=$(result_line "$d/compare/$stack-$name-r$rep.client.log" | awk '{ $1 = $1; print }')
      printf '%-9s %-11s %3s %4s %4s %7s %12s %8s %12s %8s %-10s %4s %s\n' "$stack" "$name" "$rep" "$src" "$crc" \
        "$secs" "$ab" "$ap" "$bb" "$bp" "$xdp" "$(retx "$d" "$stack" "$name" "$rep")" "${line:-no result line}"
    done < "$runs"
  } > "$res"
  cat "$res"
}

if [ -n "$TABLE_ONLY" ]; then table "$(realpath "$TABLE_ONLY")"; exit 0; fi

[ "$(id -u)" = 0 ] || die "needs root (the harness boots QEMU in a network namespace)"
[ -x "$RXE_PEER" ] || die "no harness at $RXE_PEER (set RXE_PEER)"
[ -x "$RNIC" ] || die "no rnic at $RNIC (cargo build --release, or set RNIC)"
# The guest is Debian bookworm (glibc 2.36): a dynamic rnic needs nothing
# newer than the libraries it has.
if ldd "$RNIC" 2>&1 | grep -q 'not found'; then die "$RNIC: $(ldd "$RNIC" | grep 'not found')"; fi
need=$(objdump -T "$RNIC" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1 || true)
if [ -n "$need" ] && [ "$(printf '%s\n' "$need" GLIBC_2.36 | sort -V | tail -n1)" != GLIBC_2.36 ]; then
  die "$RNIC needs $need; the bookworm guest has glibc 2.36 (build a static musl rnic)"
fi

OUT=$(realpath -m "${OUT:-$REPO/target/rxe-peer/compare-$(date +%Y%m%d-%H%M%S)-$$}")
mkdir -p "$OUT"
cp "$RNIC" "$OUT/rnic"
cp "$TESTS" "$OUT/compare-tests.txt"
printf 'CMP_REPEAT=%q\nCMP_BACKEND=%q\nCMP_ONLY=%q\nCMP_TIMEOUT=%q\nCMP_MTU=%q\nCMP_VETH_MTU=%q\nCMP_PT_WARMUP=%q\nCMP_STACKS=%q\n' \
  "$REPEAT" "$BACKEND" "$ONLY" "${CMP_TIMEOUT:-150}" "$MTU" "$VETH_MTU" "${CMP_PT_WARMUP:-1}" "${CMP_STACKS:-rxe softrnic}" > "$OUT/compare.conf"
{ echo "host: $(uname -srm), $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
  echo "rnic: $RNIC ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "ldd rnic:"; ldd "$RNIC"
  echo "date: $(date -u +%FT%TZ)"
  echo "host load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$OUT/host-info.txt"
say "booting the rxe-peer guest; output in $OUT"
rc=0
"$RXE_PEER" run "$HERE/cmds.sh" --out "$OUT" > >(tee "$OUT/run.log" >&2) 2>&1 || rc=$?
sleep 0.2
echo "host load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/host-info.txt"
table "$OUT"
rm -f "$OUT/rnic"
say "guest run status $rc; table in $OUT/compare.txt"
exit "$rc"
