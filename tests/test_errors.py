"""Every error crosses a process boundary intact: a layer compiled on a worker process that
fails raises, in the parent, the same class with the same message and fields."""

import inspect
import pickle

import pytest

from tilecraft import errors

SAMPLES = {  # constructor arguments of the classes that take more than a message
    errors.ExecutionError: ("row 9 out of range", 4, "LOAD inp ..."),
    errors.DeadlockError: ("no stage can move", {"load": 3}, {"LOAD_TO_COMPUTE": 0}),
    errors.VerifyError: ("raw", "reads inp rows written by instruction 2", 7, "GEMM ..."),
    errors.UnsupportedOperatorError: ("2 operators", [("Foo", "foo_1", False)]),
}
CLASSES = [
    c
    for _, c in inspect.getmembers(errors, inspect.isclass)
    if issubclass(c, errors.TilecraftError)
]


def _sample(cls):
    for base in cls.__mro__:
        if base in SAMPLES:
            return cls(*SAMPLES[base])
    return cls("a plain message")


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_an_error_survives_pickling(cls):
    error = _sample(cls)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert str(back) == str(error)
    assert vars(back) == vars(error)


def test_every_class_with_its_own_constructor_has_a_sample():
    own = [c for c in CLASSES if "__init__" in vars(c)]
    assert set(own) <= set(SAMPLES), "add a sample for each error class with its own __init__"
