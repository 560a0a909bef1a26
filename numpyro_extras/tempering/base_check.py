"""The base end of a continuous tempering run: the base-moment check (Graham & Storkey eq. 22)
and the refit of the base from the run (eqs. 20-21)."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from blackjax.smc.ess import ess as effective_sample_size
from scipy.special import logsumexp

from numpyro_extras.model.bases import GaussianBase, weighted_gaussian
from numpyro_extras.tempering.chains import unreached_ends
from numpyro_extras.tempering.evidence import run_log_normalizer, target_log_weights
from numpyro_extras.tempering.run import (
    base_log_weights,
    chain_field,
    flat_tempered_draws,
    tempering_kernel,
)

__all__ = ["BaseMomentCheck", "base_moment_check", "base_check_problem", "refit_base"]


class BaseMomentCheck(NamedTuple):
    """The necessary convergence check of paper eq. 22: base-weighted draws reproduce the base.

    :param mean_error: ``max_i |E_w0[x_i] - loc_i| / sd_i`` in base standard deviations.
    :param variance_ratio: the weighted variances over the base's, per coordinate.
    :param ess: effective number of base-weighted draws (Kish).
    :param passed: every coordinate's weighted mean within 0.5 base standard deviations of the
        base's or within 4 Monte Carlo standard errors of it, and every variance ratio in
        [0.5, 2] or the variance within 4 Monte Carlo standard errors of the base's.

    **Example:**

    .. code-block:: python

        check = nx.base_moment_check(mcmc)
        check.passed, check.mean_error, check.variance_ratio
    """

    mean_error: float
    variance_ratio: np.ndarray
    ess: float
    passed: bool


def base_check_problem(check: BaseMomentCheck) -> str:
    """What a base-moment check found, for a warning.

    :param check: :class:`BaseMomentCheck` of a run.
    :return: a sentence fragment with the mean error, the range of variance ratios and the ESS.
    """
    return (
        f"the base-weighted draws miss the base mean by {check.mean_error:.2f} sd, variance "
        f"ratios in [{check.variance_ratio.min():.2f}, {check.variance_ratio.max():.2f}], "
        f"ESS {check.ess:.0f}"
    )


def base_moment_check(mcmc, warn=True) -> BaseMomentCheck:
    """Compare the ``w0``-weighted moments of the tempered draws with the base's (paper eq. 22).

    Passing is necessary, not sufficient, for convergence: a chain that never visits ``beta``
    near 0 fails it, and so does a run whose base was not normalised.

    :param mcmc: a run with a continuous tempering kernel.
    :param bool warn: emit a ``UserWarning`` when the check fails.
    :return: :class:`BaseMomentCheck`.

    **Example:**

    .. code-block:: python

        if not nx.base_moment_check(mcmc).passed:
            kernel = nx.JointContinuousTempering(model, base=nx.refit_base(mcmc))  # run again
    """
    kernel = tempering_kernel(mcmc)
    draws = flat_tempered_draws(mcmc)
    log_w0 = base_log_weights(mcmc).ravel()
    weights = np.exp(log_w0 - logsumexp(log_w0))
    mean = weights @ draws
    squared_deviations = (draws - mean) ** 2
    variance = weights @ squared_deviations
    base_variance = np.diagonal(np.asarray(kernel.base.covariance, dtype=np.float64))
    base_loc = np.asarray(kernel.base.loc, dtype=np.float64)
    mean_errors = np.abs(mean - base_loc) / np.sqrt(base_variance)
    mean_error = float(np.max(mean_errors))
    variance_ratio = variance / base_variance
    ess = float(effective_sample_size(jnp.asarray(log_w0)))
    # Monte Carlo standard errors of the weighted moments: a broad base component (a mixture
    # base's defensive one) is visited by few draws, and its share of the variance is then
    # uncertain without anything being wrong.
    mean_stderr = np.sqrt(weights**2 @ squared_deviations)
    variance_stderr = np.sqrt(weights**2 @ (squared_deviations - variance) ** 2)
    mean_off = (mean_errors >= 0.5) & (np.abs(mean - base_loc) > 4 * mean_stderr)
    variance_off = ((variance_ratio <= 0.5) | (variance_ratio >= 2.0)) & (
        np.abs(variance - base_variance) > 4 * variance_stderr
    )
    passed = not bool(np.any(mean_off) or np.any(variance_off))
    check = BaseMomentCheck(mean_error, variance_ratio, ess, passed)
    if warn and not passed:
        warnings.warn(
            "Continuous tempering base-moment check (eq. 22) failed: "
            + base_check_problem(check)
            + ". The chains have not converged or rarely reach beta near 0; run longer or "
            "improve the base.",
            stacklevel=2,
        )
    return check


def refit_base(mcmc) -> GaussianBase:
    """One bootstrap round: a new base from a tempering run.

    The new base is the Gaussian with the run's target-weighted (eq. 21) mean and covariance on
    the unconstrained space, and ``log zeta`` is the run's ``log Z`` estimate (eq. 20).
    Rerunning with it flattens the temperature marginal, like simulated tempering's weight
    iteration.

    :param mcmc: a run with a continuous tempering kernel.
    :return: :class:`~numpyro_extras.GaussianBase`.

    **Example:**

    .. code-block:: python

        kernel = nx.GibbsContinuousTempering(model, base=nx.refit_base(mcmc))  # for a new run
    """
    kernel = tempering_kernel(mcmc)
    unreached = unreached_ends(chain_field(mcmc, "beta"))
    if unreached:
        warnings.warn(
            "refit_base: " + "; ".join(unreached) + ", so the run's log Z estimate, which "
            "becomes the new base's log zeta, may be far off (by hundreds of nats when no chain "
            "reached beta near 0); run longer, or start from a base with a better log zeta.",
            stacklevel=2,
        )
    return weighted_gaussian(
        flat_tempered_draws(mcmc),
        target_log_weights(mcmc).ravel(),
        run_log_normalizer(mcmc).log_z,
        kernel.base.loc.dtype,
    )
