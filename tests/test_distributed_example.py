"""The several-hosts example (``examples/distributed.py``): two ``jax.distributed`` processes on
this machine, one CPU device each, run ``nx.ais`` and ``nx.ReplicaExchange`` split over both and
give the numbers of one process with two host devices (the same split of the same program)."""

import importlib.util
import math
import os

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "distributed.py")


def _example():
    spec = importlib.util.spec_from_file_location("distributed_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.several_processes
def test_two_processes_give_the_numbers_of_one_process_with_two_devices():
    distributed, single = _example().launch(2)
    assert (distributed["processes"], single["processes"]) == (2, 1)
    assert distributed["devices"] == single["devices"] == 2
    for name in ("ais_log_z", "ais_stderr", "exchange_log_z", "exchange_stderr", "draws_digest"):
        assert distributed[name] == single[name], name
    # The runs are real: AIS and replica exchange agree on log Z within a small error bar.
    assert 0.0 < distributed["ais_stderr"] < 0.05 and 0.0 < distributed["exchange_stderr"] < 0.05
    difference = distributed["ais_log_z"] - distributed["exchange_log_z"]
    stderr = math.hypot(distributed["ais_stderr"], distributed["exchange_stderr"])
    assert abs(difference) < 4 * stderr
