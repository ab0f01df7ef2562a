"""The package's layering, checked on the source: data flows one way, privates stay private.

Layers (lower first; a module may import its own layer and any lower one, never a higher one):

    base        errors, io, divergence, identity, paths, registry, the package root
    stats/data  pure statistics; record parsing
    models      spec -> loaded model
    trace       model + prompts -> traces
    features    traces -> numbers
    detectors   numbers -> fitted estimators and scores
    report      results -> figures and tables
    bench       ground truth (authored data, loaders, injection, verification)
    audit       the audit core: requests, backends, signals, verdict, auditor, profile, calibration,
                validation, draw, results, layout; the only place a verdict or threshold is decided
    pipelines   the research jobs (crm, repcs, radar, scar, leaderboard, blind) and Ray
    server, integrations   serve / embed a pipeline
    cli         thin commands

Imports inside functions count too (a lazy import is still a dependency). Beyond the layers:

* no import cycle anywhere, same-layer ones included (``from pkg import submodule`` is an edge to
  the submodule; a package's ``__init__`` importing its own submodules is an edge too);
* the audit core imports no research job (its layer is below ``pipelines/``);
* a verdict is decided only in ``audit/``: a ``decide_*`` function is defined and called only
  there, no other layer compares a verdict score (``p_memory``, ``repcs_z``, ``anomaly_score``)
  with a threshold, and the consumers (server, integrations, cli) read the result's
  ``memory_flag`` instead of testing its ``source`` label against ``"memory"``/``"mixed"``/
  ``"context"`` (span- and token-level sources, iterated from ``spans``/``tokens``, are data);
* a detector (or a feature) never imports ``models/``: it consumes traces.

Known violations that another change is removing are listed below with the reason; each has a
strict expected-failure test, so the allowance must be deleted the moment the violation is gone.
(Issue 24 removed the last import cycles, cli/main.py <-> every command and pipelines/audit.py <->
profile.py <-> repcs.py, and the consumers' re-decisions of the verdict: storage, records, llamaindex.)
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "mnemoscope"

RANK = {
    "": 0,
    "errors": 0,
    "io": 0,
    "provenance": 0,
    "divergence": 0,
    "identity": 0,
    "paths": 0,
    "registry": 0,
    "__main__": 11,
    "stats": 1,
    "data": 1,
    "models": 2,
    "trace": 3,
    "features": 4,
    "detectors": 5,
    "report": 6,
    "bench": 7,
    "audit": 8,
    "pipelines": 9,
    "server": 10,
    "integrations": 10,
    "cli": 11,
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


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def _imports(module: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names imported from it, line) for every mnemoscope import, lazy ones included."""
    tree = _tree(path)
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


def _rel(path: Path) -> str:
    return path.relative_to(SRC.parent).as_posix()


# -- import graph --------------------------------------------------------------------------------


