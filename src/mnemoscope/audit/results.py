"""The one results folder every batch path writes (local audit, endpoint audit, Ray, ``repcs score``).

* :class:`ResultsFile`: a JSONL file of one row per record id, resumable: the ids already in it
  (:attr:`done_ids`), appends that are fsynced before they count, and a torn last line (a write
  a crash interrupted) **cut before the first append**, so the next line never glues onto it
  and its record is redone.
* :class:`ResultsFolder`: ``results.jsonl`` (a :class:`ResultsFile`), ``errors.jsonl``
  (rewritten at the end of each run) and ``meta.json``: the folder's identity (a folder refuses
  results of another model, profile or settings unless ``overwrite``) and ``runs``, one record
  per run that wrote into it (command, git commit, mnemoscope version, profile path and hash,
  start and end time, rows appended), so a folder explains itself without its input file or
  the shell history. A resumed run appends its record; it never rewrites an earlier one.
* :func:`row_fields`: what each results row records of its request besides the verdict: the
  query and the SHA-256 of the context (the context itself only when asked: it can be large and
  private; the digest still tells whether a context given later is the one audited).
* :class:`EarlyStop`: a batch whose first records (8 by default) all fail for the same cause
  stops and raises :class:`EarlyStopError` naming the cause and the likely fix, instead of
  running to the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
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
    "context_digest",
    "likely_fix",
    "row_fields",
    "run_record",
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
        """The ids of the complete rows (a torn last line is not counted: its record is redone).

        Raises:
            InputError: a complete line that is not a JSON object with an ``id``, naming the file
                and the line (a resumed run would otherwise redo that record silently and leave
                the bad line in the folder).
        """
        done: set[str] = set()
        if not self.path.is_file():
            return done
        with self.path.open(encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if not line.endswith("\n"):
                    break  # torn last line
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(
                        f"{self.path} line {lineno} is not valid JSON ({e.msg}): fix or delete that line "
                        "(its record is then redone), or start afresh with --overwrite",
                        field="out",
                    ) from e
                if not isinstance(row, dict) or not isinstance(row.get("id"), (str, int)):
                    raise InputError(
                        f"{self.path} line {lineno} is not a results row (a JSON object with an 'id'): fix "
                        "or delete that line, or start afresh with --overwrite",
                        field="out",
                    )
                done.add(str(row["id"]))
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


def context_digest(context: str) -> str:
    """``sha256:<hex>`` of the context's UTF-8 bytes: what a results row keeps of the context.

    Example:
        >>> context_digest("Paris is the capital of France.")[:19]
        'sha256:557be7eca214'
    """
    from mnemoscope.io import text_sha256

    return text_sha256(context)


def row_fields(request: Any, *, store_context: bool = False) -> dict[str, Any]:
    """What a results row records of its request besides the verdict: ``query``,
    ``context_sha256`` (:func:`context_digest`) and, with ``store_context``, ``context`` itself.

    The context is not stored by default: it can be far longer than the answer (up to the input
    cap, 2,048 tokens in process, against T answer tokens) and may be private (a customer's
    document), while the digest is enough to tell whether a context given later is the one audited.
    """
    out: dict[str, Any] = {"query": request.query, "context_sha256": context_digest(request.context)}
    if store_context:
        out["context"] = request.context
    return out


def run_record(command: Sequence[str] | None = None, **facts: Any) -> dict[str, Any]:
    """The record of one run that writes into a results folder (``meta.json``'s ``runs``).

    ``command``: the command line (default: ``sys.argv``, see :func:`mnemoscope.provenance.provenance`);
    ``facts``: what else this run knows of itself (e.g. ``profile={"path", "hash"}``).
    ``ended``, ``appended`` and ``outcome`` are filled in by :meth:`ResultsFolder.end_run`.
    """
    from mnemoscope.provenance import provenance

    p = provenance(command)
    return {
        "started": p["created"],
        "ended": None,
        "command": p["command"],
        "git_commit": p["git_commit"],
        "git_dirty": p["git_dirty"],
        "mnemoscope": p["mnemoscope"],
        "cwd": p["cwd"],
        **facts,
    }


#: meta.json keys that are not part of the identity compared between runs
_NOT_IDENTITY = ("runs",)


class ResultsFolder:
    """``results.jsonl`` + ``errors.jsonl`` + ``meta.json`` of one or more runs (module doc).

    ``meta.json`` is ``{"format", **identity, "runs": [run record, ...]}``. The identity is
    compared on every run (``runs`` is not); each run appends its record
    (:func:`run_record`) when its identity is checked and completes it in :meth:`end_run`.

    Args:
        out: the folder (created).
        identity: what makes two runs comparable (model, profile hash, settings); ``None``
            skips ``meta.json`` until :meth:`check_identity` is called (the Ray driver learns
            the identity from the first actor). An entry ``"run"`` (a dict) is not identity but
            facts of this run only (e.g. the profile's path: the same profile elsewhere is the
            same profile): it goes into this run's record.
        overwrite: start afresh (removes results, errors and meta).
        extra_files: more files that belong to the run and go with ``overwrite``.
        command: this run's command line for its record (default: ``sys.argv``).
    """

    def __init__(
        self,
        out: str | Path,
        identity: dict[str, Any] | None = None,
        *,
        overwrite: bool = False,
        extra_files: Sequence[str] = (),
        command: Sequence[str] | None = None,
    ):
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.results = ResultsFile(self.out / "results.jsonl")
        self.errors_path = self.out / "errors.jsonl"
        self.meta_path = self.out / "meta.json"
        self.command = list(command) if command is not None else None
        self._checked = False
        self._run_index: int | None = None
        self._appended = 0
        self._done: set[str] | None = None
        if overwrite:
            for name in ("results.jsonl", "errors.jsonl", "meta.json", *extra_files):
                (self.out / name).unlink(missing_ok=True)
        if identity is not None:
            self._done = self.results.done_ids  # a corrupt line refuses the run before it is recorded
            self.check_identity(identity)
        self.results.cut_torn_tail()

    @property
    def done_ids(self) -> set[str]:
        """The ids already in ``results.jsonl`` (read once; raises on a corrupt line, see :class:`ResultsFile`)."""
        if self._done is None or self._appended:
            self._done = self.results.done_ids
        return set(self._done)

    def read_meta(self) -> dict[str, Any] | None:
        """``meta.json`` as written (``None`` when there is none).

        Raises:
            InputError: it is not a JSON object (names the file).
        """
        if not self.meta_path.is_file():
            return None
        try:
            old = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise InputError(
                f"{self.meta_path} is not valid JSON ({e.msg}, line {e.lineno}); use --overwrite", field="out"
            ) from e
        if not isinstance(old, dict):
            raise InputError(f"{self.meta_path} is not a JSON object; use --overwrite", field="out")
        return old

    def check_identity(self, identity: dict[str, Any]) -> None:
        """Write ``meta.json`` for a new folder; refuse a folder holding another run's results;
        append this run's record to ``runs`` (once per folder object).

        Raises:
            InputError: the folder's model, profile or settings differ, or meta.json is unreadable.
        """
        if self._checked:
            return
        identity = dict(identity)
        facts = identity.pop("run", None) or {}
        meta = {"format": RESULTS_FORMAT, **identity}
        old = self.read_meta()
        runs: list[dict[str, Any]] = []
        if old is not None:
            from mnemoscope.io import canonical_json

            old_identity = {k: v for k, v in old.items() if k not in _NOT_IDENTITY}
            if canonical_json(old_identity) != canonical_json(meta):
                diff = sorted(k for k in set(meta) | set(old_identity) if old_identity.get(k) != meta.get(k))
                raise InputError(
                    f"{self.out} holds results of another run (differs in {', '.join(diff)}); use another "
                    "--out or --overwrite",
                    field="out",
                )
            prior = old.get("runs")
            runs = [r for r in prior if isinstance(r, dict)] if isinstance(prior, list) else []
        record = run_record(self.command, **facts)
        record["done_before"] = len(self.done_ids)
        self._run_index = len(runs)
        self._write_meta({**meta, "runs": [*runs, record]})
        self._checked = True

    def _write_meta(self, meta: dict[str, Any]) -> None:
        from mnemoscope.io import atomic_write

        atomic_write(self.meta_path, json.dumps(meta, indent=1, default=str, ensure_ascii=False) + "\n")

    def append(self, lines: Iterable[str]) -> int:
        n = self.results.append(lines)
        self._appended += n
        return n

    def end_run(self, errors: Sequence[dict[str, Any]], *, outcome: str | None = "finished") -> None:
        """The end of a run: rewrite ``errors.jsonl`` (this run's rejected records) and complete
        the run's record in ``meta.json`` (``ended``, ``appended`` rows, ``errors``, ``outcome``:
        ``"finished"``, what stopped it, or ``None`` when the caller did not say)."""
        from mnemoscope.io import atomic_write

        atomic_write(self.errors_path, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in errors))
        if self._run_index is None:
            return  # no identity was checked: no run record (nothing was audited)
        meta = self.read_meta()
        runs = meta.get("runs") if meta else None
        if (
            not isinstance(runs, list)
            or len(runs) <= self._run_index
            or not isinstance(runs[self._run_index], dict)
        ):
            return  # meta.json was replaced under this run (e.g. an --overwrite elsewhere): leave it
        runs[self._run_index].update(
            ended=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            appended=self._appended,
            errors=len(errors),
            outcome=outcome,
        )
        self._write_meta(meta)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def recording(
        self,
        errors: Sequence[dict[str, Any]],
        *,
        stopped_by: type[BaseException] | tuple[type[BaseException], ...],
    ) -> Iterator[None]:
        """The run's body: on leaving it, :meth:`end_run` with ``errors`` (read then, so the body may
        still append to them) and the outcome: ``"finished"``, ``"stopped: <error>"`` for an
        exception of ``stopped_by`` (re-raised), else ``"interrupted"``."""
        outcome = "interrupted"
        try:
            yield
            outcome = "finished"
        except stopped_by as e:
            outcome = f"stopped: {type(e).__name__}: {e}"
            raise
        finally:
            self.end_run(errors, outcome=outcome)

    def write_errors(self, rows: Sequence[dict[str, Any]]) -> None:
        """Rewrite ``errors.jsonl`` at the end of a run: :meth:`end_run` with the outcome not recorded."""
        self.end_run(rows, outcome=None)


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
