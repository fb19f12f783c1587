#!/usr/bin/env python3
"""Cross-checks `kiln run` against ExecuTorch's runtime on models kiln's tests never saw.

Every model is exported the way tools/fixtures/export_pte.py does it (torch.export.export ->
to_edge_transform_and_lower without partitioner -> to_executorch: portable kernels, no delegate)
into a scratch directory outside the repository, run once with ExecuTorch's runtime on
deterministic inputs (the reference), then run with `kiln run --input ... --out-dir ...`
and compared output by output.

Verdicts per model:
  MATCH        every output matches (float32/64 max abs diff <= 1e-4, half/bfloat16 within one
               unit in the last place of the largest reference value, integer/bool exactly)
  MATCH EAGER  an output differs from ExecuTorch, but kiln's equals PyTorch eager's and
               ExecuTorch's does not: a known divergence of ExecuTorch's portable kernels
               (reference: kiln follows PyTorch eager semantics there)
  MISSING OPS  kiln refused at load, naming operators it has no kernel for
  WRONG        kiln ran but an output differs (shape, dtype, value)
  ERROR        kiln failed otherwise (its message is shown)
  CRASH        kiln exited with a code other than 0/1 (panic, signal) or timed out
  SKIPPED      ExecuTorch itself could not export or run the model (reason shown)

Usage (from the repository root, after `cargo build --release -p kiln-cli`):
  ~/peers/bin/python tools/crosscheck/executorch_models.py [--kiln target/release/kiln]
      [--work /tmp/sweep] [--json] [--reexport] [--timeout S] [MODEL ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED = 20261122

# --------------------------------------------------------------------------------------------
# Model definitions (imported lazily: the parent process only drives subprocesses).

Spec = Tuple[object, Tuple[object, ...], Optional[object], Optional[Tuple[object, ...]]]


def _models() -> Dict[str, Callable[[], Spec]]:
    import torch
    import torch.nn.functional as F
    import torchvision.models as tvm
    from torch import nn
    from torch.export import Dim

    g = torch.Generator()

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    def img(h=64, w=64, n=1):
        return randn(n, 3, h, w)

    def randomize_bn(model: nn.Module) -> nn.Module:
        """Non-trivial running statistics, so batch norm is not an identity."""
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                    m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                    m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
        return model

    class First(nn.Module):
        """Models returning dicts or tuples: keep the main tensor."""

        def __init__(self, m: nn.Module, key=None):
            super().__init__()
            self.m, self.key = m, key

        def forward(self, x):
            out = self.m(x)
            if isinstance(out, dict):
                return out[self.key]
            if isinstance(out, (tuple, list)):
                return out[0]
            return out

    def tv(ctor, h=64, **kw) -> Callable[[], Spec]:
        def build() -> Spec:
            return randomize_bn(ctor(weights=None, **kw)), (img(h, h),), None, None

        return build

    def seg(ctor) -> Callable[[], Spec]:
        def build() -> Spec:
            m = ctor(weights=None, weights_backbone=None, num_classes=5)
            return First(randomize_bn(m), "out"), (img(),), None, None

        return build

    # --- torch.nn building blocks ------------------------------------------------------------

    class Seq(nn.Module):
        def __init__(self, *mods):
            super().__init__()
            self.body = nn.Sequential(*mods)

        def forward(self, x):
            return self.body(x)

    def transformer_encoder() -> Spec:
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        m = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        return m, (randn(2, 10, 32),), None, None

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.dec = nn.TransformerDecoder(layer, 2)

        def forward(self, tgt, memory):
            mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
            return self.dec(tgt, memory, tgt_mask=mask, tgt_is_causal=True)

    def transformer_decoder() -> Spec:
        return Decoder(), (randn(2, 6, 32), randn(2, 9, 32)), None, None

    class Mha(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, q, kv, pad_mask):
            attn_mask = torch.triu(torch.ones(q.shape[1], kv.shape[1], dtype=torch.bool), 1)
            out, w = self.mha(q, kv, kv, key_padding_mask=pad_mask, attn_mask=attn_mask)
            return out, w

    def mha_masks() -> Spec:
        pad = torch.zeros(2, 7, dtype=torch.bool)
        pad[1, 5:] = True
        return Mha(), (randn(2, 7, 32), randn(2, 7, 32), pad), None, None

    def conv1d_audio() -> Spec:
        m = Seq(nn.Conv1d(1, 16, 9, stride=2, padding=4), nn.BatchNorm1d(16), nn.ReLU(),
                nn.Conv1d(16, 32, 5, stride=2, padding=2, groups=4), nn.GELU(),
                nn.MaxPool1d(2), nn.Conv1d(32, 32, 3, dilation=2, padding=2), nn.Tanh(),
                nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 6))
        return randomize_bn(m), (randn(2, 1, 400),), None, None

    def conv3d() -> Spec:
        m = Seq(nn.Conv3d(2, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(),
                nn.Conv3d(8, 4, (1, 3, 3), stride=(1, 2, 2)), nn.Sigmoid())
        return randomize_bn(m), (randn(1, 2, 4, 10, 10),), None, None

    def conv_transpose2d() -> Spec:
        m = Seq(nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1), nn.ReLU(),
                nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, groups=2,
                                   dilation=1))
        return m, (randn(1, 8, 6, 7),), None, None

    class Rnn(nn.Module):
        def __init__(self, rnn):
            super().__init__()
            self.rnn = rnn

        def forward(self, x):
            out, _ = self.rnn(x)
            return out

    def gru_bidir() -> Spec:
        return Rnn(nn.GRU(12, 16, num_layers=2, bidirectional=True, batch_first=True)), \
            (randn(2, 7, 12),), None, None

    def lstm_bidir() -> Spec:
        return Rnn(nn.LSTM(12, 16, num_layers=2, bidirectional=True)), \
            (randn(7, 2, 12),), None, None

    class TextClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16, padding_idx=0)
            self.lstm = nn.LSTM(16, 24, batch_first=True)
            self.fc = nn.Linear(24, 3)

        def forward(self, tokens):
            out, (h, c) = self.lstm(self.emb(tokens))
            return torch.log_softmax(self.fc(h[-1]), dim=-1)

    def embedding_lstm() -> Spec:
        return TextClassifier(), (torch.randint(0, 50, (3, 11), generator=g),), None, None

    def norms() -> Spec:
        m = Seq(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.SiLU(),
                nn.InstanceNorm2d(8, affine=True), nn.Conv2d(8, 8, 1), nn.InstanceNorm2d(8),
                nn.LayerNorm([16, 16]))
        return m, (img(16, 16, 2),), None, None

    def pixel_shuffle() -> Spec:
        m = Seq(nn.Conv2d(3, 12, 3, padding=1), nn.PixelShuffle(2), nn.Conv2d(3, 8, 3, padding=1),
                nn.PixelUnshuffle(2))
        return m, (img(12, 10),), None, None

    class Sdpa(nn.Module):
        def forward(self, q, k, v):
            causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(-1)
            masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | mask.t().triu(1))
            return causal + masked

    def sdpa_causal() -> Spec:
        return Sdpa(), (randn(1, 2, 8, 16), randn(1, 2, 8, 16), randn(1, 2, 8, 16)), None, None

    class IntOutputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 5)

        def forward(self, x):
            y = self.fc(x)
            return (y.argmax(dim=-1), y > 0, (y.abs() < 0.5) & (y != 0), y.argmin(dim=0),
                    (y * 10).to(torch.int32) % 3)

    def int_bool_outputs() -> Spec:
        return IntOutputs(), (randn(6, 8),), None, None

    def small_cnn() -> nn.Module:
        return Seq(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                   nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, stride=2), nn.Hardswish(),
                   nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4), nn.Softmax(-1))

    def float16_cnn() -> Spec:
        return randomize_bn(small_cnn()).half(), (img(16, 16).half(),), None, None

    def bfloat16_cnn() -> Spec:
        return randomize_bn(small_cnn()).to(torch.bfloat16), (img(16, 16).to(torch.bfloat16),), \
            None, None

    class HalfMlp(nn.Module):
        def __init__(self, dtype):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)
            self.ln = nn.LayerNorm(32)
            self.to(dtype)

        def forward(self, x):
            return torch.softmax(self.fc2(F.gelu(self.ln(self.fc1(x)))), dim=-1)

    def float16_mlp() -> Spec:
        return HalfMlp(torch.float16), (randn(4, 16, dtype=torch.float16),), None, None

    def bfloat16_mlp() -> Spec:
        return HalfMlp(torch.bfloat16), (randn(4, 16, dtype=torch.bfloat16),), None, None

    def channels_last(build: Callable[[], Spec]) -> Callable[[], Spec]:
        def wrapped() -> Spec:
            m, inputs, dyn, runs = build()
            m = m.to(memory_format=torch.channels_last)
            inputs = tuple(i.to(memory_format=torch.channels_last) if i.dim() == 4 else i
                           for i in inputs)
            return m, inputs, dyn, runs

        return wrapped

    def channels_last_cnn() -> Spec:
        return randomize_bn(small_cnn()), (img(16, 16),), None, None

    class UpCat(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 4, 3, padding=1)
            self.b = nn.Conv2d(4, 4, 3, stride=2, padding=1)
            self.c = nn.Conv2d(8, 2, 1)

        def forward(self, x):
            a = F.relu(self.a(x))
            b = F.interpolate(self.b(a), scale_factor=2.0, mode="bilinear")
            return self.c(torch.cat([a, b], dim=1)) + x.mean(dim=1, keepdim=True)

    def channels_last_unet() -> Spec:
        return UpCat(), (img(12, 12),), None, None

    class DynCnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 3, padding=1)
            self.fc = nn.Linear(6, 4)

        def forward(self, x):
            y = F.relu(self.conv(x))
            return self.fc(y.mean(dim=(2, 3)))

    def dynamic_cnn() -> Spec:
        b = Dim("b", min=1, max=8)
        h = Dim("h", min=8, max=32)
        return DynCnn(), (img(32, 32, 8),), {"x": {0: b, 2: h}}, (img(20, 32, 3),)

    class DynEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(40, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
            self.head = nn.Linear(32, 40)

        def forward(self, tokens):
            return self.head(self.enc(self.emb(tokens)))

    def dynamic_encoder() -> Spec:
        seq = Dim("seq", min=2, max=24)
        return DynEncoder(), (torch.randint(0, 40, (2, 24), generator=g),), \
            {"tokens": {1: seq}}, (torch.randint(0, 40, (2, 9), generator=g),)

    def small_vit() -> Spec:
        from torchvision.models.vision_transformer import VisionTransformer
        m = VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4,
                              hidden_dim=64, mlp_dim=128, num_classes=10)
        with torch.no_grad():  # torchvision zero-initializes the head: outputs would be all 0
            m.heads.head.weight.copy_(torch.randn(m.heads.head.weight.shape, generator=g) * 0.1)
        return m, (img(),), None, None

    def small_swin() -> Spec:
        from torchvision.models.swin_transformer import SwinTransformer
        m = SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                            window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)
        return m, (img(),), None, None

    def maxvit() -> Spec:
        from torchvision.models.maxvit import MaxVit
        m = MaxVit(input_size=(64, 64), stem_channels=16, partition_size=2, block_channels=[16, 32],
                   block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)
        return randomize_bn(m), (img(),), None, None

    def googlenet() -> Spec:
        m = tvm.googlenet(weights=None, aux_logits=False, init_weights=False)
        return randomize_bn(m), (img(),), None, None

    def seeded(build: Callable[[], Spec]) -> Callable[[], Spec]:
        def wrapped() -> Spec:
            torch.manual_seed(SEED)
            g.manual_seed(SEED)
            return build()

        return wrapped

    models: Dict[str, Callable[[], Spec]] = {
        "resnet18": tv(tvm.resnet18),
        "mobilenet_v3_small": tv(tvm.mobilenet_v3_small),
        "efficientnet_b0": tv(tvm.efficientnet_b0),
        "squeezenet1_1": tv(tvm.squeezenet1_1),
        "shufflenet_v2_x0_5": tv(tvm.shufflenet_v2_x0_5),
        "mnasnet0_5": tv(tvm.mnasnet0_5),
        "regnet_y_400mf": tv(tvm.regnet_y_400mf),
        "googlenet": googlenet,
        "densenet121": tv(tvm.densenet121),
        "convnext_tiny": tv(tvm.convnext_tiny),
        "swin_t": tv(tvm.swin_t),
        "swin_small": small_swin,
        "vit_small": small_vit,
        "maxvit_small": maxvit,
        "deeplabv3_mobilenet_v3_large": seg(tvm.segmentation.deeplabv3_mobilenet_v3_large),
        "lraspp_mobilenet_v3_large": seg(tvm.segmentation.lraspp_mobilenet_v3_large),
        "transformer_encoder": transformer_encoder,
        "transformer_decoder": transformer_decoder,
        "mha_masks": mha_masks,
        "conv1d_audio": conv1d_audio,
        "conv3d": conv3d,
        "conv_transpose2d": conv_transpose2d,
        "gru_bidir_2layer": gru_bidir,
        "lstm_bidir_2layer": lstm_bidir,
        "embedding_lstm": embedding_lstm,
        "norms": norms,
        "pixel_shuffle": pixel_shuffle,
        "sdpa_causal": sdpa_causal,
        "int_bool_outputs": int_bool_outputs,
        "float16_cnn": float16_cnn,
        "float16_mlp": float16_mlp,
        "bfloat16_cnn": bfloat16_cnn,
        "bfloat16_mlp": bfloat16_mlp,
        "channels_last_cnn": channels_last(channels_last_cnn),
        "channels_last_unet": channels_last(channels_last_unet),
        "channels_last_resnet18": channels_last(tv(tvm.resnet18, h=32)),
        "dynamic_cnn": dynamic_cnn,
        "dynamic_encoder": dynamic_encoder,
    }
    return {name: seeded(build) for name, build in models.items()}


MODEL_NAMES = [
    "resnet18", "mobilenet_v3_small", "efficientnet_b0", "squeezenet1_1", "shufflenet_v2_x0_5",
    "mnasnet0_5", "regnet_y_400mf", "googlenet", "densenet121", "convnext_tiny", "swin_t",
    "swin_small", "vit_small", "maxvit_small", "deeplabv3_mobilenet_v3_large",
    "lraspp_mobilenet_v3_large",
    "transformer_encoder", "transformer_decoder", "mha_masks", "conv1d_audio", "conv3d",
    "conv_transpose2d", "gru_bidir_2layer", "lstm_bidir_2layer", "embedding_lstm", "norms",
    "pixel_shuffle", "sdpa_causal", "int_bool_outputs", "float16_cnn", "float16_mlp",
    "bfloat16_cnn", "bfloat16_mlp", "channels_last_cnn", "channels_last_unet",
    "channels_last_resnet18", "dynamic_cnn", "dynamic_encoder",
]


# --------------------------------------------------------------------------------------------
# Export + ExecuTorch reference (runs in a child process per model).


def export_one(name: str, work: Path) -> None:
    """Exports `name` into work/name/ and records ExecuTorch's outputs; writes status.json."""
    import torch
    from torch.export import export

    sys.path.insert(0, str(REPO_ROOT / "tools/fixtures"))
    import fixturelib
    from executorch.exir import to_edge_transform_and_lower

    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    status: Dict[str, object] = {"name": name}

    def finish(**kw) -> None:
        status.update(kw)
        (d / "status.json").write_text(json.dumps(status, indent=1) + "\n")

    stage = "build"
    try:
        m, inputs, dynamic_shapes, run_inputs = _models()[name]()
        stage = "export"
        t0 = time.time()
        ep = export(m.eval(), inputs, dynamic_shapes=dynamic_shapes, strict=False)
        stage = "lower"
        prog = to_edge_transform_and_lower(ep).to_executorch()
        pte = d / "model.pte"
        pte.write_bytes(prog.buffer)
        export_s = time.time() - t0
        run = list(run_inputs if run_inputs is not None else inputs)
        for f in d.glob("*.npy"):
            f.unlink()
        for i, a in enumerate(run):
            fixturelib.save_npy(d / f"in{i}.npy", fixturelib.to_numpy(a))
        # PyTorch eager on the same inputs: tells a kiln bug from a documented divergence of
        # ExecuTorch's portable kernels (kiln follows eager there), and is the only reference
        # when ExecuTorch's runtime cannot run the program.
        stage = "eager run"
        with torch.no_grad():
            eager = m(*run)
        eager = list(eager) if isinstance(eager, (tuple, list)) else [eager]
        for i, a in enumerate(eager):
            fixturelib.save_npy(d / f"eager{i}.npy", fixturelib.to_numpy(a))
        info = fixturelib.inspect_pte(pte.read_bytes())["methods"][0]
        status.update(export_s=round(export_s, 1), pte_bytes=pte.stat().st_size,
                      inputs=len(run), outputs=len(eager),
                      output_dtypes=[o["dtype"] for o in info["outputs"]],
                      operators=sorted(set(info["operators"])), delegates=info["delegates"])
        stage = "executorch run"
        t0 = time.time()
        outs = fixturelib.Runner(pte).run("forward", run)
        run_s = time.time() - t0
        for i, a in enumerate(outs):
            fixturelib.save_npy(d / f"ref{i}.npy", a)
        finish(ok=True, executorch_run_s=round(run_s, 2), outputs=len(outs))
    except Exception as e:  # ExecuTorch (or torch.export) refused the model
        lines = str(e).strip().splitlines()
        first = next((ln for ln in lines if ln.strip()), "")[:300]
        finish(ok=False, stage=stage, reason=f"{type(e).__name__}: {first}")


