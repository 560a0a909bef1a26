"""Conformance of ``nx.AiSampler`` on one representative model, two far modes of unequal
weight in 2-D: it trains its involution in ``init`` at the default size (about 30 s), which
the suite's time budget allows once."""

from conformance_runs import ConformanceTests


class TestAiSampler(ConformanceTests):
    PAIRS = (("AiSampler", "mixture_2d"),)
