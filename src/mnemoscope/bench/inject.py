"""Ground truth by injection: LoRA fine-tuning of a base model on chosen documents.

``inject`` trains a LoRA adapter (peft) on a list of texts with a plain causal-LM loss
and saves only the adapter, so every tool can load the sibling as ``BASE::ADAPTER``.
Training runs on a CPU in minutes for the default model, shows progress, checkpoints
every ``checkpoint_every`` steps (adapter + optimizer + scheduler + RNG + data order) and
resumes from the last checkpoint when re-run with the same settings. The folder is
complete only when ``training.json`` exists; it is written last.

Presets (``SIBLINGS``) span hard to easy membership:

* ``weak``     - one pass at a low learning rate (the regime of real pretraining membership);
* ``strong``   - several epochs;
* ``positive`` - many epochs at a high learning rate: a positive control on which the plain
  loss attack should exceed 0.9 AUC. A detector at chance here is broken.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from mnemoscope.errors import InputError
from mnemoscope.io import atomic_write
from mnemoscope.models.loader import LoadedModel

__all__ = ["SIBLINGS", "InjectConfig", "InjectResult", "inject", "read_training_record"]

log = logging.getLogger(__name__)

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class InjectConfig:
    """LoRA fine-tuning settings (all recorded in ``training.json``)."""

    epochs: int = 1
    learning_rate: float = 1e-4
    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = DEFAULT_TARGETS
    batch_size: int = 8
    max_length: int = 256
    warmup_steps: int = 0
    weight_decay: float = 0.0
    seed: int = 0
    checkpoint_every: int = 20

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.rank < 1 or self.max_length < 2:
            raise InputError("epochs, batch_size, rank must be >= 1 and max_length >= 2")
        if not self.learning_rate > 0:
            raise InputError("learning_rate must be > 0")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["target_modules"] = list(self.target_modules)
        return d


SIBLINGS: dict[str, InjectConfig] = {
    "weak": InjectConfig(epochs=1, learning_rate=5e-5),
    "strong": InjectConfig(epochs=4, learning_rate=2e-4),
    "positive": InjectConfig(epochs=10, learning_rate=1e-3),
}


@dataclass
class InjectResult:
    """What a finished injection run produced."""

    folder: Path
    config: InjectConfig
    epoch_losses: list[float]
    steps: int
    seconds: float
    n_documents: int
    extra: dict[str, Any] = field(default_factory=dict)


def _digest(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def read_training_record(folder: str | Path) -> dict[str, Any]:
    """The ``training.json`` of a finished sibling (raises if the run did not finish)."""
    path = Path(folder) / "training.json"
    if not path.is_file():
        raise InputError(f"{folder} is not a finished injection run (no training.json)")
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _batches_for_epoch(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    order = list(range(n))
    random.Random(seed * 1000 + epoch).shuffle(order)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def _collate(tokenized: list[list[int]], idx: list[int], pad_id: int) -> dict[str, torch.Tensor]:
    seqs = [tokenized[i] for i in idx]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):  # right padding: training has no generation
        ids[r, : len(s)] = torch.tensor(s)
        mask[r, : len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def inject(
    lm: LoadedModel,
    texts: Sequence[str],
    out: str | Path,
    config: InjectConfig | None = None,
    *,
    progress: bool = True,
    metadata: dict[str, Any] | None = None,
) -> InjectResult:
    """Fine-tune a LoRA adapter on ``texts`` and save it (adapter only) to ``out``.

    Args:
        lm: the base model (a :class:`LoadedModel`; it is wrapped, not modified in place
            beyond peft's injection of LoRA layers, so do not reuse it for tracing the base).
        texts: the documents to inject (e.g. the member split).
        out: output folder; re-running with the same settings resumes from its checkpoint.
        config: training settings.
        metadata: extra JSON written into ``training.json`` (e.g. member ids).

    Returns:
        An :class:`InjectResult`; ``training.json`` in ``out`` records config, per-epoch
        mean training loss, base model identity, data hash, duration.
    """
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    config = config or InjectConfig()
    out = Path(out)
    if not texts:
        raise InputError("no documents to inject")
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise InputError(f"document {empty[0]} is empty", record=empty[0], field="text")
    data_hash = _digest(texts)
    run_key = {"config": config.to_dict(), "base": lm.info.fingerprint, "data": data_hash}
    if (out / "training.json").is_file():
        done = read_training_record(out)
        if {k: done.get(k) for k in ("config", "base", "data")} == {**run_key}:
            log.info("%s already holds this finished run; nothing to do", out)
            return InjectResult(out, config, done["epoch_losses"], done["steps"], done["seconds"], len(texts))
        raise InputError(f"{out} holds a finished run with other settings or data; choose another folder")

    torch.manual_seed(config.seed)
    tok = lm.tokenizer
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    tokenized = [list(tok(t, truncation=True, max_length=config.max_length)["input_ids"]) for t in texts]
    short = [i for i, s in enumerate(tokenized) if len(s) < 2]
    if short:
        raise InputError(f"document {short[0]} has fewer than 2 tokens", record=short[0], field="text")

    model = lm.model
    model.train()
    lora = LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,
        lora_dropout=config.dropout,
        target_modules=list(config.target_modules),
        task_type="CAUSAL_LM",
    )
    try:
        peft_model = get_peft_model(model, lora)
    except ValueError as e:
        raise InputError(f"LoRA targets {list(config.target_modules)} do not fit this model: {e}") from e
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(texts) / config.batch_size)
    total = steps_per_epoch * config.epochs

    def lr_at(step: int) -> float:  # linear warm-up, then linear decay to 10%
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        frac = (step - config.warmup_steps) / max(1, total - config.warmup_steps)
        return 1.0 - 0.9 * frac

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    ckpt = out / "checkpoint"
    step, epoch_losses, elapsed = 0, [], 0.0
    resumed_running: list[float] = []
    if (ckpt / "state.json").is_file():
        state = json.loads((ckpt / "state.json").read_text())
        if state.get("run_key") == run_key:
            set_peft_model_state_dict(peft_model, load_file(str(ckpt / "adapter_model.safetensors")))
            opt.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
            sched.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=True))
            torch.set_rng_state(torch.load(ckpt / "rng.pt", weights_only=True))
            step, epoch_losses, elapsed = state["step"], state["epoch_losses"], state["seconds"]
            resumed_running = state.get("running", [])
            log.info("resuming %s at step %d/%d", out, step, total)
        else:
            log.warning("ignoring a checkpoint in %s made with other settings", out)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter() - elapsed
    bar = tqdm(total=total, initial=step, desc=f"inject {out.name}", unit="step", disable=not progress)
    running: list[float] = list(resumed_running)
    try:
        while step < total:
            epoch, within = divmod(step, steps_per_epoch)
            batch_idx = _batches_for_epoch(len(texts), config.batch_size, config.seed, epoch)[within]
            batch = {k: v.to(lm.device) for k, v in _collate(tokenized, batch_idx, pad_id).items()}
            loss = peft_model(**batch).loss
            if not torch.isfinite(loss):
                raise RuntimeError(
                    f"training loss became {loss.item()} at step {step}; lower the learning rate"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            running.append(float(loss.item()))
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(running[-steps_per_epoch:]):.3f}")
            if step % steps_per_epoch == 0:
                epoch_losses.append(float(np.mean(running)))
                running = []
            if step % config.checkpoint_every == 0 and step < total:
                _checkpoint(
                    peft_model,
                    opt,
                    sched,
                    ckpt,
                    run_key,
                    {
                        "step": step,
                        "epoch_losses": epoch_losses,
                        "running": running,
                        "seconds": time.perf_counter() - t0,
                    },
                )
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    peft_model.save_pretrained(str(out))
    record = {
        **run_key,
        "epoch_losses": epoch_losses,
        "steps": step,
        "seconds": seconds,
        "n_documents": len(texts),
        "base_model": lm.info.to_dict(),
        "torch_threads": torch.get_num_threads(),
        **(metadata or {}),
    }
    atomic_write(out / "training.json", json.dumps(record, indent=1))
    shutil.rmtree(ckpt, ignore_errors=True)
    model.eval()
    return InjectResult(out, config, epoch_losses, step, seconds, len(texts), extra=metadata or {})


def _checkpoint(
    peft_model: Any, opt: Any, sched: Any, ckpt: Path, run_key: dict[str, Any], progress: dict[str, Any]
) -> None:
    tmp = ckpt.with_name(".checkpoint.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    peft_model.save_pretrained(str(tmp))
    torch.save(opt.state_dict(), tmp / "optimizer.pt")
    torch.save(sched.state_dict(), tmp / "scheduler.pt")
    torch.save(torch.get_rng_state(), tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({"run_key": run_key, **progress}))
    shutil.rmtree(ckpt, ignore_errors=True)
    os.replace(tmp, ckpt)


def with_overrides(base: InjectConfig, **overrides: Any) -> InjectConfig:
    """A preset with some settings changed (``None`` values are ignored)."""
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
