"""Label verification: does the model being calibrated really answer each item the way its label says?

The one place a calibration label is checked against a model's own answers (ground truth, so it
lives in bench/; the pipelines call it). ``mnemoscope
calibrate`` (in process and ``--endpoint``) and ``mnemoscope bench verify`` call
:func:`verify_labels` on the closed-book answer (the no-context prompt of the same layout) and
the open-book answer (with the context) of every item, both taken from the traces the
calibration fits on (traced once, reused).

Rules (answer or alias as a whole word, :func:`mnemoscope.bench.reliance.answer_matches`):

* a **memory** item (label 1) is kept iff the model answers it correctly closed-book *and*
  with the context;
* a **clean** item (label 0) is kept iff the model does *not* answer it closed-book and does
  answer it with the context;
* a **knowledge-conflict** item (``kind == "conflict"``, or any item with a ``context_answer``):
  the context states a counterfactual ``context_answer``, ``answer`` is what the model is
  expected to know. Labelled by the answer the model gives *with* the context: the known one
  only = memory (1), the context's only = clean (0) unless the model gives the context's answer
  closed-book too (then following the context and a mistaken memory cannot be told apart:
  dropped, as a clean item answered closed-book is); neither or both = dropped.
* a **real** item (``kind == "real"``: a real passage and question, e.g. SQuAD's,
  :mod:`mnemoscope.bench.public_data`; no given label) is labelled by the model's answers:
  correct closed-book *and* with the context = memory (1); not correct closed-book, correct with
  the context = clean (0); correct closed-book only, or neither = dropped.

Dropped items are counted per kind with the reason. ``labels="given"`` keeps every item with
its given label (for users who bring labels verified on this model).

Example:
    >>> items = [{"id": "a", "kind": "memorized", "label": 1, "answer": "Paris"},
    ...          {"id": "b", "kind": "clean", "label": 0, "answer": "Zorblat"}]
    >>> chk = verify_labels(items, {"a": ("Paris.", "Paris"), "b": ("Zorblat", "It is Zorblat")})
    >>> [(d.id, d.label, d.reason) for d in chk.decisions]
    [('a', 1, 'kept'), ('b', None, 'answered closed-book')]
    >>> chk.counts["clean"]
    {'total': 1, 'kept': 0, 'dropped': 1, 'memory': 0, 'context': 0}

A real item (no label of its own):
    >>> real = [{"id": f"r{i}", "kind": "real", "label": None, "answer": "1858"} for i in range(3)]
    >>> chk = verify_labels(real, {"r0": ("In 1858.", "1858"), "r1": ("In 1858.", "1850"),
    ...                            "r2": ("In 1850.", "1858")})
    >>> [(d.id, d.label, d.reason) for d in chk.decisions]
    [('r0', 1, 'kept'), ('r1', 0, 'kept'), ('r2', None, 'answered closed-book only')]
    >>> chk.counts["real"]
    {'total': 3, 'kept': 2, 'dropped': 1, 'memory': 1, 'context': 1}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from mnemoscope.errors import InputError

__all__ = [
    "LABEL_RULE",
    "LabelCheck",
    "LabelDecision",
    "LabelMode",
    "check_item",
    "check_labelled",
    "check_verifiable",
    "gold_answers",
    "item_fields",
    "verify_labels",
]

LabelMode = Literal["verify", "given"]

LABEL_RULE = (
    "memory kept iff answered correctly closed-book and with the context; clean kept iff not answered "
    "closed-book and answered with the context; conflict labelled by the answer given with the context "
    "(the known answer = memory, the context's = clean unless also given closed-book, neither or both = dropped); answer or alias as a "
    "whole word, case-insensitive; a real item (kind real) = memory if answered correctly closed-book and with "
    "the context, clean if only with the context, else dropped"
)


@dataclass(frozen=True)
class LabelDecision:
    """The verification of one item: ``label`` is the verified label (``None`` = dropped)."""

    id: str
    kind: str
    given: int | None
    label: int | None
    reason: str
    closed_book_correct: bool | None = None
    open_book_correct: bool | None = None
    open_book_context_answer: bool | None = None

    @property
    def keep(self) -> bool:
        """Kept for calibration: a verified label, or an unlabelled item under ``labels="given"``."""
        return self.label is not None or self.reason == "kept (given)"

    @property
    def truth(self) -> str | None:
        """Where the answer comes from, for the three-way label: ``memory``, ``context`` or ``None``."""
        return None if self.label is None else ("memory" if self.label == 1 else "context")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LabelCheck:
    """Every item's :class:`LabelDecision` and the counts per kind."""

    mode: LabelMode
    decisions: list[LabelDecision] = field(default_factory=list)

    @property
    def kept(self) -> list[LabelDecision]:
        return [d for d in self.decisions if d.keep]

    @property
    def counts(self) -> dict[str, dict[str, int]]:
        """``kind -> {total, kept, dropped, memory, context}`` (memory/context: kept, by verified label)."""
        out: dict[str, dict[str, int]] = {}
        for d in self.decisions:
            c = out.setdefault(d.kind, {"total": 0, "kept": 0, "dropped": 0, "memory": 0, "context": 0})
            c["total"] += 1
            if not d.keep:
                c["dropped"] += 1
                continue
            c["kept"] += 1
            if d.label is not None:
                c["memory" if d.label == 1 else "context"] += 1
        return dict(sorted(out.items()))

    @property
    def reasons(self) -> dict[str, dict[str, int]]:
        """``kind -> reason -> count`` of the dropped items."""
        out: dict[str, dict[str, int]] = {}
        for d in self.decisions:
            if not d.keep:
                r = out.setdefault(d.kind, {})
                r[d.reason] = r.get(d.reason, 0) + 1
        return out

    def n_class(self) -> dict[str, int]:
        """Kept items per verified class."""
        kept = self.kept
        return {"memory": sum(d.label == 1 for d in kept), "context": sum(d.label == 0 for d in kept)}

    def summary(self) -> dict[str, Any]:
        """What a profile records about its labels."""
        return {
            "mode": self.mode,
            "rule": LABEL_RULE if self.mode == "verify" else "labels as given (not checked on this model)",
            "n_items": len(self.decisions),
            "n_kept": len(self.kept),
            "n_per_class": self.n_class(),
            "by_kind": self.counts,
            "dropped_reasons": self.reasons,
        }

    def describe(self) -> str:
        """One line per kind: ``kind: kept/total (reasons)``."""
        parts = []
        reasons = self.reasons
        for kind, c in self.counts.items():
            why = ", ".join(f"{n} {r}" for r, n in sorted(reasons.get(kind, {}).items()))
            parts.append(f"{kind}: {c['kept']}/{c['total']} kept" + (f" ({why} dropped)" if why else ""))
        return "; ".join(parts)


