#!/usr/bin/env python3
"""Hostile-input campaign: kiln on mutated real files of every kind it reads.

For each kind (pte, ptd, irpa, safetensors, gguf, tflite, edgetpu, circle, txn, npy, etdump) it
takes the real files of that kind from tests/fixtures/ and ../shared/testdata/ (absent folders
are skipped), makes N seeded mutants per kind (bit flips, bytes set to 0x00/0xff/0x7f/0x80, 32- and
64-bit words overwritten with huge values, truncation, insertion, duplicated ranges) and runs
`kiln verify`, `kiln inspect`, `kiln dump` and, for programs, `kiln run` and `kiln lower --to
npu` (then `kiln run` on the lowered program) on each, recording the exit code and the peak
resident set of every run (os.wait4).

It fails (exit 1) when any run ends with an exit code other than 0, 1 or 2 (a signal, an
abort, a panic's 101), takes longer than --timeout seconds, or peaks above --max-rss.

    python3 tools/hostile/campaign.py [--kiln target/release/kiln] [--mutants 300] [--seed 1]

Prints one line per kind (runs, exit-code counts, largest peak RSS, slowest run) and, with
--json FILE, writes every failing run (command, mutant kept under --keep DIR).
"""

import argparse
import collections
import json
import os
import pathlib
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "tests" / "fixtures", ROOT.parent / "shared" / "testdata"]

# kind -> (how to recognise a source file, commands to run on a mutant)
KINDS = {
    "pte": (lambda p: p.suffix == ".pte", ["verify", "inspect", "dump", "run", "lower", "run-lowered"]),
    "ptd": (lambda p: p.suffix == ".ptd", ["verify", "inspect", "dump"]),
    "irpa": (lambda p: p.suffix == ".irpa", ["verify", "inspect", "dump"]),
    "safetensors": (lambda p: p.suffix == ".safetensors", ["verify", "inspect", "dump"]),
    "gguf": (lambda p: p.suffix == ".gguf", ["verify", "inspect", "dump"]),
    "tflite": (lambda p: p.suffix == ".tflite" and "edgetpu" not in p.name, ["verify", "inspect", "dump"]),
    "edgetpu": (lambda p: p.suffix == ".tflite" and "edgetpu" in p.name, ["verify", "inspect", "dump"]),
    "circle": (lambda p: p.suffix == ".circle", ["verify", "inspect", "dump"]),
    "txn": (lambda p: p.suffix == ".bin" and "aie_txn" in str(p), ["verify", "inspect", "dump"]),
    "npy": (lambda p: p.suffix == ".npy", ["verify", "inspect", "dump"]),
    "etdump": (lambda p: p.suffix == ".etdp", ["verify", "inspect", "dump"]),
}
MAX_SOURCE_BYTES = 4 << 20
HUGE32 = [0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x10000000]
HUGE64 = [0xFFFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF, 1 << 40, 5 << 30]


def sources(kind):
    match, _ = KINDS[kind]
    found = []
    for base in SOURCES:
        if base.is_dir():
            found += [p for p in sorted(base.rglob("*")) if p.is_file() and match(p) and p.stat().st_size <= MAX_SOURCE_BYTES]
    return found


def mutate(data, rng):
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        if not b:
            b += bytes([rng.randrange(256)])
        op = rng.randrange(7)
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice([0x00, 0xFF, 0x7F, 0x80])
        elif op == 2 and len(b) >= 4:
            i = rng.randrange(len(b) - 3) & ~3
            b[i:i + 4] = struct.pack("<I", rng.choice(HUGE32))
        elif op == 3 and len(b) >= 8:
            i = rng.randrange(len(b) - 7) & ~7
            b[i:i + 8] = struct.pack("<Q", rng.choice(HUGE64))
        elif op == 4:
            del b[rng.randrange(len(b)):]
        elif op == 5:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        else:
            j = rng.randrange(len(b))
            k = min(len(b), j + rng.randrange(1, 64))
            b[i:i] = b[j:k]
    return bytes(b)


def run(cmd, timeout):
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            p.kill()
            pid, status, usage = os.wait4(p.pid, 0)
            p.returncode = -signal.SIGKILL
            return "timeout", usage.ru_maxrss * 1024, time.monotonic() - start, p.stderr.read()
        time.sleep(0.002)
    code = os.waitstatus_to_exitcode(status)
    return code, usage.ru_maxrss * 1024, time.monotonic() - start, p.stderr.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=str(ROOT / "target" / "release" / "kiln"))
    ap.add_argument("--mutants", type=int, default=300, help="mutants per kind")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds one run may take")
    ap.add_argument("--max-rss", type=int, default=512 << 20, help="bytes one run may peak at")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    ap.add_argument("--keep", help="folder to keep failing mutants in")
    ap.add_argument("--json", help="write the failing runs here")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    failures = []
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="kiln-campaign-"))
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    try:
        for kind in args.kinds.split(","):
            files = sources(kind)
            if not files:
                print(f"{kind:12s} SKIPPED: no source files", flush=True)
                continue
            commands = KINDS[kind][1]
            codes = collections.Counter()
            peak, slowest = 0, 0.0
            for m in range(args.mutants):
                src = files[m % len(files)]
                data = mutate(src.read_bytes(), rng)
                path = tmp / f"{kind}-{m}{src.suffix}"
                path.write_bytes(data)
                lowered = tmp / f"{kind}-{m}.npu.pte"
                for c in commands:
                    cmd = [args.kiln, c, str(path)]
                    if c == "lower":
                        cmd += ["--to", "npu", "-o", str(lowered)]
                    if c == "run-lowered":
                        if not lowered.exists():
                            continue
                        cmd = [args.kiln, "run", str(lowered)]
                    if c == "run":
                        ptd = src.with_suffix(".ptd")
                        if ptd.exists():
                            cmd += ["--data", str(ptd)]
                    code, rss, secs, err = run(cmd, args.timeout)
                    codes[code] += 1
                    peak, slowest = max(peak, rss), max(slowest, secs)
                    bad = code not in (0, 1, 2) or rss > args.max_rss
                    if bad:
                        kept = None
                        if args.keep:
                            keep = pathlib.Path(args.keep)
                            keep.mkdir(parents=True, exist_ok=True)
                            kept = str(keep / path.name)
                            shutil.copy(path, kept)
                        failures.append({"kind": kind, "source": str(src), "command": c, "code": code,
                                         "peak_rss": rss, "seconds": round(secs, 3), "mutant": kept,
                                         "stderr": err.decode(errors="replace")[-2000:]})
                path.unlink()
                lowered.unlink(missing_ok=True)
            runs = sum(codes.values())
            summary = ", ".join(f"exit {k}: {v}" for k, v in sorted(codes.items(), key=str))
            print(f"{kind:12s} {len(files):3d} sources, {args.mutants} mutants, {runs} runs ({summary}); "
                  f"peak RSS {peak / 2**20:.0f} MiB, slowest {slowest:.2f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(failures, indent=1))
    for f in failures[:20]:
        print(f"FAIL {f['kind']} {f['command']} exit {f['code']} peak {f['peak_rss'] >> 20} MiB "
              f"({f['source']}): {f['stderr'].strip().splitlines()[-1:] if f['stderr'] else ''}")
    print(f"{len(failures)} failing runs")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
