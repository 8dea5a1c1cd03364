"""The accelerator's RTL in Amaranth (the modules here import it; this file does not).

`source_digest` names the RTL a measured figure (synthesis resources, a route's Fmax) was made
from: a figure from other sources than the tree's is from an earlier design. It reads the code,
not the text: formatting, comments and docstrings do not change it.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

HERE = Path(__file__).parent


def source_digest() -> str:
    """16 hex digits over the RTL's sources: this package's Python files, by name and by their
    syntax tree without docstrings."""
    h = hashlib.sha256()
    for f in sorted(HERE.glob("*.py")):
        h.update(f.name.encode() + b"\0" + _code(f.read_text()).encode())
    return h.hexdigest()[:16]


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
