"""The annealing step as a core in BlackJAX's shape, run without ``anneal``: log Z of a Gaussian
path against its closed form, the same weights as ``anneal`` from the same keys, and what the
info reports."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_extras.annealing.driver import (
    AnnealingInfo,
    AnnealingState,
    anneal,
    build_kernel,
    init,
    inverse_temperature_schedule,
)
from numpyro_extras.results.evidence import evidence_from_log_weights

# f(x, beta) = N(x; 0, 1) exp(-beta PRECISION x^2 / 2): Z_0 = 1, Z_1 = (1 + PRECISION)^(-1/2).
PRECISION = 8.0
LOG_Z = -0.5 * math.log(1.0 + PRECISION)


def log_density(x, beta):
    return -0.5 * (1.0 + beta * PRECISION) * x**2 - 0.5 * math.log(2 * math.pi)


def exact_draws(rng_key, positions, beta, kernel_state):
    """Fresh draws from f(., beta) / Z_beta: a transition that leaves it invariant."""
    scale = 1.0 / jnp.sqrt(1.0 + beta * PRECISION)
    return scale * jax.random.normal(rng_key, positions.shape), kernel_state, jnp.ones(())


def _run_core(rng_key, betas, num_particles=2000):
    kernel = jax.jit(build_kernel(log_density, exact_draws))
    init_key, run_key = jax.random.split(rng_key)
    state = init(jax.random.normal(init_key, (num_particles,)))
    infos = []
    keys = jax.random.split(run_key, len(betas) - 1)
    for step, (key, previous, beta) in enumerate(zip(keys, betas[:-1], betas[1:], strict=True)):
        state, info = kernel(key, state, previous, beta, step < len(betas) - 2)
        infos.append(info)
    return state, infos, (init_key, run_key)


def test_the_core_alone_estimates_log_z_and_matches_anneal():
    betas = inverse_temperature_schedule("linear", 30)
    state, infos, (init_key, run_key) = _run_core(jax.random.PRNGKey(0), betas)
    assert isinstance(state, AnnealingState) and isinstance(infos[0], AnnealingInfo)
    evidence = evidence_from_log_weights(state.log_weights)
    assert 0.0 < evidence.stderr < 0.01
    assert abs(evidence.log_z - LOG_Z) < 4 * evidence.stderr, (evidence, LOG_Z)
    # anneal scans the same kernel: from the same keys, the same weights
    result = anneal(
        run_key,
        log_density,
        jax.random.normal(init_key, (2000,)),
        exact_draws,
        betas,
        progress_bar=False,
    )
    np.testing.assert_allclose(result.log_weights, state.log_weights, rtol=1e-12)
    # the last step updates the weights and does not move the particles
    assert np.isnan(float(infos[-1].acceptance)) and float(infos[0].acceptance) == 1.0


def test_info_holds_each_particles_increment():
    kernel = build_kernel(log_density, exact_draws)
    positions = jnp.array([0.0, 1.0, -2.0])
    state = init(positions)
    new_state, info = kernel(jax.random.PRNGKey(1), state, 0.25, 0.5)
    expected = -0.5 * (0.5 - 0.25) * PRECISION * np.asarray(positions) ** 2
    np.testing.assert_allclose(info.log_weight_increments, expected, rtol=1e-12)
    np.testing.assert_allclose(new_state.log_weights, expected, rtol=1e-12)
    assert not np.allclose(new_state.positions, positions)  # moved after the update


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_particle_with_a_non_finite_increment_loses_its_weight(value):
    def broken(x, beta):
        return jnp.where(x > 1.5, value, log_density(x, beta))

    kernel = build_kernel(broken, exact_draws)
    state = init(jnp.array([0.0, 2.0]))
    new_state, _ = kernel(jax.random.PRNGKey(2), state, 0.0, 0.5, False)
    weights = np.asarray(new_state.log_weights)
    assert np.isfinite(weights[0]) and weights[1] == -np.inf
