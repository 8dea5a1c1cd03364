"""The accelerator's RTL in Amaranth (the modules here import it; this file does not).

`source_digest` names the RTL a measured figure (synthesis resources, a route's Fmax) was made
from: a figure from other sources than the tree's is from an earlier design. It reads the code,
not the text: formatting, comments and docstrings do not change it. `design_digest` names a
design by its Verilog instead (what synthesis reads), and `elaboration_digest` the sources a
config's Verilog is elaborated from (all of `tilecraft.hw`, and Amaranth's version): the DSE's
synthesis cache keeps a design's figures by the first and remembers each config's design by
the second, so an edit that leaves a config's Verilog as it was costs no synthesis.
"""

from __future__ import annotations

import ast
import hashlib
import re
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).parent


def source_digest() -> str:
    """16 hex digits over the RTL's sources: this package's Python files, by name and by their
    syntax tree without docstrings."""
    h = hashlib.sha256()
    for f in sorted(HERE.glob("*.py")):
        h.update(f.name.encode() + b"\0" + _code(f.read_text()).encode())
    return h.hexdigest()[:16]


def elaboration_digest() -> str:
    """16 hex digits over every source a config's Verilog is elaborated from: tilecraft.hw's
    Python files (the RTL, the ISA's layouts, the config, the register map), by path and by
    syntax tree without docstrings, and the Amaranth version that writes the Verilog."""
    h = hashlib.sha256(f"amaranth {version('amaranth')}".encode())
    for f in sorted(HERE.parent.rglob("*.py")):
        name = f.relative_to(HERE.parent).as_posix()
        h.update(name.encode() + b"\0" + _code(f.read_text()).encode())
    return h.hexdigest()[:16]


# the attributes Amaranth writes on each cell and wire: where in the Python it was made
_SOURCE_ATTRIBUTE = re.compile(r'\(\* src = "[^"]*" \*\)')


def design_digest(verilog: str) -> str:
    """16 hex digits over a design's Verilog without its `(* src = "file:line" *)` attributes:
    the same design made from edited or moved sources has the same digest."""
    return hashlib.sha256(_SOURCE_ATTRIBUTE.sub("", verilog).encode()).hexdigest()[:16]


def _code(text: str) -> str:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)
