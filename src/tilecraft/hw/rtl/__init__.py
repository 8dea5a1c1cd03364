"""The accelerator's RTL in Amaranth (the modules here import it; this file does not).

`source_digest` names the RTL a measured figure (synthesis resources, a route's Fmax) was made
from: a figure from other sources than the tree's is from an earlier design.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

HERE = Path(__file__).parent


def source_digest() -> str:
    """16 hex digits over the RTL's sources (this package's Python files, by name and content)."""
    h = hashlib.sha256()
    for f in sorted(HERE.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]
