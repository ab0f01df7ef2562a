"""The audit core: O(T) answer pieces, the one results folder, early stop, backends under one Auditor."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import tiny_tokenizer
from mnemoscope.audit.results import EarlyStop, EarlyStopError, ResultsFile, ResultsFolder, cause_key
from mnemoscope.audit.signals import answer_pieces
from mnemoscope.errors import InputError

# -- answer pieces: incremental decoding, same output as decoding growing prefixes ----------------


def _growing_prefix_pieces(tokenizer: Any, answer_ids: Any) -> list[str]:
    """The O(T^2) algorithm answer_pieces replaced (kept here as the reference)."""
    ids = [int(i) for i in answer_ids]
    full = tokenizer.decode(ids, skip_special_tokens=True)
    pieces: list[str] = []
    prev = ""
    for t in range(len(ids)):
        cur = tokenizer.decode(ids[: t + 1], skip_special_tokens=True)
        if cur.startswith(prev) and not cur.endswith("\ufffd"):
            pieces.append(cur[len(prev) :])
            prev = cur
        else:
            pieces.append("")
    if pieces and full.startswith(prev):
        pieces[-1] += full[len(prev) :]
    if "".join(pieces) != full:
        pieces = [tokenizer.decode([i], skip_special_tokens=True) for i in ids]
    return pieces


def _sentencepiece_tokenizer() -> Any:
    """A Llama-style tokenizer: Metaspace pieces, byte fallback, the decoder strips one leading space."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for w in (
        "▁",
        "▁the",
        "▁cat",
        "▁sat",
        "the",
        "cat",
        "s",
        "at",
        "▁Paris",
        "▁is",
        "1",
        "9",
        "0",
        ".",
        ",",
        "'",
    ):
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _smollm2_tokenizer() -> Any:
    from transformers import AutoTokenizer

    from mnemoscope.models.loader import _converted_gguf_folder, default_gguf_path
    from mnemoscope.paths import cache_dir

    # the converted folder the loader uses (converted once on a fresh machine, ~25 s; then cached)
    return AutoTokenizer.from_pretrained(_converted_gguf_folder(default_gguf_path(), cache_dir()))


