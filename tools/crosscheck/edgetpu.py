#!/usr/bin/env python3
"""Cross-checks `kiln edgetpu inspect --json` against the independent Python decoder
`shared/tools/dwn_inspect.py` on any number of real *_edgetpu.tflite files, value by value.

    python3 tools/crosscheck/edgetpu.py [--kiln target/debug/kiln] MODEL...

Exit status 0 when every value agrees; every disagreement is printed with its path.
"""
import argparse
import importlib.util
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TOOL = os.path.join(HERE, "../../../shared/tools/dwn_inspect.py")


def load_tool(path):
    spec = importlib.util.spec_from_file_location("dwn_inspect", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def compare(model, ours, ref, errors):
    count = 0

    def eq(path, a, b):
        nonlocal count
        count += 1
        if a != b:
            errors.append("%s: %s: kiln %r, dwn_inspect %r" % (model, path, a, b))

    ops = ref["edgetpu_ops"]
    eq("packages.len", len(ours["packages"]), len(ops))
    for pi, (p, op) in enumerate(zip(ours["packages"], ops)):
        at = "packages[%d]" % pi
        pkg = op["package"]
        eq(at + ".subgraph", p["subgraph"], op["subgraph"])
        eq(at + ".operator", p["operator"], op["op"])
        eq(at + ".min_runtime_version", p["min_runtime_version"], pkg["min_runtime_version"])
        eq(at + ".compiler_version", p["compiler_version"], pkg["compiler_version"])
        eq(at + ".executables.len", len(p["executables"]), len(pkg["executables"]))
        for ei, (e, fe) in enumerate(zip(p["executables"], pkg["executables"])):
            at2 = "%s.executables[%d]" % (at, ei)
            for k, f in [("type", "type"), ("name", "name"), ("chip", "chip"), ("batch_size", "batch_size"),
                         ("scratch_size_bytes", "scratch"), ("parameters_bytes", "parameters_len")]:
                eq(at2 + "." + k, e[k], fe[f])
            eq(at2 + ".parameter_caching_token", int(e["parameter_caching_token"], 16), int(fe["pc_token"], 16))
            eq(at2 + ".instruction_bitstreams.len", len(e["instruction_bitstreams"]), len(fe["instruction_bitstreams"]))
            for bi, (b, fb) in enumerate(zip(e["instruction_bitstreams"], fe["instruction_bitstreams"])):
                at3 = "%s.instruction_bitstreams[%d]" % (at2, bi)
                eq(at3 + ".bytes", b["bytes"], fb["bitstream_len"])
                eq(at3 + ".field_offsets.len", len(b["field_offsets"]), len(fb["field_offsets"]))
                for fi, (fo, ffo) in enumerate(zip(b["field_offsets"], fb["field_offsets"])):
                    for k, f in [("offset_bit", "bit"), ("desc", "desc"), ("name", "name"), ("batch", "batch"),
                                 ("position", "pos")]:
                        eq("%s.field_offsets[%d].%s" % (at3, fi, k), fo[k], ffo[f])
            for k, f in [("input_layers", "inputs"), ("output_layers", "outputs")]:
                eq(at2 + "." + k + ".len", len(e[k]), len(fe[f]))
                for li, (l, fl) in enumerate(zip(e[k], fe[f])):
                    at3 = "%s.%s[%d]" % (at2, k, li)
                    for a, b in [("name", "name"), ("size_bytes", "size_bytes"), ("y_dim", "y"), ("x_dim", "x"),
                                 ("z_dim", "z"), ("data_type", "data_type"), ("zero_point", "zero_point"),
                                 ("execution_count_per_inference", "exec_count")]:
                        eq(at3 + "." + a, l[a], fl.get(b, 0))
                    eq(at3 + ".dequantization_factor", f32(l["dequantization_factor"]), f32(fl.get("deq", 0.0)))
    return count


def read_npy(path):
    b = open(path, "rb").read()
    n = struct.unpack_from("<H", b, 8)[0]
    return b[10 + n:]


def check_relayout(kiln, model, ref, errors, tmp):
    """Every 3-D output of every package's main executable: kiln's .npy equals the element
    formula evaluated on dwn_inspect's OutputLayout maps."""
    checked = 0
    for pi, op in enumerate(ref["edgetpu_ops"]):
        exes = [e for e in op["package"]["executables"] if e["type"] != "PARAMETER_CACHING"]
        for layer in exes[0]["outputs"] if exes else []:
            y, x, z = layer["y"], layer["x"], layer["z"]
            lay = layer.get("layout")
            if (y == 1 and x == 1) or not lay or layer["data_type"] not in ("FIXED_POINT8", "SIGNED_FIXED_POINT8"):
                continue
            raw = bytes((i * 131 + 7) % 251 for i in range(layer["size_bytes"]))
            with open(tmp + ".raw", "wb") as f:
                f.write(raw)
            run = subprocess.run([kiln, "edgetpu", "relayout", model, tmp + ".raw", "--package", str(pi),
                                  "--layer", layer["name"], "-o", tmp + ".npy"], capture_output=True, text=True)
            if run.returncode != 0:
                errors.append("%s: relayout %s failed: %s" % (model, layer["name"], run.stderr.strip()))
                continue
            got = read_npy(tmp + ".npy")
            flip = 0x80 if layer["data_type"] == "SIGNED_FIXED_POINT8" else 0
            for yy in range(y):
                for xx in range(x):
                    t = lay["y_tile"][yy] + lay["x_tile"][xx]
                    src = lay["tile_byte_off"][t] + lay["y_local_y"][yy] * lay["x_row_size"][xx] + lay["x_local_byte"][xx]
                    dst = (yy * x + xx) * z
                    want = bytes(v ^ flip for v in raw[src:src + z])
                    if got[dst:dst + z] != want:
                        errors.append("%s: relayout %s differs at y=%d x=%d" % (model, layer["name"], yy, xx))
                        break
            checked += 1
    return checked


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=os.path.join(HERE, "../../target/debug/kiln"))
    ap.add_argument("--tool", default=DEFAULT_TOOL)
    ap.add_argument("--relayout", action="store_true", help="also check re-layout of every 3-D output")
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    tool = load_tool(args.tool)
    errors, total, failed_runs, layers = [], 0, 0, 0
    tmp = os.path.join("/tmp", "kiln-crosscheck-%d" % os.getpid())
    for m in args.models:
        run = subprocess.run([args.kiln, "edgetpu", "inspect", "--json", m], capture_output=True, text=True)
        if run.returncode != 0:
            failed_runs += 1
            errors.append("%s: kiln failed: %s" % (m, run.stderr.strip()))
            continue
        ref = tool.tflite(m, verbose=True)
        n = compare(os.path.basename(m), json.loads(run.stdout), ref, errors)
        total += n
        if args.relayout:
            layers += check_relayout(args.kiln, m, ref, errors, tmp)
        print("%-80s %6d values" % (os.path.basename(m), n))
    for e in errors:
        print("MISMATCH", e)
    print("%d models, %d values compared, %d 3-D outputs re-laid out, %d mismatches, %d kiln failures"
          % (len(args.models), total, layers, len(errors) - failed_runs, failed_runs))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
