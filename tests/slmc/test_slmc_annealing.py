"""The annealing driver: parallel annealing with exchange repairs a model trained on one mode,
the retrain cap gives a clear error, progress bars can be silenced, and the isometric acceptance
warns when the VAE is not isometric."""

import logging
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
from numpyro_extras.model.potential import flatten_model
from numpyro_extras.shell.pilot import PilotDraws
from numpyro_extras.slmc import annealing
from numpyro_extras.slmc.annealing import initial_draws
from numpyro_extras.slmc.vae import (
    PAPER_DECODER_SIZES,
    PAPER_ENCODER_SIZES,
    VAEConfig,
    init_proposal,
    latent_information,
    sample_extended,
)

pytestmark = pytest.mark.slow


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


def test_no_progress_stops_the_annealing_after_the_retrain_cap(capsys):
    """An annealing that cannot climb stops with a warning that names the remedies, and the
    model it has proposes at beta = 1 (an exact sampler, however slow), not an exception after
    minutes of work."""
    with pytest.warns(
        nx.AnnealingStalledWarning, match="no progress in 2 consecutive rounds.*whiten=True"
    ):
        proposal = nx.fit_vae_proposal(
            jax.random.PRNGKey(0),
            mixture_model,
            initial_data=beta_0_draws(jax.random.PRNGKey(1), 1000),
            ar_min=0.999,
            max_retrains=1,
            progress_bar=False,
            **{**TINY, "epochs": 1, "initial_epochs": 1},
        )
    assert capsys.readouterr().err == ""
    history = proposal.history
    # It stopped below beta = 1, and every model was checked at beta = 1 for the choice.
    assert max(history.betas(j)[-1] for j in range(history.num_models)) < 1.0
    assert np.all(np.isfinite(history.final_log_z))
    assert 0.0 <= history.final_accept_rates[history.chosen_model] <= 1.0


def test_a_correlated_target_is_whitened_by_default():
    """Per coordinate, a network cannot fit a Gaussian with condition number 1e4 on a random
    basis (every proposal misses its narrow directions, so no rung is ever passed); the default
    ``whiten=None`` then trains whitened models, which reach beta = 1 with a high acceptance."""
    model, _, draws = correlated_gaussian(6)
    with pytest.warns(nx.AnnealingStalledWarning, match="no progress"):
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
        4,
        5,
        beta_0=0.5,
        ar_min=0.01,
        patience=1,
        tolerance=0.5,
        **{**TINY, "beta_step": 0.5},
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
    ).checked(1, flat_model.dimension)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*round trips")  # the exchange made them
        draws, evaluations, problems = initial_draws(
            jax.random.PRNGKey(1), flat_model, settings, 1, False
        )
    assert problems == []
    far_share = float(np.mean(np.mean(draws[0], -1) > 2.0))
    assert draws.shape == (1, 3200, 10) and evaluations > 0
    if exchange_scans:
        # 32 chains, each in one mode: a binomial share has sd 0.09 around 0.5.
        assert 0.2 < far_share < 0.8
    else:
        assert far_share == 0.0


def test_a_mode_the_exchange_visits_briefly_still_gets_a_chain(monkeypatch):
    """The exchange's chains visit a far mode (at 10) for 15 of their 500 scans each, between
    two of the 16 draws an even spacing over each run would pick: the starts still include it."""
    dimension, scans = 10, 500
    rng = np.random.default_rng(0)

    def fake_exchange(rng_key, tempered_potential_fn, reference, starts, settings, progress_bar):
        draws = rng.normal(0.0, 1.0, (2, scans, dimension))
        draws[:, 5:20] += 10.0
        return draws, 0, 10

    monkeypatch.setattr(annealing, "_exchange_draws", fake_exchange)
    settings = nx.AnnealingSettings(initial_exchange_scans=scans).checked(1, dimension)
    starts = jnp.zeros((32, dimension))
    reference_draws = rng.normal(0.0, 1.0, (len(starts), 50, dimension))
    spread, _ = annealing._exchange_starts(
        jax.random.split(jax.random.PRNGKey(0), 3),
        lambda x: 0.0,
        reference_draws,
        starts,
        settings,
        False,
    )
    assert spread.shape == (32, dimension)
    assert np.sum(np.mean(np.asarray(spread), -1) > 5.0) >= 1
    picks = np.linspace(0, scans - 1, 16).round().astype(int)
    assert not np.any((picks >= 5) & (picks < 20))  # what even spacing would have picked


