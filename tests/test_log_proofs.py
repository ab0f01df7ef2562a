"""RFC 9162 proofs of the audit log, checked by an independent implementation written here from
the RFC's text (sections 2.1.3.2 and 2.1.4.2), not by the server's own code; signed notes."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mnemoscope.server import merkle
from mnemoscope.server.signing import NoteError, Signer, Verifier, open_checkpoint, sign_checkpoint
from mnemoscope.server.storage import ProofUnavailable, open_store

# -- an independent RFC 9162 verifier (from the RFC's prose) -----------------------------------------


def b64d(s: str) -> bytes:
    return base64.b64decode(s)


def H(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def rfc_mth(d: list[bytes]) -> bytes:
    """2.1.1: MTH of a list of *entries* (raw bytes), recursively."""
    n = len(d)
    if n == 0:
        return H(b"")
    if n == 1:
        return H(b"\x00" + d[0])
    k = 1
    while k << 1 < n:
        k <<= 1
    return H(b"\x01" + rfc_mth(d[:k]) + rfc_mth(d[k:]))


def rfc_verify_inclusion(
    leaf_index: int, tree_size: int, leaf_hash: bytes, path: list[bytes], root: bytes
) -> bool:
    """RFC 9162 2.1.3.2, step by step."""
    if leaf_index >= tree_size:  # 1
        return False
    fn, sn = leaf_index, tree_size - 1  # 2, 3
    r = leaf_hash  # 4
    for p in path:  # 5
        if sn == 0:  # 5a
            return False
        if fn % 2 == 1 or fn == sn:  # 5b
            r = H(b"\x01" + p + r)  # 5b i
            if fn % 2 == 0:  # 5b ii
                while not (fn % 2 == 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:  # 5c
            r = H(b"\x01" + r + p)
        fn >>= 1  # 5d
        sn >>= 1
    return sn == 0 and r == root  # 6


def rfc_verify_consistency(
    first: int, second: int, first_hash: bytes, second_hash: bytes, consistency_path: list[bytes]
) -> bool:
    """RFC 9162 2.1.4.2, step by step."""
    if first == second:
        return not consistency_path and first_hash == second_hash
    if not consistency_path:  # 1
        return False
    path = list(consistency_path)
    if first & (first - 1) == 0:  # 2: exact power of 2
        path = [first_hash, *path]
    fn, sn = first - 1, second - 1  # 3, 4
    if fn % 2 == 1:  # 5
        while fn % 2 == 1:
            fn >>= 1
            sn >>= 1
    fr = sr = path[0]  # 6
    for c in path[1:]:  # 7
        if sn == 0:  # 7a
            return False
        if fn % 2 == 1 or fn == sn:  # 7b
            fr = H(b"\x01" + c + fr)
            sr = H(b"\x01" + c + sr)
            if fn % 2 == 0:
                while not (fn % 2 == 1 or fn == 0):
                    fn >>= 1
                    sn >>= 1
        else:  # 7c
            sr = H(b"\x01" + sr + c)
        fn >>= 1  # 7d
        sn >>= 1
    return fr == first_hash and sr == second_hash and sn == 0  # 8


def _entries(n: int) -> list[bytes]:
    return [f"entry {i}".encode() for i in range(n)]


def _nodes_of(entries: list[bytes]) -> dict[tuple[int, int], bytes]:
    """Every perfect node of the tree, built the slow way from the definition."""
    out = {}
    level = 0
    while (1 << level) <= len(entries):
        w = 1 << level
        for i in range(len(entries) // w):
            out[(level, i)] = rfc_mth(entries[i * w : (i + 1) * w])
        level += 1
    return out


def test_compact_range_root_and_closed_nodes_match_the_definition() -> None:
    entries = _entries(70)
    nodes = _nodes_of(entries)
    cr = merkle.CompactRange()
    seen = {}
    for i, e in enumerate(entries):
        for level, idx, h in cr.append(merkle.leaf_hash_bytes(e)):
            seen[(level, idx)] = h
        assert cr.root() == rfc_mth(entries[: i + 1])
        assert len(cr.hashes) == bin(i + 1).count("1")
    assert seen == {k: v for k, v in nodes.items() if k[0] > 0}


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8, 9, 16, 31, 33])
def test_inclusion_and_consistency_proofs_verify_independently(n: int) -> None:
    entries = _entries(n)
    nodes = _nodes_of(entries)

    def fetch(want: Any) -> dict[tuple[int, int], bytes]:
        return {k: nodes[k] for k in want}

    root = rfc_mth(entries)
    for m in range(n):
        path = merkle.inclusion_proof(m, n, fetch)
        leaf = H(b"\x00" + entries[m])
        assert rfc_verify_inclusion(m, n, leaf, path, root), (m, n)
        merkle.verify_inclusion(leaf, m, n, path, root)
        assert not rfc_verify_inclusion(m, n, H(b"\x00other"), path, root)
        if path:
            bad = [path[0][:-1] + bytes([path[0][-1] ^ 1]), *path[1:]]
            assert not rfc_verify_inclusion(m, n, leaf, bad, root)
            with pytest.raises(merkle.ProofError):
                merkle.verify_inclusion(leaf, m, n, bad, root)
    for m in range(1, n + 1):
        proof = merkle.consistency_proof(m, n, fetch)
        old = rfc_mth(entries[:m])
        assert rfc_verify_consistency(m, n, old, root, proof), (m, n)
        merkle.verify_consistency(m, n, old, root, proof)
        if m < n:
            assert not rfc_verify_consistency(m, n, H(b"x"), root, proof)
            with pytest.raises(merkle.ProofError):
                merkle.verify_consistency(m, n, old, H(b"x"), proof)


# -- signed notes ------------------------------------------------------------------------------------


def test_signed_note_format_and_forgeries() -> None:
    signer = Signer.generate("example.org/mnemo")
    v = signer.verifier
    assert Verifier.parse(str(v)) == v and Signer.parse(str(signer)).verifier == v
    # key id = SHA-256(name || 0x0A || 0x01 || pub)[:4] (c2sp.org/signed-note)
    assert v.key_id == H(b"example.org/mnemo\n\x01" + v.public)[:4]
    root, head = H(b"r"), H(b"h")
    note = sign_checkpoint(signer, "example.org/mnemo", 42, root, head)
    body, _, sig_line = note.partition("\n\n")
    assert body.split("\n")[:3] == ["example.org/mnemo", "42", base64.b64encode(root).decode()]
    assert sig_line.startswith("\u2014 example.org/mnemo ")
    raw = base64.b64decode(sig_line.split(" ")[2])
    assert raw[:4] == v.key_id and len(raw) == 68
    cp = open_checkpoint(note, [v])
    assert (cp.tree_size, cp.root, cp.head, cp.key_name) == (42, root, head, "example.org/mnemo")
    # a changed body, a forged signature, an untrusted key
    with pytest.raises(NoteError, match="does not verify"):
        open_checkpoint(note.replace("\n42\n", "\n43\n"), [v])
    forged = note[:-10] + ("A" if note[-10] != "A" else "B") + note[-9:]
    with pytest.raises(NoteError):
        open_checkpoint(forged, [v])
    other = Signer.generate("example.org/mnemo")
    with pytest.raises(NoteError, match="not signed by a trusted key"):
        open_checkpoint(note, [other.verifier])
    with pytest.raises(NoteError, match="key id"):
        Verifier.parse(str(v).replace(v.key_id.hex(), "00000000"))


# -- proofs from a store, checked with the checkpoint and the public key alone ---------------------------


def _rec(i: int) -> dict[str, Any]:
    return {
        "id": f"a{i}",
        "created_at": 1000.0 + i,
        "source": ("context", "memory", "mixed", "undetermined")[i % 4],
        "memory_flag": i % 4 == 1,
        "latency_ms": float(i),
        "answer": f"answer {i}",
    }


def test_store_inclusion_and_consistency_proofs(tmp_path: Path) -> None:
    signer = Signer.generate("test.example/log")
    st = open_store(tmp_path / "p.db", checkpoint_every=8, signing_key=signer, origin="test.example/log")
    st.append([_rec(i) for i in range(1, 30)])
    proof = st.prove("a5")
    cp = open_checkpoint(proof["checkpoint"], [signer.verifier])
    assert cp.tree_size == proof["tree_size"] == 24 and cp.origin == "test.example/log"
    leaf = H(b"\x00" + json.dumps(proof["record"], sort_keys=True, separators=(",", ":")).encode())
    assert leaf == b64d(proof["leaf_hash"])
    path = [b64d(h) for h in proof["inclusion_path"]]
    assert rfc_verify_inclusion(proof["leaf_index"], cp.tree_size, leaf, path, cp.root)
    assert len(json.dumps(path and proof["inclusion_path"])) < 1024
    # newer than the last checkpoint: a writable store checkpoints on demand
    p29 = st.prove("a29")
    assert p29["tree_size"] == 29
    cp29 = open_checkpoint(p29["checkpoint"], [signer.verifier])
    assert rfc_verify_inclusion(
        28, 29, b64d(p29["leaf_hash"]), [b64d(h) for h in p29["inclusion_path"]], cp29.root
    )
    with pytest.raises(ProofUnavailable, match="no audit"):
        st.prove("nope")
    c = st.consistency(8, 29)
    assert rfc_verify_consistency(
        8, 29, b64d(c["first_root"]), cp29.root, [b64d(h) for h in c["consistency_path"]]
    )
    assert open_checkpoint(c["first_checkpoint"], [signer.verifier]).root == b64d(c["first_root"])
    with pytest.raises(ProofUnavailable):
        st.consistency(10, 99)
    st.append([_rec(30)])
    st.close()
    ro = open_store(tmp_path / "p.db", readonly=True)
    with pytest.raises(ProofUnavailable, match="no checkpoint covers"):
        ro.prove("a30")
    assert ro.prove("a1")["tree_size"] == 29
    ro.close()


# -- the CLI: keygen, prove, check-proof offline, verify --since ---------------------------------------


def test_cli_keygen_prove_check_proof_and_verify_since(tmp_path: Path, capsys: Any) -> None:
    from mnemoscope.cli.main import main

    key = tmp_path / "log.key"
    assert main(["log", "keygen", "t.example/log", "--out", str(key)]) == 0
    assert (key.stat().st_mode & 0o777) == 0o600 and Path(f"{key}.pub").is_file()
    assert main(["log", "keygen", "t.example/log", "--out", str(key)]) != 0  # no silent rotation
    db = tmp_path / "c.db"
    st = open_store(db, checkpoint_every=4, signing_key=key)
    st.append([_rec(i) for i in range(1, 11)])
    st.close()
    out = tmp_path / "proof.json"
    assert main(["log", "prove", "a3", "--db", str(db), "--out", str(out)]) == 0
    pub = f"{key}.pub"
    assert main(["log", "check-proof", str(out), "--key", pub]) == 0
    assert "audit a3 is leaf 2" in capsys.readouterr().out
    # a changed record, a changed path, another key: all refused
    doc = json.loads(out.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**doc, "record": {**doc["record"], "source": "context"}}))
    assert main(["log", "check-proof", str(bad), "--key", pub]) == 3
    assert "record does not match" in capsys.readouterr().out
    bad.write_text(json.dumps({**doc, "leaf_index": 3, "record": None}))
    assert main(["log", "check-proof", str(bad), "--key", pub]) == 3
    other = Signer.generate("t.example/log")
    assert main(["log", "check-proof", str(out), "--key", str(other.verifier)]) == 3
    assert "not signed by a trusted key" in capsys.readouterr().out
    cons = tmp_path / "cons.json"
    assert main(["log", "consistency", "4", "8", "--db", str(db), "--out", str(cons)]) == 0
    assert main(["log", "check-proof", str(cons), "--key", pub]) == 0
    # verify, save the checkpoint, resume from it
    saved = tmp_path / "cp.txt"
    assert main(["log", "verify", "--db", str(db), "--key", pub, "--save-checkpoint", str(saved)]) == 0
    assert "tree size" not in capsys.readouterr().out
    st = open_store(db, checkpoint_every=4, signing_key=key)
    st.append([_rec(i) for i in range(11, 15)])
    st.close()
    assert main(["log", "verify", "--db", str(db), "--since", str(saved), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["since"] == 8 and rep["n_entries"] == 6 and rep["last_checkpoint"] == 12
    assert main(["log", "prove", "nope", "--db", str(db)]) != 0


# -- the HTTP routes -----------------------------------------------------------------------------------


def test_proof_routes(tmp_path: Path) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from mnemoscope.server.deps import get_store, require_key
    from mnemoscope.server.routes import proofs

    signer = Signer.generate("t.example/log")
    st = open_store(tmp_path / "api.db", checkpoint_every=4, signing_key=signer)
    st.append([_rec(i) for i in range(1, 8)])
    app = FastAPI()
    app.include_router(proofs.router)
    app.dependency_overrides[get_store] = lambda: st
    app.dependency_overrides[require_key] = lambda: None
    with TestClient(app) as c:
        r = c.get("/v1/audits/a6/proof")
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["tree_size"] == 7  # written on demand: no checkpoint covered seq 6
        cp = open_checkpoint(doc["checkpoint"], [signer.verifier])
        leaf = b64d(doc["leaf_hash"])
        assert rfc_verify_inclusion(5, 7, leaf, [b64d(h) for h in doc["inclusion_path"]], cp.root)
        assert c.get("/v1/audits/zzz/proof").status_code == 404
        r = c.get("/v1/log/consistency", params={"from": 4, "to": 7})
        assert r.status_code == 200, r.text
        d = r.json()
        assert rfc_verify_consistency(
            4, 7, b64d(d["first_root"]), cp.root, [b64d(h) for h in d["consistency_path"]]
        )
        assert c.get("/v1/log/consistency", params={"from": 9}).status_code == 404
        assert c.get("/v1/log/consistency", params={"from": 0}).status_code == 422
    st.close()
