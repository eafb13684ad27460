#!/usr/bin/env bash
# No cliffs: unmodified perftest bandwidth through the drop-in over every
# message size and every queue depth, flagging each point that falls more
# than CLIFF % (default 20) below the point before it:
#   sizes      ib_write_bw, ib_read_bw, ib_send_bw -a (2 B .. 8 MiB)
#   QPs        ib_write_bw -q 1 2 4 .. 64, 64 KiB
#   tx depth   ib_write_bw -t 16 .. 1024, 64 KiB
#   reads      ib_read_bw -o 1 2 4 8 16 (outstanding READs), 64 KiB and 4 MiB
# between two rnicd (backend auto: AF_PACKET with UDP GSO on a veth) in
# two namespaces over a veth pair (MODE=veth, the default) or on one
# `rnicd --mem-pair` (MODE=mem). Each point is the median of ROUNDS runs
# (default 3), rounds interleaved. Writes
# $DOC.md (tables with every round and the verdict per sweep) and one SVG
# per sweep (`rnic plot`), DOC defaulting to docs/perf/cliffs-DATE-MODE.
#
# Needs root (veth mode), perftest and a release build (cargo build
# --release). Usage: benches/cliffs.sh [OUT_DIR]   (env: MODE, ROUNDS,
# ITERS (default 200 per size), CLIFF, DOC, SWEEPS (the sweeps' names,
# default all of them), RNICD_ARGS (more rnicd flags), QUIET_IDLE,
# QUIET_WAIT).
# Not run by CI: benchmarks measure, tests assert.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${MODE:-veth}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-200}
CLIFF=${CLIFF:-20}
OUT=${1:-target/cliffs-bench}
RNICD_ARGS=${RNICD_ARGS:-}
ALL_SWEEPS="write-size read-size send-size write-qps write-txdepth read-outstanding-64k read-outstanding-4m"
SWEEPS=${SWEEPS:-$ALL_SWEEPS}
for s in $SWEEPS; do
  [[ " $ALL_SWEEPS " == *" $s "* ]] || { echo "cliffs.sh: no sweep $s (sweeps: $ALL_SWEEPS)" >&2; exit 1; }
done
DOC=${DOC:-docs/perf/cliffs-$(date +%Y%m%d)-$MODE}
mkdir -p "$(dirname "$DOC")"
. benches/common.sh

for t in ib_write_bw ib_read_bw ib_send_bw; do
  command -v "$t" >/dev/null || { echo "cliffs.sh: $t is missing (apt-get install perftest)" >&2; exit 1; }
done
[ -x "$BIN/rnicd" ] && [ -x "$BIN/rnic" ] || { echo "cliffs.sh: build first: cargo build --release" >&2; exit 1; }
[ "$MODE" = mem ] || [ "$(id -u)" = 0 ] || { echo "cliffs.sh: MODE=veth needs root (network namespaces, AF_XDP)" >&2; exit 1; }

A=rnic-cla-$$ B=rnic-clb-$$ IA=rcva$$ IB=rcvb$$
SA=$OUT/sock-a SB=$OUT/sock-b
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ "$MODE" = mem ] || del_netns
}
trap cleanup EXIT INT TERM
rm -rf "$SA" "$SB"; mkdir -p "$SA" "$SB"

# the devices: DEV_S/DEV_C, SOCK_S/SOCK_C, the server's address, and how to
# run a command on each side (RUN_S, RUN_C: prefixes)
if [ "$MODE" = mem ]; then
  # shellcheck disable=SC2086
  "$BIN/rnicd" --mem-pair --name cl --sock-dir "$SA" $RNICD_ARGS >"$OUT/rnicd.log" 2>&1 & PIDS+=($!)
  SB=$SA DEV_S=cl0 DEV_C=cl1 ADDR=127.0.0.1 RUN_S=() RUN_C=()
  until grep -q READY "$OUT/rnicd.log"; do sleep 0.1; done
else
  veth_pair
  ip -n "$A" addr add 192.0.2.1/24 dev "$IA"; ip -n "$A" link set "$IA" up
  ip -n "$B" addr add 192.0.2.2/24 dev "$IB"; ip -n "$B" link set "$IB" up
  # shellcheck disable=SC2086
  ip netns exec "$A" "$BIN/rnicd" --iface "$IA" --gid 192.0.2.1 --name cla --sock-dir "$SA" $RNICD_ARGS >"$OUT/rnicd-a.log" 2>&1 & PIDS+=($!)
  # shellcheck disable=SC2086
  ip netns exec "$B" "$BIN/rnicd" --iface "$IB" --gid 192.0.2.2 --name clb --sock-dir "$SB" $RNICD_ARGS >"$OUT/rnicd-b.log" 2>&1 & PIDS+=($!)
  DEV_S=cla DEV_C=clb ADDR=192.0.2.1 RUN_S=(ip netns exec "$A") RUN_C=(ip netns exec "$B")
  until grep -q READY "$OUT/rnicd-a.log" && grep -q READY "$OUT/rnicd-b.log"; do sleep 0.1; done
