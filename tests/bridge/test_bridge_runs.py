"""Bridge sampling of finished runs: NUTS on a conjugate regression (closed form) and on a model
with a constrained site (quadrature), chains stuck in one mode or split between modes, draws that
miss mass the prior reaches, and what it refuses."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS, init_to_value
from scipy import integrate, stats

import numpyro_extras as nx
from numpyro_extras.targets import FUNNEL_DATA, centred_funnel_model

NUM_FEATURES = 3
PRIOR_SD = 2.0


def regression(features, labels):
    beta = numpyro.sample("beta", dist.Normal(0.0, PRIOR_SD).expand([NUM_FEATURES]).to_event(1))
    numpyro.sample("labels", dist.Normal(features @ beta, 1.0), obs=labels)


def regression_data():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(50, NUM_FEATURES))
    return features, features @ np.array([1.0, -0.5, 0.3]) + rng.normal(size=50)


def regression_log_z(features, labels):
    covariance = np.eye(len(labels)) + PRIOR_SD**2 * features @ features.T
    return stats.multivariate_normal(np.zeros(len(labels)), covariance).logpdf(labels)


def scale_model(data):
    scale = numpyro.sample("scale", dist.HalfCauchy(1.0))
    numpyro.sample("data", dist.Normal(0.0, scale), obs=data)


SCALE_DATA = np.array([0.8, -1.9, 2.4, 0.3, -1.1])


def scale_model_log_z():
    """log of the integral over the scale, on its constrained space, by quadrature."""

    def joint(scale):
        return stats.halfcauchy.pdf(scale) * np.prod(stats.norm.pdf(SCALE_DATA, 0.0, scale))

    value, _ = integrate.quad(joint, 0.0, np.inf, epsabs=0, epsrel=1e-12, limit=500)
    return math.log(value)


def two_mode(data):
    x = numpyro.sample("x", dist.Normal(1.0, 3.0))
    numpyro.sample("data", dist.Normal(x**2, 1.0), obs=data)


TWO_MODE_DATA = jnp.array([8.6, 9.4, 9.1])


def nuts_run(model, *args, init_strategy=None, seed=0, init_params=None):
    kernel = NUTS(model) if init_strategy is None else NUTS(model, init_strategy=init_strategy)
    mcmc = MCMC(
        kernel,
        num_warmup=500,
        num_samples=1000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed), *args, init_params=init_params)
    return mcmc


@pytest.fixture(scope="module")
def regression_run():
    return nuts_run(regression, *regression_data())


def test_nuts_run_against_the_closed_form(regression_run):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evidence = nx.bridge_sampling(regression_run)
    exact = regression_log_z(*regression_data())
    assert 0 < evidence.stderr < 0.01
    assert abs(evidence.log_z - exact) < 4 * evidence.stderr
    assert evidence.problems == ()


def test_constrained_site_against_quadrature():
    evidence = nx.bridge_sampling(nuts_run(scale_model, SCALE_DATA), warn=False)
    assert 0 < evidence.stderr < 0.02
    assert abs(evidence.log_z - scale_model_log_z()) < 4 * evidence.stderr
    assert evidence.problems == ()


def outlier_model(data):
    """Each point is noise N(0, 1) with probability 0.7, else N(mu, 1): the indicator is a
    discrete site that NUTS, and bridge sampling, sum out."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 3.0))
    with numpyro.plate("points", data.shape[0]):
        signal = numpyro.sample("signal", dist.Bernoulli(0.3), infer={"enumerate": "parallel"})
        numpyro.sample("data", dist.Normal(jnp.where(signal, mu, 0.0), 1.0), obs=data)


OUTLIER_DATA = np.array([0.1, -0.4, 2.8, 3.3, 0.5, 3.1])


def outlier_model_log_z():
    def joint(mu):
        return stats.norm.pdf(mu, 0.0, 3.0) * np.prod(
            0.7 * stats.norm.pdf(OUTLIER_DATA, 0.0, 1.0)
            + 0.3 * stats.norm.pdf(OUTLIER_DATA, mu, 1.0)
        )

    return math.log(integrate.quad(joint, -40, 40, epsabs=0, epsrel=1e-12, limit=500)[0])


def test_discrete_sites_are_summed_out():
    evidence = nx.bridge_sampling(nuts_run(outlier_model, jnp.asarray(OUTLIER_DATA)), warn=False)
    assert 0 < evidence.stderr < 0.02
    assert abs(evidence.log_z - outlier_model_log_z()) < 4 * evidence.stderr
    assert evidence.problems == ()


def test_chains_stuck_in_one_mode_warn():
    mcmc = nuts_run(two_mode, TWO_MODE_DATA, init_strategy=init_to_value(values={"x": 3.0}))
    assert np.all(np.asarray(mcmc.get_samples()["x"]) > 0)
    with pytest.warns(UserWarning, match="mode that the draws never visited.*x = -3"):
        evidence = nx.bridge_sampling(mcmc)
    assert any("never visited" in problem for problem in evidence.problems)


