"""Every document the tree cites is in the repository, and every file a document names exists:
a clone has no ../shared. Paths are taken from the repository's Markdown (README, docs/, the
benchmarks README) and from the package's docstrings and comments."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "tilecraft"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted(PACKAGE.rglob("*.md"))]  # fmt: skip
# a path with a file name, optionally in backticks or a Markdown link: compiler/x.py, docs/A.md
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.(?:py|md|toml|json|npz|v|png|tcl))\b")
OUTSIDE = ("/tmp/", "http", "~/", "$", "build/")  # not the repository's files (build/:
# what commands write, such as a recorded sweep's synthesis cache; a clone has none)


FILES = [p.relative_to(ROOT).as_posix() for p in [*(ROOT / "src").rglob("*"),
          *(ROOT / "tests").rglob("*"), *(ROOT / "docs").rglob("*"),
          *(ROOT / "scripts").rglob("*")] if p.is_file()]  # fmt: skip


def _resolves(name: str, doc: Path) -> bool:
    """A path (with a folder) resolves from the document's folder, the repository's root or
    the package, or is the tail of a file the tree has; a bare module name is some file's."""
    if any(name.startswith(o) for o in OUTSIDE) or "SUITE" in name:
        return True
    if "/" not in name:
        return not name.endswith(".py") or any(f.endswith("/" + name) for f in FILES)
    bases = [doc.parent, ROOT, ROOT / "src", PACKAGE]
    return any((b / name).exists() for b in bases) or any(f.endswith("/" + name) for f in FILES)


def _cited(text: str) -> set[str]:
    return set(PATH.findall(text))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_document_names_exists(doc):
    missing = sorted(n for n in _cited(doc.read_text()) if not _resolves(n, doc))
    assert not missing, f"{doc.relative_to(ROOT)} names files the clone does not have: {missing}"


def test_the_tree_cites_no_document_outside_it():
    """ARCHITECTURE.md and BENCHMARKS.md were documents of ../shared: the repository's own are
    docs/ARCHITECTURE.md and the benchmarks README, and every citation says which."""
    bad = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *DOCS,
                 ROOT / "Makefile", ROOT / "pyproject.toml"]:  # fmt: skip
        if path == Path(__file__).resolve() or path.parent == ROOT / "docs":
            continue  # (docs/ links to its neighbours by their own names)
        text = path.read_text()
        for m in re.finditer(r"(?<![\w/])(ARCHITECTURE\.md|BENCHMARKS\.md|shared/)", text):
            bad.append(f"{path.relative_to(ROOT)}: {text[max(0, m.start() - 30) : m.end()]!r}")
    assert not bad, bad


def test_docstrings_name_modules_that_exist():
    """A docstring or comment that names a module file of the package (`compiler/x.py`,
    `hw/rtl/y.py`) names one the tree has."""
    missing = []
    for path in PACKAGE.rglob("*.py"):
        for name in _cited(path.read_text()):
            if name.endswith(".py") and "/" in name and not _resolves(name, path):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, missing
