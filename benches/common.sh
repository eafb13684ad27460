# Shell helpers the benchmark scripts share; source it after setting OUT.
#
# The machine may be shared: before each measurement `wait_quiet` waits (up
# to QUIET_WAIT seconds, default 600) until the CPUs were at least
# QUIET_IDLE % idle (default 90) over one second, and appends how idle
# they were to $OUT/idle.txt.
# `preflight`: the tools, root and the build a script needs.
# `veth_pair`: namespaces $A and $B joined by veth $IA <-> $IB (loopback
# up in both, the veth ends not yet up); `del_netns` removes them.
# Results: `add KEY VALUE` collects one round's figure; `m KEY` prints the
# median of the rounds, `all KEY` every round.

# Sourced with $OUT set: makes $OUT, absolute, with no idle.txt of an
# earlier run; $BIN is the release build's folder.
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT/idle.txt"
BIN=${BIN:-$PWD/target/release}

QUIET_IDLE=${QUIET_IDLE:-90}
QUIET_WAIT=${QUIET_WAIT:-600}

idle_pct() {
  local a b total=0 i
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  echo $(( 100 * (b[4] - a[4] + b[5] - a[5]) / (total > 0 ? total : 1) ))
}

wait_quiet() {
  local t0=$SECONDS p
  while :; do
    p=$(idle_pct)
    if [ "$p" -ge "$QUIET_IDLE" ] || [ $((SECONDS - t0)) -ge "$QUIET_WAIT" ]; then
      echo "$p" >>"$OUT/idle.txt"
      return
    fi
  done
}

declare -A R
add() { [ "$2" = - ] || R[$1]+="$2"$'\n'; }
m() { printf '%s' "${R[$1]:-}" | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {if (NR) printf "%.2f", v[int((NR+1)/2)]; else printf "-"}'; }
all() { printf '%s' "${R[$1]:-}" | grep -v '^$' | awk '{printf "%.2f ", $1}'; }

# `preflight NAME "PACKAGES" TOOL...`: exits with a one-line reason unless
# every TOOL is on PATH, we are root and the release build is there.
preflight() {
  local name=$1 pkgs=$2 t
  shift 2
  for t in "$@"; do
    command -v "$t" >/dev/null || { echo "$name: $t is missing (apt-get install $pkgs)" >&2; exit 1; }
  done
  [ "$(id -u)" = 0 ] || { echo "$name: needs root (network namespaces)" >&2; exit 1; }
  [ -x "$BIN/rnicd" ] && [ -x "$BIN/rnic" ] || { echo "$name: build first: cargo build --release" >&2; exit 1; }
}

veth_pair() {
  ip netns add "$A"; ip netns add "$B"
  ip -n "$A" link set lo up; ip -n "$B" link set lo up
  ip link add "$IA" netns "$A" type veth peer name "$IB" netns "$B"
}
del_netns() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
