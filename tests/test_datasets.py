"""Membership-dataset loaders: formats, auto-detection, per-line errors, labels, token budgets."""

from __future__ import annotations

import csv
import json
import sys
import types

import pytest

from mnemoscope.bench.datasets import Document, check_binary_labels, load_documents, truncate_documents
from mnemoscope.data import RecordError
from mnemoscope.errors import InputError


def _jsonl(path, lines):
    path.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8"
    )
    return path


# --- formats ------------------------------------------------------------------------------


def test_generic_jsonl(tmp_path):
    path = _jsonl(
        tmp_path / "g.jsonl",
        [
            {"id": "a", "text": "alpha text", "label": "member"},
            "",
            {"context": "beta context", "query": "q?", "label": 0},
            {"id": 7, "text": "preferred", "context": "ignored", "label": True},
            {"id": "u", "text": "unlabelled"},
        ],
    )
    docs, errors = load_documents(path)
    assert errors == []
    assert [(d.id, d.text, d.label, d.line) for d in docs] == [
        ("a", "alpha text", 1, 1),
        ("L3", "beta context", 0, 3),
        ("7", "preferred", 1, 4),
        ("u", "unlabelled", None, 5),
    ]
    assert docs[1].meta == {"query": "q?"}
    assert docs[2].meta == {"context": "ignored"}


def test_wikimia_jsonl_and_json_array(tmp_path):
    rows = [{"input": "member text", "label": 1}, {"input": "fresh text", "label": 0}]
    for path in (_jsonl(tmp_path / "w.jsonl", rows), tmp_path / "w.json"):
        if path.suffix == ".json":
            path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
        for fmt in ("auto", "wikimia"):
            docs, errors = load_documents(path, format=fmt)
            assert errors == []
            assert [(d.id, d.text, d.label, d.line) for d in docs] == [
                ("wikimia-0", "member text", 1, 1),
                ("wikimia-1", "fresh text", 0, 2),
            ]


def test_bookmia_csv_keeps_extra_columns(tmp_path):
    path = tmp_path / "bookmia.csv"
    with path.open("w", newline="", encoding="utf-8-sig") as f:  # Excel-style BOM
        w = csv.writer(f)
        w.writerow(["book_id", "book", "snippet_id", "snippet", "label"])
        w.writerow([3, "Moby Dick", 0, "Call me Ishmael.\nSome years ago", 1])  # spans two lines
        w.writerow([9, "New Book", 5, "A fresh snippet", 0])
        w.writerow([9, "New Book", 6, "bad label", 2])
    docs, errors = load_documents(path)
    assert [(d.id, d.label, d.line) for d in docs] == [("bookmia-0", 1, 2), ("bookmia-1", 0, 4)]
    assert docs[0].text == "Call me Ishmael.\nSome years ago"
    assert docs[0].meta == {"book_id": "3", "book": "Moby Dick", "snippet_id": "0"}
    assert [(e.line, e.id, e.field) for e in errors] == [(5, "bookmia-2", "label")]
    assert "not binary" in errors[0].message or "not one of" in errors[0].message


def test_bookmia_jsonl(tmp_path):
    path = _jsonl(tmp_path / "b.jsonl", [{"book": "X", "snippet": "s one", "label": "nonmember"}])
    docs, errors = load_documents(path, format="bookmia")
    assert errors == []
    assert docs == [Document("bookmia-0", "s one", 0, 1, {"book": "X"})]


def test_bookmia_with_an_input_column_is_detected_by_its_book_fields(tmp_path):
    # a BookMIA export whose text column is "input" (as WikiMIA's) is BookMIA: book/book_id decide
    rows = [
        {"book_id": 3, "book": "Moby Dick", "input": "Call me Ishmael.", "label": 1},
        {"book_id": 9, "book": "New Book", "input": "A fresh snippet", "label": 0},
    ]
    path = _jsonl(tmp_path / "b.jsonl", rows)
    docs, errors = load_documents(path)
    assert errors == []
    assert [(d.id, d.text, d.label) for d in docs] == [
        ("bookmia-0", "Call me Ishmael.", 1),
        ("bookmia-1", "A fresh snippet", 0),
    ]
    assert docs[0].meta == {"book_id": 3, "book": "Moby Dick"}
    # --format overrides detection
    docs, _ = load_documents(path, format="wikimia")
    assert [d.id for d in docs] == ["wikimia-0", "wikimia-1"]
    # without the distinguishing fields, "input" is still WikiMIA
    path = _jsonl(tmp_path / "w.jsonl", [{"input": "x y", "label": 1}])
    assert load_documents(path)[0][0].id == "wikimia-0"


