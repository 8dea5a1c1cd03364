"""Calibration: run the float graph over the user's inputs and record, per tensor, what the
observer needs (the largest |x|, then a histogram of |x|).

Inputs come from an .npz/.npy file (`load_calibration`: a batch along axis 0 of each input) or
are random (`random_calibration`, smoke runs only: real data sets real ranges). Shapes and
dtypes are checked before any work, naming the input and what would be valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilecraft.compiler.frontend.evaluate import evaluate
from tilecraft.compiler.frontend.ir import Graph
from tilecraft.compiler.quant.observers import Observer, histogram, threshold
from tilecraft.errors import ModelError


@dataclass(frozen=True)
class Ranges:
    """Per tensor, the symmetric clipping threshold the observer chose."""

    thresholds: dict[str, float]
    observer: Observer
    samples: int


def check_calibration(graph: Graph, data: dict[str, np.ndarray]) -> int:
    """The number of samples in `data` (each input a batch along a new leading axis, or one
    sample of the input's own shape); a ModelError for anything else."""
    missing = sorted(set(graph.inputs) - set(data))
    unknown = sorted(set(data) - set(graph.inputs))
    if missing or unknown:
        raise ModelError(
            f"calibration data must hold the inputs {list(graph.inputs)}; "
            f"missing {missing}, unknown {unknown}"
        )
    counts = set()
    for name in graph.inputs:
        x, shape = np.asarray(data[name]), graph.shape(name)
        if x.dtype.kind not in "fiu":
            raise ModelError(f"calibration input {name!r} is {x.dtype}; expected numbers")
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            bad = int(x.size - np.count_nonzero(np.isfinite(x)))
            raise ModelError(
                f"calibration input {name!r} holds {bad:,} values that are NaN or infinite (of "
                f"{x.size:,}); calibration needs finite numbers"
            )
        if x.shape == shape:
            counts.add(1)
        elif (x.ndim == len(shape) + 1 and x.shape[1:] == shape) or (
            x.ndim == len(shape) and x.shape[1:] == shape[1:] and shape[0] == 1
        ):  # S samples on a new axis, or along the batch axis of a batch-1 input
            counts.add(x.shape[0])
        else:
            raise ModelError(
                f"calibration input {name!r} has shape {x.shape}; expected "
                f"{shape} or (S, *{shape}) for S samples"
            )
    if 0 in counts:
        raise ModelError("calibration data holds no samples (an axis of length 0)")
    if len(counts) != 1:
        raise ModelError(f"calibration inputs hold different sample counts {sorted(counts)}")
    return counts.pop()


def samples(graph: Graph, data: dict[str, np.ndarray]):
    n = check_calibration(graph, data)
    for i in range(n):
        out = {}
        for name in graph.inputs:
            x, shape = np.asarray(data[name], np.float64), graph.shape(name)
            out[name] = x if n == 1 and x.shape == shape else x[i].reshape(shape)
        yield out


def load_calibration(graph: Graph, path: str | Path) -> dict[str, np.ndarray]:
    """An .npz (arrays by input name) or .npy (the graph's one input) of calibration data."""
    from tilecraft.artifact import read_arrays

    path = Path(path)
    if path.suffix == ".npy":
        if len(graph.inputs) != 1:
            raise ModelError(
                f"{str(path)!r}: a .npy serves a one-input model; this one has "
                f"inputs {list(graph.inputs)}: use an .npz"
            )
        try:
            data = {graph.inputs[0]: np.load(path, allow_pickle=False)}
        except (OSError, ValueError) as e:
            raise ModelError(f"{str(path)!r} is not a readable .npy: {e}") from None
    else:
        data = read_arrays(path, ModelError, what="calibration .npz")
    try:
        check_calibration(graph, data)
    except ModelError as e:
        raise ModelError(f"{str(path)!r}: {e}") from None
    return data


MAX_RANDOM_BYTES = 2 << 30  # random calibration samples held at once


def random_calibration(graph: Graph, count: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`count` standard-normal samples of every input (smoke runs)."""
    if count < 1:
        raise ModelError(f"--calib-random needs at least 1 sample, not {count}")
    size = count * sum(int(np.prod(graph.shape(n))) for n in graph.inputs) * 8
    if size > MAX_RANDOM_BYTES:
        raise ModelError(
            f"--calib-random {count:,} would take {size / 2**30:,.1f} GiB of float64 samples; "
            f"at most {MAX_RANDOM_BYTES // 2**30} GiB (a few hundred samples calibrate well)"
        )
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal((count, *graph.shape(n))) for n in graph.inputs}


def calibrate(
    graph: Graph, data: dict[str, np.ndarray], observer: Observer | str = "minmax", progress=None
) -> Ranges:
    """Thresholds for every tensor of `graph` (inputs included) over `data`."""
    try:
        observer = Observer(observer)
    except ValueError:
        valid = ", ".join(o.value for o in Observer if o is not Observer.MODEL)
        raise ModelError(f"unknown observer {observer!r}; valid: {valid}") from None
    n = check_calibration(graph, data)
    tops: dict[str, float] = {}
    for x in samples(graph, data):
        for name, value in evaluate(graph, x, keep_all=True).items():
            tops[name] = max(tops.get(name, 0.0), float(np.abs(value).max(initial=0.0)))
        if progress:
            progress(1)
    hists: dict[str, np.ndarray] = {}
    if observer.needs_histogram:
        for x in samples(graph, data):
            for name, value in evaluate(graph, x, keep_all=True).items():
                h = histogram(value, tops[name])
                hists[name] = hists[name] + h if name in hists else h
    return Ranges({k: threshold(observer, tops[k], hists.get(k)) for k in tops}, observer, n)


def model_ranges(graph: Graph) -> Ranges:
    """The thresholds a quantized model states (its activation scales x 127); every tensor the
    quantizer needs must have one, else a ModelError naming those without."""
    tensors = [*graph.inputs, *(o for n in graph.nodes for o in n.outputs)]
    missing = [t for t in tensors if t not in graph.scales]
    if missing:
        raise ModelError(
            f"the model states no scale for tensor(s) {missing}: give "
            "calibration data (--calib) to measure them"
        )
    return Ranges({t: graph.scales[t] * 127 for t in tensors}, Observer.MODEL, 0)
