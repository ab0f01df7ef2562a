"""Argument helpers the ``mnemoscope`` commands share: model, threads, chat, stop sequences,
engine flags, the model loader behind them, and logging set-up.

Every ``cli/*_cmd.py`` imports from here (never from :mod:`mnemoscope.cli.main`, which imports the
commands to build the parser: importing it back would close a circle).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

__all__ = [
    "add_chat_arg",
    "add_engine_args",
    "add_model_args",
    "add_stop_arg",
    "add_threads_arg",
    "apply_threads",
    "chat_for",
    "configure_logging",
    "load_from_args",
    "ray_model_from_args",
    "ray_options_from_args",
    "resolve_threads",
    "stops_from_args",
    "verdict_signals",
]

log = logging.getLogger("mnemoscope")


def add_model_args(p: argparse.ArgumentParser, *, many_adapters: bool = False) -> None:
    """The model flags every model-using command shares (``many_adapters``: ``--adapter`` repeats)."""
    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default="default",
        metavar="SPEC",
        help="'default' (embedded SmolLM2-135M-Instruct), a .gguf file, a HF folder, a hub id, "
        "or BASE::ADAPTER_DIR (default: %(default)s)",
    )
    if many_adapters:
        g.add_argument(
            "--adapter",
            metavar="DIR",
            action="append",
            help="a sibling's LoRA/peft adapter folder (repeatable; 'none' = the base model itself)",
        )
    else:
        g.add_argument(
            "--adapter", metavar="DIR", help="a LoRA/peft adapter folder applied on the base model"
        )
    g.add_argument(
        "--device", default="auto", help="auto (CUDA if available), cpu, cuda:0, ... (default: auto)"
    )
    g.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "float16", "bfloat16"],
        help="auto = bf16/fp16 on CUDA, float32 on CPU",
    )
    add_threads_arg(g)


def _threads_value(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {value!r}")
    return n


def add_threads_arg(group: Any) -> None:
    """``--threads N|auto``: torch (and BLAS) threads of a model-running command."""
    group.add_argument(
        "--threads",
        type=_threads_value,
        default="auto",
        metavar="N|auto",
        help="torch threads (default auto: $OMP_NUM_THREADS when set, else the cores not busy right "
        "now, at least 1, so two jobs on a shared machine do not oversubscribe it)",
    )


def resolve_threads(spec: int | str) -> int:
    """Threads for ``--threads``: an integer as given; ``auto`` = ``$OMP_NUM_THREADS`` when set,
    else the cores this process may use minus the current 1-minute load, at least 1."""
    if spec != "auto":
        return int(spec)
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        busy = round(os.getloadavg()[0])
    except OSError:  # pragma: no cover - no load average on this platform
        busy = 0
    return max(1, min(cores, cores - busy))


def apply_threads(args: argparse.Namespace) -> int | None:
    """Set torch's intra-op threads from ``args.threads`` (commands without the flag: no-op)."""
    spec = getattr(args, "threads", None)
    if spec is None:
        return None
    n = resolve_threads(spec)
    import torch

    torch.set_num_threads(n)
    log.debug("torch threads: %d%s", n, " (auto)" if spec == "auto" else "")
    return n


def add_chat_arg(group: Any) -> None:
    """``--chat {auto,on,off}`` (bare ``--chat`` = on): the one spelling on every command."""
    group.add_argument(
        "--chat",
        nargs="?",
        const="on",
        default="auto",
        choices=["auto", "on", "off"],
        help="wrap prompts in the model's chat template (default auto = when the tokenizer has one)",
    )


def chat_for(args: argparse.Namespace, lm: Any) -> bool:
    """``--chat`` decided for a loaded model (``auto`` = the model has a chat template)."""
    if args.chat == "auto":
        return bool(lm.info.has_chat_template)
    return bool(args.chat == "on")


_NO_STOP = "none"


def _stop_value(value: str) -> str:
    from mnemoscope.errors import InputError
    from mnemoscope.trace.templates import parse_stop

    if value.strip().lower() == _NO_STOP:
        return _NO_STOP
    try:
        return parse_stop(value)
    except InputError as e:
        raise argparse.ArgumentTypeError(e.reason) from None


