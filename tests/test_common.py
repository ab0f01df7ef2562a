"""One contract for every detector (scikit-learn's ``test_common`` idea).

Every registered membership method (:data:`~mnemoscope.detectors.base.METHODS`), plus
:class:`~mnemoscope.detectors.repcs.RePCS` and :class:`~mnemoscope.detectors.scar.ScarDetector`:
``clone`` works, ``get_params``/``set_params`` round-trip, ``fit`` returns self, unfitted use
raises, scores are oriented (higher = label 1), results are deterministic under a seed, and
fitted artefacts refuse another model (through the one check, ``check_same_model``).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from mnemoscope.detectors.base import METHODS, MembershipData, MembershipMethod
from mnemoscope.detectors.repcs import RePCS
from mnemoscope.detectors.scar import ScarDetector
from mnemoscope.errors import ModelMismatchError
from mnemoscope.features.tokens import TokenStats
from mnemoscope.models import check_same_model
from mnemoscope.stats import cross_val_scores, roc_auc

NAMES = sorted(METHODS.names())
N = 24


@pytest.fixture(scope="module")
def data(lm):
    """Real traces of a tiny model: label 1 = empty context (the answer cannot come from it)."""
    from mnemoscope.trace import Capture, PairConfig, PairItem, PromptBuilder, Tracer, trace_pairs

    rng = np.random.default_rng(0)
    words = ["river", "town", "stone", "bell", "north", "salt", "ferry", "lamp", "wool", "mill"]
    texts = [" ".join(rng.choice(words, 8)) + "." for _ in range(N)]
    labels = np.array([i % 2 for i in range(N)])
    tracer = Tracer(lm, batch_size=8)
    cap = Capture(token_stats=True)

    def stats(ts: list[str]) -> list[TokenStats]:
        return [TokenStats.from_trace(t) for t in tracer.trace(ts, capture=cap)]

    items = [
        PairItem(str(i), "" if y else t, "What is said?", int(y))
        for i, (t, y) in enumerate(zip(texts, labels, strict=True))
    ]
    pairs = trace_pairs(tracer, items, PairConfig(builder=PromptBuilder(template="A"), max_new_tokens=4))
    target = stats(texts)
    return MembershipData(
        ids=[str(i) for i in range(N)],
        texts=texts,
        labels=labels,
        target=target,
        reference=target,
        lowercase=stats([t.lower() for t in texts]),
        pairs=pairs,
        text_embeddings=_embed(texts),
    )


def _embed(texts: list[str]) -> np.ndarray:
    from mnemoscope.pipelines.blind import text_embeddings

    return text_embeddings(texts)  # the real offline MiniLM encoder


def _synthetic_stats(shift: float, seed: int) -> list[TokenStats]:
    """Token statistics where label-1 documents are ``shift`` nats more likely per token."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(N):
        lp = rng.normal(-3.0, 0.3, 12) + (shift if i % 2 else 0.0)
        out.append(TokenStats(lp, np.full(12, -3.0), np.full(12, 1.0)))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_clone_and_params_round_trip(name):
    m = METHODS.build(name)
    assert isinstance(m, MembershipMethod)
    params = m.get_params()
    c = clone(m)
    assert type(c) is type(m) and c.get_params() == params
    assert m.set_params(**params) is m and m.get_params() == params


@pytest.mark.parametrize("name", NAMES)
def test_fit_returns_self_and_scores_are_deterministic(name, data):
    m = METHODS.build(name)
    if m.supervised:
        X = m.features(data)
        est = m.make_estimator()
        with pytest.raises((NotFittedError, AttributeError, ValueError)):
            est.predict_proba(X)
        a = cross_val_scores(est, X, data.labels, n_splits=3, seed=7).oof_scores
        b = cross_val_scores(m.make_estimator(), m.features(data), data.labels, n_splits=3, seed=7).oof_scores
        np.testing.assert_array_equal(a, b)
        assert np.all(np.isfinite(a)) and len(a) == N
    else:
        assert m.fit(data, data.labels) is m
        a, b = m.score(data), m.score(data)
        assert a.shape == (N,) and np.all(np.isfinite(a))
        np.testing.assert_array_equal(a, b)


LIKELIHOOD = [
    n
    for n in NAMES
    if not METHODS.build(n).supervised and METHODS.build(n).requires <= {"target", "reference", "lowercase"}
]
BLIND = [n for n in NAMES if getattr(METHODS.build(n), "blind", False)]


