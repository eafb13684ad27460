# interop.sh: `rxe-peer interop` — softrnic (rnic pingpong and rnic perf on
# the host, then Debian's unmodified tools on the libibverbs drop-in) against
# the kernel's Soft-RoCE (rdma-core's tools in the guest). Sourced by
# rxe-peer; uses its boot/g_run/cap_start functions. See docs/interop.md.

RNIC=${RNIC:-$REPO/target/release/rnic}
PP_PORT=18515
# The loss test's routed path: rnic in netns rxq-<pid> (10.88.1.1) behind the
# tap's namespace, which forwards and drops ~2 % of UDP 4791 both ways.
LNS=rxq-$$
LVA=rxa-$$
LVB=rxb-$$
LOSS_IP=10.88.1.1
LOSS_PCT=${RXE_PEER_LOSS_PCT:-2}

interop_usage() {
  cat <<'EOF'
rxe-peer interop [--full] [--only REGEX] [--out DIR]
  Boots the rxe guest once and runs rnic pingpong against ibv_rc/uc/ud_pingpong
  in both roles (rnic client <-> rxe server, rxe client <-> rnic server), an
  RC loss test (nftables drops ~2 % of UDP 4791 both ways), and rnic perf
  against perftest (ib_write/read/send/atomic_bw and _lat, both roles;
  perftest/cases-ci.txt, --full: perftest/cases.txt). Every case must
  exit 0 on both sides, print the result lines, pass rdma-core's and rnic's
  buffer checks (when available), and both captures must pass `rnic pcap check`.
  Then the drop-in: the same unmodified Debian tool (ibv_*_pingpong, perftest)
  on both ends, softrnic's libibverbs.so.1 on the host, both roles
  (dropin/cases-ci.txt; --full: dropin/cases.txt, perftest with -a).
  Last, memory windows: ibverbs/tests/c/mw_check on rxe and on the drop-in
  (mw/hook.sh; rxe's known differences in mw/rxe-differences.txt).
  Default: the trimmed CI list (a few sizes); --full: all sizes and MTUs.
  --only REGEX: only the cases whose name matches.
EOF
}

# Case list: NAME TRANSPORT ROLE SIZE MTU ITERS PATH
interop_cases() {
  local full=$1 tr role s m n
  for role in rnic-client rnic-server; do
    if [ "$full" = 1 ]; then
      for tr in rc uc; do
        for m in 1024 4096; do
          for s in 1 64 1023 1024 1025 4096 4097 16384 65536; do
            n=20; [ "$s" -gt 4096 ] && n=5
            echo "$tr-$role-s$s-m$m $tr $role $s $m $n direct"
          done
        done
      done
      for s in 1 64 1024 2048 4096; do echo "ud-$role-s$s ud $role $s 4096 20 direct"; done
    else
      echo "rc-$role-s1-m1024 rc $role 1 1024 20 direct"
      echo "rc-$role-s4096-m1024 rc $role 4096 1024 20 direct"
      echo "rc-$role-s65536-m4096 rc $role 65536 4096 5 direct"
      echo "uc-$role-s1-m1024 uc $role 1 1024 20 direct"
      echo "uc-$role-s65536-m4096 uc $role 65536 4096 5 direct"
      echo "ud-$role-s1 ud $role 1 4096 20 direct"
      echo "ud-$role-s2048 ud $role 2048 4096 20 direct"
    fi
  done
  echo "loss-rc-rnic-client-s4096-m1024 rc rnic-client 4096 1024 300 lossy"
  [ "$full" = 1 ] && echo "loss-rc-rnic-server-s4096-m1024 rc rnic-server 4096 1024 300 lossy"
  return 0
}

loss_path_up() {
  ip netns add "$LNS"; NETNS_LIST+=("$LNS")
  ip link add "$LVA" mtu 9000 netns "$LNS" type veth peer name "$LVB" mtu 9000 netns "$NS"
  ip -n "$LNS" link set lo up
  ip -n "$LNS" addr add "$LOSS_IP/24" dev "$LVA"
  ip -n "$LNS" link set "$LVA" up
  ip -n "$LNS" route add default via 10.88.1.254
  ip -n "$NS" addr add 10.88.1.254/24 dev "$LVB"
  ip -n "$NS" link set "$LVB" up
  ip netns exec "$LNS" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
  ip netns exec "$NS" sysctl -qw net.ipv4.ip_forward=1
  ip netns exec "$LNS" nft -f - <<EOF
table inet rxe_peer {
  chain input { type filter hook input priority 0; iifname "$LVA" udp dport 4791 drop; }
}
EOF
}

# The drop rules for one loss case: ~LOSS_PCT % of the UDP 4791 frames both
# ways (requests and ACKs alike carry destination port 4791) until LOSS_BYTES
# bytes of them went through (a stateful quota, new for each case; 300
# exchanges of 4 KiB are ~2.6 MB both ways). The end runs clean on purpose: the pingpong
# programs destroy their QP as soon as their own counts are reached, so a lost
# ACK of either side's last message leaves the other side retransmitting to a
# QP that is gone (rxe treats rdma-core's retry_cnt 7 as "retry for ever").
LOSS_BYTES=${RXE_PEER_LOSS_BYTES:-2000000}
loss_rules() {
  ip netns exec "$NS" nft -f - <<EOF
table inet rxe_peer_loss
delete table inet rxe_peer_loss
table inet rxe_peer_loss {
  chain forward {
    type filter hook forward priority 0;
    udp dport 4791 quota until $LOSS_BYTES bytes numgen random mod 100 < $LOSS_PCT counter drop
  }
}
EOF
}

# One pingpong case. Returns 0 when it passed.
pp_case() {
  local name=$1 tr=$2 role=$3 size=$4 mtu=$5 iters=$6 path=$7
  local tool=ibv_${tr}_pingpong to=120 lossy=() rns=$NS rdev=$TAP rip=$HOST_IP
  local g="-d $RXE_DEV -g $RXE_GID -s $size -n $iters" r=(pingpong -s "$size" -n "$iters")
  case $tr in ud) r+=(--ud);; uc) r+=(--uc);; esac
  if [ "$tr" != ud ]; then g+=" -m $mtu"; r+=(-m "$mtu"); fi
  # rdma-core's -c/--chk expects its own buffer pattern from the sender:
  # only meaningful when rnic sends (and checks) the same one.
  if [ "$RXE_CHK" = 1 ] && [ "$RNIC_CHK" = 1 ]; then g+=" -c"; r+=(-c); fi
  if [ "$path" = lossy ]; then
    rns=$LNS rdev=$LVA rip=$LOSS_IP lossy=(--lossy) to=300
    loss_rules
  fi
  # AF_XDP frames bypass tcpdump on the host side: rnic records its own port.
  r+=(-d "$rdev" --pcap "$OUT/pcap/$name.rnic.pcap")
  local t0 rrc=0 grc=0 prc=0 why=() L=$OUT/logs
  t0=$(now)
  cap_start "$name" || why+=(host-capture)
  g_run "$name.gcap" "gcap_start $name" 30 || why+=(guest-capture)
  if [ "$role" = rnic-client ]; then
    g_start "$name.rxe" "echo '# $tool $g'; $tool $g" "$to"
    echo "# rnic ${r[*]} $GUEST_IP" > "$L/$name.rnic.log"
    if g_run "$name.listen" "wait_tcp $PP_PORT 60" 90; then
      ip netns exec "$rns" timeout -k 5 "$to" "$RNIC" "${r[@]}" "$GUEST_IP" >> "$L/$name.rnic.log" 2>&1 || rrc=$?
    else
      why+=(rxe-server-not-listening); rrc=125
    fi
    # a failed client leaves the server waiting for ever: stop it now
    [ $rrc = 0 ] || { sleep 1; g_kill "$name.rxe"; }
    g_wait "$name.rxe" $((to + 30)) || grc=$?
  else
    echo "# rnic ${r[*]}" > "$L/$name.rnic.log"
    ip netns exec "$rns" timeout -k 5 "$to" "$RNIC" "${r[@]}" >> "$L/$name.rnic.log" 2>&1 &
    local rpid=$!
    HOST_PIDS+=("$rpid")
    if host_listens "$rns" "$PP_PORT" "$rpid"; then
      g_run "$name.rxe" "echo '# $tool $g $rip'; $tool $g $rip" "$to" || grc=$?
    else
      echo "# not run: rnic's server is gone" > "$L/$name.rxe.guest.log"; grc=125
    fi
    [ $grc = 0 ] || { sleep 1; kill -TERM "$rpid" 2>/dev/null || true; }
    wait "$rpid" || rrc=$?
  fi
  g_run "$name.gcapstop" "gcap_stop $name" 30 >/dev/null || why+=(guest-capture)
  cap_stop
  [ $rrc = 0 ] || why+=("rnic-exit-$rrc")
  [ $grc = 0 ] || why+=("$tool-exit-$grc")
  local f
  for f in "$L/$name.rnic.log" "$L/$name.rxe.guest.log"; do
    grep -q ' iters in ' "$f" 2>/dev/null || why+=("no-result-line:${f##*/}")
    # rdma-core's --chk prints "invalid data in page N" (and keeps going)
    grep -qi 'invalid data\|mismatch\|corrupt' "$f" 2>/dev/null && why+=("data-check:${f##*/}")
  done
  # rnic's own record (its port) misses what the router dropped on the way to it.
  {
    "$RNIC" pcap check "${lossy[@]}" "$OUT/pcap/$name.rnic.pcap" 2>&1 || prc=$?
    "$RNIC" pcap check "${lossy[@]}" "$OUT/pcap/$name.host.pcap" 2>&1 || prc=$?
    "$RNIC" pcap check "${lossy[@]}" "$OUT/pcap/$name.guest.pcap" 2>&1 || prc=$?
  } > "$L/$name.pcap-check.log"
  [ $prc = 0 ] || why+=(pcap-check)
  if [ "$path" = lossy ]; then
    ip netns exec "$NS" nft list table inet rxe_peer_loss > "$L/$name.nft.log" 2>&1 || true
  fi
  local verdict=PASS
  [ ${#why[@]} = 0 ] || verdict=FAIL
  printf '%-36s %s %6ss %s\n' "$name" "$verdict" "$(since "$t0")" "${why[*]:-}" | tee -a "$OUT/results.txt" >&2
  [ $verdict = PASS ]
}

interop_hook() {
  : > "$OUT/results.txt"
  local t0 fails=0 line
  t0=$(now)
  if grep -q lossy "$OUT/cases.txt" || grep -q '^[^#].*@lossy' "$PT_LIST"; then loss_path_up; fi
  while read -r line; do
    # shellcheck disable=SC2086
    pp_case $line || fails=$((fails + 1))
  done < "$OUT/cases.txt"
  echo "pingpong_seconds=$(since "$t0")" >> "$OUT/timings"
  # perftest: rnic perf against ib_*_bw / ib_*_lat, both roles (perftest/hook.sh)
  local tp; tp=$(now)
  ( PERFTEST_CASES=$PT_LIST PERFTEST_ONLY=$PT_ONLY
    # shellcheck source=perftest/hook.sh
    . "$HERE/perftest/hook.sh" ) > "$OUT/logs/perftest.log" 2>&1 || fails=$((fails + 1))
  [ -f "$OUT/perftest-results.txt" ] && cat "$OUT/perftest-results.txt" >&2
  echo "perftest_seconds=$(since "$tp")" >> "$OUT/timings"
  # the drop-in: the same unmodified tool on both ends (dropin/hook.sh)
  local td; td=$(now)
  ( DROPIN_CASES=$DI_LIST DROPIN_ONLY=$PT_ONLY
    # shellcheck source=dropin/hook.sh
    . "$HERE/dropin/hook.sh" ) > "$OUT/logs/dropin.log" 2>&1 || fails=$((fails + 1))
  [ -f "$OUT/dropin-results.txt" ] && cat "$OUT/dropin-results.txt" >&2
  echo "dropin_seconds=$(since "$td")" >> "$OUT/timings"
  # memory windows: one program's transcript on both stacks (mw/hook.sh)
  ( # shellcheck source=mw/hook.sh
    . "$HERE/mw/hook.sh" ) > "$OUT/logs/mw.log" 2>&1 || fails=$((fails + 1))
  [ -f "$OUT/mw-results.txt" ] && cat "$OUT/mw-results.txt" >&2
  echo "suite_seconds=$(since "$t0")" >> "$OUT/timings"
  [ $fails = 0 ]
}

interop_main() {
  local full=0 only=
  while [ $# -gt 0 ]; do
    case $1 in
      --full) full=1; shift;;
      --only) only=$2; shift 2;;
      --out) OUT=$2; shift 2;;
      -h|--help) interop_usage; return 0;;
      *) interop_usage >&2; return 2;;
    esac
  done
  need_root
  local t0; t0=$(now)
  local lib; lib=$(dirname "$RNIC")/softrnic-ibverbs/libibverbs.so.1
  if [ ! -x "$RNIC" ] || [ ! -x "$(dirname "$RNIC")/rnicd" ] || [ ! -e "$lib" ]; then
    say "building rnic, rnicd and the libibverbs drop-in (cargo build --release)"
    (cd "$REPO" && cargo build --release -q -p tools -p rnicd -p softrnic -p softrnic-ibverbs --bins --lib) ||
      die "cannot build rnic, rnicd, libibverbs.so.1"
  fi
  command -v tcpdump >/dev/null && command -v nft >/dev/null || host_deps
  image_build
  local tbuild; tbuild=$(since "$t0")
  OUT=$(realpath -m "${OUT:-$(default_out interop)}")
  mkdir -p "$OUT"
  echo "image_seconds=$tbuild" > "$OUT/timings"
  interop_cases "$full" | { if [ -n "$only" ]; then grep -E -- "$only" || true; else cat; fi; } > "$OUT/cases.txt"
  PT_LIST=$HERE/perftest/cases-ci.txt DI_LIST=$HERE/dropin/cases-ci.txt
  [ "$full" = 1 ] && PT_LIST=$HERE/perftest/cases.txt DI_LIST=$HERE/dropin/cases.txt
  PT_ONLY=$only
  local h; h=$("$RNIC" pingpong --help)
  RNIC_CHK=0; grep -q -- '--chk' <<< "$h" && RNIC_CHK=1
  grep -q -- '--uc' <<< "$h" || say "note: this rnic has no 'pingpong --uc': the UC cases will fail"
  say "$(wc -l < "$OUT/cases.txt") cases; rnic buffer check (-c): $([ $RNIC_CHK = 1 ] && echo on || echo 'not available: data is not checked')"
  local rc=0
  boot interop_hook || rc=$?
  say "rdma-core buffer check (-c): $([ "${RXE_CHK:-0}" = 1 ] && [ $RNIC_CHK = 1 ] && echo on || echo off)"
  # Wireshark's opinion of one capture, when the shared helper is there (optional).
  local judge=$REPO/../shared/tools/tshark-judge f
  f=$OUT/pcap/rc-rnic-client-s4096-m1024.rnic.pcap
  [ -s "$f" ] || f=$(ls "$OUT"/pcap/*.rnic.pcap 2>/dev/null | head -n1 || true)
  if [ -x "$judge" ] && [ -n "$f" ] && command -v tshark >/dev/null; then
    { echo "# tshark-judge $f"; "$judge" "$f"; echo "# exit=$?"; } > "$OUT/logs/tshark-judge.log" 2>&1 || true
    say "tshark-judge ${f##*/}: $(sed -n 2p "$OUT/logs/tshark-judge.log")"
  fi
  local pass total ptpass ptotal dipass ditotal mwpass
  pass=$(grep -c ' PASS ' "$OUT/results.txt" || true)
  total=$(wc -l < "$OUT/cases.txt")
  ptpass=$(grep -c ' PASS ' "$OUT/perftest-results.txt" 2>/dev/null || true)
  ptotal=$(grep -c . "$OUT/perftest-results.txt" 2>/dev/null || true)
  dipass=$(grep -c ' PASS ' "$OUT/dropin-results.txt" 2>/dev/null || true)
  ditotal=$(grep -c . "$OUT/dropin-results.txt" 2>/dev/null || true)
  mwpass=$(grep -c ' PASS ' "$OUT/mw-results.txt" 2>/dev/null || true)
  echo "---- rxe interop: pingpong $pass/$total, perftest $ptpass/$ptotal, drop-in $dipass/$ditotal, memory windows ${mwpass:-0}/1 passed ($(tr '\n' ' ' < "$OUT/timings")); logs, captures: $OUT"
  cat "$OUT/results.txt" "$OUT/perftest-results.txt" "$OUT/dropin-results.txt" "$OUT/mw-results.txt" 2>/dev/null
  [ $((total + ptotal + ditotal)) -gt 0 ] || { say "no case matches --only $only"; return 1; }
  [ "$pass" = "$total" ] && [ "${ptpass:-0}" = "${ptotal:-0}" ] && [ "${dipass:-0}" = "${ditotal:-0}" ] &&
    [ "${mwpass:-0}" = 1 ] && [ $rc = 0 ]
}