def item_fields(item: Any) -> dict[str, Any]:
    """The verification fields of a record (a :class:`~mnemoscope.data.records.Record`, whose extra
    fields hold ``kind``/``answer``/``aliases``/``context_answer``, or a plain dict)."""
    if isinstance(item, Mapping):
        d = dict(item)
    else:
        d = {**dict(getattr(item, "extra", {}) or {}), "id": item.id, "label": item.label}
    return d


def _kind(it: Mapping[str, Any]) -> str:
    if it.get("kind") == "conflict" or it.get("context_answer") is not None:
        return "conflict"
    if it.get("kind"):
        return str(it["kind"])
    lab = it.get("label")
    return "memory" if lab == 1 else "clean" if lab == 0 else "unlabelled"


def check_item(item: Any, closed_book: str | None, open_book: str) -> LabelDecision:
    """The verified label of one item from its closed-book and open-book answers (module doc).

    Raises:
        InputError: the item has no ``answer`` (or a conflict item no ``context_answer``), or no
            label to verify (naming the record and the field).
    """
    from mnemoscope.bench.reliance import answer_matches

    it = item_fields(item)
    rid = str(it.get("id"))
    kind = _kind(it)
    given = it.get("label")
    if not isinstance(it.get("answer"), (str, int, float)) or str(it.get("answer")).strip() == "":
        raise InputError(
            "label verification needs the expected answer (or pass --labels given)",
            record=rid,
            field="answer",
        )
    if kind == "conflict":
        ctx_item = {"answer": it.get("context_answer"), "aliases": it.get("context_aliases", ())}
        if not str(ctx_item["answer"] or "").strip():
            raise InputError("a conflict item needs context_answer", record=rid, field="context_answer")
        known = answer_matches(open_book, it)
        followed = answer_matches(open_book, ctx_item)
        believed = answer_matches(closed_book or "", ctx_item)
        if known and not followed:
            label, reason = 1, "kept"
        elif followed and not known and believed:
            # the model gives the context's answer closed-book too: following the context and
            # answering from (mistaken) memory cannot be told apart, as for a clean item
            label, reason = None, "gives the context's answer closed-book too"
        elif followed and not known:
            label, reason = 0, "kept"
        else:
            label, reason = None, "gave both answers" if known else "gave neither answer"
        return LabelDecision(rid, kind, given, label, reason, None, known, followed)
    if kind == "real":
        closed_ok = answer_matches(closed_book or "", it)
        open_ok = answer_matches(open_book, it)
        if closed_ok and open_ok:
            label, reason = 1, "kept"
        elif open_ok:
            label, reason = 0, "kept"
        elif closed_ok:
            label, reason = None, "answered closed-book only"
        else:
            label, reason = None, "answered neither closed-book nor with the context"
        return LabelDecision(rid, kind, given, label, reason, closed_ok, open_ok)
    if given not in (0, 1):
        raise InputError("label verification needs a 0/1 label", record=rid, field="label")
    closed_ok = answer_matches(closed_book or "", it)
    open_ok = answer_matches(open_book, it)
    if given == 1:
        if not closed_ok:
            return LabelDecision(rid, kind, 1, None, "not answered closed-book", closed_ok, open_ok)
        if not open_ok:
            return LabelDecision(rid, kind, 1, None, "not answered with the context", closed_ok, open_ok)
        return LabelDecision(rid, kind, 1, 1, "kept", closed_ok, open_ok)
    if closed_ok:
        return LabelDecision(rid, kind, 0, None, "answered closed-book", closed_ok, open_ok)
    if not open_ok:
        return LabelDecision(rid, kind, 0, None, "not answered with the context", closed_ok, open_ok)
    return LabelDecision(rid, kind, 0, 0, "kept", closed_ok, open_ok)


