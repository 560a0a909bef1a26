"""Stepping stone on exact draws, against the closed form."""

import numpy as np
import pytest

from numpyro_extras.exchange.evidence import stepping_stone

# Prior N(0, 1) and l(x) = -x^2 / 2: pi_beta = N(0, 1 / (1 + beta)), Z(beta) = (1 + beta)^(-1/2).
LOG_Z = -0.5 * np.log(2.0)


def _exact_draws(betas, num_chains, num_draws, seed):
    rng = np.random.default_rng(seed)
    scales = 1 / np.sqrt(1 + np.asarray(betas))
    x = rng.normal(size=(num_chains, num_draws, len(betas))) * scales
    return -0.5 * x**2


def test_stepping_stone_matches_the_closed_form():
    betas = np.linspace(0, 1, 6) ** 2
    estimate = stepping_stone(_exact_draws(betas, 4, 2000, 0), betas)
    assert 0 < estimate.stderr < 0.01
    assert abs(estimate.log_z - LOG_Z) < 4 * estimate.stderr
    assert not estimate.chains_disagree
    # per-gap ratios Z(b_{i+1}) / Z(b_i) in closed form
    gaps = -0.5 * np.diff(np.log1p(betas))
    assert np.all(np.abs(estimate.gap_log_ratios - gaps) < 4 * estimate.gap_stderr)
    np.testing.assert_allclose(estimate.evidence().log_z, estimate.log_z)


def test_a_coarse_ladder_widens_the_error_to_its_bracket():
    """Two rungs far apart on a sharp path: the forward and reverse sums stay apart, and the
    error bar covers both."""
    betas = np.array([0.0, 1.0])
    log_likelihood = _exact_draws(betas, 2, 200, 1) * 400.0  # l(x) = -200 x^2
    estimate = stepping_stone(log_likelihood, betas)
    assert estimate.stderr >= np.mean(estimate.reverse - estimate.forward) / 2 - 1e-12


def test_chains_that_disagree_widen_the_error():
    betas = np.linspace(0, 1, 4)
    log_likelihood = _exact_draws(betas, 4, 1000, 2)
    log_likelihood[0] += 2.0  # one chain sees a likelihood shifted by 2 nats
    estimate = stepping_stone(log_likelihood, betas)
    assert estimate.chains_disagree
    assert estimate.stderr >= np.std(estimate.chain_log_z, ddof=1) / 2 - 1e-12


def test_gaps_that_move_together_add_their_errors():
    """Rungs that share their states (as swaps make them) give gap weights that rise and fall
    together: the error of the sum is then the sum of the gaps' errors, not their root sum of
    squares."""
    betas = np.linspace(0, 1, 5)
    one_rung = _exact_draws([0.0], 1, 2000, 3)[0, :, 0]
    log_likelihood = np.repeat(one_rung[:, None], len(betas), axis=1)
    estimate = stepping_stone(log_likelihood, betas)
    monte_carlo = estimate.chain_stderr[0]
    assert monte_carlo >= np.sum(estimate.gap_stderr) * (1 - 1e-9)
    assert monte_carlo > 1.9 * np.sqrt(np.sum(estimate.gap_stderr**2))


def test_the_error_covers_the_spread_of_correlated_chains():
    """An autoregressive state shared by neighbouring rungs: over many independent chains, the
    estimates scatter as their reported errors say."""
    rng = np.random.default_rng(4)
    betas = np.linspace(0, 1, 6) ** 2
    num_chains, num_draws, rho = 200, 1000, 0.9
    innovations = rng.normal(size=(num_chains, num_draws))
    shared = np.zeros((num_chains, num_draws))
    for t in range(1, num_draws):
        shared[:, t] = rho * shared[:, t - 1] + np.sqrt(1 - rho**2) * innovations[:, t]
    # every rung sees the same standard normal state, scaled to its own N(0, 1 / (1 + beta))
    x = shared[:, :, None] / np.sqrt(1 + betas)
    estimates = [stepping_stone(-0.5 * x[c] ** 2, betas) for c in range(num_chains)]
    errors = np.array([e.log_z for e in estimates]) - LOG_Z
    stderrs = np.array([e.stderr for e in estimates])
    # the reported errors match the chains' actual scatter within the scatter's own noise
    ratio = np.std(errors) / np.sqrt(np.mean(stderrs**2))
    assert 0.8 < ratio < 1.25, ratio


def test_the_error_of_a_geometric_ladder_matches_the_scatter_of_independent_chains():
    """Gaps that grow along the ladder weigh a rung's draws differently in the forward and the
    reverse sum: the midpoint's error is neither sum's, and over many chains the estimates
    scatter as the midpoint's reported errors say."""
    betas = np.concatenate([[0.0], np.geomspace(1e-3, 1.0, 8)])
    num_chains = 400
    log_likelihood = _exact_draws(betas, num_chains, 500, 5)
    estimates = [stepping_stone(log_likelihood[c], betas) for c in range(num_chains)]
    errors = np.array([e.log_z for e in estimates]) - LOG_Z
    stderrs = np.array([e.stderr for e in estimates])
    assert np.sqrt(np.mean(stderrs**2)) < 0.02
    # the scatter's own relative noise over 400 chains is about 3.5%
    ratio = np.std(errors) / np.sqrt(np.mean(stderrs**2))
    assert 0.88 < ratio < 1.12, ratio


def _scatter_over_error(log_likelihoods, betas):
    estimates = [stepping_stone(run, betas) for run in log_likelihoods]
    errors = np.array([e.log_z for e in estimates]) - LOG_Z
    return np.std(errors) / np.sqrt(np.mean([e.stderr**2 for e in estimates]))


@pytest.mark.slow
def test_the_error_of_four_agreeing_chains_is_not_widened_by_their_noisy_spread():
    """Four chains of exact draws: the spread between them estimates the error no better than
    their own errors do, so the larger of the two would overstate it."""
    betas = np.concatenate([[0.0], np.geomspace(1e-3, 1.0, 16)])
    runs = _exact_draws(betas, 4 * 300, 250, 6).reshape(300, 4, 250, len(betas))
    ratio = _scatter_over_error(runs, betas)
    # the scatter's relative noise over 300 runs is about 4%; the larger of the spread and the
    # chains' errors gives 0.90 here
    assert 0.92 < ratio < 1.12, ratio


@pytest.mark.slow
def test_chains_that_each_miss_part_of_the_posterior_get_their_spread_as_the_error():
    """Each chain's draws carry an offset of their own (a mode it stays in), which no
    within-chain error can see: the spread between chains covers it."""
    betas = np.concatenate([[0.0], np.geomspace(1e-3, 1.0, 8)])
    runs = _exact_draws(betas, 4 * 300, 250, 7).reshape(300, 4, 250, len(betas))
    offsets = np.random.default_rng(8).normal(scale=0.05, size=(300, 4, 1, 1))
    ratio = _scatter_over_error(runs + offsets - offsets.mean(axis=1, keepdims=True), betas)
    assert ratio < 1.25, ratio
