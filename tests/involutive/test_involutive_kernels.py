"""nx.AiSampler as a NumPyro kernel: trained in init on a model, exact on a conjugate posterior,
the same draws under every chain method, a block of numpyro.infer.Gibbs, and clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, NUTS, Gibbs

import numpyro_extras as nx
from numpyro_extras.involutive.networks import InvolutionConfig, init_proposal

Y = np.array([1.2, 0.4, 2.1, 1.7, 0.9, 1.5])
PRIOR_SCALE, NOISE = 2.0, 1.0
# A small training: the kernel is exact for any network, so these tests need no good one.
QUICK = dict(
    epochs=12,
    seed_epochs=4,
    seed_chains=4,
    seed_warmup=200,
    seed_samples=200,
    batch_size=1024,
    discriminator_hidden=32,
    patience=0,
    start_acceptance=1.0,
)


def normal_model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, PRIOR_SCALE).expand([2]).to_event(1))
    numpyro.sample("y", dist.Normal(mu[0] + mu[1], NOISE), obs=y)


def _exact_moments():
    """mu ~ N(0, s^2 I), y_i ~ N(mu_1 + mu_2, n^2): Gaussian posterior."""
    precision = np.eye(2) / PRIOR_SCALE**2 + len(Y) / NOISE**2 * np.ones((2, 2))
    covariance = np.linalg.inv(precision)
    mean = covariance @ (np.ones(2) * Y.sum() / NOISE**2)
    return mean, covariance


def _run(kernel, method="vectorized", num_chains=4, num_samples=2000, init_params=None):
    mcmc = MCMC(
        kernel,
        num_warmup=200,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=method,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(3), Y, init_params=init_params)
    return mcmc


@pytest.fixture(scope="module")
def trained_kernel():
    kernel = nx.AiSampler(normal_model, train_kwargs=QUICK)
    return kernel, _run(kernel)


def test_trained_in_init_and_exact_on_a_gaussian_posterior(trained_kernel):
    kernel, mcmc = trained_kernel
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)["mu"])
    mean, covariance = _exact_moments()
    ess = np.asarray(effective_sample_size(draws))
    assert np.all(ess > 300), ess
    stderr = np.sqrt(np.diag(covariance) / ess)
    assert np.all(np.abs(draws.mean((0, 1)) - mean) < 4 * stderr)
    assert kernel.params.sites == (("mu", (2,)),)
    assert kernel.params.config.swap is True  # a Gaussian posterior: the swap start is chosen
    assert len(kernel.params.history.accept_rates) == QUICK["epochs"]
    # Trained once: a second run on the same data reuses the involution.
    params = kernel.params
    _run(kernel, num_samples=10)
    assert kernel.params is params


def test_same_draws_under_every_chain_method(trained_kernel):
    params = trained_kernel[0].params
    runs = {
        method: np.asarray(
            _run(nx.AiSampler(normal_model, params=params), method, 2, 100).get_samples()["mu"]
        )
        for method in ("sequential", "parallel", "vectorized")
    }
    # The same accept decisions; float32 network weights round differently when vmapped.
    np.testing.assert_allclose(runs["sequential"], runs["vectorized"], rtol=1e-6)
    np.testing.assert_allclose(runs["sequential"], runs["parallel"], rtol=1e-6)


COUPLING = 0.5


def _two_block_model(y):
    a = numpyro.sample("a", dist.Normal(0.0, PRIOR_SCALE))
    b = numpyro.sample("b", dist.Normal(0.0, PRIOR_SCALE))
    numpyro.sample("y_a", dist.Normal(a, NOISE), obs=y)
    numpyro.sample("y_b", dist.Normal(b, NOISE), obs=-y)
    numpyro.factor("coupling", COUPLING * a * b)


@pytest.mark.slow
def test_block_of_numpyro_gibbs_is_exact():
    """The involution is trained on the first conditional of ``a`` and stays exact on every
    other one as NUTS moves ``b``. The chains start near the posterior: Gibbs would otherwise
    start the block at a prior draw, far outside where the map was trained, and there every
    proposal is rejected."""
    # Exactness needs no training: a two-epoch one keeps the test quick.
    tiny = dict(QUICK, epochs=2, seed_epochs=1, seed_chains=2, seed_warmup=100, seed_samples=100)
    kernel = Gibbs(
        [
            (nx.AiSampler(_two_block_model, train_kwargs=tiny), ["a"]),
            (NUTS(_two_block_model), None),
        ]
    )
    start = {"a": jnp.array([1.0, 1.5]), "b": jnp.array([-1.0, -1.5])}
    mcmc = _run(kernel, method="sequential", num_chains=2, num_samples=2000, init_params=start)
    samples = mcmc.get_samples(group_by_chain=True)
    draws = np.stack([np.asarray(samples["a"]), np.asarray(samples["b"])], -1)
    precision = (1 / PRIOR_SCALE**2 + len(Y) / NOISE**2) * np.eye(2)
    precision[0, 1] = precision[1, 0] = -COUPLING
    covariance = np.linalg.inv(precision)
    mean = covariance @ np.array([Y.sum(), -Y.sum()]) / NOISE**2
    ess = np.asarray(effective_sample_size(draws))
    assert np.all(ess > 300), ess
    stderr = np.sqrt(np.diag(covariance) / ess)
    assert np.all(np.abs(draws.mean((0, 1)) - mean) < 4 * stderr), (draws.mean((0, 1)), mean)


def test_bad_input_gets_a_clear_error():
    def discrete_model(y):
        numpyro.sample("k", dist.Bernoulli(0.5))

    with pytest.raises(ValueError, match="discrete latent sites"):
        _run(nx.AiSampler(discrete_model, train_kwargs=QUICK))
    with pytest.raises(ValueError, match="give `params=`"):
        nx.AiSampler(potential_fn=lambda x: jnp.sum(x**2))
    with pytest.raises(TypeError, match="InvolutiveProposal"):
        nx.AiSampler(normal_model, params={"not": "a proposal"})
    wrong = init_proposal(jax.random.PRNGKey(0), InvolutionConfig(dimension=3))
    with pytest.raises(ValueError, match="trained for other latent sites"):
        _run(nx.AiSampler(normal_model, params=wrong))
    with pytest.raises(TypeError, match="unknown settings"):
        nx.train_ai_sampler(jax.random.PRNGKey(0), normal_model, (Y,), epoch=5)
    with pytest.raises(TypeError, match="epochs must be a positive integer"):
        nx.train_ai_sampler(jax.random.PRNGKey(0), normal_model, (Y,), epochs=5.5)
    with pytest.raises(ValueError, match="seed_epochs"):
        nx.train_ai_sampler(jax.random.PRNGKey(0), normal_model, (Y,), epochs=5, seed_epochs=6)
    with pytest.raises(ValueError, match="2-dimensional flat points"):
        nx.train_ai_sampler(
            jax.random.PRNGKey(0), normal_model, (Y,), init_samples=np.zeros((10, 3))
        )
