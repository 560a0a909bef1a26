"""What the tests read from ArviZ results whose names differ between ArviZ 0.2x and 1.x."""


def loo_elpd(loo):
    """The ``elpd`` estimate of an ``az.loo`` result: ``elpd_loo`` in 0.2x, ``elpd`` in 1.x."""
    return float(loo.elpd_loo if hasattr(loo, "elpd_loo") else loo.elpd)
