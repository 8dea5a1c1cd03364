"""The README tells the truth: its Python examples run as written, and the CLI table lists
every subcommand the parser has."""

from __future__ import annotations

import re
from pathlib import Path

from tilecraft.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_quickstart_runs_as_written(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), scope)  # noqa: S102 - our own README
    out = capsys.readouterr().out
    assert "bit-exact vs the reference" in out
    assert scope["c"].shape == (64, 128) and scope["y"].shape == (1, 64, 56, 56)
    assert (tmp_path / "gemm.tcp").is_file()


def test_the_cli_table_lists_every_subcommand():
    text = README.read_text()
    listed = set(re.findall(r"^\| `tilecraft ([a-z-]+(?: [a-z0-9-]+)?)", text, re.M))
    parser = build_parser()
    commands = set()
    for action in parser._subparsers._group_actions:
        for name, sub in action.choices.items():
            nested = [a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction"]
            if nested:
                commands |= {f"{name} {n}" for n in nested[0].choices}
            elif name == "bench":
                commands |= {f"bench {s}" for s in sub._actions[1].choices}
            else:
                commands.add(name)
    assert {c.split(" [")[0] for c in listed} >= commands, commands - listed
