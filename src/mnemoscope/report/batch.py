"""A batch audit's results folder, read for people: the runs, counts by source, p_memory, every answer.

:func:`load_run` reads a results folder (``results.jsonl``, ``errors.jsonl``, ``meta.json`` as
written by ``mnemoscope audit --input FILE --out DIR``) tolerantly: a torn last line, a line
that is not JSON, a row without an id, an empty folder or rows of an older version (no
``memory_flag``, no ``p_memory``, no ``tokens``, no ``query``; a ``meta.json`` without
``runs``) are **listed as skipped or missing, never fatal**, so a report always renders and
says what it left out. The folder alone is enough: the rows carry their query and the digest
of their context, ``meta.json`` the runs (command, commit, profile, time). The verdict is read,
never re-decided: counts come from each row's ``source`` and ``memory_flag``.

:func:`run_payload` turns a run into the compact, column-wise JSON the HTML page embeds
(:mod:`mnemoscope.report.batch_html`); :func:`render_markdown` writes a short summary that fits
a pull-request comment.

Example:
    >>> import tempfile, json, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> row = {"id": "a", "source": "memory", "p_memory": 0.99, "memory_flag": True, "answer": "Paris"}
    >>> _ = (d / "results.jsonl").write_text(json.dumps(row) + "\\n" + '{"id": "b", "sour')
    >>> run = load_run(d)
    >>> run.counts, [s.reason for s in run.skipped]
    ({'memory': 1}, ['torn last line (the run was interrupted while writing it; a re-run redoes that record)'])
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mnemoscope.errors import InputError

__all__ = [
    "MAX_PHRASES",
    "PHRASE_SOURCES",
    "SOURCES",
    "TOKEN_SOURCES",
    "BatchRun",
    "Skipped",
    "load_run",
    "render_markdown",
    "run_payload",
    "write_report",
]

#: verdict sources in display order (an unknown source from a newer version is appended)
SOURCES: tuple[str, ...] = ("context", "memory", "mixed", "undetermined", "unsupported")
#: token sources in the page's index order (``query``: a word copied from the query, neither memory
#: nor context; an unknown source shows as neutral)
TOKEN_SOURCES: tuple[str, ...] = ("context", "memory", "neutral", "query")
#: an answer-bearing phrase's source (``evidence.answer_words.words[].grounded``) in the page's index order
PHRASE_SOURCES: tuple[str, ...] = ("context", "memory", "unsupported")
#: answer-bearing phrases kept per row (the page says how many more there were)
MAX_PHRASES = 8
#: longest phrase text and closed-book answer kept per row (characters; longer ones are cut with "…")
_MAX_PHRASE_CHARS = 80
_MAX_CLOSED_BOOK_CHARS = 300
N_BINS = 20
_EVIDENCE_ORDER = ("repcs_z", "tau", "closed_book_logprob", "context_token_fraction", "threshold")


@dataclass(frozen=True)
class Skipped:
    """A line of the folder that the report could not use, and why."""

    file: str
    line: int | None
    reason: str
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "id": self.id, "reason": self.reason}


@dataclass
class BatchRun:
    """One results folder, read (see :func:`load_run`)."""

    folder: Path
    meta: dict[str, Any]
    rows: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    skipped: list[Skipped]
    queries: dict[str, str] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    results_mtime: float | None = None
    #: ``meta.json``'s run records, oldest first (empty for a folder of an older version)
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        """Audited answers by verdict source (rows without a source count as ``"not recorded"``)."""
        c = Counter(str(r.get("source") or "not recorded") for r in self.rows)
        order = [s for s in SOURCES if s in c] + sorted(s for s in c if s not in SOURCES)
        return {s: c[s] for s in order}

    @property
    def n_flagged(self) -> int | None:
        """Rows whose rule raised the memory flag; ``None`` when no row records the flag."""
        flags = [r["memory_flag"] for r in self.rows if isinstance(r.get("memory_flag"), bool)]
        return sum(flags) if flags else None

    def query_of(self, row: Mapping[str, Any]) -> str | None:
        q = row.get("query")
        return q if isinstance(q, str) else self.queries.get(str(row.get("id")))


def _jsonl(path: Path) -> Iterator[tuple[int, Any, bool]]:
    """``(line number, parsed object or the JSON error, line ended with a newline)``."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            complete = raw.endswith(b"\n")
            try:
                yield lineno, json.loads(raw.decode("utf-8")), complete
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                yield lineno, e, complete


