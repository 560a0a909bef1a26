"""Exact checks of the Boltzmann machine relaxation: enumeration, normalizer, moments and
potential."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.special
from exact_checks import log_trapezoid, model_potential

from numpyro_extras.targets.boltzmann_relaxation import (
    BoltzmannRelaxation,
    boltzmann_relaxation_model,
    boltzmann_relaxation_potential,
    enumerate_boltzmann_machine,
    make_boltzmann_relaxation,
)

# Quadrature checks to 1e-6 and beyond need double precision.
jax.config.update("jax_enable_x64", True)


def brute_force_boltzmann_machine(weights, biases):
    """log Z_B, E[s], E[s s^T] by a plain loop over all states."""
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=len(biases))))
    log_weights = np.array([0.5 * s @ weights @ s + s @ biases for s in states])
    log_z = scipy.special.logsumexp(log_weights)
    probs = np.exp(log_weights - log_z)
    return log_z, probs @ states, (states * probs[:, None]).T @ states


# ------------------------------------------------------------------------------------------------
# Boltzmann machine relaxation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_units", [2, 5, 9])
def test_boltzmann_relaxation_structure(num_units):
    relaxation = make_boltzmann_relaxation(7, num_units=num_units)
    assert isinstance(relaxation, BoltzmannRelaxation)
    weights, projection, diagonal = relaxation.weights, relaxation.projection, relaxation.diagonal
    assert weights.shape == (num_units, num_units)
    assert projection.shape == (num_units - 1, num_units)
    assert relaxation.mean.shape == (num_units - 1,)
    assert relaxation.covariance.shape == (num_units - 1, num_units - 1)
    np.testing.assert_array_equal(weights, weights.T)
    np.testing.assert_array_equal(np.diag(weights), 0.0)
    np.testing.assert_allclose(projection.T @ projection, weights + np.diag(diagonal), atol=1e-12)
    # Diagonal shift: D = -lambda_min(W) I.
    np.testing.assert_allclose(diagonal, -np.linalg.eigvalsh(weights)[0], rtol=1e-10)
    again = make_boltzmann_relaxation(7, num_units=num_units)
    np.testing.assert_array_equal(relaxation.projection, again.projection)
    assert relaxation.log_z == again.log_z


def test_boltzmann_generation_follows_appendix_b():
    # Off-diagonal W equals V = R diag(e) R^T with |e_i| < 6, so the eigenvalues of
    # W = V - diag(V) lie within 6 + max|V_ii| of zero; biases are small.
    relaxation = make_boltzmann_relaxation(11, num_units=14)
    eigenvalues = np.linalg.eigvalsh(relaxation.weights)
    assert np.max(np.abs(eigenvalues)) < 12.0
    assert np.max(np.abs(relaxation.biases)) < 0.5


@pytest.mark.parametrize("num_units", [3, 6, 10])
def test_enumeration_matches_brute_force_and_chunk_sizes(num_units):
    relaxation = make_boltzmann_relaxation(num_units, num_units=num_units)
    expected = brute_force_boltzmann_machine(relaxation.weights, relaxation.biases)
    for chunk_size in [1, 3, 64, 2**16]:
        log_z, mean, second_moment = enumerate_boltzmann_machine(
            relaxation.weights, relaxation.biases, chunk_size=chunk_size
        )
        assert log_z == pytest.approx(expected[0], abs=1e-10)
        np.testing.assert_allclose(mean, expected[1], atol=1e-12)
        np.testing.assert_allclose(second_moment, expected[2], atol=1e-12)


def test_enumeration_does_not_overflow():
    # Log weights around 1e3 would overflow a naive exp; the running-maximum rescaling copes.
    rng = np.random.default_rng(0)
    weights = 100.0 * rng.standard_normal((8, 8))
    weights = weights + weights.T - np.diag(2 * np.diag(weights))
    biases = rng.standard_normal(8)
    expected = brute_force_boltzmann_machine(weights, biases)
    log_z, mean, _ = enumerate_boltzmann_machine(weights, biases, chunk_size=5)
    assert log_z == pytest.approx(expected[0], rel=1e-12)
    np.testing.assert_allclose(mean, expected[1], atol=1e-12)


def test_boltzmann_log_z_by_quadrature_one_dimension():
    relaxation = make_boltzmann_relaxation(0, num_units=2)
    potential = boltzmann_relaxation_potential(relaxation)

    def density(x, power=0):
        return x**power * math.exp(-float(potential(jnp.array([x]))))

    states = np.array(list(itertools.product([-1.0, 1.0], repeat=2)))
    peaks = np.sort(states @ relaxation.projection[0])
    limit = np.max(np.abs(peaks)) + 15.0
    moments = [
        scipy.integrate.quad(
            density, -limit, limit, args=(power,), points=peaks, epsabs=0, epsrel=1e-12, limit=200
        )[0]
        for power in range(3)
    ]
    integral, first, second = moments
    assert math.log(integral) == pytest.approx(relaxation.log_z, abs=1e-8)
    mean = first / integral
    assert mean == pytest.approx(relaxation.mean[0], abs=1e-8)
    assert second / integral - mean**2 == pytest.approx(relaxation.covariance[0, 0], abs=1e-8)


def test_boltzmann_log_z_and_moments_by_grid_two_dimensions():
    # Independent of the enumeration: integrate exp(-phi) of eq. 51 over a dense 2-D grid and
    # compare with eqs. 52-54.
    relaxation = make_boltzmann_relaxation(1, num_units=3)
    potential = boltzmann_relaxation_potential(relaxation)
    # Component means Q^T s lie within |Q^T s| <= sum_i |q_i|; unit-variance tails need ~10 more.
    half_width = np.sum(np.linalg.norm(relaxation.projection, axis=0)) + 10.0
    grid, spacing = np.linspace(-half_width, half_width, 1201, retstep=True)
    mesh = np.stack(np.meshgrid(grid, grid, indexing="ij"), axis=-1)
    log_density = -np.asarray(potential(jnp.asarray(mesh)))
    log_z = log_trapezoid(log_density, spacing)
    assert log_z == pytest.approx(relaxation.log_z, abs=1e-8)

    probs = np.exp(log_density - log_z) * spacing**2
    mean = np.einsum("ij,ijk->k", probs, mesh)
    centred = mesh - mean
    covariance = np.einsum("ij,ijk,ijl->kl", probs, centred, centred)
    np.testing.assert_allclose(mean, relaxation.mean, atol=1e-8)
    np.testing.assert_allclose(covariance, relaxation.covariance, atol=1e-8)


def test_boltzmann_moments_by_exact_sampling():
    # Exact draws from the mixture: s from the enumerated Boltzmann distribution, then
    # x = Q^T s + noise. Tolerances are 5 Monte Carlo standard errors.
    relaxation = make_boltzmann_relaxation(2, num_units=8)
    rng = np.random.default_rng(1)
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=8)))
    log_weights = 0.5 * np.einsum("ni,ij,nj->n", states, relaxation.weights, states)
    log_weights += states @ relaxation.biases
    probs = np.exp(log_weights - scipy.special.logsumexp(log_weights))
    num_draws = 400_000
    sampled_states = states[rng.choice(len(states), size=num_draws, p=probs)]
    draws = sampled_states @ relaxation.projection.T + rng.standard_normal((num_draws, 7))

    mean_error = draws.mean(axis=0) - relaxation.mean
    mean_standard_error = draws.std(axis=0) / math.sqrt(num_draws)
    assert np.all(np.abs(mean_error) < 5 * mean_standard_error)

    centred = draws - relaxation.mean
    products = centred[:, :, None] * centred[:, None, :]
    covariance_error = products.mean(axis=0) - relaxation.covariance
    covariance_standard_error = products.std(axis=0) / math.sqrt(num_draws)
    assert np.all(np.abs(covariance_error) < 5 * covariance_standard_error)


def test_boltzmann_model_potential_equals_phi():
    relaxation = make_boltzmann_relaxation(3, num_units=6)
    potential = jax.jit(boltzmann_relaxation_potential(relaxation))
    potential_fn = model_potential(boltzmann_relaxation_model, relaxation)
    points = 4.0 * jax.random.normal(jax.random.PRNGKey(1), (5, 5))
    for point in points:
        assert float(potential_fn({"x": point})) == pytest.approx(
            float(potential(point)), rel=1e-12, abs=1e-12
        )
    # Batched evaluation agrees with pointwise evaluation.
    np.testing.assert_allclose(
        potential(points), [potential(point) for point in points], rtol=1e-12
    )


def test_boltzmann_potential_is_numerically_stable():
    relaxation = make_boltzmann_relaxation(4, num_units=5)
    potential = jax.jit(boltzmann_relaxation_potential(relaxation))
    far_point = jnp.full(4, 1e4)
    assert np.isfinite(float(potential(far_point)))
    assert np.all(np.isfinite(np.asarray(jax.jit(jax.grad(potential))(far_point))))
    # Reference value of log cosh by direct evaluation where it does not overflow.
    point = jnp.array([0.5, -1.0, 2.0, 0.0])
    arguments = np.asarray(point) @ relaxation.projection + relaxation.biases
    expected = 0.5 * float(point @ point) - np.sum(np.log(np.cosh(arguments)))
    assert float(potential(point)) == pytest.approx(expected, rel=1e-12)
