"""What the default calibration's tracing costs, against the path it replaced, in one run.

``mnemoscope calibrate`` traces every drawn record once: the answer with the context, both
paths' per-step distributions over it, and the closed-book answer that label verification
needs. Measured here on the default model and the shipped calibration records (the CLI's
seeded, class-balanced ``--max-records`` sample), the same records and threads for every
variant, interleaved round by round so that load drift (this machine runs other jobs) hits
every variant alike:

* ``old_b1`` / ``old_b8``: the path calibrate used before issue 35, at batch size 1 (the bare
  baseline) and 8 (its default then): ``transformers``' generate with the context, a
  teacher-forced forward per path with the last-prompt-token hidden states of every layer, a
  second generate for the closed-book answer (``decode="teacher-forced"``, ``hidden=True``);
  then what followed each draw round: the extraction read every trace back, wrote an empty
  extras record per new trace, and the draw read every trace back again for the answers;
* ``bare`` (not a variant: computed on ``new``'s traces): the floor, the same tokens
  teacher-forced in one forward per sequence as if the answers were known (:func:`_bare_compute`);
  ``new_vs_bare`` is how far generation is from it;
* ``new``: the default now: both paths and the closed-book answer decoded together in one
  padded batch (the chat template's shared prefix prefilled once, finished rows leaving the
  batch), no hidden states (``decode="lockstep"``, ``hidden=False``), at calibrate's default
  batch size, then the answers-only read the draw does after a round; ``new_b8`` is the same at
  batch size 8 (what the default batch size buys).

Each variant traces into its own resumable folder with :func:`mnemoscope.trace.pipeline.run_pairs`
(writes included). Reported: seconds and records per second per variant, the ratios, how far
the new traces are from the old ones (answers, log-probabilities, KL), the thread count and the
load average before and after (``os.getloadavg``: on a loaded machine every figure is slower
and the ratios noisier; it says how loaded this one was).

Usage: OMP_NUM_THREADS=1 python benchmarks/bench_calibrate.py [--n 32] [--threads 1]
    [--out benchmarks/results/calibration/bench_calibrate.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from build_default_profile import ROOT, provenance


def _bare_compute(lm: Any, traces: list[Any], batch_size: int) -> dict[str, Any]:
    """The floor under the tracing: the same tokens through the model in as few forwards as
    possible, as if every answer were known in advance (no sequential decoding, no cache
    bookkeeping, no per-step statistics, no writes): each record's three sequences (with-context
    prompt + answer, no-context prompt + answer, no-context prompt + closed-book answer)
    teacher-forced in one forward each, sorted by length and batched with next to no padding,
    logits kept for the answer positions only. Generation cannot beat this: it computes the same
    tokens one step at a time."""
    import torch

    tok = lm.tokenizer
    seqs: list[tuple[list[int], int]] = []
    for t in traces:
        pw = tok(t.prompt_with, add_special_tokens=False)["input_ids"]
        pwo = tok(t.prompt_without, add_special_tokens=False)["input_ids"]
        a = [int(x) for x in t.answer_ids]
        cb = [int(x) for x in (t.answer_without_ids if t.answer_without_ids is not None else [])]
        seqs += [(pw + a, len(a)), (pwo + a, len(a)), (pwo + cb, len(cb))]
    seqs.sort(key=lambda s: len(s[0]))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    n_tokens = sum(len(s) for s, _ in seqs)
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(seqs), batch_size):
            chunk = seqs[i : i + batch_size]
            width = max(len(s) for s, _ in chunk)
            ids = torch.tensor([s + [pad] * (width - len(s)) for s, _ in chunk], dtype=torch.long)
            mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s, _ in chunk], dtype=torch.long)
            keep = max(1, max(k for _, k in chunk))
            lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=keep)
    dt = time.perf_counter() - t0
    return {
        "what": "each record's three sequences teacher-forced in one forward each, length-sorted batches",
        "seconds": round(dt, 3),
        "tokens": n_tokens,
        "tokens_per_second": round(n_tokens / dt, 1),
        "seconds_per_record": round(dt / max(1, len(traces)), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32, help="shipped calibration records traced per variant")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=None, help="the new path's (default: calibrate's)")
    ap.add_argument(
        "--round",
        type=int,
        default=None,
        help="records per interleaved round, each variant in turn (default: the largest batch size)",
    )
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "calibration" / "bench_calibrate.json")
    )
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.cli.calibrate_cmd import sample_records, shipped_records
    from mnemoscope.data.records import read_records
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.crm.extract import CRMExtractConfig
    from mnemoscope.trace.pipeline import run_pairs
    from mnemoscope.trace.store import TraceWriter, load_answers, load_traces
    from mnemoscope.trace.templates import default_stops
    from mnemoscope.trace.types import CRMExtras

    load_start = [round(x, 2) for x in os.getloadavg()]
    lm = load_model("default")
    records, _ = read_records(shipped_records())
    records = sample_records(records, args.n, args.seed)
    cal = CalibrationConfig()
    new_bs = args.batch_size or cal.batch_size
    per_round = args.round or max(8, new_bs)
    base = CRMExtractConfig(  # what calibrate_profile traces with (prompt, T, stops)
        template=cal.template,
        task=cal.task,  # type: ignore[arg-type]
        chat=cal.chat,
        max_new_tokens=cal.max_new_tokens,
        attention_flow=False,
        static=False,
        logit_lens=False,
        gradient_norm=False,
        embedder="none",
    ).resolved(lm)
    base = replace(base, stop=default_stops(bool(base.chat)))
    variants: dict[str, tuple[Any, int, str]] = {
        "old_b1": (replace(base, hidden=True, decode="teacher-forced"), 1, "full"),
        "old_b8": (replace(base, hidden=True, decode="teacher-forced"), 8, "full"),
        "new": (replace(base, hidden=False, decode="lockstep"), new_bs, "answers"),
        "new_b8": (replace(base, hidden=False, decode="lockstep"), 8, "answers"),
    }

    def old_round(cfg: Any, bs: int, folder: Path) -> None:
        """What the old calibration did after tracing a round (crm.extract, then the draw)."""
        pairs = list(load_traces(folder))  # extract: every trace back, for the extras stage
        w = TraceWriter(
            folder.parent / f"{folder.name}-extras",
            kind="crm_extras",
            model=lm.info.to_dict(),
            settings=cfg.extras_settings(),
        )
        todo = [t for t in pairs if t.id not in w.done_ids]
        for i in range(0, len(todo), bs):  # an empty extras record per new trace, a shard per batch
            w.write([CRMExtras(id=t.id) for t in todo[i : i + bs]])
        load_traces(folder)  # the draw: every trace back again, for the answers

    tmp = Path(tempfile.mkdtemp(prefix="bench-calibrate-"))
    seconds = dict.fromkeys(variants, 0.0)
    try:
        # warm-up (first-call allocations, lazy imports) on one record, not timed
        for name, (cfg, bs, _) in variants.items():
            run_pairs(
                lm,
                records[:1],
                tmp / "warm" / name,
                config=cfg.pair_config(),
                batch_size=bs,
                progress=False,
                decode=cfg.decode,
            )
        for start in range(0, len(records), per_round):
            chunk = records[start : start + per_round]
            for name, (cfg, bs, read) in variants.items():
                folder = tmp / name
                t0 = time.perf_counter()
                run_pairs(
                    lm,
                    chunk,
                    folder,
                    config=cfg.pair_config(),
                    batch_size=bs,
                    progress=False,
                    decode=cfg.decode,
                )
                if read == "full":
                    old_round(cfg, bs, folder)
                else:
                    load_answers(folder, [r.id for r in records[: start + len(chunk)]])
                seconds[name] += time.perf_counter() - t0
            done = start + len(chunk)
            print(
                f"{done}/{len(records)} records: "
                + ", ".join(f"{k} {done / v:.3f} rec/s" for k, v in seconds.items()),
                flush=True,
            )
        old = {t.id: t for t in load_traces(tmp / "old_b8")}
        new = {t.id: t for t in load_traces(tmp / "new")}
        bare = _bare_compute(lm, list(new.values()), batch_size=new_bs)
        same = [i for i in new if old[i].answer_ids.tolist() == new[i].answer_ids.tolist()]

        def max_diff(field: str) -> float:
            return max(
                (float(np.max(np.abs(getattr(old[i], field) - getattr(new[i], field)))) for i in same),
                default=0.0,
            )

        agreement = {
            "n": len(new),
            "same_answer": len(same),
            "same_closed_book_answer": sum(old[i].answer_without == new[i].answer_without for i in new),
            "max_abs_diff_on_same_answers": {
                f: max_diff(f) for f in ("logprob_answer_with", "logprob_answer_without", "kl_steps")
            },
            "hidden_states_kept": {
                "old": all(t.h_with is not None for t in old.values()),
                "new": any(t.h_with is not None for t in new.values()),
            },
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rps = {k: len(records) / v for k, v in seconds.items()}
    result: dict[str, Any] = {
        **provenance(),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "load_avg_start": load_start,
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        },
        "model": lm.info.name,
        "n_records": len(records),
        "records_per_round": per_round,
        "variants": {
            k: {"batch_size": bs, "decode": cfg.decode, "hidden": cfg.hidden, "read_back": read}
            for k, (cfg, bs, read) in variants.items()
        },
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "records_per_second": {k: round(v, 4) for k, v in rps.items()},
        "seconds_per_record": {k: round(v / len(records), 3) for k, v in seconds.items()},
        "bare": bare,
        "new_vs_bare": round(seconds["new"] / bare["seconds"], 2),
        "speedup_new_vs_old_b1": round(rps["new"] / rps["old_b1"], 2),
        "speedup_new_vs_old_b8": round(rps["new"] / rps["old_b8"], 2),
        "speedup_new_b8_vs_old_b8": round(rps["new_b8"] / rps["old_b8"], 2),
        "agreement_new_vs_old_b8": agreement,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"new {rps['new']:.3f} rec/s vs old batch 1 {rps['old_b1']:.3f} ({result['speedup_new_vs_old_b1']}x), "
        f"old batch 8 {rps['old_b8']:.3f} ({result['speedup_new_vs_old_b8']}x); the bare floor "
        f"{bare['seconds_per_record']} s/record (new = {result['new_vs_bare']}x the floor); {args.threads} thread(s), "
        f"load {load_start} -> {result['machine']['load_avg_end']}; same answers {len(same)}/{len(new)} -> {out}"
    )


if __name__ == "__main__":
    main()
