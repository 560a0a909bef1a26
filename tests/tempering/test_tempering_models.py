"""NumPyro's own MCMC scenarios with the tempering kernels in place of NUTS: conjugate models with
closed-form posteriors, deterministic sites, masked likelihoods, improper priors (with a base),
and a support that depends on another latent. Posterior means from mcmc.get_samples() must be
within 4 Monte Carlo errors of the truth."""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS

import numpyro_extras as nx

SMALL_FIT = {"num_starts": 2, "num_steps": 500, "bootstrap_rounds": 0}


def _run(kernel, *args, num_samples=1000, seed=0):
    mcmc = MCMC(
        kernel,
        num_warmup=400,
        num_samples=num_samples,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed), *args)
    return mcmc


def _assert_mean(draws, truth):
    """Each coordinate's posterior mean within 4 ArviZ Monte Carlo errors of the truth."""
    draws = np.asarray(draws, dtype=np.float64)
    draws = draws.reshape(draws.shape[:2] + (-1,))
    truth = np.ravel(truth)
    for coordinate in range(draws.shape[-1]):
        stderr = float(az.mcse(draws[..., coordinate], method="mean"))
        assert 0 < stderr < 0.1
        assert abs(draws[..., coordinate].mean() - truth[coordinate]) < 4 * stderr


def beta_bernoulli(data):
    p = numpyro.sample("p", dist.Beta(1.0, 1.0).expand([2]).to_event(1))
    with numpyro.plate("data", data.shape[0]):
        numpyro.sample("obs", dist.Bernoulli(p).to_event(1), obs=data)


@pytest.mark.slow
def test_beta_bernoulli_with_plates():
    data = jnp.asarray(np.random.default_rng(0).binomial(1, [0.3, 0.7], size=(60, 2)))
    mcmc = _run(nx.JointContinuousTempering(beta_bernoulli, fit_base_kwargs=SMALL_FIT), data)
    successes = np.asarray(data).sum(0)
    _assert_mean(mcmc.get_samples(group_by_chain=True)["p"], (1 + successes) / (2 + 60))


def dirichlet_categorical(data):
    p = numpyro.sample("p", dist.Dirichlet(jnp.ones(3)))
    with numpyro.plate("data", data.shape[0]):
        numpyro.sample("obs", dist.Categorical(p), obs=data)


def test_dirichlet_categorical():
    data = jnp.asarray(np.random.default_rng(1).choice(3, size=50, p=[0.2, 0.3, 0.5]))
    kernel = nx.GibbsContinuousTempering(dirichlet_categorical, fit_base_kwargs=SMALL_FIT)
    mcmc = _run(kernel, data)
    counts = np.bincount(np.asarray(data), minlength=3)
    _assert_mean(mcmc.get_samples(group_by_chain=True)["p"], (1 + counts) / (3 + 50))


def deterministic_and_masked(y, observed_mask):
    a = numpyro.sample("a", dist.Normal(0.0, 1.0))
    b = numpyro.deterministic("b", 2.0 * a)
    with numpyro.handlers.mask(mask=observed_mask):
        numpyro.sample("obs", dist.Normal(b, 1.0), obs=y)


def test_deterministic_sites_and_masked_likelihood():
    """Only unmasked observations count; deterministic sites come with every posterior draw."""
    y = jnp.array([1.0, 2.0, 50.0])
    mask = jnp.array([True, True, False])
    kernel = nx.JointContinuousTempering(deterministic_and_masked, fit_base_kwargs=SMALL_FIT)
    mcmc = _run(kernel, y, mask)
    samples = mcmc.get_samples(group_by_chain=True)
    # a | y ~ N(2 (y1 + y2) / 9, 1 / 9): prior precision 1 plus 4 per unmasked observation
    _assert_mean(samples["a"], 2.0 * 3.0 / 9.0)
    np.testing.assert_allclose(samples["b"], 2.0 * samples["a"])


def improper_location(y):
    a = numpyro.sample("a", dist.ImproperUniform(dist.constraints.real, (), ()))
    numpyro.sample("obs", dist.Normal(a, 1.0), obs=y)


def test_improper_prior_with_a_given_base():
    base = nx.GaussianBase(jnp.zeros(1), 2.0 * jnp.eye(1), jnp.asarray(0.0))
    mcmc = _run(nx.GibbsContinuousTempering(improper_location, base=base), jnp.array(1.5))
    _assert_mean(mcmc.get_samples(group_by_chain=True)["a"], 1.5)
    # The posterior is proper, its marginal likelihood undefined: log Z is refused by name.
    with pytest.raises(ValueError, match=r"improper prior .* sites \['a'\]"):
        nx.log_marginal_likelihood(mcmc, warn=False)
    with pytest.raises(ValueError, match=r"nx.bridge_sampling .* sites \['a'\]"):
        nx.bridge_sampling(mcmc)


def dependent_support(y):
    upper = numpyro.sample("upper", dist.Exponential(0.5))
    loc = numpyro.sample("loc", dist.Uniform(0.0, upper))
    numpyro.sample("obs", dist.Normal(loc, 0.5), obs=y)


# The model plumbing and the base fit are shared by both kernels: one exercises them.
@pytest.mark.slow
@pytest.mark.parametrize("kernel_class", [nx.GibbsContinuousTempering])
def test_support_that_depends_on_another_latent(kernel_class):
    """loc ~ Uniform(0, upper): the base is fitted on the model's own unconstrained potential,
    so the support's dependence on `upper` is handled as NUTS handles it."""
    y = jnp.array([1.0, 1.2, 0.8])
    mcmc = _run(kernel_class(dependent_support, fit_base_kwargs=SMALL_FIT), y, num_samples=1500)
    nuts = _run(NUTS(dependent_support), y, num_samples=3000, seed=1)
    ours = mcmc.get_samples(group_by_chain=True)
    reference = nuts.get_samples(group_by_chain=True)
    for site in ("upper", "loc"):
        ours_draws, reference_draws = np.asarray(ours[site]), np.asarray(reference[site])
        stderr = np.hypot(az.mcse(ours_draws, method="mean"), az.mcse(reference_draws))
        assert abs(ours_draws.mean() - reference_draws.mean()) < 4 * stderr
