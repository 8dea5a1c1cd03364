"""Shared test helpers live next to this file (tests/ is on sys.path through it)."""
