"""Likelihood attacks: hand-computed values, and the same values from real traces of a tiny model."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from mnemoscope.detectors import METHODS, MembershipData
from mnemoscope.detectors.likelihood import lowest_fraction_mean
from mnemoscope.features import TokenStats
from mnemoscope.trace import Capture, Tracer

LP = np.array([-1.0, -4.0, -0.5, -2.0, -3.0])
MU = np.array([-2.0, -2.0, -1.0, -1.0, -1.0])
SIG = np.array([1.0, 2.0, 0.5, 1.0, 2.0])
STATS = TokenStats(LP, MU, SIG)


def _data(**kw):
    return MembershipData(ids=["a"], texts=["Hello World hello"], labels=np.array([1]), **kw)


def test_hand_computed_scores():
    d = _data(
        target=[STATS], lowercase=[TokenStats(LP - 1.0, MU, SIG)], reference=[TokenStats(LP - 0.5, MU, SIG)]
    )
    loss = 2.1  # -(mean of LP)
    assert METHODS.build("loss").score(d)[0] == pytest.approx(-loss)
    assert METHODS.build("zlib").score(d)[0] == pytest.approx(
        -loss / len(zlib.compress(b"Hello World hello"))
    )
    assert METHODS.build("lowercase").score(d)[0] == pytest.approx(1.0)  # lower-cased loss is 1 nat higher
    assert METHODS.build("ref").score(d)[0] == pytest.approx(0.5)
    # k=0.2 of 5 tokens -> 1 token: the lowest log-prob -4; k=0.4 -> 2 tokens: (-4 + -3) / 2
    assert METHODS.build("min_k_20").score(d)[0] == pytest.approx(-4.0)
    assert METHODS.build("min_k_20", k=0.4).score(d)[0] == pytest.approx(-3.5)
    assert METHODS.build("min_k_10").score(d)[0] == pytest.approx(-4.0)  # max(1, floor(0.5)) = 1 token
    # z = (LP - MU) / SIG = [1, -1, 1, -1, -1]
    assert METHODS.build("min_k_pp_20").score(d)[0] == pytest.approx(-1.0)
    assert METHODS.build("min_k_pp_20", k=1.0).score(d)[0] == pytest.approx(-0.2)


def test_missing_traces_and_bad_k():
    with pytest.raises(ValueError, match="reference"):
        METHODS.build("ref").score(_data(target=[STATS]))
    with pytest.raises(ValueError, match="k must be"):
        lowest_fraction_mean(LP, 0.0)


def test_registry_errors_suggest():
    from mnemoscope.errors import InputError

    with pytest.raises(InputError, match="did you mean min_k_20"):
        METHODS.get("min_k_2O")


def test_from_real_traces_match_direct_forward(lm):
    text = "Quenmar lies on the Zorblat river."
    t = Tracer(lm).trace([text], capture=Capture(hidden="none", logprobs="none", token_stats=True))[0]
    s = TokenStats.from_trace(t)
    ids = torch.tensor([lm.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        loss = lm.model(input_ids=ids, labels=ids).loss.item()  # HF's own mean NLL
    assert s.loss == pytest.approx(loss, abs=1e-5)
    d = MembershipData(ids=["x"], texts=[text], labels=np.array([0]), target=[s])
    assert METHODS.build("loss").score(d)[0] == pytest.approx(-loss, abs=1e-5)
    k = max(1, int(0.2 * s.n))
    assert METHODS.build("min_k_20").score(d)[0] == pytest.approx(np.sort(s.logprobs)[:k].mean())