def test_the_first_rung_needs_an_exchange_chain():
    with pytest.raises(ValueError, match="initial_exchange_chains"):
        nx.AnnealingSettings(initial_exchange_chains=0).checked(1, dimension=2)


def test_an_exchange_too_short_for_a_round_trip_warns():
    flat_model = flatten_model(jax.random.PRNGKey(0), far_mode_model)
    settings = nx.AnnealingSettings(
        initial_size=320, initial_warmup=20, initial_exchange_scans=2
    ).checked(1, flat_model.dimension)
    with pytest.warns(UserWarning, match="round trips"):
        initial_draws(jax.random.PRNGKey(1), flat_model, settings, 1, False)


def test_sizes_follow_the_dimension_below_the_papers_mixtures():
    small = nx.AnnealingSettings().checked(1, dimension=1)
    assert (small.training_size, small.initial_size) == (5000, 5000)
    assert small.full_final_training
    assert small.encoder_sizes == (32,) * 3 and small.decoder_sizes == (32,) * 3
    tenth = nx.AnnealingSettings().checked(1, dimension=10)
    assert (tenth.training_size, tenth.initial_size) == (7500, 7500)
    assert tenth.encoder_sizes == (64, 64, 32) and tenth.decoder_sizes == (32, 64, 64)
    # From D = 20 on, the paper's recipe (Tables 7 and 8, App. F.3).
    for dimension in (20, 100):
        paper = nx.AnnealingSettings().checked(1, dimension=dimension)
        assert (paper.training_size, paper.initial_size) == (15_000, 40_000)
        assert paper.full_final_training
        assert paper.encoder_sizes == PAPER_ENCODER_SIZES
        assert paper.decoder_sizes == PAPER_DECODER_SIZES
    given = nx.AnnealingSettings(training_size=123, encoder_sizes=(8,)).checked(1, dimension=50)
    assert given.training_size == 123 and given.encoder_sizes == (8,)
    given = nx.AnnealingSettings(training_size=900, full_final_training=True).checked(1, 5)
    assert (given.initial_size, given.full_final_training) == (900, True)


def _two_cluster_log_density(x):
    # Two modes at -3 and +3 of sd 0.1 in one dimension, weights 0.6 and 0.4.
    left = jnp.log(0.6) - 0.5 * ((x[0] + 3.0) / 0.1) ** 2
    right = jnp.log(0.4) - 0.5 * ((x[0] - 3.0) / 0.1) ** 2
    return jnp.logaddexp(left, right)