# --------------------------------------------------------------------------------------------
# kiln run + comparison (parent process).


def bf16_to_f32(bits):
    import numpy as np

    return (bits.astype(np.uint32) << 16).view(np.float32)


def compare(got, ref, dtype: str) -> Tuple[bool, float, str]:
    """(ok, max abs diff, message)."""
    import numpy as np

    if got.shape != ref.shape:
        return False, math.inf, f"shape {list(got.shape)}, reference {list(ref.shape)}"
    if got.dtype != ref.dtype:
        return False, math.inf, f"dtype {got.dtype}, reference {ref.dtype}"
    if dtype == "bfloat16":
        got, ref = bf16_to_f32(got), bf16_to_f32(ref)
    if got.dtype.kind == "f":
        g64, r64 = got.astype(np.float64), ref.astype(np.float64)
        both_nan = np.isnan(g64) & np.isnan(r64)
        same = (g64 == r64) | both_nan
        diff = np.where(same, 0.0, np.abs(g64 - r64))
        diff = np.where(np.isnan(diff), math.inf, diff)
        worst = float(diff.max()) if diff.size else 0.0
        finite = r64[np.isfinite(r64)]
        scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
        tol = {"half": 2.0 ** -10 * scale, "bfloat16": 2.0 ** -7 * scale}.get(dtype, 1e-4)
        if worst > tol:
            i = int(np.argmax(diff))
            return False, worst, (f"max abs diff {worst:.3g} > {tol:.3g} at flat index {i}: "
                                  f"kiln {g64.flat[i]!r}, reference {r64.flat[i]!r}")
        return True, worst, ""
    if np.array_equal(got, ref):
        return True, 0.0, ""
    bad = int(np.count_nonzero(got != ref))
    i = int(np.argmax((got != ref).reshape(-1)))
    return False, math.inf, (f"{bad} of {got.size} elements differ; first at flat index {i}: "
                             f"kiln {got.flat[i]!r}, reference {ref.flat[i]!r}")


