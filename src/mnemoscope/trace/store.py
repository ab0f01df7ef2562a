"""Traces on disk: a folder written incrementally, safe to resume, loaded back identically.

Layout::

    traces/
      meta.json         format, kind ("pair" | "prompt"), model identity, settings
      index.jsonl       one line per finished record: {"id", "shard", "row"}
      errors.jsonl      one line per rejected record: {"line", "id", "field", "message"}
      shards/000000.npz arrays keyed "<row>/<field>", plus "<row>/__scalars__" (JSON text)

A shard is written to a temporary file, fsync'ed and renamed; only then are its ids
appended to ``index.jsonl``. A crash therefore loses at most the batch in flight, and a
re-run skips every id already in the index. ``np.load`` runs with ``allow_pickle=False``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mnemoscope.errors import TraceStoreError
from mnemoscope.io import atomic_savez, atomic_write_json
from mnemoscope.trace.types import CRMExtras, PairTrace, PromptTrace

__all__ = ["TraceSet", "TraceWriter", "load_answers", "load_traces", "save_traces", "stored_ids"]

FORMAT = 1
Kind = Literal["pair", "prompt", "crm_extras"]
_CLASSES: dict[str, type[Any]] = {"pair": PairTrace, "prompt": PromptTrace, "crm_extras": CRMExtras}


def _encode(trace: Any, row: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, Any] = {}
    for f in dataclasses.fields(trace):
        v = getattr(trace, f.name)
        if isinstance(v, np.ndarray):
            arrays[f"{row}/{f.name}"] = v
        elif isinstance(v, tuple):
            scalars[f.name] = list(v)
        else:
            scalars[f.name] = v
    arrays[f"{row}/__scalars__"] = np.array(json.dumps(scalars))
    return arrays, scalars


def _decode(cls: type[Any], data: Any, row: int) -> Any:
    scalars = json.loads(str(data[f"{row}/__scalars__"]))
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        key = f"{row}/{f.name}"
        if key in data.files:
            kwargs[f.name] = data[key]
        elif f.name in scalars:
            v = scalars[f.name]
            kwargs[f.name] = tuple(v) if isinstance(v, list) and "tuple" in str(f.type) else v
    return cls(**kwargs)


def _append_lines(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("a") as f:
        for r in rows:
            f.write(json.dumps(r, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line after a crash: that record is simply redone
    return rows


def stored_ids(folder: str | Path) -> set[str]:
    """The ids a trace folder already holds (empty when there is none): what a resumed run
    will not trace again."""
    f = Path(folder)
    if not (f / "meta.json").is_file():
        return set()
    return {str(r["id"]) for r in _read_jsonl(f / "index.jsonl") if "id" in r}


class TraceWriter:
    """Append traces to a folder, one shard per :meth:`write` call.

    Args:
        folder: output folder (created).
        kind: ``"pair"`` or ``"prompt"``.
        model: the model identity (``ModelInfo.to_dict()``).
        settings: everything that changes the traces (template, T, ...). Resuming with
            other settings or another model raises :class:`TraceStoreError` unless
            ``overwrite=True``, which starts the folder afresh.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        kind: Kind,
        model: dict[str, Any],
        settings: dict[str, Any],
        overwrite: bool = False,
    ):
        self.folder = Path(folder)
        self.kind = kind
        meta_path = self.folder / "meta.json"
        identity = {"fingerprint": model.get("fingerprint"), "spec": model.get("spec")}
        if meta_path.is_file() and not overwrite:
            try:
                old = json.loads(meta_path.read_text())
            except json.JSONDecodeError as e:
                raise TraceStoreError(f"{meta_path} is corrupt ({e}); use --overwrite to start again") from e
            old_identity = {
                "fingerprint": old.get("model", {}).get("fingerprint"),
                "spec": old.get("model", {}).get("spec"),
            }
            if (
                old.get("kind") != kind
                or old.get("settings") != _jsonable(settings)
                or old_identity != identity
            ):
                raise TraceStoreError(
                    f"{self.folder} holds traces made with other settings or another model; "
                    "pass another --out folder or --overwrite"
                )
        else:
            if overwrite and self.folder.exists():
                for name in ("index.jsonl", "errors.jsonl", "meta.json"):
                    (self.folder / name).unlink(missing_ok=True)
                for shard in (self.folder / "shards").glob("*.npz"):
                    shard.unlink()
            (self.folder / "shards").mkdir(parents=True, exist_ok=True)
            atomic_write_json(
                meta_path,
                {
                    "format": FORMAT,
                    "kind": kind,
                    "model": model,
                    "settings": _jsonable(settings),
                    "created": time.time(),
                },
            )
        (self.folder / "shards").mkdir(parents=True, exist_ok=True)
        self.done_ids: set[str] = stored_ids(self.folder)  # meta.json exists by now

    def write(self, traces: list[Any]) -> None:
        if not traces:
            return
        arrays: dict[str, np.ndarray] = {}
        for row, t in enumerate(traces):
            a, _ = _encode(t, row)
            arrays.update(a)
        name = f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}.npz"
        atomic_savez(self.folder / "shards" / name, arrays)
        ident = [getattr(t, "id", None) for t in traces]
        _append_lines(
            self.folder / "index.jsonl",
            (
                {"id": i if i is not None else f"{name}:{r}", "shard": name, "row": r}
                for r, i in enumerate(ident)
            ),
        )
        self.done_ids.update(str(i) for i in ident if i is not None)

    def write_errors(self, errors: Iterable[dict[str, Any]], *, replace: bool = False) -> None:
        """Record rejected inputs. ``replace=True`` makes errors.jsonl describe only this run
        (records that failed before are retried on resume, so old errors would be stale)."""
        rows = list(errors)
        path = self.folder / "errors.jsonl"
        if replace:
            path.unlink(missing_ok=True)
        if rows:
            _append_lines(path, rows)


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


