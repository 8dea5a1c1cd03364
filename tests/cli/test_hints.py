"""A message that tells the user what to do names only flags that exist where the user is.

Statically, every error and warning in the package that names a `--flag`: one that names a
command (`tilecraft hw timing ... --record`) names that command's flags; one raised by a CLI
function names flags of every command that reaches the function; any other names a flag some
command takes. Then, as a user meets them: every command that reads an ONNX model, given one
with a dynamic dimension, names `--input-shape`, takes it, and gets past the error with it."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import numpy as np
import pytest

import tilecraft
from tilecraft.cli import build_parser, main

PACKAGE = Path(tilecraft.__file__).parent
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
WORD = re.compile(r"[a-z][a-z0-9-]*|[A-Z][A-Za-z0-9.]*")


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))
    if path:
        yield path, parser


COMMANDS = dict(_commands(build_parser()))
ALIASES = {("compile",): ("compile-model",), ("tune",): ("tune", "model")}  # `compile MODEL.onnx`


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


def _text(node: ast.AST) -> str:
    """A message's words: its string constants, f-string values as `{}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    if isinstance(node, ast.Call):
        return " ".join(_text(a) for a in node.args)
    return ""


def _messages():
    """(file, enclosing function, message) for every raise and warning that names a flag."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]:
            for node in ast.walk(func):
                call = node.exc if isinstance(node, ast.Raise) else node
                if not isinstance(call, ast.Call):
                    continue
                name = getattr(call.func, "id", getattr(call.func, "attr", ""))
                if not (isinstance(node, ast.Raise) or name in ("warn", "error")):
                    continue
                text = _text(call)
                if FLAG.search(text):
                    where = func.name if isinstance(func, ast.FunctionDef) else None
                    yield path.relative_to(PACKAGE), where, text


def _named_command(text: str):
    """The command a message names after `tilecraft`, and the text after it."""
    found = re.search(r"\btilecraft ", text)
    if not found:
        return None, text
    words, rest = [], text[found.end() :]
    for w in rest.split():
        if not WORD.fullmatch(w):
            break
        words.append(w)
    for n in range(len(words), 0, -1):
        path = ALIASES.get(tuple(words[:n]), tuple(words[:n]))
        if path in COMMANDS and (n == len(words) or (*path, words[n]) not in COMMANDS):
            return path, rest
    return None, text


def _cli_callers() -> dict[str, set[tuple[str, ...]]]:
    """Each CLI function's name -> the commands that reach it (their handler calls it,
    directly or through other CLI functions)."""
    calls: dict[str, set[str]] = {}
    for path in (PACKAGE / "cli").glob("*.py"):
        for f in ast.walk(ast.parse(path.read_text())):
            if isinstance(f, ast.FunctionDef):
                names = {
                    getattr(c.func, "id", getattr(c.func, "attr", None))
                    for c in ast.walk(f)
                    if isinstance(c, ast.Call)
                }
                calls.setdefault(f.name, set()).update(n for n in names if n)
    reach: dict[str, set[tuple[str, ...]]] = {}
    for command, parser in COMMANDS.items():
        handler = parser._defaults.get("func")
        if handler is None:
            continue
        todo, seen = [handler.__name__], set()
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            reach.setdefault(f, set()).add(command)
            todo.extend(calls.get(f, ()))
    return reach


MESSAGES = list(_messages())


def test_messages_that_name_flags_are_found():
    assert len(MESSAGES) >= 10, MESSAGES  # the scan itself works
    assert any("--input-shape" in m for *_, m in MESSAGES)


@pytest.mark.parametrize(
    "where, function, text", MESSAGES, ids=[f"{p}:{f}" for p, f, _ in MESSAGES]
)
def test_every_flag_a_message_names_exists_where_it_is_met(where, function, text):
    every = set().union(*(_flags(p) for p in COMMANDS.values()))
    command, rest = _named_command(text)
    if command is not None:  # "tilecraft hw timing --config C --record"
        missing = set(FLAG.findall(rest)) - _flags(COMMANDS[command])
        assert not missing, f"{where}: `tilecraft {' '.join(command)}` has no {missing}: {text!r}"
        return
    flags = set(FLAG.findall(text))
    assert flags <= every, f"{where}: no command takes {flags - every}: {text!r}"
    if where.parts[0] == "cli":
        for reached in sorted(_cli_callers().get(function, ())):
            missing = flags - _flags(COMMANDS[reached])
            assert not missing, (
                f"{where} ({function}): `tilecraft {' '.join(reached)}` "
                f"reaches {text!r} and has no {missing}"
            )


def _dynamic_model(tmp_path) -> Path:
    import onnx
    from network_models import tiny_resnet

    model = tiny_resnet()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, str(path))
    return path


MODEL_COMMANDS = sorted(
    c
    for c, p in COMMANDS.items()
    if any(
        a.dest == "model" and not a.option_strings and "ONNX" in (a.help or "") for a in p._actions
    )
)


def test_the_model_commands_are_found():
    assert {("partition",), ("compile-model",), ("run",), ("tune", "model")} <= set(MODEL_COMMANDS)


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=" ".join)
def test_a_dynamic_dimension_names_a_flag_the_command_takes(tmp_path, capsys, command):
    pytest.importorskip("onnx")
    path = _dynamic_model(tmp_path)
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 16, 16), np.float32))
    extra = {
        ("run",): ["--input", str(x), "--device", "cpu"],
        ("compile-model",): ["--calib-random", "1", "-o", str(tmp_path / "m.tcm")],
        ("tune", "model"): ["--calib-random", "1", "--trials", "1"],
    }.get(command, [])
    argv = [*command, str(path), *extra]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "dynamic dimension 'batch'" in err
    named = set(FLAG.findall(err))
    assert "--input-shape" in named and named <= _flags(COMMANDS[command]), (named, err)
    if command == ("run",):
        pytest.importorskip("llvmlite")
    main([*argv, "--input-shape", "input=1,3,16,16"])
    assert "dynamic dimension" not in capsys.readouterr().err
