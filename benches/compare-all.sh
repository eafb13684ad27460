#!/usr/bin/env bash
# benches/compare-all.sh: the whole comparison of issue #33 in one run, on
# one machine, the contenders alternating within each round, ROUNDS rounds
# (median and min-max spread of the rounds), into docs/perf/:
#   mem    in memory: the fused ICRC+copy floor and memcpy (benches/crc_copy),
#          softrnic through the daemon (`rnicd --mem-pair`, unmodified
#          perftest on the drop-in via `rnic exec`) and in-process
#          (`rnic perf ... --loopback`)
#   host   two namespaces over one veth (MTU 9000), an rnicd in each
#          (HOST_BACKEND, default auto: AF_PACKET with UDP GSO on a
#          veth), unmodified perftest on the drop-in, against the kernel
#          on the same veth: TCP (iperf3, one stream, -l SIZE), UDP (iperf3 -u
#          -b 0 -l SIZE within 16 ... 65507, received rate) and sockperf
#          ping-pong (-m SIZE, 14 B at least)
#   guest  in the rxe-peer QEMU guest (tools/rxe-peer/rxe-peer): the guest's
#          unmodified perftest on Linux rdma_rxe and on softrnic (rnicd +
#          drop-in, copied into the guest) over one veth pair, same sizes
# Bandwidth is measured one size a run (-D BW_SECS) so that each figure
# has its CPU cost beside it: cycles per byte and per message of the
# contender's processes (rnicd + both perftest processes; iperf3's two) and
# of all CPUs (busy time), CPU time x the clock's MHz. The CPU counts the
# whole run, connection set-up included. Latency runs use perftest's -a
# (every size 2 B ... 8 MiB in one run) unless SIZES_LAT names sizes.
#
# Usage: benches/compare-all.sh [--rounds N] [--skip-mem] [--skip-host]
#          [--skip-guest] [--name NAME] [--out DIR]
#   --rounds N   rounds (ROUNDS, default 5)
#   --skip-X     leave stage X out; the table says so in its first lines
#   --name NAME  the files docs/perf/NAME.md and docs/perf/NAME-*.svg
#                (default compare-<UTC date>)
#   --out DIR    raw results and logs (default target/compare-all/NAME)
# Environment: SIZES_BW (default "2 4 ... 8388608"), SIZES_LAT (all: -a),
# TESTS (perftest tests, default "write_bw write_lat read_bw read_lat
# send_bw send_lat"; MEM_TESTS, HOST_TESTS, GUEST_TESTS override per
# stage), BW_SECS (2), LAT_ITERS (1000), GUEST_SIZES_BW, GUEST_SIZES_LAT,
# GUEST_LAT_ITERS (200), GUEST_TIMEOUT (600 s a run), GUEST_MTU (1024: the
# guest's veth has MTU 1500), GUEST_BACKEND (auto), HOST_BACKEND (auto),
# QUIET_IDLE/QUIET_WAIT
# (benches/common.sh), the rxe-peer harness's RXE_PEER_* variables.
# Needs root, iproute2, perftest, iperf3, sockperf, jq, a release build
# (cargo build --release --workspace) and, for the guest, what rxe-peer
# needs (qemu-system-x86, debootstrap; its image is built on first use).
# Not run by CI: benchmarks measure, tests assert.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

ROUNDS=${ROUNDS:-5} NAME='' OUT='' SKIP=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --skip-mem | --skip-host | --skip-guest) SKIP+=("${1#--skip-}"); shift ;;
    --name) NAME=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare-all.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "compare-all.sh: --rounds: a number >= 1" >&2; exit 2; }
ALL_SIZES=$(for ((k = 1; k <= 23; k++)); do printf '%s ' $((1 << k)); done)
SIZES_BW=${SIZES_BW:-$ALL_SIZES}
SIZES_LAT=${SIZES_LAT:-all}
TESTS=${TESTS:-write_bw write_lat read_bw read_lat send_bw send_lat}
MEM_TESTS=${MEM_TESTS:-$TESTS}
HOST_TESTS=${HOST_TESTS:-$TESTS}
GUEST_TESTS=${GUEST_TESTS:-$TESTS}
export CMP_BW_SECS=${BW_SECS:-2} CMP_LAT_ITERS=${LAT_ITERS:-1000} CMP_TIMEOUT=${CMP_TIMEOUT:-300}
NAME=${NAME:-compare-$(date -u +%Y%m%dT%H%M)}
OUT=$(realpath -m "${OUT:-target/compare-all/$NAME}")
BIN=$REPO/target/release
RAW=$OUT/raw.csv
CMP_LOGS=$OUT/logs
mkdir -p "$CMP_LOGS"
: > "$RAW"
: > "$OUT/stages.txt"
rm -f "$OUT/idle.txt"
. benches/common.sh
. benches/compare-all/lib.sh

