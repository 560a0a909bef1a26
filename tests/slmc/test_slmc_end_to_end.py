"""VAE-SLMC end to end on a 2-D mixture of two uneven modes: the proposal is trained by the
annealing inside the kernel's init, then every chain jumps between the modes, the mode weight is
right within its Monte Carlo error and log Z matches the closed form."""

import jax
import matplotlib
import numpy as np
import pytest
from arviz import mcse
from numpyro.infer import MCMC
from slmc_targets import TINY, WEIGHT, mixture_model

import numpyro_extras as nx

pytestmark = pytest.mark.slow

matplotlib.use("Agg")

LOG_Z = 1.5
FIT = dict(TINY, initial_size=1000, initial_warmup=200)


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
    mcmc.run(jax.random.PRNGKey(0), LOG_Z)
    return mcmc


def test_annealing_reached_the_posterior(run):
    # the exact acceptance's default network learns its decoder noise
    assert run.sampler.proposal.config.learn_decoder_scale
    # separated modes keep the per-coordinate standardisation (whiten=None falls back to
    # whitening only where that fails at beta_0)
    assert not run.sampler.proposal.config.whiten
    history = run.sampler.proposal.history
    betas = history.betas(0)
    assert betas[0] == pytest.approx(0.1) and betas[-1] == pytest.approx(1.0)
    assert np.all(np.diff(betas) >= 0)
    assert history.final_accept_rates[0] >= history.ar_min
    for rung in history.rungs:
        assert 1 <= rung.epochs <= FIT["initial_epochs" if rung.round == 0 else "epochs"]
        assert rung.seconds > 0
    # At least the NUTS draws of the first rung and every check chain of every beta search.
    check_chains = FIT["num_check_chains"] * (FIT["num_check_steps"] + 1)
    assert history.density_evaluations > FIT["initial_size"] + len(betas) * check_chains
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
    assert idata.attrs["log_marginal_likelihood_pareto_k"] == pytest.approx(evidence.pareto_k)
    assert "proposal_log_weight" in idata.sample_stats


def test_a_run_without_a_finite_weight_gives_an_unbounded_log_z(run, monkeypatch):
    """Proposals that never reach the posterior's mass (every weight 0) give log Z = -inf with
    an infinite error and a warning that says so, never a standard error of 0."""
    import numpyro_extras.slmc.evidence as slmc_evidence

    monkeypatch.setattr(
        slmc_evidence, "proposal_log_weights", lambda mcmc: np.full((2, 3000), -np.inf)
    )
    with pytest.warns(UserWarning, match="no proposal of the run had a finite"):
        evidence = nx.log_marginal_likelihood(run)
    assert evidence.log_z == -np.inf and evidence.stderr == np.inf and evidence.ess == 0.0


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
    mcmc.run(jax.random.PRNGKey(1), LOG_Z)
    assert kernel.proposal is proposal
    assert mcmc.get_samples()["x"].shape == (400, 2)
