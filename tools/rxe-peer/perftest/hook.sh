# hook.sh: rnic perf against Debian bookworm's perftest (ib_write_bw, ib_read_lat,
# ...) on the kernel's Soft-RoCE in the rxe-peer guest, both roles. A host hook
# for the rxe-peer harness (tools/rxe-peer/rxe-peer, which boots the guest and
# provides g_start/g_wait/g_run/in_ns and $NS $TAP $HOST_IP $GUEST_IP $RXE_DEV
# $RXE_GID):
#
#   RNIC=target/release/rnic tools/rxe-peer/rxe-peer run --hook tools/rxe-peer/perftest/hook.sh
#
# Environment: RNIC (default: the repository's target/release/rnic),
# PERFTEST_CASES (case list, default cases.txt beside this file),
# PERFTEST_ONLY (regex on case names), PERFTEST_TIMEOUT (seconds per side, 180).
# A case whose flags include @lossy runs over `rxe-peer interop`'s routed
# loss path (rnic in its own namespace behind the tap's, which drops ~2 % of
# UDP 4791 both ways with nftables; interop.sh's loss_rules); outside
# `rxe-peer interop` such a case is reported SKIPPED (no loss path).
# Results: $OUT/perftest-results.txt (one PASS/FAIL line per case) and
# $OUT/logs/<case>.{rnic,rxe.guest,memcheck}.log; rnic records its port to
# $OUT/pcap/<case>.rnic.pcap, which must pass `rnic pcap check`.
# Data: perftest never checks what it moves, so both sides' buffers are
# dumped before and after the test (rnic perf --dump-mem; perftest runs with
# memdump.c preloaded, built here with the host's cc) and `rnic memcheck`
# must find every received byte where the sender had it (and the atomic
# target grown by one per FETCH_AND_ADD). The dumps of a passing case are
# deleted; a failing case keeps them in $OUT/mem.
# A case passes when both sides exit 0, rnic printed its result line and
# perftest printed its own where perftest prints one (bw: both sides; WRITE
# and SEND latency: both sides; READ and atomic latency: the client only).

PT_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PT_REPO=$(cd "$PT_HERE/../../.." && pwd)
RNIC=${RNIC:-$PT_REPO/target/release/rnic}
PT_CASES=${PERFTEST_CASES:-$PT_HERE/cases.txt}
PT_TO=${PERFTEST_TIMEOUT:-180}
PT_PORT=18515
PT_RES=$OUT/perftest-results.txt
: > "$PT_RES"

pt_now() { date +%s.%N; }
pt_since() { awk -v a="$1" -v b="$(pt_now)" 'BEGIN { printf "%.1f", b - a }'; }

