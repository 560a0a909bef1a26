"""``log Z`` of a replica-exchange run by stepping stone over its ladder.

With draws ``x^(i)_t`` of replica ``i``, ``Z_{i+1} / Z_i = E_i[exp((beta_{i+1} - beta_i) l(x))]``,
so (Xie et al., "Improving marginal likelihood estimation for Bayesian phylogenetic model
selection", Syst. Biol. 2011, eq. 5)

    ``log Z = sum_i log mean_t exp((beta_{i+1} - beta_i) l(x^(i)_t))``

for a normalised reference. By Jensen's inequality this forward sum is low in expectation; the
reverse sum ``-sum_i log mean_t exp(-(beta_{i+1} - beta_i) l(x^(i+1)_t))`` is high, so the two
bracket ``log Z``. The estimate is their mean; its standard error is the larger of the Monte
Carlo error and half the bracket, so a ladder too coarse for the run's length shows in the error
bar. The Monte Carlo error is the delta method's for the whole sum: ArviZ's MCSE of the mean of
the draws' influences summed over the gaps. Neighbouring rungs exchange states, so their gaps'
weights are correlated within a scan and across scans; adding the gaps' variances as if they
were independent would understate the error.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numpyro_extras.results import arviz_adapter
from numpyro_extras.results.evidence import (
    Evidence,
    agreement_of,
    chains_disagree,
    log_mean_and_influence,
    log_mean_exp,
    spread_floored_stderr,
)

__all__ = [
    "SteppingStone",
    "stepping_stone",
    "chain_stepping_stone",
    "joined_legs_evidence",
    "LEGS_DISAGREE_AT",
]


class SteppingStone(NamedTuple):
    """The stepping-stone estimate of one or several chains.

    :param log_z: the estimate: the mean of the chains' brackets' midpoints.
    :param stderr: its standard error (Monte Carlo error, half the bracket, or the spread
        between chains, whichever is largest).
    :param forward: per chain, the forward (low) sum.
    :param reverse: per chain, the reverse (high) sum.
    :param chain_log_z: per chain, the midpoint of its bracket.
    :param chain_stderr: per chain, its Monte Carlo standard error.
    :param gap_log_ratios: per chain and gap, the forward ``log Z_{i+1} / Z_i`` (where the path
        is hard, these and their errors are large).
    :param gap_stderr: their standard errors.
    :param ess: the smallest effective sample size of any gap's weights, over chains.
    :param chains_disagree: whether the chains' estimates differ beyond their errors.
    """

    log_z: float
    stderr: float
    forward: np.ndarray
    reverse: np.ndarray
    chain_log_z: np.ndarray
    chain_stderr: np.ndarray
    gap_log_ratios: np.ndarray
    gap_stderr: np.ndarray
    ess: float
    chains_disagree: bool

    def evidence(self) -> Evidence:
        """The estimate as an :class:`~numpyro_extras.Evidence`."""
        return Evidence(log_z=self.log_z, stderr=self.stderr, ess=self.ess)


def chain_stepping_stone(log_likelihood, betas):
    """Forward and reverse stepping-stone sums of one chain, with their errors.

    :param log_likelihood: ``l`` at every rung and draw, shape ``(num_draws, N)``.
    :param betas: the chain's ladder, shape ``(N,)``.
    :return: ``(forward, reverse, stderr, gap_log_ratios, gap_stderr, ess)``: ``stderr`` is the
        Monte Carlo error of the bracket's midpoint, from each draw's influence on both sums;
        ``gap_stderr`` the gaps' own errors; ``ess`` the smallest of the gaps'.
    """
    log_likelihood = np.asarray(log_likelihood, dtype=np.float64)
    betas = np.asarray(betas, dtype=np.float64)
    gaps = np.diff(betas)
    forward_terms = [log_mean_exp((gap * log_likelihood[:, i])[None]) for i, gap in enumerate(gaps)]
    reverse_terms = [
        log_mean_exp((-gap * log_likelihood[:, i + 1])[None]) for i, gap in enumerate(gaps)
    ]
    gap_log_ratios = np.array([term[0] for term in forward_terms])
    gap_stderr = np.array([term[1] for term in forward_terms])
    forward = float(np.sum(gap_log_ratios))
    reverse = -float(np.sum([term[0] for term in reverse_terms]))
    ess = float(np.min([term[2] for term in forward_terms + reverse_terms]))
    # The reverse sum enters the midpoint with a minus sign, so a draw that raises one sum
    # raises the other: the influences are combined per draw before the Monte Carlo error.
    influence = 0.5 * (
        _summed_influence(gaps[None, :] * log_likelihood[:, :-1])
        - _summed_influence(-gaps[None, :] * log_likelihood[:, 1:])
    )
    return forward, reverse, _influence_stderr(influence), gap_log_ratios, gap_stderr, ess


def _summed_influence(log_weights):
    """Per draw, its influence on ``sum_i log mean_t exp(a_ti)`` summed over the gaps: to first
    order the sum's error is the mean of this series over draws.

    :param log_weights: ``a``, shape ``(num_draws, num_gaps)``.
    :return: shape ``(num_draws,)``.
    """
    return np.sum(log_mean_and_influence(log_weights, axis=0)[1], axis=1)


def _influence_stderr(influence):
    """Standard error of the mean of one chain's influence series: ArviZ's MCSE, which counts
    the correlation between gaps (draws at one time share a swap history) as well as along the
    chain. NaN with fewer than 4 draws, 0 when no weight varies."""
    if influence.shape[0] < 4:
        return float("nan")
    if not np.std(influence) > 0:
        return 0.0
    return arviz_adapter.mcse(influence)


def stepping_stone(log_likelihood, betas) -> SteppingStone:
    """``log Z`` by stepping stone from every chain of a replica-exchange run.

    Each chain has its own ladder, so each gives its own bracket; the estimate is the mean of
    the brackets' midpoints. Its standard error is the largest of: the chains' Monte Carlo
    errors combined, half the mean bracket width, and the spread between chains (with three
    chains or more, or when two chains' estimates disagree beyond their errors, a chi-square
    test).

    :param log_likelihood: ``l`` at every rung, shape ``(num_chains, num_draws, N)`` or
        ``(num_draws, N)``.
    :param betas: the ladders, shape ``(num_chains, N)`` or ``(N,)``.
    :return: :class:`SteppingStone`.
    :raises ValueError: for non-finite log-likelihoods or mismatched shapes.

    **Example:**

    .. code-block:: python

        # exact draws of N(0, 1 / (1 + beta)) under l(x) = -x^2 / 2: log Z = -log(2) / 2
        result = stepping_stone(log_likelihood, betas)
        result.log_z, result.stderr
    """
    log_likelihood = np.asarray(log_likelihood, dtype=np.float64)
    if log_likelihood.ndim == 2:
        log_likelihood = log_likelihood[None]
    betas = np.asarray(betas, dtype=np.float64).reshape(-1, log_likelihood.shape[-1])
    betas = np.broadcast_to(betas, (log_likelihood.shape[0], log_likelihood.shape[-1]))
    if not np.all(np.isfinite(log_likelihood)):
        raise ValueError(
            "The replicas' log-likelihoods contain non-finite values; the draws cannot give log Z."
        )
    per_chain = [
        chain_stepping_stone(chain, ladder)
        for chain, ladder in zip(log_likelihood, betas, strict=True)
    ]
    forward = np.array([result[0] for result in per_chain])
    reverse = np.array([result[1] for result in per_chain])
    chain_stderr = np.array([result[2] for result in per_chain])
    chain_log_z = 0.5 * (forward + reverse)
    num_chains = chain_log_z.size
    log_z = float(np.mean(chain_log_z))
    monte_carlo = float(np.sqrt(np.sum(chain_stderr**2)) / num_chains)
    half_bracket = float(np.mean(np.abs(reverse - forward)) / 2)
    stderr = max(monte_carlo, half_bracket)
    disagree = False
    if num_chains >= 2 and log_likelihood.shape[1] >= 4:
        agreement = agreement_of(chain_log_z, np.sqrt(chain_stderr**2 + half_bracket**2))
        disagree = chains_disagree(agreement, stderr)
        stderr = spread_floored_stderr(agreement, stderr)
    return SteppingStone(
        log_z=log_z,
        stderr=stderr,
        forward=forward,
        reverse=reverse,
        chain_log_z=chain_log_z,
        chain_stderr=chain_stderr,
        gap_log_ratios=np.array([result[3] for result in per_chain]),
        gap_stderr=np.array([result[4] for result in per_chain]),
        ess=float(np.min([result[5] for result in per_chain])),
        chains_disagree=disagree,
    )


# Two legs' estimates of one log Z that differ by more than this many standard errors of their
# difference are taken to disagree.
LEGS_DISAGREE_AT = 3.0


def joined_legs_evidence(fit_leg: SteppingStone, prior_leg: SteppingStone):
    """``log Z`` from the two legs of stabilised replica exchange, each a stepping stone from a
    normalised reference (the fitted mixture, the prior) to the same posterior.

    Where the legs agree within ``LEGS_DISAGREE_AT`` standard errors of their difference, the
    estimate is their inverse-variance weighted mean. Where they do not, a reference missed part
    of the posterior (a mode the fit did not find lowers the fitted leg's estimate) or a leg did
    not mix: the estimate is their midpoint, and its standard error covers both legs' intervals.

    :param SteppingStone fit_leg: the fitted leg's estimate.
    :param SteppingStone prior_leg: the prior leg's.
    :return: ``(evidence, disagree)``: an :class:`~numpyro_extras.Evidence` and whether the
        legs disagree.

    **Example:**

    .. code-block:: python

        evidence, disagree = joined_legs_evidence(
            stepping_stone(fit_log_likelihood, fit_betas),
            stepping_stone(prior_log_likelihood, prior_betas),
        )
    """
    estimates = np.array([fit_leg.log_z, prior_leg.log_z])
    errors = np.maximum(np.array([fit_leg.stderr, prior_leg.stderr]), 1e-12)
    difference = abs(estimates[0] - estimates[1])
    ess = min(fit_leg.ess, prior_leg.ess)
    if difference <= LEGS_DISAGREE_AT * float(np.hypot(*errors)):
        precision = 1.0 / errors**2
        log_z = float(np.sum(precision * estimates) / np.sum(precision))
        return Evidence(log_z=log_z, stderr=float(np.sum(precision) ** -0.5), ess=ess), False
    log_z = float(np.mean(estimates))
    stderr = float(difference / 2 + np.max(errors))
    return Evidence(log_z=log_z, stderr=stderr, ess=ess), True
