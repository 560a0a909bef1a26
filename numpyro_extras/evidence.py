"""The result type every normalizing-constant estimator of numpyro_extras returns."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Evidence"]


class Evidence(NamedTuple):
    """An estimate of a log normalizing constant (log marginal likelihood, minus a free energy).

    :param float log_z: the estimate of ``log Z``.
    :param float stderr: its Monte Carlo standard error.
    :param log_weights: the log importance weights behind the estimate (estimator specific).
    :param float ess: effective sample size behind the estimate.

    **Example:**

    .. code-block:: python

        evidence = nx.log_marginal_likelihood(mcmc)
        print(f"log Z = {evidence.log_z:.3f} +- {evidence.stderr:.3f}")
    """

    log_z: float
    stderr: float
    log_weights: Any = None
    ess: float | None = None

    def __repr__(self):
        ess = "" if self.ess is None else f", ess={self.ess:.0f}"
        return f"Evidence(log_z={self.log_z:.4f}, stderr={self.stderr:.4f}{ess})"
