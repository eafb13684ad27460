# guest-lib.sh: sourced by the rxe-peer guest's init (as /share/lib.sh) and by
# every command it runs for the host. Bash, in the guest; /share is the run's
# output directory on the host (9p).
#
# Command lists (rxe-peer run CMDS) are sourced after this file and may use:
#   $RXE_DEV $RXE_GID $RXE_MTU $GUEST_IP $HOST_IP   the rxe device on eth0
#   wait_tcp PORT [SECONDS]          wait until something listens on TCP PORT
#   wait_cm_listen [SECONDS]         wait until an RDMA CM ID listens
#   gcap_start NAME / gcap_stop NAME tcpdump on eth0 -> /share/pcap/NAME.guest.pcap
#   host_sync NAME [SECONDS]         meet the host hook's wait_guest/release_guest
#   agent                            serve the host hook's g_start/g_run requests

SH=/share
uptime_s() { cut -d' ' -f1 /proc/uptime; }
glog() { echo "[guest $(uptime_s)] $*"; }

# The GID table index of the RoCE v2 entry ::ffff:IPV4 (IPv4-mapped) on port 1.
rxe_gid() {
  local dev=$1 ip=$2 want t n try d=/sys/class/infiniband/$1/ports/1
  want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${ip//./ })
  for try in $(seq 50); do
    for t in $(grep -l -x 'RoCE v2' "$d"/gid_attrs/types/* 2>/dev/null); do
      n=${t##*/}
      if [ "$(cat "$d/gids/$n" 2>/dev/null)" = "$want" ]; then echo "$n"; return 0; fi
    done
    sleep 0.1
  done
  echo "rxe_gid: no RoCE v2 GID $want on $dev" >&2
  return 1
}

wait_tcp() {
  local port=$1 i
  for ((i = 0; i < ${2:-30} * 10; i++)); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  echo "wait_tcp: nothing listens on $port" >&2; return 1
}

# wait_cm_listen [SECONDS]: until an RDMA CM ID listens (rdma resource)
wait_cm_listen() {
  local i
  for ((i = 0; i < ${1:-30} * 10; i++)); do
    rdma resource show cm_id 2>/dev/null | grep -q 'state LISTEN' && return 0
    sleep 0.1
  done
  echo "wait_cm_listen: no listening CM ID" >&2; return 1
}
gcap_start() {
  local name=$1 i
  setsid tcpdump -Z root -i eth0 -s 0 -U --immediate-mode -B 16384 -n -w "/tmp/$name.pcap" \
    > "/tmp/$name.tcpdump.log" 2>&1 < /dev/null &
  echo $! > "/tmp/$name.tcpdump.pid"
  for ((i = 0; i < 100; i++)); do
    grep -q 'listening on' "/tmp/$name.tcpdump.log" && return 0
    sleep 0.1
  done
  cat "/tmp/$name.tcpdump.log" >&2; return 1
}
gcap_stop() {
  local name=$1 pid i
  pid=$(cat "/tmp/$name.tcpdump.pid" 2>/dev/null) || { echo "gcap_stop: no capture $name" >&2; return 1; }
  sleep 0.3
  kill -INT "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  cp "/tmp/$name.pcap" "$SH/pcap/$name.guest.pcap" && rm -f "/tmp/$name.pcap"
  grep -h 'captured\|dropped' "/tmp/$name.tcpdump.log"
}

host_sync() {
  local i
  touch "$SH/sync/$1.ready"
  for ((i = 0; i < ${2:-600} * 10; i++)); do
    [ -e "$SH/sync/$1.done" ] && return 0
    sleep 0.1
  done
  echo "host_sync $1: the host did not release" >&2; return 1
}

# Run what the host drops in /share/req (ID.sh) in the background, each in
# its own session, with its output in /share/logs/ID.guest.log and its status
# in /share/req/ID.rc; ID.kill stops ID's session. Until /share/req/stop.
agent() {
  local f id pid
  glog "agent: serving the host"
  while :; do
    for f in "$SH"/req/*.sh; do
      [ -e "$f" ] || continue
      id=${f##*/}; id=${id%.sh}
      mv "$f" "$SH/req/$id.run" 2>/dev/null || continue
      ( setsid -w bash "$SH/req/$id.run" > "$SH/logs/$id.guest.log" 2>&1 < /dev/null
        echo $? > "$SH/req/$id.rc.tmp"; mv "$SH/req/$id.rc.tmp" "$SH/req/$id.rc" ) &
    done
    for f in "$SH"/req/*.kill; do
      [ -e "$f" ] || continue
      id=${f##*/}; id=${id%.kill}
      # the whole session: timeout(1) puts its command in a process group of its own
      pid=$(cat "$SH/req/$id.pid" 2>/dev/null) && pkill -TERM -s "$pid"
      rm -f "$f"
    done
    [ -e "$SH/req/stop" ] && break
    sleep 0.1
  done
  wait
  glog "agent: stop"
}