def parse_missing(stderr: str) -> Optional[List[str]]:
    """The operator names of kiln's load-time error "N operators without a kernel: a, b", if
    that is the error."""
    m = re.search(r"operators? without a kernel:\s*([^;\n]*)", stderr)
    if not m:
        return None
    ops = [o.strip() for o in m.group(1).split(",") if o.strip()]
    return ops or None


def run_kiln(kiln: Path, d: Path, status: dict, timeout: float, ref: str = "ref"
             ) -> Dict[str, object]:
    """Runs kiln on the model's inputs and compares with the `ref` arrays (ExecuTorch's, or
    PyTorch eager's when ExecuTorch could not run the program)."""
    import numpy as np

    outdir = d / "kiln_out"
    outdir.mkdir(exist_ok=True)
    for f in outdir.glob("*.npy"):
        f.unlink()
    cmd = [str(kiln), "run", str(d / "model.pte"), "--out-dir", str(outdir), "--json"]
    for i in range(status["inputs"]):
        cmd += ["--input", str(d / f"in{i}.npy")]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"verdict": "CRASH", "detail": f"timed out after {timeout:.0f} s"}
    secs = time.time() - t0
    err = p.stderr.strip()
    if p.returncode not in (0, 1):
        tail = err.splitlines()[-3:] if err else []
        return {"verdict": "CRASH", "detail": f"exit code {p.returncode}: " + " | ".join(tail)}
    if p.returncode == 1:
        ops = parse_missing(err)
        if ops is not None:
            return {"verdict": "MISSING OPS", "missing": ops, "detail": ", ".join(ops)}
        return {"verdict": "ERROR", "detail": " | ".join(err.splitlines()[:4])}
    worst, problems, eager_notes = 0.0, [], []
    kiln_ms = None
    try:
        kiln_ms = json.loads(p.stdout).get("execute_ms")
    except (ValueError, AttributeError):
        pass
    for i, dtype in enumerate(status["output_dtypes"]):
        want = np.load(d / f"{ref}{i}.npy")
        gf = outdir / f"output{i}.npy"
        if not gf.exists():
            problems.append(f"output {i}: not written")
            continue
        got = np.load(gf)
        ok, diff, msg = compare(got, want, dtype)
        if not ok:
            ef = d / f"eager{i}.npy"
            if ef.exists() and ref != "eager":
                eager = np.load(ef)
                kiln_eager, _, _ = compare(got, eager, dtype)
                et_eager, _, _ = compare(want, eager, dtype)
                if kiln_eager and not et_eager:
                    eager_notes.append(f"output {i} ({dtype}): {msg}")
                    continue
            problems.append(f"output {i} ({dtype}): {msg}")
        elif diff > worst:
            worst = diff
    res: Dict[str, object] = {"seconds": round(secs, 2), "kiln_execute_ms": kiln_ms}
    if problems:
        res.update(verdict="WRONG", detail="; ".join(problems))
    elif eager_notes:
        res.update(verdict="MATCH EAGER", detail="kiln equals PyTorch eager where ExecuTorch's "
                   "portable kernel diverges from it: " + "; ".join(eager_notes))
    else:
        res.update(verdict="MATCH", max_abs_diff=worst, detail=f"max abs diff {worst:.3g}")
    return res


