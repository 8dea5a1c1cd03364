"""Program artifacts (save/load, integrity checks, DRAM plan) and the Device API."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilecraft.artifact import digest as _digest
from tilecraft.boards import board
from tilecraft.compiler.programs.blocked_gemm import blocked_gemm
from tilecraft.errors import DeviceError, ProgramError
from tilecraft.hw.config import HwConfig, preset
from tilecraft.hw.isa import Finish, encode, encode_uops, isa_for
from tilecraft.ops import Computation, Gemm
from tilecraft.ops.reference import gemm
from tilecraft.runtime import BufferSpec, Program, device_names, get_device
from tilecraft.runtime.layout import pack_inputs, unpack_outputs
from tilecraft.runtime.program import VERSION
from tilecraft.sim.device import SimDevice

M, K, N = 16, 32, 32


@pytest.fixture(scope="module")
def program() -> Program:
    return blocked_gemm(HwConfig(), M, K, N)


@pytest.fixture(scope="module")
def matrices():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    w = rng.integers(-128, 128, (K, N), dtype=np.int8)
    return a, w


@pytest.fixture
def inputs(matrices, program):
    a, w = matrices
    return pack_inputs(program, {"a": a, "b": w})


@pytest.fixture
def saved(tmp_path, program):
    return program.save(tmp_path / "p.tcp")


def _parts(path):
    """The header dict and arrays of a saved program file."""
    with np.load(path, allow_pickle=False) as npz:
        header = json.loads(npz["header"].tobytes().decode())
        arrays = {k: npz[k] for k in npz.files if k != "header"}
    return header, arrays


def _write(path, header, arrays):
    blob = np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, header=blob, **arrays)


# ---- persistence ---------------------------------------------------------------------------
def test_save_load_round_trip(program, saved):
    assert saved.name == "p.tcp"
    assert not list(saved.parent.glob("*.tmp"))
    loaded = Program.load(saved)
    assert loaded.config == program.config
    assert np.array_equal(loaded.insns, program.insns)
    assert loaded.insns.dtype == np.uint64
    assert np.array_equal(loaded.uops, program.uops)
    assert loaded.uops.dtype == program.uops.dtype
    assert loaded.buffers == program.buffers
    assert loaded.constants.keys() == program.constants.keys()
    assert loaded.computation == program.computation == Computation(Gemm(M, K, N))
    assert loaded.schedule == program.schedule
    assert (loaded.name, loaded.dram_size) == (program.name, program.dram_size)
    assert (loaded.insn_offset, loaded.uop_offset) == (program.insn_offset, program.uop_offset)
    assert loaded.digest == program.digest
    assert np.array_equal(loaded.table(), program.table())


def test_round_trip_with_constants(tmp_path):
    cfg = HwConfig()
    spec = isa_for(cfg)
    weights = np.arange(64, dtype=np.int8).reshape(4, 16)
    p = Program(
        config=cfg,
        insns=encode(spec, [Finish()]),
        uops=encode_uops(spec, []),
        buffers=[BufferSpec("w", "constant", (4, 16), "int8", 0)],
        constants={"w": weights},
        insn_offset=64,
        uop_offset=80,
        dram_size=128,
        name="const",
    )
    loaded = Program.load(p.save(tmp_path / "c.tcp"))
    assert np.array_equal(loaded.constants["w"], weights)
    assert np.array_equal(loaded.dram_image()[:64], weights.view(np.uint8).ravel())


def test_load_missing_file(tmp_path):
    with pytest.raises(ProgramError, match=r"program file '.*nope\.tcp' does not exist"):
        Program.load(tmp_path / "nope.tcp")


def test_load_truncated_file(saved):
    raw = saved.read_bytes()
    saved.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ProgramError, match=r"not a readable tilecraft program \(truncated or"):
        Program.load(saved)


def test_load_foreign_files(tmp_path):
    junk = tmp_path / "junk.tcp"
    junk.write_bytes(np.random.default_rng(0).bytes(1000))
    with pytest.raises(ProgramError, match="not a readable tilecraft program"):
        Program.load(junk)
    bare = tmp_path / "bare.npz"
    np.savez(bare, insns=np.zeros((1, 2), np.uint64))
    with pytest.raises(ProgramError, match=r"is not a tilecraft program \(no header\)"):
        Program.load(bare)


def test_load_plain_npy(tmp_path):
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros(3))
    with pytest.raises(
        ProgramError, match="not a readable tilecraft program .truncated or foreign"
    ):
        Program.load(npy)


def test_load_header_not_json(saved):
    _, arrays = _parts(saved)
    with open(saved, "wb") as fh:
        np.savez(fh, header=np.frombuffer(b"\xff{not json", np.uint8), **arrays)
    with pytest.raises(ProgramError, match="not a readable tilecraft program"):
        Program.load(saved)


def test_load_header_not_an_object(saved):
    _, arrays = _parts(saved)
    _write(saved, [1, 2], arrays)
    with pytest.raises(ProgramError, match="is not a tilecraft program"):
        Program.load(saved)


def test_load_tampered_instruction(saved):
    header, arrays = _parts(saved)
    raw = arrays["insns"].view(np.uint8).copy()
    raw[5] ^= 0x01
    arrays["insns"] = raw.view("<u8").reshape(arrays["insns"].shape)
    _write(saved, header, arrays)
    with pytest.raises(ProgramError, match=r"fails its digest check .*modified or corrupted"):
        Program.load(saved)


def test_load_tampered_header(saved):
    header, arrays = _parts(saved)
    header["dram_size"] += 4096
    _write(saved, header, arrays)
    with pytest.raises(ProgramError, match="fails its digest check"):
        Program.load(saved)


def test_load_wrong_format(saved):
    header, arrays = _parts(saved)
    header["format"] = "onnx"
    _write(saved, header, arrays)
    with pytest.raises(ProgramError, match=r"is not a tilecraft program \(format 'onnx'\)"):
        Program.load(saved)


def test_version_checked_before_digest(saved):
    header, arrays = _parts(saved)
    header["version"] = VERSION + 1  # the stored digest is now stale too
    _write(saved, header, arrays)
    msg = rf"program format version {VERSION + 1}; this tilecraft reads version {VERSION}"
    with pytest.raises(ProgramError, match=msg):
        Program.load(saved)


def _rewrite_with_digest(path, header, arrays):
    header.pop("digest")
    header["digest"] = _digest(header, arrays)
    _write(path, header, arrays)


def test_load_invalid_config(saved):
    header, arrays = _parts(saved)
    header["config"]["log_batch"] = 9
    _rewrite_with_digest(saved, header, arrays)
    with pytest.raises(ProgramError, match=r"holds an invalid config: log_batch must be in"):
        Program.load(saved)


def test_load_header_missing_key(saved):
    header, arrays = _parts(saved)
    del header["buffers"]
    _rewrite_with_digest(saved, header, arrays)
    with pytest.raises(ProgramError, match="buffers"):
        Program.load(saved)


def test_load_config_digest_mismatch(saved):
    header, arrays = _parts(saved)
    header["config"]["clock_mhz"] = 200.0
    _rewrite_with_digest(saved, header, arrays)
    with pytest.raises(ProgramError, match="config digest does not match its config"):
        Program.load(saved)


# ---- the DRAM plan -------------------------------------------------------------------------
def _hand_made(buffers, dram_size=4096, **kw):
    cfg = HwConfig()
    spec = isa_for(cfg)
    args = dict(
        config=cfg,
        insns=encode(spec, [Finish()]),
        uops=encode_uops(spec, []),
        buffers=buffers,
        constants={},
        insn_offset=1024,
        uop_offset=1040,
        dram_size=dram_size,
    )
    args.update(kw)
    return Program(**args)


def test_plan_accepts_disjoint_buffers():
    p = _hand_made(
        [BufferSpec("x", "input", (16,), "int8", 0), BufferSpec("y", "output", (4, 4), "int32", 16)]
    )
    assert [b.nbytes for b in p.buffers] == [16, 64]
    assert p.buffer("y").offset == 16
    assert [b.name for b in p.inputs] == ["x"] and [b.name for b in p.outputs] == ["y"]
    with pytest.raises(ProgramError, match=r"has no buffer 'z'; it has x, y"):
        p.buffer("z")


def test_plan_rejects_overlap():
    w = BufferSpec("w", "constant", (32,), "int8", 0)
    bufs = [w, BufferSpec("y", "output", (8,), "int8", 16)]
    with pytest.raises(ProgramError, match="w and y overlap in DRAM at byte 16"):
        _hand_made(bufs, constants={"w": np.zeros(32, np.int8)})
    # scratch tensors may share bytes with scratch and outputs (a network's activation arena);
    # the verifier orders their uses. Inputs share nothing, outputs no other output.
    shared = [
        BufferSpec("x", "input", (32,), "int8", 0),
        BufferSpec("t", "scratch", (16,), "int8", 32),
        BufferSpec("y", "output", (8,), "int8", 40),
    ]
    assert len(_hand_made(shared).buffers) == 3
    with pytest.raises(ProgramError, match="x and t overlap"):
        _hand_made(
            [
                BufferSpec("x", "input", (32,), "int8", 0),
                BufferSpec("t", "scratch", (8,), "int8", 8),
            ]
        )
    with pytest.raises(ProgramError, match="y and z overlap"):
        _hand_made(
            [
                BufferSpec("y", "output", (32,), "int8", 0),
                BufferSpec("z", "output", (8,), "int8", 8),
            ]
        )
    with pytest.raises(ProgramError, match="t and w overlap in DRAM at byte 32"):
        _hand_made(
            [
                BufferSpec("t", "scratch", (40,), "int8", 0),
                BufferSpec("w", "constant", (8,), "int8", 32),
            ],
            constants={"w": np.zeros(8, np.int8)},
        )
    with pytest.raises(ProgramError, match="instructions and x overlap in DRAM at byte 1030"):
        _hand_made([BufferSpec("x", "input", (4,), "int8", 1030)])


def test_plan_rejects_buffer_outside_region():
    with pytest.raises(ProgramError, match=r"y at DRAM bytes \[4000, 4100\) lie outside .*4096"):
        _hand_made([BufferSpec("y", "output", (100,), "int8", 4000)])
    with pytest.raises(ProgramError, match=r"x at DRAM bytes \[-16, 0\) lie outside"):
        _hand_made([BufferSpec("x", "input", (16,), "int8", -16)])
    with pytest.raises(ProgramError, match=r"instructions at DRAM bytes \[1024, 1040\) lie"):
        _hand_made([], dram_size=1030, uop_offset=0)


def test_plan_rejects_a_region_larger_than_its_data():
    assert _hand_made([], dram_size=4096).dram_size == 4096  # the page the data ends in
    with pytest.raises(
        ProgramError,
        match=r"dram_size 8192 is larger .* end at byte 1040, so at "
        r"most 4096 \(whole 4096-byte pages\)",
    ):
        _hand_made([], dram_size=8192)


def test_plan_rejects_bad_buffers():
    with pytest.raises(ProgramError, match=r"buffer name\(s\) \['x'\] appear more than once"):
        _hand_made([BufferSpec("x", "input", (4,), "int8", 0)] * 2)
    with pytest.raises(
        ProgramError, match="buffer 'w': role must be one of 'input', .*, not 'weights'"
    ):
        BufferSpec("w", "weights", (4,), "int8", 0)
    with pytest.raises(ProgramError, match=r"constant 'w' is int16\(4,\) but its buffer is"):
        _hand_made(
            [BufferSpec("w", "constant", (4,), "int8", 0)],
            constants={"w": np.zeros(4, np.int16)},
        )


# ---- devices -------------------------------------------------------------------------------
def test_sim_device_is_bit_exact(program, inputs, matrices):
    result = get_device("sim").run(program, inputs)
    assert set(result.outputs) == {"c"}
    got = unpack_outputs(program, result.outputs)["c"]
    assert np.array_equal(got, gemm(program.computation.op, *matrices))
    assert result.report.cycles > 0
    assert result.report.instructions == len(program.insns)


def test_device_input_errors(program, inputs):
    dev = get_device("sim")
    with pytest.raises(DeviceError, match=r"takes inputs \['a', 'b'\]; missing \['b'\]"):
        dev.run(program, {"a": inputs["a"]})
    with pytest.raises(DeviceError, match=r"unknown \['x'\]"):
        dev.run(program, {**inputs, "x": inputs["a"]})
    with pytest.raises(DeviceError, match=r"input 'a' has shape \(16, 32\); .*\(16, 2, 1, 16\)"):
        dev.run(program, {**inputs, "a": inputs["a"].reshape(16, 32)})
    with pytest.raises(DeviceError, match="input 'b' is float32; the program expects int8"):
        dev.run(program, {**inputs, "b": inputs["b"].astype(np.float32)})
    wide = inputs["a"].astype(np.int16)
    wide.flat[3] = 200
    message = r"input 'a' is int16 with values -128..200; the program expects int8 \(-128..127\)"
    with pytest.raises(DeviceError, match=message):
        dev.run(program, {**inputs, "a": wide})


def test_device_accepts_wider_ints_that_fit(program, inputs):
    dev = get_device("sim")
    want = dev.run(program, inputs).outputs["c"]
    wide = {k: v.astype(np.int16) for k, v in inputs.items()}
    assert np.array_equal(dev.run(program, wide).outputs["c"], want)


def test_device_refuses_other_architecture(program, inputs):
    with pytest.raises(ProgramError, match=r"differing fields .*log_block_in: 4 != 3"):
        SimDevice(config=preset("1x8x8")).run(program, inputs)


def test_device_runs_on_timing_only_change(program, inputs):
    base = SimDevice().run(program, inputs)
    other = SimDevice(config=board("ultra96-v2").config).run(program, inputs)
    assert np.array_equal(other.outputs["c"], base.outputs["c"])
    assert other.report.clock_mhz == 300.0


def test_unknown_device():
    assert device_names() == ["cpu", "gpu", "pynq", "rtl", "sim"]
    names = "cpu, gpu, pynq, rtl, sim"
    with pytest.raises(DeviceError, match=f"unknown device 'nope'; available: {names}"):
        get_device("nope")
    assert isinstance(get_device(), SimDevice)


def test_load_refuses_a_program_for_another_config(tmp_path):
    from tilecraft.compiler.programs.blocked_gemm import blocked_gemm
    from tilecraft.hw.config import preset

    path = blocked_gemm(preset("default"), 16, 32, 32).save(tmp_path / "p.tcp")
    assert Program.load(path, config=board("pynq-z1").config).config.tag == preset("default").tag
    with pytest.raises(ProgramError, match=r"log_block_in: 4 != 3"):
        Program.load(path, config=preset("1x8x8"))


# ---- the header, read strictly -------------------------------------------------------------
def test_an_older_program_names_both_versions(saved):
    header, arrays = _parts(saved)
    header["version"] = 1
    _rewrite_with_digest(saved, header, arrays)
    with pytest.raises(ProgramError, match=r"version 1; this tilecraft reads version 2 \(compile"):
        Program.load(saved)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda h: h.update(dram_size="4096"), r"dram_size: expected an integer, not str"),
        (lambda h: h.update(insn_offset=64.5), r"insn_offset: expected an integer, not float"),
        (lambda h: h.update(dram_size=1 << 40), r"dram_size 1099511627776 must be in 1\.\."),
        (lambda h: h.update(dram_size=(1 << 32) - 1), r"dram_size 4294967295 is larger than"),
        (
            lambda h: h["buffers"][0].update(role="weights"),
            r"buffers\[0\]\.role: 'weights' is not one of",
        ),
        (lambda h: h["buffers"][0].update(dtype="|O"), r"dtype object is not a numeric one"),
        (lambda h: h["buffers"][0]["layout"].update(logical=[16]), r"buffers\[0\]\.layout: a"),
        (lambda h: h["buffers"][1].update(shape=[2, 2]), r"buffer 'b': its transposed_matrix"),
        (lambda h: h["schedule"].update(tm=0), r"schedule: tile tm must be a positive int"),
        (lambda h: h["computation"]["op"].update(kind="x"), r"computation\.op: kind 'x'"),
        (lambda h: h.update(extra=1), r"header: unknown field\(s\) \['extra'\]"),
        (lambda h: h.pop("schedule"), r"header: missing field\(s\) \['schedule'\]"),
    ],
)
def test_header_values_are_checked_after_the_digest(saved, mutate, message):
    header, arrays = _parts(saved)
    mutate(header)
    _rewrite_with_digest(saved, header, arrays)
    with pytest.raises(ProgramError, match=message):
        Program.load(saved)


def test_a_deeply_nested_header_is_an_error_not_a_crash(saved):
    _, arrays = _parts(saved)
    blob = np.frombuffer(b"[" * 100_000 + b"]" * 100_000, np.uint8)
    with open(saved, "wb") as fh:
        np.savez(fh, header=blob, **arrays)
    with pytest.raises(ProgramError, match="nests too deeply|not a tilecraft program"):
        Program.load(saved)


def test_a_program_is_immutable(program):
    with pytest.raises(AttributeError):
        program.name = "other"
    with pytest.raises(ValueError, match="read-only"):
        program.insns[0, 0] = 0
    with pytest.raises(TypeError):
        program.constants["x"] = np.zeros(1)
    renamed = program.replace(name="other")
    assert renamed.name == "other" and program.name != "other"


def test_odd_dtype_strings_are_refused_by_name():
    for dtype in ("0", "00", "i9"):  # numpy raises ValueError/SyntaxError/TypeError for these
        with pytest.raises(ProgramError, match=f"dtype '{dtype}' is unknown"):
            BufferSpec("x", "input", (1,), dtype, 0)


def test_a_path_or_name_where_an_object_goes_is_named(program, saved, tmp_path):
    """A path where a Program, a CompiledModel or a device goes: the runtime's error, saying
    what reads or makes the object (AttributeErrors from inside, before)."""
    from tilecraft.errors import ConfigError
    from tilecraft.runtime.executor import run_model
    from tilecraft.runtime.model import CompiledModel

    with pytest.raises(DeviceError, match=r"a device runs a Program \(Program.load\(PATH\)"):
        get_device("sim").run(str(saved), {})
    with pytest.raises(DeviceError, match=r"run_model runs a CompiledModel \(CompiledModel.load"):
        run_model(str(saved), {})
    with pytest.raises(ProgramError, match="read from a file path, not NoneType None"):
        Program.load(None)
    with pytest.raises(ConfigError, match="must be an HwConfig"):
        CompiledModel.load(str(saved), config="default")


def test_outputs_to_check_must_be_whole_and_of_the_right_shape(program, matrices):
    from tilecraft.runtime.check import check_outputs

    inputs = dict(zip(("a", "b"), matrices))
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    outputs = unpack_outputs(program, result.outputs)
    assert check_outputs(program, inputs, outputs)[0]
    with pytest.raises(DeviceError, match=r"lack \['c'\] \(unpack_outputs"):
        check_outputs(program, inputs, {})
    ok, text = check_outputs(program, inputs, {"c": outputs["c"][:1]})
    assert not ok and "check c: shape (1," in text
    with pytest.raises(DeviceError, match="unpack_outputs takes a run's outputs by name"):
        unpack_outputs(program, None)
