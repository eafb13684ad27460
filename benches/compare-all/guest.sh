# The guest half of benches/compare-all.sh: a command list for
# `rxe-peer run` (sourced in the guest after the harness's lib.sh; $SH is
# the share). The same unmodified perftest binaries of the guest on the
# kernel's Soft-RoCE (rxeA on vethA, rxeB on vethB) and on softrnic (an
# rnicd on each of the same two veth ends, the programs on its drop-in
# libibverbs.so.1 through `rnic exec`; and each program hosting its device
# on its veth end, SOFTRNIC_LOCAL, no rnicd), alternating per round: odd
# rounds rxe first, even rounds softrnic first.
# Inputs on the share: compare-all/{lib.sh,params}, cmds.sh (the veth pair
# and its routing, tools/rxe-peer/compare/cmds.sh), srnic/ (rnicd, rnic and
# the drop-in folders). Output: compare-all/raw-guest.csv, logs in
# compare-all/logs/.

CA=$SH/compare-all
# shellcheck disable=SC1091
. "$CA/params"
# shellcheck disable=SC1091
. "$CA/lib.sh"
RAW=$CA/raw-guest.csv
CMP_LOGS=$CA/logs
mkdir -p "$CMP_LOGS"
: > "$RAW"
CMP_PEER_IP=10.77.0.2
# shellcheck disable=SC1091
CMP_NO_MAIN=1 . "$SH/cmds.sh"
# the deadline of each run (lib.sh's cmp_perftest)
export CMP_TIMEOUT=$GUEST_TIMEOUT

ga_rxe_up() {
  rdma link add rxeA type rxe netdev vethA && rdma link add rxeB type rxe netdev vethB || return 1
  GID_A=$(rxe_gid rxeA 10.77.0.1) && GID_B=$(rxe_gid rxeB 10.77.0.2)
}
ga_rxe_down() { rdma link delete rxeA; rdma link delete rxeB; }

SR=/tmp/srnic
ga_srnic_up() {
  local n ifc ip
  DPIDS=
  for n in a b; do
    ifc=vethA ip=10.77.0.1
    [ $n = b ] && ifc=vethB ip=10.77.0.2
    mkdir -p "$SR/s$n"
    "$SR/rnicd" --iface "$ifc" --gid "$ip" --name "s$n" --sock-dir "$SR/s$n" \
      --backend "$GUEST_BACKEND" > "$CMP_LOGS/rnicd-$n.log" 2>&1 &
    DPIDS+=" $!"
  done
  local i
  for ((i = 0; i < 300; i++)); do
    [ -S "$SR/sa/sa.sock" ] && [ -S "$SR/sb/sb.sock" ] && return 0
    sleep 0.1
  done
  glog "compare-all: rnicd did not come up"; cat "$CMP_LOGS"/rnicd-*.log; return 1
}
ga_srnic_down() {
  local p
  # shellcheck disable=SC2086
  kill $DPIDS 2>/dev/null
  for p in $DPIDS; do wait "$p" 2>/dev/null; done
}

# ga_phase STACK ROUND: every test at every size on one stack
ga_phase() {
  local stack=$1 r=$2 t s args sc cc lenv
  case $stack in
    rxe) ga_rxe_up || return 1 ;;
    softrnic) ga_srnic_up || return 1 ;;
  esac
  for t in $GUEST_TESTS; do
    for s in $(if [ "${t#*_}" = bw ]; then echo "$SIZES_BW"; else echo "$SIZES_LAT"; fi); do
      args="$(cmp_pt_args "$t" "$s") -m $GUEST_MTU"
      if [ "$stack" = rxe ]; then
        sc="${args/ -F/ -F -d rxeB -x $GID_B}"
        cc="${args/ -F/ -F -d rxeA -x $GID_A} $CMP_PEER_IP"
        cmp_perftest guest rxe "$t" "$s" "$r" "" "$sc" "$cc"
      elif [ "$stack" = softrnic-local ]; then
        # the port's backend as rnicd's
        lenv="LD_LIBRARY_PATH=$SR/softrnic-ibverbs SOFTRNIC_LOCAL_BACKEND=$GUEST_BACKEND"
        sc="env $lenv SOFTRNIC_LOCAL=vethB ${args/ -F/ -F -d srnic0 -x 3}"
        cc="env $lenv SOFTRNIC_LOCAL=vethA ${args/ -F/ -F -d srnic0 -x 3} $CMP_PEER_IP"
        cmp_perftest guest softrnic-local "$t" "$s" "$r" "" "$sc" "$cc"
      else
        sc="$SR/rnic exec --sock-dir $SR/sb -- ${args/ -F/ -F -d sb -x 3}"
        cc="$SR/rnic exec --sock-dir $SR/sa -- ${args/ -F/ -F -d sa -x 3} $CMP_PEER_IP"
        # shellcheck disable=SC2086
        cmp_perftest guest softrnic "$t" "$s" "$r" "$DPIDS" "$sc" "$cc"
      fi
      sleep 0.5
    done
  done
  case $stack in
    rxe) ga_rxe_down ;;
    softrnic) ga_srnic_down ;;
  esac
}

ga_main() {
  {
    echo "kernel $(uname -r), $(nproc) vCPUs, cpu MHz $(cmp_mhz)"
    dpkg-query -W perftest rdma-core
  } > "$CA/guest-info.txt"
  cmp_veth_pair || { glog "compare-all: the veth pair's routing is wrong"; return 1; }
  mkdir -p "$SR"
  cp -r "$SH/srnic/." "$SR/" && chmod 755 "$SR/rnicd" "$SR/rnic" || return 1
  local r order
  for ((r = 1; r <= ROUNDS; r++)); do
    order="rxe softrnic softrnic-local"
    [ $((r % 2)) = 0 ] && order="softrnic-local softrnic rxe"
    for st in $order; do
      glog "compare-all: round $r, $st"
      ga_phase "$st" "$r" || glog "compare-all: round $r, $st: set-up failed"
    done
  done
  glog "compare-all: done"
}

ga_main
