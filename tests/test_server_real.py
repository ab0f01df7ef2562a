"""The audit path on the embedded default model: calibrate on shipped records, audit, serve."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from mnemoscope.audit.auditor import Auditor, AuditRequest, AuditResult
from mnemoscope.audit.calibrate import calibrate_profile
from mnemoscope.audit.profile import CalibrationConfig, load_profile
from mnemoscope.data.records import read_records
from mnemoscope.pipelines.crm.fitter import CRMFitter
from mnemoscope.server.app import create_app
from mnemoscope.server.config import load_settings
from mnemoscope.server.storage import open_store

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def real_profile(real_lm: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = resources.files("mnemoscope.bench") / "data" / "context_reliance.jsonl"
    records, _ = read_records(str(path))
    clean = [r for r in records if r.label == 0][:8]
    memory = [r for r in records if r.label == 1][:8]
    out = tmp_path_factory.mktemp("real-profile")
    # with CRM: the test checks its target layers and audit block (the default fits none)
    calibrate_profile(
        real_lm,
        clean + memory,
        out,
        CalibrationConfig(max_new_tokens=16, with_crm=True),
        progress=False,
        fitter=CRMFitter(),
    )
    return out


def test_real_profile_and_audits(real_lm: Any, real_profile: Path) -> None:
    prof = load_profile(real_profile, model=real_lm.info)
    h = prof.header
    assert h["prompt"]["chat"] is True  # SmolLM2-Instruct has a chat template: auto picks it
    assert 0 < len(prof.crm.layers) <= real_lm.info.n_layers + 1
    assert 0 not in prof.crm.layers.tolist()  # the embedding row has zero displacement
    assert prof.crm.classifier == "lr" and h["data"]["n_clean"] == 8
    assert Auditor(real_lm, prof).backend.hidden is False  # black-box unless CRM is asked for
    eng = Auditor(real_lm, prof, crm_probability=True)  # CRM's outputs asked for: hidden states traced
    mem, new = eng.audit(
        [
            AuditRequest(
                "Paris is the capital and largest city of France.", "What is the capital of France?"
            ),
            AuditRequest(
                "Quenmar is a small town on the river Zorblat, famous for its glass bells.",
                "Which river is Quenmar on?",
                max_new_tokens=16,
            ),
        ]
    )
    assert not isinstance(mem, Exception) and not isinstance(new, Exception)
    assert isinstance(mem, AuditResult) and isinstance(new, AuditResult)
    assert "Paris" in mem.answer and "Quenmar" in new.answer
    # RePCS: the invented fact needs the context, the well-known one does not
    assert new.repcs["kl"] > mem.repcs["kl"]
    assert mem.crm is not None and len(mem.crm["lts_trajectory"]) == len(prof.crm.layers)
    # 8 clean records: 4 held out for the verdict's threshold, fewer than 19 -> not certified, and said
    assert prof.verdict is not None and not prof.verdict.certified_
    assert mem.guarantee["certified"] is False and "NOT certified" in mem.guarantee["statement"]


def test_real_server_roundtrip(real_lm: Any, real_profile: Path, tmp_path: Path) -> None:
    settings = load_settings(None, env={"MNEMOSCOPE_API_KEYS": "k"})
    app = create_app(
        settings, engine=Auditor(real_lm, load_profile(real_profile)), store=open_store(tmp_path / "a.db")
    )
    with TestClient(app) as c:
        r = c.post(
            "/v1/audit",
            json={"context": "Tokyo is the capital of Japan.", "query": "What is the capital of Japan?"},
            headers={"Authorization": "Bearer k"},
        )
        assert r.status_code == 200, r.text
        a = r.json()
        tau = json.loads((real_profile / "profile.json").read_text())["repcs"]["tau"]
        assert a["model"]["name"] == real_lm.info.name
        # 8 clean records cannot certify alpha = 0.05: tau = -inf, reported as null
        assert a["repcs"]["tau"] is None if tau == float("-inf") else a["repcs"]["tau"] == pytest.approx(tau)
        assert a["guarantee"]["certified"] is False and a["source"] in (
            "context",
            "memory",
            "mixed",
            "undetermined",
        )
        assert c.get("/v1/stats", headers={"Authorization": "Bearer k"}).json()["model"]["n_layers"] == 30
