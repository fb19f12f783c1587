#!/usr/bin/env python3
"""Exports the kiln-vs-ExecuTorch(XNNPACK) benchmark models into a cache directory.

Run with the peers venv: ~/peers/bin/python bench/export_models.py [--out DIR] [--force] [MODEL ...]

Every model is built once from seeded weights and exported twice, both through
tools/fixtures/export_pte.py's `single` (torch.export.export -> to_edge_transform_and_lower ->
to_executorch):
  portable.pte  no partitioner: every operator is a kernel call (what kiln runs)
  xnnpack.pte   XnnpackPartitioner: the supported subgraphs are XnnpackBackend delegates (what
                ExecuTorch runs fastest on a CPU)
plus one seeded input per method input (in0.npy, ...), shared by both, and ExecuTorch's outputs
for that input from each program (et_portable.out0.npy, et_xnnpack.out0.npy, ...), so a harness
can compare kiln's output with both without loading ExecuTorch again. manifest.json records the
tool versions, per program the delegate ids with their counts and the operators left outside
delegates (read back with ExecuTorch's deserializer), the output files and the max abs diff
between the two ExecuTorch outputs.

A model is skipped when its manifest exists, was written by this very script (same sha256) and
lists files that all exist; --force exports again. The default cache is bench/.models/
(git-ignored). Prints one line per model: `name: cached` or `name: exported in S s`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import Counter
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch
from torch import nn

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tools/fixtures"))
import export_pte  # noqa: E402  (model definitions and the export path of the fixtures)
import fixturelib  # noqa: E402

Spec = Tuple[nn.Module, Tuple[torch.Tensor, ...]]

SEED = 20261123


def mobilenet_v2() -> Spec:
    """torchvision mobilenet_v2 at 224x224, the committed fixture's model and input."""
    return export_pte._mobilenet(), (export_pte.randn(export_pte.gen(11), 1, 3, 224, 224),)


def _resnet18(size: int) -> Callable[[], Spec]:
    def build() -> Spec:
        import torchvision

        m = torchvision.models.resnet18(weights=None)
        export_pte._randomize_bn(m, export_pte.gen(12))
        return m, (export_pte.randn(export_pte.gen(13), 1, 3, size, size),)

    return build


def efficientnet_b0() -> Spec:
    """torchvision efficientnet_b0 at 224x224, randomized batch-norm statistics."""
    import torchvision

    torch.manual_seed(26)
    m = torchvision.models.efficientnet_b0(weights=None)
    export_pte._randomize_bn(m, export_pte.gen(27))
    return m, (export_pte.randn(export_pte.gen(28), 1, 3, 224, 224),)


def resnet50() -> Spec:
    """torchvision resnet50 at 224x224, randomized batch-norm statistics (outputs reach ~500:
    compare them relative to their magnitude)."""
    import torchvision

    torch.manual_seed(29)
    m = torchvision.models.resnet50(weights=None)
    export_pte._randomize_bn(m, export_pte.gen(30))
    return m, (export_pte.randn(export_pte.gen(32), 1, 3, 224, 224),)


def squeezenet() -> Spec:
    """torchvision squeezenet1_1 at 224x224, with torchvision's own initialisation seeded."""
    import torchvision

    torch.manual_seed(24)
    m = torchvision.models.squeezenet1_1(weights=None)
    return m, (export_pte.randn(export_pte.gen(25), 1, 3, 224, 224),)


def transformer_encoder() -> Spec:
    """nn.TransformerEncoder: 2 post-norm layers, d_model 64, 4 heads, ffn 128; 32 tokens."""
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    m = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return m, (export_pte.randn(export_pte.gen(21), 1, 32, 64),)


def vit_small() -> Spec:
    """The committed fixture's ViT: 32x32 image, 8x8 patches, d 64, 2 pre-norm layers."""
    return export_pte.VitSmall(), (export_pte.randn(export_pte.gen(16), 1, 3, 32, 32),)


def lstm() -> Spec:
    """2-layer LSTM, 16 features in, 24 hidden, 32 steps, linear head on the last step."""
    m = export_pte.LstmModel(nn.LSTM(16, 24, num_layers=2, batch_first=True), 24)
    return m, (export_pte.randn(export_pte.gen(22), 1, 32, 16),)


def gru() -> Spec:
    """2-layer GRU, 16 features in, 24 hidden, 32 steps, linear head on the last step."""
    m = export_pte.LstmModel(nn.GRU(16, 24, num_layers=2, batch_first=True), 24)
    return m, (export_pte.randn(export_pte.gen(23), 1, 32, 16),)


