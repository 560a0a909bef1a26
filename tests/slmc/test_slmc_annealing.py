"""The annealing driver: parallel annealing with exchange repairs a model trained on one mode,
the retrain cap gives a clear error, progress bars can be silenced, and the isometric acceptance
warns when the VAE is not isometric."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC
from slmc_targets import TINY, WEIGHT, correlated_gaussian, mixture_model

import numpyro_extras as nx
from numpyro_extras.potential import flatten_model
from numpyro_extras.slmc.annealing import initial_draws
from numpyro_extras.slmc.vae import VAEConfig, init_proposal, sample_extended


def beta_0_draws(key, count, left_only=False):
    """Exact draws of the mixture tempered to beta = 0.1 (each mode's sd grows by sqrt(10));
    with ``left_only``, draws of the left mode only."""
    mode_key, noise_key = jax.random.split(key)
    left = jax.random.uniform(mode_key, (count,)) < (1.0 if left_only else WEIGHT)
    centre = jnp.where(left[:, None], -2.0, 2.0)
    return centre + 0.3 * np.sqrt(10.0) * jax.random.normal(noise_key, (count, 2))


def fit_on_beta_0_draws(seed, data_seed, **settings):
    """``nx.fit_vae_proposal`` on the mixture from 1000 exact draws at beta = 0.1, silently."""
    return nx.fit_vae_proposal(
        jax.random.PRNGKey(seed),
        mixture_model,
        initial_data=beta_0_draws(jax.random.PRNGKey(data_seed), 1000),
        progress_bar=False,
        **settings,
    )


@pytest.mark.parametrize("exchange", [True, False])
def test_exchange_repairs_a_collapsed_model(exchange):
    """Model 0 starts from draws of the left mode only (log Z of the model is 0; a proposal that
    misses the right mode finds log 0.7 = -0.36). With exchange its chain is fed right-mode
    states by model 1 and it learns both modes; without, it stays collapsed, and the driver
    returns model 1 because its proposals find more mass."""
    collapsed = beta_0_draws(jax.random.PRNGKey(0), 1000, left_only=True)
    healthy = beta_0_draws(jax.random.PRNGKey(1), 1000)
    proposal = nx.fit_vae_proposal(
        jax.random.PRNGKey(2),
        mixture_model,
        num_models=2,
        initial_data=jnp.stack([collapsed, healthy]),
        exchange=exchange,
        progress_bar=False,
        **TINY,
    )
    history = proposal.history
    assert history.num_models == 2
    log_z = np.array(history.final_log_z)
    if exchange:
        assert np.all(np.abs(log_z) < 0.15)
        assert all(rung.swap_rate > 0 for rung in history.rungs if rung.round > 0)
    else:
        assert log_z[0] < np.log(WEIGHT) + 0.1 and abs(log_z[1]) < 0.15
        assert history.chosen_model == 1
    draws = jax.vmap(lambda k: sample_extended(k, proposal)[0])(
        jax.random.split(jax.random.PRNGKey(3), 4000)
    )
    assert abs(float(jnp.mean(draws[:, 0] < 0)) - WEIGHT) < 0.1


def test_no_progress_raises_after_the_retrain_cap(capsys):
    with pytest.raises(RuntimeError, match="no progress in 2 consecutive rounds.*whiten=True"):
        nx.fit_vae_proposal(
            jax.random.PRNGKey(0),
            mixture_model,
            initial_data=beta_0_draws(jax.random.PRNGKey(1), 1000),
            ar_min=0.999,
            max_retrains=1,
            progress_bar=False,
            **{**TINY, "epochs": 1, "initial_epochs": 1},
        )
    assert capsys.readouterr().err == ""


def test_a_correlated_target_is_whitened_by_default():
    """Per coordinate, a network cannot fit a Gaussian with condition number 1e4 on a random
    basis (every proposal misses its narrow directions, so no rung is ever passed); the default
    ``whiten=None`` then trains whitened models, which reach beta = 1 with a high acceptance."""
    model, _, draws = correlated_gaussian(6)
    with pytest.raises(RuntimeError, match="no progress"):
        nx.fit_vae_proposal(
            jax.random.PRNGKey(0),
            model,
            initial_data=draws,
            whiten=False,
            max_retrains=0,
            progress_bar=False,
            **TINY,
        )
    proposal = nx.fit_vae_proposal(
        jax.random.PRNGKey(0), model, initial_data=draws, progress_bar=False, **TINY
    )
    assert proposal.config.whiten
    assert proposal.history.betas(0)[-1] == 1.0
    assert proposal.history.final_accept_rates[0] > 0.6
    assert abs(proposal.history.final_log_z[0]) < 0.05


def test_isometric_acceptance_warns_for_a_non_isometric_vae():
    config = VAEConfig(dimension=2, latent_dim=2, encoder_sizes=(8,), decoder_sizes=(8,))
    proposal = init_proposal(jax.random.PRNGKey(0), config, sites=(("x", (2,)),))
    kernel = nx.VAESLMC(mixture_model, proposal=proposal, acceptance="isometric")
    mcmc = MCMC(kernel, num_warmup=10, num_samples=100, progress_bar=False)
    with pytest.warns(nx.IsometryWarning, match="not isometric"):
        mcmc.run(jax.random.PRNGKey(0))
    assert kernel.isometry_factors.shape == (2,)
    with pytest.warns(UserWarning, match="approximate"):
        nx.log_marginal_likelihood(mcmc)


def test_the_isometric_annealing_keeps_the_papers_decoder_noise():
    """The isometric acceptance's density (eq. 3) assumes eq. 2's fixed noise: the annealing
    trains that network for it (the exact acceptance's learned noise is checked end to end),
    and refuses a learned noise."""
    data = beta_0_draws(jax.random.PRNGKey(1), 1000)
    settings = {**TINY, "epochs": 1, "initial_epochs": 1, "beta_0": 1.0}
    with pytest.raises(ValueError, match="fixed decoder noise"):
        nx.fit_vae_proposal(
            jax.random.PRNGKey(0),
            mixture_model,
            acceptance="isometric",
            initial_data=data,
            learn_decoder_scale=True,
            progress_bar=False,
            **settings,
        )
    proposal = nx.fit_vae_proposal(
        jax.random.PRNGKey(0),
        mixture_model,
        acceptance="isometric",
        initial_data=data,
        progress_bar=False,
        **settings,
    )
    assert proposal.config.learn_decoder_scale is False


def test_constant_annealing_follows_its_path_whatever_the_acceptance():
    """With constant_step the betas climb by that step every round (the paper's CA), even where
    no candidate passes ar_min, and the rungs record the acceptance rate at each beta."""
    with pytest.warns(UserWarning, match="below ar_min"):
        proposal = fit_on_beta_0_draws(
            0,
            1,
            beta_0=0.4,
            constant_step=0.3,
            ar_min=0.999,
            max_retrains=0,
            **{**TINY, "epochs": 1, "initial_epochs": 1},
        )
    np.testing.assert_allclose(proposal.history.betas(0), [0.4, 0.7, 1.0])
    rates = [rung.accept_rate for rung in proposal.history.rungs[1:]]
    assert all(0.0 <= rate < 0.999 for rate in rates)


def test_early_stopping_spares_the_final_training():
    """Every training stops early (patience 1, a 50% tolerance) except the last one, at
    beta_final: the proposal the sampler uses gets every epoch."""
    proposal = fit_on_beta_0_draws(
        4, 5, beta_0=0.5, ar_min=0.01, patience=1, tolerance=0.5, **{**TINY, "beta_step": 0.5}
    )
    rungs = proposal.history.rungs
    last_round = rungs[-1].round
    assert last_round >= 1 and proposal.history.betas(0)[-1] == 1.0
    for rung in rungs:
        if rung.round == last_round:
            assert rung.epochs == TINY["epochs"]
        else:
            assert rung.epochs < (TINY["initial_epochs"] if rung.round == 0 else TINY["epochs"])


def far_mode_model():
    """Two equal modes in 10-D, at 0 and at 4 (every coordinate), sd 0.3: at beta_0 = 0.1 the
    barrier between them is 20 nats, and uniform starts in [-2, 2]^10 all lie nearer 0."""
    centres = jnp.stack([jnp.zeros(10), jnp.full(10, 4.0)])
    mixture = dist.MixtureSameFamily(
        dist.Categorical(jnp.array([0.5, 0.5])), dist.Independent(dist.Normal(centres, 0.3), 1)
    )
    numpyro.sample("x", mixture)


@pytest.mark.parametrize("exchange_scans, exchange_chains", [(300, 2), (300, 3), (0, 2)])
def test_the_first_rung_starts_its_chains_in_every_mode(exchange_scans, exchange_chains):
    """With the replica-exchange starts the first rung's NUTS draws fill both modes near their
    tempered weights (0.5 each), also when the exchange chains do not divide the NUTS chains;
    from uniform starts alone every chain stays by 0."""
    flat_model = flatten_model(jax.random.PRNGKey(0), far_mode_model)
    settings = nx.AnnealingSettings(
        initial_size=3200,
        initial_warmup=200,
        initial_exchange_scans=exchange_scans,
        initial_exchange_chains=exchange_chains,
    ).checked(1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*round trips")  # the exchange made them
        draws, evaluations = initial_draws(jax.random.PRNGKey(1), flat_model, settings, 1, False)
    far_share = float(np.mean(np.mean(draws[0], -1) > 2.0))
    assert draws.shape == (1, 3200, 10) and evaluations > 0
    if exchange_scans:
        # 32 chains, each in one mode: a binomial share has sd 0.09 around 0.5.
        assert 0.2 < far_share < 0.8
    else:
        assert far_share == 0.0


def test_the_first_rung_needs_an_exchange_chain():
    with pytest.raises(ValueError, match="initial_exchange_chains"):
        nx.AnnealingSettings(initial_exchange_chains=0).checked(1)


def test_an_exchange_too_short_for_a_round_trip_warns():
    flat_model = flatten_model(jax.random.PRNGKey(0), far_mode_model)
    settings = nx.AnnealingSettings(
        initial_size=320, initial_warmup=20, initial_exchange_scans=2
    ).checked(1)
    with pytest.warns(UserWarning, match="round trips"):
        initial_draws(jax.random.PRNGKey(1), flat_model, settings, 1, False)
