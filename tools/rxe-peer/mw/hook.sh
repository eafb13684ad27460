# hook.sh: memory windows and invalidation, the same program on both stacks.
# ibverbs/tests/c/mw_check.c, built here against rdma-core's libibverbs,
# runs in the guest on the kernel's Soft-RoCE (its two QPs over rxe's
# loopback) and on the host on softrnic's drop-in (two devices of one
# `rnicd --mem-pair`). softrnic's transcript must equal
# ibverbs/tests/c/mw_check.expected; rxe's must equal it too, except on the
# lines rxe-differences.txt lists (with the reason rxe differs).
# A host hook for the rxe-peer harness:
#
#   tools/rxe-peer/rxe-peer run --hook tools/rxe-peer/mw/hook.sh
#
# Environment: RNICD (default: the repository's target/release/rnicd),
# DROPIN_LIB (the folder holding the drop-in's libibverbs.so.1, default
# target/release/softrnic-ibverbs). Results: $OUT/mw-results.txt (PASS or
# FAIL), the transcripts $OUT/mw-rxe.txt and $OUT/mw-softrnic.txt, and
# their diff $OUT/mw.diff.

MW_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MW_REPO=$(cd "$MW_HERE/../../.." && pwd)
MW_RNICD=${RNICD:-$MW_REPO/target/release/rnicd}
MW_LIB=${DROPIN_LIB:-$MW_REPO/target/release/softrnic-ibverbs}
MW_RES=$OUT/mw-results.txt

mw_fail() { echo "mw_check FAIL $*" > "$MW_RES"; }

if ! cc "$MW_REPO/ibverbs/tests/c/mw_check.c" -o "$OUT/mw_check" -libverbs 2> "$OUT/logs/mw-cc.log"; then
  mw_fail "cc: $(head -3 "$OUT/logs/mw-cc.log")"
else
  g_run mw "/share/mw_check $RXE_GID > /share/mw-rxe.txt" 300 || true
  mkdir -p "$OUT/mw-sock"
  "$MW_RNICD" --mem-pair --name mw --one-thread --sock-dir "$OUT/mw-sock" > "$OUT/logs/mw-rnicd.log" 2>&1 &
  mw_pid=$!
  for ((i = 0; i < 100; i++)); do
    [ -S "$OUT/mw-sock/mw0.sock" ] && [ -S "$OUT/mw-sock/mw1.sock" ] && break
    sleep 0.1
  done
  LD_LIBRARY_PATH=$MW_LIB SOFTRNIC_SOCK_DIR=$OUT/mw-sock timeout 120 "$OUT/mw_check" 3 \
    > "$OUT/mw-softrnic.txt" 2> "$OUT/logs/mw-softrnic.err" || true
  kill -TERM "$mw_pid" 2>/dev/null; wait "$mw_pid" 2>/dev/null || true
  if ! grep -qx done "$OUT/mw-rxe.txt" 2>/dev/null; then
    mw_fail "rxe's run did not finish (see logs/mw.guest.log)"
  elif ! diff -u "$MW_REPO/ibverbs/tests/c/mw_check.expected" "$OUT/mw-softrnic.txt" > "$OUT/mw.diff"; then
    mw_fail "softrnic's transcript differs from mw_check.expected (mw.diff)"
  else
    # rxe against the expected transcript, the known differences aside
    mw_skip=$(grep -v '^#' "$MW_HERE/rxe-differences.txt" | cut -f1)
    mw_keep() { awk -v skip="$mw_skip" 'BEGIN { n = split(skip, s, "\n") }
      { for (i = 1; i <= n; i++) if (index($0, s[i] ":") == 1) next; print }' "$1"; }
    if diff -u <(mw_keep "$MW_REPO/ibverbs/tests/c/mw_check.expected") <(mw_keep "$OUT/mw-rxe.txt") > "$OUT/mw.diff"; then
      echo "mw_check PASS softrnic as expected ($(wc -l < "$OUT/mw-softrnic.txt") lines); rxe the same but $(echo "$mw_skip" | wc -l) known lines" > "$MW_RES"
    else
      mw_fail "rxe's transcript differs beyond rxe-differences.txt (mw.diff)"
    fi
  fi
fi
cat "$MW_RES"
