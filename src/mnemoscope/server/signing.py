"""Signed checkpoints: Ed25519 keys and the C2SP signed-note / tlog-checkpoint text format.

A checkpoint is a note (https://c2sp.org/tlog-checkpoint)::

    <origin>
    <tree size, decimal>
    <root hash, base64>
    head <chain head entry_hash, base64>

    — <key name> <base64(4-byte key ID || Ed25519 signature of the text above)>

The text is everything up to and including the last body newline; the key ID is
``SHA-256(name || 0x0A || 0x01 || public key)[:4]`` (https://c2sp.org/signed-note). Keys
are written in the Go ``golang.org/x/mod/sumdb/note`` encodings, so ``note`` tools can read
them: a *verifier key* ``<name>+<key ID hex>+<base64(0x01 || public key)>`` (public, give
it to anyone who checks proofs) and a *signer key* ``PRIVATE+KEY+<name>+<key ID hex>+<base64(0x01 || seed)>``
(keep it secret; every replica of one log needs the same one).

Example:
    >>> signer = Signer.generate("example.org/log")
    >>> note = sign_checkpoint(signer, "example.org/log", 3, bytes(32), bytes(32))
    >>> cp = open_checkpoint(note, [signer.verifier])
    >>> cp.tree_size, cp.key_name
    (3, 'example.org/log')
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemoscope.errors import MnemoscopeError

__all__ = [
    "NoteError",
    "OpenedCheckpoint",
    "Signer",
    "Verifier",
    "checkpoint_text",
    "load_signer",
    "open_checkpoint",
    "parse_checkpoint_text",
    "sign_checkpoint",
]

_ED25519 = b"\x01"
_DASH = "\u2014"


class NoteError(MnemoscopeError):
    """A key or a signed note is malformed, or no trusted signature verifies."""


def _key_id(name: str, pub: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + _ED25519 + pub).digest()[:4]


def _check_name(name: str) -> None:
    if not name or any(c.isspace() for c in name) or "+" in name:
        raise NoteError(f"key name {name!r} must be non-empty, without spaces or '+'")


@dataclass(frozen=True)
class Verifier:
    """A public Ed25519 note key."""

    name: str
    public: bytes

    @property
    def key_id(self) -> bytes:
        return _key_id(self.name, self.public)

    def __str__(self) -> str:
        b64 = base64.b64encode(_ED25519 + self.public).decode()
        return f"{self.name}+{self.key_id.hex()}+{b64}"

    @classmethod
    def parse(cls, text: str) -> Verifier:
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise NoteError("a verifier key is '<name>+<key id hex>+<base64 key>'")
        name, kid, b64 = parts
        _check_name(name)
        try:
            raw = base64.b64decode(b64, validate=True)
        except ValueError as e:
            raise NoteError(f"verifier key {name}: the key is not base64 ({e})") from e
        if len(raw) != 33 or raw[:1] != _ED25519:
            raise NoteError(f"verifier key {name}: not an Ed25519 key (type byte 0x01 + 32 bytes)")
        v = cls(name, raw[1:])
        if v.key_id.hex() != kid.lower():
            raise NoteError(f"verifier key {name}: key id {kid} does not match the key ({v.key_id.hex()})")
        return v

    def verify(self, msg: bytes, sig: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            _public_key(self.public).verify(sig, msg)
        except InvalidSignature:
            return False
        return True


@functools.lru_cache(maxsize=64)
def _public_key(raw: bytes) -> Any:
    """The parsed Ed25519 key (a verify of a long log checks thousands of notes with one key)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    return Ed25519PublicKey.from_public_bytes(raw)


