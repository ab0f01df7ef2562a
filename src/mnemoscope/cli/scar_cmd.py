"""``mnemoscope scar audit``: where along depth does a suspect's trajectory rupture vs a clean anchor?"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: Any) -> None:
    from mnemoscope.cli.options import add_threads_arg

    p = sub.add_parser(
        "scar",
        help="SCAR model-level audit: rupture bands of a suspect vs a clean anchor",
        description="SCAR: spectral curvature, thermodynamic length and belief drift per layer; "
        "rupture bands with permutation p-values and BH control; writes an audit card.",
    )
    ss = p.add_subparsers(dest="scar_command", metavar="SUBCOMMAND")
    a = ss.add_parser("audit", help="audit a suspect against an anchor -> OUT/card.json, card.html, PNGs")
    g = a.add_argument_group("models")
    g.add_argument(
        "--suspect", required=True, metavar="SPEC", help="suspect model spec ('default', folder, .gguf, ...)"
    )
    g.add_argument("--suspect-adapter", metavar="DIR", help="LoRA/peft adapter applied to the suspect")
    g.add_argument("--anchor", required=True, metavar="SPEC", help="clean anchor of the same family and size")
    g.add_argument("--anchor-adapter", metavar="DIR", help="LoRA/peft adapter applied to the anchor")
    g.add_argument("--device", default="auto")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"])
    add_threads_arg(g)
    a.add_argument(
        "--prompts", metavar="FILE", help="JSONL of {id, prompt, target?} (default: the shipped battery)"
    )
    a.add_argument("--out", required=True, metavar="DIR", help="card folder (signal extraction resumes here)")
    s = a.add_argument_group("signals")
    s.add_argument(
        "--token", choices=["last", "mean"], default="last", help="token representation (default: last)"
    )
    s.add_argument("--k", default="auto", help="top-k eigenvalues: 32, 64 or auto (default)")
    s.add_argument("--slope", choices=["loglog", "drop"], default="loglog")
    s.add_argument("--metric", choices=["whitened", "cka", "euclidean"], default="whitened")
    s.add_argument("--center", choices=["median", "mean"], default="median")
    s.add_argument("--no-drift", action="store_true", help="skip belief drift (prompts then need no targets)")
    s.add_argument("--reference", choices=["within", "anchor_delta"], default="within")
    s.add_argument("--smooth", action="store_true", help="Savitzky-Golay (window 3) on the z-curves")
    s.add_argument("--batch-size", type=int, default=8)
    d = a.add_argument_group("detection")
    d.add_argument(
        "--weights", type=float, nargs=3, default=(1.0, 1.0, 1.0), metavar=("ALPHA", "BETA", "GAMMA")
    )
    d.add_argument(
        "--percentiles", type=float, nargs=3, default=(90.0, 10.0, 90.0), metavar=("PK", "PL", "PV")
    )
    d.add_argument("--q-fdr", type=float, default=0.05)
    d.add_argument("--min-width", type=int, default=2)
    d.add_argument(
        "--rule",
        choices=["paper", "any2", "per_signal"],
        default="paper",
        help="band rule: paper = all three conditions (default); any2 = at least two; per_signal = "
        "each signal alone with its own permutation test (the card records all three)",
    )
    d.add_argument("--n-permutations", type=int, default=999)
    d.add_argument("--n-bootstrap", type=int, default=200)
    d.add_argument("--seed", type=int, default=0)
    a.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    a.set_defaults(func=_audit)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _audit(args: argparse.Namespace) -> int:

    from mnemoscope.errors import InputError
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.scar import AuditConfig, default_battery_path, run_audit

    if args.k != "auto":
        try:
            k: int | str = int(args.k)
        except ValueError:
            raise InputError(f"--k must be an integer or 'auto', got {args.k!r}", field="k") from None
    else:
        k = "auto"
    config = AuditConfig(
        position=args.token,
        drift=not args.no_drift,
        batch_size=args.batch_size,
        k=k,  # type: ignore[arg-type]
        slope=args.slope,
        metric=args.metric,
        center=args.center,
        reference=args.reference,
        smooth=args.smooth,
        weights=tuple(args.weights),
        percentiles=tuple(args.percentiles),
        q_fdr=args.q_fdr,
        min_width=args.min_width,
        rule=args.rule,
        n_permutations=args.n_permutations,
        n_bootstrap=args.n_bootstrap,
        seed=args.seed,
        progress=not args.quiet,
    )

    def loader(spec: str, adapter: str | None) -> Any:
        def load() -> Any:
            return load_model(
                spec, adapter=adapter, device=args.device, dtype=args.dtype, cache_dir=args.cache_dir
            )

        return load

    prompts = args.prompts or str(default_battery_path())
    result = run_audit(
        loader(args.suspect, args.suspect_adapter),
        loader(args.anchor, args.anchor_adapter),
        prompts,
        args.out,
        config=config,
        plots=not args.no_plots,
    )
    summary = {
        "rule": args.rule,
        "bands": [list(b) for b in result.bands],
        "bands_by_rule": {
            r: [[b.first, b.last, *b.signals] for b in bs if b.accepted]
            for r, bs in result.bands_by_rule.items()
        },
        "rupture_layer": result.rupture_layer,
        "scar_score": None if result.scar is None else result.scar.estimate,
        "peak": result.peak.estimate,
        "card": f"{args.out}/card.json",
    }
    print(json.dumps(summary))
    return 0
