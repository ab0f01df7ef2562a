"""Human output of the ``mnemoscope`` commands: pure functions from a result (the dict a pipeline
returns or writes) to the text printed on a terminal. ``--json`` prints the dict itself.

Kept apart from the commands so several commands share one view (``audit`` in-process and over
``--endpoint`` print the same audit) without importing each other.
"""

from __future__ import annotations

import os
from typing import Any, TextIO

__all__ = ["format_auc", "render_audit", "render_crm_eval", "render_trace_summary", "use_colour"]

_COLOURS = {"context": "\033[30;42m", "memory": "\033[30;43m", "query": "\033[4;36m"}
_RESET = "\033[0m"
_MARKERS = {"context": ("[ctx: ", "]"), "memory": ("[mem: ", "]"), "query": ("[q: ", "]")}


def use_colour(choice: str, stream: TextIO) -> bool:
    """``--color auto|always|never``: auto = on a terminal unless ``NO_COLOR`` is set."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _answer_words_line(ev: dict[str, Any]) -> list[str]:
    """The answer-bearing words with their counterfactual source (profiles deciding on them)."""
    aw = ev.get("answer_words")
    if not isinstance(aw, dict):
        return []
    words = aw.get("words") or []
    if not words:
        return ["  answer-bearing words: none beyond the query"]
    agree = (ev.get("signals") or {}).get("closed_book_agreement")
    several = int(aw.get("n_passages") or 1) > 1
    parts = []
    for w in words[:6]:
        src = w.get("grounded") or {"added": "unsupported"}.get(w.get("source"), w.get("source"))
        why = {
            "memory": "memory",
            "context": "context",
            "unsupported": "unsupported: no passage states it",
        }.get(src, "?")
        if w.get("passage") is not None and several:
            why += f", stated by passage {int(w['passage']) + 1}"
            if w.get("passage_effect") is not None:
                why += f" (without it: {-float(w['passage_effect']):+.1f} nats)"
        if w.get("in_closed_book") is not None:
            why += ", in" if w["in_closed_book"] else ", not in"
            why += " the closed-book answer"
        parts.append(f"{w.get('text')} ({why})")
    more = f" and {len(words) - 6} more" if len(words) > 6 else ""
    tail = "" if agree is None else f"; closed-book answer states {100 * float(agree):.0f} % of them"
    return ["  answer-bearing words: " + "; ".join(parts) + more + tail]


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "not measured" if v is None else format(v, spec)


def render_audit(d: dict[str, Any], *, colour: bool) -> str:
    """The human view of one audit (``AuditResult.to_dict()``): highlighted answer, verdict, evidence."""
    answer = d["answer"]
    parts = []
    pos = 0
    for s in d["spans"]:
        if s["source"] not in _COLOURS:
            continue
        parts.append(answer[pos : s["start"]])
        text = answer[s["start"] : s["end"]]
        if colour:
            parts.append(f"{_COLOURS[s['source']]}{text}{_RESET}")
        else:
            a, b = _MARKERS[s["source"]]
            parts.append(f"{a}{text}{b}")
        pos = s["end"]
    parts.append(answer[pos:])
    legend = (
        f"{_COLOURS['context']}context{_RESET} / {_COLOURS['memory']}memory{_RESET} / "
        f"{_COLOURS['query']}query{_RESET} / plain = neutral"
        if colour
        else "[ctx: ...] = from the context, [mem: ...] = from memory, [q: ...] = copied from the query, "
        "unmarked = neutral"
    )
    ev, g = d["evidence"], d["guarantee"]
    frac = ev.get("context_token_fraction")
    lines = [
        f"Answer ({legend}):",
        "  " + ("".join(parts).strip() or "(empty answer)"),
        "",
        f"Verdict: {d['source'].upper()}"
        + ("" if d.get("p_memory") is None else f"   p_memory = {d['p_memory']:.2f}"),
        f"  {d['summary']}",
        "Evidence:",
        f"  RePCS Z = {_fmt(ev.get('repcs_z'), '.2f')} nats (tau = {_fmt(ev.get('tau'), '.2f')}); "
        f"closed-book log-prob = {_fmt(ev.get('closed_book_logprob'), '.2f')} per token; "
        f"context-supported words = {'none attributed' if frac is None else f'{100 * frac:.0f} %'}",
        *_answer_words_line(ev),
        f"Guarantee ({d['rule']} rule): {g.get('statement', '')}",
    ]
    st = g.get("profile")
    if isinstance(st, dict):
        lines.append(
            f"  Profile: {st.get('summary')}"
            + ("" if st.get("ok") else f" - MARKED: {'; '.join(st.get('reasons') or [])}")
        )
    crm = d.get("crm")
    if crm:
        lines.append(
            f"Secondary, CRM anomaly rule: {'flagged' if crm['anomaly_flag'] else 'not flagged'} "
            f"(score {crm['anomaly_score']:.2f})"
        )
    cut = d.get("answer_cut")
    if cut:
        lines.append(
            f"Answer cut: the model went on writing; the audited answer ends at stop sequence "
            f"{cut['stop']!r} (character {cut['at']}, after {cut['token']} tokens), as an app would cut it"
        )
    for n in d.get("notes", []):
        lines.append(f"Note: {n}")
    return "\n".join(lines)


def format_auc(e: dict[str, Any]) -> str:
    """``0.957 [0.935, 0.975]`` from a dict with ``roc_auc`` and ``roc_auc_ci``."""
    return f"{e['roc_auc']:.3f} [{e['roc_auc_ci'][0]:.3f}, {e['roc_auc_ci'][1]:.3f}]"


def render_crm_eval(report: dict[str, Any]) -> str:
    """The terminal summary of ``crm eval``: the shift diagnostic first, then the AUCs."""
    lines = []
    blind = report.get("blind") or {}
    if report.get("shift_warning"):
        lines.append(f"WARNING: {report.get('shift_reason')}")
    elif blind.get("skipped"):
        lines.append(f"blind baselines: {blind['skipped']}")
    else:
        lines.append(f"shift diagnostic: {report.get('shift_reason')}")
    bb = blind.get("best_blind_auc")
    vs = f"  (best blind {blind.get('best_blind')} {bb:.3f})" if bb is not None else ""
    rows = [(m, report[m]) for m in ("crm_lr", "crm_xgb", "crm_l3_lr", "l1l2_lr") if m in report]
    for m, e in rows:
        if e.get("roc_auc") is not None:
            lines.append(f"{m:10s} AUC {format_auc(e)}{vs}")
    for row in (report.get("families") or {}).get("rows", []):
        if row.get("roc_auc") is not None:
            lines.append(f"family {row['family']:9s} AUC {format_auc(row)}")
    best = report.get("best_likelihood")
    if best:
        lines.append(f"best likelihood baseline: {best['method']} {best['roc_auc']:.3f}")
    return "\n".join(lines)


def render_trace_summary(d: dict[str, Any], pt: Any) -> str:
    """``mnemoscope trace`` on one pair: the prompts, both answers, the KL per aligned step and the
    displacement per layer (``d`` = the command's JSON payload, ``pt`` = the :class:`PairTrace`)."""
    info = d["model_info"]
    lines = [
        f"model    {info['name']} ({info['architecture']}, {info['n_layers']} layers, d={info['hidden_size']}, "
        f"{info['device']} {info['dtype']})",
        f"prompts  with context {pt.n_prompt_tokens_with} tokens, without {pt.n_prompt_tokens_without} tokens "
        f"(template {d['template']['template']}, task {d['template']['task']})",
        f"answer   with context:    {d['answer_with_context']!r}",
    ]
    if d["answer_without_context"] is not None:
        lines.append(f"         without context: {d['answer_without_context']!r}")
    if pt.identical_prompts:
        lines.append(
            "note     the context is empty: both paths are the same prompt, so every KL is 0 by construction"
        )
    kl = pt.kl_steps
    lines.append(
        f"KL(p_with || p_without), nats, over {pt.n_steps} aligned steps"
        f"{' (stopped at EOS)' if pt.stopped_at_eos else ''}: "
        f"sum {kl.sum():.3f}  mean {kl.mean():.3f}  max {kl.max():.3f}"
    )
    lines.append("  step  token                 KL    rev-KL  H_with  H_without")
    for t, (tok, a, b, hw, ho) in enumerate(
        zip(d["answer_tokens"], kl, pt.kl_rev_steps, pt.entropy_with, pt.entropy_without, strict=True),
        start=1,
    ):
        lines.append(f"  {t:>4}  {tok!r:<18} {a:7.3f}  {b:7.3f}  {hw:6.3f}  {ho:6.3f}")
    disp = d["displacement_norm_per_layer"]
    if disp is not None:
        lines.append(
            "||h_with - h_without|| at the last prompt token, by layer (0 = embeddings, "
            f"{len(disp) - 1} = after the final norm):"
        )
        for start in range(0, len(disp), 8):
            lines.append(
                "  " + "  ".join(f"L{start + i:<2} {v:8.2f}" for i, v in enumerate(disp[start : start + 8]))
            )
    return "\n".join(lines)
