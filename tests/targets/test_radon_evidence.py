"""The radon model's exact log Z: the closed-form conditional likelihood against a dense Gaussian
and against Monte Carlo through the model itself, and the quadrature against Monte Carlo over
the scales' priors on a small subset of the data."""

import jax
import numpy as np
import pytest
import scipy.stats
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.util import log_likelihood
from scipy.special import logsumexp

from numpyro_extras.targets import (
    load_radon,
    radon_conditional_log_likelihood,
    radon_log_marginal_likelihood,
    radon_model,
)

jax.config.update("jax_enable_x64", True)


def small_radon(num_counties=4):
    """The households of the first ``num_counties`` counties."""
    data = load_radon()
    keep = data["county"] < num_counties
    subset = {key: data[key][keep] for key in ("floor", "log_uranium", "county", "log_radon")}
    return {**subset, "num_counties": num_counties}


@pytest.mark.parametrize("scales", [(0.3, 0.2, 0.75), (1e-6, 5.0, 0.7), (2.0, 1e-5, 1.3)])
def test_conditional_likelihood_is_the_dense_gaussian(scales):
    data = load_radon()
    sigma_alpha, sigma_beta, epsilon = scales
    indicators = np.eye(data["num_counties"])[data["county"]]
    predictors = np.stack([data["floor"], data["log_uranium"]], 1)
    covariance = (
        indicators @ (1.0 + sigma_alpha**2 * np.eye(data["num_counties"])) @ indicators.T
        + predictors @ (1.0 + sigma_beta**2 * np.eye(2)) @ predictors.T
        + epsilon**2 * np.eye(len(data["log_radon"]))
    )
    dense = scipy.stats.multivariate_normal(cov=covariance).logpdf(data["log_radon"])
    value = radon_conditional_log_likelihood(
        **data, sigma_alpha=sigma_alpha, sigma_beta=sigma_beta, epsilon=epsilon
    )
    assert abs(float(value) - dense) < 1e-7 * abs(dense)


def test_conditional_likelihood_integrates_the_model():
    """Monte Carlo over the model's own prior on the offsets and means, scales held fixed."""
    data = small_radon()
    scales = {"sigma_alpha": 0.4, "sigma_beta": 0.3, "epsilon": 0.8}
    conditioned = handlers.condition(radon_model, scales)
    model_kwargs = {key: value for key, value in data.items() if key != "log_radon"}
    draws = Predictive(conditioned, num_samples=100_000)(jax.random.PRNGKey(0), **model_kwargs)
    draws.pop("log_radon")
    log_likelihoods = log_likelihood(conditioned, draws, **data)["log_radon"].sum(-1)
    log_likelihoods = np.asarray(log_likelihoods)
    estimate = logsumexp(log_likelihoods) - np.log(log_likelihoods.size)
    weights = np.exp(log_likelihoods - log_likelihoods.max())
    stderr = weights.std() / weights.mean() / np.sqrt(weights.size)
    exact = float(radon_conditional_log_likelihood(**data, **scales))
    assert stderr < 0.05
    assert abs(estimate - exact) < 4 * stderr


def test_quadrature_matches_monte_carlo_over_the_scale_priors():
    data = small_radon()
    rng = np.random.default_rng(0)
    scales = np.abs(2.5 * rng.standard_cauchy((1_600_000, 3)))
    log_likelihoods = radon_conditional_log_likelihood(
        **data, sigma_alpha=scales[:, 0], sigma_beta=scales[:, 1], epsilon=scales[:, 2]
    )
    estimate = logsumexp(log_likelihoods) - np.log(log_likelihoods.size)
    weights = np.exp(log_likelihoods - log_likelihoods.max())
    stderr = weights.std() / weights.mean() / np.sqrt(weights.size)
    exact = radon_log_marginal_likelihood(**data, spacing=(0.3, 0.3, 0.05), drop=25.0)
    assert stderr < 0.01
    assert abs(estimate - exact) < 4 * stderr
