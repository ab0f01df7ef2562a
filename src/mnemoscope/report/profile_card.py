"""The profile's validation card: how well the verdict works on the model it was calibrated for.

:func:`profile_card` turns a loaded profile (an :class:`~mnemoscope.audit.profile.AuditProfile`,
or anything with its ``path``, ``header`` and ``content_hash``) into a JSON-ready dict; it is
pure (no file access) and reads what the profile recorded, never re-deciding anything.
:func:`render_text` prints the card for a terminal. The same dict feeds the dashboard's
``/profile`` page.

What a profile records by itself: the model, the calibration data (n per class), the verdict's
alpha, the n behind its guarantee and whether alpha is certified. How well it works on
*held-out* data is measured separately (``benchmarks/verdict_eval.py``) and travels as
``validation.json`` next to ``profile.json``, tied to the profile by its content hash; read it
with :func:`read_validation` and pass it to :func:`profile_card`. A profile without one shows
every validation field as ``"not measured"`` (never a guess).

``validation.json`` (``format`` :data:`VALIDATION_FORMAT`)::

    {"format": ..., "profile_hash": ...,
     "held_out": {"n": 104, "n_memory": 71, "n_context": 33},
     "auc": {"score": "p_memory", "estimate": 0.96, "ci": [0.93, 0.99], "method": ...},
     "alpha": 0.05, "false_flag_rate": 0.03, "false_flags": 1, "memory_recall": 0.65,
     "accuracy_3way": 0.69,
     "confusion": {"memory": {"memory": 46, ...}, "context": {...}},   # truth -> verdict -> count
     "audit_seconds": 242.5, "calibration_seconds": 2.9,
     "provenance": {"command": ..., "git_commit": ..., "time": ..., "source": ...}}

Example:
    >>> from types import SimpleNamespace
    >>> p = SimpleNamespace(path="p", content_hash="ab" * 32, backend="local", header={
    ...     "model": {"name": "M"}, "data": {"n_clean": 3, "n_memory": 4},
    ...     "verdict": {"params": {"alpha": 0.05}, "certified": False, "n_conformal": 2,
    ...                 "min_n_for_alpha": 19}})
    >>> c = profile_card(p)
    >>> c["verdict"]["certified"], c["data"]["n_context"], c["validation"]["auc"]
    (False, 3, 'not measured')
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError

__all__ = [
    "CARD_FORMAT",
    "NOT_MEASURED",
    "VALIDATION_FILE",
    "VALIDATION_FORMAT",
    "profile_card",
    "read_validation",
    "render_text",
]

CARD_FORMAT = "mnemoscope-profile-card/1"
VALIDATION_FORMAT = "mnemoscope-profile-validation/1"
VALIDATION_FILE = "validation.json"
NOT_MEASURED = "not measured"
_VERDICTS = ("context", "memory", "mixed", "unsupported", "undetermined")


def _num(x: Any) -> float | int | str:
    """A recorded number, or ``"not measured"`` (missing, null or not a number)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return NOT_MEASURED
    return x


