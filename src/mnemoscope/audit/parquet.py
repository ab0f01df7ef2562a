"""``results.jsonl`` of a batch audit as Parquet (``results.parquet``), for columnar readers.

One fixed schema whatever the records hold: the top-level scalars as typed columns, the nested
fields as JSON text. Written beside the results folder's ``results.jsonl``
(:mod:`mnemoscope.audit.results`) by any engine that wants it (the Ray engine does by default);
pyarrow is imported only when a file is written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["PARQUET_JSON_COLUMNS", "PARQUET_SCALAR_COLUMNS", "write_results_parquet"]

#: top-level fields kept as typed columns
PARQUET_SCALAR_COLUMNS = (
    "id",
    "source",
    "p_memory",
    "answer",
    "summary",
    "rule",
    "n_steps",
    "identical_prompts",
)
#: nested fields, each stored as its JSON text
PARQUET_JSON_COLUMNS = ("evidence", "guarantee", "tokens", "spans", "repcs", "crm", "notes")


def write_results_parquet(results_jsonl: Path, dest: Path) -> int:
    """``results.jsonl`` as Parquet at ``dest`` (written to a temporary name, then renamed).

    A torn last line (a write a crash cut; redone on resume) is skipped. Returns the number of rows.

    >>> import tempfile, pyarrow.parquet as pq
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "results.jsonl").write_text('{"id": "a", "source": "context", "tokens": []}\\n{"id": "b')
    >>> write_results_parquet(d / "results.jsonl", d / "results.parquet")
    1
    >>> pq.read_table(d / "results.parquet").column("source").to_pylist()
    ['context']
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = {c: [] for c in (*PARQUET_SCALAR_COLUMNS, *PARQUET_JSON_COLUMNS)}
    if results_jsonl.is_file():
        with results_jsonl.open(encoding="utf-8") as f:
            for line in f:
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line: redone on resume
                for c in PARQUET_SCALAR_COLUMNS:
                    cols[c].append(d.get(c))
                for c in PARQUET_JSON_COLUMNS:
                    cols[c].append(json.dumps(d.get(c), ensure_ascii=False))
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("source", pa.string()),
            ("p_memory", pa.float64()),
            ("answer", pa.string()),
            ("summary", pa.string()),
            ("rule", pa.string()),
            ("n_steps", pa.int64()),
            ("identical_prompts", pa.bool_()),
            *[(c, pa.string()) for c in PARQUET_JSON_COLUMNS],
        ]
    )
    table = pa.table({c: cols[c] for c in schema.names}, schema=schema)
    tmp = dest.with_name(f".{dest.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, dest)
    return table.num_rows