def test_mimir_folder_jsonl_and_txt(tmp_path):
    folder = tmp_path / "mimir"
    folder.mkdir()
    _jsonl(folder / "member.jsonl", ['"seen document one"', {"id": "m-x", "text": "seen two"}])
    (folder / "nonmembers.txt").write_text("unseen a\n\nunseen b\n", encoding="utf-8")
    docs, errors = load_documents(folder)
    assert errors == []
    assert [(d.id, d.text, d.label, d.line) for d in docs] == [
        ("member-0", "seen document one", 1, 1),
        ("m-x", "seen two", 1, 2),
        ("nonmember-0", "unseen a", 0, 1),
        ("nonmember-1", "unseen b", 0, 3),
    ]
    assert check_binary_labels(docs) == (2, 2)


def test_mimir_json_object_and_max_docs(tmp_path):
    path = tmp_path / "mimir.json"
    path.write_text(json.dumps({"member": ["m1", "m2", "m3"], "nonmember": ["n1", {"text": "n2"}]}))
    docs, errors = load_documents(path)
    assert errors == []
    assert [(d.id, d.label) for d in docs] == [
        ("member-0", 1),
        ("member-1", 1),
        ("member-2", 1),
        ("nonmember-0", 0),
        ("nonmember-1", 0),
    ]
    capped, _ = load_documents(path, format="mimir", max_docs=3)
    assert [d.id for d in capped] == ["member-0", "member-1", "nonmember-0"]


def test_mimir_folder_errors(tmp_path):
    folder = tmp_path / "half"
    folder.mkdir()
    (folder / "member.jsonl").write_text('"x"\n')
    with pytest.raises(InputError, match="expected one nonmember file"):
        load_documents(folder)
    (folder / "nonmember.jsonl").write_text('"y"\n')
    (folder / "nonmember.txt").write_text("y\n")
    with pytest.raises(InputError, match="several candidates"):
        load_documents(folder)
    with pytest.raises(InputError, match="only the 'mimir' format reads folders"):
        load_documents(folder, format="wikimia")


def test_mimir_label_contradiction(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"member": [{"text": "a", "label": 0}], "nonmember": ["b"]}))
    docs, errors = load_documents(path)
    assert [d.id for d in docs] == ["nonmember-0"]
    assert [(e.line, e.id, e.field) for e in errors] == [(1, "member-0", "label")]


# --- auto-detection -----------------------------------------------------------------------


def test_auto_detection_fails_clearly(tmp_path):
    ambiguous = _jsonl(tmp_path / "amb.jsonl", [{"input": "x", "text": "y", "label": 1}])
    with pytest.raises(InputError, match=r"ambiguous dataset format.*wikimia"):
        load_documents(ambiguous)
    unknown = _jsonl(tmp_path / "unk.jsonl", [{"body": "x", "label": 1}])
    with pytest.raises(InputError, match=r"cannot detect the dataset format.*\['body', 'label'\]"):
        load_documents(unknown)
    garbage = _jsonl(tmp_path / "garbage.jsonl", ["{not json", "[1, 2]"])
    with pytest.raises(InputError, match="no JSON object record"):
        load_documents(garbage)
    # an explicit format resolves the ambiguity
    docs, _ = load_documents(ambiguous, format="wikimia")
    assert [(d.text, d.meta) for d in docs] == [("x", {"text": "y"})]


def test_auto_detection_skips_a_bad_first_line(tmp_path):
    path = _jsonl(tmp_path / "w.jsonl", ["{broken", {"input": "ok", "label": 0}])
    docs, errors = load_documents(path)
    assert [d.id for d in docs] == ["wikimia-1"]
    assert [(e.line, e.field) for e in errors] == [(1, None)]