def _quantized(base: Callable[[], Spec], seed: int, dynamic: bool = False) -> Callable[[], Spec]:
    """`base` quantized with PT2E and ExecuTorch's XNNPACKQuantizer (symmetric int8,
    per-channel weights): static (activations calibrated on four seeded inputs shaped like the
    model's; the XNNPACK export is a QS8 graph, the portable one quantize/dequantize operators
    around float kernels) or dynamic (activations quantized per call: QD8 linears)."""

    def build() -> Spec:
        import executorch.kernels.quantized  # noqa: F401  (out variants of the q/dq operators)
        import export_xnnpack
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            get_symmetric_quantization_config,
        )

        m, (x,) = base()
        g = export_pte.gen(seed)
        if x.is_floating_point():
            calib = [(export_pte.randn(g, *x.shape),) for _ in range(4)]
        else:  # token ids
            calib = [(torch.randint(0, int(x.max()) + 1, tuple(x.shape), generator=g),)
                     for _ in range(4)]
        config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
        return _Converted(export_xnnpack.pt2e_quantize(m.eval(), (x,), config, calib)), (x,)

    kind = "dynamically (QD8)" if dynamic else "statically (QS8)"
    build.__doc__ = f"{base.__doc__.split(chr(10))[0].rstrip('.')}, quantized {kind}."
    return build


def mobilenet_v2_q8() -> Spec:
    """mobilenet_v2 quantized with PT2E (XNNPACKQuantizer, symmetric int8, per-channel weights),
    calibrated on four seeded images: the XNNPACK export is a static QS8 graph, the portable one
    quantize/dequantize operators around float kernels."""
    import executorch.kernels.quantized  # noqa: F401  (out variants of the q/dq operators)
    import export_xnnpack
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        get_symmetric_quantization_config,
    )

    m = export_pte._mobilenet().eval()
    g = export_pte.gen(31)
    x = export_pte.randn(g, 1, 3, 224, 224)
    calib = [(export_pte.randn(g, 1, 3, 224, 224),) for _ in range(4)]
    config = get_symmetric_quantization_config(is_per_channel=True)
    return _Converted(export_xnnpack.pt2e_quantize(m, (x,), config, calib)), (x,)


def _torchvision(name: str, seed: int, size: int = 224) -> Callable[[], Spec]:
    """A torchvision classifier at `size`x`size`, torchvision's initialisation seeded and its
    batch-norm statistics randomized."""

    def build() -> Spec:
        import torchvision

        torch.manual_seed(seed)
        m = getattr(torchvision.models, name)(weights=None)
        export_pte._randomize_bn(m, export_pte.gen(seed + 1))
        return m, (export_pte.randn(export_pte.gen(seed + 2), 1, 3, size, size),)

    build.__doc__ = f"torchvision {name} at {size}x{size}, randomized batch-norm statistics."
    return build


def vit_b_16() -> Spec:
    """torchvision vit_b_16 at 224x224; its head, zero-initialised by torchvision (every output
    would be 0), redrawn from N(0, 0.02)."""
    import torchvision

    torch.manual_seed(40)
    m = torchvision.models.vit_b_16(weights=None)
    with torch.no_grad():
        head = m.heads.head.weight
        head.copy_(export_pte.randn(export_pte.gen(41), *head.shape) * 0.02)
    return m, (export_pte.randn(export_pte.gen(42), 1, 3, 224, 224),)


class _LastHiddenState(nn.Module):
    """A transformers encoder returning its last hidden state as a plain tensor."""

    def __init__(self, m: nn.Module):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids).last_hidden_state


