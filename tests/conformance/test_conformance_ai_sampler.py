"""Conformance of ``nx.AiSampler`` on two representative models, each training its involution
in ``init`` at the default size (20-30 s), which the suite's time budget allows twice: two far
modes of unequal weight in 2-D, and a support that depends on another latent, whose tail the
learned map alone reaches too rarely for a run of this length."""

from conformance_runs import ConformanceTests


class TestAiSampler(ConformanceTests):
    PAIRS = (("AiSampler", "mixture_2d"), ("AiSampler", "truncated"))
