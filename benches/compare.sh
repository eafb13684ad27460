#!/bin/bash
# benches/compare.sh OLD NEW BENCH [RUNS]
#
# One benchmark of `benches/` built at two commits and run alternately
# (OLD, NEW, OLD, NEW, ...) RUNS times each (default 3), so that a change of
# load on a shared machine hits both alike. Each commit is checked out in a
# detached worktree under target/compare/ with its own target directory
# (kept for the next comparison). The outputs go to
# target/compare/<BENCH>-<date>/<n>-<rev>.txt and are printed as they come.
# Run it at a low load average; as root it runs the benchmarks at nice -19.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,11p' "$0"; exit 2; }
old=$1 new=$2 bench=$3 runs=${4:-3}
root=$(git rev-parse --show-toplevel)
base=$root/target/compare
mkdir -p "$base"

build() {
  local rev dir
  rev=$(git -C "$root" rev-parse --short "$1")
  dir=$base/src-$rev
  [ -d "$dir" ] || git -C "$root" worktree add --detach "$dir" "$rev" >/dev/null
  (cd "$dir" && CARGO_TARGET_DIR=$base/target-$rev cargo bench -p benches --bench "$bench" \
    --no-run --message-format=json 2>/dev/null) |
    grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4
}

old_exe=$(build "$old"); new_exe=$(build "$new")
[ -x "$old_exe" ] && [ -x "$new_exe" ] || { echo "build failed" >&2; exit 1; }
out=$base/$bench-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$out"
nice=()
[ "$(id -u)" = 0 ] && nice=(nice -n -19)
echo "$bench: $old ($old_exe) against $new ($new_exe), $runs runs each; $(uptime)"
for n in $(seq "$runs"); do
  for pair in "old:$old:$old_exe" "new:$new:$new_exe"; do
    IFS=: read -r tag rev exe <<<"$pair"
    echo "== run $n, $tag ($rev), load $(cut -d' ' -f1 /proc/loadavg)"
    "${nice[@]}" "$exe" --bench | tee "$out/$n-$tag-$rev.txt"
  done
done
echo "outputs: $out"
