"""Checks of the targets on bundled data: the radon data and the radon model's potential."""

import jax
import numpy as np
import pytest
import scipy.stats
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.infer.util import init_to_uniform, potential_energy

from numpyro_extras.targets.data import load_radon, radon_model

# The potential is checked to 1e-10 relative, beyond float32.
jax.config.update("jax_enable_x64", True)


# ------------------------------------------------------------------------------------------------
# Radon
# ------------------------------------------------------------------------------------------------


def test_load_radon():
    data = load_radon()
    assert data["num_counties"] == 85
    for key in ["floor", "log_uranium", "county", "log_radon"]:
        assert data[key].shape == (919,)
    assert data["county"].min() == 0 and data["county"].max() == 84
    assert len(np.unique(data["county"])) == 85
    assert set(np.unique(data["floor"])) == {0.0, 1.0}
    # Log uranium is a county-level covariate.
    for county in range(85):
        assert np.ptp(data["log_uranium"][data["county"] == county]) == 0.0


def radon_initial_params(rng_key, data):
    """Unconstrained initial values as NumPyro's default ``init_to_uniform`` draws them (in one
    jitted call; ``initialize_model`` would do the same but compiles far more slowly)."""

    def initialize(rng_key):
        seeded_model = handlers.seed(radon_model, rng_key)
        model_trace = handlers.trace(
            handlers.substitute(seeded_model, substitute_fn=init_to_uniform)
        ).get_trace(**data)
        return {
            name: biject_to(site["fn"].support).inv(site["value"])
            for name, site in model_trace.items()
            if site["type"] == "sample" and not site["is_observed"]
        }

    return jax.jit(initialize)(rng_key)


def test_radon_model_dimension_and_potential():
    data = load_radon()
    params = radon_initial_params(jax.random.PRNGKey(0), data)
    flat_params, _ = ravel_pytree(params)
    assert flat_params.shape == (92,)
    potential, gradient = jax.jit(
        jax.value_and_grad(lambda params: potential_energy(radon_model, (), data, params))
    )(params)
    assert np.isfinite(float(potential))
    assert np.all(np.isfinite(ravel_pytree(gradient)[0]))

    # The potential equals the hand-written negative log joint in unconstrained coordinates
    # (scales sampled as their logs, with log-Jacobian log sigma).
    params = {name: np.asarray(value) for name, value in params.items()}
    sigma_alpha, sigma_beta, epsilon = (
        np.exp(params[name]) for name in ["sigma_alpha", "sigma_beta", "epsilon"]
    )
    standard_normal = scipy.stats.norm()
    half_cauchy = scipy.stats.halfcauchy(scale=2.5)
    alpha = params["mu_alpha"] + sigma_alpha * params["alpha_offset"]
    beta = params["mu_beta"] + sigma_beta * params["beta_offset"]
    predicted = alpha[data["county"]] + beta[0] * data["floor"] + beta[1] * data["log_uranium"]
    log_joint = (
        standard_normal.logpdf(params["mu_alpha"])
        + standard_normal.logpdf(params["mu_beta"])
        + sum(half_cauchy.logpdf(scale) + np.log(scale) for scale in [sigma_alpha, sigma_beta])
        + half_cauchy.logpdf(epsilon)
        + np.log(epsilon)
        + standard_normal.logpdf(params["alpha_offset"]).sum()
        + standard_normal.logpdf(params["beta_offset"]).sum()
        + scipy.stats.norm(predicted, epsilon).logpdf(data["log_radon"]).sum()
    )
    assert float(potential) == pytest.approx(-log_joint, rel=1e-10)


def test_statlog_logistic_regression_sets():
    from numpyro_extras.targets import (
        LOGISTIC_REGRESSION_DATASETS,
        load_german_credit,
        load_logistic_regression_data,
    )

    for name, (rows, predictors) in LOGISTIC_REGRESSION_DATASETS.items():
        features, labels = load_logistic_regression_data(name)
        assert features.shape == (rows, predictors + 1) and labels.shape == (rows,)
        np.testing.assert_array_equal(features[:, 0], 1.0)
        np.testing.assert_allclose(features[:, 1:].mean(0), 0.0, atol=1e-12)
        np.testing.assert_allclose(features[:, 1:].std(0), 1.0, atol=1e-12)
        assert set(np.unique(labels)) == {0.0, 1.0}
    np.testing.assert_array_equal(
        load_logistic_regression_data("german")[0], load_german_credit()[0]
    )
    with pytest.raises(ValueError, match="name must be one of"):
        load_logistic_regression_data("iris")
