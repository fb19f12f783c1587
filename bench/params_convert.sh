#!/usr/bin/env bash
# Benchmarks for `kiln params` (issue 4 acceptance):
#  1. `kiln params convert` of a 2 GiB archive vs `cp` of the same file (and vs `cp` + `sync`,
#     since kiln fsyncs its output before the rename), interleaved runs, medians, max RSS.
#  2. `kiln params dump` vs `iree-dump-parameters` on an archive of 100,000 entries.
#
# Usage: bench/params_convert.sh [RUNS]   (default 5; needs a release build of kiln and the
# ~/peers venv with iree-base-runtime). Scratch files go to $BENCH_DIR (default /tmp/kiln-bench)
# and are removed at the end.
set -euo pipefail
RUNS=${1:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=${KILN:-$ROOT/target/release/kiln}
PEERS=${PEERS:-$HOME/peers}
DIR=${BENCH_DIR:-/tmp/kiln-bench}
mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT

# ---- inputs -------------------------------------------------------------------------------
# Eight 256 MiB random data entries (random so that no tool can skip holes): a 2 GiB archive.
args=()
for i in $(seq 0 7); do
  head -c $((256 << 20)) /dev/urandom > "$DIR/part$i.bin"
  args+=(--data "blk.$i.weight=$DIR/part$i.bin")
done
"$KILN" params create -o "$DIR/big.irpa" "${args[@]}"
rm -f "$DIR"/part*.bin
ls -l "$DIR/big.irpa"

"$PEERS/bin/python" - "$DIR/many.irpa" <<'PY'
import sys, numpy as np, iree.runtime as rt
idx = rt.ParameterIndex()
keep = []
for i in range(100_000):
    if i % 2:
        idx.add_splat(f"model.layers.{i}.bias", np.float32(i).tobytes(), 64)
    else:
        a = np.full(16, i % 251, dtype=np.uint8)
        keep.append(a)
        idx.add_buffer(f"model.layers.{i}.weight", a)
idx.create_archive_file(sys.argv[1])
PY
ls -l "$DIR/many.irpa"

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
for r in $(seq "$RUNS"); do
  rm -f "$DIR/out.cp" "$DIR/out.cps" "$DIR/out.irpa"; sync
  run cp cp "$DIR/big.irpa" "$DIR/out.cp"
  rm -f "$DIR/out.cp"; sync
  run cp_sync sh -c "cp '$DIR/big.irpa' '$DIR/out.cps' && sync '$DIR/out.cps'"
  rm -f "$DIR/out.cps"; sync
  run kiln_convert "$KILN" params convert "$DIR/big.irpa" -o "$DIR/out.irpa"
  cmp "$DIR/big.irpa" "$DIR/out.irpa"   # convert of an IREE-layout archive is the identity
  rm -f "$DIR/out.irpa"; sync
done
size=$(stat -c %s "$DIR/big.irpa")
echo "== convert of a $((size >> 20)) MiB archive, $RUNS interleaved runs"
report cp; report cp_sync; report kiln_convert
for base in cp cp_sync; do
  awk -v a="$(cut -d' ' -f1 "$DIR/$base.times" | median)" -v b="$(cut -d' ' -f1 "$DIR/kiln_convert.times" | median)" \
    -v n="$base" 'BEGIN { printf "kiln convert throughput / %s throughput = %.2f\n", n, a / b }'
done

# ---- 2. dump of 100,000 entries ------------------------------------------------------------
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
