"""Chat templates rendered client-side, for prompts sent to an inference server.

A :class:`ChatTemplate` stands in for a tokenizer in :meth:`PromptBuilder.build`: it renders a
conversation the way transformers does (jinja2, sandboxed, ``trim_blocks``/``lstrip_blocks``) and
knows the texts that end a generated answer (:attr:`ChatTemplate.end_texts`: the template's own
end-of-turn marker and the EOS token's text). :func:`load_chat_template` reads one from a GGUF's
metadata, a jinja file, or the embedded default model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemoscope.errors import InputError

__all__ = ["ChatTemplate", "load_chat_template"]


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template rendered client-side the way transformers renders it (jinja2, sandboxed,
    ``trim_blocks`` and ``lstrip_blocks``), standing in for a tokenizer in
    :meth:`PromptBuilder.build`.

    Attributes:
        chat_template: the jinja source (``None``: plain prompts, no chat wrapping).
        eos_text: the end-of-sequence token's text (e.g. ``<|im_end|>``), for the EOS step.
        bos_text: the BOS token's text (passed to templates that use ``bos_token``).
        source: where the template came from (for the record).
    """

    chat_template: str | None
    eos_text: str | None = None
    bos_text: str | None = None
    source: str = "none"

    @property
    def sha256(self) -> str | None:
        import hashlib

        return None if self.chat_template is None else hashlib.sha256(self.chat_template.encode()).hexdigest()

    def apply_chat_template(
        self, messages: Sequence[dict[str, str]], tokenize: bool = False, add_generation_prompt: bool = True
    ) -> str:
        if self.chat_template is None:
            raise InputError("no chat template: pass --chat-template (a .gguf, a .jinja file or 'default')")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg: str) -> None:
            raise InputError(f"chat template error: {msg}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        tpl = env.from_string(self.chat_template)
        return tpl.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_text or "",
            eos_token=self.eos_text or "",
        )

    @property
    def end_texts(self) -> tuple[str, ...]:
        """Every text that ends a generated answer and is never part of it: the template's own
        end-of-turn marker (what it writes after an assistant message: ``<|im_end|>`` for ChatML
        models, ``<end_of_turn>`` for Gemma) and the EOS token's text, marker first."""
        out: list[str] = []
        marker = self.turn_end_text()
        for t in (marker, self.eos_text):
            if t and t not in out:
                out.append(t)
        return tuple(out)

    def turn_end_text(self) -> str | None:
        """The text the template writes right after an assistant message's content, up to the
        first whitespace (``None``: no template, or it writes nothing there)."""
        if self.chat_template is None:
            return None
        mark = "\x00mnemoscope-answer\x00"
        try:
            text = self.apply_chat_template(
                [{"role": "user", "content": "q"}, {"role": "assistant", "content": mark}],
                add_generation_prompt=False,
            )
        except Exception:  # a template that refuses this conversation: no marker known
            return None
        if mark not in text:
            return None
        after = text.split(mark, 1)[1]
        end = after.split()[0] if after.strip() else ""
        return end or None

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "sha256": self.sha256,
            "eos_text": self.eos_text,
            "bos_text": self.bos_text,
            "chat_template": self.chat_template,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChatTemplate:
        return cls(
            chat_template=d.get("chat_template"),
            eos_text=d.get("eos_text"),
            bos_text=d.get("bos_text"),
            source=str(d.get("source", "profile")),
        )


def _gguf_meta(path: Path) -> dict[str, Any]:
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    out: dict[str, Any] = {}
    for key in (
        "tokenizer.chat_template",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
    ):
        f = r.fields.get(key)
        if f is None:
            continue
        part = f.parts[f.data[0]]
        out[key] = bytes(part).decode("utf-8") if key.endswith("template") else int(part[0])
    toks = r.fields.get("tokenizer.ggml.tokens")
    for key, name in (
        ("tokenizer.ggml.bos_token_id", "bos_text"),
        ("tokenizer.ggml.eos_token_id", "eos_text"),
    ):
        if toks is not None and key in out:
            out[name] = bytes(toks.parts[toks.data[out[key]]]).decode("utf-8", errors="replace")
    return out


def load_chat_template(spec: str | None, *, eos_text: str | None = None) -> ChatTemplate:
    """A chat template from ``spec``: ``None``/``"none"`` (plain prompts), ``"default"`` (the
    embedded default model's GGUF), a ``.gguf`` file (its ``tokenizer.chat_template`` and EOS
    token) or a jinja file. ``eos_text`` overrides the EOS text (needed for a plain jinja file
    or plain prompts when the EOS step should be scored).
    """
    if spec is None or spec == "none":
        return ChatTemplate(None, eos_text=eos_text, source="none")
    path: Path
    if spec == "default":
        from mnemoscope.models.loader import default_gguf_path

        path = default_gguf_path()
    else:
        path = Path(spec)
    if not path.is_file():
        raise InputError(f"chat template {spec!r}: no such file", field="chat_template")
    if path.suffix == ".gguf":
        meta = _gguf_meta(path)
        tpl = meta.get("tokenizer.chat_template")
        if not tpl:
            raise InputError(f"{path} has no tokenizer.chat_template", field="chat_template")
        return ChatTemplate(
            tpl,
            eos_text=eos_text or meta.get("eos_text"),
            bos_text=meta.get("bos_text"),
            source=f"gguf:{path.name}",
        )
    return ChatTemplate(path.read_text(encoding="utf-8"), eos_text=eos_text, source=f"file:{path.name}")
