"""Whatever bytes a program file holds, loading it ends in a Program or a TilecraftError that
names the file's problem, never another exception, a hang or a huge allocation; and whatever
loads runs to outputs or a DeviceError. Random bytes, truncations, bit flips and header fields
replaced by random JSON (the digest recomputed, so the field checks themselves are reached)."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilecraft.artifact import digest
from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.errors import ArtifactError, TilecraftError
from tilecraft.hw.config import HwConfig
from tilecraft.ops import Conv2d, Epilogue
from tilecraft.runtime import Program, get_device
from tilecraft.runtime.layout import pack_inputs, random_inputs

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
PROGRAM = conv2d(
    HwConfig(), Conv2d(1, 16, 6, 6, 16, kernel=3, pad=1), Epilogue(bias=True, shift=6)
)  # weights, bias as inputs: buffers of every role


def _good_bytes(tmp_path) -> bytes:
    return PROGRAM.save(tmp_path / "good.tcp").read_bytes()


def _header_and_arrays(data: bytes):
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        header = json.loads(npz["header"].tobytes().decode())
        arrays = {k: npz[k] for k in npz.files if k != "header"}
    return header, arrays


def _load_or_error(path) -> Program | None:
    try:
        return Program.load(path)
    except TilecraftError as exc:
        assert str(path) in str(exc)  # the message names the file
        return None


def _runs_or_error(program: Program) -> None:
    rng = np.random.default_rng(0)
    try:
        inputs = pack_inputs(program, random_inputs(program, rng))
        get_device("sim").run(program, inputs)
    except TilecraftError:
        pass


@SETTINGS
@given(st.binary(max_size=2048))
def test_random_bytes(tmp_path, data):
    path = tmp_path / "random.tcp"
    path.write_bytes(data)
    with pytest.raises(TilecraftError):
        Program.load(path)


@SETTINGS
@given(st.data())
def test_truncations_and_bit_flips(tmp_path, data):
    good = _good_bytes(tmp_path)
    if data.draw(st.booleans(), "truncate"):
        blob = good[: data.draw(st.integers(0, len(good) - 1), "length")]
    else:
        flips = data.draw(st.lists(st.integers(0, 8 * len(good) - 1), min_size=1, max_size=4))
        buf = bytearray(good)
        for bit in flips:
            buf[bit // 8] ^= 1 << (bit % 8)
        blob = bytes(buf)
    path = tmp_path / "bad.tcp"
    path.write_bytes(blob)
    program = _load_or_error(path)
    if program is not None:  # a flip in zip padding or a name's case can be harmless
        _runs_or_error(program)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(value, prefix=()):
    """Every path into a JSON value (dict keys, list indices), the value itself included."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _set(value, path, new):
    """Replace the value at `path`, if an earlier replacement left that path in place."""
    for depth, key in enumerate(path, 1):
        fits = isinstance(value, dict) and isinstance(key, str) and key in value
        fits |= isinstance(value, list) and isinstance(key, int) and key < len(value)
        if not fits:
            return
        if depth == len(path):
            value[key] = new
            return
        value = value[key]


@SETTINGS
@given(st.data())
def test_header_fields_replaced_by_random_json(tmp_path, data):
    header, arrays = _header_and_arrays(_good_bytes(tmp_path))
    header.pop("digest")
    paths = [p for p in _paths(header) if p and p[0] not in ("format", "version")]
    for _ in range(data.draw(st.integers(1, 3), "mutations")):
        path = data.draw(st.sampled_from(paths), "path")
        _set(header, path, data.draw(JSON, "value"))
    header["digest"] = digest(header, arrays)
    buf = io.BytesIO()
    np.savez(buf, header=np.frombuffer(json.dumps(header).encode(), np.uint8), **arrays)
    path = tmp_path / "mutated.tcp"
    path.write_bytes(buf.getvalue())
    program = _load_or_error(path)
    if program is not None:
        _runs_or_error(program)


@SETTINGS
@given(
    name=st.sampled_from(["insns", "uops"]),
    shape=st.lists(st.integers(0, 2**40), min_size=1, max_size=3),
)
def test_members_that_claim_more_than_they_hold(tmp_path, name, shape):
    """A member's .npy header is read before its data: a claim of terabytes fails at once."""
    good = _good_bytes(tmp_path)
    _, arrays = _header_and_arrays(good)
    fake = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        fake, {"descr": "<u8", "fortran_order": False, "shape": tuple(shape)}
    )
    fake.write(arrays[name].tobytes())
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            raw = fake.getvalue() if info.filename == f"{name}.npy" else src.read(info)
            dst.writestr(info.filename, raw)
    path = tmp_path / "claims.tcp"
    path.write_bytes(out.getvalue())
    program = _load_or_error(path)
    if program is not None:
        assert int(np.prod(shape)) * 8 == arrays[name].nbytes


def test_a_compressed_or_pickled_member_is_refused(tmp_path):
    good = _good_bytes(tmp_path)
    out = tmp_path / "compressed.tcp"
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
    with pytest.raises(ArtifactError, match="is compressed; arrays are stored as they are"):
        Program.load(out)
    pickled = tmp_path / "pickled.tcp"
    with open(pickled, "wb") as fh:
        np.savez(fh, header=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ArtifactError, match="member 'header.npy' holds object, not numbers"):
        Program.load(pickled)
