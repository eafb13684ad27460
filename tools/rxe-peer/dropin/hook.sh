# hook.sh: the same unmodified Debian tool on both ends — on the host through
# softrnic's drop-in libibverbs.so.1 (`rnic exec`, an `rnicd` on the tap),
# in the guest on the kernel's Soft-RoCE — in both roles. rping and the
# perftest cases with -R connect through the RDMA CM: softrnic's
# librdmacm.so.1 and rnicd's CM against the kernel's rdma_cm. A host hook for the
# rxe-peer harness (tools/rxe-peer/rxe-peer, which boots the guest and
# provides g_start/g_wait/g_run and $NS $TAP $HOST_IP $GUEST_IP $RXE_DEV
# $RXE_GID); `rxe-peer interop` runs it after the rnic cases, or alone:
#
#   tools/rxe-peer/rxe-peer run --hook tools/rxe-peer/dropin/hook.sh
#
# Environment: RNIC, RNICD (default: the repository's target/release/),
# DROPIN_CASES (case list, default cases-ci.txt beside this file),
# DROPIN_ONLY (regex on case names), DROPIN_TIMEOUT (seconds per side, 240).
# Each case gets its own rnicd (auto backend), which records its port's
# first 4000 frames in $OUT/pcap/<case>.rnicd.pcap; that capture must pass
# `rnic pcap check`. Results: $OUT/dropin-results.txt (one PASS/FAIL line
# per case), logs in $OUT/logs/<case>.{host,rxe.guest,rnicd}.log.
# A case passes when both sides exit 0 and print their result lines
# (rping -v: all its pings' data on both; pingpong: "iters in" on both; perftest bw: both; WRITE/SEND latency:
# both; READ and atomic latency: the client), and rdma-core's -c data check
# (when given) finds nothing. A -R case that loses perftest's own CM race
# with the guest is tried again (di_cm_raced says when; its line says so).

DI_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DI_REPO=$(cd "$DI_HERE/../../.." && pwd)
RNIC=${RNIC:-$DI_REPO/target/release/rnic}
RNICD=${RNICD:-$(dirname "$RNIC")/rnicd}
DI_CASES=${DROPIN_CASES:-$DI_HERE/cases-ci.txt}
DI_TO=${DROPIN_TIMEOUT:-240}
DI_RES=$OUT/dropin-results.txt
DI_SOCK=$OUT/dropin-sock
DI_DEV=srnic0
# the address's RoCE v2 GID (softrnic's table: 0/1 link-local v1/v2, 2/3 the address v1/v2)
DI_GID=3
: > "$DI_RES"

di_now() { date +%s.%N; }
di_since() { awk -v a="$1" -v b="$(di_now)" 'BEGIN { printf "%.1f", b - a }'; }

# the TCP port of the tools' out-of-band exchange (pingpong's and perftest's default)
DI_PORT=18515

# di_daemon_up NAME: rnicd on the tap, in the tap's namespace, serving
# $DI_SOCK and recording its port's first frames in $OUT/pcap/NAME.rnicd.pcap
di_daemon_up() {
  mkdir -p "$DI_SOCK"
  ip netns exec "$NS" "$RNICD" --iface "$TAP" --gid "$HOST_IP" \
    --name "$DI_DEV" --sock-dir "$DI_SOCK" \
    --pcap "$OUT/pcap/$1.rnicd.pcap" --pcap-frames 4000 > "$OUT/logs/$1.rnicd.log" 2>&1 &
  DI_DAEMON=$!
  local i
  for ((i = 0; i < 100; i++)); do
    [ -S "$DI_SOCK/$DI_DEV.sock" ] && return 0
    kill -0 "$DI_DAEMON" 2>/dev/null || break
    sleep 0.1
  done
  echo "rnicd did not come up:"; cat "$OUT/logs/$1.rnicd.log"; return 1
}

di_daemon_down() {
  kill -TERM "$DI_DAEMON" 2>/dev/null || true
  wait "$DI_DAEMON" 2>/dev/null || true
}

