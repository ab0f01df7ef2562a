"""The package's layering, checked on the source: data flows one way, privates stay private.

Layers (lower first; a module may import its own layer and any lower one, never a higher one):

    base        errors, io, divergence, paths, registry, the package root
    stats/data  pure statistics; record parsing
    models      spec -> loaded model
    trace       model + prompts -> traces
    features    traces -> numbers
    detectors   numbers -> fitted estimators and scores
    report      results -> figures and tables
    bench       ground truth (authored data, loaders, injection, verification)
    pipelines   one module per job: the only place a verdict or threshold is decided
    server, integrations   serve / embed a pipeline
    cli         thin commands

Imports inside functions count too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "mnemoscope"

RANK = {
    "": 0,
    "errors": 0,
    "io": 0,
    "provenance": 0,
    "divergence": 0,
    "paths": 0,
    "registry": 0,
    "__main__": 10,
    "stats": 1,
    "data": 1,
    "models": 2,
    "trace": 3,
    "features": 4,
    "detectors": 5,
    "report": 6,
    "bench": 7,
    "pipelines": 8,
    "server": 9,
    "integrations": 9,
    "cli": 10,
}


def _layer(module: str) -> str:
    parts = module.split(".")
    assert parts[0] == "mnemoscope", module
    return parts[1] if len(parts) > 1 else ""


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names imported from it, line) for every mnemoscope import, lazy ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("mnemoscope")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("mnemoscope"):
                out.append((target, [a.name for a in node.names], node.lineno))
    return out


MODULES = _modules()


def test_every_layer_is_known():
    unknown = sorted({_layer(m) for m in MODULES} - set(RANK))
    assert not unknown, f"add these packages to the layer table in {__file__}: {unknown}"


def test_no_module_imports_a_higher_layer():
    bad = []
    for mod, path in MODULES.items():
        mine = RANK[_layer(mod)]
        for target, _, line in _imports(mod, path):
            theirs = RANK.get(_layer(target), 0)
            if theirs > mine:
                bad.append(
                    f"{path.relative_to(SRC.parent)}:{line} ({_layer(mod) or 'base'}) imports {target}"
                )
    assert not bad, "lower layers import higher ones:\n" + "\n".join(bad)


def test_no_private_name_crosses_a_module_boundary():
    bad = []
    for mod, path in MODULES.items():
        for target, names, line in _imports(mod, path):
            if target == mod:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            parts = target.split(".")
            # a package-private module (pkg._common) may serve the modules of its own package
            same_package = mod.rsplit(".", 1)[0] == target.rsplit(".", 1)[0]
            private_module = any(p.startswith("_") and not p.startswith("__") for p in parts)
            if private or (private_module and not same_package):
                bad.append(f"{path.relative_to(SRC.parent)}:{line} imports {private or target} from {target}")
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_private_attributes_of_other_modules_are_not_used():
    """``tracer._batches``-style access to another object's private helpers, by name."""
    privates_defined: dict[str, set[str]] = {}
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.name.startswith("_")
                and not node.name.startswith("__")
            ):
                privates_defined.setdefault(node.name, set()).add(mod)
    bad = []
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in privates_defined
                and mod not in privates_defined[node.attr]
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                bad.append(f"{path.relative_to(SRC.parent)}:{node.lineno} uses .{node.attr}")
    assert not bad, "private methods of other modules used:\n" + "\n".join(bad)


@pytest.mark.parametrize("blocked", ["mnemoscope.bench"])
def test_server_imports_without_the_benchmark_package(blocked):
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"
        "import mnemoscope.server, mnemoscope.server.app, mnemoscope.server.schemas, mnemoscope.pipelines.audit\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
