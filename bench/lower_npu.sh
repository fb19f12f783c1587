#!/usr/bin/env bash
# Issue 15's acceptance on the bench models: `kiln lower --to npu` each model's portable export
# (bench/export_models.py's cache), count the instructions left outside NPU delegates against
# the original count, and run the lowered program on kiln's reference NPU device with the
# model's recorded input, checking every output against ExecuTorch's output for the UNLOWERED
# program (et_portable.out*.npy, written by ExecuTorch's runtime) within ATOL (default 1e-4).
#
# Usage: bench/lower_npu.sh [MODEL ...]   (default: squeezenet resnet18_224 transformer_encoder)
#   Needs a release build of kiln, the ~/peers venv (PY) for the difference, and the models:
#   ~/peers/bin/python bench/export_models.py squeezenet resnet18_224 transformer_encoder
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KILN=${KILN:-$ROOT/target/release/kiln}
MODELS_DIR=${MODELS_DIR:-$ROOT/bench/.models}
ATOL=${ATOL:-1e-4}
PY=${PY:-$HOME/peers/bin/python}
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS=(squeezenet resnet18_224 transformer_encoder)
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
status=0
printf '%-22s %8s %8s %9s %10s  %s\n' model before outside delegates "max|diff|" result
for m in "${MODELS[@]}"; do
  dir=$MODELS_DIR/$m
  "$KILN" lower "$dir/portable.pte" --to npu -o "$OUT/$m.pte" --json > "$OUT/$m.json"
  read -r before outside delegates < <(python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["methods"][0]
print(m["instructions_before"], m["outside_delegates"], len(m["delegates"]))' "$OUT/$m.json")
  args=()
  for f in "$dir"/in*.npy; do args+=(--input "$f"); done
  for f in "$dir"/et_portable.out*.npy; do args+=(--expect "$f"); done
  if "$KILN" run "$OUT/$m.pte" "${args[@]}" --atol "$ATOL" --out-dir "$OUT/$m.out" > /dev/null 2> "$OUT/$m.err"; then
    result=ok
  else
    result="FAILED: $(tail -c 300 "$OUT/$m.err")"
    status=1
  fi
  # The largest |kiln - ExecuTorch| against the unlowered portable program's outputs.
  diff=$("$PY" "$ROOT/bench/compare_outputs.py" "$dir" "$OUT/$m.out" 2> /dev/null | awk '{print $1}' || echo -)
  if [ $((2 * outside)) -gt "$before" ]; then
    result="$result; more than half outside"
    status=1
  fi
  printf '%-22s %8s %8s %9s %10s  %s\n' "$m" "$before" "$outside" "$delegates" "$diff" "$result"
done
exit $status