@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_a_collapsed_model_is_retrained_through_its_latents(beta):
    """A model whose encoder returns the prior everywhere proposes one broad Gaussian over both
    modes; the repair trains one that places the modes in its latents and accepts far more at
    the model's current beta, the annealing's first (0.1) or its last (1)."""
    settings = nx.AnnealingSettings(
        **{**TINY, "training_size": 2000, "batch_size": 128, "epochs": 60, "initial_epochs": 100}
    ).checked(1, dimension=1)
    key = jax.random.PRNGKey(0)
    # Draws at beta, where the search judges the models: each mode's sd is 0.1 / sqrt(beta),
    # their weights 0.6^beta : 0.4^beta.
    left_weight = 0.6**beta / (0.6**beta + 0.4**beta)
    data = jnp.where(jax.random.uniform(key, (1, 2000, 1)) < left_weight, -3.0, 3.0)
    data = data + 0.1 / np.sqrt(beta) * jax.random.normal(jax.random.PRNGKey(1), data.shape)
    config = VAEConfig(
        dimension=1,
        latent_dim=1,
        encoder_sizes=(32, 32),
        decoder_sizes=(32, 32),
        learn_decoder_scale=True,
    )
    proposal = init_proposal(jax.random.PRNGKey(2), config)
    # Zero output heads: the encoder is N(0, 1) at every point, the decoder the data's mean.
    encoder = jax.tree.map(jnp.zeros_like, proposal.params["encoder"])
    collapsed = proposal.replace(
        params={**proposal.params, "encoder": encoder},
        loc=jnp.mean(data[0], 0),
        scale=jnp.std(data[0], 0),
    )
    assert float(latent_information(collapsed, data[0])) == 0.0
    proposals = jax.tree.map(lambda leaf: leaf[None], collapsed)
    machinery = annealing._machinery(_two_cluster_log_density, settings, "exact")
    grid = annealing.candidate_betas(0.1, 1.0, 0.05)
    column = np.flatnonzero(np.isclose(grid, beta))
    grid = jnp.asarray(grid)
    rates, _ = machinery.search(jax.random.split(jax.random.PRNGKey(3), 1), proposals, data, grid)
    rates = np.asarray(rates)
    assert rates[0, column] < annealing.GAUSSIAN_FIT_RATE
    repaired, repaired_rates, searches = annealing._separated_if_collapsed(
        jax.random.PRNGKey(4), machinery, proposals, rates, column, data, grid, settings
    )
    assert 1 <= searches <= annealing.SEPARATING_ATTEMPTS
    assert float(latent_information(jax.tree.map(lambda leaf: leaf[0], repaired), data[0])) > (
        10 * annealing.COLLAPSED_INFORMATION
    )
    assert repaired_rates[0, column] > rates[0, column] + 0.2, (rates, repaired_rates)
    # A collapsed model that already accepts half its proposals fits as one Gaussian: kept.
    kept, _, searches = annealing._separated_if_collapsed(
        jax.random.PRNGKey(4),
        machinery,
        proposals,
        np.full_like(rates, 0.6),
        column,
        data,
        grid,
        settings,
    )
    assert searches == 0 and kept is proposals
    # A model that uses its latents is left alone, without a search.
    same, same_rates, searches = annealing._separated_if_collapsed(
        jax.random.PRNGKey(5), machinery, repaired, repaired_rates, column, data, grid, settings
    )
    assert searches == 0 and same is repaired


def test_one_compiled_search_serves_every_size_of_data(caplog):
    """The beta search's check chains start from rows drawn apart from the compiled search, so
    data of another size (the first rung's draws, then a round's) compile no second search."""
    settings = nx.AnnealingSettings(**TINY).checked(1, dimension=1)
    machinery = annealing._machinery(_two_cluster_log_density, settings, "exact")
    config = VAEConfig(dimension=1, latent_dim=1, encoder_sizes=(8,), decoder_sizes=(8,))
    proposals = jax.tree.map(lambda leaf: leaf[None], init_proposal(jax.random.PRNGKey(0), config))
    grid = jnp.asarray(annealing.candidate_betas(0.1, 1.0, 0.3))
    keys = jax.random.split(jax.random.PRNGKey(1), 1)

    def search_compilations(num_rows):
        data = jax.random.normal(jax.random.PRNGKey(num_rows), (1, num_rows, 1))
        caplog.clear()
        with caplog.at_level(logging.WARNING), jax.log_compiles():
            rates, _ = machinery.search(keys, proposals, data, grid)
        assert np.all(np.isfinite(np.asarray(rates)))
        messages = [record.getMessage() for record in caplog.records]
        return [m for m in messages if "XLA compilation" in m and "search_one" in m]

    assert len(search_compilations(40)) == 1
    assert search_compilations(100) == []