@pytest.mark.parametrize("name", BLIND)
def test_blind_scores_are_oriented_and_never_use_a_trace(name, data):
    """A blind baseline separates classes that differ in their text (register and era of the
    dates) with nothing but the text, and ignores every model trace."""
    texts = [
        f"Anno {1880 + i}, the {t.split()[0]} was restored, whereupon the elders did so decree."
        if y
        else f"In {2031 + i} the {t.split()[0]} got an upgrade and the council posted it online."
        for i, (t, y) in enumerate(zip(data.texts, data.labels, strict=True))
    ]
    d = MembershipData(ids=data.ids, texts=texts, labels=data.labels, text_embeddings=_embed(texts))
    m = METHODS.build(name)
    s = cross_val_scores(m.make_estimator(), m.features(d), d.labels, n_splits=3, seed=0).oof_scores
    assert roc_auc(s, d.labels) > 0.9, (name, roc_auc(s, d.labels))


@pytest.mark.parametrize("name", LIKELIHOOD)
def test_likelihood_scores_are_oriented(name, data):
    """Members (label 1) made more likely under the suspect model score higher."""
    target = _synthetic_stats(1.0, seed=1)
    base = _synthetic_stats(0.0, seed=2)
    d = MembershipData(
        ids=data.ids, texts=data.texts, labels=data.labels, target=target, reference=base, lowercase=base
    )
    assert roc_auc(METHODS.build(name).score(d), d.labels) > 0.9


@pytest.mark.parametrize("name", ["repcs", "repcs_topk"])
def test_repcs_scores_are_oriented(name, data):
    """An empty context (label 1) leaves Z = 0 (up to padding noise, ~1e-15): the highest score."""
    s = METHODS.build(name).score(data)
    assert np.all(np.abs(s[data.labels == 1]) < 1e-9)
    assert np.all(s[data.labels == 0] < -1e-6)
    assert roc_auc(s, data.labels) == 1.0


@pytest.mark.parametrize("name", [n for n in NAMES if METHODS.build(n).supervised and n not in BLIND])
def test_supervised_scores_are_oriented(name, data):
    """A feature set that separates the classes gives out-of-fold scores higher for label 1."""
    m = METHODS.build(name)
    X = m.features(data)
    s = cross_val_scores(m.make_estimator(), X, data.labels, n_splits=3, seed=0).oof_scores
    # the empty-context traces differ from the others in every CRM/RADAR feature family
    assert roc_auc(s, data.labels) > 0.75, (name, roc_auc(s, data.labels))


def test_repcs_estimator_contract(data):
    det = RePCS(alpha=0.1)
    assert clone(det).get_params() == det.get_params()
    with pytest.raises(NotFittedError):
        det.predict(data.pairs)
    clean = [p for p, y in zip(data.pairs, data.labels, strict=True) if y == 0]
    assert det.fit(clean) is det
    again = RePCS(alpha=0.1).fit(clean)
    assert det.tau_ == again.tau_
    flags = det.predict(data.pairs)
    # an empty context is never flagged (no evidence), whatever tau says
    assert not flags[data.labels == 1].any()


def test_scar_estimator_contract():
    det = ScarDetector(seed=3, n_permutations=9, n_bootstrap=5)
    assert clone(det).get_params() == det.get_params()
    assert det.set_params(seed=4) is det and det.seed == 4
    with pytest.raises(NotFittedError):
        det.audit(None)  # type: ignore[arg-type]


def test_model_identity_is_one_check(data, lm):
    info = lm.info.to_dict()
    check_same_model(info, lm.info, what="x", remedy="y")
    other = {**info, "name": "other", "fingerprint": "0" * 64}
    with pytest.raises(ModelMismatchError, match="was fitted on"):
        check_same_model(info, other, what="this artefact", remedy="refit")
    with pytest.raises(ModelMismatchError):
        check_same_model({"name": "no fingerprint"}, info, what="x", remedy="y")


def test_repcs_calibration_refuses_another_model(data, lm, tmp_path):
    import json

    from mnemoscope.pipelines.repcs import load_calibration

    det = RePCS(alpha=0.1).fit([p for p, y in zip(data.pairs, data.labels, strict=True) if y == 0])
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(det.calibration_record(model=lm.info.to_dict(), pair_config={})))
    load_calibration(path, lm.info)
    with pytest.raises(ModelMismatchError, match="was fitted on"):
        load_calibration(path, {**lm.info.to_dict(), "fingerprint": "f" * 64})
