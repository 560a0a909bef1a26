"""VAE-SLMC end to end on a 2-D mixture of two uneven modes: the proposal is trained by the
annealing inside the kernel's init, then every chain jumps between the modes, the mode weight is
right within its Monte Carlo error and log Z matches the closed form."""

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from arviz import mcse
from numpyro.infer import MCMC

import numpyro_extras as nx

matplotlib.use("Agg")

WEIGHT = 0.7  # of the mode at (-2, -2)
LOG_Z = 1.5
# Small network and data so that the annealing runs in seconds; every other setting is the
# default (Table 7's beta_0 = 0.1, ar_min = 0.1).
FIT = dict(
    encoder_sizes=(32, 32),
    decoder_sizes=(32, 32),
    initial_size=1000,
    training_size=1000,
    epochs=20,
    initial_epochs=60,
    num_data_chains=20,
    num_check_chains=5,
    num_check_steps=200,
    initial_chains=4,
    initial_warmup=200,
    batch_size=256,
    beta_step=0.05,
)


def mixture_model():
    mixture = dist.MixtureSameFamily(
        dist.Categorical(jnp.array([WEIGHT, 1 - WEIGHT])),
        dist.Independent(dist.Normal(jnp.array([[-2.0, -2.0], [2.0, 2.0]]), 0.3), 1),
    )
    numpyro.sample("x", mixture)
    numpyro.factor("offset", LOG_Z)


@pytest.fixture(scope="module")
def run():
    kernel = nx.VAESLMC(mixture_model, fit_kwargs=FIT)
    mcmc = MCMC(
        kernel,
        num_warmup=200,
        num_samples=3000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0))
    return mcmc


def test_annealing_reached_the_posterior(run):
    history = run.sampler.proposal.history
    betas = history.betas(0)
    assert betas[0] == pytest.approx(0.1) and betas[-1] == pytest.approx(1.0)
    assert np.all(np.diff(betas) >= 0)
    assert history.final_accept_rates[0] >= history.ar_min
    figure = nx.plot_annealing(run.sampler.proposal)
    assert len(figure.axes) == 2


def test_every_chain_visits_both_modes_with_the_right_weight(run):
    x = np.asarray(run.get_samples(group_by_chain=True)["x"])
    in_left = (x[..., 0] < 0).astype(float)
    assert np.all(in_left.mean(1) > 0.3) and np.all(in_left.mean(1) < 0.95)
    jumps = np.abs(np.diff(in_left, axis=1)).sum(1)
    assert np.all(jumps > 100)
    error = float(mcse(in_left))
    assert error < 0.03
    assert abs(in_left.mean() - WEIGHT) < 4 * error


def test_log_z(run):
    evidence = nx.log_marginal_likelihood(run)
    assert evidence.stderr < 0.1
    assert abs(evidence.log_z - LOG_Z) < 4 * evidence.stderr
    idata = nx.to_inference_data(run)
    assert idata.attrs["log_marginal_likelihood"] == pytest.approx(evidence.log_z)
    assert "proposal_log_weight" in idata.sample_stats


def test_other_chain_method_reuses_the_trained_proposal(run):
    kernel = run.sampler
    proposal = kernel.proposal
    mcmc = MCMC(
        kernel,
        num_warmup=50,
        num_samples=200,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(1))
    assert kernel.proposal is proposal
    assert mcmc.get_samples()["x"].shape == (400, 2)
