"""A tiny model on disk, a profile calibrated for it, and a real `mnemoscope serve` subprocess."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

API_KEY = "test-key-1"


def pg_base_url() -> str:
    """The test PostgreSQL server (``MNEMOSCOPE_TEST_PG_URL``): skip without one, fail instead when
    ``MNEMOSCOPE_REQUIRE_SERVICES=1``."""
    import pytest

    url = os.environ.get("MNEMOSCOPE_TEST_PG_URL")
    if not url:
        if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
            pytest.fail("MNEMOSCOPE_TEST_PG_URL is not set (scripts/ci_services.sh starts PostgreSQL)")
        pytest.skip("no PostgreSQL: set MNEMOSCOPE_TEST_PG_URL (see scripts/ci_services.sh)")
    pytest.importorskip("psycopg")
    return url


def tiny_records(n: int = 40) -> list[Any]:
    from mnemoscope.data.records import Record

    return [
        Record(
            id=f"r{i}",
            context=f"The town of Zor{i} lies on the river Ka{i % 5}.",
            query=f"Where is Zor{i}?",
            label=i % 2,
        )
        for i in range(n)
    ]


def build_tiny_service(root: Path) -> tuple[Path, Path]:
    """Save a tiny llama + tokenizer to ``root/model`` and calibrate ``root/profile`` for it."""
    from helpers import tiny_model, tiny_tokenizer
    from mnemoscope.audit.calibrate import calibrate_profile
    from mnemoscope.audit.profile import CalibrationConfig
    from mnemoscope.models import load_model
    from mnemoscope.pipelines.crm.fitter import CRMFitter

    model_dir = root / "model"
    if not (model_dir / "config.json").is_file():
        tiny_model(layers=3).save_pretrained(model_dir)
        tiny_tokenizer().save_pretrained(model_dir)
    prof = root / "profile"
    if not (prof / "profile.json").is_file():
        lm = load_model(str(model_dir))
        # with CRM: the service tests read its block in every audit (the default fits none)
        calibrate_profile(
            lm,
            tiny_records(),
            prof,
            CalibrationConfig(max_new_tokens=4, chat=False, with_crm=True),
            progress=False,
            fitter=CRMFitter(),
        )
    return model_dir, prof


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path):
        self.proc = proc
        self.url = url
        self.log = log

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60, **kw
        )


def start_server(
    model_dir: Path,
    profile: Path,
    db: str,
    log: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    ready_s: float = 120,
) -> Server:
    port = free_port()
    e = dict(os.environ)
    e.update({"MNEMOSCOPE_API_KEYS": API_KEY, "PYTHONUNBUFFERED": "1"})
    e.update(env or {})
    cmd = [
        sys.executable,
        "-m",
        "mnemoscope",
        "serve",
        "--model",
        str(model_dir),
        "--profile",
        str(profile),
        "--db",
        db,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--threads",
        "1",
        *extra,
    ]
    f = log.open("ab")
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=e)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + ready_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return Server(proc, url, log)
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server not ready after {ready_s} s: {log.read_text()[-3000:]}")


def stop_server(s: Server, sig: int = signal.SIGTERM) -> int:
    if s.proc.poll() is None:
        s.proc.send_signal(sig)
        try:
            s.proc.wait(60)
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait(10)
    return int(s.proc.returncode)


@contextlib.contextmanager
def running(model_dir: Path, profile: Path, db: str, log: Path, *extra: str) -> Iterator[Server]:
    s = start_server(model_dir, profile, db, log, *extra)
    try:
        yield s
    finally:
        stop_server(s)


@contextlib.contextmanager
def serving(service: tuple[Path, Path], root: Path) -> Iterator[Server]:
    """A server for ``service`` = (model folder, profile) with its database and log under ``root``."""
    model_dir, profile = service
    with running(model_dir, profile, str(root / "audits.db"), root / "server.log") as s:
        yield s


class PrivatePostgres:
    """A PostgreSQL server of its own (``initdb`` + ``pg_ctl`` in a temporary folder, its own
    port), for tests that restart the database: the shared test server is used by other tests
    and must not be restarted under them."""

    def __init__(self) -> None:
        import pwd
        import tempfile

        # its own folder directly under the temp dir: pytest's tmp_path is private to the user
        # running the tests, and the server may have to run as another one
        self.root = Path(tempfile.mkdtemp(prefix="mnemoscope-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.bindir = _pg_bindir()
        self._as: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the postgres user
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError as e:
                raise RuntimeError("running as root and there is no 'postgres' user to run PostgreSQL") from e
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgresql://mnemoscope@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 120) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=timeout)

    def init(self) -> PrivatePostgres:
        self._run(
            f"{self.bindir}/initdb", "-D", str(self.data), "-A", "trust", "-U", "mnemoscope", "--no-sync"
        )
        return self.start()

    def start(self) -> PrivatePostgres:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._run(
            f"{self.bindir}/pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "pg.log"),
            "-o",
            opts,
            "-w",
            "start",
        )
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run(f"{self.bindir}/pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def log(self) -> str:
        p = self.root / "pg.log"
        return p.read_text(errors="replace")[-3000:] if p.is_file() else ""

    def remove(self) -> None:
        import shutil

        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def _pg_bindir() -> str:
    import glob
    import shutil

    found = shutil.which("pg_ctl")
    if found:
        return str(Path(found).resolve().parent)
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not dirs:
        raise FileNotFoundError("no PostgreSQL server binaries (pg_ctl, initdb)")
    return dirs[-1]


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL server for the test (skips without the server binaries, fails instead
    under ``MNEMOSCOPE_REQUIRE_SERVICES=1``); stopped and removed at the end."""
    import pytest

    pytest.importorskip("psycopg")
    pg: PrivatePostgres | None = None
    try:
        pg = PrivatePostgres()
        pg.init()
    except (FileNotFoundError, RuntimeError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", b"") or b""
        msg = f"cannot start a private PostgreSQL: {e} {detail.decode(errors='replace')[-500:]}"
        if pg is not None:
            pg.remove()
        if os.environ.get("MNEMOSCOPE_REQUIRE_SERVICES") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        yield pg
    finally:
        pg.remove()
