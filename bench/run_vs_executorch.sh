#!/usr/bin/env bash
# `kiln bench` vs ExecuTorch's own runtime (bench/executorch_peer.py) on the committed model
# fixtures, with the fixtures' recorded inputs. The two contenders run INTERLEAVED: K rounds,
# each round runs both (alternating which goes first), every run loads the model once, does
# WARMUP untimed and ITERS timed executes and reports its median; the table shows, per model,
# the median of the K per-run medians and the ratio ExecuTorch / kiln (> 1: kiln is faster).
#
# Usage: bench/run_vs_executorch.sh [K] [MODEL ...]
#   K (default 5) rounds; MODELs are fixture stems in tests/fixtures/pte (default: the models
#   below). ITERS (default 20), WARMUP (default 3), ET_THREADS (default 1, ExecuTorch's
#   threadpool size; kiln is single-threaded) from the environment.
#   Needs a release build of kiln (cargo build --release -p kiln-cli) and the ~/peers venv.
#   For issue 10's measure (kiln on the portable export vs ExecuTorch on the XNNPACK export of
#   the same model) see bench/run_vs_xnnpack.sh and bench/README.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
KILN=${KILN:-$ROOT/target/release/kiln}
PY=${PY:-$HOME/peers/bin/python}
K=${1:-5}
shift || true
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS=(tiny_cnn mobilenet_v2_portable resnet_small vit_small transformer_block lstm gru)
fi
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-3}
ET_THREADS=${ET_THREADS:-1}
FIX=$ROOT/tests/fixtures/pte

printf '%-24s %12s %16s %10s\n' model "kiln ms" "executorch ms" "ET/kiln"
for m in "${MODELS[@]}"; do
  inputs=()
  for f in "$FIX/$m".forward.in*.npy; do
    [ -e "$f" ] && inputs+=(--input "$f")
  done
  kiln_runs=()
  et_runs=()
  run_kiln() {
    kiln_runs+=("$("$KILN" bench "$FIX/$m.pte" "${inputs[@]}" --iters "$ITERS" --warmup "$WARMUP" --json | jq .median_ms)")
  }
  run_et() {
    et_runs+=("$("$PY" "$ROOT/bench/executorch_peer.py" "$FIX/$m.pte" "${inputs[@]}" --iters "$ITERS" --warmup "$WARMUP" --threads "$ET_THREADS" --json 2>/dev/null | tail -1 | jq .median_ms)")
  }
  for r in $(seq 1 "$K"); do
    if [ $((r % 2)) -eq 1 ]; then run_kiln; run_et; else run_et; run_kiln; fi
  done
  km=$(printf '%s\n' "${kiln_runs[@]}" | median)
  em=$(printf '%s\n' "${et_runs[@]}" | median)
  echo "  $m kiln runs: ${kiln_runs[*]}; executorch runs: ${et_runs[*]}" >&2
  printf '%-24s %12.3f %16.3f %10.2f\n' "$m" "$km" "$em" "$(echo "$em / $km" | bc -l)"
done