export SH
export -f uptime_s glog rxe_gid wait_tcp wait_cm_listen gcap_start gcap_stop host_sync

guest_main() {
  local a rc=0
  GUEST_IP=10.88.0.2 HOST_IP=10.88.0.1
  for a in $(cat /proc/cmdline); do
    case $a in
      rxepeer.ip=*) GUEST_IP=${a#*=};;
      rxepeer.host=*) HOST_IP=${a#*=};;
    esac
  done
  glog "init; kernel $(uname -r), $(nproc) cpus"
  fail() { glog "setup failed: $*"; dmesg > "$SH/logs/guest-dmesg.log"; echo "$*" > "$SH/failed"; exit 1; }
  modprobe -a rdma_rxe ib_uverbs rdma_ucm || fail "modprobe rdma_rxe"
  ip link set lo up
  ip link set eth0 mtu 9000 up || fail "eth0"
  ip addr add "$GUEST_IP/24" dev eth0
  # the routed path of the loss test: softrnic behind a router namespace
  ip route add 10.88.1.0/24 via "$HOST_IP" dev eth0
  sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
  RXE_DEV=rxe0
  rdma link add "$RXE_DEV" type rxe netdev eth0 || fail "rdma link add $RXE_DEV"
  RXE_GID=$(rxe_gid "$RXE_DEV" "$GUEST_IP") || fail "no RoCE v2 GID"
  RXE_MTU=$(ibv_devinfo -d "$RXE_DEV" | sed -n 's/.*active_mtu:[[:space:]]*\([0-9]*\).*/\1/p')
  export GUEST_IP HOST_IP RXE_DEV RXE_GID RXE_MTU
  {
    echo "# rdma link"; rdma link show
    echo "# ibv_devinfo -v"; ibv_devinfo -v -d "$RXE_DEV"
    echo "# packages"; dpkg-query -W rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils
    echo "# ibv_rc_pingpong --help"; ibv_rc_pingpong --help 2>&1
    echo "# ibv_ud_pingpong --help"; ibv_ud_pingpong --help 2>&1
    echo "# ibv_uc_pingpong --help"; ibv_uc_pingpong --help 2>&1
  } > "$SH/logs/guest-setup.log" 2>&1
  printf '%s\n' "RXE_DEV=$RXE_DEV" "RXE_GID=$RXE_GID" "RXE_MTU=$RXE_MTU" \
    "GUEST_UPTIME=$(uptime_s)" "GUEST_KERNEL=$(uname -r)" \
    "RXE_CHK=$(ibv_rc_pingpong --help 2>&1 | grep -q -- '--chk' && echo 1 || echo 0)" > "$SH/ready.tmp"
  mv "$SH/ready.tmp" "$SH/ready"
  glog "ready: $RXE_DEV on eth0 ($GUEST_IP), GID index $RXE_GID, active MTU $RXE_MTU"
  if [ -r "$SH/cmds.sh" ]; then
    ( cd /tmp && . "$SH/cmds.sh" ) > "$SH/logs/cmds.log" 2>&1 || rc=$?
    glog "command list: status $rc"
  else
    agent
  fi
  echo "$rc" > "$SH/guest-rc"
  dmesg > "$SH/logs/guest-dmesg.log"
}