def add_stop_arg(group: Any) -> None:
    """``--stop TEXT`` (repeatable): where an answer ends (docs/audit.md#stop-sequences)."""
    group.add_argument(
        "--stop",
        action="append",
        type=_stop_value,
        metavar="TEXT",
        help="a stop sequence: the audited answer ends before it, at a token boundary, as an app "
        "would cut it (repeatable; \\n and \\t are unescaped; 'none' = no stop sequence). Default: "
        "the profile's; a calibration without a chat template uses a blank line and a new line "
        "starting 'Question:', 'Context:', 'Q:' or 'A:'",
    )


def stops_from_args(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The stop sequences asked on the command line: ``None`` when ``--stop`` was not given (the
    profile's, or the layout's default), ``()`` for ``--stop none``."""
    given = getattr(args, "stop", None)
    if not given:
        return None
    if _NO_STOP in given:
        return ()
    return tuple(dict.fromkeys(given))


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """``--engine local|ray`` and the Ray flags: the one engine group of every batch command
    (docs/ray.md). Read them back with :func:`ray_options_from_args` and
    :func:`ray_model_from_args`; no command spells them itself."""
    g = p.add_argument_group("engine (a batch on a Ray cluster: pip install 'mnemoscope[ray]')")
    g.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: this process; ray: actors on a Ray cluster, same results (default: local)",
    )
    g.add_argument(
        "--ray-address",
        metavar="ADDR",
        default=None,
        help="HOST:PORT, ray://HOST:PORT or auto (default: start a local cluster on this machine)",
    )
    g.add_argument("--workers", type=int, default=1, help="Ray actors, one model replica each (default: 1)")
    g.add_argument(
        "--cpus-per-worker", type=float, default=1.0, help="CPUs (and torch threads) per actor (default: 1)"
    )
    g.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per actor (default: 0)")


def ray_options_from_args(args: argparse.Namespace, batch_size: int | None = None) -> Any:
    """The :class:`~mnemoscope.pipelines.ray.RayOptions` of :func:`add_engine_args`' flags;
    ``batch_size`` defaults to the command's ``--batch-size``, progress bars follow ``--quiet``."""
    from mnemoscope.pipelines.ray import RayOptions

    return RayOptions(
        address=args.ray_address,
        workers=args.workers,
        cpus_per_worker=args.cpus_per_worker,
        gpus_per_worker=args.gpus_per_worker,
        batch_size=batch_size if batch_size is not None else args.batch_size,
        progress=not args.quiet,
    )


def ray_model_from_args(args: argparse.Namespace) -> Any:
    """The model flags (:func:`add_model_args`) as the picklable loader each Ray actor calls
    (:class:`~mnemoscope.pipelines.ray.ModelLoader`): the model the local engine would load."""
    from mnemoscope.pipelines.ray import ModelLoader

    return ModelLoader(
        spec=args.model, adapter=args.adapter, device=args.device, dtype=args.dtype, cache_dir=args.cache_dir
    )


def load_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from mnemoscope.models import load_model

    log.info("loading model %s%s", args.model, f" + adapter {args.adapter}" if args.adapter else "")
    return load_model(
        args.model, adapter=args.adapter, device=args.device, dtype=args.dtype, cache_dir=args.cache_dir
    )


def configure_logging(quiet: bool, debug: bool) -> None:
    """Log level from ``--quiet`` / ``--debug``; silence transformers' own notices unless debugging."""
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not debug:
        # one INFO line per HTTP request (httpx, httpcore) drowns the progress bar of an endpoint
        # calibration or batch audit: thousands of lines; --debug shows them again.
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
        # transformers' own progress bars and notices are noise next to ours.
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            import transformers

            transformers.utils.logging.set_verbosity_error()
            transformers.utils.logging.disable_progress_bar()
        except ImportError:  # pragma: no cover
            pass


def verdict_signals(args: argparse.Namespace) -> tuple[str, ...]:
    """``--verdict-signals`` as a tuple, each name checked against the known signals."""
    from mnemoscope.detectors.verdict import DEFAULT_CANDIDATES, SIGNALS
    from mnemoscope.errors import InputError

    if getattr(args, "verdict_signals", None) is None:
        return DEFAULT_CANDIDATES
    names = tuple(dict.fromkeys(s.strip() for s in str(args.verdict_signals).split(",") if s.strip()))
    # lts_score is reported by audits but not measured by calibrate's verdict fit
    bad = [s for s in names if s not in SIGNALS or s == "lts_score"]
    if bad or not names:
        raise InputError(
            f"--verdict-signals: unknown signal(s) {bad or '(none given)'}; known: "
            f"{', '.join(x for x in SIGNALS if x != 'lts_score')}",
            field="verdict_signals",
        )
    return names
