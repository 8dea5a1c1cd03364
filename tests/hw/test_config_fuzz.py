"""Whatever a config file holds, HwConfig.load ends in a config or a ConfigError naming the file or
the field, never another exception: random bytes, random TOML/JSON values for every field (the
right names with the wrong types or ranges), deep nesting."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
NAMES = [f.name for f in fields(HwConfig)]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _load_or_error(path) -> HwConfig | None:
    try:
        return HwConfig.load(path)
    except ConfigError:
        return None


@SETTINGS
@given(data=st.binary(max_size=512), suffix=st.sampled_from([".toml", ".json"]))
def test_random_bytes(tmp_path, data, suffix):
    path = tmp_path / f"c{suffix}"
    path.write_bytes(data)
    _load_or_error(path)


@SETTINGS
@given(
    values=st.dictionaries(
        st.sampled_from(NAMES) | st.text(max_size=6),
        VALUES | st.integers(-4, 40),  # often near the legal ranges
        max_size=6,
    ),
    under_hw=st.booleans(),
)
def test_random_field_values(tmp_path, values, under_hw):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"hw": values} if under_hw else values))
    cfg = _load_or_error(path)
    if cfg is not None:  # whatever is accepted is a whole, usable config
        assert HwConfig.from_dict(json.loads(cfg.to_json())) == cfg
        assert cfg.describe()


@SETTINGS
@given(
    name=st.sampled_from(NAMES),
    text=st.sampled_from(["1.5", '"3"', "true", "[3]", "{}", "-1", "99999999999999999999", "4"]),
)
def test_toml_values_of_the_wrong_type(tmp_path, name, text):
    path = tmp_path / "c.toml"
    path.write_text(f"{name} = {text}\n")
    cfg = _load_or_error(path)
    if cfg is not None:  # only a number of the field's own type is taken, as written
        value = getattr(cfg, name)
        assert type(value) is type(getattr(HwConfig(), name))
        assert value == json.loads(text)


@pytest.mark.parametrize("suffix, depth", [(".json", 100_000), (".toml", 10_000)])
def test_deep_nesting_is_an_error_not_a_crash(tmp_path, suffix, depth):
    path = tmp_path / f"c{suffix}"
    if suffix == ".json":
        path.write_text("[" * depth + "]" * depth)
    else:
        path.write_text("a = " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(ConfigError, match=r"c\.(json|toml)' (nests too deeply|does not parse)"):
        HwConfig.load(path)
