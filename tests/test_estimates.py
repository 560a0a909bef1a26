"""nx.to_inference_data and nx.log_marginal_likelihood on runs of every kind of kernel."""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from arviz_checks import loo_elpd
from numpyro.infer import MCMC, NUTS

import numpyro_extras as nx


def _chain_model():
    with numpyro.plate("units", 5):
        x = numpyro.sample("x", dist.Bernoulli(0.5))
    numpyro.factor("coupling", 0.8 * jnp.sum(x[:-1] * x[1:]) - 0.3 * jnp.sum(x))


def _regression(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def _run(kernel, *args):
    mcmc = MCMC(kernel, num_warmup=50, num_samples=100, num_chains=2, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *args)
    return mcmc


@pytest.mark.parametrize("kernel_class", [nx.ACS, nx.DMALA])
def test_inference_data_of_a_discrete_kernel(kernel_class):
    mcmc = _run(kernel_class(_chain_model))
    idata = nx.to_inference_data(mcmc)
    assert idata.attrs["sampler"] == kernel_class.__name__
    assert "log_marginal_likelihood" not in idata.attrs
    assert idata.posterior["x"].shape == (2, 100, 5)
    np.testing.assert_array_equal(
        idata.posterior["x"].values, np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    )
    # ArviZ names the acceptance probability acceptance_rate.
    assert "acceptance_rate" in idata.sample_stats
    with pytest.raises(TypeError, match="gives no log Z"):
        nx.log_marginal_likelihood(mcmc)


@pytest.mark.slow
def test_inference_data_of_nuts_and_of_the_ai_sampler_support_loo():
    y = jnp.array([0.3, -0.5, 1.2, 0.8])
    for kernel in (NUTS(_regression), nx.AiSampler(_regression)):
        mcmc = _run(kernel, y)
        idata = nx.to_inference_data(mcmc)
        assert idata.attrs["sampler"] == type(kernel).__name__
        assert "log_marginal_likelihood" not in idata.attrs
        assert idata.posterior["mu"].shape == (2, 100)
        assert idata.log_likelihood["y"].shape == (2, 100, 4)
        assert np.isfinite(loo_elpd(az.loo(idata)))


def test_inference_data_of_a_potential_fn_kernel_with_named_variables():
    variables = {
        "a": nx.DiscreteVariable(kind="binary", shape=(3,), num_values=2),
        "b": nx.DiscreteVariable(kind="ordinal", shape=(), num_values=4),
    }

    def potential_fn(values):
        return -(0.5 * jnp.sum(values["a"]) - 0.2 * values["b"])

    mcmc = _run(nx.ACS(potential_fn=potential_fn, variables=variables))
    idata = nx.to_inference_data(mcmc)
    assert idata.posterior["a"].shape == (2, 100, 3)
    assert idata.posterior["b"].shape == (2, 100)
