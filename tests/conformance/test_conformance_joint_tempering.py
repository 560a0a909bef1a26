"""Conformance of ``nx.JointContinuousTempering`` on its share of the zoo's continuous models:
the hard cases (two far modes, label switching, the centred eight schools' funnel, Neal's
funnel) and the logistic regression; ``nx.GibbsContinuousTempering`` takes the others."""

from conformance_runs import ConformanceTests

KERNEL = "JointContinuousTempering"
MODELS = (
    "two_mode",
    "bimodal_factor",
    "logistic",
    "mixture_means",
    "eight_schools_centred",
    "funnel",
)


class TestJointContinuousTempering(ConformanceTests):
    PAIRS = tuple((KERNEL, name) for name in MODELS)