# pt_case NAME ROLE VERB MODE SIZE MTU ITERS EXTRA...
pt_case() {
  local name=$1 role=$2 verb=$3 mode=$4 size=$5 mtu=$6 iters=$7
  shift 7
  local extra=() L=$OUT/logs t0 rrc=0 grc=0 why=() a lossy=()
  local rns=$NS rdev=$TAP rip=$HOST_IP
  for a in "$@"; do
    if [ "$a" = @lossy ]; then lossy=(--lossy); else extra+=("$a"); fi
  done
  if [ ${#lossy[@]} -gt 0 ]; then
    if ! declare -F loss_rules >/dev/null || ! ip netns exec "${LNS:-none}" true 2>/dev/null; then
      printf '%-40s %s %6ss %s\n' "$name" SKIPPED 0 "no loss path: run it under rxe-peer interop" | tee -a "$PT_RES"
      return 0
    fi
    rns=$LNS rdev=$LVA rip=$LOSS_IP
    loss_rules
  fi
  local tool="ib_${verb}_${mode}" common=(-m "$mtu" -n "$iters" "${extra[@]}")
  [ "$size" != - ] && common=(-s "$size" "${common[@]}")
  local g="$tool -d $RXE_DEV -x $RXE_GID -F ${common[*]}"
  local r=(perf "$verb" "$mode" -d "$rdev" --no-progress "${common[@]}"
           --pcap "$OUT/pcap/$name.rnic.pcap" --pcap-frames 2000
           --dump-mem "$OUT/mem/$name.rnic")
  local gpre="SRNIC_MEMDUMP=/share/mem/$name.rxe LD_PRELOAD=/share/memdump.so"  # /share: $OUT in the guest
  t0=$(pt_now)
  if [ "$role" = rnic-client ]; then
    g_start "$name.rxe" "echo '# $g'; $gpre $g" "$PT_TO"
    g_run "$name.listen" "wait_tcp $PT_PORT 60" 90 || why+=(perftest-not-listening)
    echo "# rnic ${r[*]} $GUEST_IP" > "$L/$name.rnic.log"
    ip netns exec "$rns" timeout -k 5 "$PT_TO" "$RNIC" "${r[@]}" "$GUEST_IP" >> "$L/$name.rnic.log" 2>&1 || rrc=$?
    g_wait "$name.rxe" $((PT_TO + 30)) || grc=$?
  else
    echo "# rnic ${r[*]}" > "$L/$name.rnic.log"
    ip netns exec "$rns" timeout -k 5 "$PT_TO" "$RNIC" "${r[@]}" >> "$L/$name.rnic.log" 2>&1 &
    local rpid=$!
    host_listens "$rns" "$PT_PORT" "$rpid" || true
    g_run "$name.rxe" "echo '# $g $rip'; $gpre $g $rip" "$PT_TO" || grc=$?
    wait "$rpid" || rrc=$?
  fi
  [ $rrc = 0 ] || why+=("rnic-exit-$rrc")
  [ $grc = 0 ] || why+=("$tool-exit-$grc")
  local rl=$L/$name.rnic.log gl=$L/$name.rxe.guest.log
  local rnic_prints=1 pt_prints=1
  if [ "$mode" = lat ] && [ "$role" = rnic-server ] && { [ "$verb" = read ] || [ "$verb" = atomic ]; }; then
    rnic_prints=0 # as perftest's: the client measures, the server prints no result
    grep -q 'the client measures' "$rl" || why+=(no-rnic-server-note)
  fi
  if [ $rnic_prints = 1 ]; then
    grep -qE '^ [0-9]+ +[0-9]+ ' "$rl" || why+=(no-rnic-result-line)
  fi
  if [ "$mode" = lat ] && [ "$role" = rnic-client ] && { [ "$verb" = read ] || [ "$verb" = atomic ]; }; then
    pt_prints=0   # ib_read_lat / ib_atomic_lat servers print no result
  fi
  if [ $pt_prints = 1 ]; then
    grep -qE '^ [0-9]+ +[0-9]+ ' "$gl" 2>/dev/null || why+=(no-perftest-result-line)
  fi
  grep -qi 'error\|failed\|couldn' "$gl" 2>/dev/null && why+=(perftest-error-text)
  # under loss, rnic's record of its port misses what the router dropped
  "$RNIC" pcap check "${lossy[@]}" "$OUT/pcap/$name.rnic.pcap" > "$L/$name.pcap-check.log" 2>&1 || why+=(pcap-check)
  if [ ${#lossy[@]} -gt 0 ]; then
    ip netns exec "$NS" nft list table inet rxe_peer_loss > "$L/$name.nft.log" 2>&1 || true
  fi
  "$RNIC" memcheck "$OUT/mem/$name.rnic" "$OUT/mem/$name.rxe" > "$L/$name.memcheck.log" 2>&1 || why+=(data)
  local verdict=PASS
  [ ${#why[@]} = 0 ] || verdict=FAIL
  [ $verdict = PASS ] && rm -f "$OUT/mem/$name".*
  printf '%-40s %s %6ss %s\n' "$name" "$verdict" "$(pt_since "$t0")" "${why[*]:-}" | tee -a "$PT_RES"
  [ $verdict = PASS ]
}

pt_main() {
  local fails=0 n=0 verb mode size mtu iters extra role name
  mkdir -p "$OUT/mem"
  # the guest has no compiler; glibc and libibverbs' entry points are all it needs
  ${CC:-cc} -O2 -shared -fPIC -fno-stack-protector -U_FORTIFY_SOURCE \
    -o "$OUT/memdump.so" "$PT_HERE/memdump.c" -ldl || { echo "cannot build memdump.so" >&2; return 1; }
  echo "# rnic: $RNIC"; "$RNIC" --version 2>/dev/null || true
  g_run perftest-version "dpkg-query -W perftest; ib_write_bw --version" 60 || true
  cat "$OUT/logs/perftest-version.guest.log" 2>/dev/null
  while read -r verb mode size mtu iters extra; do
    case $verb in ''|'#'*) continue;; esac
    for role in rnic-client rnic-server; do
      name="$verb-$mode-$role-s$size-m$mtu${extra:+-$(echo "$extra" | tr -d ' @-')}"
      if [ -n "${PERFTEST_ONLY:-}" ] && ! grep -qE -- "$PERFTEST_ONLY" <<< "$name"; then continue; fi
      n=$((n + 1))
      # shellcheck disable=SC2086
      pt_case "$name" "$role" "$verb" "$mode" "$size" "$mtu" "$iters" $extra || fails=$((fails + 1))
    done
  done < "$PT_CASES"
  echo "---- perftest interop: $((n - fails))/$n passed; logs: $OUT/logs"
  [ $fails = 0 ]
}

pt_main
