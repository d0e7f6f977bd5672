"""The package's layering, read from the source with `ast`: no import cycles, no private names across
modules, an engine-neutral core, and no engine named outside its own package."""
from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "nsa_policy"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _imports(name: str) -> list[tuple[str, tuple[str, ...], int]]:
    """(module imported, names taken from it, line) for every import, function-level ones included
    (a lazy import still closes a cycle when both sides run), TYPE_CHECKING blocks left out."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.extend((a.name, (), node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            out.append((base, tuple(a.name for a in node.names), node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for base, names, _ in _imports(m):
            for target in [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES] or [base]:
                if target in MODULES and target != m:
                    graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components, iterative enough for this size
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


def test_no_private_names_across_modules():
    """`from x import _y` only inside x's own package, for x's private submodules (runtime._flashmla)."""
    bad = []
    for m in MODULES:
        for base, names, line in _imports(m):
            if not base.startswith("nsa_policy"):
                continue
            for n in names:
                private_module = f"{base}.{n}" in MODULES
                if n.startswith("_") and not n.startswith("__") and not (private_module and m.startswith(base)):
                    bad.append(f"{MODULES[m].relative_to(PKG.parent)}:{line} imports {base}.{n}")
    assert bad == [], "\n".join(bad)


def test_bottom_layer_imports_nothing_above_it():
    for m in MODULES:
        if m.startswith("nsa_policy.base"):
            above = {b for b, _, _ in _imports(m) if b.startswith("nsa_policy") and not b.startswith("nsa_policy.base")}
            assert above == set(), f"{m} imports {sorted(above)}"


def _engine_names() -> tuple[str, ...]:
    from nsa_policy import engines

    return engines.names()


def test_core_names_no_engine_and_imports_no_engine_package():
    """The core is engine-neutral: no engine package imported, no engine's name in its code."""
    names = _engine_names()
    assert {"sglang", "vllm"} <= set(names)
    pattern = re.compile(r"""["'](?:""" + "|".join(map(re.escape, names)) + r""")\b""")
    for m, path in MODULES.items():
        if not m.startswith("nsa_policy.core"):
            continue
        for base, _, line in _imports(m):
            assert not base.startswith("nsa_policy.engines."), f"{path.name}:{line} imports {base}"
        code = "\n".join(ln.split("#", 1)[0] for ln in path.read_text().splitlines())
        hits = [ln for ln in code.splitlines() if pattern.search(ln) and '"""' not in ln]
        assert hits == [], f"{path.name} branches on an engine's name: {hits[:3]}"


ENGINE_BRANCH = re.compile(r"""(?:==|!=|\bin\b|startswith\()\s*\(?\s*["'](?:sglang|vllm)\b""")


def test_no_engine_name_branch_outside_the_engines_packages():
    """`engine == "vllm"`, `policy.startswith("vllm-")`: callers ask the registered engine instead."""
    bad = []
    for m, path in MODULES.items():
        if m.startswith("nsa_policy.engines"):
            continue
        for k, ln in enumerate(path.read_text().splitlines(), 1):
            code = ln.split("#", 1)[0]
            if ENGINE_BRANCH.search(code):
                bad.append(f"{path.relative_to(PKG.parent)}:{k}: {code.strip()}")
    assert bad == [], "\n".join(bad)