def bert() -> Spec:
    """transformers BertModel, BERT-base widths with 4 layers, random init from its config (no
    download), no pooler; 128 token ids."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(43)
    m = BertModel(BertConfig(num_hidden_layers=4), add_pooling_layer=False)
    ids = torch.randint(0, m.config.vocab_size, (1, 128), generator=export_pte.gen(44))
    return _LastHiddenState(m), (ids,)


class Wav2Letter(nn.Module):
    """The wav2letter speech model on raw 16 kHz audio, as torchaudio.models.Wav2Letter builds
    it for `input_type="waveform"` (torchaudio itself cannot be installed beside this torch):
    a 250-wide strided front end, then 1-D convolutions of widths 48, 7 (x7), 32 and 1, each
    followed by ReLU, and log-softmax over the classes."""

    def __init__(self, num_classes: int = 40):
        super().__init__()

        def conv(cin: int, cout: int, k: int, stride: int, pad: int) -> List[nn.Module]:
            return [nn.Conv1d(cin, cout, k, stride=stride, padding=pad), nn.ReLU()]

        layers = conv(1, 250, 250, 160, 45) + conv(250, 250, 48, 2, 23)
        for _ in range(7):
            layers += conv(250, 250, 7, 1, 3)
        layers += conv(250, 2000, 32, 1, 16) + conv(2000, 2000, 1, 1, 0)
        layers += conv(2000, num_classes, 1, 1, 0)
        self.acoustic_model = nn.Sequential(*layers)

    def forward(self, x):
        return nn.functional.log_softmax(self.acoustic_model(x), dim=1)


def wav2letter() -> Spec:
    """Wav2Letter (40 classes) on one second of 16 kHz audio, PyTorch's default initialisation
    seeded."""
    torch.manual_seed(45)
    return Wav2Letter(), (export_pte.randn(export_pte.gen(46), 1, 1, 16000),)


class _Converted(nn.Module):
    """A PT2E-converted module for the export path, which calls eval(): a converted module
    refuses train()/eval(), and is already in inference form."""

    def __init__(self, m: nn.Module):
        super().__init__()
        self.m = m

    def train(self, mode: bool = True) -> "_Converted":
        return self

    def forward(self, *args):
        return self.m(*args)


MODELS: Dict[str, Callable[[], Spec]] = {
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v2_q8": mobilenet_v2_q8,
    "resnet18_96": _resnet18(96),
    "resnet18_224": _resnet18(224),
    "transformer_encoder": transformer_encoder,
    "squeezenet": squeezenet,
    "efficientnet_b0": efficientnet_b0,
    "resnet50": resnet50,
    "vit_small": vit_small,
    "lstm": lstm,
    "gru": gru,
    "mobilenet_v3_large": _torchvision("mobilenet_v3_large", 33),
    "regnet_y_400mf": _torchvision("regnet_y_400mf", 36),
    "shufflenet_v2_x1_0": _torchvision("shufflenet_v2_x1_0", 50),
    "vit_b_16": vit_b_16,
    "bert": bert,
    "wav2letter": wav2letter,
    "mobilenet_v3_large_q8": _quantized(_torchvision("mobilenet_v3_large", 33), 60),
    "resnet50_q8": _quantized(resnet50, 61),
    "shufflenet_v2_x1_0_q8": _quantized(_torchvision("shufflenet_v2_x1_0", 50), 62),
    "bert_qd8": _quantized(bert, 63, dynamic=True),
}


def script_digest() -> str:
    """sha256 of this script and of the fixture module whose models and export path it uses."""
    h = hashlib.sha256()
    for p in (Path(__file__).resolve(), Path(export_pte.__file__).resolve()):
        h.update(p.read_bytes())
    return h.hexdigest()


def is_cached(d: Path, digest: str) -> bool:
    mf = d / "manifest.json"
    if not mf.exists():
        return False
    try:
        man = json.loads(mf.read_text())
    except ValueError:
        return False
    if man.get("script_sha256") != digest:
        return False
    names = ["portable.pte", "xnnpack.pte", *man.get("inputs", [])]
    for v in ("portable", "xnnpack"):
        names += man.get("outputs", {}).get(v, [])
    return all((d / n).exists() for n in names)


def export_model(name: str, d: Path, digest: str) -> None:
    fixturelib.seed_everything(SEED)
    model, inputs = MODELS[name]()
    model.eval()
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").unlink(missing_ok=True)  # written last: marks a complete export
    for f in d.glob("*.npy"):
        f.unlink()
    manifest: Dict[str, object] = {
        "model": name,
        "script_sha256": digest,
        "tool": fixturelib.tool_versions(),
        "seed": SEED,
        "inputs": [],
        "outputs": {},
        "delegates": {},
        "operators": {},
    }
    for i, t in enumerate(inputs):
        fixturelib.save_npy(d / f"in{i}.npy", fixturelib.to_numpy(t))
        manifest["inputs"].append(f"in{i}.npy")
    outs: Dict[str, List[np.ndarray]] = {}
    for variant, xnnpack in (("portable", False), ("xnnpack", True)):
        prog, _, _ = export_pte.single(model, inputs, xnnpack=xnnpack)
        pte = d / f"{variant}.pte"
        pte.write_bytes(prog.buffer)
        info = fixturelib.inspect_pte(pte.read_bytes())["methods"][0]
        manifest["delegates"][variant] = dict(Counter(info["delegates"]))
        manifest["operators"][variant] = info["operators"]
        outs[variant] = fixturelib.Runner(pte).run("forward", list(inputs))
        names = []
        for i, a in enumerate(outs[variant]):
            fixturelib.save_npy(d / f"et_{variant}.out{i}.npy", a)
            names.append(f"et_{variant}.out{i}.npy")
        manifest["outputs"][variant] = names
    if len(outs["portable"]) != len(outs["xnnpack"]):
        raise RuntimeError(f"{name}: the two programs return different numbers of outputs")
    manifest["et_portable_vs_xnnpack_max_abs_diff"] = max(
        fixturelib.max_abs_diff(a, b) for a, b in zip(outs["portable"], outs["xnnpack"])
    )
    (d / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=BENCH / ".models", help="cache directory")
    ap.add_argument("--force", action="store_true", help="export again even if cached")
    ap.add_argument("models", nargs="*", help=f"subset of: {' '.join(MODELS)}")
    args = ap.parse_args()
    unknown = [n for n in args.models if n not in MODELS]
    if unknown:
        ap.error(f"unknown models: {' '.join(unknown)} (known: {' '.join(MODELS)})")
    warnings.simplefilter("ignore")
    digest = script_digest()
    failed = []
    for name in args.models or list(MODELS):
        d = args.out / name
        if not args.force and is_cached(d, digest):
            print(f"{name}: cached", flush=True)
            continue
        t0 = time.time()
        try:
            export_model(name, d, digest)
        except Exception as e:  # report every model, then fail
            failed.append(name)
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            continue
        print(f"{name}: exported in {time.time() - t0:.0f} s", flush=True)
    if failed:
        print(f"failed: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