class Signer:
    """A private Ed25519 note key (see the module doc for its text form)."""

    def __init__(self, name: str, seed: bytes):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        _check_name(name)
        if len(seed) != 32:
            raise NoteError("an Ed25519 seed is 32 bytes")
        self.name = name
        self._seed = seed
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        pub = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.verifier = Verifier(name, pub)

    @classmethod
    def generate(cls, name: str) -> Signer:
        import os

        return cls(name, os.urandom(32))

    def __str__(self) -> str:
        b64 = base64.b64encode(_ED25519 + self._seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{b64}"

    def __repr__(self) -> str:  # never print the secret by accident
        return f"Signer({self.name!r}, key id {self.verifier.key_id.hex()})"

    @classmethod
    def parse(cls, text: str) -> Signer:
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("a signer key is 'PRIVATE+KEY+<name>+<key id hex>+<base64 key>'")
        _, _, name, kid, b64 = parts
        try:
            raw = base64.b64decode(b64, validate=True)
        except ValueError as e:
            raise NoteError(f"signer key {name}: the key is not base64 ({e})") from e
        if len(raw) != 33 or raw[:1] != _ED25519:
            raise NoteError(f"signer key {name}: not an Ed25519 key (type byte 0x01 + 32 bytes)")
        s = cls(name, raw[1:])
        if s.verifier.key_id.hex() != kid.lower():
            raise NoteError(f"signer key {name}: key id {kid} does not match the key")
        return s

    def sign(self, msg: bytes) -> bytes:
        return self._key.sign(msg)


def load_signer(path: str | Path) -> Signer:
    """Read a signer key file (``mnemoscope log keygen`` writes one)."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise NoteError(f"cannot read the signing key {p}: {e}") from e
    try:
        return Signer.parse(text)
    except NoteError as e:
        raise NoteError(f"{p}: {e}") from e


def checkpoint_text(origin: str, tree_size: int, root: bytes, head: bytes) -> str:
    """The unsigned body of a checkpoint note (ends with a newline)."""
    if not origin or "\n" in origin:
        raise NoteError("the log origin must be one non-empty line")
    b = base64.b64encode
    return f"{origin}\n{int(tree_size)}\n{b(root).decode()}\nhead {b(head).decode()}\n"


def sign_checkpoint(signer: Signer, origin: str, tree_size: int, root: bytes, head: bytes) -> str:
    """A checkpoint note signed by ``signer``."""
    text = checkpoint_text(origin, tree_size, root, head)
    sig = base64.b64encode(signer.verifier.key_id + signer.sign(text.encode())).decode()
    return f"{text}\n{_DASH} {signer.name} {sig}\n"


@dataclass(frozen=True)
class OpenedCheckpoint:
    """A checkpoint whose signature verified with ``key_name``'s key (``None`` when opened unchecked)."""

    origin: str
    tree_size: int
    root: bytes
    head: bytes | None
    key_name: str | None
    text: str


def parse_checkpoint_text(text: str) -> tuple[str, int, bytes, bytes | None]:
    """(origin, tree size, root, head or None) from a checkpoint body."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("a checkpoint has an origin, a tree size and a root hash, each on its own line")
    origin, size_s, root_s = lines[0], lines[1], lines[2]
    if not size_s.isdigit() or (len(size_s) > 1 and size_s[0] == "0"):
        raise NoteError(f"checkpoint tree size {size_s!r} is not a decimal number")
    try:
        root = base64.b64decode(root_s, validate=True)
    except ValueError as e:
        raise NoteError(f"checkpoint root {root_s!r} is not base64") from e
    if len(root) != 32:
        raise NoteError("a checkpoint root is 32 bytes")
    head = None
    for ext in lines[3:-1]:
        if ext.startswith("head "):
            head = base64.b64decode(ext[5:], validate=True)
    return origin, int(size_s), root, head


_CONTROL = re.compile("[\x00-\x09\x0b-\x1f]")  # control characters other than newline


def _split_note(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    if _CONTROL.search(note):
        raise NoteError("a signed note must not contain control characters")
    cut = note.rfind("\n\n")
    if cut < 0:
        raise NoteError("not a signed note: no blank line before the signatures")
    text, sigblock = note[: cut + 1], note[cut + 2 :]
    sigs = []
    for line in sigblock.split("\n"):
        if not line:
            continue
        if not line.startswith(_DASH + " "):
            raise NoteError(f"malformed signature line {line[:40]!r}")
        parts = line[2:].split(" ")
        if len(parts) != 2:
            raise NoteError(f"malformed signature line {line[:40]!r}")
        try:
            sigs.append((parts[0], base64.b64decode(parts[1], validate=True)))
        except ValueError as e:
            raise NoteError(f"signature of {parts[0]} is not base64") from e
    if not sigs:
        raise NoteError("the note has no signature")
    return text, sigs


def open_checkpoint(note: str, trusted: Sequence[Verifier] | None) -> OpenedCheckpoint:
    """Check a signed checkpoint against ``trusted`` keys and parse it.

    Signatures from unknown keys are ignored; a failing signature from a known key rejects the
    note (C2SP signed-note rules). ``trusted=None`` parses without checking any signature.

    Raises:
        NoteError: malformed, or no trusted key signed it, or a trusted key's signature is forged.
    """
    text, sigs = _split_note(note)
    origin, size, root, head = parse_checkpoint_text(text)
    if trusted is None:
        return OpenedCheckpoint(origin, size, root, head, None, text)
    by_id = {(v.name, v.key_id): v for v in trusted}
    good = None
    for name, raw in sigs:
        if len(raw) < 4:
            raise NoteError(f"signature of {name} is too short")
        (kid,) = struct.unpack(">4s", raw[:4])
        v = by_id.get((name, kid))
        if v is None:
            continue
        if not v.verify(text.encode(), raw[4:]):
            raise NoteError(f"the signature of {name} ({kid.hex()}) on checkpoint {size} does not verify")
        good = name
    if good is None:
        names = ", ".join(sorted({n for n, _ in sigs}))
        raise NoteError(f"checkpoint {size} is not signed by a trusted key (signed by: {names})")
    return OpenedCheckpoint(origin, size, root, head, good, text)