fi

# perf TOOL ARGS...: one perftest run; prints "bytes MB/s" per line of its
# table (BW average), nothing when it failed
perf() {
  local tool=$1; shift
  "${RUN_S[@]}" "$BIN/rnic" exec --sock-dir "$SA" -- timeout 300 "$tool" -d "$DEV_S" -x 3 -F "$@" >"$OUT/srv.txt" 2>&1 &
  local s=$!
  sleep 0.5
  "${RUN_C[@]}" "$BIN/rnic" exec --sock-dir "$SB" -- timeout 300 "$tool" -d "$DEV_C" -x 3 -F "$@" "$ADDR" >"$OUT/cli.txt" 2>&1 || true
  wait "$s" || true
  awk '/^ *#bytes/ {t=1; next} t && /^ *[0-9]+ +[0-9]+/ {print $1, $4}' "$OUT/cli.txt"
}

# sweep_round NAME TOOL PARAM VALUES ARGS...: one run per value of PARAM
# (PARAM `size`: one `-a` run); each point's MB/s goes to R, its name to X
declare -A X
sweep_round() {
  local name=$1 tool=$2 param=$3 values=$4; shift 4
  [[ " $SWEEPS " == *" $name "* ]] || return 0
  wait_quiet
  if [ "$param" = size ]; then
    while read -r x bw; do add "$name:$x" "$bw"; X[$name]+="$x "; done < <(perf "$tool" -a -n "$ITERS" "$@")
  else
    for v in $values; do
      bw=$(perf "$tool" "$param" "$v" -n "$ITERS" "$@" | tail -1 | awk '{print $2}')
      add "$name:$v" "${bw:--}"; X[$name]+="$v "
    done
  fi
}
run_all() {
  sweep_round write-size ib_write_bw size ""
  sweep_round read-size ib_read_bw size ""
  sweep_round send-size ib_send_bw size ""
  sweep_round write-qps ib_write_bw -q "1 2 4 8 16 32 64" -s 65536
  sweep_round write-txdepth ib_write_bw -t "16 32 64 128 256 512 1024" -s 65536
  sweep_round read-outstanding-64k ib_read_bw -o "1 2 4 8 16" -s 65536
  sweep_round read-outstanding-4m ib_read_bw -o "1 2 4 8 16" -s 4194304
}
for r in $(seq 1 "$ROUNDS"); do
  echo "cliffs: round $r of $ROUNDS" >&2
  run_all
done

# the report: per sweep a table (point, median, rounds, drop against the
# point before) and the verdict
{
  echo "# No cliffs: perftest bandwidth by size and depth ($MODE)"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), kernel $(uname -r), commit $(git rev-parse --short HEAD)."
  echo "Median of $ROUNDS rounds, $ITERS iterations per point; idle before each sweep (%): $(tr '\n' ' ' <"$OUT/idle.txt")."
  echo "A cliff: a point more than $CLIFF % below the point before it."
  echo "Command: \`$([ -z "$RNICD_ARGS" ] || echo "RNICD_ARGS=\"$RNICD_ARGS\" ")MODE=$MODE ROUNDS=$ROUNDS ITERS=$ITERS$([ "$SWEEPS" = "$ALL_SWEEPS" ] || echo " SWEEPS=\"$SWEEPS\"") benches/cliffs.sh\`."
  echo
  for name in $SWEEPS; do
    pts=$(printf '%s\n' ${X[$name]:-} | awk '!s[$1]++' | sort -g)
    echo "## $name"
    echo
    echo "| point | MB/s (median) | rounds | vs previous |"
    echo "|---|---|---|---|"
    prev= cliffs=
    csv=$OUT/plot-$name.csv
    echo "series,x,y" >"$csv"
    for p in $pts; do
      med=$(m "$name:$p")
      drop=-
      if [ -n "$prev" ] && [ "$med" != - ] && [ "$prev" != - ]; then
        drop=$(awk -v a="$prev" -v b="$med" 'BEGIN {printf "%+.0f %%", 100 * (b - a) / a}')
        if awk -v a="$prev" -v b="$med" -v c="$CLIFF" 'BEGIN {exit !(b < a * (1 - c / 100))}'; then
          cliffs+="$p "; drop="**$drop**"
        fi
      fi
      echo "| $p | $med | $(all "$name:$p") | $drop |"
      echo "$name,$p,$med" >>"$csv"
      prev=$med
    done
    echo
    if [ -n "$cliffs" ]; then echo "Cliffs at: $cliffs"; else echo "No cliff."; fi
    echo
    if [ "$(printf '%s' "$pts" | wc -w)" -gt 1 ] && grep -q size <<<"$name"; then
      "$BIN/rnic" plot "$csv" --out "$DOC-$name.svg" --title "$name ($MODE)" --y-label "MB/s" >/dev/null
      echo "![$name]($(basename "$DOC")-$name.svg)"
      echo
    fi
  done
} >"$DOC.md"
echo "cliffs: wrote $DOC.md" >&2
