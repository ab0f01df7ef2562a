"""Property-based fuzzing of a running ``mnemoscope serve`` from its own OpenAPI document (schemathesis).

Every operation of ``/openapi.json`` gets valid and invalid requests (coverage, examples and
fuzzing phases), all with the API key. No answer may be a 5xx, and every 4xx must be a JSON
error with a non-empty ``detail`` message. Bounded and derandomized (the same cases every run),
so a failure reproduces; schemathesis prints a ``curl`` line for it.

``MNEMOSCOPE_FUZZ_STRICT=1`` adds the contract checks (documented status codes, response
schemas, content types); ``MNEMOSCOPE_FUZZ_EXAMPLES=N`` changes the number of generated cases
(default 30) for a longer hunt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("schemathesis")

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from server_helpers import API_KEY, Server, serving

AUTH = {"Authorization": f"Bearer {API_KEY}"}
MAX_EXAMPLES = int(os.environ.get("MNEMOSCOPE_FUZZ_EXAMPLES", "30"))  # per operation and phase
STRICT = os.environ.get("MNEMOSCOPE_FUZZ_STRICT") == "1"


@pytest.fixture(scope="module")
def server(tiny_service: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tiny_service, tmp_path_factory.mktemp("fuzz-svc")) as s:
        yield s


@pytest.fixture(scope="module")
def api_schema(server: Server) -> Any:
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


@schemathesis.check
def clear_client_error(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 4xx says what was wrong: a JSON object with a non-empty string ``detail``."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = response.json()
    except Exception as e:
        raise AssertionError(f"{response.status_code} without a JSON body: {response.text[:200]!r}") from e
    detail = body.get("detail") if isinstance(body, dict) else None
    assert isinstance(detail, str) and detail, f"{response.status_code} without a 'detail' message: {body!r}"
    return True


CHECKS = [not_a_server_error, clear_client_error]
if STRICT:
    CHECKS += [status_code_conformance, response_schema_conformance, content_type_conformance]


def test_openapi_fuzz(api_schema: Any, server: Server) -> None:
    """Valid (positive) and invalid (negative) cases of every operation, all with the key.

    Driven by hypothesis directly rather than schemathesis' pytest plugin, which breaks with
    some pytest releases (pytest 9.2 removed an attribute it uses).
    """
    from hypothesis import given
    from hypothesis.errors import Unsatisfiable

    n_ops = 0
    for result in api_schema.get_all_operations():
        op = result.ok()
        n_ops += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=op.as_strategy(generation_mode=mode))
            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            def run(case: Any) -> None:
                response = case.call(headers=AUTH, timeout=60)
                case.validate_response(response, checks=CHECKS, headers=AUTH)

            try:
                run()
            except Unsatisfiable:
                # an operation without inputs (e.g. GET /health) has no invalid request
                assert mode is GenerationMode.NEGATIVE, op.label
    assert n_ops >= 6
    with server.client() as c:  # the valid cases were audited and stored, not all rejected at the door
        stats = c.get("/v1/stats").json()
        assert stats["n_audits"] >= 5, stats
        assert c.get("/ready").status_code == 200


VALID_BODY = {"context": "Zor lies on the river Ka.", "query": "Where is Zor?"}


def test_every_v1_operation_needs_a_key(server: Server) -> None:
    """Each ``/v1`` operation of the OpenAPI document answers 401 without a key and 403 with a
    wrong one (an endpoint added without the key dependency fails here), even for a valid body."""
    doc = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    ops = [(m.upper(), p) for p, item in doc["paths"].items() if p.startswith("/v1/") for m in item]
    assert len(ops) >= 6, ops
    for method, path in ops:
        url = server.url + path.replace("{audit_id}", "0" * 32)
        body = {"items": [VALID_BODY]} if path.endswith("/batch") else VALID_BODY
        kw: dict[str, Any] = {"json": body} if method == "POST" else {}
        for headers, status in (
            ({}, 401),
            ({"Authorization": "Bearer wrong-key"}, 403),
            ({"Authorization": f"Basic {API_KEY}"}, 401),
        ):
            r = httpx.request(method, url, headers=headers, timeout=30, **kw)
            assert r.status_code == status, (method, path, headers, r.status_code, r.text[:300])
            assert r.json()["detail"], (method, path, r.text)
