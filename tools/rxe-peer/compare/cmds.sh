# cmds.sh: the guest half of tools/rxe-peer/compare/run.sh — a command list
# for `rxe-peer run` (sourced in the guest after the harness's lib.sh; /share
# is the run's output directory). In one boot:
#
#   1. a veth pair vethA 10.77.0.1 / vethB 10.77.0.2 (MTU CMP_VETH_MTU: 1500,
#      or 9000 for -m 4096) in the guest's
#      one namespace, with policy routing so that traffic between the two
#      addresses really crosses the veth (6.1's rxe is not namespace-aware);
#   2. the kernel's Soft-RoCE: rxeA on vethA, rxeB on vethB, perftest's
#      ib_<verb>_<mode> server on rxeB, client on rxeA;
#   3. the rxe links removed; softrnic (the host's rnic, copied into the
#      share) on the same two interfaces in the same namespace, with the same
#      routing: `rnic perf VERB MODE --dev vethB` server, `--dev vethA` client.
#
# Inputs on the share: compare-tests.txt (NAME VERB MODE SIZE ITERS),
# compare.conf (CMP_REPEAT, CMP_BACKEND, CMP_ONLY, CMP_TIMEOUT, CMP_MTU,
# CMP_VETH_MTU, CMP_PT_WARMUP, CMP_STACKS), rnic.
# Outputs: compare/<stack>-<test>-r<N>.{server,client}.log and
# compare/runs.txt, one line a run (and, for the counters: softrnic's
# compare/softrnic-<test>-r<N>.{server,client}.json from rnic's --json; rxe's
# hw_counters of rxeA and rxeB before and after each run in
# compare/rxe-<test>-r<N>.counters):
#   STACK TEST REP SERVER_RC CLIENT_RC SECONDS A_TX_BYTES A_TX_PKTS B_TX_BYTES B_TX_PKTS XDP
# (the veth counters are the run's deltas: what vethA and vethB sent).

CMP=$SH/compare
mkdir -p "$CMP"
: > "$CMP/runs.txt"
CMP_REPEAT=3 CMP_BACKEND=auto CMP_ONLY= CMP_TIMEOUT=150 CMP_MTU=1024 CMP_VETH_MTU=1500 CMP_PT_WARMUP=1 CMP_STACKS="rxe softrnic"
# shellcheck disable=SC1091
[ -r "$SH/compare.conf" ] && . "$SH/compare.conf"
A_IP=10.77.0.1
B_IP=10.77.0.2
PORT=18515

cmp_veth_pair() {
  modprobe -q veth
  ip link add vethA mtu "$CMP_VETH_MTU" type veth peer name vethB mtu "$CMP_VETH_MTU" || return 1
  ip addr add $A_IP/24 dev vethA
  ip addr add $B_IP/24 dev vethB
  ip link set vethA up
  ip link set vethB up
  local k
  # both addresses are local: accept packets from a local source, no reverse-path filter
  for k in all default vethA vethB; do sysctl -qw net.ipv4.conf.$k.rp_filter=0; done
  for k in all vethA vethB; do sysctl -qw net.ipv4.conf.$k.accept_local=1; done
  # The local table would deliver 10.77.0.2 over lo; look it up after two
  # rules that send what this host sends to each address out of the OTHER
  # veth end. Received packets still meet the local table (pref 1000).
  ip rule add pref 1000 lookup local
  ip rule del pref 0 lookup local
  ip rule add pref 100 iif lo to $B_IP lookup 100
  ip rule add pref 101 iif lo to $A_IP lookup 101
  ip route add $B_IP/32 dev vethA src $A_IP table 100
  ip route add $A_IP/32 dev vethB src $B_IP table 101
  ip neigh replace $B_IP lladdr "$(cat /sys/class/net/vethB/address)" dev vethA nud permanent
  ip neigh replace $A_IP lladdr "$(cat /sys/class/net/vethA/address)" dev vethB nud permanent
  glog "route to $B_IP: $(ip -o route get $B_IP | head -n1)"
  glog "route to $A_IP: $(ip -o route get $A_IP | head -n1)"
  ip -o route get $B_IP | grep -q 'dev vethA' && ip -o route get $A_IP | grep -q 'dev vethB'
}