skipped() { [[ " ${SKIP[*]} " == *" $1 "* ]]; }
stage_note() { echo "$1 $2" >> "$OUT/stages.txt"; echo "compare-all: stage $1: $2" >&2; }
loud() { printf '\n!!!!!!!! compare-all: %s\n\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { echo "compare-all.sh: needs root (namespaces, AF_XDP, the guest)" >&2; exit 1; }
for t in ip ib_write_bw iperf3 sockperf jq; do
  command -v "$t" >/dev/null || { echo "compare-all.sh: $t is missing (apt-get install iproute2 perftest iperf3 sockperf jq)" >&2; exit 1; }
done
for f in rnicd rnic softrnic-ibverbs/libibverbs.so.1; do
  [ -e "$BIN/$f" ] || { echo "compare-all.sh: no $BIN/$f: cargo build --release --workspace" >&2; exit 1; }
done

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  del_netns
  rm -rf "/tmp/cmp-all-$$"
}
trap cleanup EXIT INT TERM
TMP=/tmp/cmp-all-$$
mkdir -p "$TMP"

# rnicd ARGS...: starts one and waits for its socket ($2 of --sock-dir's
# folder, --name's device); sets DPID
rnicd_up() { # sockdir name args...
  local dir=$1 name=$2; shift 2
  mkdir -p "$dir"
  "$@" --name "$name" --sock-dir "$dir" > "$CMP_LOGS/rnicd-$name.log" 2>&1 &
  DPID=$!
  PIDS+=("$DPID")
  local i
  for ((i = 0; i < 200; i++)); do
    { [ -S "$dir/$name.sock" ] || [ -S "$dir/${name}1.sock" ]; } && return 0
    sleep 0.1
  done
  echo "compare-all: rnicd $name did not come up:" >&2; cat "$CMP_LOGS/rnicd-$name.log" >&2; return 1
}
rnicd_down() { kill "$@" 2>/dev/null || true; local p; for p in "$@"; do wait "$p" 2>/dev/null || true; done; }

sizes_of() { if [ "${1#*_}" = bw ]; then echo "$2"; else echo "$3"; fi; }

# ---- mem: floor, memcpy, the daemon's mem-pair, in-process ----------------
floor_round() { # round: the fused ICRC+copy kernel and memcpy at the sizes of both
  # crc_copy's list (64 B ... 64 KiB) and SIZES_BW
  local exe=$1 r=$2 f=$CMP_LOGS/crc_copy-r$2.txt
  wait_quiet
  "$exe" --bench > "$f" 2>&1 || { echo "compare-all: crc_copy failed (see $f)" >&2; return 0; }
  # rows: bytes, then per case "min / median (GB/s)"; cases: fused fused-pclmul copy+crc memcpy crc update
  awk -v r="$r" -v sizes=" $SIZES_BW " '$1 ~ /^[0-9]+$/ && index(sizes, " " $1 " ") {
      gsub(/\( +/, "("); $0 = $0
      n = 0; for (i = 2; i <= NF; i++) if ($i ~ /^\(/) { n++; g[n] = $i; gsub(/[()]/, "", g[n]) }
      if (n >= 4) {
        printf "mem,icrc+copy-floor,write_bw,%s,%s,gbps,%.4f\n", $1, r, g[1] * 8
        printf "mem,memcpy,write_bw,%s,%s,gbps,%.4f\n", $1, r, g[4] * 8
      }
    }' "$f" >> "$RAW"
}

inproc_round() { # round
  local t s args cpu log
  for t in $MEM_TESTS; do
    for s in $(sizes_of "$t" "$SIZES_BW" "$SIZES_LAT"); do
      args=$(cmp_pt_args "$t" "$s")
      args=${args#ib_}
      log=$CMP_LOGS/mem-inproc-$t-$s-r$1
      wait_quiet
      # shellcheck disable=SC2086
      cmp_timed "$log.cpu" "$log.log" timeout -k 5 "$CMP_TIMEOUT" "$BIN/rnic" perf ${args/_/ } --loopback --no-progress || true
      cpu=$(cat "$log.cpu")
      cmp_record mem softrnic-inproc "$t" "$1" "$log.log" "$cpu" "$cpu" "$CMP_BW_SECS"
    done
  done
}

mempair_round() { # round
  local dir=$TMP/mem t s args
  rnicd_up "$dir" cm "$BIN/rnicd" --mem-pair || return 0
  local d=$DPID
  for t in $MEM_TESTS; do
    for s in $(sizes_of "$t" "$SIZES_BW" "$SIZES_LAT"); do
      args=$(cmp_pt_args "$t" "$s")
      wait_quiet
      cmp_perftest mem softrnic-daemon "$t" "$s" "$1" "$d" \
        "$BIN/rnic exec --sock-dir $dir -- ${args/ -F/ -F -d cm0 -x 3}" \
        "$BIN/rnic exec --sock-dir $dir -- ${args/ -F/ -F -d cm1 -x 3} 127.0.0.1"
    done
  done
  rnicd_down "$d"
}

stage_mem() {
  local exe
  exe=$(cargo bench -q -p benches --bench crc_copy --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
  [ -x "$exe" ] || { loud "mem: cannot build benches/crc_copy: no floor"; exe=; }
  local r
  for ((r = 1; r <= ROUNDS; r++)); do
    # the order turns each round so that no contender always runs first
    local order=(floor inproc mempair)
    [ $((r % 3)) = 2 ] && order=(inproc mempair floor)
    [ $((r % 3)) = 0 ] && order=(mempair floor inproc)
    local o
    for o in "${order[@]}"; do
      case $o in
        floor) if [ -n "$exe" ]; then floor_round "$exe" "$r"; fi ;;
        inproc) inproc_round "$r" ;;
        mempair) mempair_round "$r" ;;
      esac
    done
    echo "compare-all: mem round $r done" >&2
  done
}

