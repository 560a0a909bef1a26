"""Posterior draws from a tempering run: weighted resampling and the ArviZ export."""

import arviz as az
import jax
import numpy as np
import pytest

import numpyro_extras as nx


def test_posterior_samples_are_the_target(bimodal_run):
    draws = nx.posterior_samples(bimodal_run, jax.random.PRNGKey(0), num_samples=20_000)
    assert set(draws) == {"x"} and draws["x"].shape == (20_000,)
    # mode masses 0.6 / 0.4; within each mode the target's mean and scale
    x = draws["x"]
    assert abs(np.mean(x < 0) - 0.6) < 0.05
    assert abs(np.mean(x[x < 0]) + 8) < 0.2 and abs(np.std(x[x < 0]) - 1) < 0.15
    assert abs(np.mean(x[x >= 0]) - 8) < 0.4 and abs(np.std(x[x >= 0]) - 2) < 0.3


@pytest.mark.parametrize("num_samples", [-1, 0, 2.5])
def test_a_bad_number_of_posterior_samples_is_named(bimodal_run, num_samples):
    with pytest.raises((TypeError, ValueError), match="num_samples must be a positive integer"):
        nx.posterior_samples(bimodal_run, jax.random.PRNGKey(0), num_samples=num_samples)


def test_inference_data(bimodal_run, bimodal_log_z):
    idata = nx.to_inference_data(bimodal_run, jax.random.PRNGKey(0))
    assert idata.posterior["x"].shape == (80, 1000)
    for field in ("beta", "delta", "log_weight", "log_base_weight", "diverging"):
        assert idata.sample_stats[field].shape == (80, 1000)
    np.testing.assert_allclose(
        np.exp(idata.sample_stats["log_weight"].values).sum(axis=1), 1.0, rtol=1e-9
    )
    assert abs(float((idata.posterior["x"] < 0).mean()) - 0.6) < 0.05
    assert abs(idata.attrs["log_marginal_likelihood"] - bimodal_log_z) < 0.1
    summary = az.summary(idata, var_names=["x"])
    assert np.isfinite(summary.loc["x", "ess_bulk"])