cmp_ctr() { cat "/sys/class/net/$1/statistics/$2"; }
# rxe's device counters (retries, sequence errors, ...): WHEN DEVICE NAME VALUE a line
cmp_rxe_ctrs() {
  local d f
  for d in rxeA rxeB; do
    for f in /sys/class/infiniband/$d/ports/1/hw_counters/*; do
      [ -r "$f" ] && echo "$1 $d ${f##*/} $(cat "$f")"
    done
  done
}

# cmp_one STACK TEST REP 'SERVER CMD' 'CLIENT CMD'
cmp_one() {
  local stack=$1 name=$2 rep=$3 scmd=$4 ccmd=$5
  local base=$CMP/$stack-$name-r$rep src=0 crc=0 spid t0 t1 xdp=-
  local a0 ap0 b0 bp0
  a0=$(cmp_ctr vethA tx_bytes); ap0=$(cmp_ctr vethA tx_packets)
  b0=$(cmp_ctr vethB tx_bytes); bp0=$(cmp_ctr vethB tx_packets)
  echo "# $scmd" > "$base.server.log"
  echo "# $ccmd" > "$base.client.log"
  [ "$stack" = rxe ] && cmp_rxe_ctrs before > "$base.counters"
  t0=$(date +%s.%N)
  setsid timeout -k 5 "$CMP_TIMEOUT" bash -c "$scmd" >> "$base.server.log" 2>&1 < /dev/null &
  spid=$!
  if wait_tcp $PORT 60 2>> "$base.server.log"; then
    # softrnic's port: which XDP mode holds vethB (xdp = native, xdpgeneric)
    xdp=$(ip -d link show dev vethB | grep -o -w -E 'xdp|xdpgeneric|xdpdrv|xdpoffload' | head -n1)
    timeout -k 5 "$CMP_TIMEOUT" bash -c "$ccmd" >> "$base.client.log" 2>&1 < /dev/null || crc=$?
  else
    crc=255
    kill -TERM "$spid" 2>/dev/null
  fi
  wait "$spid" || src=$?
  t1=$(date +%s.%N)
  [ "$stack" = rxe ] && cmp_rxe_ctrs after >> "$base.counters"
  printf '%s %s %s %s %s %s %s %s %s %s %s\n' "$stack" "$name" "$rep" "$src" "$crc" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
    $(( $(cmp_ctr vethA tx_bytes) - a0 )) $(( $(cmp_ctr vethA tx_packets) - ap0 )) \
    $(( $(cmp_ctr vethB tx_bytes) - b0 )) $(( $(cmp_ctr vethB tx_packets) - bp0 )) "${xdp:--}" \
    | tee -a "$CMP/runs.txt"
  sleep 0.5
}

