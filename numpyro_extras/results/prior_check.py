"""A ``log Z`` estimate checked against plain importance sampling from the prior.

``mean_i p(y | x_i)`` over prior draws ``x_i`` is an unbiased estimate of ``Z`` whose error is
measurable whenever its ESS is not tiny, and prior draws reach everywhere the prior does. An
annealing path from a fitted Gaussian, or a bridge from posterior draws, reaches only where its
chains went: a mode they never visited, or a region where the posterior's scale shrinks (the
neck of a centred hierarchical model's funnel), stays empty, and ``log Z`` comes out low with a
small error bar. A prior estimate above the other beyond their combined errors shows that
missing mass: the truth may lie as far off as the prior's estimate, so the gap between the two
is a floor for the stderr (the idea of the spread between independent chains as a floor, with
two estimators for the chains), and a gap of ``MISSED_MASS_Z`` combined errors or more is a
problem to report. With too few effective prior draws (a likelihood much narrower than the
prior, the usual case) the check says nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax

from numpyro_extras.model.potential import SplitModel
from numpyro_extras.results.evidence import Evidence, evidence_from_log_weights
from numpyro_extras.shell.compilation import quick_jit

__all__ = [
    "MIN_PRIOR_ESS_FRACTION",
    "MISSED_MASS_Z",
    "PRIOR_DISAGREEMENT_Z",
    "check_against_prior",
    "prior_log_likelihoods_fn",
]

# Fewer effective prior draws than this share say nothing about the evidence.
MIN_PRIOR_ESS_FRACTION = 0.05
# Beyond this many combined standard errors (a one-sided test at level 0.05) the prior's
# estimate disagrees with the other, and the gap between them floors the stderr.
PRIOR_DISAGREEMENT_Z = 1.645
# Beyond this many, the estimate missed mass: a problem to report.
MISSED_MASS_Z = 4.0


def prior_log_likelihoods_fn(split: SplitModel) -> Callable:
    """``fn(rng_key, num_draws)``: ``log p(y | x)`` at ``num_draws`` draws of the prior, compiled
    (``num_draws`` static).

    :param split: the model's :class:`~numpyro_extras.model.potential.SplitModel`.
    :return: the compiled function.

    **Example:**

    .. code-block:: python

        split = split_model(key, model, (x, y))
        log_likelihoods = prior_log_likelihoods_fn(split)(key, 10_000)
    """

    def prior_log_likelihoods(rng_key, num_draws):
        x, discrete = split.sample_prior_fn(rng_key, num_draws)
        return jax.lax.map(
            lambda position: split.log_likelihood_fn(*position),
            (x, discrete),
            batch_size=min(num_draws, 1024),
        )

    return quick_jit(prior_log_likelihoods, static_argnums=1)


def check_against_prior(
    evidence: Evidence, log_likelihoods, *, estimate_name: str, cause: str
) -> tuple[Evidence, str | None]:
    """Compare a ``log Z`` estimate with importance sampling from the prior.

    :param evidence: the estimate to check.
    :param log_likelihoods: ``log p(y | x_i)`` at prior draws ``x_i``
        (:func:`prior_log_likelihoods_fn`).
    :param str estimate_name: how the problem names the estimate ("the annealing's").
    :param str cause: what the problem says a gap means for this estimate, and what to do.
    :return: ``(evidence, problem)``: ``evidence`` with its stderr raised to the gap when the
        prior's estimate lies more than ``PRIOR_DISAGREEMENT_Z`` combined standard errors above
        it, and the sentence reporting a gap beyond ``MISSED_MASS_Z`` (else ``None``).

    **Example:**

    .. doctest::

        >>> import numpy as np
        >>> from numpyro_extras.results.evidence import Evidence
        >>> from numpyro_extras.results.prior_check import check_against_prior
        >>> low = Evidence(log_z=-2.0, stderr=0.01)
        >>> log_likelihoods = np.random.default_rng(0).normal(-1.0, 0.1, 10_000)
        >>> checked, problem = check_against_prior(
        ...     low, log_likelihoods, estimate_name="the estimate's", cause="mass is missed"
        ... )
        >>> round(checked.stderr, 2), problem is not None
        (1.0, True)
    """
    num_draws = len(log_likelihoods)
    try:
        prior = evidence_from_log_weights(log_likelihoods)
    except ValueError:  # no prior draw with a finite likelihood
        return evidence, None
    if prior.ess < MIN_PRIOR_ESS_FRACTION * num_draws or not math.isfinite(evidence.stderr):
        return evidence, None
    combined_stderr = math.hypot(prior.stderr, evidence.stderr)
    gap = (prior.log_z - evidence.log_z) / combined_stderr if combined_stderr > 0 else 0.0
    if gap <= PRIOR_DISAGREEMENT_Z:
        return evidence, None
    floored = evidence._replace(stderr=max(evidence.stderr, prior.log_z - evidence.log_z))
    if gap <= MISSED_MASS_Z:
        return floored, None
    gap_text = "more than 1000" if gap > 1000 else f"{gap:.1f}"
    problem = (
        f"importance sampling from the prior ({num_draws} draws, ESS {prior.ess:.0f}) gives "
        f"log Z = {prior.log_z:.3f} +- {prior.stderr:.3f}, {gap_text} standard errors above "
        f"{estimate_name} {evidence.log_z:.3f} +- {evidence.stderr:.3f}: {cause}; its stderr "
        f"is raised to the gap, {floored.stderr:.3f}"
    )
    return floored._replace(problems=(*evidence.problems, problem)), problem