@dataclasses.dataclass(frozen=True)
class TraceSet:
    """Traces loaded from a folder, in the order they were written, with their provenance."""

    meta: dict[str, Any]
    traces: list[Any]
    errors: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.traces)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.traces)


def load_traces(folder: str | Path) -> TraceSet:
    """Load every trace of a folder written by :class:`TraceWriter` (later duplicates of an id win)."""
    folder = Path(folder)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise TraceStoreError(f"{folder} is not a trace folder (no meta.json)")
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != FORMAT:
        raise TraceStoreError(
            f"{folder}: trace format {meta.get('format')} is not supported (expected {FORMAT})"
        )
    cls = _CLASSES[meta["kind"]]
    index = _read_jsonl(folder / "index.jsonl")
    by_shard: dict[str, list[tuple[int, int]]] = {}
    for pos, r in enumerate(index):
        by_shard.setdefault(r["shard"], []).append((pos, int(r["row"])))
    loaded: dict[int, Any] = {}
    for shard, rows in by_shard.items():
        path = folder / "shards" / shard
        if not path.is_file():
            raise TraceStoreError(f"{folder}: shard {shard} listed in index.jsonl is missing")
        with np.load(path, allow_pickle=False) as data:
            for pos, row in rows:
                loaded[pos] = _decode(cls, data, row)
    seen: dict[str, int] = {}
    ordered = [loaded[p] for p in sorted(loaded)]
    for i, t in enumerate(ordered):
        seen[str(getattr(t, "id", i))] = i
    traces = [ordered[i] for i in sorted(seen.values())]
    return TraceSet(meta=meta, traces=traces, errors=_read_jsonl(folder / "errors.jsonl"))


def load_answers(folder: str | Path, ids: Iterable[str] | None = None) -> dict[str, tuple[str, str | None]]:
    """``{id: (answer_with, answer_without)}`` of a pair folder's traces (of ``ids`` only, when
    given; later duplicates of an id win, as in :func:`load_traces`).

    Reads each row's scalar record only, never its arrays: what a calibration's draw needs after
    every round (:func:`~mnemoscope.audit.draw.draw_until`), without loading the hidden
    states and per-step statistics of every record traced so far.
    """
    folder = Path(folder)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise TraceStoreError(f"{folder} is not a trace folder (no meta.json)")
    meta = json.loads(meta_path.read_text())
    if meta.get("kind") != "pair":
        raise TraceStoreError(f"{folder} holds {meta.get('kind')!r} traces, not pairs: they have no answers")
    want = None if ids is None else {str(i) for i in ids}
    last: dict[str, tuple[str, int]] = {}  # id -> (shard, row) of its last index line
    for r in _read_jsonl(folder / "index.jsonl"):
        rid = str(r.get("id"))
        if want is None or rid in want:
            last[rid] = (str(r["shard"]), int(r["row"]))
    by_shard: dict[str, list[tuple[str, int]]] = {}
    for rid, (shard, row) in last.items():
        by_shard.setdefault(shard, []).append((rid, row))
    out: dict[str, tuple[str, str | None]] = {}
    for shard, rows in by_shard.items():
        path = folder / "shards" / shard
        if not path.is_file():
            raise TraceStoreError(f"{folder}: shard {shard} listed in index.jsonl is missing")
        with np.load(path, allow_pickle=False) as data:
            for rid, row in rows:
                sc = json.loads(str(data[f"{row}/__scalars__"]))
                out[rid] = (str(sc.get("answer_with") or ""), sc.get("answer_without"))
    return out


def save_traces(
    folder: str | Path,
    traces: list[Any],
    *,
    model: dict[str, Any],
    settings: dict[str, Any] | None = None,
    overwrite: bool = True,
) -> Path:
    """Write a list of traces (all of one kind) to a folder in one shard."""
    if not traces:
        raise TraceStoreError("no traces to save")
    kind: Kind = "pair" if isinstance(traces[0], PairTrace) else "prompt"
    w = TraceWriter(folder, kind=kind, model=model, settings=settings or {}, overwrite=overwrite)
    w.write(traces)
    return Path(folder)