# cmp_phase STACK: every test, CMP_REPEAT times (the outer loop is the
# repetition, so a slow moment of the host spreads over the tests).
cmp_phase() {
  local stack=$1 rep name verb mode size iters flags s c w
  for ((rep = 1; rep <= CMP_REPEAT; rep++)); do
    while read -r name verb mode size iters; do
      case $name in ''|'#'*) continue;; esac
      if [ -n "$CMP_ONLY" ] && ! grep -qE -- "$CMP_ONLY" <<< "$name"; then continue; fi
      flags="-m $CMP_MTU -n $iters"
      [ "$size" != - ] && flags="-s $size $flags"
      if [ "$stack" = rxe ]; then
        # rnic perf warms WRITE, READ and atomic bandwidth up with 2 x tx depth
        # operations (tools/src/perf/dev/measure.rs); perftest does so only when
        # asked (--perform_warm_up, valid in exactly those tests). Not for
        # atomics: ib_atomic_bw --perform_warm_up on 6.1's rxe hangs both
        # sides before the first result line (seen here; 150 s timeouts).
        w=
        [ "$mode" = bw ] && { [ "$verb" = write ] || [ "$verb" = read ]; } && [ "$CMP_PT_WARMUP" = 1 ] &&
          w=" --perform_warm_up"
        s="ib_${verb}_${mode} -d rxeB -x $GID_B -F $flags$w"
        c="ib_${verb}_${mode} -d rxeA -x $GID_A -F $flags$w $B_IP"
      else
        w="--json $CMP/softrnic-$name-r$rep"
        s="SOFTRNIC_PERFTEST_PLAIN=1 /tmp/rnic perf $verb $mode --dev vethB --backend $CMP_BACKEND --no-progress $flags $w.server.json"
        c="SOFTRNIC_PERFTEST_PLAIN=1 /tmp/rnic perf $verb $mode --dev vethA --backend $CMP_BACKEND --no-progress $flags $w.client.json $B_IP"
      fi
      cmp_one "$stack" "$name" "$rep" "$s" "$c"
    done < "$SH/compare-tests.txt"
  done
}

cmp_main() {
  glog "compare: repeat $CMP_REPEAT, backend $CMP_BACKEND, veth MTU $CMP_VETH_MTU, -m $CMP_MTU${CMP_ONLY:+, only $CMP_ONLY}"
  {
    echo "kernel $(uname -r), $(nproc) vCPUs"
    dpkg-query -W perftest rdma-core
  } > "$CMP/guest-info.txt"
  cmp_veth_pair || { glog "compare: the veth pair's routing is wrong"; return 1; }
  { ip -d link show vethA; ip -d link show vethB; ip rule; ip route show table 100; ip route show table 101
    ip neigh show dev vethA; ip neigh show dev vethB; } > "$CMP/veth-setup.txt" 2>&1

  [[ " $CMP_STACKS " == *" rxe "* ]] && { cmp_rxe || return 1; }
  [[ " $CMP_STACKS " == *" softrnic "* ]] && { cmp_softrnic || return 1; }
  glog "compare: done"
}

# -- the kernel's Soft-RoCE ------------------------------------------------------
cmp_rxe() {
  rdma link add rxeA type rxe netdev vethA || return 1
  rdma link add rxeB type rxe netdev vethB || return 1
  GID_A=$(rxe_gid rxeA $A_IP) || return 1
  GID_B=$(rxe_gid rxeB $B_IP) || return 1
  { rdma link show; ibv_devinfo -d rxeA; ibv_devinfo -d rxeB; echo "GID_A=$GID_A GID_B=$GID_B"; } \
    > "$CMP/rxe-setup.txt" 2>&1
  glog "compare: rxe phase (rxeA GID $GID_A, rxeB GID $GID_B)"
  cmp_phase rxe
  rdma link delete rxeA
  rdma link delete rxeB
  if rdma link show | grep -q -E 'netdev veth[AB]'; then
    glog "compare: an rxe link on the veth pair is still there"; rdma link show; return 1
  fi
}

# -- softrnic on the same two interfaces, same namespace and routing ------------
cmp_softrnic() {
  cp "$SH/rnic" /tmp/rnic && chmod 755 /tmp/rnic || return 1
  { echo "# rdma link after the rxe phase"; rdma link show
    echo "# ldd rnic"; ldd /tmp/rnic; echo "# rnic --version"; /tmp/rnic --version; } \
    > "$CMP/rnic-setup.txt" 2>&1
  glog "compare: softrnic phase ($(/tmp/rnic --version 2>&1 | head -n1))"
  cmp_phase softrnic
}

# benches/compare-all/guest.sh sources this file for its helpers only
[ "${CMP_NO_MAIN:-0}" = 1 ] || cmp_main
