"""``mnemoscope bench``: injected ground truth and the membership leaderboard."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mnemoscope.cli.options import add_chat_arg, add_engine_args, add_model_args


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="ground-truth siblings (LoRA injection) and the membership leaderboard",
        description="Build fine-tuned siblings with known members and evaluate membership methods "
        "on them with bootstrap confidence intervals.",
    )
    bsub = p.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")

    m = bsub.add_parser("methods", help="list the registered membership methods")
    m.set_defaults(func=_methods)

    i = bsub.add_parser(
        "inject",
        help="fine-tune a LoRA sibling on member documents (saves the adapter only)",
        description="Presets: weak (1 epoch, lr 5e-5), strong (4 epochs, lr 2e-4), positive "
        "(10 epochs, lr 1e-3: the loss attack should exceed 0.9 AUC). Re-running resumes.",
    )
    add_model_args(i)
    i.add_argument("--out", required=True, metavar="DIR", help="adapter folder to write")
    i.add_argument("--preset", choices=["weak", "strong", "positive"], default="weak")
    i.add_argument(
        "--suite",
        choices=["membership", "contamination"],
        default="membership",
        help="membership: the shipped corpus's member split; contamination: filler + arithmetic items",
    )
    i.add_argument("--rate", type=float, default=None, help="contamination rate (0 = clean sibling)")
    i.add_argument("--n-filler", type=int, default=300, help="filler documents in a contamination mix")
    i.add_argument(
        "--data", metavar="FILE", help="train on the label-1 documents of this file instead of a suite"
    )
    i.add_argument("--epochs", type=int)
    i.add_argument("--lr", type=float, dest="learning_rate")
    i.add_argument("--rank", type=int)
    i.add_argument("--batch-size", type=int)
    i.add_argument("--seed", type=int)
    i.set_defaults(func=_inject)

    v = bsub.add_parser(
        "verify",
        help="check context-reliance labels against the model (closed/open book)",
        description="Run every item of the shipped context-reliance set closed-book and open-book; keep memorized "
        "items the model answers closed-book and clean items it answers only with the context. "
        "Writes OUT/verified.jsonl, OUT/verify.json and OUT/traces/ (reusable by 'repcs eval --answer-without').",
    )
    add_model_args(v)
    v.add_argument(
        "--suite",
        choices=["reliance", "mixed"],
        default="reliance",
        help="reliance: the item-level set; mixed: the token-level set (half context, half memory)",
    )
    v.add_argument(
        "--memorized-from",
        metavar="FILE",
        help="with --suite mixed: the reliance verified.jsonl of this model (its memorized facts count as known)",
    )
    v.add_argument("--out", required=True, metavar="DIR")
    v.add_argument("--template", default="A")
    add_chat_arg(v)
    v.add_argument("--max-new-tokens", "-T", type=int, default=32)
    v.add_argument("--batch-size", type=int, default=8)
    v.set_defaults(func=_verify)

    r = bsub.add_parser(
        "run",
        help="evaluate methods on siblings -> leaderboard.json/.md + roc.png",
        description="Evaluate every requested method on the same documents and seeds. "
        "--adapter may be repeated (one sibling each); 'none' adds the base model.",
    )
    add_model_args(r, many_adapters=True)
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--suite",
        choices=["membership", "shift"],
        help="membership: the shipped authored membership corpus (members injected by 'bench inject'); "
        "shift: the shipped shift-controlled pair (no injection: members and non-members differ only "
        "in register and era of their invented dates, so any AUC above chance comes from the text)",
    )
    src.add_argument(
        "--data", metavar="FILE", help="JSONL of {id, text, label} (or WikiMIA/BookMIA/MIMIR files)"
    )
    r.add_argument("--format", default="auto", choices=["auto", "jsonl", "wikimia", "bookmia", "mimir"])
    r.add_argument(
        "--methods", default=None, help="comma-separated method names (default: all likelihood baselines)"
    )
    r.add_argument(
        "--reference", default=None, metavar="SPEC", help="reference model for 'ref' (default: --model)"
    )
    r.add_argument("--out", required=True, metavar="DIR")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--n-resamples", type=int, default=1000)
    r.add_argument("--max-tokens", type=int, default=256)
    r.add_argument("--long-policy", choices=["truncate", "reject"], default="truncate")
    r.add_argument("--batch-size", type=int, default=8)
    r.add_argument(
        "--no-blind",
        action="store_true",
        help="skip the blind baselines (text-only classifiers) and the shift diagnostic",
    )
    r.add_argument(
        "--no-blind-embedding",
        action="store_true",
        help="skip blind_embedding only (it loads the offline sentence encoder)",
    )
    add_engine_args(r)
    r.set_defaults(func=_run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _methods(args: argparse.Namespace) -> int:
    from mnemoscope.detectors import METHODS

    for name in METHODS.names():
        m = METHODS.build(name)
        kind = "supervised" if m.supervised else "unsupervised"
        print(
            f"{name:<14} {type(m).__name__}({', '.join(f'{k}={v}' for k, v in m.get_params().items())}) "
            f"[{kind}; needs {', '.join(sorted(m.requires))}]"
        )
    return 0


def _inject(args: argparse.Namespace) -> int:
    from mnemoscope.bench.inject import SIBLINGS, inject, with_overrides
    from mnemoscope.cli.options import load_from_args
    from mnemoscope.errors import InputError

    config = with_overrides(
        SIBLINGS[args.preset],
        epochs=args.epochs,
        learning_rate=args.learning_rate,
        rank=args.rank,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    meta: dict[str, Any] = {"preset": args.preset}
    if args.data:
        from mnemoscope.bench.datasets import load_documents

        docs, errors = load_documents(args.data)
        for e in errors:
            print(f"mnemoscope: skipped {args.data}: {e}", file=sys.stderr)
        members = [d for d in docs if d.label == 1]
        if not members:
            raise InputError(f"{args.data} has no documents labelled 1 (member) to inject")
        texts, meta["member_ids"], meta["data"] = (
            [d.text for d in members],
            [d.id for d in members],
            args.data,
        )
    elif args.suite == "membership":
        from mnemoscope.bench.suites import membership_documents

        members = [d for d in membership_documents() if d.label == 1]
        texts, meta["member_ids"], meta["suite"] = (
            [d.text for d in members],
            [d.id for d in members],
            "membership",
        )
    else:
        from mnemoscope.bench.suites import contamination_mix

        if args.rate is None:
            raise InputError("--suite contamination needs --rate (e.g. 0, 0.01, 0.05, 0.10)")
        mix = contamination_mix(args.rate, n_filler=args.n_filler, seed=config.seed)
        texts = mix.texts
        meta.update(
            suite="contamination", rate=args.rate, injected_ids=mix.injected_ids, n_filler=args.n_filler
        )
    lm = load_from_args(args)
    res = inject(lm, texts, args.out, config, progress=not args.quiet, metadata=meta)
    losses = ", ".join(f"{x:.3f}" for x in res.epoch_losses)
    print(
        f"adapter -> {res.folder} ({res.n_documents} documents, {res.steps} steps, {res.seconds:.0f} s); "
        f"mean training loss per epoch: {losses}"
    )
    print(f"use it as: --model {args.model} --adapter {res.folder}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from mnemoscope.bench.reliance import load_reliance
    from mnemoscope.bench.verify import verify_reliance
    from mnemoscope.cli.options import chat_for, load_from_args
    from mnemoscope.trace import PairConfig, PromptBuilder

    lm = load_from_args(args)
    config = PairConfig(
        builder=PromptBuilder(template=args.template, chat=chat_for(args, lm)),
        max_new_tokens=args.max_new_tokens,
        answer_without=True,
    )
    if args.suite == "mixed":
        import json
        from pathlib import Path

        from mnemoscope.bench.mixed import load_mixed, verify_mixed

        known = None
        if args.memorized_from:
            text = Path(args.memorized_from).read_text(encoding="utf-8")
            rows = [json.loads(x) for x in text.splitlines() if x.strip()]
            known = [r["id"] for r in rows if r.get("kind") == "memorized"]
        res = verify_mixed(
            lm,
            load_mixed(),
            args.out,
            config,
            memorized_ids=known,
            batch_size=args.batch_size,
            progress=not args.quiet,
        )
        for why, n in res["outcomes"].items():
            print(f"{why:<40} {n:>4}")
        print(
            f"{res['n_kept']} of {res['n_items']} mixed items survive on {lm.info.name} -> {args.out}/verified.jsonl"
        )
        return 0
    res = verify_reliance(
        lm, load_reliance(), args.out, config, batch_size=args.batch_size, progress=not args.quiet
    )
    for kind, c in res["by_kind"].items():
        print(f"{kind:<24} {c['kept']:>4} / {c['total']:<4} kept")
    print(f"{res['n_kept']} of {res['n_items']} items survive on {lm.info.name} -> {args.out}/verified.jsonl")
    return 0


def _engine(args: argparse.Namespace) -> Any:
    """``--engine ray``: the siblings' forward passes on Ray actors (docs/ray.md); None = here."""
    if args.engine != "ray":
        return None
    from mnemoscope.cli.options import ray_options_from_args
    from mnemoscope.pipelines.ray import RayLeaderboardEngine

    return RayLeaderboardEngine(ray_options_from_args(args))