# ---- host: two namespaces over veth, softrnic against the kernel -----------
A=cmp-a-$$ B=cmp-b-$$ IA=cmpa$$ IB=cmpb$$
ADDR_A=192.0.2.1 ADDR_B=192.0.2.2 SP_PORT=$((20000 + $$ % 10000))

host_net() {
  veth_pair
  local ns ifc addr
  while read -r ns ifc addr; do
    ip -n "$ns" link set "$ifc" mtu 9000
    ip -n "$ns" addr add "$addr/24" dev "$ifc"
    ip -n "$ns" link set "$ifc" up
  done <<< "$A $IA $ADDR_A
$B $IB $ADDR_B"
}

# the CPU seconds of both iperf3 / sockperf processes and of all CPUs
kernel_run() { # name 'server cmd' 'client cmd' -> "proc_s sys_s"
  local base=$CMP_LOGS/host-$1 s0 s1 spid hz
  s0=$(cmp_sys_ticks)
  # shellcheck disable=SC2086
  # the server outlives its client by 30 s at most (a client that fails
  # at once leaves `iperf3 -s -1` waiting)
  cmp_timed "$base.server.cpu" "$base.server.log" timeout -k 5 $((CMP_BW_SECS + 30)) ip netns exec "$A" $2 &
  spid=$!
  sleep 0.5
  # shellcheck disable=SC2086
  cmp_timed "$base.client.cpu" "$base.client.log" timeout -k 5 "$CMP_TIMEOUT" ip netns exec "$B" $3 || true
  # sockperf's server runs until stopped: end ours (its own port)
  if [ "${1#sockperf}" != "$1" ]; then
    local p
    for p in $(pgrep -f "sockperf server -i $ADDR_A -p $SP_PORT" || true); do kill "$p" 2>/dev/null || true; done
  fi
  wait "$spid" 2>/dev/null || true
  s1=$(cmp_sys_ticks); hz=$(cmp_hz)
  awk -v a="$(cat "$base.server.cpu")" -v b="$(cat "$base.client.cpu")" -v d=$((s1 - s0)) -v hz="$hz" \
    'BEGIN { printf "%.3f %.3f\n", a + b, d / hz }'
}

iperf_round() { # tcp|udp round
  local kind=$1 r=$2 s l u proc sys g m name
  for s in $SIZES_BW; do
    l=$s u=
    # iperf3's UDP datagrams: 16 ... 65507 bytes
    [ "$kind" = udp ] && { u="-u -b 0"; [ "$l" -gt 65507 ] && l=65507; [ "$l" -lt 16 ] && l=16; }
    name=$kind-$s-r$r
    wait_quiet
    read -r proc sys <<< "$(kernel_run "$name" "iperf3 -s -1 -B $ADDR_A" \
      "iperf3 -c $ADDR_A $u -l $l -t $CMP_BW_SECS -J")"
    # the JSON (iperf3's warnings come before it in the log): UDP's rate
    # less what was lost, TCP's received rate
    q='.end.sum.bits_per_second * (1 - (.end.sum.lost_percent // 0) / 100) / 1e9'
    [ "$kind" = tcp ] && q='.end.sum_received.bits_per_second / 1e9'
    g=$(sed -n '/^{/,$p' "$CMP_LOGS/host-$name.client.log" | jq "$q" 2>/dev/null || echo -)
    [ -n "$g" ] && [ "$g" != null ] || g=-
    m=$(awk -v g="$g" -v l="$l" 'BEGIN { if (g + 0 > 0) printf "%.6f", g * 1e9 / 8 / l / 1e6; else print "-" }')
    cmp_emit host "$kind" write_bw "$s" "$r" gbps "$g"
    cmp_emit host "$kind" write_bw "$s" "$r" mmps "$m"
    if [ "$g" != - ]; then cmp_cpu_rows host "$kind" write_bw "$s" "$r" "$g" "$m" "$proc" "$sys" "$CMP_BW_SECS"; fi
  done
}

