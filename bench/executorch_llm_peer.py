#!/usr/bin/env python3
"""Time ExecuTorch's runtime generating with an LLM export, the peer of `kiln generate --json`.

Run with the peers venv:
    ~/peers/bin/python bench/executorch_llm_peer.py MODEL.pte --prompt-tokens 1,2,3 --new-tokens 65

Loads the program through `executorch.runtime` (the pybindings, with ExecuTorch's optimized
kernels, its XNNPACK backend, and the `llama::` custom ops and quantized kernels registered by
importing their modules), then runs the loop of ExecuTorch's LLM runner with greedy sampling:
one prefill `forward(tokens[1, P], [0])` and argmax (timed: `prefill_ms`), then one
`forward([[token]], [pos])` and argmax per further token (timed together:
`decode_tokens_per_s` = decode calls / their time, the first token excluded as the runner
counts). Prints one JSON object: {"tokens", "margins", "prefill_ms", "decode_tokens_per_s",
"load_ms", "rss_growth_mb"}: `load_ms` is `load_program` + `load_method`, `rss_growth_mb` the
peak resident memory of the process past what it held after its imports (VmHWM - VmRSS then).
`margins[i]` the gap between the two largest logits that chose `tokens[i]` (a near tie there
lets two correct runtimes part; the bench compares tokens only up to the first margin below
0.01).
"""

import argparse
import json
import time
import warnings

from executorch_peer import status_kb


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--prompt-tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--new-tokens", type=int, default=65, help="tokens to generate (first included)")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()

    warnings.filterwarnings("ignore")
    import torch
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (llama:: ops)
    import executorch.kernels.quantized  # noqa: F401  (quantized_decomposed:: ops)
    from executorch.runtime import Runtime

    if a.threads:
        from executorch.extension.pybindings import portable_lib

        portable_lib._unsafe_reset_threadpool(a.threads)

    prompt = [int(t) for t in a.prompt_tokens.split(",")]
    baseline_kb = status_kb("VmRSS")
    start = time.perf_counter()
    program = Runtime.get().load_program(a.model)
    forward = program.load_method("forward")
    load_ms = (time.perf_counter() - start) * 1e3
    tokens = torch.tensor([prompt], dtype=torch.long)
    start = time.perf_counter()
    logits = forward.execute([tokens, torch.tensor([0], dtype=torch.long)])[0]
    new = [int(torch.argmax(logits, dim=-1)[0])]
    tops = [logits.clone()]
    prefill_ms = (time.perf_counter() - start) * 1e3
    pos = len(prompt)
    start = time.perf_counter()
    while len(new) < a.new_tokens:
        logits = forward.execute(
            [torch.tensor([[new[-1]]], dtype=torch.long), torch.tensor([pos], dtype=torch.long)]
        )[0]
        pos += 1
        tops.append(logits.clone())  # the output buffer is reused by the next call
        new.append(int(torch.argmax(logits, dim=-1)[0]))
    decode_s = time.perf_counter() - start
    decoded = len(new) - 1
    margins = []
    for t in tops:
        top2 = torch.topk(t.reshape(-1).float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    print(json.dumps({
        "tokens": new,
        "margins": margins,
        "prefill_ms": prefill_ms,
        "decode_tokens_per_s": decoded / decode_s if decoded and decode_s > 0 else 0.0,
        "load_ms": load_ms,
        "rss_growth_mb": (status_kb("VmHWM") - baseline_kb) / 1024,
    }))


if __name__ == "__main__":
    main()
