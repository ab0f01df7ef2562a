"""What a model keeps of the shipped calibration set (``shipped:calibration``), per kind, difficulty and category.

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/data/measure_calibration_set.py \
        --traces runs/calset-smollm --out benchmarks/results/calibration/data/smollm2-135m.json
    # Gemma-3-270m (a base model: plain prompts, no chat template)
    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/data/measure_calibration_set.py --model GEMMA.gguf \
        --chat off --traces runs/calset-gemma --out benchmarks/results/calibration/data/gemma-3-270m.json

Every item is traced once as a pair (``mnemoscope bench verify``'s settings: template A, T = 32,
greedy, the closed-book answer on the no-context prompt of the same layout, a model without a chat
template cut at the default stop sequences an audit uses; resumable, written as it
goes, in a weighted round-robin over the strata so that a partial run is a stratified sample). The rule
is the label check ``mnemoscope calibrate`` applies (answer or alias as a whole word,
:func:`mnemoscope.bench.reliance.answer_matches`):

* memory (memorized / paraphrased) kept iff answered correctly closed-book *and* with the context
  (``closed_only`` also reports the old ``bench verify`` rule, closed-book only);
* clean kept iff not answered closed-book and answered with the context;
* conflict: with the context the model states the context's answer only (``follows_context``), the
  known answer only (``states_known``), both, or neither; closed-book whether it knows the fact.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")


def outcome(item: dict[str, Any], closed: str, opened: str) -> dict[str, Any]:
    from mnemoscope.bench.reliance import answer_matches

    closed_ok = answer_matches(closed, item)
    open_ok = answer_matches(opened, item)
    row: dict[str, Any] = {"closed_book_correct": closed_ok, "open_book_correct": open_ok}
    if item["kind"] == "conflict":
        ctx = {"answer": item["context_answer"], "aliases": item.get("context_aliases", [])}
        followed = answer_matches(opened, ctx)
        row["open_book_context_answer"] = followed
        row["outcome"] = (
            "follows_context"
            if followed and not open_ok
            else "states_known"
            if open_ok and not followed
            else "both"
            if open_ok and followed
            else "neither"
        )
    elif item["label"] == 1:
        row["kept"] = closed_ok and open_ok
        row["kept_closed_only"] = closed_ok
    else:
        row["kept"] = (not closed_ok) and open_ok
    return row


def read_answers(folder: Path) -> dict[str, tuple[str, str]]:
    path = folder / "answers.jsonl"
    out: dict[str, tuple[str, str]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                out[r["id"]] = (r["answer_with"], r["answer_without"])
    return out


def generate_answers(
    lm: Any, config: Any, items: list[dict[str, Any]], folder: Path, batch_size: int
) -> dict[str, tuple[str, str]]:
    """Greedy answers with and without the context, from the prompts the tracer renders (same
    template, chat setting and tokenization as ``run_pairs``); resumable, appended per batch."""
    import torch
    from tqdm.auto import tqdm

    from mnemoscope.trace.pair import cut_at_stop
    from mnemoscope.trace.tracer import Tracer

    folder.mkdir(parents=True, exist_ok=True)
    done = read_answers(folder)
    tracer = Tracer(lm, batch_size=batch_size)
    tok = lm.tokenizer
    todo = [it for it in items if it["id"] not in done]
    T = config.max_new_tokens
    with (folder / "answers.jsonl").open("a", encoding="utf-8") as f:
        for start in tqdm(range(0, len(todo), batch_size), desc="answers", unit="batch"):
            batch = todo[start : start + batch_size]
            seqs = []
            for it in batch:
                p_with, p_without = config.builder.pair(it["context"], it["query"], tok)
                seqs.append(tracer.encode(p_with, chat=config.builder.chat))
                seqs.append(tracer.encode(p_without, chat=config.builder.chat))
            ids, mask, _pos, _pads = tracer.pad(seqs)
            with torch.no_grad():
                out = lm.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=T,
                    do_sample=False,
                    eos_token_id=tracer.eos_ids,
                    pad_token_id=tracer.pad_id,
                )
            texts = []
            for row in out[:, ids.shape[1] :].tolist():
                eos = [k for k, t in enumerate(row) if t in tracer.eos_ids]
                row = row[: eos[0]] if eos else row
                keep, _cut = cut_at_stop(tok, row, config.builder.stop)
                texts.append(tok.decode(row[:keep], skip_special_tokens=True))
            for i, it in enumerate(batch):
                row = {
                    "id": it["id"],
                    "answer_with": texts[2 * i].strip(),
                    "answer_without": texts[2 * i + 1].strip(),
                }
                done[it["id"]] = (row["answer_with"], row["answer_without"])
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
    return done


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


# Strata and their shares of the answering order: the items are answered in a weighted round-robin
# over the strata (random within each, by a hash of the fact), so that a run stopped at any point has
# answered a stratified sample (the summary reports each stratum's answered count and rate).
STRATA = {
    "memory d1": 0.15,
    "clean": 0.40,
    "memory d2": 0.12,
    "memory d3": 0.12,
    "conflict d1": 0.14,
    "conflict d2": 0.07,
}


def stratum(item: dict[str, Any]) -> str:
    kind, diff = item["kind"], item.get("difficulty")
    if kind == "clean":
        return "clean"
    return f"{'conflict' if kind == 'conflict' else 'memory'} d{diff}"


def answering_order(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` in the weighted round-robin order over :data:`STRATA` (a fact's question and its
    paraphrase stay next to each other)."""
    import hashlib

    def h(it: dict[str, Any]) -> str:
        return hashlib.sha256(it["fact_id"].encode()).hexdigest() + it["id"]

    by: dict[str, list[dict[str, Any]]] = {}
    for it in sorted(items, key=h):
        by.setdefault(stratum(it), []).append(it)
    keyed = []
    for name, rows in by.items():
        for rank, it in enumerate(rows):
            keyed.append(((rank + 1) / STRATA[name], name, it))
    return [it for _, _, it in sorted(keyed, key=lambda k: (k[0], k[1]))]


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """95 % Wilson score interval of a rate k/n."""
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)]


