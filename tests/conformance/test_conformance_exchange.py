"""Conformance of ``nx.ReplicaExchange`` (NUTS moves, the default) on the zoo's continuous
models that fit the suite's time budget (see ``MODELS``)."""

from conformance_runs import ConformanceTests

KERNEL = "ReplicaExchange"
# Its cost per model is 10-40 s at defaults (a base fit, a pilot run that sizes the ladder,
# two legs of replicas), so it runs on three: two modes of unequal weight, a value-dependent
# support, and a deterministic site in a plate.
MODELS = ("two_mode", "truncated", "regression")


class TestReplicaExchange(ConformanceTests):
    PAIRS = tuple((KERNEL, name) for name in MODELS)
