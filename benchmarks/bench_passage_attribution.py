"""Which retrieved passage states the answer: mnemoscope's per-phrase passage attribution and
ContextCite's (MadryLab, ``pip install --no-deps context-cite``) side by side, on the same model, the
same prompt and the same items, with what each costs, measured in one run.

Items: multi-passage records (JSONL) ``{"id", "query", "answer", "aliases", "passages": [str, ...],
"gold_passage": int}`` (default: the ``evaluation`` split of ``benchmarks/data/public/multi_passage.jsonl``). For each item, in
alternating order (so that load drift on the shared machine hits both methods alike):

* **mnemoscope**: ``Auditor.audit`` of ``AuditRequest(passages=...)`` (the model generates its
  answer greedily with the profile's prompt, then scores it). Its top-1 is the passage the audit
  names for the answer-bearing phrase that states the gold answer
  (``evidence.answer_words.words[i].passage``), else the answer-level passage when the audit reports one.
* **ContextCite**: ``ContextCiter`` with the passages as its sources (a partitioner that drops whole
  passages and joins the rest with :func:`mnemoscope.trace.passages.join_passages`) and mnemoscope's
  prompt (the profile's template and chat template, tokenized as the auditor does), so both read the
  same prompt. By default it generates its own answer greedily with the profile's ``max_new_tokens``
  (``--cc-response generate``; the answers should agree and each row records whether they do);
  ``--cc-response forced`` makes it attribute mnemoscope's answer instead. Its ablations are
  ``--num-ablations`` (ContextCite's default 64) with its default keep probability 0.5, batch size 1
  and LASSO surrogate. Its top-1 is the argmax of the attribution scores of the gold-answer span of
  its response (``get_attributions(start, end)``; the whole response when the gold answer cannot be
  located as text); the whole-response argmax is recorded too. All-zero scores (LASSO kept no
  passage) name no passage.

Scored: top-1 accuracy against ``gold_passage`` on the items where that method's answer states the gold
answer (:func:`mnemoscope.bench.reliance.answer_matches`), and on the items where both answers do
(paired), with percentile-bootstrap 95% CIs (:func:`mnemoscope.stats.bootstrap_ci`). A method that names
no passage for a scored item counts as wrong there. Cost per answer: wall seconds and CPU seconds (``--threads``,
default 1; on a shared machine the CPU seconds are the steadier figure) and the model's forward calls (a forward pre-hook on the model: generation steps, scoring passes and
ablations alike), the rows and the tokens they processed, and the ratio ContextCite / mnemoscope.

``--reuse-contextcite ROWS`` re-measures the mnemoscope side only: ContextCite's per-item results
(its top-1, scores, cost, forward calls and answer) are taken from an earlier run's rows file for
the same item ids (checked: same gold passage, passage count and gold answer), and its command,
commit, load and settings from the summary next to it (``measured`` in the summary says which side
was measured where). mnemoscope then audits ContextCite's recorded answer as a given answer
(``AuditRequest.from_passages(..., answer=...)``, ``--mn-response contextcite``, the default with
reuse): both attribute the same text, whatever T the profile generates with now. The cost ratio of
such rows is ``ratio_across_runs_contextcite_over_mnemoscope`` (mnemoscope's cost fresh,
ContextCite's from the earlier run under another load: both loads recorded);
``ratio_contextcite_over_mnemoscope`` only ever compares costs measured in the same run.

Rows go to ``OUT`` with ``.rows.jsonl`` (one JSON line per item, appended and flushed as it is done;
``--resume`` skips the ids already there); the summary goes to ``OUT`` (with the command, commit, load
averages, thread count and settings).

Usage:
    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/bench_passage_attribution.py \\
        [--data FILE] [--n 100] [--out benchmarks/results/passages/contextcite.json] [--resume]
    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/bench_passage_attribution.py --n 32 \\
        --reuse-contextcite benchmarks/results/passages/contextcite.rows.jsonl \\
        --out benchmarks/results/passages/contextcite_grounded.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "benchmarks" / "data" / "public" / "multi_passage.jsonl"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "passages" / "contextcite.json"
RESULT_FORMAT = "mnemoscope-passage-attribution/1"

log = logging.getLogger("bench_passage_attribution")


# -- items -------------------------------------------------------------------------------------


def read_items(path: str | Path, n: int | None = None, split: str | None = None) -> list[dict[str, Any]]:
    """The first ``n`` multi-passage records of ``path`` (checked: passages a non-empty list of
    strings, ``gold_passage`` an index into it); with ``split``, only the records of that split
    (records without a ``split`` field are kept)."""
    out: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            it = json.loads(line)
            if split is not None and it.get("split", split) != split:
                continue
            ps = it.get("passages")
            if not isinstance(ps, list) or not ps or not all(isinstance(p, str) and p.strip() for p in ps):
                raise ValueError(f"{path}:{lineno}: passages must be a non-empty list of non-empty strings")
            g = it.get("gold_passage")
            if not isinstance(g, int) or not 0 <= g < len(ps):
                raise ValueError(f"{path}:{lineno}: gold_passage must index passages, got {g!r}")
            for k in ("id", "query", "answer"):
                if k not in it:
                    raise ValueError(f"{path}:{lineno}: missing {k}")
            it["id"] = str(it["id"])
            it.setdefault("aliases", [])
            out.append(it)
            if n is not None and len(out) >= n:
                break
    return out


def gold_span(text: str, item: dict[str, Any]) -> tuple[int, int] | None:
    """Character ``(start, end)`` of the first whole-word, case-insensitive occurrence of the gold
    answer or an alias in ``text`` (longest candidate first), or ``None``."""
    cands = sorted({str(item["answer"]), *map(str, item.get("aliases", ()))}, key=len, reverse=True)
    best: tuple[int, int] | None = None
    for c in cands:
        words = c.strip().split()
        if not words:
            continue
        pat = r"(?<!\w)" + r"\s+".join(re.escape(w) for w in words) + r"(?!\w)"
        m = re.search(pat, text, flags=re.IGNORECASE)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), m.end())
    return best


# -- counting forward passes ---------------------------------------------------------------------


class ForwardCounter:
    """Counts the forward calls of a model (a pre-hook on the top-level module), the rows and the
    tokens they process; :meth:`take` returns the counts since the last take."""

    def __init__(self, model: Any):
        self.calls = self.rows = self.tokens = 0
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = kwargs.get("input_ids")
        if x is None and args:
            x = args[0]
        if x is None:
            x = kwargs.get("inputs_embeds")
        self.calls += 1
        shape = tuple(getattr(x, "shape", ()) or ())
        if len(shape) >= 2:
            self.rows += int(shape[0])
            self.tokens += int(shape[0]) * int(shape[1])

    def take(self) -> dict[str, int]:
        out = {"calls": self.calls, "rows": self.rows, "tokens": self.tokens}
        self.calls = self.rows = self.tokens = 0
        return out

    def close(self) -> None:
        self._handle.remove()


# -- mnemoscope ------------------------------------------------------------------------------------


def supports_passages() -> bool:
    from mnemoscope.audit.requests import AuditRequest

    return "passages" in {f.name for f in dataclasses.fields(AuditRequest)}


def _as_index(v: Any, n: int) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, np.integer)) and 0 <= int(v) < n:
        return int(v)
    if isinstance(v, dict):
        for k in ("index", "passage", "i", "id"):
            if k in v:
                return _as_index(v[k], n)
    return None


def _best_of(entries: Any, n: int) -> int | None:
    """The one passage a ``passages`` list names: scored records -> the top score; a plain list of
    indices (the passages that state a phrase, unranked) only when it holds one."""
    if not isinstance(entries, list) or not entries:
        return None
    if all(isinstance(e, dict) for e in entries):
        for key in ("score", "effect", "drop", "support", "weight"):
            scored = [(e.get(key), e) for e in entries if isinstance(e.get(key), (int, float))]
            if scored:
                return _as_index(max(scored, key=lambda s: s[0])[1], n)
    return _as_index(entries[0], n) if len(entries) == 1 else None


def mnemoscope_top1(audit: dict[str, Any], answer: str, item: dict[str, Any]) -> dict[str, Any]:
    """The passage the audit names for the answer-bearing phrase stating the gold answer
    (``words[i].passage``: the stating passage whose removal lowers the model's belief in the phrase
    most, or the only one stating it): the first phrase whose text states the gold answer
    (``answer_matches``), else the phrases overlapping the gold answer's span in the answer; else
    the answer-level passage when the audit reports one. Also what stood behind it: the passages
    that state the phrase and the leave-one-out effect of the named one."""
    from mnemoscope.bench.reliance import answer_matches

    n = len(item["passages"])
    ev = audit.get("evidence") or {}
    aw = ev.get("answer_words") or {}
    words = [w for w in (aw.get("words") or []) if isinstance(w, dict)]
    chosen = [w for w in words if answer_matches(str(w.get("text", "")), item)]
    how = "phrase"
    if not chosen:
        span = gold_span(answer, item)
        if span is not None:
            chosen = [w for w in words if w.get("start", 0) < span[1] and span[0] < w.get("end", 0)]
            how = "overlap"

    def info(w: dict[str, Any] | None) -> dict[str, Any]:
        if w is None:
            return {"phrase": None, "grounded": None, "stating": None, "passage_effect": None}
        return {
            "phrase": w.get("text"),
            "grounded": w.get("grounded"),
            "stating": w.get("passages"),
            "passage_effect": w.get("passage_effect"),
        }

    for w in chosen:
        p = _as_index(w.get("passage"), n)
        if p is None:
            p = _best_of(w.get("passages"), n)
        if p is not None:
            return {"top1": p, "how": how, **info(w)}
    for src in (aw, ev):
        p = _as_index(src.get("passage"), n)
        if p is None:
            p = _best_of(src.get("passages"), n)
        if p is not None:
            return {"top1": p, "how": "answer", **info(None)}
    return {"top1": None, "how": "none", **info(chosen[0] if chosen else None)}


def run_mnemoscope(auditor: Any, item: dict[str, Any], answer: str | None = None) -> dict[str, Any]:
    """One audit of ``item``'s passages: the model generates its answer, or with ``answer`` the
    audit scores that text as a given answer (``AuditRequest(answer=...)``: no generation)."""
    from mnemoscope.audit.requests import AuditFailure, AuditRequest
    from mnemoscope.bench.reliance import answer_matches
    from mnemoscope.trace.passages import join_passages

    kw: dict[str, Any] = {"id": item["id"]}
    if answer is not None:
        kw["answer"] = answer
    if hasattr(AuditRequest, "from_passages"):
        req = AuditRequest.from_passages(tuple(item["passages"]), item["query"], **kw)
    elif supports_passages():
        req = AuditRequest(  # type: ignore[call-arg]
            join_passages(item["passages"]), item["query"], passages=tuple(item["passages"]), **kw
        )
    else:  # before AuditRequest.passages: one joined context (the audit then names no passage of the item)
        req = AuditRequest(join_passages(item["passages"]), item["query"], **kw)
    t0 = time.perf_counter()
    (res,) = auditor.audit([req])
    seconds = time.perf_counter() - t0
    if isinstance(res, AuditFailure):
        return {
            "seconds": seconds,
            "failed": res.to_dict(),
            "answer": None,
            "answer_given": answer is not None,
            "matches": False,
            "top1": None,
        }
    d = res.to_dict()
    aw = (d.get("evidence") or {}).get("answer_words") or {}
    if aw.get("n_passages", len(item["passages"])) != len(item["passages"]):
        # the audit saw the context as another number of passages (one, before AuditRequest.passages):
        # its passage indices do not index the item's passages
        pick = {"top1": None, "how": f"audit saw {aw.get('n_passages')} passage(s)"}
    else:
        pick = mnemoscope_top1(d, d["answer"], item)
    return {
        "seconds": seconds,
        "answer": d["answer"],
        "answer_given": answer is not None,
        "matches": answer_matches(d["answer"], item),
        "source": d["source"],
        **pick,
    }


# -- ContextCite ---------------------------------------------------------------------------------


def import_context_cite() -> Any:
    """``context_cite`` imported quietly: its import calls ``nltk.download("punkt_tab")`` (a network
    call for the sentence splitter, which passage sources never use), here a no-op; its per-item
    progress bar is switched off."""
    import nltk

    real = nltk.download
    nltk.download = lambda *a, **k: True  # type: ignore[assignment]
    try:
        import context_cite
        import context_cite.utils as ccu
    finally:
        nltk.download = real  # type: ignore[assignment]
    ccu.tqdm = lambda it, *a, **k: it  # type: ignore[assignment]
    warnings.filterwarnings("ignore", message=".*CUDA is not available.*autocast.*")
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*torch.cuda.amp.autocast.*")
    return context_cite


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def make_citer_classes(builder: Any, tokenizer: Any) -> tuple[type, type]:
    """(partitioner, citer) classes: sources are the passages, and the prompt is the profile's,
    tokenized as the auditor tokenizes it (``add_special_tokens`` only without a chat template)."""
    cc = import_context_cite()
    from context_cite.context_partitioner import BaseContextPartitioner

    from mnemoscope.trace.passages import join_passages

    class PassagePartitioner(BaseContextPartitioner):
        def __init__(self, passages: Sequence[str]):
            self.passages = [p.strip() for p in passages]
            super().__init__(join_passages(self.passages))

        @property
        def num_sources(self) -> int:
            return len(self.passages)

        def split_context(self) -> None:
            return None

        def get_source(self, index: int) -> str:
            return self.passages[index]

        def get_context(self, mask: Any = None) -> str:
            if mask is None:
                return self.context
            return join_passages([p for p, keep in zip(self.passages, mask, strict=True) if keep])

    class ProfileCiter(cc.ContextCiter):  # type: ignore[misc,name-defined]
        def _get_prompt_ids(self, mask: Any = None, return_prompt: bool = False) -> Any:
            prompt = builder.build(self.partitioner.get_context(mask), self.query, tokenizer)
            ids = list(tokenizer(prompt, add_special_tokens=not builder.chat)["input_ids"])
            return (ids, prompt) if return_prompt else ids

    return PassagePartitioner, ProfileCiter


def _argmax(scores: np.ndarray) -> int | None:
    if scores.size == 0 or not np.any(scores != 0) or not np.isfinite(scores).all():
        return None
    top = np.flatnonzero(scores == scores.max())
    return int(top[0]) if len(top) == 1 else None


def strip_special(tokenizer: Any, text: str) -> str:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return str(tokenizer.decode(ids, skip_special_tokens=True)).strip()


def run_contextcite(
    classes: tuple[type, type],
    lm: Any,
    item: dict[str, Any],
    *,
    max_new_tokens: int,
    num_ablations: int,
    batch_size: int,
    forced_answer: str | None,
) -> dict[str, Any]:
    from mnemoscope.bench.reliance import answer_matches

    part_cls, citer_cls = classes
    collect = _Collect()
    cc_log = logging.getLogger("ContextCite")
    cc_log.addHandler(collect)
    cc_log.propagate = False
    t0 = time.perf_counter()
    t_gen = 0.0
    try:
        part = part_cls(item["passages"])
        citer = citer_cls(
            lm.model,
            lm.tokenizer,
            part.context,
            item["query"],
            partitioner=part,
            num_ablations=num_ablations,
            batch_size=batch_size,
            generate_kwargs={"max_new_tokens": max_new_tokens, "do_sample": False},
        )
        if forced_answer is not None:
            _, prompt = citer._get_prompt_ids(return_prompt=True)
            citer._cache["output"] = prompt + forced_answer
        response = citer.response
        t_gen = time.perf_counter() - t0
        span = gold_span(response, item)
        if span is not None:
            scores_span = np.asarray(citer.get_attributions(span[0], span[1], verbose=False), dtype=float)
        scores_whole = np.asarray(citer.get_attributions(verbose=False), dtype=float)
        if span is None:
            scores_span = scores_whole
    except Exception as e:  # recorded, not fatal: a row that names no passage
        return {
            "seconds": time.perf_counter() - t0,
            "seconds_generate": t_gen,
            "failed": f"{type(e).__name__}: {e}",
            "answer": None,
            "matches": False,
            "top1": None,
            "top1_whole": None,
            "warnings": collect.messages,
        }
    finally:
        cc_log.removeHandler(collect)
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "seconds_generate": t_gen,
        "response": response,
        "answer": strip_special(lm.tokenizer, response),
        "matches": answer_matches(response, item),
        "span": list(span) if span is not None else None,
        "span_text": response[span[0] : span[1]] if span is not None else None,
        "scores": [round(float(s), 6) for s in scores_span],
        "scores_whole": [round(float(s), 6) for s in scores_whole],
        "top1": _argmax(scores_span),
        "top1_whole": _argmax(scores_whole),
        "warnings": collect.messages,
    }


# -- scoring ----------------------------------------------------------------------------------------


def _est(values: Any, stat: Any = np.mean, n_resamples: int = 2000) -> dict[str, Any]:
    from mnemoscope.stats import bootstrap_ci

    if len(values) == 0:
        return {"estimate": None, "ci_low": None, "ci_high": None, "n": 0, "reason": "no scored item"}
    e = bootstrap_ci(np.asarray(values, dtype=float), stat, n_resamples=n_resamples, rng=0)
    return {
        "estimate": round(float(e.estimate or 0.0), 4),
        "ci_low": round(float(e.ci_low or 0.0), 4),
        "ci_high": round(float(e.ci_high or 0.0), 4),
        "n": e.n,
        "method": e.method,
        "confidence": e.confidence,
    }


def _correct(r: dict[str, Any], gold: int, key: str = "top1") -> float:
    return float(r.get(key) is not None and r[key] == gold)


def summarise(rows: Sequence[dict[str, Any]], n_resamples: int = 2000) -> dict[str, Any]:
    """Accuracy (with bootstrap CIs) and cost per answer of both methods from the per-item rows."""
    done = [r for r in rows if "mnemoscope" in r]
    with_cc = [r for r in done if r.get("contextcite") is not None]
    out: dict[str, Any] = {"n_items": len(done)}
    mn_scored = [r for r in done if r["mnemoscope"].get("matches")]
    out["mnemoscope"] = {
        "n_answer_states_gold": len(mn_scored),
        "n_named_no_passage": sum(r["mnemoscope"].get("top1") is None for r in mn_scored),
        "n_failed": sum("failed" in r["mnemoscope"] for r in done),
        "top1_accuracy": _est(
            [_correct(r["mnemoscope"], r["gold_passage"]) for r in mn_scored], n_resamples=n_resamples
        ),
        "chance": _est([1.0 / r["n_passages"] for r in mn_scored], n_resamples=n_resamples)["estimate"],
        "how": dict(Counter(str(r["mnemoscope"].get("how")) for r in mn_scored)),
    }
    if with_cc:
        cc_scored = [r for r in with_cc if r["contextcite"].get("matches")]
        out["contextcite"] = {
            "n_answer_states_gold": len(cc_scored),
            "n_named_no_passage": sum(r["contextcite"].get("top1") is None for r in cc_scored),
            "n_gold_span_not_found": sum(r["contextcite"].get("span") is None for r in cc_scored),
            "n_failed": sum("failed" in r["contextcite"] for r in with_cc),
            "top1_accuracy": _est(
                [_correct(r["contextcite"], r["gold_passage"]) for r in cc_scored], n_resamples=n_resamples
            ),
            "top1_accuracy_whole_response": _est(
                [_correct(r["contextcite"], r["gold_passage"], "top1_whole") for r in cc_scored],
                n_resamples=n_resamples,
            ),
            "chance": _est([1.0 / r["n_passages"] for r in cc_scored], n_resamples=n_resamples)["estimate"],
        }
        both = [r for r in with_cc if r["mnemoscope"].get("matches") and r["contextcite"].get("matches")]
        pairs = np.array(
            [
                [_correct(r["mnemoscope"], r["gold_passage"]), _correct(r["contextcite"], r["gold_passage"])]
                for r in both
            ]
        ).reshape(-1, 2)
        out["paired"] = {
            "n": len(both),
            "mnemoscope": _est(pairs[:, 0], n_resamples=n_resamples),
            "contextcite": _est(pairs[:, 1], n_resamples=n_resamples),
            "difference_mnemoscope_minus_contextcite": _est(
                pairs[:, 0] - pairs[:, 1], n_resamples=n_resamples
            ),
            "agree_top1": int(sum(r["mnemoscope"].get("top1") == r["contextcite"].get("top1") for r in both)),
        }
        out["answers_agree"] = {
            "n": len(with_cc),
            "agree": sum(bool(r.get("answers_agree")) for r in with_cc),
            "differ_ids": [r["id"] for r in with_cc if not r.get("answers_agree")],
        }
    out["by_gold_text"] = by_gold_text(done, n_resamples)
    out["cost"] = cost_summary(done, with_cc, n_resamples)
    return out


def by_gold_text(done: Sequence[dict[str, Any]], n_resamples: int) -> dict[str, Any]:
    """Top-1 accuracy split by how many passages hold the gold answer as text: in one passage only
    (matching the answer's words to the passages finds it) or in several (then the gold passage must
    be told apart by how the model used it)."""
    out: dict[str, Any] = {}
    for name, keep in (
        ("gold_text_in_one_passage", lambda k: k <= 1),
        ("gold_text_in_several", lambda k: k > 1),
    ):
        part = [r for r in done if keep(len(r.get("gold_in_passages") or []))]
        block: dict[str, Any] = {"n_items": len(part)}
        for m in ("mnemoscope", "contextcite"):
            scored = [r for r in part if (r.get(m) or {}).get("matches")]
            if any(r.get(m) is not None for r in part):
                block[m] = _est([_correct(r[m], r["gold_passage"]) for r in scored], n_resamples=n_resamples)
        out[name] = block
    return out


def cost_summary(
    done: Sequence[dict[str, Any]], with_cc: Sequence[dict[str, Any]], n_resamples: int
) -> dict[str, Any]:
    def per_method(rs: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
        sec = [r[key]["seconds"] for r in rs]
        fw = [r[key]["forwards"] for r in rs]
        if not rs:
            return {"n": 0}
        return {
            "n": len(rs),
            "seconds_mean": _est(sec, n_resamples=n_resamples),
            "seconds_median": round(float(np.median(sec)), 3),
            "cpu_seconds_mean": _est([r[key].get("cpu_seconds", np.nan) for r in rs], n_resamples=n_resamples)
            if all("cpu_seconds" in r[key] for r in rs)
            else None,
            "forward_calls_mean": round(float(np.mean([f["calls"] for f in fw])), 2),
            "forward_rows_mean": round(float(np.mean([f["rows"] for f in fw])), 2),
            "forward_tokens_mean": round(float(np.mean([f["tokens"] for f in fw])), 1),
        }

    out: dict[str, Any] = {"mnemoscope": per_method(done, "mnemoscope")}
    if not with_cc:
        return out
    out["contextcite"] = per_method(with_cc, "contextcite")
    out["contextcite"]["seconds_generate_mean"] = round(
        float(np.mean([r["contextcite"]["seconds_generate"] for r in with_cc])), 3
    )
    same = [r for r in with_cc if not r["contextcite"].get("reused")]
    across = [r for r in with_cc if r["contextcite"].get("reused")]
    if across:
        out["contextcite"]["measured"] = (
            f"{len(across)} of {len(with_cc)} items: in an earlier run (reused rows; see 'measured'), "
            "under that run's load"
        )
    if same:  # both sides measured in this run, item by item: the comparable ratio
        out["ratio_contextcite_over_mnemoscope"] = _cost_ratio(same, n_resamples)
        out["ratio_contextcite_over_mnemoscope"]["note"] = (
            "ratio of the means over the same items, both measured in this run (bootstrap over items for the seconds)"
        )
    if across:  # mnemoscope fresh, ContextCite from the earlier run: not measured under the same load
        r = _cost_ratio(across, n_resamples)
        r["load1_mean"] = {
            "mnemoscope_this_run": _mean_or_none([x.get("load1") for x in across]),
            "contextcite_earlier_run": _mean_or_none([x["contextcite"].get("run_load1") for x in across]),
        }
        r["caveat"] = (
            "across runs: mnemoscope measured in this run, ContextCite in an earlier one, under another "
            "machine load (load1_mean) and possibly another commit; the seconds ratios are indicative only, "
            "the forward-call and token ratios do not depend on load"
        )
        out["ratio_across_runs_contextcite_over_mnemoscope"] = r
    return out


def _mean_or_none(xs: Sequence[Any]) -> float | None:
    v = [float(x) for x in xs if isinstance(x, (int, float))]
    return round(float(np.mean(v)), 2) if v else None


def _cost_ratio(rows: Sequence[dict[str, Any]], n_resamples: int) -> dict[str, Any]:
    """ContextCite / mnemoscope: ratios of the means over ``rows`` (bootstrap over items for the
    seconds); ``seconds_without_contextcite_generation``: ContextCite's seconds less its own
    generation (for when mnemoscope audited a given answer and generated nothing)."""
    a = np.array(
        [
            [
                r["mnemoscope"]["seconds"],
                r["contextcite"]["seconds"],
                r["mnemoscope"]["forwards"]["calls"],
                r["contextcite"]["forwards"]["calls"],
                r["mnemoscope"]["forwards"]["tokens"],
                r["contextcite"]["forwards"]["tokens"],
                r["mnemoscope"].get("cpu_seconds", np.nan),
                r["contextcite"].get("cpu_seconds", np.nan),
                r["contextcite"]["seconds"] - r["contextcite"].get("seconds_generate", np.nan),
            ]
            for r in rows
        ],
        dtype=float,
    )

    def ratio(s: np.ndarray) -> float:
        return float(s[:, 1].mean() / s[:, 0].mean())

    return {
        "n": len(rows),
        "seconds": _est(a[:, [0, 1]], ratio, n_resamples),
        "cpu_seconds": _est(a[:, [6, 7]], ratio, n_resamples) if np.isfinite(a[:, 6:8]).all() else None,
        "seconds_without_contextcite_generation": _est(a[:, [0, 8]], ratio, n_resamples)
        if np.isfinite(a[:, 8]).all()
        else None,
        "forward_calls": round(float(a[:, 3].mean() / a[:, 2].mean()), 2),
        "forward_tokens": round(float(a[:, 5].mean() / a[:, 4].mean()), 2),
    }


# -- reusing an earlier run's ContextCite side ---------------------------------------------------------


def summary_path_of(rows_path: str | Path) -> Path:
    """The summary JSON written next to a rows file (``X.rows.jsonl`` -> ``X.json``)."""
    p = Path(rows_path)
    name = p.name
    return p.with_name(
        name[: -len(".rows.jsonl")] + ".json" if name.endswith(".rows.jsonl") else p.stem + ".json"
    )


def read_reused_contextcite(
    rows_path: str | Path, items: Sequence[dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """ContextCite's per-item results for ``items`` from an earlier run's rows file: ``{id: its
    contextcite record}`` (marked ``reused``, with the earlier run's per-item load and order), and
    where they came from (the rows file, and from the summary next to it the earlier run's command,
    commit, load, threads and ContextCite settings). Refused (``SystemExit``) when an item has no row
    with a ContextCite record there, or when the row is of another item (gold passage, passage count
    or gold answer differ)."""
    rows = {r["id"]: r for r in _load(Path(rows_path))}
    if not rows:
        raise SystemExit(f"--reuse-contextcite: no rows in {rows_path}")
    missing = [it["id"] for it in items if (rows.get(it["id"]) or {}).get("contextcite") is None]
    if missing:
        raise SystemExit(
            f"--reuse-contextcite: {len(missing)} of the {len(items)} items have no ContextCite row in "
            f"{rows_path} (first: {missing[0]}); lower --n to the items it covers"
        )
    out: dict[str, dict[str, Any]] = {}
    for it in items:
        r = rows[it["id"]]
        for k, v in (
            ("gold_passage", it["gold_passage"]),
            ("n_passages", len(it["passages"])),
            ("answer", it["answer"]),
        ):
            if r.get(k) != v:
                raise SystemExit(f"--reuse-contextcite: row {it['id']} has {k} {r.get(k)!r}, the item {v!r}")
        out[it["id"]] = {
            **r["contextcite"],
            "reused": True,
            "run_load1": r.get("load1"),
            "run_order": r.get("order"),
        }
    src: dict[str, Any] = {"rows": _rel(Path(rows_path))}
    sp = summary_path_of(rows_path)
    if sp.is_file():
        prev = json.loads(sp.read_text(encoding="utf-8"))
        prov = prev.get("provenance") or {}
        src.update(
            summary=_rel(sp),
            command=prov.get("command"),
            created=prov.get("created"),
            commit=(prev.get("git") or {}).get("commit") or prov.get("git_commit"),
            dirty=(prev.get("git") or {}).get("dirty"),
            machine=prev.get("machine"),
            max_new_tokens=(prev.get("settings") or {}).get("max_new_tokens"),
            profile=(prev.get("settings") or {}).get("profile"),
            contextcite=(prev.get("settings") or {}).get("contextcite"),
        )
    else:
        src["summary"] = None
        src["note"] = (
            f"no summary {sp.name} next to the rows: the earlier run's command, commit and load are unknown"
        )
    return out, src


def _rel(p: Path) -> str:
    p = p.resolve()
    return str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)


# -- the run ------------------------------------------------------------------------------------------


def _load(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="multi-passage JSONL (default: %(default)s)")
    ap.add_argument("--n", type=int, default=100, help="items (the first N of --data's --split)")
    ap.add_argument(
        "--split",
        default="evaluation",
        help="the records' split to use (default: evaluation, as benchmarks/real_data_eval.py; 'all': every record)",
    )
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="summary JSON; rows go to OUT with .rows.jsonl")
    ap.add_argument("--resume", action="store_true", help="skip the ids already in the rows file")
    ap.add_argument("--overwrite", action="store_true", help="start the rows file afresh")
    ap.add_argument("--model", default="default", help="model spec (default: the embedded SmolLM2)")
    ap.add_argument("--profile", default=None, help="audit profile folder (default: the shipped one)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--no-contextcite", action="store_true", help="mnemoscope only")
    ap.add_argument("--num-ablations", type=int, default=64, help="ContextCite ablations (its default 64)")
    ap.add_argument("--cc-batch-size", type=int, default=1, help="ContextCite ablation batch (its default 1)")
    ap.add_argument(
        "--cc-response",
        choices=("generate", "forced"),
        default="generate",
        help="ContextCite generates its answer (default) or attributes mnemoscope's",
    )
    ap.add_argument(
        "--reuse-contextcite",
        metavar="ROWS",
        default=None,
        help="take ContextCite's per-item results (top-1, scores, cost, forward calls, its answer) from an "
        "earlier run's rows file for the same item ids instead of running it; only mnemoscope is "
        "re-measured (its cost ratio to ContextCite's is then across runs, and labelled so)",
    )
    ap.add_argument(
        "--mn-response",
        choices=("generate", "contextcite"),
        default=None,
        help="mnemoscope generates its answer (default without --reuse-contextcite) or audits "
        "ContextCite's recorded answer as a given answer (the default with it: both attribute the same text)",
    )
    ap.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="start no new item after this many minutes (the summary covers the items done; --resume continues)",
    )
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up item")
    args = ap.parse_args(argv)
    if args.mn_response is None:
        args.mn_response = "contextcite" if args.reuse_contextcite else "generate"
    if args.reuse_contextcite and args.no_contextcite:
        ap.error("--reuse-contextcite and --no-contextcite exclude each other")
    if args.reuse_contextcite and args.cc_response != "generate":
        ap.error("--cc-response applies to a ContextCite run, not to reused rows")
    if args.mn_response == "contextcite" and not args.reuse_contextcite:
        ap.error("--mn-response contextcite needs --reuse-contextcite (ContextCite's recorded answers)")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    import torch
    from tqdm.auto import tqdm

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.provenance import git_commit, provenance

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    rows_path = out.with_suffix(".rows.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    if rows_path.exists() and not (args.resume or args.overwrite):
        raise SystemExit(f"{rows_path} exists: pass --resume to continue it or --overwrite to start afresh")
    if args.overwrite and rows_path.exists():
        rows_path.unlink()
    items = read_items(args.data, args.n, None if args.split == "all" else args.split)
    prior = _load(rows_path) if args.resume else []
    done_ids = {r["id"] for r in prior}
    todo = [it for it in items if it["id"] not in done_ids]
    reused, cc_source = (
        read_reused_contextcite(args.reuse_contextcite, items) if args.reuse_contextcite else ({}, None)
    )
    load_start = [round(x, 2) for x in os.getloadavg()]

    t_load = time.perf_counter()
    auditor = Auditor.from_spec(args.model, profile=args.profile, batch_size=1)
    load_seconds = time.perf_counter() - t_load
    lm = auditor.lm
    builder = auditor.profile.builder
    T = int(auditor.profile.max_new_tokens)
    classes = None if (args.no_contextcite or reused) else make_citer_classes(builder, lm.tokenizer)
    counter = ForwardCounter(lm.model)

    def cc_run(it: dict[str, Any], forced: str | None, num_ablations: int) -> dict[str, Any]:
        assert classes is not None
        return run_contextcite(
            classes,
            lm,
            it,
            max_new_tokens=T,
            num_ablations=num_ablations,
            batch_size=args.cc_batch_size,
            forced_answer=forced,
        )

    def given(it: dict[str, Any]) -> str | None:
        """The answer mnemoscope audits as given: ContextCite's recorded one (``--mn-response
        contextcite``; none when its row failed: then it generates), else none (it generates)."""
        if args.mn_response != "contextcite":
            return None
        a = reused[it["id"]].get("answer")
        return a if isinstance(a, str) and a.strip() else None

    if todo and not args.no_warmup:  # one untimed pass of each: first-call costs stay out of the figures
        run_mnemoscope(auditor, todo[0], given(todo[0]))
        if classes is not None:
            cc_run(todo[0], None, 2)
    counter.take()

    stopped_early = False
    with (
        rows_path.open("a", encoding="utf-8") as f,
        tqdm(
            total=len(items),
            initial=len(items) - len(todo),
            disable=args.no_progress,
            desc="items",
            file=sys.stderr,
        ) as bar,
    ):
        t_run = time.perf_counter()
        for k, it in enumerate(todo):
            if args.max_minutes is not None and time.perf_counter() - t_run > 60 * args.max_minutes:
                stopped_early = True
                break
            row: dict[str, Any] = {
                "id": it["id"],
                "gold_passage": it["gold_passage"],
                "n_passages": len(it["passages"]),
                "answer": it["answer"],
                # the passages that hold the gold answer as text (a split independent of either method)
                "gold_in_passages": [j for j, p in enumerate(it["passages"]) if gold_span(p, it) is not None],
                "order": "mnemoscope-only"
                if reused
                else ("mnemoscope-first" if k % 2 == 0 else "contextcite-first"),
                "load1": round(os.getloadavg()[0], 2),
            }
            steps = ["mnemoscope", "contextcite"] if k % 2 == 0 else ["contextcite", "mnemoscope"]
            if args.cc_response == "forced":
                steps = ["mnemoscope", "contextcite"]  # it attributes mnemoscope's answer
            for step in steps:
                cpu0 = time.process_time()
                if step == "mnemoscope":
                    r = run_mnemoscope(auditor, it, given(it))
                elif reused:
                    row[step] = reused[it["id"]]  # measured in the earlier run: cost, forwards and all
                    continue
                elif classes is None:
                    continue
                else:
                    forced = row["mnemoscope"]["answer"] if args.cc_response == "forced" else None
                    r = cc_run(it, forced, args.num_ablations)
                # CPU seconds of this process: what the step computed, whatever else the machine ran
                r["cpu_seconds"] = time.process_time() - cpu0
                r["forwards"] = counter.take()
                r["correct"] = r.get("top1") is not None and r["top1"] == it["gold_passage"]
                row[step] = r
            if "contextcite" in row:
                a, b = row["mnemoscope"].get("answer"), row["contextcite"].get("answer")
                row["answers_agree"] = a is not None and (a or "").strip() == (b or "").strip()
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            bar.update(1)
    counter.close()

    rows = [r for r in _load(rows_path) if r["id"] in {it["id"] for it in items}]
    summary = summarise(rows, args.bootstrap)
    result = {
        "format": RESULT_FORMAT,
        "what": "top-1 passage attribution of the answer: mnemoscope vs ContextCite, same model, prompt and items",
        "provenance": provenance(
            None if argv is None else ["python", "benchmarks/bench_passage_attribution.py", *argv]
        ),
        "git": git_commit(ROOT),
        "machine": {
            "threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "cpu_count": os.cpu_count(),
            "load_avg_start": load_start,
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
            "load1_per_item_mean": round(float(np.mean([r["load1"] for r in rows])), 2) if rows else None,
        },
        "settings": {
            "data": str(args.data),
            "n_requested": args.n,
            "split": args.split,
            "model": auditor.model_info.get("name"),
            "model_fingerprint": auditor.model_info.get("fingerprint"),
            "profile": str(auditor.profile.path),
            "max_new_tokens": T,
            "prompt": builder.to_dict(),
            "mnemoscope_passages": supports_passages(),
            "mnemoscope_response": "contextcite's recorded answer, audited as a given answer "
            "(AuditRequest.from_passages(..., answer=...): no generation, both attribute the same text)"
            if args.mn_response == "contextcite"
            else f"generated (greedy, T = {T})",
            "contextcite": {
                **(cc_source or {}).get("contextcite", {}),
                "reused_from": (cc_source or {}).get("rows"),
            }
            if reused
            else None
            if classes is None
            else {
                "version": _version("context-cite"),
                "num_ablations": args.num_ablations,
                "ablation_keep_prob": 0.5,
                "batch_size": args.cc_batch_size,
                "solver": "LassoRegression(alpha=0.01)",
                "response": args.cc_response,
                "sources": "passages (whole passages dropped, the rest joined as mnemoscope joins them)",
            },
            "model_load_seconds": round(load_seconds, 2),
            "warmup": not args.no_warmup,
            "max_minutes": args.max_minutes,
            "stopped_at_time_budget": stopped_early,
        },
        "rows": str(rows_path.relative_to(ROOT) if rows_path.is_relative_to(ROOT) else rows_path),
        "measured": measured_sides(args, git_commit(ROOT), cc_source, T),
        **summary,
    }
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return result


def measured_sides(
    args: argparse.Namespace, git: dict[str, Any], cc_source: dict[str, Any] | None, T: int
) -> dict[str, Any]:
    """Which side this run measured, at which commit, and where the other side's figures come from."""
    here = {"run": "this run", "commit": git.get("commit"), "dirty": git.get("dirty")}
    mn = {**here, "max_new_tokens": T, "response": args.mn_response}
    if cc_source is not None:
        cc = {
            "run": "an earlier run (reused rows: not re-measured)",
            **{
                k: cc_source.get(k)
                for k in ("rows", "summary", "command", "created", "commit", "dirty", "machine")
            },
            "max_new_tokens": cc_source.get("max_new_tokens"),
        }
        if "note" in cc_source:
            cc["note"] = cc_source["note"]
        return {"re_measured": ["mnemoscope"], "mnemoscope": mn, "contextcite": cc}
    if args.no_contextcite:
        return {"re_measured": ["mnemoscope"], "mnemoscope": mn, "contextcite": None}
    return {
        "re_measured": ["mnemoscope", "contextcite"],
        "mnemoscope": mn,
        "contextcite": {**here, "max_new_tokens": T},
    }


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    res = main()
    brief = {k: res.get(k) for k in ("n_items", "mnemoscope", "contextcite", "paired", "cost")}
    print(json.dumps(brief, indent=2))
