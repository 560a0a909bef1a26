"""Parametrises the conformance tests over the (kernel, model) pairs of their test class."""

import pytest
from conformance_runs import run_pair


def pytest_generate_tests(metafunc):
    if "pair" in metafunc.fixturenames:
        pairs = metafunc.cls.PAIRS
        metafunc.parametrize("pair", pairs, ids=[f"{kernel}-{model}" for kernel, model in pairs])


@pytest.fixture
def run(pair):
    """The pair's one shared run (made by the first test that asks for it)."""
    return run_pair(*pair)