def gold_answers(item: Any, label: int | None) -> list[str]:
    """What a verified answer states: the expected answer and its aliases for a memory or clean
    item, the context's answer (and aliases) for a conflict item whose model followed the context
    (label 0). Used to tell a *clear* answer (it states that and nothing the context or the query
    does not say) from one that adds other content (:func:`mnemoscope.audit.validation.answer_is_clear`)."""
    it = item_fields(item)
    if _kind(it) == "conflict" and label == 0:
        vals = [it.get("context_answer"), *(it.get("context_aliases") or ())]
    else:
        vals = [it.get("answer"), *(it.get("aliases") or ())]
    return [str(v) for v in vals if v is not None and str(v).strip()]


def check_verifiable(items: Sequence[Any]) -> None:
    """Refuse, before any model call, items that cannot be verified (no expected answer, no label,
    a conflict item without its context answer): the first such record and field are named, with
    how many there are.

    Raises:
        InputError: naming the record and the field.
    """
    bad: list[InputError] = []
    for item in items:
        it = item_fields(item)
        try:
            check_item(it, "", "")
        except InputError as e:
            bad.append(e)
    if bad:
        more = f" (and {len(bad) - 1} more records)" if len(bad) > 1 else ""
        raise InputError(f"{bad[0]}{more}", field=bad[0].field)


def check_labelled(items: Sequence[Any]) -> None:
    """Refuse, before any model call, ``--labels given`` input in which some records carry a label
    and others do not: calibration would count the unlabelled ones as context-needed and fit an
    all-clean verdict on them. The first unlabelled record is named, with how many there are. Input
    with no label at all stays allowed (it calibrates RePCS's and the anomaly rule's thresholds on
    clean answers only, and says so).

    Raises:
        InputError: naming the first unlabelled record and the field ``label``.
    """
    missing = [it for it in items if getattr(it, "label", None) is None]
    if missing and len(missing) < len(items):
        first = missing[0]
        line = getattr(first, "line", None)
        raise InputError(
            f"--labels given: {len(missing)} of {len(items)} records have no label"
            + (f" (the first on line {line})" if line is not None else "")
            + "; label them (1 = memory, 0 = needs the context), drop them, or use --labels verify to "
            "label every record on this model",
            record=str(getattr(first, "id", "?")),
            field="label",
        )


def verify_labels(
    items: Sequence[Any],
    answers: Mapping[str, tuple[str, str | None]],
    *,
    mode: LabelMode = "verify",
) -> LabelCheck:
    """Verify every item's label against ``answers`` (``id -> (open-book answer, closed-book answer)``).

    Items without an answer in ``answers`` (not traced) are left out. ``mode="given"`` keeps every
    labelled item as labelled (nothing is checked).

    Raises:
        InputError: an item cannot be verified (no expected answer, no label: the record and field
            are named), or every item failed verification on this model (an error that says so).
    """
    if mode not in ("verify", "given"):
        raise InputError(f"labels must be 'verify' or 'given', got {mode!r}", field="labels")
    out = LabelCheck(mode=mode)
    for item in items:
        it = item_fields(item)
        rid = str(it.get("id"))
        if rid not in answers:
            continue
        open_book, closed_book = answers[rid]
        if mode == "given":
            lab = it.get("label")
            out.decisions.append(
                LabelDecision(
                    rid,
                    _kind(it),
                    None if lab is None else int(lab),
                    None if lab is None else int(lab),
                    "kept (given)",
                )
            )
            continue
        out.decisions.append(check_item(it, closed_book, open_book))
    if mode == "verify" and out.decisions and not out.kept:
        raise InputError(
            f"all {len(out.decisions)} items failed label verification on this model ({out.describe()}): "
            "the model does not answer them the way their labels say; check the data's answers, or pass "
            "--labels given if the labels were verified on this model some other way",
            field="label",
        )
    return out