def _read_inputs(path: Path, skipped: list[Skipped]) -> dict[str, tuple[str, str | None]]:
    """``{id: (query, context digest or None)}`` of an audit's input file."""
    from mnemoscope.io import text_sha256

    out: dict[str, tuple[str, str | None]] = {}
    if not path.is_file():
        raise InputError(f"{path} does not exist", field="input")
    for lineno, obj, _ in _jsonl(path):
        if isinstance(obj, dict) and isinstance(obj.get("query"), str) and obj.get("id") is not None:
            ctx = obj.get("context")
            out[str(obj["id"])] = (obj["query"], text_sha256(ctx) if isinstance(ctx, str) else None)
        elif isinstance(obj, Exception):
            skipped.append(Skipped(path.name, lineno, f"input line is not valid JSON ({obj})"))
    return out


def _runs_of(meta: dict[str, Any], notes: list[str], skipped: list[Skipped]) -> list[dict[str, Any]]:
    """``meta.json``'s run records, and notes on what they do not tell."""
    runs = meta.get("runs")
    if runs is None:
        if meta:
            notes.append(
                "meta.json records no run (written by an older version): the command, commit and time of the "
                "audit are unknown; the time shown is results.jsonl's last modification"
            )
        return []
    if not isinstance(runs, list):
        skipped.append(Skipped("meta.json", None, "field 'runs' is not a list: the runs are unknown"))
        return []
    good = [r for r in runs if isinstance(r, dict)]
    if len(good) < len(runs):
        skipped.append(
            Skipped("meta.json", None, f"{len(runs) - len(good)} entries of 'runs' are not objects")
        )
    before = good[0].get("done_before") if good else None
    if isinstance(before, int) and before > 0:
        notes.append(
            f"{before} results were written before the first recorded run (by an older version): their "
            "command, commit and time are unknown"
        )
    return good