def _tricky_sequences(tok: Any, vocab: int, rng: random.Random) -> list[list[int]]:
    texts = [
        "Paris is the capital.",
        " naïve café — 東京 🙂 1990, 'quoted'",
        "\u00e9\u0301 ü 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "  leading spaces and trailing  ",
        "the cat sat. 1990",
    ]
    seqs = [list(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    for ids in list(seqs):
        seqs.append(ids[1:])  # starting mid-word / mid-character
        seqs.append(ids[:-1])  # ending mid-character
        seqs.append([tok.eos_token_id, *ids, tok.eos_token_id])  # special tokens add ""
    seqs += [[rng.randrange(vocab) for _ in range(rng.randrange(1, 40))] for _ in range(150)]
    return seqs


@pytest.mark.parametrize("which", ["byte-level", "sentencepiece", "smollm2"])
def test_answer_pieces_equals_growing_prefix_decoding(which: str) -> None:
    tok = {
        "byte-level": tiny_tokenizer,
        "sentencepiece": _sentencepiece_tokenizer,
        "smollm2": _smollm2_tokenizer,
    }[which]()
    rng = random.Random(0)
    vocab = len(tok)
    n_split = 0
    for ids in _tricky_sequences(tok, vocab, rng):
        got = answer_pieces(tok, np.asarray(ids))
        assert got == _growing_prefix_pieces(tok, ids), (which, ids)
        assert "".join(got) == tok.decode(ids, skip_special_tokens=True) or len(got) == len(ids)
        n_split += sum(p == "" for p in got)
    assert n_split > 0  # the sequences did exercise incomplete characters / special tokens


def test_answer_pieces_decodes_windows_not_prefixes() -> None:
    """O(T): each decode call sees a bounded window, not the whole growing prefix."""
    tok = tiny_tokenizer()
    ids = tok("word " * 200, add_special_tokens=False)["input_ids"]
    lengths: list[int] = []
    real = tok.decode

    class Spy:
        def decode(self, x: Any, **kw: Any) -> str:
            lengths.append(len(x))
            return real(x, **kw)

    pieces = answer_pieces(Spy(), ids)
    assert "".join(pieces) == "word " * 200
    assert max(lengths[1:]) <= 3  # windows of the last committed token(s) + the new one
    assert len(lengths) <= 2 * len(ids) + 1


# -- the results folder ------------------------------------------------------------------------------


def test_results_file_cuts_a_torn_tail_before_appending(tmp_path: Path) -> None:
    p = tmp_path / "results.jsonl"
    p.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "x": 1')  # a crash cut the last write
    f = ResultsFile(p)
    assert f.done_ids == {"a", "b"}  # the torn record is redone
    f.append(['{"id": "c", "x": 2}', '{"id": "d"}'])
    assert p.read_text().splitlines() == ['{"id": "a"}', '{"id": "b"}', '{"id": "c", "x": 2}', '{"id": "d"}']
    assert f.done_ids == {"a", "b", "c", "d"}
    # a torn line that happens to be valid JSON is cut too (its newline never made it)
    p.write_text('{"id": "a"}\n{"id": "b"}')
    ResultsFile(p).append(['{"id": "b"}'])
    assert p.read_text() == '{"id": "a"}\n{"id": "b"}\n'


def test_results_folder_identity_overwrite_and_errors(tmp_path: Path) -> None:
    ident = {"model": {"fingerprint": "m1"}, "profile_hash": "p1", "settings": {"rule": "combined"}}
    f = ResultsFolder(tmp_path / "out", ident)
    f.append(['{"id": "1"}'])
    f.write_errors([{"id": "2", "message": "bad", "status": 422}])
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["format"] == "mnemoscope-audit-results/1"
    assert ResultsFolder(tmp_path / "out", ident).done_ids == {"1"}  # same run: resumes
    other = {**ident, "settings": {"rule": "repcs"}}
    with pytest.raises(InputError, match="differs in settings"):
        ResultsFolder(tmp_path / "out", other)
    g = ResultsFolder(tmp_path / "out", other, overwrite=True)
    assert g.done_ids == set() and not (tmp_path / "out" / "errors.jsonl").exists()
    # the Ray driver learns the identity later: check_identity then refuses the same way
    h = ResultsFolder(tmp_path / "out")
    with pytest.raises(InputError, match="another run"):
        h.check_identity(ident)


# -- stopping early ----------------------------------------------------------------------------------


def test_early_stop_names_the_cause_and_the_fix() -> None:
    stop = EarlyStop(4)
    for i in range(3):
        stop.failed(
            f"record r{i}: the with-context echo's last {i + 3} tokens spell 'x{i}', not the answer",
            kind="TokenAlignmentError",
        )
    with pytest.raises(EarlyStopError) as e:
        stop.failed(
            "record r9: the with-context echo's last 7 tokens spell 'y', not the answer",
            kind="TokenAlignmentError",
        )
    msg = str(e.value)
    assert "first 4 records all failed with the same cause" in msg and "TokenAlignmentError" in msg
    assert "--chat-template" in msg and "--eos-token" in msg


def test_early_stop_disarmed_by_a_success_or_two_causes() -> None:
    stop = EarlyStop(3)
    stop.failed("boom", status=502)
    stop.ok()
    for _ in range(10):
        stop.failed("boom", status=502)  # never raises after a success
    stop = EarlyStop(3)
    stop.failed("boom", status=502)
    stop.failed("other", status=422)
    for _ in range(10):
        stop.failed("boom", status=502)
    assert cause_key("record 3: context has 40 tokens", status=413) == cause_key(
        "record 17: context has 9000 tokens", status=413
    )


# -- one Auditor, any backend --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_auditor(tiny_service: Any) -> Any:
    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.profile import load_profile
    from mnemoscope.models import load_model

    model_dir, prof = tiny_service
    lm = load_model(str(model_dir))
    return Auditor(lm, load_profile(prof, model=lm.info), max_context_tokens=64, batch_size=4)


def test_run_audit_file_stops_early_on_one_cause(tiny_auditor: Any, tmp_path: Path) -> None:
    from mnemoscope.audit.auditor import run_audit_file

    inp = tmp_path / "in.jsonl"
    rows = [{"id": f"r{i}", "context": "a long context " * (20 + i), "query": "Where?"} for i in range(12)]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(EarlyStopError, match=r"first 8 records all failed.*limit is 64.*likely fix"):
        run_audit_file(tiny_auditor, inp, tmp_path / "out", progress=False)
    errors = (tmp_path / "out" / "errors.jsonl").read_text().splitlines()
    assert len(errors) == 8 and json.loads(errors[0])["status"] == 413  # written before raising
    # one good record first: no early stop, every record is tried
    rows.insert(0, {"id": "ok", "context": "Zorblat.", "query": "Where?"})
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = run_audit_file(tiny_auditor, inp, tmp_path / "out2", progress=False)
    assert s["audited"] == 1 and s["errors"] == 12


class _NoHiddenStates:
    """A backend without hidden states (what an endpoint is), serving traces from the local one."""

    name = "test-remote"
    hidden_states = False

    def __init__(self, local: Any):
        self.local = local
        self.profile = local.profile
        self.batch_size = local.batch_size
        self.model_info = local.model_info
        self.identity_settings = {"backend": self.name}
        self.limits = {"max_context_chars": 1000}

    def prepare(self, i: int, req: Any) -> Any:
        return self.local.prepare(i, req)

    def run(self, prepared: Any) -> Any:
        out = []
        for r in self.local.run(prepared):
            if isinstance(r, tuple):
                t, pieces = r
                import dataclasses

                r = (dataclasses.replace(t, h_with=None, h_without=None), pieces)
            out.append(r)
        return out

    def pieces(self, trace: Any) -> list[str]:
        return self.local.pieces(trace)

    def result_fields(self, trace: Any) -> dict[str, Any]:
        return {"backend": self.name}

    def notes(self, trace: Any) -> list[str]:
        return ["no hidden states"]


def test_every_backend_runs_the_hooks_and_the_same_scoring(tiny_auditor: Any) -> None:
    from mnemoscope.audit import auditor as audit_mod
    from mnemoscope.audit.auditor import Auditor, AuditRequest
    from mnemoscope.audit.backends import LocalBackend

    # the CRM block asked for: this backend traces hidden states (an audit that does not ask, does not)
    with_states = LocalBackend(tiny_auditor.lm, tiny_auditor.profile, hidden=True)
    remote = Auditor(_NoHiddenStates(with_states), rule="repcs")
    local = Auditor(with_states, rule="repcs")
    seen: list[tuple[str, int]] = []

    def hook(auditor: Any, requests: Any, results: Any, start_ns: int) -> None:
        seen.append((auditor.backend.name, len(results)))

    audit_mod.AUDIT_HOOKS.append(hook)
    try:
        req = [AuditRequest("Quenmar lies on the Zorblat river.", "Which river is Quenmar on?")]
        (a,) = local.audit(req)
        (b,) = remote.audit(req)
    finally:
        audit_mod.AUDIT_HOOKS.remove(hook)
    assert seen == [("local", 1), ("test-remote", 1)]
    da, db = a.to_dict(), b.to_dict()
    assert "backend" in db, db
    assert db["backend"] == "test-remote" and db["crm"] is None and da["crm"] is not None
    for k in ("source", "memory_flag", "answer", "repcs", "tokens", "spans", "guarantee"):
        assert da[k] == db[k], k
    assert db["notes"][-1] == "no hidden states"
    assert remote.identity["settings"]["backend"] == "test-remote"
    assert remote.limits == {"max_context_chars": 1000} and remote.max_context_tokens is None
    with pytest.raises(InputError, match="needs hidden states"):
        Auditor(_NoHiddenStates(tiny_auditor.backend), rule="crm-anomaly")


def test_a_profile_whose_signals_the_backend_cannot_measure_is_refused_naming_them(tiny_auditor: Any) -> None:
    import copy
    import dataclasses

    from mnemoscope.audit.auditor import Auditor
    from mnemoscope.audit.verdict import unmeasurable_signals

    assert unmeasurable_signals(("repcs_z", "fact_pmi"), hidden_states=False, closed_book_answer=False) == {}
    assert unmeasurable_signals(
        ("crm_probability", "closed_book_agreement"), hidden_states=False, closed_book_answer=True
    ) == {"crm_probability": "hidden states"}
    prof = tiny_auditor.profile
    v = copy.deepcopy(prof.verdict)
    v.selected_ = ("repcs_z", "crm_probability")
    backend = _NoHiddenStates(tiny_auditor.backend)
    backend.profile = dataclasses.replace(prof, verdict=v)
    with pytest.raises(InputError, match=r"crm_probability \(needs hidden states\)") as e:
        Auditor(backend, rule="repcs")
    assert e.value.field == "profile"


def test_an_audit_traces_hidden_states_only_when_an_output_reads_them(tiny_auditor: Any) -> None:
    """Issue 35: the black-box default keeps no hidden state, even with a CRM profile; asking for
    CRM's classifier (or its rule) brings them back."""
    from mnemoscope.audit.auditor import Auditor, AuditRequest

    prof = tiny_auditor.profile
    assert prof.crm is not None  # the fixture's profile holds CRM
    req = [AuditRequest("Quenmar lies on the Zorblat river.", "Which river is Quenmar on?")]
    plain = Auditor(tiny_auditor.lm, prof, rule="repcs")
    assert plain.backend.hidden is False and not prof.needs_hidden_states("repcs")
    (a,) = plain.audit(req)
    assert a.to_dict()["crm"] is None  # type: ignore[union-attr]
    asked = Auditor(tiny_auditor.lm, prof, rule="repcs", crm_probability=True)
    assert asked.backend.hidden is True
    (b,) = asked.audit(req)
    assert b.to_dict()["crm"] is not None  # type: ignore[union-attr]
    assert a.to_dict()["p_memory"] == b.to_dict()["p_memory"]  # type: ignore[union-attr]
    assert prof.needs_hidden_states("crm-anomaly")
