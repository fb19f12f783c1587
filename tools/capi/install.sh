#!/usr/bin/env bash
# Installs kiln's C library under a prefix, for pkg-config:
#
#   tools/capi/install.sh PREFIX [LIB_DIR]
#
# LIB_DIR holds the libkiln.so and libkiln.a to install (default target/dist, what
# `cargo build -p kiln-capi --profile dist` makes). Writes PREFIX/include/kiln.h,
# PREFIX/lib/libkiln.{so,a} and PREFIX/lib/pkgconfig/kiln.pc (the shared library) and
# kiln-static.pc (the archive and the system libraries it needs):
#
#   cc app.c $(pkg-config --cflags --libs kiln)          # links libkiln.so
#   cc app.c $(pkg-config --cflags --libs kiln-static)   # links libkiln.a into the program
#
# A pkg-config file is a few lines of text; cargo-c writes them too, but would be one more
# tool to build and install for what this script says in full.
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 PREFIX [LIB_DIR]" >&2; exit 2; }
repo="$(cd "$(dirname "$0")/../.." && pwd)"
prefix="$(mkdir -p "$1" && cd "$1" && pwd)"
from="${2:-$repo/target/dist}"
for f in libkiln.so libkiln.a; do
  [ -f "$from/$f" ] || { echo "$0: no $f in $from (cargo build -p kiln-capi --profile dist)" >&2; exit 1; }
done
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)"
# The system libraries a Rust static library needs on Linux (rustc --print native-static-libs).
private="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
# A full build (feature inspect) has kiln_inspect: its header declarations are turned on.
cflags=""
if nm -D --defined-only "$from/libkiln.so" | grep -q ' kiln_inspect$'; then
  cflags=" -DKILN_INSPECT"
fi
install -D -m 644 "$repo/crates/kiln-capi/include/kiln.h" "$prefix/include/kiln.h"
install -D -m 755 "$from/libkiln.so" "$prefix/lib/libkiln.so"
install -D -m 644 "$from/libkiln.a" "$prefix/lib/libkiln.a"
mkdir -p "$prefix/lib/pkgconfig"
pc() {
  cat <<PC
prefix=$prefix
includedir=\${prefix}/include
libdir=\${prefix}/lib

Name: $1
Description: kiln's C library: load, run and generate with ExecuTorch programs
Version: $version
Cflags: -I\${includedir}$cflags
$2
PC
}
pc kiln "Libs: -L\${libdir} -lkiln
Libs.private: $private" > "$prefix/lib/pkgconfig/kiln.pc"
pc kiln-static "Libs: \${libdir}/libkiln.a $private" > "$prefix/lib/pkgconfig/kiln-static.pc"
echo "installed kiln $version under $prefix (pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