def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: first line}; ``from pkg import sub`` points at ``pkg.sub``."""
    graph: dict[str, dict[str, int]] = {}
    for mod, path in MODULES.items():
        edges: dict[str, int] = {}
        for target, names, line in _imports(mod, path):
            for n in names:
                if f"{target}.{n}" in MODULES:
                    edges.setdefault(f"{target}.{n}", line)
            if target in MODULES:
                edges.setdefault(target, line)
        edges.pop(mod, None)
        graph[mod] = edges
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of two or more modules (the import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _describe_cycle(comp: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(comp)
    edges = [
        f"    {_rel(MODULES[a])}:{line} imports {b}"
        for a in comp
        for b, line in sorted(graph[a].items())
        if b in members
    ]
    return " <-> ".join(comp) + "\n" + "\n".join(edges)


def test_every_layer_is_known():
    unknown = sorted({_layer(m) for m in MODULES} - set(RANK))
    assert not unknown, f"add these packages to the layer table in {__file__}: {unknown}"


# (module, imported module prefix): the only allowed upward imports, each being removed by a change
# in flight; test_known_violations_are_still_there fails the moment one is gone, so that its
# allowance is deleted with it.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _known(mod: str, target: str) -> bool:
    return any(mod == m and target.startswith(t) for m, t in KNOWN_UPWARD)


def test_known_violations_are_still_there():
    seen = {
        (m, t)
        for mod, path in MODULES.items()
        for target, _, _ in _imports(mod, path)
        for m, t in KNOWN_UPWARD
        if mod == m and target.startswith(t)
    }
    gone = sorted(set(KNOWN_UPWARD) - seen)
    assert not gone, f"these violations are gone: delete their allowance in KNOWN_UPWARD: {gone}"


def test_no_module_imports_a_higher_layer():
    bad = []
    for mod, path in MODULES.items():
        mine = RANK[_layer(mod)]
        for target, _, line in _imports(mod, path):
            theirs = RANK.get(_layer(target), 0)
            if theirs > mine and not _known(mod, target):
                bad.append(
                    f"{path.relative_to(SRC.parent)}:{line} ({_layer(mod) or 'base'}) imports {target}"
                )
    assert not bad, "lower layers import higher ones:\n" + "\n".join(bad)


def test_the_audit_core_imports_no_pipeline():
    """Issue 35: calibration's CRM part is a fitter that ``pipelines/crm`` plugs in; no module of
    ``audit/`` imports ``mnemoscope.pipelines`` (lazily or not), with no allowance."""
    bad = [
        f"{path.relative_to(SRC.parent)}:{line} imports {target}"
        for mod, path in MODULES.items()
        if _layer(mod) == "audit"
        for target, _, line in _imports(mod, path)
        if target == "mnemoscope.pipelines" or target.startswith("mnemoscope.pipelines.")
    ]
    assert not bad, "the audit core imports a research job:\n" + "\n".join(bad)


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
        tree = _tree(path)
        for node in ast.walk(tree):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.name.startswith("_")
                and not node.name.startswith("__")
            ):
                privates_defined.setdefault(node.name, set()).add(mod)
    bad = []
    for mod, path in MODULES.items():
        tree = _tree(path)
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
        "import mnemoscope.server, mnemoscope.server.app, mnemoscope.server.schemas, mnemoscope.audit.auditor\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_strongly_connected_finds_cycles_of_any_length():
    g = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}, "e": {"e": 1}, "f": {}}
    assert _strongly_connected(g) == [["a", "b", "c"]]
    assert _strongly_connected({"x": {"y": 1}, "y": {"x": 2}}) == [["x", "y"]]
    assert _strongly_connected({"x": {"y": 1}, "y": {}}) == []


def test_no_import_cycle():
    graph = _graph()
    bad = [_describe_cycle(c, graph) for c in _strongly_connected(graph)]
    assert not bad, (
        "import cycles (lazy imports count; break them with a lower shared module):\n" + "\n".join(bad)
    )


# -- verdicts are decided in audit/ only ------------------------------------------------------

VERDICT_SCORES = frozenset({"p_memory", "repcs_z", "anomaly_score"})
VERDICT_LABELS = frozenset({"memory", "mixed", "context"})
VERDICT_FIELDS = frozenset({"source", "src", "verdict"})  # what a verdict's label is called
CONSUMERS = frozenset({"server", "integrations", "cli"})


def _key(node: ast.AST) -> str | None:
    """The field an expression reads: ``x``, ``o.x``, ``o["x"]`` or ``o.get("x")`` -> ``"x"``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value if isinstance(node.slice.value, str) else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return node.args[0].value if isinstance(node.args[0].value, str) else None
    return None


def _owner(node: ast.AST) -> str | None:
    """The variable a field is read from (``s`` in ``s["source"]``)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        inner: ast.AST | None = node.func.value
    else:
        inner = getattr(node, "value", None)
    return inner.id if isinstance(inner, ast.Name) else None


def _piece_owner(node: ast.AST) -> str | None:
    """``s`` for ``s``, ``s.source``, ``s["source"]`` or ``s.get("source")``."""
    return node.id if isinstance(node, ast.Name) else _owner(node)


def _piece_variables(tree: ast.AST) -> set[str]:
    """Loop variables over spans or tokens: their ``source`` is a piece's, not the verdict."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)):
            it = ast.unparse(node.iter).lower()
            if ("span" in it or "token" in it) and isinstance(node.target, ast.Name):
                out.add(node.target.id)
    return out


