"""Conformance of ``nx.VAESLMC`` on one representative model, the 1-D two-mode regression: it
trains its VAE proposal in ``init`` at the default size (about 40 s), which the suite's time
budget allows once."""

from conformance_runs import ConformanceTests


class TestVAESLMC(ConformanceTests):
    PAIRS = (("VAESLMC", "two_mode"),)
