"""The result type every normalizing-constant estimator of numpyro_extras returns, and the
pieces of their standard errors that every family shares."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from blackjax.smc.ess import ess as effective_sample_size
from scipy.special import logsumexp
from scipy.stats import chi2

from numpyro_extras.results import arviz_adapter

__all__ = [
    "Evidence",
    "ChainAgreement",
    "agreement_of",
    "chains_disagree",
    "spread_floored_stderr",
    "log_mean_and_influence",
    "log_mean_exp",
    "CHAIN_AGREEMENT_LEVEL",
    "DISAGREEMENT_FACTOR",
    "UNRELIABLE_PARETO_K",
    "INFINITE_VARIANCE_PARETO_K",
    "pareto_tail_index",
    "evidence_from_log_weights",
    "MIN_ESS_FOR_STDERR",
]

# Thresholds of the chain-agreement check (chains_disagree), one of the run checks behind the
# warnings of log_marginal_likelihood.
CHAIN_AGREEMENT_LEVEL = 1e-3
DISAGREEMENT_FACTOR = 1.5
# Above this Pareto k of the importance weights' tail, importance-sampling estimates are
# unreliable, and above 0.5 the weights' variance is infinite, so a standard error from it is no
# guide (Vehtari et al., 2024, "Pareto smoothed importance sampling", section 3).
UNRELIABLE_PARETO_K = 0.7
INFINITE_VARIANCE_PARETO_K = 0.5
# From this many chains on, the spread of their estimates bounds the standard error from below
# where a chi-square test at this level finds it beyond the chains' own errors.
MIN_CHAINS_FOR_SPREAD = 3
SPREAD_FLOOR_LEVEL = 0.1


class Evidence(NamedTuple):
    """An estimate of a log normalizing constant (log marginal likelihood, minus a free energy).

    :param float log_z: the estimate of ``log Z``.
    :param float stderr: its Monte Carlo standard error.
    :param log_weights: the log importance weights behind the estimate (estimator specific).
    :param float ess: effective sample size behind the estimate.
    :param float pareto_k: for importance-sampling estimates, the Pareto tail index of the
        weights (:func:`pareto_tail_index`; above 0.7 the estimate is unreliable).
    :param tuple problems: what the estimator's checks found that makes the estimate or its
        error bar unreliable, one sentence each (empty when none was found).

    **Example:**

    .. code-block:: python

        evidence = nx.log_marginal_likelihood(mcmc)
        print(f"log Z = {evidence.log_z:.3f} +- {evidence.stderr:.3f}")
    """

    log_z: float
    stderr: float
    log_weights: Any = None
    ess: float | None = None
    pareto_k: float | None = None
    problems: tuple = ()

    def __repr__(self):
        ess = "" if self.ess is None else f", ess={self.ess:.0f}"
        pareto_k = "" if self.pareto_k is None else f", pareto_k={self.pareto_k:.2f}"
        problems = f", problems={len(self.problems)}" if self.problems else ""
        return (
            f"Evidence(log_z={self.log_z:.4f}, stderr={self.stderr:.4f}{ess}{pareto_k}{problems})"
        )


def pareto_tail_index(log_weights) -> float:
    """The Pareto ``k`` of the upper tail of importance weights (ArviZ's PSIS fit).

    A mean of weights whose tail has ``k > 0.5`` has infinite variance, so its delta-method
    standard error understates the error; above ``k = 0.7`` the mean itself is unreliable
    (Vehtari et al., 2024, section 3). A proposal that misses part of the target, or is much
    narrower than it somewhere, shows this way before its error bar does.

    :param log_weights: log importance weights, any shape (non-finite ones are left out).
    :return: ``k`` as a float (``inf`` with 10 finite weights or fewer).

    **Example:**

    .. code-block:: python

        pareto_tail_index(rng.standard_normal(20_000))  # lognormal weights: about 0.2
    """
    log_weights = np.asarray(log_weights, dtype=np.float64).ravel()
    finite = log_weights[np.isfinite(log_weights)]
    if finite.size <= 10:
        return float("inf")
    return arviz_adapter.psis_log_weights(finite)[1]


def log_mean_and_influence(log_values, axis=None):
    """``log mean(v)`` and the influence ``v / mean(v)`` of each value, from ``log v``.

    :param log_values: array of ``log v`` (any shape).
    :param int axis: the axis to average over (default: all values).
    :return: ``(log_mean, influence)``, the influence of the shape of ``log_values``.
    """
    log_values = np.asarray(log_values, dtype=np.float64)
    count = log_values.size if axis is None else log_values.shape[axis]
    log_mean = logsumexp(log_values, axis=axis, keepdims=True) - np.log(count)
    influence = np.exp(log_values - log_mean)
    if axis is None:
        return log_mean.reshape(())[()], influence
    return np.squeeze(log_mean, axis), influence


def log_mean_exp(log_values):
    """``log mean(exp(a))`` over chains and draws, with its delta-method standard error.

    The error is the Monte Carlo standard error (ArviZ, which accounts for autocorrelation and
    between-chain spread) of the mean of the influence ``exp(a) / mean(exp(a))``: the standard
    error of ``log mean`` to first order.

    :param log_values: ``a``, shape ``(num_chains, num_draws)``.
    :return: ``(log_mean, stderr, ess)`` as floats; ``stderr`` is 0 when every value is the same
        and NaN (with ``ess``) with fewer than 4 draws per chain; ``inf`` (and ``ess`` 0) when
        the mean is not finite, as when every value is ``-inf``: nothing then bounds the error.

    **Example:**

    .. code-block:: python

        log_mean_exp(np.log(rng.uniform(size=(4, 1000))))  # (about -0.69, about 0.01, ...)
    """
    log_values = np.asarray(log_values, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        log_mean, influence = log_mean_and_influence(log_values)
    if not np.isfinite(log_mean):
        return float(log_mean), float("inf"), 0.0
    if log_values.shape[-1] < 4:
        return float(log_mean), float("nan"), float("nan")
    if not np.std(influence) > 0:
        return float(log_mean), 0.0, float(influence.size)
    stderr = arviz_adapter.mcse(influence)
    return float(log_mean), stderr, arviz_adapter.ess(influence, method="mean")


class ChainAgreement(NamedTuple):
    """The chains' own ``log Z`` estimates and how well they agree.

    :param log_z: per chain, its ``log Z`` estimate.
    :param stderr: per chain, the standard error of its estimate.
    :param p_value: p-value of the chi-square test that the estimates agree (0 when a chain's
        standard error is not a positive number).
    :param between_stderr: the standard error of the pooled estimate implied by the spread
        between chains, ``std(log_z) / sqrt(num_chains)``.
    """

    log_z: np.ndarray
    stderr: np.ndarray
    p_value: float
    between_stderr: float


def agreement_of(log_z, stderr) -> ChainAgreement:
    """A chi-square test that per-chain ``log Z`` estimates agree within their errors.

    :param log_z: per chain, its estimate, shape ``(num_chains,)`` with ``num_chains >= 2``.
    :param stderr: per chain, its standard error.
    :return: :class:`ChainAgreement`.

    **Example:**

    .. code-block:: python

        agreement_of(np.array([1.0, 1.1]), np.array([0.05, 0.05])).p_value  # 0.16
    """
    log_z = np.asarray(log_z, dtype=np.float64)
    stderr = np.asarray(stderr, dtype=np.float64)
    between_stderr = float(np.std(log_z, ddof=1) / log_z.size**0.5)
    if not np.all(np.isfinite(stderr) & (stderr > 0)):
        return ChainAgreement(log_z, stderr, 0.0, between_stderr)
    precision = stderr**-2
    pooled = np.sum(precision * log_z) / np.sum(precision)
    statistic = float(np.sum(precision * (log_z - pooled) ** 2))
    return ChainAgreement(log_z, stderr, float(chi2.sf(statistic, log_z.size - 1)), between_stderr)


def chains_disagree(agreement: ChainAgreement | None, stderr) -> bool:
    """Whether the chains' ``log Z`` estimates differ beyond their own errors (chi-square test)
    AND by enough to matter: their spread gives a standard error of the pooled estimate more than
    1.5 times the reported one. The second condition keeps single-chain errors, which are
    noisy for a ratio estimator, from raising alarms on good runs with many chains.

    :param agreement: :class:`ChainAgreement` of the run, or ``None`` (never a disagreement).
    :param float stderr: the standard error of the pooled estimate.
    :return: ``True`` when the chains disagree.
    """
    if agreement is None:
        return False
    significant = agreement.p_value < CHAIN_AGREEMENT_LEVEL
    return bool(significant and not agreement.between_stderr <= DISAGREEMENT_FACTOR * stderr)


def spread_floored_stderr(agreement: ChainAgreement | None, stderr) -> float:
    """The standard error of a pooled estimate, raised to the spread between chains where that
    spread says the chains' own errors are too small.

    Within a chain, a state that moves between modes or temperatures rarely makes the draws'
    weights correlated over more draws than an autocorrelation-based MCSE can see in one run,
    while independent chains still differ by the true error. So the spread between chains is a
    floor when the chains disagree (:func:`chains_disagree`), or when there are at least three
    chains and a chi-square test at level 0.1 finds their spread beyond their own errors. Not
    always: the spread of a few chains is itself so noisy that the larger of it and the chains'
    errors would widen every error bar by about a fifth.

    :param agreement: :class:`ChainAgreement` of the run, or ``None`` (``stderr`` unchanged).
    :param float stderr: the standard error of the pooled estimate.
    :return: the standard error as a float.

    **Example:**

    .. code-block:: python

        agreement = agreement_of(np.array([0.0, 0.1, -0.1]), np.full(3, 0.01))
        spread_floored_stderr(agreement, 0.01)  # 0.0577, the spread's standard error
    """
    stderr = float(stderr)
    if agreement is None:
        return stderr
    spread_beyond_errors = agreement.p_value < SPREAD_FLOOR_LEVEL
    if chains_disagree(agreement, stderr) or (
        agreement.log_z.size >= MIN_CHAINS_FOR_SPREAD and spread_beyond_errors
    ):
        return max(stderr, agreement.between_stderr)
    return stderr


# Fewer effective particles than this give no standard error (it is infinite).
MIN_ESS_FOR_STDERR = 10.0


def evidence_from_log_weights(log_weights, log_z0=0.0, *, reverse=False) -> Evidence:
    """``log Z`` from AIS log weights (mAIS paper eq. 15-16, in log space), with its error.

    Forward: ``log Z = log Z_0 + log mean exp(log_weights)``. Reverse (bidirectional Monte
    Carlo, the weights of a run from the target to the base estimate ``Z_0 / Z``):
    ``log Z = log Z_0 - log mean exp(log_weights)``, whose expectation is an upper bound on
    ``log Z`` just as the forward one's is a lower bound (Jensen).

    The stderr is the delta-method error of the log of a mean, ``sd(w) / (sqrt(N) mean(w))``
    with ``w`` the normalised weights; the ESS is ``(sum w)^2 / sum w^2``. Both are unreliable
    when the weights are heavy-tailed (a small ESS says so), and below an ESS of 10 the stderr
    is infinite: so few weights say nothing of their spread.

    :param log_weights: array ``(N,)``; ``-inf`` entries are particles with zero weight.
    :param float log_z0: ``log Z_0`` of the starting density.
    :param bool reverse: the weights come from a reverse run.
    :return: :class:`~numpyro_extras.Evidence` with ``log_weights`` and ``ess``.
    :raises ValueError: if no particle has a finite weight.
    """
    log_weights = np.asarray(log_weights, dtype=np.float64)
    if log_weights.size == 0:
        raise ValueError("No log weights: the run had zero particles.")
    if np.any(np.isnan(log_weights)) or not np.any(np.isfinite(log_weights)):
        raise ValueError(
            "No particle has a finite log weight: every trajectory hit a non-finite density."
        )
    num_particles = log_weights.size
    log_mean = float(logsumexp(log_weights)) - math.log(num_particles)
    normalised = np.exp(log_weights - np.max(log_weights))
    ess = float(effective_sample_size(jnp.asarray(log_weights)))
    relative = normalised / normalised.mean()
    # Weights carried by a handful of particles estimate their own spread no better than the
    # mean: with one dominant weight the delta method gives exactly 1 whatever the error.
    stderr = (
        float(np.std(relative, ddof=1) / math.sqrt(num_particles))
        if num_particles > 1 and ess >= MIN_ESS_FOR_STDERR
        else math.inf
    )
    log_z = float(log_z0) - log_mean if reverse else float(log_z0) + log_mean
    return Evidence(log_z, stderr, jnp.asarray(log_weights), ess)
