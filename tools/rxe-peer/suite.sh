# suite.sh: `rxe-peer suite` — rdma-core's own test suite (Debian
# python3-pyverbs, tools/rdma-core-suite/run) on Linux rxe in the guest.
# Sourced by rxe-peer; uses its image_build and boot. The result, with a
# header naming the guest's kernel and packages, is $OUT/rxe.tsv: the format
# of tools/rdma-core-suite/rxe.tsv. See docs/rdma-core-suite.md.

suite_usage() {
  cat <<'EOF'
rxe-peer suite [--only REGEX] [--timeout S] [--out DIR]
  Boots the rxe guest and runs tools/rdma-core-suite/run in it on rxe0 (its
  RoCE v2 GID of eth0's IPv4 address), as root, without --exec: the guest's
  own rdma-core libibverbs with the rxe provider. Prints the verdicts with a
  header (kernel, package versions, how and how long) and writes them to
  OUT/rxe.tsv; then lists what differs from tools/rdma-core-suite/rxe.tsv.
  --only REGEX: only the tests whose name matches (passed to run).
  --timeout S: each test's bound (default 180: the guest runs under TCG).
EOF
}

# The command list the guest sources: versions, then the suite.
suite_cmds() {
  local timeout=$1 only=$2
  printf 'SUITE_TIMEOUT=%q SUITE_ONLY=%q\n' "$timeout" "$only"
  cat <<'EOF'
{
  echo "uname_r=$(uname -r)"
  echo "uname_v=$(uname -v)"
  dpkg-query -W -f='pkg ${Package} ${Version}\n' rdma-core ibverbs-providers libibverbs1 \
    librdmacm1 python3-pyverbs python3
  # where the suite looks for a device's IP address (RDMA CM tests)
  echo "device_net=$(ls "/sys/class/infiniband/$RXE_DEV/device/net" 2>/dev/null | tr '\n' ' ' || true)"
  echo "nproc=$(nproc)"
} > "$SH/suite-env"
t0=$(cut -d' ' -f1 /proc/uptime)
bash "$SH/rdma-core-suite-run" --dev "$RXE_DEV" --gid "$RXE_GID" \
  --timeout "$SUITE_TIMEOUT" --only "$SUITE_ONLY" > "$SH/suite.out" 2> "$SH/logs/suite.stderr"
rc=$?
echo "suite_rc=$rc" >> "$SH/suite-env"
echo "suite_seconds=$(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.0f", b - a }')" >> "$SH/suite-env"
exit $rc
EOF
}

# suite_header: the comment block of rxe.tsv, from $OUT/suite-env and the run.
suite_header() {
  local timeout=$1 only=$2 env=$OUT/suite-env
  val() { sed -n "s/^$1=//p" "$env"; }
  pkg() { awk -v p="$1" '$1 == "pkg" && $2 == p { print $3 }' "$env"; }
  local v=$OUT/suite.out
  cnt() { awk -F'\t' -v w="$1" '$2 == w' "$v" | wc -l; }
  cat <<EOF
# rdma-core's own test suite (Debian python3-pyverbs $(pkg python3-pyverbs)) on Linux
# rxe (rdma_rxe): each test alone, as root, on the guest's own rdma-core
# (libibverbs with the rxe provider, no --exec), device $RXE_DEV on eth0
# (MTU 9000, active MTU $RXE_MTU), GID index $RXE_GID (RoCE v2, ::ffff:$GUEST_IP).
# Guest: tools/rxe-peer's QEMU guest ($(val nproc) vCPUs), Debian bookworm,
# kernel $(val uname_r) ($(val uname_v)),
# rdma-core $(pkg rdma-core), ibverbs-providers $(pkg ibverbs-providers), libibverbs1 $(pkg libibverbs1),
# librdmacm1 $(pkg librdmacm1), python3-pyverbs $(pkg python3-pyverbs), python3 $(pkg python3).
# /sys/class/infiniband/$RXE_DEV/device/net (where the suite looks for the IP of
# the RDMA CM tests): $(d=$(val device_net); echo "${d:-absent}")
# Produced by: tools/rxe-peer/rxe-peer suite$( [ "$only" != . ] && printf " --only '%s'" "$only")$( [ "$timeout" != 180 ] && echo " --timeout $timeout")
# (runs tools/rdma-core-suite/run --dev $RXE_DEV --gid $RXE_GID --timeout $timeout in the guest)
# on $(date -u +%F): $(cnt PASS) pass, $(cnt SKIP) skip, $(cnt FAIL) fail, $(cnt ERROR) error, $(cnt HANG) hang;
# the suite took $(val suite_seconds) s in the guest, the whole boot $(sed -n 's/^total_seconds=//p' "$OUT/timings") s.
# name	verdict	reason
EOF
}

# What differs from the checked-in verdicts (name verdict), one line each.
suite_diff() {
  local old=$REPO/tools/rdma-core-suite/rxe.tsv
  [ -f "$old" ] || { echo "(no $old to compare with)"; return 0; }
  awk -F'\t' '
    /^#/ { next }
    FNR == NR { was[$1] = $2; next }
    !($1 in was) { print $1 ": new, " $2; next }
    was[$1] != $2 { print $1 ": " was[$1] " -> " $2 }
    { delete was[$1] }
    END { for (n in was) print n ": " was[n] ", did not run" }
  ' "$old" "$OUT/suite.out" | sort | grep . || echo "(none)"
}

suite_main() {
  local only=. timeout=180
  while [ $# -gt 0 ]; do
    case $1 in
      --only) only=$2; shift 2;;
      --timeout) timeout=$2; shift 2;;
      --out) OUT=$2; shift 2;;
      -h|--help) suite_usage; return 0;;
      *) suite_usage >&2; return 2;;
    esac
  done
  need_root
  # the suite alone takes longer than the default bound of a whole boot
  [ -n "${RXE_PEER_TIMEOUT:-}" ] || BOOT_TIMEOUT=10800
  local t0; t0=$(now)
  image_build
  OUT=$(realpath -m "${OUT:-$(default_out suite)}")
  mkdir -p "$OUT"
  echo "image_seconds=$(since "$t0")" > "$OUT/timings"
  cp "$REPO/tools/rdma-core-suite/run" "$OUT/rdma-core-suite-run"
  suite_cmds "$timeout" "$only" > "$OUT/cmds.sh"
  local rc=0
  boot - || rc=$?
  [ -s "$OUT/suite.out" ] || { tail -n 30 "$OUT/logs/cmds.log" "$OUT/logs/suite.stderr" >&2 2>/dev/null || true
                               die "the suite gave no verdict (status $rc; see $OUT/logs)"; }
  { suite_header "$timeout" "$only"; cat "$OUT/suite.out"; } > "$OUT/rxe.tsv"
  cat "$OUT/rxe.tsv"
  say "differences from tools/rdma-core-suite/rxe.tsv:"
  suite_diff >&2
  say "suite finished: status $rc; verdicts in $OUT/rxe.tsv (copy it to tools/rdma-core-suite/rxe.tsv to check it in)"
  return $rc
}
