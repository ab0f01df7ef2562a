"""The one results folder every batch path writes (local audit, endpoint audit, Ray, ``repcs score``).

* :class:`ResultsFile`: a JSONL file of one row per record id, resumable: the ids already in it
  (:attr:`done_ids`), appends that are fsynced before they count, and a torn last line (a write
  a crash interrupted) **cut before the first append**, so the next line never glues onto it
  and its record is redone.
* :class:`ResultsFolder`: ``results.jsonl`` (a :class:`ResultsFile`), ``errors.jsonl``
  (rewritten at the end of each run) and ``meta.json`` (the run's identity: a folder refuses
  results of another model, profile or settings unless ``overwrite``).
* :class:`EarlyStop`: a batch whose first records (8 by default) all fail for the same cause
  stops and raises :class:`EarlyStopError` naming the cause and the likely fix, instead of
  running to the end.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError

__all__ = [
    "RESULTS_FORMAT",
    "EarlyStop",
    "EarlyStopError",
    "ResultsFile",
    "ResultsFolder",
    "cause_key",
    "likely_fix",
]

RESULTS_FORMAT = "mnemoscope-audit-results/1"
_TAIL_WINDOW = 1 << 20


class ResultsFile:
    """A resumable JSONL file of ``{"id": ..., ...}`` rows (module doc)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._cut = False

    @property
    def done_ids(self) -> set[str]:
        """The ids of the complete rows (a torn last line is not counted: its record is redone)."""
        done: set[str] = set()
        if not self.path.is_file():
            return done
        with self.path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.endswith("\n"):
                    break  # torn last line
                try:
                    done.add(str(json.loads(line)["id"]))
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
        return done

    def cut_torn_tail(self) -> None:
        """Cut a last line without its newline (idempotent; a no-op on a clean or missing file)."""
        self._cut = True
        if not self.path.is_file():
            return
        with self.path.open("rb+") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            start = max(0, size - _TAIL_WINDOW)
            f.seek(start)
            tail = f.read()
            nl = tail.rfind(b"\n")
            if nl < 0 and start > 0:
                return  # a last line longer than the window: leave it (the reader skips it)
            f.truncate(start + nl + 1 if nl >= 0 else 0)
            f.flush()
            os.fsync(f.fileno())

    def append(self, lines: Iterable[str]) -> int:
        """Append complete lines (one JSON row each), fsynced; returns how many were written."""
        rows = [x.rstrip("\n") for x in lines]
        if not rows:
            return 0
        if not self._cut:
            self.cut_torn_tail()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(x + "\n" for x in rows).encode("utf-8")
        with self.path.open("ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return len(rows)


class ResultsFolder:
    """``results.jsonl`` + ``errors.jsonl`` + ``meta.json`` of one run (module doc).

    Args:
        out: the folder (created).
        identity: what makes two runs comparable (model, profile hash, settings); ``None``
            skips ``meta.json`` until :meth:`check_identity` is called (the Ray driver learns
            the identity from the first actor).
        overwrite: start afresh (removes results, errors and meta).
        extra_files: more files that belong to the run and go with ``overwrite``.
    """

    def __init__(
        self,
        out: str | Path,
        identity: dict[str, Any] | None = None,
        *,
        overwrite: bool = False,
        extra_files: Sequence[str] = (),
    ):
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.results = ResultsFile(self.out / "results.jsonl")
        self.errors_path = self.out / "errors.jsonl"
        self.meta_path = self.out / "meta.json"
        self._checked = False
        if overwrite:
            for name in ("results.jsonl", "errors.jsonl", "meta.json", *extra_files):
                (self.out / name).unlink(missing_ok=True)
        if identity is not None:
            self.check_identity(identity)
        self.results.cut_torn_tail()

    @property
    def done_ids(self) -> set[str]:
        return self.results.done_ids

    def check_identity(self, identity: dict[str, Any]) -> None:
        """Write ``meta.json`` for a new folder; refuse a folder holding another run's results.

        Raises:
            InputError: the folder's model, profile or settings differ.
        """
        from mnemoscope.io import atomic_write, canonical_json

        if self._checked:
            return
        meta = {"format": RESULTS_FORMAT, **identity}
        if self.meta_path.is_file():
            try:
                old = json.loads(self.meta_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise InputError(f"{self.meta_path} is not valid JSON ({e.msg}); use --overwrite") from e
            if canonical_json(old) != canonical_json(meta):
                diff = sorted(k for k in set(meta) | set(old) if old.get(k) != meta.get(k))
                raise InputError(
                    f"{self.out} holds results of another run (differs in {', '.join(diff)}); use another "
                    "--out or --overwrite",
                    field="out",
                )
        else:
            atomic_write(self.meta_path, json.dumps(meta, indent=1, default=str) + "\n")
        self._checked = True

    def append(self, lines: Iterable[str]) -> int:
        return self.results.append(lines)

    def write_errors(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rewrite ``errors.jsonl`` (this run's rejected records)."""
        from mnemoscope.io import atomic_write

        atomic_write(self.errors_path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in rows))


# -- stopping early ---------------------------------------------------------------------------------


class EarlyStopError(InputError):
    """The first records of a batch all failed for the same cause (see :class:`EarlyStop`)."""


_VOLATILE = re.compile(r"(?<!\w)'[^']*'(?!\w)|\"[^\"]*\"|\d+(\.\d+)?")


def cause_key(message: str, kind: str | None = None, status: int | None = None) -> str:
    """What "the same cause" means: the error class, the status and the message with record
    ids, quoted texts and numbers blanked (``record 17: ... 'Paris'`` ~ ``record 3: ... 'Rome'``)."""
    msg = re.sub(r"^record [^:]+: ", "", message.strip())
    msg = re.sub(r"\brecord \S+", "record #", msg)
    return f"{kind or ''}|{status or ''}|{_VOLATILE.sub('#', msg)}"


_FIXES: tuple[tuple[str, str], ...] = (
    (
        "shifted",
        "the echoed log-probs are shifted: pass `--chat-template default` (or the server model's own "
        "template, which begins with its BOS token)",
    ),
    (
        "do not match the server's own generation",
        "pass `--chat-template default` (or the served model's own chat template)",
    ),
    (
        "spell",
        "the answer's end-of-turn or special tokens differ from the template's: check --chat-template "
        "and --eos-token for the served model",
    ),
    (
        "merges with the prompt",
        "the prompt and the answer tokenize across their boundary: use the served model's chat template "
        "(--chat-template)",
    ),
    (
        "tokenizes differently",
        "the answer tokenizes differently after the two prompts: use the served model's chat template",
    ),
    ("TokenAlignmentError", "check --chat-template and --eos-token for the served model"),
    (
        "EndpointCapabilityError",
        "the server cannot teacher-force (no echo with log-probs); use llama-cpp-python's server "
        "(`python -m llama_cpp.server`)",
    ),
    ("EndpointError", "is the server up and serving the profile's model at --endpoint? (see its log)"),
    ("|413|", "the inputs exceed the caps: shorten them or raise --max-context-tokens / the server window"),
    ("ProfileError", "recalibrate the profile for this model"),
)


def likely_fix(key: str) -> str:
    """A likely fix for a :func:`cause_key` (or a generic hint)."""
    for needle, fix in _FIXES:
        if needle in key:
            return fix
    return "fix the cause above and run again (the records already done are kept)"


class EarlyStop:
    """Stops a batch whose first ``first`` attempted records all failed for the same cause.

    Feed every attempted record in order (:meth:`ok` / :meth:`failed`); :meth:`failed` raises
    :class:`EarlyStopError` once the first ``first`` attempts are all failures of one cause.
    After a success (or two causes) it never fires. ``first=0`` disables it.
    """

    def __init__(self, first: int = 8, *, what: str = "batch"):
        self.first = first
        self.what = what
        self.n = 0
        self.key: str | None = None
        self.example = ""
        self.live = first > 0

    def ok(self) -> None:
        self.n += 1
        self.live = False

    def failed(self, message: str, *, kind: str | None = None, status: int | None = None) -> None:
        if not self.live:
            return
        self.n += 1
        key = cause_key(message, kind, status)
        if self.key is None:
            self.key, self.example = key, message
        elif key != self.key:
            self.live = False
            return
        if self.n >= self.first:
            self.live = False
            raise EarlyStopError(
                f"stopped the {self.what} early: the first {self.n} records all failed with the same cause "
                f"({kind + ': ' if kind else ''}{self.example}); likely fix: {likely_fix(self.key)}"
            )
