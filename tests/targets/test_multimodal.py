"""Exact answers of the multimodal targets against quadrature, enumeration and exact sampling."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats
from numpyro.infer.util import potential_energy

from numpyro_extras.targets.multimodal import (
    boltzmann_orthant_weights,
    boltzmann_target,
    gaussian_mixture_target,
    mode_weight_error,
    sign_product_target,
)

jax.config.update("jax_enable_x64", True)


def flat_potential(target):
    """NumPyro's potential of the target's model, as a function of its one site's value."""
    return jax.jit(
        jax.vmap(
            lambda value: potential_energy(
                target.model, target.model_args, target.model_kwargs, {target.site: value}
            )
        )
    )


def log_trapezoid(log_values, spacing):
    peak = np.max(log_values)
    values = np.exp(log_values - peak)
    return peak + math.log(np.sum(values) - 0.5 * (values[0] + values[-1])) + math.log(spacing)


def sample_mixture(target, num_draws, rng):
    info = target.info
    components = rng.choice(2, num_draws, p=info["weights"])
    noise = rng.standard_normal((num_draws, info["locs"].shape[1]))
    draws = info["locs"][components] + np.einsum(
        "nij,nj->ni", info["scale_trils"][components], noise
    )
    return draws, components


@pytest.mark.parametrize("seed, dimension", [(0, 6), (3, 20)])
def test_mixture_prior_times_likelihood_is_z_times_the_mixture(seed, dimension):
    """``-phi(x) - log p(x) = log Z`` at every x: the closed form holds pointwise."""
    target = gaussian_mixture_target(seed, dimension)
    assert target.mode_weights[1] < target.mode_weights[0]
    assert 0.25 <= target.mode_weights[1] <= 0.35
    info = target.info
    # the minor component is the narrower one
    major, minor = (np.linalg.eigvalsh(tril @ tril.T) for tril in info["scale_trils"])
    assert np.sqrt(minor.max()) < np.sqrt(major.min())
    draws, _ = sample_mixture(target, 2000, np.random.default_rng(1))
    draws = np.concatenate(
        [draws, draws + 3.0 * np.random.default_rng(2).standard_normal(draws.shape)]
    )
    log_mixture = scipy.special.logsumexp(
        [
            np.log(weight) + scipy.stats.multivariate_normal.logpdf(draws, loc, tril @ tril.T)
            for weight, loc, tril in zip(
                info["weights"], info["locs"], info["scale_trils"], strict=True
            )
        ],
        axis=0,
    )
    log_ratio = -np.asarray(flat_potential(target)(jnp.asarray(draws))) - log_mixture
    np.testing.assert_allclose(log_ratio, target.log_z, atol=1e-8)


def test_mixture_log_z_by_quadrature_in_two_dimensions():
    target = gaussian_mixture_target(5, 2, separation=6.0, width_ratio=2.0)
    axis = np.linspace(-14.0, 14.0, 1401)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    log_values = -np.asarray(flat_potential(target)(jnp.asarray(grid))).reshape(len(axis), -1)
    spacing = axis[1] - axis[0]
    log_z = log_trapezoid(np.array([log_trapezoid(row, spacing) for row in log_values]), spacing)
    assert abs(log_z - target.log_z) < 1e-6
    # mass of each label on the grid
    labels = target.mode_labels(grid).reshape(len(axis), -1)
    probabilities = np.exp(log_values - target.log_z) * spacing**2
    masses = [np.sum(probabilities[labels == label]) for label in (0, 1)]
    np.testing.assert_allclose(masses, target.mode_weights, atol=1e-4)


def test_mixture_labels_recover_the_component_of_exact_draws():
    target = gaussian_mixture_target(7, 14)
    draws, components = sample_mixture(target, 50_000, np.random.default_rng(0))
    assert np.mean(target.mode_labels({"x": draws}) != components) < 1e-4
    estimate = target.empirical_mode_weights(draws)
    assert mode_weight_error(estimate, target.mode_weights) < 4 * math.sqrt(0.25 / 50_000)