def test_chains_in_different_modes_warn_by_their_rhat():
    """Three chains in one mode and one in the other: both modes are visited, but the pooled
    draws hold them 3 : 1 where the posterior holds them about evenly."""
    mcmc = nuts_run(two_mode, TWO_MODE_DATA, init_params={"x": jnp.array([3.0] * 3 + [-3.0])})
    first_draws = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])[:, 0]
    assert np.all(np.sign(first_draws) == [1, 1, 1, -1])
    with pytest.warns(UserWarning, match="split R-hat of 'x'"):
        evidence = nx.bridge_sampling(mcmc)
    assert any("split R-hat of 'x'" in problem for problem in evidence.problems)


BROAD_NOISE = 1.5
BROAD_DATA = 9.0


def broad_two_mode(data):
    """Modes at x = +-3 (sd 0.25) behind a barrier of 18 nats, holding about a tenth of the
    prior's draws."""
    x = numpyro.sample("x", dist.Normal(0.0, 3.0))
    numpyro.sample("data", dist.Normal(x**2, BROAD_NOISE), obs=data)


def broad_two_mode_log_z():
    def joint(x):
        return stats.norm.pdf(x, 0.0, 3.0) * stats.norm.pdf(BROAD_DATA, x**2, BROAD_NOISE)

    value, _ = integrate.quad(joint, -20.0, 20.0, points=[-3.0, 3.0], epsrel=1e-12, limit=200)
    return math.log(value)


def test_draws_that_miss_mass_the_prior_reaches_raise_the_stderr_to_the_gap():
    """Every chain stays in the mode at x = 3: the bridge counts half the mass, and importance
    sampling from the prior, whose draws reach both modes, shows the gap."""
    mcmc = nuts_run(broad_two_mode, BROAD_DATA, init_strategy=init_to_value(values={"x": 3.0}))
    assert np.all(np.asarray(mcmc.get_samples()["x"]) > 0)
    with pytest.warns(UserWarning, match="importance sampling from the prior"):
        evidence = nx.bridge_sampling(mcmc)
    exact = broad_two_mode_log_z()
    assert evidence.log_z < exact - 0.5  # half the mass missed: log 2 too low
    assert evidence.stderr >= exact - evidence.log_z - 0.1
    assert abs(evidence.log_z - exact) < 2 * evidence.stderr


def test_a_second_call_on_the_same_run_reuses_the_estimate():
    mcmc = nuts_run(scale_model, SCALE_DATA)
    first = nx.bridge_sampling(mcmc, warn=False)
    assert nx.bridge_sampling(mcmc, warn=False) is first
    assert nx.bridge_sampling(mcmc, warn=False, seed=1) is not first
    mcmc.run(jax.random.PRNGKey(5), SCALE_DATA)
    rerun = nx.bridge_sampling(mcmc, warn=False)
    assert rerun is not first and rerun.log_z != first.log_z


def test_compare_bridges_a_nuts_run(regression_run):
    table = nx.compare({"nuts": regression_run, "fixed": nx.Evidence(-80.0, 0.1)})
    exact = regression_log_z(*regression_data())
    assert table.loc["nuts", "log_z"] == pytest.approx(exact, abs=0.01)
    assert table.index[0] == "nuts"


def test_log_marginal_likelihood_of_nuts_points_to_bridge_sampling(regression_run):
    with pytest.raises(TypeError, match="nx.bridge_sampling"):
        nx.log_marginal_likelihood(regression_run)


def test_what_it_refuses():
    def potential_fn(x):
        return 0.5 * jnp.sum(x**2)

    mcmc = MCMC(NUTS(potential_fn=potential_fn), num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), init_params=jnp.zeros(2))
    with pytest.raises(TypeError, match="nx.bridge_evidence"):
        nx.bridge_sampling(mcmc)

    def discrete(data):
        flip = numpyro.sample("flip", dist.Bernoulli(0.5))
        numpyro.sample("data", dist.Normal(flip, 1.0), obs=data)

    mcmc = MCMC(nx.ACS(discrete), num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), jnp.array([0.3]))
    with pytest.raises(ValueError, match=r"every latent site of the model \(\['flip'\]\)"):
        nx.bridge_sampling(mcmc)

    with pytest.raises(ValueError, match="run the MCMC first"):
        nx.bridge_sampling(MCMC(NUTS(regression), num_warmup=10, num_samples=10))


def test_divergent_transitions_of_nuts_warn():
    """The data pull the centred funnel's variance into its neck, where NUTS diverges a few
    times in 6,000 transitions and under-samples: on about half the seeds the bridged evidence
    is 3-12 standard errors low while the chains agree (which seeds depends on the JAX
    release), and only the divergences say so. Any divergence is a problem of the estimate."""
    mcmc = nuts_run(centred_funnel_model, jnp.asarray(FUNNEL_DATA), seed=1)
    # Fewer than 1% of the transitions: NUTS's divergences count however few they are.
    assert 0 < np.sum(mcmc.get_extra_fields()["diverging"]) < 60
    with pytest.warns(UserWarning, match="divergent transitions") as caught:
        evidence = nx.bridge_sampling(mcmc)
    message = next(str(w.message) for w in caught if "divergent" in str(w.message))
    assert any(problem in message for problem in evidence.problems)