def test_the_mean_score_tells_target_draws_from_draws_stuck_elsewhere():
    """The mean gradient of log p is 0 over draws from p: about a normal number of standard
    errors from 0 for exact draws, hundreds for draws stuck away from the mass."""

    def log_density(x):
        return -0.5 * jnp.sum(((x - jnp.array([1.0, -2.0, 0.0])) / jnp.array([0.5, 2.0, 1.0])) ** 2)

    exact = jnp.array([1.0, -2.0, 0.0]) + jnp.array([0.5, 2.0, 1.0]) * jax.random.normal(
        jax.random.PRNGKey(0), (4000, 3)
    )
    score, _ = annealing._largest_mean_score(log_density, exact)
    assert score < 4.0
    stuck = exact.at[:, 1].add(6.0)
    score, coordinate = annealing._largest_mean_score(log_density, stuck)
    assert coordinate == 1 and score > annealing.MEAN_SCORE_LIMIT * 10


def test_nuts_trees_at_the_maximum_depth_stop_the_first_rung_before_its_exchange(monkeypatch):
    """When most of the reference run's NUTS trees reach the maximum depth (as on a tempered
    funnel), its draws are not the tempered target's: the fit says so, runs neither the
    exchange nor the first rung's chains nor any annealing, and trains on those draws."""
    runs = []

    def deep_nuts(rng_key, potential_fn, starts, **kwargs):
        runs.append(kwargs)
        draws = beta_0_draws(rng_key, len(starts) * 200).reshape(len(starts), 200, 2)
        return PilotDraws(np.asarray(draws), 1234, 0, max_depth_share=0.8)

    def no_exchange(*args, **kwargs):
        raise AssertionError("the exchange ran after the reference run failed")

    monkeypatch.setattr(annealing, "nuts_draws", deep_nuts)
    monkeypatch.setattr(annealing, "_exchange_draws", no_exchange)
    with pytest.warns(UserWarning, match="80% of its transitions reached the maximum tree"):
        proposal = nx.fit_vae_proposal(
            jax.random.PRNGKey(0), mixture_model, progress_bar=False, **TINY
        )
    history = proposal.history
    assert len(runs) == 1 and runs[0]["num_warmup"] == annealing.REFERENCE_STEPS
    assert [rung.beta for rung in history.rungs] == [0.1]
    assert len(history.problems) == 1 and "maximum tree depth" in history.problems[0]
    assert history.density_evaluations >= 1234
    assert np.isfinite(history.final_accept_rates[0])


def test_first_rung_draws_away_from_the_tempered_mass_stop_the_annealing_at_once():
    """Draws that are not the tempered target's (here exact beta_0 draws moved 30 sds of a mode
    to the right) can anneal to nothing: the fit says so before its first round, records the
    problem for every log Z of the proposal, and returns the first rung's model."""
    draws = beta_0_draws(jax.random.PRNGKey(1), 1000).at[:, 0].add(30.0)
    with pytest.warns(UserWarning, match="first rung's draws are not draws of the tempered"):
        proposal = nx.fit_vae_proposal(
            jax.random.PRNGKey(0), mixture_model, initial_data=draws, progress_bar=False, **TINY
        )
    history = proposal.history
    assert [rung.beta for rung in history.rungs] == [0.1]
    assert len(history.problems) == 1 and "first rung" in history.problems[0]
    assert np.isfinite(history.final_accept_rates[0])
    # Exact draws of the same tempered target are well within the bound.
    potential_fn = flatten_model(jax.random.PRNGKey(0), mixture_model).potential_fn
    exact = beta_0_draws(jax.random.PRNGKey(1), 1000)
    score, _ = annealing._largest_mean_score(lambda x: -0.1 * potential_fn(x), exact)
    assert score < 4.0 < annealing.FIRST_RUNG_SCORE_LIMIT
