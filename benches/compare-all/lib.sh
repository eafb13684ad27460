# Measurement helpers of benches/compare-all.sh, sourced on the host and,
# copied onto the share, inside the rxe-peer guest (bash, coreutils, awk;
# nothing else). Every figure goes to $RAW, one CSV line each:
#   stage,contender,test,size,round,metric,value
# metrics: gbps (Gbit/s, 10^9), mmps (million messages/s), p50/p99/p999
# (usec, half the round trip as perftest reports), cpb_proc/cpm_proc (CPU
# cycles per byte / per message of the contender's own processes),
# cpb_sys/cpm_sys (the same for every CPU of the machine, busy time).
# Cycles are CPU time (user + system; /proc ticks and getrusage) x the
# clock of /proc/cpuinfo's "cpu MHz": hardware cycle counters are not
# readable in the VMs this runs in.

cmp_mhz() { awk -F: '/^cpu MHz/ { printf "%.0f", $2; exit }' /proc/cpuinfo; }

# busy ticks of all CPUs (user nice system irq softirq steal)
cmp_sys_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }

# user + system ticks of the processes $@ (those still running)
cmp_proc_ticks() {
  local t=0 p v
  for p in "$@"; do
    v=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null) || v=0
    t=$((t + ${v:-0}))
  done
  echo "$t"
}

cmp_emit() { # stage contender test size round metric value
  [ -n "$7" ] && [ "$7" != - ] && [ "$7" != nan ] || return 0
  printf '%s,%s,%s,%s,%s,%s,%s\n' "$@" >> "$RAW"
}

# cmp_timed CPUFILE OUTFILE CMD...: runs CMD with stdout and stderr in
# OUTFILE and writes its (and its children's) user + system seconds to
# CPUFILE; returns CMD's status.
cmp_timed() {
  local cpu=$1 out=$2 rc=0 TIMEFORMAT='%U %S'
  shift 2
  { time "$@" > "$out" 2>&1 < /dev/null || rc=$?; } 2> "$cpu.t"
  awk '{ s = $1 + $2 } END { printf "%.3f\n", s }' "$cpu.t" > "$cpu"
  rm -f "$cpu.t"
  return "$rc"
}

# perftest's result lines ("#bytes #iterations ..."): one per size.
# bw: SIZE GBPS MMPS (BW average in MB/s = 2^20 B/s, MsgRate in Mpps);
# lat: SIZE P50 P99 P999 (t_typical, 99 %, 99.9 %).
cmp_pt_rows() { # FILE bw|lat
  awk -v mode="$2" '
    $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9.]+$/ && NF >= 5 {
      if (mode == "bw") printf "%s %.4f %.6f\n", $1, $4 * 1048576 * 8 / 1e9, $5
      else if (NF >= 9) printf "%s %s %s %s\n", $1, $5, $8, $9
    }' "$1" 2>/dev/null
}

# cmp_cpu_rows STAGE CONTENDER TEST SIZE ROUND GBPS MMPS PROC_S SYS_S WALL_S:
# the CPU per byte and per message of one bandwidth run (PROC_S: the
# contender's CPU seconds, SYS_S: all CPUs' busy seconds, WALL_S: the run's
# length; bytes = GBPS x WALL_S, so set-up time counts against the contender)
cmp_cpu_rows() {
  local v
  v=$(awk -v g="$6" -v m="$7" -v p="$8" -v s="$9" -v w="${10}" -v mhz="$(cmp_mhz)" 'BEGIN {
        b = g * 1e9 / 8 * w; n = m * 1e6 * w
        if (b <= 0) exit
        printf "%.3f %.1f %.3f %.1f", p * mhz * 1e6 / b, (n > 0 ? p * mhz * 1e6 / n : "-"), s * mhz * 1e6 / b, (n > 0 ? s * mhz * 1e6 / n : "-")
      }')
  [ -n "$v" ] || return 0
  local a b c d
  read -r a b c d <<< "$v"
  cmp_emit "$1" "$2" "$3" "$4" "$5" cpb_proc "$a"
  cmp_emit "$1" "$2" "$3" "$4" "$5" cpm_proc "$b"
  cmp_emit "$1" "$2" "$3" "$4" "$5" cpb_sys "$c"
  cmp_emit "$1" "$2" "$3" "$4" "$5" cpm_sys "$d"
}

cmp_now() { date +%s.%N; }
cmp_secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
cmp_hz() { getconf CLK_TCK; }

# cmp_perftest STAGE CONTENDER TEST SIZE ROUND DAEMON_PIDS 'SERVER CMD' 'CLIENT CMD'
# One unmodified perftest run (each command split into words; the client's
# ends with the server's address). Logs in
# $CMP_LOGS/STAGE-CONTENDER-TEST-SIZE-rROUND.{server,client}.{log,cpu}.
# Bandwidth: one row per size of gbps, mmps and the CPU per byte (the
# daemons' ticks + both perftest processes, and all CPUs); latency: p50,
# p99, p999 per size.
#
# perftest turns its figures into time with a CPU clock rate it samples
# against gettimeofday at start-up; when that sample is too noisy (r^2 <
# 0.9, as under TCG) it prints "Correlation coefficient" and goes on with
# 0 MHz, reporting 0.00 MB/s or inf µs. Such a run is not a figure: it is
# run again, up to CMP_CLOCK_TRIES (3) times, and left out (failed.txt:
# perftest-clock) if none measures.
cmp_perftest() {
  local try base=$CMP_LOGS/$1-$2-$3-$4-r$5
  for ((try = 1; try <= ${CMP_CLOCK_TRIES:-3}; try++)); do
    cmp_perftest_once "$@"
    if ! grep -qs "Correlation coefficient" "$base.client.log" "$base.server.log"; then
      cmp_perftest_record "$@"
      return 0
    fi
    echo "compare-all: $base: perftest could not sample the CPU clock (try $try)" >&2
    echo "$1 $2 $3 $4 r$5 perftest-clock-try-$try" >> "$CMP_LOGS/failed.txt"
  done
}