# di_host_cm_listens PID: wait until the host's rnicd has a listening CM ID
# (its `cm_listeners` counter), or PID is gone
di_host_cm_listens() {
  local i
  for ((i = 0; i < 600; i++)); do
    "$RNIC" stats --daemon --sock-dir "$DI_SOCK" 2>/dev/null | grep -q ' cm_listeners [1-9]' && return 0
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# the host side: an unmodified tool on the drop-in, in the tap's namespace
di_host() { ip netns exec "$NS" timeout -k 5 "$DI_TO" "$RNIC" exec --sock-dir "$DI_SOCK" -- "$@"; }

# di_case NAME ROLE TOOL FLAGS...
di_case() {
  local name=$1 role=$2 tool=$3
  shift 3
  local flags=("$@") L=$OUT/logs t0 hrc=0 grc=0 why=() gflag=-x cm=0
  case $tool in ibv_*) gflag=-g;; esac
  # the RDMA CM connects these (librdmacm on both ends): the address picks
  # the device and the GID, so no -d or GID index
  case " ${flags[*]} " in *" -R "*) cm=1;; esac
  local host=("$tool" -d "$DI_DEV" "$gflag" "$DI_GID" "${flags[@]}")
  local g="$tool -d $RXE_DEV $gflag $RXE_GID ${flags[*]}"
  local hserver=() gserver="" hclient=("$GUEST_IP") gclient=" $HOST_IP"
  if [ $cm = 1 ]; then
    host=("$tool" "${flags[@]}") g="$tool ${flags[*]}"
  fi
  if [ "$tool" = rping ]; then
    # rping names its role and the address to bind or connect to
    cm=1 host=("$tool" "${flags[@]}") g="$tool ${flags[*]}"
    hserver=(-s -a "$HOST_IP") gserver=" -s -a $GUEST_IP"
    hclient=(-c -a "$GUEST_IP") gclient=" -c -a $HOST_IP"
  fi
  # perftest: -F (no CPU frequency check) and a QP timeout of 2^18 x 4.096
  # us (1.07 s a try, 8 tries). A TCG guest on a busy host stalls for up
  # to a second at times; perftest's default (14: 67 ms a try) ends the
  # run in IBV_WC_RETRY_EXC_ERR when a stall outlasts its 8 tries, which
  # is the requester doing what IBA 9.7.6.1.3 says, not an interop fault.
  # ibv_*_pingpong hard-code timeout 14 and cannot be given more.
  [ "${tool#ib_}" != "$tool" ] && host+=(-F -u 18) && g+=" -F -u 18"
  local port=$DI_PORT
  t0=$(di_now)
  di_daemon_up "$name" || why+=(no-rnicd)
  if [ "$role" = softrnic-client ]; then
    g_start "$name.rxe" "echo '# $g$gserver'; $g$gserver" "$DI_TO"
    echo "# ${host[*]} ${hclient[*]}" > "$L/$name.host.log"
    local listen="wait_tcp $port 60"
    [ $cm = 1 ] && listen="wait_cm_listen 60"
    if g_run "$name.listen" "$listen" 90; then
      di_host "${host[@]}" "${hclient[@]}" >> "$L/$name.host.log" 2>&1 || hrc=$?
    else
      why+=(rxe-server-not-listening); hrc=125
    fi
    [ $hrc = 0 ] || { sleep 1; g_kill "$name.rxe"; }
    g_wait "$name.rxe" $((DI_TO + 30)) || grc=$?
  else
    echo "# ${host[*]} ${hserver[*]}" > "$L/$name.host.log"
    di_host "${host[@]}" "${hserver[@]}" >> "$L/$name.host.log" 2>&1 &
    local hpid=$! listening=0
    HOST_PIDS+=("$hpid")
    if [ $cm = 1 ]; then
      di_host_cm_listens "$hpid" && listening=1
    else
      host_listens "$NS" "$port" "$hpid" && listening=1
    fi
    if [ $listening = 1 ]; then
      g_run "$name.rxe" "echo '# $g$gclient'; $g$gclient" "$DI_TO" || grc=$?
    else
      echo "# not run: the host's server is gone" > "$L/$name.rxe.guest.log"; grc=125
    fi
    [ $grc = 0 ] || { sleep 1; kill -TERM "$hpid" 2>/dev/null || true; }
    wait "$hpid" || hrc=$?
  fi
  di_daemon_down
  [ $hrc = 0 ] || why+=("host-exit-$hrc")
  [ $grc = 0 ] || why+=("rxe-exit-$grc")
  local hl=$L/$name.host.log gl=$L/$name.rxe.guest.log client server
  if [ "$role" = softrnic-client ]; then client=$hl server=$gl; else client=$gl server=$hl; fi
  case $tool in
    rping)
      # -v prints each ping's data on both ends (all -C of them), -V checks it
      local want=1 f
      for ((f = 0; f < ${#flags[@]} - 1; f++)); do
        [ "${flags[f]}" = -C ] && want=${flags[f + 1]}
      done
      [ "$(grep -c 'ping data: ' "$client" 2>/dev/null)" -ge "$want" ] || why+=(no-client-result)
      [ "$(grep -c 'ping data: ' "$server" 2>/dev/null)" -ge "$want" ] || why+=(no-server-result)
      grep -qi 'mismatch' "$hl" "$gl" 2>/dev/null && why+=(data-check);;
    ibv_*)
      grep -q ' iters in ' "$client" 2>/dev/null || why+=(no-client-result)
      grep -q ' iters in ' "$server" 2>/dev/null || why+=(no-server-result)
      grep -qi 'invalid data\|mismatch' "$hl" "$gl" 2>/dev/null && why+=(data-check);;
    *)
      grep -qE '^ [0-9]+ +[0-9]+ ' "$client" 2>/dev/null || why+=(no-client-result)
      case $tool in
        ib_read_lat|ib_atomic_lat) ;;   # their servers print no result
        *) grep -qE '^ [0-9]+ +[0-9]+ ' "$server" 2>/dev/null || why+=(no-server-result);;
      esac;;
  esac
  grep -qi 'couldn.t\|failed\|error' "$hl" "$gl" 2>/dev/null && why+=(error-text)
  "$RNIC" pcap check "$OUT/pcap/$name.rnicd.pcap" > "$L/$name.pcap-check.log" 2>&1 || why+=(pcap-check)
  local verdict=PASS
  [ ${#why[@]} = 0 ] || verdict=FAIL
  [ -n "${DI_NOTE:-}" ] && why+=("$DI_NOTE")
  printf '%-52s %s %6ss %s\n' "$name" "$verdict" "$(di_since "$t0")" "${why[*]:-}" | tee -a "$DI_RES"
  [ $verdict = PASS ]
}

# di_cm_raced NAME ROLE: the case is one where perftest's own retry cannot
# work and the guest lost the race it covers. With -R, perftest's client
# and server exchange a message over their first connection, then the
# server creates a new listening ID and the client at once asks for the
# second (data) connection; a client that gets there first is rejected
# with reason 8 (no listener for the service ID). perftest 4.5+0.17's
# rdma_cm_client_connection retries (10 tries, 100 ms apart) but destroys
# its CM IDs between tries and then resolves on the destroyed IDs, so its
# second try fails with EINVAL on any librdmacm. A slow TCG guest loses
# that race to the host-side client now and then; only that case, and
# only with the softrnic side as the client, is tried again.
di_cm_raced() {
  [ "$2" = softrnic-client ] && grep -q 'RDMA_CM_EVENT_REJECTED; error: 8\.' "$OUT/logs/$1.host.log" 2>/dev/null
}

# di_case_tries NAME ROLE TOOL FLAGS...: di_case, and while it fails as
# di_cm_raced says, up to 4 tries in all: the failed try's logs and
# capture are set aside as NAME.tryN.* and its result line is replaced by
# the next try's (under two CPU hogs about one try in six loses the race)
di_case_tries() {
  local name=$1 role=$2 f try=1
  DI_NOTE="" di_case "$@" && return 0
  while di_cm_raced "$name" "$role" && [ $try -lt 4 ]; do
    sed -i '$d' "$DI_RES"
    for f in "$OUT"/logs/"$name".* "$OUT/pcap/$name.rnicd.pcap"; do
      case $f in *.try[0-9].*) continue;; esac
      [ -e "$f" ] && mv "$f" "${f/$name./$name.try$try.}"
    done
    try=$((try + 1))
    echo "# $name: rejected with reason 8 before the guest listened again; try $try"
    DI_NOTE="try-$try-after-rej-8" di_case "$@" && return 0
  done
  return 1
}

