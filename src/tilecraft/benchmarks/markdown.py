"""How the benchmarks README prints a recorded figure: a value, a schedule, a Markdown table, a
suite's block of figures with their goals (`tables.py` says which figures each suite shows)."""

from __future__ import annotations

Row = tuple[str, str, str]  # (JSON key path, what it is, goal)


def lookup(data, path: str):
    """The value at a dotted key path (list indices as numbers), or None where it is not."""
    for part in path.split("."):
        if isinstance(data, list):
            data = data[int(part)]
        elif isinstance(data, dict) and part in data:
            data = data[part]
        else:
            return None
    return data


def value(v, digits: int = 3) -> str:
    """A figure as the README prints it."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.{digits}f}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)


def schedule_text(s) -> str:
    """A recorded schedule as `tilecraft bench` prints it: tiles, order, slots."""
    if not isinstance(s, dict):
        return str(s or "")
    tiles = " ".join(str(s[k]) for k in ("tile_oc", "tile_ic", "tile_oh", "tile_ow"))
    slots = f"x{s['acc_slots']}" if s.get("double_buffer") else "single"
    return f"{tiles} {s.get('order', '')} {slots}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def figures_block(result: dict, rows: list[Row]) -> str:
    """A suite's figures: each key's value in `result`, with what it is and its goal."""
    return md_table(
        ["figure (JSON key)", "goal", "measured"],
        [
            [f"`{key}` ({what})" if what else f"`{key}`", goal, f"**{value(lookup(result, key))}**"]
            for key, what, goal in rows
        ],
    )
