"""Server settings: defaults < config file (TOML or JSON) < environment < command line.

Every field can be set in the environment as ``MNEMOSCOPE_<FIELD>`` (upper case), e.g.
``MNEMOSCOPE_PROFILE=audit-profile/``, ``MNEMOSCOPE_MAX_BATCH_SIZE=8``. API keys:
``MNEMOSCOPE_API_KEYS=key1,key2`` (plain keys, hashed with SHA-256 as soon as they are
read; only the hashes are kept) or ``api_key_hashes = ["sha256:..."]`` in the config file
(``mnemoscope apikey hash KEY`` prints one), so no plain key needs to sit on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mnemoscope.errors import InputError

__all__ = ["ServerSettings", "hash_key", "load_settings"]


def hash_key(key: str) -> str:
    """``sha256:<hex>`` of an API key.

    Example:
        >>> hash_key("secret")[:15]
        'sha256:2bb80d53'
    """
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


class ServerSettings(BaseModel):
    """Everything the audit server can be told (see docs/server.md for each field)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str = "default"
    adapter: str | None = None
    profile: str | None = None  # None: the profile shipped for the default model
    rule: Literal["combined", "repcs", "crm-anomaly"] = "combined"
    db: str = "audits.db"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    device: str | None = None
    dtype: str | None = None
    api_key_hashes: list[str] = Field(default_factory=list)
    allow_anonymous: bool = False
    # batching and limits
    max_batch_size: int = Field(8, ge=1, le=256)
    max_wait_ms: float = Field(10.0, ge=0, le=10_000)
    queue_size: int = Field(64, ge=1, le=100_000)
    max_body_bytes: int = Field(1_000_000, ge=1024)
    max_context_tokens: int = Field(2048, ge=1)
    max_query_tokens: int = Field(256, ge=1)
    max_answer_tokens: int = Field(256, ge=1)
    max_batch_request: int = Field(32, ge=1, le=1024)
    max_new_tokens_limit: int = Field(64, ge=1, le=1024)
    request_timeout_s: float = Field(120.0, gt=0)
    shutdown_grace_s: float = Field(30.0, ge=0)
    retry_after_s: int = Field(1, ge=0)
    # log
    checkpoint_every: int = Field(64, ge=1)
    # file holding the checkpoint signing key (`mnemoscope log keygen`); the same on every replica
    log_key: str | None = None
    retention_days: float | None = Field(None, gt=0)
    store_inputs: bool = True
    # responses: repeat CRM's fields (anomaly_flag & co.) and `generation` at the top level, as
    # servers before the verdict-first layout did (docs/server.md, "Compatibility")
    legacy_crm_fields: bool = False
    threads: int | None = Field(None, ge=1)

    @field_validator("api_key_hashes")
    @classmethod
    def _check_hashes(cls, v: list[str]) -> list[str]:
        for h in v:
            if not (h.startswith("sha256:") and len(h) == 71):
                raise ValueError("api_key_hashes entries must look like 'sha256:<64 hex digits>'")
        return v

    def check_key(self, key: str) -> bool:
        import hmac

        h = hash_key(key)
        return any(hmac.compare_digest(h, k) for k in self.api_key_hashes)

    def public(self) -> dict[str, Any]:
        """The settings without secrets (for /v1/stats and logs)."""
        d = self.model_dump()
        d["api_key_hashes"] = f"{len(self.api_key_hashes)} key(s)"
        if d["db"].startswith(("postgresql://", "postgres://")) and "@" in d["db"]:
            d["db"] = "postgresql://***@" + d["db"].split("@", 1)[1]
        return d


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"config file not found: {path}")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        try:
            import tomllib
        except ImportError:  # pragma: no cover - python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        data = tomllib.loads(text)
    if not isinstance(data, dict):
        raise InputError(f"{path}: the config must be a table/object")
    return dict(data.get("server", data))


def load_settings(
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> ServerSettings:
    """Merge defaults, the config file, ``MNEMOSCOPE_*`` variables and explicit overrides.

    Raises:
        InputError: an unknown key or an invalid value, naming the field and its source.
    """
    env = dict(os.environ if env is None else env)
    data: dict[str, Any] = {}
    if config_file is None and env.get("MNEMOSCOPE_CONFIG"):
        config_file = env["MNEMOSCOPE_CONFIG"]
    if config_file is not None:
        data.update(_read_file(Path(config_file)))
    keys = data.pop("api_keys", None)
    hashes = list(data.get("api_key_hashes", []))
    if keys:
        hashes += [hash_key(k) for k in (keys if isinstance(keys, list) else str(keys).split(","))]
    for name in ServerSettings.model_fields:
        var = f"MNEMOSCOPE_{name.upper()}"
        if name == "api_key_hashes":
            if env.get(var):
                hashes += [h.strip() for h in env[var].split(",") if h.strip()]
            continue
        if env.get(var) not in (None, ""):
            data[name] = env[var]
    if env.get("MNEMOSCOPE_API_KEYS"):
        hashes += [hash_key(k.strip()) for k in env["MNEMOSCOPE_API_KEYS"].split(",") if k.strip()]
    for k, v in (overrides or {}).items():
        if v is not None:
            data[k] = v
    data["api_key_hashes"] = sorted(set(hashes))
    try:
        return ServerSettings(**data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise InputError(f"invalid server setting: {err['msg']}", field=loc) from None