sockperf_round() { # round: ping-pong at each latency size up to 65000 B
  local r=$1 s f p q v
  local sizes=$SIZES_LAT
  [ "$sizes" = all ] && sizes=$ALL_SIZES
  for s in $sizes; do
    [ "$s" -gt 65000 ] && continue
    wait_quiet
    # sockperf's messages: 14 bytes at least
    kernel_run "sockperf-$s-r$r" "sockperf server -i $ADDR_A -p $SP_PORT" \
      "sockperf ping-pong -i $ADDR_A -p $SP_PORT -m $((s < 14 ? 14 : s)) -t $CMP_BW_SECS" > /dev/null
    f=$CMP_LOGS/host-sockperf-$s-r$r.client.log
    for p in 50.000:p50 99.000:p99 99.900:p999; do
      q=${p%:*}
      v=$(grep -o "percentile $q = *[0-9.]*" "$f" | awk '{ print $NF }' || true)
      cmp_emit host sockperf write_lat "$s" "$r" "${p#*:}" "${v:--}"
    done
  done
}

softrnic_host_round() { # round
  local r=$1 t s args da db
  rnicd_up "$TMP/ha" ha ip netns exec "$A" "$BIN/rnicd" --iface "$IA" --gid "$ADDR_A" --backend "${HOST_BACKEND:-auto}" || return 0
  da=$DPID
  rnicd_up "$TMP/hb" hb ip netns exec "$B" "$BIN/rnicd" --iface "$IB" --gid "$ADDR_B" --backend "${HOST_BACKEND:-auto}" ||
    { rnicd_down "$da"; return 0; }
  db=$DPID
  for t in $HOST_TESTS; do
    for s in $(sizes_of "$t" "$SIZES_BW" "$SIZES_LAT"); do
      args="$(cmp_pt_args "$t" "$s") -m 4096"
      wait_quiet
      cmp_perftest host softrnic "$t" "$s" "$r" "$da $db" \
        "ip netns exec $A $BIN/rnic exec --sock-dir $TMP/ha -- ${args/ -F/ -F -d ha -x 3}" \
        "ip netns exec $B $BIN/rnic exec --sock-dir $TMP/hb -- ${args/ -F/ -F -d hb -x 3} $ADDR_A"
    done
  done
  rnicd_down "$da" "$db"
}

# each perftest process hosting its device on its end (SOFTRNIC_LOCAL, the
# port's backend as rnicd's): no rnicd; the engine threads are the
# programs' own, so their CPU counts
softrnic_local_host_round() { # round
  local r=$1 t s args lib="LD_LIBRARY_PATH=$BIN/softrnic-ibverbs SOFTRNIC_LOCAL_BACKEND=${HOST_BACKEND:-auto}"
  for t in $HOST_TESTS; do
    for s in $(sizes_of "$t" "$SIZES_BW" "$SIZES_LAT"); do
      args="$(cmp_pt_args "$t" "$s") -m 4096"
      wait_quiet
      cmp_perftest host softrnic-local "$t" "$s" "$r" "" \
        "ip netns exec $A env $lib SOFTRNIC_LOCAL=$IA ${args/ -F/ -F -d srnic0 -x 3}" \
        "ip netns exec $B env $lib SOFTRNIC_LOCAL=$IB ${args/ -F/ -F -d srnic0 -x 3} $ADDR_A"
    done
  done
}

stage_host() {
  host_net
  local r o
  for ((r = 1; r <= ROUNDS; r++)); do
    local order=(softrnic softrnic-local tcp udp sockperf)
    [ $((r % 2)) = 0 ] && order=(sockperf udp tcp softrnic-local softrnic)
    for o in "${order[@]}"; do
      case $o in
        softrnic) softrnic_host_round "$r" ;;
        softrnic-local) softrnic_local_host_round "$r" ;;
        tcp | udp) iperf_round "$o" "$r" ;;
        sockperf) sockperf_round "$r" ;;
      esac
    done
    echo "compare-all: host round $r done" >&2
  done
  del_netns
}

