"""Bridge sampling from draws: the iteration's fixed point, closed-form log Z for each proposal,
a bimodal target, and chains that disagree."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numpyro_extras as nx
from numpyro_extras.bridge.estimator import iterate_bridge
from numpyro_extras.bridge.proposals import fit_mixture

COVARIANCE = np.array([[2.0, 0.9], [0.9, 1.0]])
PRECISION = np.linalg.inv(COVARIANCE)
LOG_SCALE = 1.5  # q = exp(LOG_SCALE) N(x; 0, COVARIANCE)
EXACT_GAUSSIAN_LOG_Z = LOG_SCALE


def gaussian_potential(x):
    """-log q for q = exp(LOG_SCALE) N(0, COVARIANCE)."""
    return (
        0.5 * x @ jnp.asarray(PRECISION) @ x
        + 0.5 * math.log(np.linalg.det(2 * math.pi * COVARIANCE))
        - LOG_SCALE
    )


def test_fixed_point_is_log_z_for_the_exact_proposal():
    # With g the normalised target, every log q / g equals log Z: one step lands on it.
    log_z, converged, _ = iterate_bridge(np.full(100, 2.5), np.full(100, 2.5), 100.0, 10, 1e-12)
    assert converged and log_z == pytest.approx(2.5, abs=1e-12)


@pytest.mark.parametrize("method", ["auto", "normal", "warp3"])
def test_closed_form_gaussian(method):
    rng = np.random.default_rng(0)
    draws = rng.multivariate_normal(np.zeros(2), COVARIANCE, size=(4, 1000))
    evidence = nx.bridge_evidence(jax.random.PRNGKey(1), gaussian_potential, draws, method=method)
    assert 0 < evidence.stderr < 0.01
    assert abs(evidence.log_z - EXACT_GAUSSIAN_LOG_Z) < 4 * evidence.stderr
    assert evidence.problems == ()


def bimodal_potential(x):
    """-log q for q = e^2 (0.3 N(-4, 1) + 0.7 N(4, 1)) in one dimension: log Z = 2."""
    log_densities = jnp.log(jnp.array([0.3, 0.7])) - 0.5 * (x[0] - jnp.array([-4.0, 4.0])) ** 2
    return -(jax.nn.logsumexp(log_densities) - 0.5 * math.log(2 * math.pi) + 2.0)


def bimodal_draws(rng, shape):
    modes = np.where(rng.uniform(size=shape) < 0.3, -4.0, 4.0)
    return (modes + rng.standard_normal(shape))[..., None]


def test_mixture_proposal_on_a_bimodal_target():
    rng = np.random.default_rng(2)
    draws = bimodal_draws(rng, (4, 1000))
    proposal = fit_mixture(draws.reshape(-1, 1), rng)
    assert np.sort(np.asarray(proposal.component_locs).ravel()) == pytest.approx(
        [-4.0, 4.0], abs=0.2
    )
    evidence = nx.bridge_evidence(jax.random.PRNGKey(3), bimodal_potential, draws)
    assert 0 < evidence.stderr < 0.02
    assert abs(evidence.log_z - 2.0) < 4 * evidence.stderr
    assert evidence.problems == ()


def test_chains_in_different_modes_are_reported():
    rng = np.random.default_rng(4)
    # Two chains in each mode: their own estimates are log(0.3) and log(0.7) off the truth.
    draws = np.concatenate(
        [-4.0 + rng.standard_normal((2, 1000, 1)), 4.0 + rng.standard_normal((2, 1000, 1))]
    )
    evidence = nx.bridge_evidence(jax.random.PRNGKey(5), bimodal_potential, draws)
    assert any("disagree" in problem for problem in evidence.problems)


def test_bad_draws_are_named():
    with pytest.raises(ValueError, match="at least 16 draws per chain"):
        nx.bridge_evidence(jax.random.PRNGKey(0), gaussian_potential, np.zeros((2, 10, 2)))
    with pytest.raises(ValueError, match=r"shape \(chains, draws, D\)"):
        nx.bridge_evidence(jax.random.PRNGKey(0), gaussian_potential, np.zeros(10))
    with pytest.raises(ValueError, match="NaN"):
        nx.bridge_evidence(jax.random.PRNGKey(0), gaussian_potential, np.full((2, 20, 2), np.nan))
    with pytest.raises(ValueError, match="method must be one of"):
        nx.bridge_evidence(
            jax.random.PRNGKey(0), gaussian_potential, np.zeros((2, 20, 2)), method="warp"
        )


def test_an_overlap_carried_by_few_draws_is_reported():
    rng = np.random.default_rng(6)
    draws = rng.multivariate_normal(np.zeros(2), COVARIANCE, size=(2, 60))
    evidence = nx.bridge_evidence(jax.random.PRNGKey(7), gaussian_potential, draws)
    assert any("overlap little" in problem for problem in evidence.problems)


def test_halves_that_disagree_are_reported():
    # The chains were still moving: half their first-half draws, a tenth of their second-half
    # draws sit in the mode of mass 0.3.
    rng = np.random.default_rng(8)
    modes = np.concatenate(
        [
            np.where(rng.uniform(size=(4, 500)) < 0.5, -4.0, 4.0),
            np.where(rng.uniform(size=(4, 500)) < 0.1, -4.0, 4.0),
        ],
        axis=1,
    )
    draws = (modes + rng.standard_normal(modes.shape))[..., None]
    evidence = nx.bridge_evidence(jax.random.PRNGKey(9), bimodal_potential, draws)
    assert any("two halves of the draws disagree" in problem for problem in evidence.problems)