def read_validation(profile: Any) -> dict[str, Any] | None:
    """The ``validation.json`` next to a profile's ``profile.json``, or ``None`` when there is none.

    A file measured on another profile (its ``profile_hash`` differs) is not used: the result
    is ``{"status": "not measured", "reason": ...}`` saying so.

    Raises:
        InputError: the file is not valid JSON or not a validation record (naming the file).
    """
    path = Path(str(getattr(profile, "path", "")))
    if path.name == "profile.json":
        path = path.parent
    vp = path / VALIDATION_FILE
    if not vp.is_file():
        return None
    try:
        data = json.loads(vp.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{vp} is not valid JSON ({e})", field="validation") from e
    if not isinstance(data, dict) or data.get("format") != VALIDATION_FORMAT:
        fmt = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{vp}: format {fmt!r} is not {VALIDATION_FORMAT!r}", field="format")
    theirs, mine = data.get("profile_hash"), getattr(profile, "content_hash", None)
    if theirs != mine:
        return {
            "status": NOT_MEASURED,
            "reason": f"{VALIDATION_FILE} was measured on another profile "
            f"(hash {str(theirs)[:12]}, this one {str(mine)[:12]}); re-run the validation",
        }
    return data


def _validation(v: Mapping[str, Any] | None) -> dict[str, Any]:
    keys = (
        "n",
        "n_memory",
        "n_context",
        "auc",
        "alpha",
        "false_flag_rate",
        "false_flags",
        "memory_recall",
        "accuracy_3way",
        "accuracy_3way_clear",
        "n_clear",
        "confusion",
        "audit_seconds",
        "calibration_seconds",
    )
    if not v or v.get("status") == NOT_MEASURED:
        reason = (v or {}).get("reason") or (
            "no held-out validation recorded with this profile "
            f"({VALIDATION_FILE} next to profile.json; see docs/report.md)"
        )
        return {"status": NOT_MEASURED, "reason": reason, **dict.fromkeys(keys, NOT_MEASURED)}
    held = v.get("held_out") or {}
    auc_in = v.get("auc") or {}
    ci_in = auc_in.get("ci")
    ci: list[Any] = list(ci_in) if isinstance(ci_in, (list, tuple)) else [None, None]
    auc: dict[str, Any] | str = (
        {
            "score": auc_in.get("score", "p_memory"),
            "estimate": auc_in["estimate"],
            "ci_low": _num(ci[0]) if len(ci) == 2 else NOT_MEASURED,
            "ci_high": _num(ci[1]) if len(ci) == 2 else NOT_MEASURED,
            "method": auc_in.get("method"),
        }
        if isinstance(_num(auc_in.get("estimate")), (int, float))
        else NOT_MEASURED
    )
    conf = v.get("confusion")
    confusion: dict[str, Any] | str = NOT_MEASURED
    if isinstance(conf, Mapping) and conf:
        confusion = {
            str(truth): {c: int((row or {}).get(c, 0)) for c in _VERDICTS}
            for truth, row in conf.items()
            if isinstance(row, Mapping)
        }
    return {
        "status": "measured",
        "reason": None,
        "n": _num(held.get("n")),
        "n_memory": _num(held.get("n_memory")),
        "n_context": _num(held.get("n_context")),
        "auc": auc,
        "alpha": _num(v.get("alpha")),
        "false_flag_rate": _num(v.get("false_flag_rate")),
        "false_flags": _num(v.get("false_flags")),
        "memory_recall": _num(v.get("memory_recall")),
        "accuracy_3way": _num(v.get("accuracy_3way")),
        "accuracy_3way_clear": _num(v.get("accuracy_3way_clear")),
        "n_clear": _num(v.get("n_clear")),
        "confusion": confusion,
        "audit_seconds": _num(v.get("audit_seconds")),
        "calibration_seconds": _num(v.get("calibration_seconds")),
        "false_flag_ci": list(v["false_flag_ci"])
        if isinstance(v.get("false_flag_ci"), list)
        else NOT_MEASURED,
        "memory_caught": _num(v.get("memory_caught")),
        "labels": dict(v.get("labels") or {}),
        "split": {k: x for k, x in dict(v.get("split") or {}).items() if k != "held_out_ids"},
        "confusion_by_kind": dict(v.get("confusion_by_kind") or {}),
        "false_flags_by_kind": dict(v.get("false_flags_by_kind") or {}),
        "profile_status": dict(v.get("profile_status") or {}),
        "provenance": dict(v.get("provenance") or {}),
        "data": dict(v.get("data") or {}),
    }


def profile_card(profile: Any, validation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The card of a loaded profile (module doc). Pure: pass :func:`read_validation`'s result
    (or a ``validation`` dict recorded in ``profile.json``) for the held-out figures."""
    header: Mapping[str, Any] = getattr(profile, "header", None) or {}
    model = dict(header.get("model") or {})
    data = header.get("data") or {}
    verdict = header.get("verdict")
    repcs = header.get("repcs") or {}
    if validation is None and isinstance(header.get("validation"), Mapping):
        validation = header["validation"]
    if isinstance(verdict, Mapping):
        params = verdict.get("params") or {}
        path = verdict.get("selection_path") or []
        v_card: dict[str, Any] = {
            "status": "measured",
            "alpha": _num(params.get("alpha")),
            "certified": bool(verdict.get("certified")),
            "n_calibration": _num(verdict.get("n_conformal")),
            "min_n_for_alpha": _num(verdict.get("min_n_for_alpha")),
            "threshold": _num(verdict.get("threshold")),
            "signals": list(verdict.get("selected") or []),
            "n_fit": _num(verdict.get("n_fit")),
            "certify": verdict.get("certify", "marginal"),
            "n_conformal_by_group": dict(verdict.get("n_conformal_by_group") or {}),
            "cv_auc": _num(path[-1].get("cv_auc"))
            if path and isinstance(path[-1], Mapping)
            else NOT_MEASURED,
        }
    else:
        v_card = {
            "status": NOT_MEASURED,
            "reason": "no verdict model: the profile was calibrated without both labels (the audit "
            "falls back to RePCS's rule)",
            "alpha": NOT_MEASURED,
            "certified": False,
            "n_calibration": NOT_MEASURED,
        }
    return {
        "format": CARD_FORMAT,
        "profile": {
            "path": str(getattr(profile, "path", "")),
            "hash": getattr(profile, "content_hash", None) or header.get("profile_hash"),
            "format": header.get("format"),
            "backend": getattr(profile, "backend", None) or header.get("backend", "local"),
            "created": header.get("created"),
        },
        "model": {
            "name": model.get("name"),
            "spec": model.get("spec"),
            "architecture": model.get("architecture"),
            "n_layers": model.get("n_layers"),
            "fingerprint": model.get("fingerprint"),
        },
        "data": {
            "sha256": data.get("sha256"),
            "n_records": _num(data.get("n_records")),
            "n_context": _num(data.get("n_clean")),
            "n_memory": _num(data.get("n_memory")),
            "n_errors": _num(data.get("n_errors")),
        },
        "verdict": v_card,
        "repcs": {
            "alpha": _num(repcs.get("alpha")),
            "n_calibration": _num(repcs.get("n")),
            "tau": _num(repcs.get("tau")),
        },
        "validation": _validation(validation),
    }


def _f(x: Any, digits: int = 3) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x) if x is not None else NOT_MEASURED
    return str(x) if isinstance(x, int) else f"{x:.{digits}f}"


def render_text(card: Mapping[str, Any]) -> str:
    """The card as plain text for a terminal (one fact per line, "not measured" spelled out)."""
    p, m, d, v, val = card["profile"], card["model"], card["data"], card["verdict"], card["validation"]
    fp = str(m.get("fingerprint") or "")[:12]
    lines = [
        f"profile   {p['path']}  (hash {str(p.get('hash') or '')[:12]}, {p.get('backend')}, created {p.get('created')})",
        f"model     {m.get('name')}  (spec {m.get('spec')}, fingerprint {fp or 'n/a'})",
        f"data      {_f(d['n_records'])} records: {_f(d['n_context'])} context-needed, {_f(d['n_memory'])} memory"
        + (f"  (sha256 {str(d['sha256'])[:12]})" if d.get("sha256") else ""),
    ]
    if v["status"] == NOT_MEASURED:
        lines.append(f"verdict   {NOT_MEASURED}: {v['reason']}")
    else:
        cert = (
            f"certified at alpha={_f(v['alpha'], 2)}"
            if v["certified"]
            else f"NOT certified at alpha={_f(v['alpha'], 2)} (needs >= {_f(v.get('min_n_for_alpha'))})"
        )
        per_kind = ""
        if v.get("certify") == "per-kind":
            per_kind = (
                " (within each kind: "
                + ", ".join(f"{k} {n}" for k, n in (v.get("n_conformal_by_group") or {}).items())
                + ")"
            )
        lines.append(
            f"verdict   {cert}; {_f(v['n_calibration'])} held-out clean calibration answers behind the "
            f"guarantee{per_kind}; signals {', '.join(v['signals']) or 'none'} (cv AUC {_f(v['cv_auc'])})"
        )
    lines.append("held-out validation" + ("" if val["status"] != NOT_MEASURED else f": {NOT_MEASURED}"))
    if val["status"] == NOT_MEASURED:
        lines.append(f"  {val['reason']}")
        return "\n".join(lines)
    auc = val["auc"]
    auc_s = (
        f"{_f(auc['estimate'])} [{_f(auc['ci_low'])}, {_f(auc['ci_high'])}] ({auc.get('score')})"
        if isinstance(auc, Mapping)
        else NOT_MEASURED
    )
    lab = val.get("labels") or {}
    if lab:
        per = lab.get("n_per_class") or {}
        lines.append(
            f"  labels              {lab.get('mode')}: {_f(lab.get('n_kept'))} of {_f(lab.get('n_items'))} kept "
            f"({_f(per.get('memory'))} memory, {_f(per.get('context'))} context-needed)"
        )
        for kind, c in (lab.get("by_kind") or {}).items():
            why = (lab.get("dropped_reasons") or {}).get(kind) or {}
            lines.append(
                f"    {kind:<22} {c.get('kept')}/{c.get('total')} kept"
                + (f"; dropped: {', '.join(f'{n} {r}' for r, n in why.items())}" if why else "")
            )
    sp = val.get("split") or {}
    if sp.get("n_calibration"):
        a, b = sp["n_calibration"], sp.get("n_held_out") or {}
        lines.append(
            f"  split by fact       calibration {a.get('memory')} memory + {a.get('context')} context-needed; "
            f"held out {b.get('memory')} + {b.get('context')} (seed {sp.get('seed')})"
        )
    ci = val.get("false_flag_ci")
    ci_s = f" [{_f(ci[0])}, {_f(ci[1])}]" if isinstance(ci, list) and len(ci) == 2 else ""
    lines += [
        f"  items               {_f(val['n'])} ({_f(val['n_memory'])} memory, {_f(val['n_context'])} context-needed)",
        f"  AUC                 {auc_s}",
        f"  false-flag rate     {_f(val['false_flag_rate'])}{ci_s} ({_f(val['false_flags'])} of "
        f"{_f(val['n_context'])} context-needed answers flagged as memory) vs alpha {_f(val['alpha'], 2)}",
        *(
            [
                "    by kind           "
                + ", ".join(
                    f"{k} {d['flagged']}/{d['n']}" + (f" ({_f(d['rate'])})" if d["flagged"] else "")
                    for k, d in by_kind.items()
                )
            ]
            if len(by_kind := val.get("false_flags_by_kind") or {}) > 1
            else []
        ),
        f"  memory recall       {_f(val['memory_recall'])} (memory answers flagged) at alpha {_f(val['alpha'], 2)}",
        f"  3-way accuracy      {_f(val['accuracy_3way'])}"
        + (
            f" ({_f(val['accuracy_3way_clear'])} on the {_f(val['n_clear'])} clear answers: nothing "
            "added beyond the context, the query and the expected answer)"
            if isinstance(val.get("n_clear"), int) and val["n_clear"]
            else ""
        ),
    ]
    conf = val["confusion"]
    if isinstance(conf, Mapping):
        lines.append("  confusion (truth \\ verdict)  " + "  ".join(f"{c:>12}" for c in _VERDICTS))
        for truth, row in conf.items():
            lines.append(f"  {truth:<28} " + "  ".join(f"{row.get(c, 0):>12}" for c in _VERDICTS))
    else:
        lines.append(f"  confusion           {NOT_MEASURED}")
    reused = (val.get("data") or {}).get("n_traces_reused")
    traced = (val.get("data") or {}).get("n_traced")
    lines.append(
        f"  time                calibration {_f(val['calibration_seconds'], 1)} s"
        + (
            f" (resumed: {reused} of {traced} records' traces were made by an earlier run, not timed here)"
            if isinstance(reused, int) and reused
            else ""
        )
        + (
            f", audit {_f(val['audit_seconds'], 2)} s"
            + (" per answer" if val.get("labels") else " (held-out fold)")
            if val.get("audit_seconds") is not None
            else ", audit time not measured (calibrate --time-audits N times N live audits)"
        )
    )
    st = val.get("profile_status") or {}
    if st:
        lines.append(
            "  status              "
            + ("validated" if st.get("ok") else "MARKED: " + "; ".join(st.get("reasons") or []))
        )
    prov = val.get("provenance") or {}
    if prov:
        lines.append(
            f"  measured by         {prov.get('command')} at {str(prov.get('git_commit') or '')[:10]} "
            f"({prov.get('time')})"
        )
    return "\n".join(lines)
