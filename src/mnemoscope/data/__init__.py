"""Input records: JSONL reading and validation."""

from mnemoscope.data.records import (
    DEFAULT_QUERY_CHARS,
    LABEL_VALUES,
    Record,
    RecordError,
    iter_records,
    parse_label,
    read_records,
)

__all__ = [
    "DEFAULT_QUERY_CHARS",
    "LABEL_VALUES",
    "Record",
    "RecordError",
    "iter_records",
    "parse_label",
    "read_records",
]
