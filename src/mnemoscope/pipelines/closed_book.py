"""The weaker test a chat-only API allows: the answer generated with and without the context.

No verdict and no guarantee: an API without prompt log-probs cannot teacher-force, so RePCS and the
audit's verdict cannot be computed; this compares two greedy generations instead
(``mnemoscope audit --endpoint URL --closed-book-test``).
"""

from __future__ import annotations

from typing import Any

from mnemoscope.models.endpoint import EndpointClient, EndpointError
from mnemoscope.trace.templates import PromptBuilder

__all__ = ["CLOSED_BOOK_LABEL", "closed_book_comparison"]


CLOSED_BOOK_LABEL = (
    "closed-book generation comparison: a different, weaker test than RePCS (no teacher forcing, no "
    "verdict, no guarantee); an answer the model also gives without the context did not need the context"
)


def closed_book_comparison(
    client: EndpointClient,
    context: str,
    query: str,
    *,
    template: str = "A",
    max_tokens: int = 32,
) -> dict[str, Any]:
    """What is sound on a chat-only API (no prompt log-probs): generate the answer with and without
    the context through ``/v1/chat/completions`` (greedy) and compare the two generations.

    Returns the two answers, whether they match after normalisation, their word overlap
    (Jaccard) and ``label`` (:data:`CLOSED_BOOK_LABEL`). No verdict is derived from it.
    """
    import re

    b = PromptBuilder(template=template, chat=False)

    def ask(ctx: str) -> str:
        body = {
            "model": client.model,
            "messages": [{"role": "user", "content": b.render(ctx, query)}],
            "temperature": 0.0,
            "max_tokens": max_tokens,
        }
        data = client.request("POST", "/chat/completions", body)
        try:
            return str(data["choices"][0]["message"]["content"] or "")
        except (KeyError, IndexError, TypeError) as e:
            raise EndpointError("POST /chat/completions returned no message", endpoint=client.endpoint) from e

    with_ctx, without = ask(context), ask("")

    def words(s: str) -> set[str]:
        return set(re.findall(r"\w+", s.lower()))

    a, b2 = words(with_ctx), words(without)
    return {
        "test": "closed-book-comparison",
        "label": CLOSED_BOOK_LABEL,
        "answer_with_context": with_ctx,
        "answer_without_context": without,
        "same_answer": " ".join(sorted(a)) == " ".join(sorted(b2)),
        "word_jaccard": len(a & b2) / max(1, len(a | b2)),
        "endpoint": client.endpoint,
        "backend": "endpoint",
        "endpoint_method": "chat-completions-generations",
    }
