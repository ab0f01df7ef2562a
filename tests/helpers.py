"""Tiny in-memory models and tokenizers for fast, exact tests."""

from __future__ import annotations

from typing import Any

import torch

CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def tiny_tokenizer() -> Any:
    """Byte-level tokenizer: every byte is a token (260 ids incl. 4 specials)."""
    from tokenizers import Tokenizer, decoders, models
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3}
    for ch in sorted(ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tk.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


VOCAB = 260


def tiny_config(arch: str = "llama", *, layers: int = 3, d: int = 64) -> Any:
    from transformers import AutoConfig

    common: dict[str, Any] = {"vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}
    if arch == "gpt2":
        return AutoConfig.for_model("gpt2", n_layer=layers, n_embd=d, n_head=4, n_positions=512, **common)
    if arch == "gpt_neox":
        return AutoConfig.for_model(
            "gpt_neox",
            num_hidden_layers=layers,
            hidden_size=d,
            num_attention_heads=4,
            intermediate_size=2 * d,
            max_position_embeddings=512,
            **common,
        )
    extra: dict[str, Any] = {}
    if arch == "gemma3_text":
        extra = {
            "head_dim": 16,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"] * layers,
        }
        extra["layer_types"] = extra["layer_types"][:layers]
    return AutoConfig.for_model(
        arch,
        num_hidden_layers=layers,
        hidden_size=d,
        intermediate_size=2 * d,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        **common,
        **extra,
    )


def tiny_model(arch: str = "llama", *, seed: int = 0, layers: int = 3, d: int = 64) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(arch, layers=layers, d=d), dtype=torch.float32)
    model.eval()
    return model


def tiny_lm(
    arch: str = "llama", *, seed: int = 0, layers: int = 3, d: int = 64, max_positions: int | None = None
):
    from mnemoscope.models import from_objects

    model = tiny_model(arch, seed=seed, layers=layers, d=d)
    if max_positions is not None:
        model.config.max_position_embeddings = max_positions
    return from_objects(model, tiny_tokenizer(), name=f"tiny-{arch}")


def zor_records(n: int) -> list[Any]:
    """``n`` labelled calibration records on invented towns and rivers (alternating labels, an
    expected answer and a graded difficulty each): what the draw and calibration tests feed."""
    from mnemoscope.data.records import Record

    return [
        Record(
            id=f"r{i}",
            context=f"The town of Zor{i} lies on the river Ka{i % 5}.",
            query=f"Where is Zor{i}?",
            label=i % 2,
            extra={"answer": f"Ka{i % 5}", "difficulty": 1 + i % 3},
        )
        for i in range(n)
    ]


def calibrate_on_verified(base_url: str, out: Any, per_label: int) -> Any:
    """An endpoint profile calibrated against the server at ``base_url`` on the first ``per_label``
    context-needed and ``per_label`` memory items of the verified context-reliance set
    (``benchmarks/results/verdict/verified.jsonl``), the default model's chat template."""
    import json
    from pathlib import Path

    from mnemoscope.audit.calibrate import calibrate
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.audit.tracing import EndpointTracer
    from mnemoscope.data.records import Record
    from mnemoscope.models.endpoint import EndpointClient, EndpointConfig

    verified = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "verdict" / "verified.jsonl"
    items = [json.loads(x) for x in verified.read_text().splitlines() if x.strip()]
    picked = [it for it in items if it["label"] == 0][:per_label] + [it for it in items if it["label"] == 1][
        :per_label
    ]
    recs = [Record(id=it["id"], context=it["context"], query=it["query"], label=it["label"]) for it in picked]
    with EndpointClient(EndpointConfig(base_url, concurrency=1, timeout=300)) as c:
        return calibrate(
            EndpointTracer(c, chat_template="default"), recs, out, CalibrationConfig(), progress=False
        )


def prom_series(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one Prometheus series family in the text exposition format."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, val = line.rsplit(" ", 1)
            out[key[len(name) :]] = float(val)
    return out
