"""Pareto fronts: points no other point beats on latency and a resource at once."""

from __future__ import annotations

RESOURCES = ("lut", "dsp", "bram36")


def dominates(a: dict, b: dict, keys: tuple[str, ...]) -> bool:
    """`a` is at least as good as `b` on every key and better on one (lower is better)."""
    return all(a[k] <= b[k] for k in keys) and any(a[k] < b[k] for k in keys)


def front(points: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """The points no other point dominates on `keys`, by the first key."""
    kept = [p for p in points if not any(dominates(q, p, keys) for q in points if q is not p)]
    return sorted(kept, key=lambda p: tuple(p[k] for k in keys))


def fronts(points: list[dict]) -> dict[str, list[str]]:
    """Names on the front of latency against each resource, and against all of them jointly."""
    out = {r: [p["name"] for p in front(points, ("latency_ms", r))] for r in RESOURCES}
    out["joint"] = [p["name"] for p in front(points, ("latency_ms", *RESOURCES))]
    return out
