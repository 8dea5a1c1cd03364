"""Progress shows on a terminal (or when forced) and is silent otherwise; it never changes what
it wraps."""

from __future__ import annotations

from tilecraft import progress


def test_silent_when_not_a_terminal(monkeypatch, capsys):
    monkeypatch.delenv("TILECRAFT_PROGRESS", raising=False)
    assert not progress.enabled()  # pytest captures stderr: not a terminal
    with progress.task("working"):
        items = list(progress.track(range(5), "items"))
    assert items == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""


def test_forced_progress_draws_and_passes_items_through(monkeypatch):
    monkeypatch.setenv("TILECRAFT_PROGRESS", "1")
    assert progress.enabled()
    with progress.task("working"):
        assert list(progress.track(iter("abc"), "letters", total=3)) == ["a", "b", "c"]
    monkeypatch.setenv("TILECRAFT_PROGRESS", "0")
    assert not progress.enabled()