# cmp_perftest_once ARGS (as cmp_perftest): one run; leaves its CPU and
# wall figures in CMP_RUN for cmp_perftest_record.
cmp_perftest_once() {
  local stage=$1 cont=$2 test=$3 round=$5 dpids=$6 scmd=$7 ccmd=$8
  local base=$CMP_LOGS/$stage-$cont-$test-$4-r$round spid t0 t1 s0 s1 d0 d1 rc=0
  # shellcheck disable=SC2086
  d0=$(cmp_proc_ticks $dpids)
  s0=$(cmp_sys_ticks); t0=$(cmp_now)
  # shellcheck disable=SC2086
  cmp_timed "$base.server.cpu" "$base.server.log" timeout -k 5 "$CMP_TIMEOUT" $scmd &
  spid=$!
  sleep "${CMP_SERVER_WAIT:-1}"
  # shellcheck disable=SC2086
  cmp_timed "$base.client.cpu" "$base.client.log" timeout -k 5 "$CMP_TIMEOUT" $ccmd || rc=$?
  wait "$spid" || true
  t1=$(cmp_now); s1=$(cmp_sys_ticks)
  # shellcheck disable=SC2086
  d1=$(cmp_proc_ticks $dpids)
  if [ "$rc" != 0 ]; then
    echo "compare-all: $base: client status $rc" >&2
    echo "$stage $cont $test $4 r$round client-status-$rc" >> "$CMP_LOGS/failed.txt"
  fi
  local hz proc sys
  hz=$(cmp_hz)
  proc=$(awk -v d=$((d1 - d0)) -v hz="$hz" -v s="$(cat "$base.server.cpu")" -v c="$(cat "$base.client.cpu")" \
    'BEGIN { printf "%.3f", d / hz + s + c }')
  sys=$(awk -v d=$((s1 - s0)) -v hz="$hz" 'BEGIN { printf "%.3f", d / hz }')
  CMP_RUN="$proc $sys $(cmp_secs "$t0" "$t1")"
}

# cmp_perftest_record ARGS (as cmp_perftest): the last run's rows.
cmp_perftest_record() {
  local proc sys wall
  read -r proc sys wall <<< "$CMP_RUN"
  cmp_record "$1" "$2" "$3" "$5" "$CMP_LOGS/$1-$2-$3-$4-r$5.client.log" "$proc" "$sys" "$wall"
}

# cmp_record STAGE CONTENDER TEST ROUND LOG PROC_S SYS_S WALL_S: the rows of
# one perftest-format output (perftest's, or `rnic perf`'s). Bandwidth runs
# are one size each (-D CMP_BW_SECS), so the CPU belongs to that size.
cmp_record() {
  local size a b c rows=$5.rows
  # a file, not a process substitution: the guest has no /dev/fd
  case $3 in *_bw) cmp_pt_rows "$5" bw ;; *) cmp_pt_rows "$5" lat ;; esac > "$rows"
  case $3 in
    *_bw)
      while read -r size a b; do
        cmp_emit "$1" "$2" "$3" "$size" "$4" gbps "$a"
        cmp_emit "$1" "$2" "$3" "$size" "$4" mmps "$b"
        cmp_cpu_rows "$1" "$2" "$3" "$size" "$4" "$a" "$b" "$6" "$7" "${CMP_BW_SECS:-$8}"
      done < "$rows" ;;
    *)
      while read -r size a b c; do
        cmp_emit "$1" "$2" "$3" "$size" "$4" p50 "$a"
        cmp_emit "$1" "$2" "$3" "$size" "$4" p99 "$b"
        cmp_emit "$1" "$2" "$3" "$size" "$4" p999 "$c"
      done < "$rows" ;;
  esac
  return 0
}

# cmp_pt_args TEST SIZE: perftest's arguments for one test at SIZE ("all":
# -a), bandwidth for CMP_BW_SECS seconds (-D) a size, latency CMP_LAT_ITERS
# iterations; -F (no CPU-frequency check) and CMP_PT_EXTRA.
cmp_pt_args() {
  local t=$1 s=$2 a
  a="ib_$t -F"
  if [ "$s" = all ]; then a+=" -a"; else a+=" -s $s"; fi
  case $t in
    *_bw) a+=" -D ${CMP_BW_SECS:-2}" ;;
    *) a+=" -n ${CMP_LAT_ITERS:-1000}" ;;
  esac
  echo "$a ${CMP_PT_EXTRA:-}"
}