di_main() {
  local fails=0 n=0 tool flags role name line
  echo "# drop-in: $(ls -l "$(dirname "$RNIC")/softrnic-ibverbs/libibverbs.so.1" 2>&1)"
  di_daemon_up devinfo || { echo "dropin: no rnicd"; return 1; }
  # ibv_devices and ibv_devinfo -v list the device and its RoCE v2 GID
  local L=$OUT/logs t0; t0=$(di_now)
  { di_host ibv_devices && di_host ibv_devinfo -v -d "$DI_DEV"; } > "$L/devinfo.host.log" 2>&1
  local why=() st=$?
  [ $st = 0 ] || why+=("host-exit-$st")
  grep -q "^ *$DI_DEV " "$L/devinfo.host.log" || why+=(not-in-ibv_devices)
  grep -q "GID\[ *$DI_GID\]:.*::ffff:$HOST_IP, RoCE v2" "$L/devinfo.host.log" || why+=(no-roce-v2-gid)
  printf '%-52s %s %6ss %s\n' ibv_devices+ibv_devinfo "$([ ${#why[@]} = 0 ] && echo PASS || echo FAIL)" \
    "$(di_since "$t0")" "${why[*]:-}" | tee -a "$DI_RES"
  [ ${#why[@]} = 0 ] || fails=$((fails + 1))
  n=$((n + 1))
  di_daemon_down
  while read -r line; do
    case $line in ''|'#'*) continue;; esac
    read -r tool flags <<< "$line"
    for role in softrnic-client softrnic-server; do
      name="$tool$(echo " $flags" | tr -d ' ' | tr -c 'a-zA-Z0-9_\n-' '_')-$role"
      if [ -n "${DROPIN_ONLY:-}" ] && ! grep -qE -- "$DROPIN_ONLY" <<< "$name"; then continue; fi
      n=$((n + 1))
      # shellcheck disable=SC2086
      di_case_tries "$name" "$role" "$tool" $flags || fails=$((fails + 1))
    done
  done < "$DI_CASES"
  echo "---- drop-in interop: $((n - fails))/$n passed; logs: $OUT/logs"
  [ $fails = 0 ]
}

di_main
