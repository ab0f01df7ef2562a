"""Prompt templates and model specs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemoscope.errors import InputError, ModelLoadError
from mnemoscope.models import ModelSpec
from mnemoscope.trace import PROMPT_TEMPLATES, PromptBuilder


def test_crm_templates_render_and_empty_context_keeps_structure():
    b = PromptBuilder(template="B")
    with_c, without = b.pair("Doc text.", "Q?")
    assert (
        with_c
        == "Based on the following document, answer the question.\n\nDocument: Doc text.\n\nQuestion: Q?\n\nAnswer:"
    )
    assert without == with_c.replace("Doc text.", "")
    assert set(PROMPT_TEMPLATES) == {"A", "B", "C", "D"}
    assert PromptBuilder(template="reference").prompt_template.name == "C"


def test_user_braces_are_not_format_fields():
    assert "{x} {query}" in PromptBuilder().render("{x} {query}", "q")


def test_task_templates():
    b = PromptBuilder(task="continuation")
    assert (
        b.render("ctx", "Once upon")
        == "Context: ctx\n\nQuestion: Continue the following passage: Once upon\n\nAnswer:"
    )
    assert "Summarize" in PromptBuilder(task="summarization").render("ctx", "ignored")
    assert (
        b.task_template.max_new_tokens == 32 and PromptBuilder(task="qa").task_template.max_new_tokens == 64
    )


def test_unknown_template_suggests():
    with pytest.raises(InputError, match="did you mean"):
        PromptBuilder(task="continuaton")
    with pytest.raises(InputError, match="unknown template 'E'"):
        PromptBuilder(template="E")


def test_chat_needs_a_chat_template():
    class NoChat:
        chat_template = None

    with pytest.raises(InputError, match="no chat template"):
        PromptBuilder(chat=True).build("c", "q", NoChat())


def test_spec_parsing(tmp_path):
    assert ModelSpec.parse("default").kind == "default"
    s = ModelSpec.parse("default::runs/weak")
    assert s.base == "default" and s.adapter == Path("runs/weak") and str(s) == "default::runs/weak"
    assert ModelSpec.parse("default", adapter="x").adapter == Path("x")
    assert ModelSpec.parse("HuggingFaceTB/SmolLM2-135M").kind == "hub"
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert ModelSpec.parse(str(tmp_path / "m.gguf")).kind == "gguf"
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert ModelSpec.parse(str(folder)).kind == "folder"
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        _ = ModelSpec.parse(str(tmp_path / "missing.gguf")).kind
    with pytest.raises(ModelLoadError, match="no such model"):
        _ = ModelSpec.parse("./not/here").kind
    with pytest.raises(ModelLoadError, match="already names an adapter"):
        ModelSpec.parse("default::a", adapter="b")
    with pytest.raises(ModelLoadError, match="empty model spec"):
        ModelSpec.parse("  ")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelLoadError, match=r"not a \.gguf"):
        _ = ModelSpec.parse(str(tmp_path / "notes.txt")).kind
