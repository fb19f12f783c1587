#!/usr/bin/env python3
"""Sizes of the C library as apps ship it, and what takes the space.

    python3 bench/capi_size.py [--executorch DIR] [--top N] [--json]

Builds libkiln.so with the `dist` profile (LTO, one codegen unit) twice, the full library and
the runtime-only one (`--no-default-features`), each with symbols kept so that `nm` can say
what each byte of code belongs to, then strips a copy (`strip`, what the profile's
`strip = true` does) for the size an app ships. Prints both stripped sizes, the sections of
the runtime-only one, and its code by crate and by kiln module. With `--executorch DIR` (an
installed executorch package, e.g. ~/peers/lib/python3.11/site-packages/executorch, or a
folder the wheel was unpacked in), the stripped sizes of ExecuTorch's runtime libraries beside
them: what an app links to run XNNPACK-lowered and portable programs.
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What an app links to run an XNNPACK-lowered program with portable and quantized operators.
EXECUTORCH_RUNTIME = [
    "libexecutorch.so",
    "libexecutorch_kernels_optimized.so",
    "libexecutorch_kernels_quantized.so",
    "libexecutorch_backend_xnnpack.so",
    "libexecutorch_threadpool.so",
]


def build(features, out):
    """Builds the dist libkiln.so with symbols, copies it to `out`; returns its stripped size."""
    env = dict(os.environ, CARGO_PROFILE_DIST_STRIP="false")
    cmd = ["cargo", "build", "--quiet", "--locked", "-p", "kiln-capi", "--profile", "dist"]
    subprocess.run(cmd + features, cwd=REPO, env=env, check=True)
    shutil.copy(os.path.join(REPO, "target", "dist", "libkiln.so"), out)
    stripped = out + ".stripped"
    subprocess.run(["strip", "-o", stripped, out], check=True)
    return os.path.getsize(stripped)


def sections(path):
    """(name, bytes) of the allocated sections, largest first."""
    text = subprocess.run(["size", "-A", path], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith("."):
            rows.append((parts[0], int(parts[1])))
    return sorted(rows, key=lambda r: -r[1])


def code_by(path):
    """Bytes of code (text symbols) by crate and by kiln module (two path segments)."""
    text = subprocess.run(
        ["nm", "--size-sort", "-S", "-C", path], capture_output=True, text=True, check=True
    ).stdout
    crates, modules = collections.Counter(), collections.Counter()
    for line in text.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4 or parts[2].lower() not in ("t", "w"):
            continue
        size, name = int(parts[1], 16), parts[3]
        # A closure or trait impl is named after the path it is in: `<kiln_x::..>` or `kiln_x::..`.
        crate = re.match(r"[<&*]*(?:impl )?([A-Za-z_0-9]+)::", name)
        crates[crate.group(1) if crate else "(other)"] += size
        module = re.search(r"\b(kiln_[a-z]+::[a-z_0-9]+::[a-z_0-9]+)", name)
        if module:
            modules[module.group(1)] += size
    return crates, modules


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executorch", help="an executorch package folder (its lib/*.so)")
    ap.add_argument("--top", type=int, default=15, help="rows of the breakdowns")
    ap.add_argument("--json", action="store_true", help="one JSON document")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kiln-capi-size-")
    full = build([], os.path.join(tmp, "full.so"))
    runtime = build(["--no-default-features"], os.path.join(tmp, "runtime.so"))
    crates, modules = code_by(os.path.join(tmp, "runtime.so"))
    peers = {}
    if args.executorch:
        for name in EXECUTORCH_RUNTIME:
            path = os.path.join(args.executorch, "lib", name)
            if os.path.exists(path):
                subprocess.run(["strip", "-o", os.path.join(tmp, name), path], check=True)
                peers[name] = os.path.getsize(os.path.join(tmp, name))
    doc = {
        "libkiln.so": {"full": full, "runtime_only": runtime},
        "runtime_only_sections": dict(sections(os.path.join(tmp, "runtime.so.stripped"))[:8]),
        "runtime_only_code_by_crate": dict(crates.most_common(args.top)),
        "runtime_only_code_by_module": dict(modules.most_common(args.top)),
        "executorch": peers,
    }
    shutil.rmtree(tmp)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
        return
    mb = lambda n: f"{n / 1e6:6.2f} MB"
    print(f"libkiln.so stripped: full {mb(full)}, runtime-only {mb(runtime)}")
    print("runtime-only sections:")
    for name, n in doc["runtime_only_sections"].items():
        print(f"  {mb(n)}  {name}")
    print("runtime-only code by crate:")
    for name, n in doc["runtime_only_code_by_crate"].items():
        print(f"  {mb(n)}  {name}")
    print("runtime-only code by kiln module:")
    for name, n in doc["runtime_only_code_by_module"].items():
        print(f"  {mb(n)}  {name}")
    if peers:
        print(f"ExecuTorch's runtime libraries, stripped (sum {mb(sum(peers.values()))}):")
        for name, n in peers.items():
            print(f"  {mb(n)}  {name}")


if __name__ == "__main__":
    main()
