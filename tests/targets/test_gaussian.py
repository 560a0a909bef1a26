"""Exact checks of the Gaussian targets: normalizers, potentials and mode weights."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from exact_checks import log_trapezoid, model_potential

from numpyro_extras.targets.gaussian import (
    BIMODAL_LOCS,
    BIMODAL_SCALES,
    BIMODAL_WEIGHTS,
    bimodal_mode_weights,
    bimodal_model,
    centred_funnel_log_evidence,
    centred_funnel_model,
    gaussian_model,
    linear_regression_log_evidence,
    linear_regression_model,
    make_linear_regression_data,
)

# Quadrature checks to 1e-6 and beyond need double precision.
jax.config.update("jax_enable_x64", True)


# ------------------------------------------------------------------------------------------------
# Bimodal target
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("log_scale", [0.0, 2.5, -3.0])
def test_bimodal_log_z_by_quadrature(log_scale):
    potential_fn = model_potential(bimodal_model, log_scale=log_scale)
    grid, spacing = np.linspace(-40.0, 50.0, 90_001, retstep=True)
    potentials = np.asarray(jax.vmap(lambda x: potential_fn({"x": x}))(jnp.asarray(grid)))
    assert log_trapezoid(-potentials, spacing) == pytest.approx(log_scale, abs=1e-6)


def test_bimodal_potential_is_mixture():
    potential_fn = model_potential(bimodal_model, log_scale=1.0)
    points = np.array([-9.0, -8.0, 0.0, 3.0, 8.0, 12.0])
    mixture_density = sum(
        weight * scipy.stats.norm(loc, scale).pdf(points)
        for weight, loc, scale in zip(BIMODAL_WEIGHTS, BIMODAL_LOCS, BIMODAL_SCALES, strict=True)
    )
    potentials = np.array([potential_fn({"x": jnp.asarray(point)}) for point in points])
    np.testing.assert_allclose(potentials, -np.log(mixture_density) - 1.0, rtol=1e-12)


def test_bimodal_mode_weights():
    rng = np.random.default_rng(0)
    num_draws = 200_000
    component = rng.choice(2, size=num_draws, p=BIMODAL_WEIGHTS)
    draws = rng.normal(np.take(BIMODAL_LOCS, component), np.take(BIMODAL_SCALES, component))
    fractions = np.asarray(bimodal_mode_weights(draws.reshape(4, -1)))
    standard_error = math.sqrt(0.6 * 0.4 / num_draws)
    np.testing.assert_allclose(fractions, BIMODAL_WEIGHTS, atol=5 * standard_error)
    assert fractions.sum() == pytest.approx(1.0)

    # Weighted: draws from N(0, 10^2) importance-weighted to the target recover the mode masses.
    proposal_draws = rng.normal(0.0, 10.0, size=num_draws)
    target_density = sum(
        weight * scipy.stats.norm(loc, scale).pdf(proposal_draws)
        for weight, loc, scale in zip(BIMODAL_WEIGHTS, BIMODAL_LOCS, BIMODAL_SCALES, strict=True)
    )
    importance_weights = target_density / scipy.stats.norm(0.0, 10.0).pdf(proposal_draws)
    weighted_fractions = np.asarray(bimodal_mode_weights(proposal_draws, importance_weights))
    np.testing.assert_allclose(weighted_fractions, BIMODAL_WEIGHTS, atol=0.01)

    np.testing.assert_allclose(
        bimodal_mode_weights(np.array([-1.0, 0.0, 2.0]), np.array([3.0, 1.0, 0.0])), [0.75, 0.25]
    )


# ------------------------------------------------------------------------------------------------
# Gaussian target
# ------------------------------------------------------------------------------------------------


def test_gaussian_potential_and_log_z():
    loc = np.array([1.0, -2.0])
    scale_tril = np.array([[1.5, 0.0], [0.7, 0.4]])
    log_scale = -1.25
    potential_fn = model_potential(
        gaussian_model, jnp.asarray(loc), jnp.asarray(scale_tril), log_scale=log_scale
    )
    covariance = scale_tril @ scale_tril.T
    point = np.array([0.3, -1.1])
    expected = -scipy.stats.multivariate_normal(loc, covariance).logpdf(point) - log_scale
    assert float(potential_fn({"x": jnp.asarray(point)})) == pytest.approx(expected, rel=1e-12)

    grid, spacing = np.linspace(-12.0, 12.0, 481, retstep=True)
    mesh = np.stack(np.meshgrid(grid + loc[0], grid + loc[1], indexing="ij"), axis=-1)
    potentials = jax.vmap(jax.vmap(lambda x: potential_fn({"x": x})))(jnp.asarray(mesh))
    assert log_trapezoid(-np.asarray(potentials), spacing) == pytest.approx(log_scale, abs=1e-8)


# ------------------------------------------------------------------------------------------------
# Bayesian linear regression
# ------------------------------------------------------------------------------------------------


def test_make_linear_regression_data():
    features, targets = make_linear_regression_data(3, num_data=7, num_features=4)
    assert features.shape == (7, 4) and targets.shape == (7,)
    assert features.dtype == np.float64 and targets.dtype == np.float64
    features_again, targets_again = make_linear_regression_data(3, num_data=7, num_features=4)
    np.testing.assert_array_equal(features, features_again)
    np.testing.assert_array_equal(targets, targets_again)


@pytest.mark.parametrize("prior_scale, noise_scale", [(1.0, 1.0), (2.0, 0.3)])
def test_linear_regression_log_evidence_by_bayes_rule(prior_scale, noise_scale):
    # For a Gaussian model, log p(y) = log p(y | w) + log p(w) - log p(w | y) at ANY w, with the
    # exact Gaussian posterior; -potential(w) = log p(y | w) + log p(w) also tests the model.
    features, targets = make_linear_regression_data(
        1, num_data=30, num_features=4, prior_scale=prior_scale, noise_scale=noise_scale
    )
    log_evidence = linear_regression_log_evidence(features, targets, prior_scale, noise_scale)
    potential_fn = model_potential(
        linear_regression_model, features, targets, prior_scale, noise_scale
    )
    posterior_precision = features.T @ features / noise_scale**2 + np.eye(4) / prior_scale**2
    posterior_covariance = np.linalg.inv(posterior_precision)
    posterior_mean = posterior_covariance @ features.T @ targets / noise_scale**2
    posterior = scipy.stats.multivariate_normal(posterior_mean, posterior_covariance)
    for weights in [posterior_mean, np.zeros(4), np.array([1.0, -2.0, 0.5, 3.0])]:
        log_joint = -float(potential_fn({"w": jnp.asarray(weights)}))
        assert log_joint - posterior.logpdf(weights) == pytest.approx(log_evidence, abs=1e-9)


def test_linear_regression_log_evidence_by_quadrature():
    features, targets = make_linear_regression_data(2, num_data=20, num_features=1)
    prior_scale, noise_scale = 1.5, 0.8
    potential_fn = model_potential(
        linear_regression_model, features, targets, prior_scale, noise_scale
    )
    grid, spacing = np.linspace(-10.0, 10.0, 20_001, retstep=True)
    potentials = jax.vmap(lambda w: potential_fn({"w": w}))(jnp.asarray(grid)[:, None])
    log_evidence = linear_regression_log_evidence(features, targets, prior_scale, noise_scale)
    assert log_trapezoid(-np.asarray(potentials), spacing) == pytest.approx(log_evidence, abs=1e-8)


# ------------------------------------------------------------------------------------------------
# Centred funnel
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("v", [-6.0, 0.0, 2.5])
def test_centred_funnel_effects_integrate_out_in_closed_form(v):
    """At fixed v, the model's density integrated over one effect x is
    N(v; 0, 3^2) N(y; 0, e^v + 1), the integrand that centred_funnel_log_evidence integrates."""
    data = jnp.array([0.8])
    potential_fn = model_potential(centred_funnel_model, data)
    scale = math.exp(v / 2) / math.sqrt(1 + math.exp(v))  # the posterior sd of x at this v
    grid, spacing = np.linspace(-12 * scale, 12 * scale, 20_001, retstep=True)
    potentials = jax.vmap(lambda x: potential_fn({"v": jnp.asarray(v), "x": x[None]}))(
        jnp.asarray(grid)
    )
    expected = scipy.stats.norm.logpdf(v, 0.0, 3.0) + scipy.stats.norm.logpdf(
        0.8, 0.0, math.sqrt(math.exp(v) + 1.0)
    )
    assert log_trapezoid(-np.asarray(potentials), spacing) == pytest.approx(expected, abs=1e-8)


def test_centred_funnel_log_evidence_by_quadrature_over_v():
    data = np.array([0.3, -0.5, 0.1, 0.8, -0.2])
    grid, spacing = np.linspace(-40.0, 40.0, 400_001, retstep=True)
    log_integrand = scipy.stats.norm.logpdf(grid, 0.0, 3.0) + np.sum(
        scipy.stats.norm.logpdf(data[:, None], 0.0, np.sqrt(np.exp(grid) + 1.0)), axis=0
    )
    assert centred_funnel_log_evidence(data) == pytest.approx(
        log_trapezoid(log_integrand, spacing), abs=1e-9
    )