def load_run(folder: str | Path, *, input_path: str | Path | None = None) -> BatchRun:
    """Read a results folder for a report (module doc).

    Args:
        folder: the ``--out`` folder of a batch audit.
        input_path: the audit's ``--input`` file: results rows do not carry the query, so the
            report takes it from there (matched by id).

    Raises:
        InputError: the folder does not exist or is not a folder (everything inside it is
            tolerated and reported).
    """
    folder = Path(folder)
    if not folder.exists():
        raise InputError(f"no results folder at {folder}", field="folder")
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder (give the --out DIR of a batch audit)", field="folder")
    skipped: list[Skipped] = []
    notes: list[str] = []
    meta: dict[str, Any] = {}
    mp = folder / "meta.json"
    if mp.is_file():
        try:
            loaded = json.loads(mp.read_text(encoding="utf-8"))
            meta = loaded if isinstance(loaded, dict) else {}
            if not meta:
                skipped.append(Skipped("meta.json", None, "not a JSON object: provenance unknown"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            skipped.append(Skipped("meta.json", None, f"not valid JSON ({e}): provenance unknown"))
    else:
        notes.append("meta.json is missing: the model and profile of this run are unknown")
    rows: list[dict[str, Any]] = []
    missing: dict[str, int] = {}
    interned: dict[str, dict[str, Any]] = {}
    rp = folder / "results.jsonl"
    mtime = None
    if rp.is_file():
        mtime = rp.stat().st_mtime
        seen: set[str] = set()
        for lineno, obj, complete in _jsonl(rp):
            if isinstance(obj, Exception):
                reason = (
                    "torn last line (the run was interrupted while writing it; a re-run redoes that record)"
                    if not complete
                    else f"not valid JSON ({obj})"
                )
                skipped.append(Skipped("results.jsonl", lineno, reason))
            elif not isinstance(obj, dict):
                skipped.append(Skipped("results.jsonl", lineno, "not a JSON object"))
            elif not isinstance(obj.get("id"), (str, int)) or isinstance(obj.get("id"), bool):
                skipped.append(Skipped("results.jsonl", lineno, "no id (field 'id')"))
            elif str(obj["id"]) in seen:
                skipped.append(
                    Skipped("results.jsonl", lineno, "duplicate id (the first row is kept)", str(obj["id"]))
                )
            else:
                seen.add(str(obj["id"]))
                for name, ok in _CHECKS:
                    if not ok(obj.get(name)):
                        missing[name] = missing.get(name, 0) + 1
                rows.append(_slim(obj, lineno, interned))
    else:
        notes.append(f"no results.jsonl in {folder}: nothing was audited (yet)")
    errors: list[dict[str, Any]] = []
    ep = folder / "errors.jsonl"
    if ep.is_file():
        for lineno, obj, complete in _jsonl(ep):
            if isinstance(obj, dict):
                errors.append(obj)
            else:
                reason = "torn last line" if not complete else "not a JSON object"
                skipped.append(Skipped("errors.jsonl", lineno, reason))
    runs = _runs_of(meta, notes, skipped)
    queries: dict[str, str] = {}
    no_query = [r["id"] for r in rows if "query" not in r]
    if input_path is not None:
        inputs = _read_inputs(Path(input_path), skipped)
        queries = {i: q for i, (q, _) in inputs.items()}
        name = Path(input_path).name
        differ = [
            r["id"]
            for r in rows
            if r["id"] in inputs
            and (
                ("query" in r and r["query"] != inputs[r["id"]][0])
                or (r.get("context_sha256") and inputs[r["id"]][1] not in (None, r["context_sha256"]))
            )
        ]
        if differ:
            notes.append(
                f"{len(differ)} records of {name} differ from the ones audited (query or context_sha256; e.g. id "
                f"{differ[0]}): the table shows the audited queries"
            )
        unknown = [i for i in no_query if i not in inputs]
        if unknown:
            notes.append(
                f"{len(unknown)} results store no query and have no record in {name} (e.g. id {unknown[0]})"
            )
    elif no_query:
        notes.append(
            f"{len(no_query)} of {len(rows)} results do not store their query (written by an older version): "
            "pass --input FILE (the audit's input) to show them"
        )
    return BatchRun(
        folder=folder,
        meta=meta,
        rows=rows,
        errors=errors,
        skipped=skipped,
        queries=queries,
        missing=missing,
        notes=notes,
        results_mtime=mtime,
        runs=runs,
    )


_CHECKS: tuple[tuple[str, Any], ...] = (
    ("source", lambda v: isinstance(v, str)),
    ("p_memory", lambda v: _finite(v) is not None),
    ("memory_flag", lambda v: isinstance(v, bool)),
    ("tokens", lambda v: isinstance(v, list)),
    ("guarantee", lambda v: isinstance(v, dict)),
)


#: evidence fields that are not numbers (kept apart: the phrases and the closed-book answer), even when null
_NOT_COLUMNS = frozenset({"answer_words", "closed_book_answer", "signals", "signals_used"})


def _slim(obj: dict[str, Any], lineno: int, interned: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the report uses of a results row (the rest, e.g. CRM's trajectories, is dropped so that
    100,000 rows fit in memory); tokens compacted, identical guarantees shared."""
    g = obj.get("guarantee")
    if isinstance(g, dict):
        g = interned.setdefault(json.dumps(g, sort_keys=True), g)
    ev = obj.get("evidence")
    notes = obj.get("notes")
    slim = {
        "id": str(obj["id"]),
        "source": obj.get("source"),
        "p_memory": obj.get("p_memory"),
        "memory_flag": obj.get("memory_flag"),
        "answer": obj.get("answer"),
        "summary": obj.get("summary"),
        "rule": obj.get("rule"),
        "evidence": {
            k: v for k, v in ev.items() if (v is None or _finite(v) is not None) and k not in _NOT_COLUMNS
        }
        if isinstance(ev, dict)
        else {},
        "guarantee": g,
        "notes": [str(n) for n in notes if n] if isinstance(notes, list) else [],
        "_tokens": _tokens(obj),
        "_line": lineno,
    }
    if isinstance(ev, dict):
        phrases = _phrases(ev.get("answer_words"))
        if phrases is not None:
            slim["_phrases"] = phrases
        cb = ev.get("closed_book_answer")
        if isinstance(cb, str):
            # a memory answer is often word for word the closed-book one: ``True`` says so in 4 bytes
            same = isinstance(obj.get("answer"), str) and cb.strip() == obj["answer"].strip()
            slim["_closed_book"] = True if same else _cut(cb, _MAX_CLOSED_BOOK_CHARS)
    for k in ("query", "context", "context_sha256"):
        if isinstance(obj.get(k), str):
            slim[k] = obj[k]
    return slim


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


_PHRASE_INDEX = {s: i for i, s in enumerate(PHRASE_SOURCES)}


def _phrases(aw: Any) -> tuple[list[list[Any]], int] | None:
    """``(phrases, how many the answer has)`` of ``evidence.answer_words``, at most
    :data:`MAX_PHRASES`, each ``[text, source index (PHRASE_SOURCES; None: unknown), passage
    (0-based) or None, passage_effect (nats, 1 digit: as shown) or None]``; ``None`` when the row records no
    answer-bearing words (older rows, profiles deciding on all words). The passage and its effect
    are kept only when the context had several passages (a plain context is one passage: its
    number says nothing), as the CLI prints them."""
    if not isinstance(aw, dict) or not isinstance(aw.get("words"), list):
        return None
    words = [w for w in aw["words"] if isinstance(w, dict)]
    n_passages = aw.get("n_passages")
    several = isinstance(n_passages, int) and not isinstance(n_passages, bool) and n_passages > 1
    out = []
    for w in words[:MAX_PHRASES]:
        src = w.get("grounded") or {"added": "unsupported"}.get(str(w.get("source")), w.get("source"))
        passage = w.get("passage")
        if not several or isinstance(passage, bool) or not isinstance(passage, int):
            passage = None
        out.append(
            [
                _cut(str(w.get("text", "")), _MAX_PHRASE_CHARS),
                _PHRASE_INDEX.get(str(src)),
                passage,
                None if passage is None else _r(w.get("passage_effect"), 1),
            ]
        )
    return out, len(words)


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _r(x: Any, digits: int = 4) -> float | None:
    v = _finite(x)
    return None if v is None else round(v, digits)


def _memory_threshold(rows: Sequence[Mapping[str, Any]]) -> tuple[float | None, str]:
    """The p_memory threshold the run's rule states (the combined rule's conformal threshold),
    read from the rows' guarantee; ``None`` with the reason when the rule's threshold is not on
    p_memory or was not recorded."""
    seen = Counter(
        (str(r.get("rule")), _finite((r.get("guarantee") or {}).get("threshold")))
        for r in rows
        if isinstance(r.get("guarantee"), dict)
    )
    if not seen:
        return None, "no guarantee recorded in the results"
    (rule, thr), _ = seen.most_common(1)[0]
    if rule != "combined":
        return None, f"the rule {rule!r} states its threshold on another score, not on p_memory"
    if thr is None:
        return None, "the guarantee records no threshold"
    return thr, "the combined rule's conformal threshold on p_memory (from the guarantee)"


def _histogram(rows: Sequence[Mapping[str, Any]], sources: Sequence[str]) -> dict[str, Any]:
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    out: dict[str, list[int]] = {}
    for s in sources:
        vals = [v for r in rows if r.get("source") == s and (v := _finite(r.get("p_memory"))) is not None]
        out[s] = (
            np.histogram(np.clip(vals, 0.0, 1.0), bins=edges)[0].astype(int).tolist()
            if vals
            else [0] * N_BINS
        )
    return {"edges": [round(float(e), 4) for e in edges], "counts": out}


def _tokens(row: Mapping[str, Any]) -> list[list[Any]] | None:
    """Compact tokens ``[text, source index, pmi, kl, logp_with]`` (``logp_without = logp_with - pmi``)."""
    toks = row.get("tokens")
    if not isinstance(toks, list):
        spans = row.get("spans")
        if isinstance(spans, list):  # an older row with spans only: one piece per span
            toks = [
                {"text": s.get("text", ""), "source": s.get("source"), "pmi": s.get("pmi")}
                for s in spans
                if isinstance(s, dict)
            ]
        else:
            return None
    out = []
    for t in toks:
        if not isinstance(t, dict):
            continue
        src = t.get("source")
        out.append(
            [
                str(t.get("text", "")),
                _TOKEN_INDEX.get(str(src), 2),
                _r3(t.get("pmi")),
                _r3(t.get("kl")),
                _r3(t.get("logp_with")),
            ]
        )
    return out


_TOKEN_INDEX = {s: i for i, s in enumerate(TOKEN_SOURCES)}


def _r3(x: Any) -> float | int | None:
    """:func:`_r` to 3 digits, fast (called for every number of every token)."""
    if type(x) is float:
        return round(x, 3) if math.isfinite(x) else None
    return x if type(x) is int else None


def run_payload(
    run: BatchRun,
    *,
    profile_card: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    max_errors: int = 1000,
) -> dict[str, Any]:
    r"""The compact JSON the HTML report embeds (column-wise rows, deduplicated guarantees).

    ``rows``: ``[id, query or None, source index, p_memory (4 digits) or None, memory_flag or
    None]``; ``detail`` (same order): ``[answer, summary, evidence index list, guarantee index,
    tokens, notes, results.jsonl line, context or None, context digest or None, answer-bearing
    phrases (see :func:`_phrases`) or None, how many phrases the answer has or None, the closed-book
    answer (``True``: the same as the answer) or None]``, each as a JSON string (parsed by the page on demand; trailing ``None``\ s are
    left out, so a row without phrases costs nothing); ``phrase_sources``: the phrases' source
    names by index; ``runs``: ``meta.json``'s run records.
    """
    sources = list(run.counts)
    guarantees: list[dict[str, Any]] = []
    g_index: dict[int, int] = {}
    ev_keys: list[str] = []
    rows: list[list[Any]] = []
    detail: list[list[Any]] = []
    for r in run.rows:
        g = r.get("guarantee")
        gi = None
        if isinstance(g, dict):
            key = id(g)  # load_run shares identical guarantees (one object each)
            if key not in g_index:
                g_index[key] = len(guarantees)
                guarantees.append(g)
            gi = g_index[key]
        ev: dict[str, Any] = r["evidence"]
        for k in ev:
            if k not in ev_keys:
                ev_keys.append(k)
        flag = r.get("memory_flag")
        rows.append(
            [
                r["id"],
                run.query_of(r),
                sources.index(str(r.get("source") or "not recorded")),
                _r(r.get("p_memory")),
                flag if isinstance(flag, bool) else None,
            ]
        )
        detail.append(
            [
                str(r.get("answer", "")) if r.get("answer") is not None else None,
                r.get("summary") if isinstance(r.get("summary"), str) else None,
                [_r(ev.get(k)) for k in ev_keys],
                gi,
                r["_tokens"],
                r["notes"],
                r.get("_line"),
                r.get("context"),
                r.get("context_sha256"),
                *r.get("_phrases", (None, None)),
                r.get("_closed_book"),
            ]
        )
        while len(detail[-1]) > 9 and detail[-1][-1] is None:
            detail[-1].pop()
    ev_keys_sorted = ev_keys  # evidence columns in first-seen order (rows may have fewer: padded)
    for d in detail:
        d[2] = d[2] + [None] * (len(ev_keys_sorted) - len(d[2]))
    threshold, threshold_note = _memory_threshold(run.rows)
    return {
        "format": "mnemoscope-batch-report/1",
        "folder": str(run.folder),
        "meta": run.meta,
        "provenance": dict(provenance or {}),
        "results_mtime": run.results_mtime,
        "runs": run.runs,
        "profile": dict(profile_card) if profile_card else None,
        "sources": sources,
        "counts": run.counts,
        "n": len(run.rows),
        "flagged": run.n_flagged,
        "missing": run.missing,
        "threshold": threshold,
        "threshold_note": threshold_note,
        "hist": _histogram(run.rows, sources),
        "evidence_keys": ev_keys_sorted,
        "phrase_sources": list(PHRASE_SOURCES),
        "guarantees": guarantees,
        "rows": rows,
        # one JSON string per answer: the page parses an answer's detail only when it is opened
        "detail": [json.dumps(d, ensure_ascii=False, separators=(",", ":"), allow_nan=False) for d in detail],
        "errors": run.errors[:max_errors],
        "n_errors": len(run.errors),
        "skipped": [s.to_dict() for s in run.skipped],
        "notes": list(run.notes),
    }


def _md_cell(text: Any, limit: int = 80) -> str:
    s = " ".join(str(text).split())
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    for a, b in (
        ("&", "&amp;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ("|", "\\|"),
        ("`", "\\`"),
        ("*", "\\*"),
        ("_", "\\_"),
    ):
        s = s.replace(a, b)
    return s


def render_markdown(run: BatchRun, *, top: int = 10) -> str:
    """A short Markdown summary of a run that fits a pull-request comment.

    Counts by source, the flagged count, the p_memory quartiles, the ``top`` answers with the
    highest p_memory among the flagged ones, errors and skipped lines (all cells escaped).
    """
    m = run.meta.get("model") or {}
    lines = [f"### mnemoscope audit: {len(run.rows)} answers", ""]
    who = []
    if m:
        who.append(f"model **{_md_cell(m.get('name') or m.get('spec'))}**")
    if run.meta.get("profile_hash"):
        who.append(f"profile `{str(run.meta['profile_hash'])[:12]}`")
    rule = (run.meta.get("settings") or {}).get("rule")
    if rule:
        who.append(f"rule `{_md_cell(rule)}`")
    if who:
        lines += [", ".join(who), ""]
    from mnemoscope.report.batch_html import describe_run

    for i, r in enumerate(run.runs, 1):
        lines.append(f"- run {i}: {_md_cell(describe_run(r), 300)}")
    if run.runs:
        lines.append("")
    n = len(run.rows) or 1
    lines += ["| source | answers | share |", "|---|---:|---:|"]
    for s, c in run.counts.items():
        lines.append(f"| {_md_cell(s)} | {c} | {100 * c / n:.1f}% |")
    flagged = run.n_flagged
    lines.append("")
    lines.append(
        f"- **Flagged as memory:** {flagged} of {len(run.rows)}"
        if flagged is not None
        else "- **Flagged as memory:** not recorded (results of an older version without `memory_flag`)"
    )
    ps = [v for r in run.rows if (v := _finite(r.get("p_memory"))) is not None]
    if ps:
        q = np.quantile(ps, [0.25, 0.5, 0.75])
        lines.append(f"- **p_memory:** quartiles {q[0]:.3f} / {q[1]:.3f} / {q[2]:.3f} ({len(ps)} answers)")
    flagged_rows = sorted(
        (r for r in run.rows if r.get("memory_flag") is True),
        key=lambda r: -(_finite(r.get("p_memory")) or 0.0),
    )[:top]
    if flagged_rows:
        lines += ["", f"Flagged answers (top {len(flagged_rows)} by p_memory):", ""]
        lines += ["| id | query | p_memory |", "|---|---|---:|"]
        for r in flagged_rows:
            p = _finite(r.get("p_memory"))
            q_text = run.query_of(r)
            lines.append(
                f"| {_md_cell(r['id'], 40)} | {_md_cell(q_text) if q_text else '(not recorded)'} "
                f"| {'n/a' if p is None else f'{p:.3f}'} |"
            )
    tail = list(run.notes)
    if run.errors:
        tail.append(f"{len(run.errors)} records could not be audited (errors.jsonl)")
    if run.skipped:
        tail.append(f"{len(run.skipped)} lines skipped ({_md_cell(run.skipped[0].reason, 100)}, ...)")
    for k, v in run.missing.items():
        tail.append(f"{v} results lack `{k}` (an older version)")
    if tail:
        lines += ["", "_" + "; ".join(tail) + "._"]
    return "\n".join(lines) + "\n"


def write_report(
    run: BatchRun,
    out: str | Path,
    *,
    fmt: str = "html",
    profile_card: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    compress_over: int = 1_000_000,
) -> Path:
    """Write the HTML page (``fmt="html"``) or the Markdown summary (``"md"``) of a run to ``out``."""
    from mnemoscope.report.batch_html import render_html

    out = Path(out)
    if fmt == "md":
        text = render_markdown(run)
    elif fmt == "html":
        payload = run_payload(run, profile_card=profile_card, provenance=provenance)
        text = render_html(payload, compress_over=compress_over)
    else:
        raise InputError(f"format must be html or md, got {fmt!r}", field="format")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out
