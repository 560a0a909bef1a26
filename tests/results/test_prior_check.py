"""check_against_prior: exact decisions on log likelihoods whose prior estimate is known."""

import math

import numpy as np
import pytest
from scipy.special import logsumexp

from numpyro_extras.results.evidence import Evidence
from numpyro_extras.results.prior_check import (
    MISSED_MASS_Z,
    PRIOR_DISAGREEMENT_Z,
    check_against_prior,
)

NAMES = dict(estimate_name="the estimate's", cause="mass is missed")


def prior_log_likelihoods(num_draws=10_000, spread=0.3, seed=0):
    return np.random.default_rng(seed).normal(-1.0, spread, num_draws)


def prior_estimate(log_likelihoods):
    weights = np.exp(log_likelihoods - log_likelihoods.max())
    relative = weights / weights.mean()
    stderr = np.std(relative, ddof=1) / math.sqrt(len(weights))
    return float(logsumexp(log_likelihoods) - math.log(len(weights))), float(stderr)


def evidence_at_gap(gap_in_stderrs, stderr=0.01):
    """An estimate ``gap_in_stderrs`` combined standard errors below the prior's."""
    prior_log_z, prior_stderr = prior_estimate(prior_log_likelihoods())
    combined = math.hypot(prior_stderr, stderr)
    return Evidence(log_z=prior_log_z - gap_in_stderrs * combined, stderr=stderr)


def test_agreement_leaves_the_estimate_alone():
    evidence = evidence_at_gap(PRIOR_DISAGREEMENT_Z - 0.1)
    checked, problem = check_against_prior(evidence, prior_log_likelihoods(), **NAMES)
    assert checked is evidence and problem is None


def test_an_estimate_above_the_prior_is_left_alone():
    evidence = evidence_at_gap(-10.0)
    checked, problem = check_against_prior(evidence, prior_log_likelihoods(), **NAMES)
    assert checked is evidence and problem is None


def test_a_moderate_gap_floors_the_stderr_without_a_problem():
    evidence = evidence_at_gap(0.5 * (PRIOR_DISAGREEMENT_Z + MISSED_MASS_Z))
    prior_log_z, _ = prior_estimate(prior_log_likelihoods())
    checked, problem = check_against_prior(evidence, prior_log_likelihoods(), **NAMES)
    assert problem is None
    assert checked.stderr == pytest.approx(prior_log_z - evidence.log_z)
    assert checked.log_z == evidence.log_z and checked.problems == ()


def test_a_large_gap_is_a_problem_that_names_the_estimate():
    evidence = evidence_at_gap(MISSED_MASS_Z + 1.0)
    prior_log_z, _ = prior_estimate(prior_log_likelihoods())
    checked, problem = check_against_prior(evidence, prior_log_likelihoods(), **NAMES)
    assert checked.stderr == pytest.approx(prior_log_z - evidence.log_z)
    assert checked.problems == (problem,)
    assert "above the estimate's" in problem and "mass is missed" in problem


def test_too_few_effective_prior_draws_say_nothing():
    # A spread of 5 nats: a handful of draws carry the prior's estimate.
    log_likelihoods = prior_log_likelihoods(spread=5.0)
    evidence = Evidence(log_z=prior_estimate(log_likelihoods)[0] - 100.0, stderr=0.01)
    checked, problem = check_against_prior(evidence, log_likelihoods, **NAMES)
    assert checked is evidence and problem is None


def test_no_finite_likelihood_says_nothing():
    evidence = Evidence(log_z=-1.0, stderr=0.01)
    checked, problem = check_against_prior(evidence, np.full(100, -np.inf), **NAMES)
    assert checked is evidence and problem is None
