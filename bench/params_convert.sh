#!/usr/bin/env bash
# Benchmarks for `kiln params` (issue 4 and issue 13 item 7 acceptance):
#  1. `kiln params convert` of a 1 GiB archive vs `cp` of the same file, vs `cp && sync` (kiln
#     fsyncs its output once, before the rename) and vs `iree-convert-parameters`, interleaved
#     runs in rotating order, medians, max RSS, and the load average before every round (the
#     numbers mean something only on an idle machine). Acceptance: kiln >= 0.9x the throughput
#     of `cp && sync`.
#  2. `kiln params dump` vs `iree-dump-parameters` on an archive of 100,000 entries.
#
# Usage: bench/params_convert.sh [RUNS]   (default 5; PART_MB=N for 8 x N MiB instead of
# 8 x 128 MiB; SKIP_DUMP=1 skips part 2; needs a release build of kiln and the
# ~/peers venv with iree-base-runtime). Scratch files go to $BENCH_DIR (default /tmp/kiln-bench)
# and are removed at the end.
set -euo pipefail
RUNS=${1:-5}
PART_MB=${PART_MB:-128}   # eight parts: 1 GiB by default
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=${KILN:-$ROOT/target/release/kiln}
PEERS=${PEERS:-$HOME/peers}
DIR=${BENCH_DIR:-/tmp/kiln-bench}
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT

# ---- inputs -------------------------------------------------------------------------------
# Eight PART_MB MiB random data entries (random so that no tool can skip holes): 1 GiB.
args=()
for i in $(seq 0 7); do
  head -c $((PART_MB << 20)) /dev/urandom > "$DIR/part$i.bin"
  args+=(--data "blk.$i.weight=$DIR/part$i.bin")
done
"$KILN" params create --no-tensor-metadata -o "$DIR/big.irpa" "${args[@]}"
rm -f "$DIR"/part*.bin
ls -l "$DIR/big.irpa"

if [ -z "${SKIP_DUMP:-}" ]; then
# 100,000 entries (90% splats, 10% 16-byte data) written by IREE's Python API. IREE's builder
# takes minutes for this many entries; MANY=path reuses an archive made earlier.
if [ -n "${MANY:-}" ]; then
  cp "$MANY" "$DIR/many.irpa"
else
  "$PEERS/bin/python" - "$DIR/many.irpa" <<'PY'
import sys, numpy as np, iree.runtime as rt
idx = rt.ParameterIndex()
keep = []
for i in range(100_000):
    if i % 10:
        idx.add_splat(f"model.layers.{i}.bias", np.float32(i).tobytes(), 64)
    else:
        a = np.full(16, i % 251, dtype=np.uint8)
        keep.append(a)
        idx.add_buffer(f"model.layers.{i}.weight", a)
idx.create_archive_file(sys.argv[1])
PY
fi
ls -l "$DIR/many.irpa"
fi

# ---- helpers ------------------------------------------------------------------------------
# run NAME CMD...: appends "seconds maxrss_kb" of one run to $DIR/NAME.times
run() {
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$DIR/t" "$@" > /dev/null
  cat "$DIR/t" >> "$DIR/$name.times"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
report() {
  local name=$1
  printf "%-26s median %8.3f s   max RSS %8d KiB   runs: %s\n" "$name" \
    "$(cut -d' ' -f1 "$DIR/$name.times" | median)" "$(cut -d' ' -f2 "$DIR/$name.times" | sort -n | tail -1)" \
    "$(cut -d' ' -f1 "$DIR/$name.times" | tr '\n' ' ')"
}

# ---- 1. convert vs cp ---------------------------------------------------------------------
cat "$DIR/big.irpa" > /dev/null   # warm the page cache for every contender alike
contender() {
  rm -f "$DIR/out"; sync
  case $1 in
    cp) run cp cp "$DIR/big.irpa" "$DIR/out" ;;
    cp_sync) run cp_sync sh -c "cp '$DIR/big.irpa' '$DIR/out' && sync '$DIR/out'" ;;
    kiln_convert)
      run kiln_convert "$KILN" params convert "$DIR/big.irpa" -o "$DIR/out"
      cmp "$DIR/big.irpa" "$DIR/out" ;;  # convert of an IREE-layout archive is the identity
    iree_convert)
      run iree_convert "$PEERS/bin/iree-convert-parameters" --parameters="$DIR/big.irpa" \
        --output="$DIR/out" ;;
  esac
  rm -f "$DIR/out"; sync
}
# The order rotates from run to run so that no contender always follows the same one.
orders=("cp cp_sync kiln_convert iree_convert" "kiln_convert iree_convert cp cp_sync"
        "cp_sync kiln_convert iree_convert cp" "iree_convert cp cp_sync kiln_convert")
for r in $(seq "$RUNS"); do
  echo "round $r: load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for c in ${orders[$(( (r - 1) % 4 ))]}; do contender "$c"; done
done
echo "after: load average $(cut -d' ' -f1-3 /proc/loadavg)"
size=$(stat -c %s "$DIR/big.irpa")
echo "== convert of a $((size >> 20)) MiB archive, $RUNS interleaved runs"
report cp; report cp_sync; report kiln_convert; report iree_convert
for base in cp cp_sync; do
  awk -v a="$(cut -d' ' -f1 "$DIR/$base.times" | median)" -v b="$(cut -d' ' -f1 "$DIR/kiln_convert.times" | median)" \
    -v n="$base" 'BEGIN { printf "kiln convert throughput / %s throughput = %.2f\n", n, a / b }'
done

# ---- 2. dump of 100,000 entries ------------------------------------------------------------
[ -n "${SKIP_DUMP:-}" ] && exit 0
for r in $(seq "$RUNS"); do
  run iree_dump "$PEERS/bin/iree-dump-parameters" --parameters="$DIR/many.irpa"
  run kiln_dump "$KILN" params dump "$DIR/many.irpa"
  run kiln_dump_json "$KILN" params dump --json "$DIR/many.irpa"
done
echo "== dump of 100,000 entries ($(stat -c %s "$DIR/many.irpa") bytes), $RUNS interleaved runs"
report iree_dump; report kiln_dump; report kiln_dump_json
"$PEERS/bin/iree-dump-parameters" --parameters="$DIR/many.irpa" > "$DIR/iree.txt"
"$KILN" params dump "$DIR/many.irpa" > "$DIR/kiln.txt"
cmp "$DIR/iree.txt" "$DIR/kiln.txt" && echo "kiln's table is byte-identical to iree-dump-parameters'"
