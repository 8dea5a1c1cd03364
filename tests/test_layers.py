"""No import circle between any two packages (the top-level packages, and the compiler's
rooms), whether the import is a statement or a module name handed to importlib: the layers
import-linter checks, plus what it cannot see. Backends the runtime loads are entry points
their own packages register (pyproject.toml), never module names in the runtime's code."""

from __future__ import annotations

import ast
from pathlib import Path

import tilecraft

PACKAGE = Path(tilecraft.__file__).parent
ROOMS = ("compiler",)  # packages whose subpackages are rooms of their own


def _unit(module: str) -> str:
    """The package a module belongs to: tilecraft.X, or tilecraft.compiler.Y for a room."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in ROOMS:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every tilecraft module `path` imports: statements anywhere in it, and string literals
    given to importlib.import_module or __import__."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if (
                name in ("import_module", "__import__")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                out.add(str(node.args[0].value))
    return {m for m in out if m == "tilecraft" or m.startswith("tilecraft.")}


def _graph() -> dict[str, set[str]]:
    known = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        me = _unit(_module_name(path))
        for target in _imports(path):
            while target not in known and "." in target:  # `from pkg import name`
                target = target.rsplit(".", 1)[0]
            other = _unit(target)
            if other != me and target in known and other != "tilecraft":
                edges.setdefault(me, set()).add(other)
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_scan_sees_the_imports_it_must():
    edges = _graph()
    assert "tilecraft.runtime" in edges["tilecraft.sim"]
    assert "tilecraft.compiler.mapping" in edges["tilecraft.compiler.operator"]
    circle = {"tilecraft.a": {"tilecraft.b"}, "tilecraft.b": {"tilecraft.a"}}
    assert _cycle(circle) == ["tilecraft.a", "tilecraft.b", "tilecraft.a"]


def test_no_import_circle_between_packages():
    circle = _cycle(_graph())
    assert circle is None, " -> ".join(circle)


def test_the_runtime_imports_neither_the_compiler_nor_the_simulators():
    edges = _graph()
    below = {
        e
        for e in edges.get("tilecraft.runtime", ())
        if e.startswith(("tilecraft.compiler", "tilecraft.sim"))
    }
    assert not below, below


def test_the_backends_the_runtime_loads_are_registered_entry_points():
    from tilecraft.runtime.device import DEVICES, KERNEL_COMPILERS, device_names, plugins

    assert {"sim", "rtl", "cpu", "gpu", "pynq"} <= set(device_names())
    assert {"jit", "ptx"} <= set(plugins(KERNEL_COMPILERS))
    for group in (DEVICES, KERNEL_COMPILERS):
        for ep in plugins(group).values():
            assert ep.value.startswith("tilecraft."), ep
