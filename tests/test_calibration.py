"""Calibration of the log Z error bars, a fast subset of benchmarks/coverage_benchmark.py: over
20 seeds with fixed keys, the exact value lies within 1.96 reported standard errors about as
often as a 95% interval promises, the errors scatter as the error bars say, and no seed is
far off without a warning."""

import warnings

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC
from scipy.stats import norm

import numpyro_extras as nx

pytestmark = pytest.mark.slow

NUM_SEEDS = 20


def _wide_prior(y=3.0):
    x = numpyro.sample("x", dist.Normal(0.0, 1e4))
    numpyro.sample("y", dist.Normal(x, 1e4), obs=y)


def _narrow_likelihood(y=0.5):
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(x, 1e-4), obs=y)


WIDE_PRIOR_LOG_Z = norm(0.0, np.sqrt(2.0) * 1e4).logpdf(3.0)
NARROW_LIKELIHOOD_LOG_Z = norm(0.0, np.sqrt(1.0 + 1e-8)).logpdf(0.5)


def _scores(estimate_fn, exact):
    """Per seed, error / stderr and whether the estimate came with a warning."""
    scores, warned = [], []
    for seed in range(NUM_SEEDS):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            evidence = estimate_fn(seed)
        assert np.isfinite(evidence.stderr) and evidence.stderr > 0
        scores.append((float(evidence.log_z) - exact) / float(evidence.stderr))
        warned.append(bool(caught))
    return np.array(scores), np.array(warned)


def _assert_calibrated(scores, warned):
    # With a true coverage of 0.95, 16 or more of 20 seeds fall within 1.96 stderr with
    # probability 0.98; an error bar half as wide as it should be covers about 0.67.
    assert np.sum(np.abs(scores) < 1.96) >= 16, np.round(scores, 2)
    # The scatter of error / stderr over 20 seeds: 1 for an honest error bar, with a relative
    # noise of about 16%; an error bar twice too wide gives 0.5, half too wide 2.
    assert 0.6 < np.std(scores) < 1.5, np.round(scores, 2)
    assert not np.any((np.abs(scores) > 4) & ~warned), np.round(scores, 2)


@pytest.mark.parametrize(
    "model, exact",
    [(_wide_prior, WIDE_PRIOR_LOG_Z), (_narrow_likelihood, NARROW_LIKELIHOOD_LOG_Z)],
    ids=["wide_prior", "narrow_likelihood"],
)
def test_ais_error_bars_are_calibrated(model, exact):
    def estimate(seed):
        return nx.ais(
            jax.random.PRNGKey(seed),
            model,
            num_particles=256,
            num_temperatures=64,
            progress_bar=False,
        )

    _assert_calibrated(*_scores(estimate, exact))


def test_marginalized_ais_error_bars_are_calibrated_on_a_cold_rbm():
    machine = nx.random_rbm(jax.random.PRNGKey(0), 10, 16, inverse_temperature=4.0)

    def estimate(seed):
        return nx.marginalized_ais_boltzmann(
            jax.random.PRNGKey(seed), machine, num_particles=256, num_temperatures=50
        )

    _assert_calibrated(*_scores(estimate, float(machine.log_partition())))


def test_joint_tempering_error_bars_are_calibrated_on_a_narrow_likelihood():
    mcmc = MCMC(
        nx.JointContinuousTempering(_narrow_likelihood),
        num_warmup=300,
        num_samples=500,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )

    def estimate(seed):
        mcmc.run(jax.random.PRNGKey(seed))
        return nx.log_marginal_likelihood(mcmc)

    scores, warned = _scores(estimate, NARROW_LIKELIHOOD_LOG_Z)
    _assert_calibrated(scores, warned)
