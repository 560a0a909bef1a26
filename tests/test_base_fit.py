"""The base fit: importance-sampled log zeta and masses, and modes the first fits miss."""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

import numpyro_extras as nx
from numpyro_extras import targets
from numpyro_extras.multimodal_targets import gaussian_mixture_target
from numpyro_extras.tempering import base as base_module

jax.config.update("jax_enable_x64", True)


def test_duplicate_fits_share_their_mode_instead_of_counting_it_twice():
    """Five identical fits equal to the target: log zeta is log Z, each fit gets a fifth of
    the mass (a logsumexp of their ELBOs would give log Z + log 5)."""
    dimension, log_z = 3, 1.5
    loc = np.array([1.0, -2.0, 0.5])
    scale_tril = np.array([[1.0, 0.0, 0.0], [0.3, 0.8, 0.0], [-0.2, 0.1, 1.5]])
    precision = scipy.linalg.cho_solve((scale_tril, True), np.eye(dimension))
    normalizer = np.sum(np.log(np.diag(scale_tril))) + 0.5 * dimension * np.log(2 * np.pi)

    def potential(x):
        centred = x - loc
        return 0.5 * centred @ precision @ centred + normalizer - log_z

    draws_per_fit = 64
    sampler = base_module._mixture_importance_sampler(potential, dimension, draws_per_fit)
    num_fits = 6
    locs = np.tile(loc, (num_fits, 1))
    # a widened proposal keeps the weights bounded but not constant
    trils = np.tile(scale_tril / base_module._PROPOSAL_WIDENING, (num_fits, 1, 1))
    in_use = np.array([True] * 5 + [False])
    estimate = base_module._mixture_estimate(
        sampler, locs, trils, in_use, jax.random.PRNGKey(0), draws_per_fit
    )
    assert abs(estimate.log_zeta - log_z) < 1e-10
    np.testing.assert_allclose(estimate.masses, [0.2] * 5 + [0.0], atol=1e-12)


def test_log_zeta_of_a_unimodal_target_from_many_converging_starts():
    """Every start converges to the one mode; the near-duplicate fits must not inflate log zeta."""
    loc = jnp.array([1.0, -2.0, 0.5, 3.0])
    scale_tril = jnp.diag(jnp.array([1.0, 0.5, 2.0, 0.7]))
    base = nx.fit_base(
        jax.random.PRNGKey(1),
        targets.gaussian_model,
        (loc, scale_tril, 1.5),
        num_starts=8,
        num_steps=1000,
        bootstrap_rounds=0,
        progress_bar=False,
    )
    assert abs(float(base.log_zeta) - 1.5) < 0.03
    np.testing.assert_allclose(base.loc, loc, atol=0.05)
    np.testing.assert_allclose(np.diagonal(base.covariance), np.diagonal(scale_tril) ** 2, rtol=0.1)


def test_default_fit_covers_both_modes_of_a_mixture_and_is_silent(capfd):
    """The minor, narrower mode is found, its mass estimated, and the moment-matched base
    spans both modes; ``progress_bar=False`` silences every stage, bootstrap runs included."""
    target = gaussian_mixture_target(0, 4)
    base = nx.fit_base(jax.random.PRNGKey(0), target.model, target.model_args, progress_bar=False)
    assert capfd.readouterr().err == ""
    assert abs(float(base.log_zeta) - target.log_z) < 0.05
    weights, locs = target.info["weights"], target.info["locs"]
    np.testing.assert_allclose(base.loc, weights @ locs, atol=0.3)
    # each mode centre lies within the base's bulk
    whitened = scipy.linalg.solve_triangular(
        np.asarray(base.scale_tril), (locs - np.asarray(base.loc)).T, lower=True
    )
    assert np.all(np.linalg.norm(whitened, axis=0) < 2.5)
    # the variance along the line through the modes is the mixture's
    direction = (locs[1] - locs[0]) / np.linalg.norm(locs[1] - locs[0])
    between = weights[0] * weights[1] * np.linalg.norm(locs[1] - locs[0]) ** 2
    along = direction @ np.asarray(base.covariance) @ direction
    assert 0.8 * between < along < 1.3 * (between + 1.0)


def test_gaussian_method_is_one_fit_without_bootstrap():
    """``method="gaussian"`` (what nx.ais uses): one VI fit, log zeta its ELBO, a lower bound."""
    base = nx.fit_base(
        jax.random.PRNGKey(0),
        targets.bimodal_model,
        (2.0,),
        method="gaussian",
        progress_bar=False,
    )
    assert float(base.log_zeta) < 2.0
    assert float(base.covariance[0, 0]) < 5.0