def test_bad_arguments(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    with pytest.raises(InputError, match="unknown dataset format"):
        load_documents(path, format="parquet")
    with pytest.raises(InputError, match="only applies to hub datasets"):
        load_documents(path, split="train")
    with pytest.raises(InputError, match="dataset not found"):
        load_documents(tmp_path / "missing.jsonl")
    with pytest.raises(InputError, match="MIMIR needs a folder"):
        load_documents(path, format="mimir")


# --- per-line errors ----------------------------------------------------------------------


def test_bad_lines_are_reported_and_valid_lines_load(tmp_path):
    path = _jsonl(
        tmp_path / "bad.jsonl",
        [
            {"id": "ok1", "text": "fine", "label": 1},  # 1
            "{not json",  # 2
            {"id": "nt", "label": 0},  # 3
            {"id": "num", "text": 5, "label": 0},  # 4
            {"id": "blank", "text": "   ", "label": 0},  # 5
            {"id": "lab", "text": "t", "label": "perhaps"},  # 6
            {"id": "two", "text": "t", "label": 2},  # 7
            {"id": "ok1", "text": "again", "label": 0},  # 8
            {"id": ["x"], "text": "t"},  # 9
            {"id": "ok2", "text": "also fine", "label": "nonmember"},  # 10
            {"id": "ctx", "context": 3},  # 11
        ],
    )
    docs, errors = load_documents(path)
    assert [(d.id, d.label, d.line) for d in docs] == [("ok1", 1, 1), ("ok2", 0, 10)]
    assert [(e.line, e.id, e.field) for e in errors] == [
        (2, None, None),
        (3, "nt", "text"),
        (4, "num", "text"),
        (5, "blank", "text"),
        (6, "lab", "label"),
        (7, "two", "label"),
        (8, "ok1", "id"),
        (9, None, "id"),
        (11, "ctx", "context"),
    ]
    by_line = {e.line: e.message for e in errors}
    assert by_line[2].startswith("invalid JSON")
    assert "expected 'text' or 'context'" in by_line[3]
    assert "got int" in by_line[4]
    assert by_line[5] == "is empty"
    assert "did you mean" not in by_line[6] and "perhaps" in by_line[6]
    assert "not binary" in by_line[7]
    assert by_line[8] == "duplicate id (first seen on line 1)"
    assert all(isinstance(e, RecordError) for e in errors)


def test_wikimia_missing_fields(tmp_path):
    path = _jsonl(tmp_path / "w.jsonl", [{"input": "a", "label": 1}, {"input": "b"}, {"label": 0}])
    docs, errors = load_documents(path, format="wikimia")
    assert [d.id for d in docs] == ["wikimia-0"]
    assert [(e.line, e.id, e.field, e.message) for e in errors] == [
        (2, "wikimia-1", "label", "missing field"),
        (3, "wikimia-2", "input", "missing field (expected 'input')"),
    ]


def test_min_chars(tmp_path):
    path = _jsonl(tmp_path / "m.jsonl", [{"text": "short"}, {"text": "long enough text"}])
    docs, errors = load_documents(path, min_chars=10)
    assert [d.id for d in docs] == ["L2"]
    assert [(e.line, e.field) for e in errors] == [(1, "text")]
    assert "fewer than min_chars=10" in errors[0].message


def test_on_error_raise_stops_at_first(tmp_path):
    path = _jsonl(tmp_path / "r.jsonl", [{"text": "ok"}, {"id": "x", "text": ""}, "{bad"])
    with pytest.raises(InputError, match=r"line 2 \(id x\): field 'text': is empty") as info:
        load_documents(path, on_error="raise")
    assert (info.value.record, info.value.field) == ("x", "text")


def test_max_docs_stops_reading(tmp_path):
    path = _jsonl(
        tmp_path / "many.jsonl", [{"text": f"doc {i}", "label": i % 2} for i in range(10)] + ["{bad"]
    )
    docs, errors = load_documents(path, max_docs=3)
    assert [d.id for d in docs] == ["L1", "L2", "L3"]
    assert errors == []


def test_csv_row_with_wrong_column_count(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("snippet,label\ngood one,1\ntoo,many,cells\n\nlast,0\n", encoding="utf-8")
    docs, errors = load_documents(path)
    assert [(d.id, d.line) for d in docs] == [("bookmia-0", 2), ("bookmia-2", 5)]
    assert [(e.line, e.field) for e in errors] == [(3, None)]
    assert "3 columns" in errors[0].message


# --- labels and token budgets -------------------------------------------------------------


def test_check_binary_labels():
    docs = [Document("a", "x", 1), Document("b", "y", 1)]
    with pytest.raises(InputError, match=r"single-class dataset: AUC is undefined \(n_pos=2, n_neg=0\)"):
        check_binary_labels(docs)
    with pytest.raises(InputError, match=r"n_pos=0, n_neg=0"):
        check_binary_labels([])
    with pytest.raises(InputError, match="no label"):
        check_binary_labels([*docs, Document("c", "z", None)])
    assert check_binary_labels([*docs, Document("c", "z", 0)]) == (2, 1)


@pytest.fixture(scope="module")
def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(["one", "two", "three", "four", "five", "six"])}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def _docs():
    return [
        Document("short", "one two", 1, 1),
        Document("long", "one two three four five six", 0, 2, {"src": "x"}),
        Document("exact", "three four five", 1, 3),
    ]


def test_truncate_policy(word_tokenizer):
    kept, warnings = truncate_documents(_docs(), word_tokenizer, 3)
    assert [d.id for d in kept] == ["short", "long", "exact"]
    assert kept[1].text == "one two three"
    assert kept[1].meta == {"src": "x", "truncated_from_tokens": 6}
    assert kept[0] == _docs()[0] and kept[2] == _docs()[2]
    assert [(w.line, w.id, w.field) for w in warnings] == [(2, "long", "text")]
    assert warnings[0].message == "truncated from 6 to 3 tokens"


def test_reject_policy(word_tokenizer):
    kept, errors = truncate_documents(_docs(), word_tokenizer, 3, policy="reject")
    assert [d.id for d in kept] == ["short", "exact"]
    assert [(e.line, e.id, e.field) for e in errors] == [(2, "long", "text")]
    assert "6 tokens" in errors[0].message and "max_tokens=3" in errors[0].message
    with pytest.raises(InputError, match="policy"):
        truncate_documents(_docs(), word_tokenizer, 3, policy="drop")  # type: ignore[arg-type]
    assert truncate_documents([], word_tokenizer, 3) == ([], [])


# --- hub ----------------------------------------------------------------------------------


def test_hub_needs_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(InputError) as info:
        load_documents("swj0419/WikiMIA", split="WikiMIA_length64")
    assert str(info.value) == (
        "loading hub datasets needs the optional package 'datasets' (pip install datasets); or pass a local file"
    )


def _fake_datasets(monkeypatch, load):
    mod = types.ModuleType("datasets")
    mod.load_dataset = load  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", mod)


def test_hub_offline_and_unreachable(monkeypatch):
    def unreachable(name, split=None):
        raise ConnectionError("Couldn't reach 'swj0419/WikiMIA' on the Hub (LocalEntryNotFoundError)")

    _fake_datasets(monkeypatch, unreachable)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        InputError, match=r"'swj0419/WikiMIA' \(split 'WikiMIA_length64'\).*HF_HUB_OFFLINE.*local file"
    ):
        load_documents("swj0419/WikiMIA", split="WikiMIA_length64")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(
        InputError, match=r"'swj0419/BookMIA'.*ConnectionError: Couldn't reach.*pass a local file"
    ):
        load_documents("swj0419/BookMIA")


def test_hub_rows_are_parsed(monkeypatch):
    calls = []

    def load(name, split=None):
        calls.append((name, split))
        if name == "swj0419/WikiMIA":
            return [{"input": "in training", "label": 1}, {"input": "after cutoff", "label": 0}]
        if name == "iamgroot42/mimir":
            return [{"member": "m", "nonmember": "n", "member_neighbors": ["m2"]}]
        return {"a": [], "b": []}  # a DatasetDict with several splits

    _fake_datasets(monkeypatch, load)
    docs, errors = load_documents("swj0419/WikiMIA", split="WikiMIA_length32")
    assert calls[0] == ("swj0419/WikiMIA", "WikiMIA_length32")
    assert errors == []
    assert [(d.id, d.text, d.label, d.line) for d in docs] == [
        ("wikimia-0", "in training", 1, 1),
        ("wikimia-1", "after cutoff", 0, 2),
    ]
    docs, _ = load_documents("iamgroot42/mimir", split="ngram_13_0.2")
    assert [(d.id, d.text, d.label) for d in docs] == [("member-0", "m", 1), ("nonmember-0", "n", 0)]
    with pytest.raises(InputError, match="has splits a, b; pass split="):
        load_documents("org/several")