def write_markdown(path: Path, results: List[dict], missing: Dict[str, List[str]],
                   counts: Dict[str, int]) -> None:
    from importlib.metadata import version

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [
        "# kiln run vs ExecuTorch on models kiln's tests never saw",
        "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. ExecuTorch "
        f"{version('executorch')}, torch {version('torch')}, torchvision "
        f"{version('torchvision')}. Made by `tools/crosscheck/executorch_models.py` (portable "
        "export, no delegate; random-init weights, deterministic inputs; reference = "
        "ExecuTorch's runtime on the written .pte).",
        "",
        "Verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".",
        "",
        "| model | verdict | detail |",
        "|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['model']} | {r['verdict']} | {cell(str(r.get('detail', '')))} |")
    lines += ["", "## Missing operators (models needing each)", ""]
    if missing:
        lines += ["| operator | models | which |", "|---|---|---|"]
        for op, ms in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"| `{op}` | {len(ms)} | {', '.join(ms)} |")
    else:
        lines.append("None.")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="subset of the models (default: all)")
    ap.add_argument("--kiln", type=Path, default=REPO_ROOT / "target/release/kiln")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sweep"))
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--markdown", type=Path, metavar="FILE",
                    help="also write the table as Markdown (tools/crosscheck/executorch_models.md)")
    ap.add_argument("--reexport", action="store_true", help="export again even if cached")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per step and model")
    ap.add_argument("--export-one", metavar="MODEL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = args.work.resolve()
    if work == REPO_ROOT or REPO_ROOT in work.parents:
        ap.error("--work must be outside the repository")
    if args.export_one:
        export_one(args.export_one, work)
        return 0
    names = args.models or MODEL_NAMES
    unknown = [n for n in names if n not in MODEL_NAMES]
    if unknown:
        ap.error(f"unknown models: {' '.join(unknown)}")
    if not args.kiln.exists():
        ap.error(f"{args.kiln} not found (cargo build --release -p kiln-cli)")
    results = []
    for name in names:
        d = work / name
        sf = d / "status.json"
        if args.reexport or not sf.exists():
            d.mkdir(parents=True, exist_ok=True)
            if sf.exists():
                sf.unlink()
            try:
                subprocess.run([sys.executable, __file__, "--work", str(work), "--export-one",
                                name], timeout=args.timeout, capture_output=True, text=True)
            except subprocess.TimeoutExpired:
                pass
        if not sf.exists():
            status = {"ok": False, "stage": "export", "reason":
                      f"export + ExecuTorch run did not finish (timeout {args.timeout:.0f} s "
                      "or the process died)"}
            sf.write_text(json.dumps(status, indent=1) + "\n")  # cached like any other result
        else:
            status = json.loads(sf.read_text())
        row: Dict[str, object] = {"model": name}
        if not status.get("ok"):
            why = f"{status.get('stage')}: {status.get('reason')}"
            row.update(verdict="SKIPPED", detail=why)
            if status.get("stage") == "executorch run":
                # ExecuTorch cannot run the program: kiln must then refuse it or agree with
                # PyTorch eager; a different answer is still a wrong answer.
                k = run_kiln(args.kiln, d, status, args.timeout, ref="eager")
                row.update(operators=status["operators"], kiln_vs_eager=k)
                if k["verdict"] in ("WRONG", "CRASH"):
                    row.update(verdict=k["verdict"], detail=f"{k['detail']} (vs PyTorch eager; "
                               f"ExecuTorch: {why})")
                else:
                    row["detail"] = f"{why}; kiln vs PyTorch eager: {k['verdict']} {k['detail']}"
        else:
            row.update(operators=status["operators"], pte_bytes=status["pte_bytes"],
                       executorch_run_s=status["executorch_run_s"])
            row.update(run_kiln(args.kiln, d, status, args.timeout))
        results.append(row)
        if not args.json:
            print(f"{name:30} {row['verdict']:12} {row.get('detail', '')}", flush=True)
    missing: Dict[str, List[str]] = {}
    for r in results:
        for op in r.get("missing", []):
            missing.setdefault(op, []).append(r["model"])
    counts: Dict[str, int] = {}
    for r in results:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    if args.json:
        print(json.dumps({"results": results, "missing_operators": missing, "counts": counts},
                         indent=1))
    else:
        print()
        print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if missing:
            print("missing operators (models needing each):")
            for op, ms in sorted(missing.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                print(f"  {op:45} {len(ms):2}  {' '.join(ms)}")
    if args.markdown:
        write_markdown(args.markdown, results, missing, counts)
    bad = [r for r in results if r["verdict"] in ("WRONG", "ERROR", "CRASH")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