# ---- guest: rxe and softrnic in one QEMU guest --------------------------------
stage_guest() {
  local g=$OUT/guest rc=0
  mkdir -p "$g/compare-all" "$g/srnic"
  cp "$BIN/rnicd" "$BIN/rnic" "$g/srnic/"
  cp -rL "$BIN/softrnic-ibverbs" "$BIN/softrnic-rdmacm" "$BIN/softrnic-nlshim" "$g/srnic/"
  cp benches/compare-all/lib.sh "$g/compare-all/"
  cp tools/rxe-peer/compare/cmds.sh "$g/cmds-base.sh"
  # shellcheck disable=SC2016 # the guest's $SH, literally
  sed 's|"\$SH/cmds.sh"|"$SH/cmds-base.sh"|' benches/compare-all/guest.sh > "$g/guest.sh"
  {
    printf '%s=%q\n' ROUNDS "$ROUNDS" GUEST_TESTS "$GUEST_TESTS" \
      SIZES_BW "${GUEST_SIZES_BW:-$SIZES_BW}" SIZES_LAT "${GUEST_SIZES_LAT:-$SIZES_LAT}" \
      CMP_BW_SECS "$CMP_BW_SECS" CMP_LAT_ITERS "${GUEST_LAT_ITERS:-200}" \
      GUEST_TIMEOUT "${GUEST_TIMEOUT:-600}" GUEST_MTU "${GUEST_MTU:-1024}" \
      GUEST_BACKEND "${GUEST_BACKEND:-auto}" CMP_VETH_MTU 1500
  } > "$g/compare-all/params"
  echo "compare-all: booting the rxe-peer guest (output in $g)" >&2
  tools/rxe-peer/rxe-peer run "$g/guest.sh" --out "$g" > "$g/run.log" 2>&1 || rc=$?
  if [ -s "$g/compare-all/raw-guest.csv" ]; then
    cat "$g/compare-all/raw-guest.csv" >> "$RAW"
  fi
  if [ -s "$g/compare-all/logs/failed.txt" ]; then
    cat "$g/compare-all/logs/failed.txt" >> "$CMP_LOGS/failed.txt"
  fi
  if [ "$rc" != 0 ] || [ ! -s "$g/compare-all/raw-guest.csv" ]; then
    loud "guest: the rxe-peer run failed (status $rc; see $g/run.log, $g/logs/)"
    stage_note guest "FAILED (status $rc, $(wc -l < "$g/compare-all/raw-guest.csv" 2>/dev/null || echo 0) figures; see $g/run.log)"
    return 0
  fi
  stage_note guest "ran: $(head -n1 "$g/compare-all/guest-info.txt" 2>/dev/null), accel $(sed -n 's/.*booting guest (-accel \([^ ,]*\).*/\1/p' "$g/run.log" | head -n1)"
}

# ---- the run -----------------------------------------------------------------
{
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, cpu MHz $(cmp_mhz)"
  echo "kernel: $(uname -r)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "date: $(date -u +%FT%TZ)"
  echo "rounds: $ROUNDS; bandwidth ${CMP_BW_SECS} s a size; latency $CMP_LAT_ITERS iterations a size (guest: ${GUEST_LAT_ITERS:-200})"
  echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/machine.txt"

declare -A EXPECT=([mem]="icrc+copy-floor memcpy softrnic-daemon softrnic-inproc"
  [host]="softrnic softrnic-local tcp udp sockperf" [guest]="rxe softrnic softrnic-local")
for st in mem host guest; do
  if skipped "$st"; then
    loud "stage $st SKIPPED (--skip-$st): the table has no $st figures"
    stage_note "$st" "SKIPPED (--skip-$st)"
    continue
  fi
  echo "compare-all: stage $st" >&2
  "stage_$st"
  grep -q "^$st " "$OUT/stages.txt" || stage_note "$st" "ran"
  # a contender without a single figure is a failure, said loudly
  for c in ${EXPECT[$st]}; do
    if ! grep -q "^$st,$c," "$RAW"; then
      loud "stage $st: NO FIGURES of $c (see $OUT/logs/)"
      stage_note "$st" "INCOMPLETE: no figures of $c"
    fi
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
echo "CPU idle % in the second before each measurement: $({ tr '\n' ' ' < "$OUT/idle.txt"; } 2>/dev/null)" >> "$OUT/machine.txt"

benches/compare-all/report.sh "$OUT" "docs/perf/$NAME"