def _run(args: argparse.Namespace) -> int:
    from mnemoscope.errors import InputError
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.leaderboard import DEFAULT_METHODS, LeaderboardConfig, run_leaderboard

    methods = (
        tuple(m.strip() for m in args.methods.split(",") if m.strip()) if args.methods else DEFAULT_METHODS
    )
    from mnemoscope.detectors import METHODS

    for m in methods:
        METHODS.get(m)  # unknown names fail here, with suggestions, before any model loads
    if args.suite == "shift":
        from mnemoscope.bench.shift import shift_documents

        docs, source = shift_documents(), "suite:shift"
    elif args.suite:
        from mnemoscope.bench.suites import membership_documents

        docs, source = membership_documents(), "suite:membership"
    else:
        from mnemoscope.bench.datasets import load_documents

        docs, errors = load_documents(args.data, format=args.format)
        for e in errors:
            print(f"mnemoscope: skipped {args.data}: {e}", file=sys.stderr)
        if not docs:
            raise InputError(f"{args.data}: no valid documents")
        source = f"data:{args.data}"
    adapters = args.adapter or ["none"]

    def loader(adapter: str | None):  # type: ignore[no-untyped-def]
        def _load(_: Any) -> Any:
            return load_model(
                args.model, adapter=adapter, device=args.device, dtype=args.dtype, cache_dir=args.cache_dir
            )

        return _load

    def name_of(a: str) -> str:
        from pathlib import Path

        return "base" if a == "none" else Path(a).name

    siblings = [(name_of(a), loader(None if a == "none" else a)) for a in adapters]
    ref_spec = args.reference or args.model

    def ref_loader(_: Any) -> Any:
        return load_model(ref_spec, device=args.device, dtype=args.dtype, cache_dir=args.cache_dir)

    cfg = LeaderboardConfig(
        methods=methods,
        seed=args.seed,
        n_resamples=args.n_resamples,
        max_tokens=args.max_tokens,
        long_policy=args.long_policy,
        batch_size=args.batch_size,
        blind=not args.no_blind,
        blind_embedding=not args.no_blind_embedding,
    )
    import torch

    res = run_leaderboard(
        docs,
        siblings,
        args.out,
        cfg,
        reference=ref_loader,
        progress=not args.quiet,
        engine=_engine(args),
        provenance={
            "source": source,
            "model": args.model,
            "adapters": adapters,
            "reference": ref_spec,
            "command": sys.argv,
            "threads": torch.get_num_threads(),
        },
        notify=lambda msg: print(f"mnemoscope: warning: {msg}", file=sys.stderr, flush=True),
    )
    from mnemoscope.report import leaderboard_markdown

    print(leaderboard_markdown(res.entries))
    if res.truncation.get("n_truncated"):
        t = res.truncation
        print(
            f"note: {t['n_truncated']} of {t['n_documents']} documents were truncated to {t['max_tokens']} "
            "tokens (listed in run.json)"
        )
    if res.shift["shift_warning"]:
        print(f"WARNING: distribution shift: {res.shift['shift_reason']}")
    else:
        print(f"shift diagnostic: {res.shift['shift_reason']}")
    print(f"-> {args.out}/leaderboard.json, leaderboard.md, roc.png, run.json")
    return 0
