"""``log Z`` (Graham & Storkey eq. 20) and the target weights (eq. 21) of continuous tempering
draws, with the test that the chains' own estimates agree.

Draw ``t`` of chain ``c`` has target weight ``zeta_c w1(Delta_t)`` and base weight
``w0(Delta_t)``. Since ``E_c[w1] = Z / (C_c zeta_c)`` and ``E_c[w0] = 1 / C_c`` (eq. 19), sums
pooled over chains give ``Z`` even when each chain adapted its own ``zeta_c`` during warm-up.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from numpyro_extras.results import arviz_adapter
from numpyro_extras.results.evidence import (
    ChainAgreement,
    Evidence,
    agreement_of,
    chains_disagree,
    log_mean_and_influence,
    spread_floored_stderr,
)
from numpyro_extras.tempering.run import (
    chain_field,
    deltas,
    tempering_kernel,
    unnormalised_target_log_weights,
)
from numpyro_extras.tempering.weights import log_base_weight, log_target_weight

__all__ = [
    "tempering_log_normalizer",
    "run_log_normalizer",
    "target_log_weights",
    "ratio_estimate",
    "ChainAgreement",
    "chain_agreement",
    "chains_disagree",
]


def _as_chains(values):
    values = np.asarray(values, dtype=np.float64)
    return values[None] if values.ndim == 1 else values


def ratio_estimate(log_w1, log_w0):
    """``log(mean w1 / mean w0)`` with its delta-method standard error and effective sample size.

    The error is the Monte Carlo standard error (ArviZ, which accounts for autocorrelation and
    between-chain spread) of the mean of ``w1 / mean(w1) - w0 / mean(w0)``.

    :param log_w1: log target weights ``log zeta_c + log w1``, shape ``(num_chains, num_draws)``.
    :param log_w0: log base weights ``log w0``, same shape.
    :return: ``(log_ratio, stderr, ess)`` as floats; ``stderr`` and ``ess`` are NaN with fewer
        than 4 draws per chain or when every draw has the same influence.
    """
    log_mean_w1, influence_w1 = log_mean_and_influence(log_w1)
    log_mean_w0, influence_w0 = log_mean_and_influence(log_w0)
    influence = influence_w1 - influence_w0
    if log_w1.shape[-1] >= 4 and np.std(influence) > 0:
        stderr = arviz_adapter.mcse(influence)
        ess = arviz_adapter.ess(influence, method="mean")
    else:
        stderr, ess = float("nan"), float("nan")
    return float(log_mean_w1 - log_mean_w0), stderr, ess


def chain_agreement(log_w1, log_w0) -> ChainAgreement | None:
    """Per-chain ``log Z`` estimates and a chi-square test that they agree.

    :param log_w1: log target weights ``log zeta_c + log w1``, shape ``(num_chains, num_draws)``.
    :param log_w0: log base weights ``log w0``, same shape.
    :return: :class:`ChainAgreement`, or ``None`` with one chain or fewer than 4 draws per chain.
    """
    num_chains = log_w1.shape[0]
    if num_chains < 2 or log_w1.shape[1] < 4:
        return None
    estimates = [ratio_estimate(log_w1[c : c + 1], log_w0[c : c + 1]) for c in range(num_chains)]
    return agreement_of(
        np.array([estimate[0] for estimate in estimates]),
        np.array([estimate[1] for estimate in estimates]),
    )


def split_halves(values):
    """Each chain's first and second halves as chains of their own (the middle draw of an odd
    count left out), shape ``(2 * num_chains, num_draws // 2)``: a chain that drifts within the
    run then shows in a test of agreement between chains, as in split R-hat."""
    half = values.shape[1] // 2
    return np.concatenate([values[:, :half], values[:, values.shape[1] - half :]])


def tempering_log_normalizer(delta, log_zeta) -> Evidence:
    """``log Z`` from the ``Delta`` of tempered draws (paper eq. 20, in log space).

    ``log Z = logsumexp(log zeta_c + log w1) - logsumexp(log w0)``, pooled over chains. The
    standard error is the delta-method error of the ratio: the Monte Carlo standard error (ArviZ,
    which accounts for autocorrelation and between-chain spread) of the mean of
    ``zeta_c w1 / mean(zeta w1) - w0 / mean(w0)``. Where the estimates of the chains' halves
    spread beyond their own errors, the standard error is widened to that spread
    (:func:`~numpyro_extras.results.evidence.spread_floored_stderr`).

    :param delta: ``Delta`` of every draw, shape ``(num_chains, num_draws)`` or ``(num_draws,)``.
    :param log_zeta: ``log zeta``: a scalar, one value per chain (shape ``(num_chains,)``) or
        one per draw (the shape of ``delta``).
    :return: :class:`~numpyro_extras.Evidence` with ``log_weights`` = ``log zeta_c + log w1`` per
        draw.

    **Example:**

    .. code-block:: python

        nx.tempering_log_normalizer(np.zeros((4, 100)), log_zeta=1.5).log_z  # 1.5
    """
    delta = _as_chains(delta)
    if not np.all(np.isfinite(delta)):
        raise ValueError("Delta contains non-finite values; the draws cannot give log Z.")
    log_zeta = np.asarray(log_zeta, dtype=np.float64)
    if log_zeta.ndim == 1 and log_zeta.shape[0] == delta.shape[0] and delta.shape[0] > 1:
        log_zeta = log_zeta[:, None]
    log_zeta = np.broadcast_to(log_zeta.reshape(log_zeta.shape[-delta.ndim :]), delta.shape)
    log_w1 = log_zeta + np.asarray(log_target_weight(delta), dtype=np.float64)
    log_w0 = np.asarray(log_base_weight(delta), dtype=np.float64)
    log_z, stderr, ess = ratio_estimate(log_w1, log_w0)
    # The halves of the chains, not the chains: a chain that stays in one mode at beta near 1
    # for a long stretch of its run errs by more than its MCSE counts, and its two halves
    # then differ as independent chains would.
    halves_agreement = chain_agreement(split_halves(log_w1), split_halves(log_w0))
    stderr = spread_floored_stderr(halves_agreement, stderr)
    return Evidence(log_z=log_z, stderr=stderr, log_weights=log_w1, ess=ess)


def run_log_normalizer(mcmc) -> Evidence:
    """``log Z`` of a finished tempering run (eq. 20), without the run checks of
    :func:`~numpyro_extras.log_marginal_likelihood`.

    :param mcmc: a finished :class:`~numpyro.infer.MCMC` run with a continuous tempering kernel.
    :return: :class:`~numpyro_extras.Evidence`, as :func:`tempering_log_normalizer` of the
        run's ``delta`` and ``log_zeta`` fields.
    """
    return tempering_log_normalizer(deltas(mcmc), np.asarray(chain_field(mcmc, "log_zeta")))


def target_log_weights(mcmc):
    """Self-normalised log weights of every tempered draw for target expectations (eq. 21).

    :param mcmc: a run with a continuous tempering kernel.
    :return: array ``(num_chains, num_draws)`` whose exponentials sum to 1 over all chains,
        aligned with :func:`~numpyro_extras.tempered_samples`.

    **Example:**

    .. code-block:: python

        weights = np.exp(nx.target_log_weights(mcmc))
        draws = nx.tempered_samples(mcmc, group_by_chain=True)["intercept"]
        (weights * draws).sum()  # the posterior mean of the intercept (eq. 21)
    """
    tempering_kernel(mcmc)
    log_weights = unnormalised_target_log_weights(mcmc)
    return log_weights - logsumexp(log_weights)