def summarise(items: list[dict[str, Any]], rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    mem_kinds = ("memorized", "memorized_paraphrased")
    by_kind: dict[str, Counter[str]] = {}
    by_diff: dict[str, Counter[str]] = {}
    by_cat: dict[str, Counter[str]] = {}
    conflict: dict[str, Counter[str]] = {}
    sizes = Counter(stratum(it) for it in items)
    for it in items:
        r = rows.get(it["id"])
        kind = it["kind"]
        c = by_kind.setdefault(kind, Counter())
        c["total"] += 1
        if r is None:
            continue
        c["traced"] += 1
        if kind == "conflict":
            c[r["outcome"]] += 1
            cc = conflict.setdefault(stratum(it), Counter())
            cc["traced"] += 1
            cc[r["outcome"]] += 1
            if r["closed_book_correct"]:
                cc["known_closed_book"] += 1
                cc[f"known_closed_book & {r['outcome']}"] += 1
            continue
        c["kept"] += int(r["kept"])
        if kind in mem_kinds:
            c["kept_closed_only"] += int(r["kept_closed_only"])
        d = by_diff.setdefault(stratum(it), Counter())
        d["traced"] += 1
        d["kept"] += int(r["kept"])
        cat_key = f"{it['category']} ({'clean' if kind == 'clean' else 'memory'})"
        k = by_cat.setdefault(cat_key, Counter())
        k["traced"] += 1
        k["kept"] += int(r["kept"])
    for name, d in by_diff.items():
        d["total"] = sizes[name]
        d["rate_ci95"] = wilson(d["kept"], d["traced"])
        # the stratum's rate times its size: what a run over the whole set would keep (an estimate
        # from the random sample answered, exact when the stratum was answered in full)
        d["expected_kept_full_set"] = round(d["kept"] / d["traced"] * sizes[name]) if d["traced"] else 0
    for name, d in conflict.items():
        d["total"] = sizes[name]
    kept_memory = sum(by_kind.get(k, Counter())["kept"] for k in mem_kinds)
    kept_clean = by_kind.get("clean", Counter())["kept"]
    conf = by_kind.get("conflict", Counter())
    return {
        "kept_memory_answers": kept_memory,
        "kept_clean_answers": kept_clean,
        "expected_kept_full_set": {
            "memory": sum(d["expected_kept_full_set"] for n, d in by_diff.items() if n != "clean"),
            "clean": by_diff.get("clean", Counter())["expected_kept_full_set"],
        },
        "conflict_labels": {"memory": conf["states_known"], "context": conf["follows_context"]},
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "by_difficulty": {k: dict(v) for k, v in sorted(by_diff.items())},
        "conflict_by_difficulty": {k: dict(v) for k, v in sorted(conflict.items())},
        "by_category": {k: dict(v) for k, v in sorted(by_cat.items())},
    }


def markdown(result: dict[str, Any]) -> str:
    """The summary as Markdown tables (written next to the JSON)."""
    m = result["model"]
    run = result["run"]
    lines = [
        f"# Calibration set on {m.get('name')}",
        "",
        f"Command: `{result['command']}` (git {str(result.get('git_commit'))[:10]}, {result['created']}); "
        f"{run['n_traced']} of {result['data']['n_items']} items answered; chat template "
        f"{'on' if result['pair_config'].get('chat') else 'off'}, T = {result['pair_config']['max_new_tokens']}, "
        f"stop {result['pair_config'].get('stop', [])}; 1 torch thread; load average at start/end "
        f"{run['load_avg_start']} / {run['load_avg_end']}.",
        "",
        f"Kept: **{result['kept_memory_answers']} memory answers** (memorized + paraphrased) and "
        f"**{result['kept_clean_answers']} clean answers**; conflicts labelled memory "
        f"{result['conflict_labels']['memory']}, context {result['conflict_labels']['context']}.",
        "",
        "| kind | answered | kept | kept (closed-book only rule) |",
        "|---|---|---|---|",
    ]
    for kind, c in result["by_kind"].items():
        if kind == "conflict":
            continue
        lines.append(
            f"| {kind} | {c.get('traced', 0)} | {c.get('kept', 0)} | {c.get('kept_closed_only', '')} |"
        )
    exp = result["expected_kept_full_set"]
    lines += [
        "",
        f"Expected on the whole set (each stratum's rate times its size): {exp['memory']} memory answers, "
        f"{exp['clean']} clean answers.",
        "",
        "| stratum | items | answered | kept | rate (95 % CI) | expected kept, whole set |",
        "|---|---|---|---|---|---|",
    ]
    for key, c in result["by_difficulty"].items():
        rate = c["kept"] / c["traced"] if c.get("traced") else float("nan")
        lo, hi = c["rate_ci95"]
        lines.append(
            f"| {key} | {c['total']} | {c['traced']} | {c['kept']} | {rate:.2f} ({lo:.2f}-{hi:.2f}) | "
            f"{c['expected_kept_full_set']} |"
        )
    conf = result["by_kind"].get("conflict", {})
    lines += [
        "",
        "Knowledge conflicts (answer with the counterfactual context):",
        "",
        "| stratum | items | answered | follows context | states known answer | both | neither | known closed-book |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, c in result["conflict_by_difficulty"].items():
        lines.append(
            f"| {key} | {c.get('total', 0)} | {c.get('traced', 0)} | {c.get('follows_context', 0)} | "
            f"{c.get('states_known', 0)} | "
            f"{c.get('both', 0)} | {c.get('neither', 0)} | {c.get('known_closed_book', 0)} |"
        )
    if conf.get("traced"):
        lines.append(
            f"| all | {conf.get('total', 0)} | {conf.get('traced', 0)} | {conf.get('follows_context', 0)} | {conf.get('states_known', 0)} | "
            f"{conf.get('both', 0)} | {conf.get('neither', 0)} | |"
        )
    lines += ["", "| category | answered | kept | rate |", "|---|---|---|---|"]
    for key, c in result["by_category"].items():
        rate = c["kept"] / c["traced"] if c.get("traced") else float("nan")
        lines.append(f"| {key} | {c['traced']} | {c['kept']} | {rate:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--chat", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--template", default="A")
    ap.add_argument("--max-new-tokens", "-T", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--traces", required=True, type=Path, help="trace folder (resumable)")
    ap.add_argument("--out", required=True, type=Path, help="summary JSON to write")
    ap.add_argument(
        "--rows", type=Path, default=None, help="per-item outcomes JSONL (default: next to --out)"
    )
    ap.add_argument("--limit", type=int, default=None, help="trace only the first N items (priority order)")
    ap.add_argument(
        "--engine",
        choices=["trace", "generate"],
        default="trace",
        help="trace: paired traces (run_pairs, as bench verify); generate: the same prompts answered by "
        "batched greedy generation only (no trace features; about 3x less CPU), answers in TRACES/answers.jsonl",
    )
    ap.add_argument(
        "--answers-note",
        default=None,
        help="with --summarise-only: how the answers in TRACES were produced (commands, commits), stored in the result",
    )
    ap.add_argument("--summarise-only", action="store_true", help="no tracing: summarise what is traced")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from mnemoscope.bench.calibration_data import default_path, load_calibration_items
    from mnemoscope.models import load_model
    from mnemoscope.provenance import provenance
    from mnemoscope.trace import PairConfig, PairItem, PromptBuilder, load_traces
    from mnemoscope.trace.pipeline import run_pairs
    from mnemoscope.trace.templates import default_stops

    items = answering_order(load_calibration_items())
    todo = items if args.limit is None else items[: args.limit]
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    lm = load_model(args.model)
    chat = bool(lm.info.has_chat_template) if args.chat == "auto" else args.chat == "on"
    config = PairConfig(
        builder=PromptBuilder(template=args.template, chat=chat, stop=default_stops(chat)),
        max_new_tokens=args.max_new_tokens,
        answer_without=True,
    )
    summary_run = None
    if args.engine == "generate" and not args.summarise_only:
        answers = generate_answers(lm, config, todo, args.traces, args.batch_size)
    elif not args.summarise_only:
        pairs = [PairItem(it["id"], it["context"], it["query"], it["label"]) for it in todo]
        summary_run = run_pairs(
            lm, pairs, args.traces, config=config, batch_size=args.batch_size, progress=True
        )
    seconds = time.perf_counter() - t0
    if args.engine == "generate":
        answers = read_answers(args.traces)
    else:
        answers = {t.id: (t.answer_with, t.answer_without or "") for t in load_traces(args.traces)}
    rows: dict[str, dict[str, Any]] = {}
    for it in items:
        if it["id"] in answers:
            opened, closed = answers[it["id"]]
            rows[it["id"]] = {
                "id": it["id"],
                "kind": it["kind"],
                "difficulty": it.get("difficulty"),
                "category": it["category"],
                "closed_book_answer": closed,
                "open_book_answer": opened,
                **outcome(it, closed, opened),
            }
    result = {
        **provenance(),
        "data": {
            "file": "src/mnemoscope/bench/data/calibration.jsonl",
            "sha256": _sha256(default_path()),
            "n_items": len(items),
        },
        "model": lm.info.to_dict(),
        "pair_config": config.to_dict(),
        "rule": "memory kept iff correct closed-book and with the context (kept_closed_only: closed-book "
        "only, the old bench verify rule); clean kept iff wrong closed-book and right with the context; "
        "conflict outcome from the answer with the context (answer or alias as a whole word)",
        "run": {
            "n_traced": len(rows),
            "seconds_this_run": round(seconds, 1),
            "trace_summary": None if summary_run is None else summary_run.to_dict(),
            "threads": 1,
            "answers_note": args.answers_note,
            "answers_file_sha256": _sha256(args.traces / "answers.jsonl")
            if (args.traces / "answers.jsonl").is_file()
            else None,
            "load_avg_start": [round(x, 2) for x in load_start],
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        },
        **summarise(items, rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    rows_path = args.rows or args.out.with_suffix(".rows.jsonl")
    with rows_path.open("w") as f:
        for it in items:
            if it["id"] in rows:
                f.write(json.dumps(rows[it["id"]], ensure_ascii=False) + "\n")
    print(
        f"{len(rows)} of {len(items)} traced: kept {result['kept_memory_answers']} memory answers, "
        f"{result['kept_clean_answers']} clean; conflicts {result['by_kind'].get('conflict')} -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