@pytest.mark.parametrize("seed, num_parameters", [(0, 4), (1, 6)])
def test_sign_product_log_z_and_mode_weights_by_grid_quadrature(seed, num_parameters):
    """One dense trapezoid rule per parameter on NumPyro's own potential (the posterior
    factorises): ``log Z = sum_i log int exp(-phi(theta e_i)) + (d - 1) phi(0)``."""
    target = sign_product_target(seed, num_parameters)
    potential = flat_potential(target)
    axis = np.linspace(-5.0, 5.0, 400_001)
    spacing = axis[1] - axis[0]
    origin_potential = float(potential(jnp.zeros((1, num_parameters)))[0])
    log_z = (num_parameters - 1) * origin_potential
    positive = []
    for index in range(num_parameters):
        points = np.zeros((len(axis), num_parameters))
        points[:, index] = axis
        log_values = -np.asarray(potential(jnp.asarray(points)))
        log_z += log_trapezoid(log_values, spacing)
        mass = np.exp(log_values - np.max(log_values))
        positive.append(np.sum(mass[axis > 0]) / np.sum(mass))
    assert abs(log_z - target.log_z) < 1e-6
    np.testing.assert_allclose(positive, target.info["positive_probability"], atol=1e-6)
    assert np.all(np.abs(np.asarray(positive) - 0.5) > 0.08)  # unequal weights
    assert target.num_modes == 2**num_parameters
    assert abs(np.sum(target.mode_weights) - 1.0) < 1e-12
    # the label of a point is its sign pattern
    point = np.where(np.arange(num_parameters) % 2 == 0, 2.0, -2.0)
    label = target.mode_labels(point[None])[0]
    assert label == sum(2**i for i in range(0, num_parameters, 2))


def test_sign_product_mode_weights_by_exact_sampling():
    """Mode weights against independent exact draws (inverse CDF per parameter on a grid)."""
    target = sign_product_target(2, 5)
    potential = flat_potential(target)
    rng = np.random.default_rng(0)
    axis = np.linspace(-5.0, 5.0, 100_001)
    num_draws = 40_000
    draws = np.empty((num_draws, 5))
    for index in range(5):
        points = np.zeros((len(axis), 5))
        points[:, index] = axis
        log_values = -np.asarray(potential(jnp.asarray(points)))
        cdf = np.cumsum(np.exp(log_values - np.max(log_values)))
        draws[:, index] = np.interp(rng.uniform(0, cdf[-1], num_draws), cdf, axis)
    estimate = target.empirical_mode_weights({"theta": draws})
    sd = np.sqrt(target.mode_weights * (1 - target.mode_weights) / num_draws)
    assert np.all(np.abs(estimate - target.mode_weights) < 4.5 * sd + 1e-4)


def test_boltzmann_orthant_weights_by_exact_sampling():
    target = boltzmann_target(0)
    relaxation = target.info["relaxation"]
    assert target.log_z == relaxation.log_z
    np.testing.assert_allclose(
        target.info["directions"].T @ target.info["directions"], np.eye(2), atol=1e-12
    )
    # exact sampling: s from the enumerated machine, then x | s ~ N(Q^T s, I)
    num_units = len(relaxation.biases)
    index = np.arange(2**num_units)
    states = 2.0 * ((index[:, None] >> np.arange(num_units)) & 1) - 1.0
    log_weights = (
        0.5 * np.sum((states @ relaxation.weights) * states, 1) + states @ relaxation.biases
    )
    probabilities = np.exp(log_weights - scipy.special.logsumexp(log_weights))
    rng = np.random.default_rng(3)
    num_draws = 100_000
    chosen = states[rng.choice(len(states), num_draws, p=probabilities)]
    draws = chosen @ relaxation.projection.T + rng.standard_normal(
        (num_draws, relaxation.projection.shape[0])
    )
    estimate = target.empirical_mode_weights(draws)
    sd = np.sqrt(target.mode_weights * (1 - target.mode_weights) / num_draws)
    assert np.all(np.abs(estimate - target.mode_weights) < 4.5 * sd)
    # not a trivial split: the mirror-mode cells carry different masses
    assert target.mode_weights.min() > 0.05 and target.mode_weights.max() < 0.6


def test_orthant_weights_of_one_direction_sum_the_finer_cells():
    target = boltzmann_target(1, num_directions=3)
    relaxation, directions = target.info["relaxation"], target.info["directions"]
    coarse = boltzmann_orthant_weights(relaxation, directions[:, :1])
    fine = target.mode_weights
    np.testing.assert_allclose(coarse[1], np.sum(fine[1::2]), atol=1e-12)
    assert abs(np.sum(fine) - 1.0) < 1e-12