def _is_label(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in VERDICT_LABELS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(isinstance(e, ast.Constant) and e.value in VERDICT_LABELS for e in node.elts)
    return False


def _verdict_sites() -> list[tuple[str, int, str, str]]:
    """(path, line, expression, why) of every verdict decided outside audit/."""
    out = []
    for mod, path in MODULES.items():
        layer = _layer(mod)
        if layer == "audit":
            continue
        tree = _tree(path)
        pieces = _piece_variables(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("decide_"):
                out.append((_rel(path), node.lineno, node.name, "a decide_* function outside audit/"))
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name.startswith("decide_"):
                    out.append((_rel(path), node.lineno, ast.unparse(node), "calls a verdict function"))
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            for op, a, b in zip(node.ops, operands[:-1], operands[1:], strict=True):
                expr = ast.unparse(node)
                if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) and (
                    _key(a) in VERDICT_SCORES or _key(b) in VERDICT_SCORES
                ):
                    out.append((_rel(path), node.lineno, expr, "compares a verdict score with a threshold"))
                if layer in CONSUMERS and isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    for field, other in ((a, b), (b, a)):
                        if (
                            _key(field) in VERDICT_FIELDS
                            and _is_label(other)
                            and _piece_owner(field) not in pieces
                        ):
                            out.append(
                                (
                                    _rel(path),
                                    node.lineno,
                                    expr,
                                    "derives memory from the verdict's source label",
                                )
                            )
    return out


def test_verdict_scanner_sees_the_patterns():
    code = (
        "def f(rec, d, spans):\n"
        "    a = rec['source'] == 'memory'\n"
        "    b = d.get('p_memory') > 0.5\n"
        "    c = [s for s in spans if s['source'] == 'memory']\n"
        "    return decide_source(a, b, c, src == 'mixed')\n"
    )
    tree = ast.parse(code)
    assert _piece_variables(tree) == {"s"}
    cmp = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert [_key(c.left) for c in cmp] == ["source", "p_memory", "src", "source"]  # ast.walk is breadth-first
    assert [_piece_owner(c.left) for c in cmp] == ["rec", "d", "src", "s"]
    assert _is_label(cmp[0].comparators[0]) and not _is_label(ast.Constant(0.5))
    assert _key(cmp[2].left) in VERDICT_FIELDS


def test_verdicts_are_decided_in_the_audit_core_only():
    bad = [f"{p}:{line} {expr!r}: {why}" for p, line, expr, why in _verdict_sites()]
    assert not bad, (
        "a verdict decided outside audit/ (read AuditResult.memory_flag / source, or add the rule to "
        "audit/):\n" + "\n".join(bad)
    )


# -- detectors consume traces, never models --------------------------------------------------------


def _model_imports() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for mod, path in MODULES.items():
        if _layer(mod) not in ("detectors", "features"):
            continue
        for target, _, line in _imports(mod, path):
            if _layer(target) == "models":
                out.setdefault(_rel(path), []).append(f"{_rel(path)}:{line} imports {target}")
    return out


def test_detectors_and_features_do_not_import_models():
    found = _model_imports()
    bad = [line for lines in found.values() for line in lines]
    assert not bad, (
        "detectors/features import models/ (take traces or ModelInfo dicts instead):\n" + "\n".join(bad)
    )


# -- the architecture page names every module ------------------------------------------------------


def test_docs_name_every_module():
    """docs/architecture.md names every module by its path under src/mnemoscope/ (a package by
    its folder when the page lists it as one, e.g. ``data/profiles/``)."""
    doc = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if path.name == "__init__.py":
            pkg = rel[: -len("__init__.py")]
            if pkg and f"`{pkg}" not in doc:  # a package: its folder, or a module in it
                missing.append(pkg)
            continue
        if f"`{rel}`" not in doc:
            missing.append(rel)
    assert not missing, "docs/architecture.md does not name these modules: " + ", ".join(missing)
