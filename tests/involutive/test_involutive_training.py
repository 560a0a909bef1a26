"""Training the Ai-sampler on mog2 (the paper's 2-D benchmark, the reference code's recipe):
the trained kernel switches modes where HMC never does, stays exact, and saves and loads."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC
from numpyro.infer.hmc import hmc

import numpyro_extras as nx
from numpyro_extras.involutive.networks import (
    InvolutionConfig,
    init_proposal,
    involution,
    swap_involution,
)
from numpyro_extras.involutive.training import (
    DECLINE_FRACTION,
    DECLINE_MIN_BEST,
    DECLINE_PATIENCE,
    FALLBACK_SWAP_PROBABILITY,
    SEED_FIT_WIDENING,
    SINGLE_REGION_SWAP_PROBABILITY,
    SWAP_ACCEPTANCE,
    TrainingSettings,
    _fallback_for,
    _mixing_checked,
    _standardization,
    _swap_acceptance,
    declined_epochs,
    seed_mixture,
)

pytestmark = pytest.mark.slow

MEANS = jnp.array([[5.0, 0.0], [-5.0, 0.0]])
VARIANCE = 0.5  # the reference code's mog2


def mog2_potential(x):
    return -logsumexp(-0.5 * jnp.sum((x - MEANS) ** 2, -1) / VARIANCE)


@pytest.fixture(scope="module")
def trained():
    # A kernel that switches modes passes the check after training without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return nx.train_ai_sampler(
            jax.random.PRNGKey(0),
            potential_fn=mog2_potential,
            initial_position=jnp.zeros(2),
            progress_bar=False,
        )


def _seed_draws(spread, seed=0):
    """Seed chains as the pilot leaves them, ``(8, 300, 2)``: four in each mog2 mode, each
    with draws of that mode's spread times ``spread``."""
    noise = jax.random.normal(jax.random.PRNGKey(seed), (8, 300, 2))
    return jnp.tile(MEANS, (4, 1))[:, None, :] + spread * np.sqrt(VARIANCE) * noise


def _never_crossing_map():
    """With every ``V = 0`` the map is ``u -> -u`` in standardised coordinates, here
    ``(x1, x2) -> (-x1, 6 - x2)``, which sends a mode to empty space: always rejected."""
    proposal = init_proposal(
        jax.random.PRNGKey(0),
        InvolutionConfig(dimension=2, swap=False),
        loc=jnp.array([0.0, 3.0]),
        scale=jnp.array([5.0, 3.0]),
    )
    return proposal.replace(params=jax.tree.map(jnp.zeros_like, proposal.params))


def test_seed_mixture_has_a_component_per_mode_found():
    mixture = seed_mixture(_seed_draws(1.0))
    assert mixture.component_locs.shape == (2, 2)
    np.testing.assert_allclose(jnp.sort(mixture.component_locs[:, 0]), [-5.0, 5.0], atol=0.1)
    np.testing.assert_allclose(jnp.exp(mixture.component_log_weights), [0.5, 0.5])
    covariances = mixture.component_scale_trils @ jnp.swapaxes(mixture.component_scale_trils, 1, 2)
    # the modes' covariance, widened 1.2 times
    np.testing.assert_allclose(covariances[:, 0, 0], 1.44 * VARIANCE, rtol=0.1)
    one_mode = jnp.where(_seed_draws(1.0)[..., :1] < 0, -1.0, 1.0) * _seed_draws(1.0)
    assert seed_mixture(one_mode) is None


def test_mixing_check_warns_for_a_kernel_that_never_crosses_between_modes():
    """A map that never crosses, on mog2 narrowed to a variance of 1e-6 while the seed draws,
    and so the mixture of their modes, are as wide as mog2's: chains started at the modes'
    centres reject every proposal, and the check after training warns. (The trained fixture
    above passes it without a warning.)"""

    def narrow_potential(x):
        return -logsumexp(-0.5 * jnp.sum((x - MEANS) ** 2, -1) / 1e-6)

    seed_draws = _seed_draws(1.0).at[:, -1, :].set(jnp.tile(MEANS, (4, 1)))
    with pytest.warns(UserWarning, match="does not move between the regions its 8 NUTS seed"):
        _mixing_checked(
            _never_crossing_map(),
            narrow_potential,
            seed_draws,
            jax.random.PRNGKey(1),
            TrainingSettings(),
            fallback=_fallback_for(seed_draws),
        )


def test_mixing_check_mixes_in_the_seed_modes_when_the_map_does_not_cross():
    """The map that never crosses, with seed chains spread over each mode: the check's chains
    disagree (R-hat NaN: they never move), the mixture of the two modes found crosses, so the
    check keeps three quarters of the steps for it, and does not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checked = _mixing_checked(
            _never_crossing_map(),
            mog2_potential,
            _seed_draws(1.0),
            jax.random.PRNGKey(1),
            TrainingSettings(),
            fallback=_fallback_for(_seed_draws(1.0)),
        )
    assert checked.config.swap_probability == FALLBACK_SWAP_PROBABILITY
    assert checked.mixture.component_locs.shape == (2, 2)
    mcmc = _chains(nx.AiSampler(potential_fn=mog2_potential, params=checked))
    labels = (np.asarray(mcmc.get_samples(group_by_chain=True))[..., 0] < 0).astype(int)
    assert nx.mode_switch_rate(labels) > 0.2
    ess = float(effective_sample_size(labels[..., None].astype(float))[0])
    assert ess > 1000
    assert abs(labels.mean() - 0.5) < 4 * 0.5 / np.sqrt(ess)


def test_mixing_check_mixes_the_widened_seed_fit_into_a_single_region():
    """Seed chains in one region and a map whose check chains agree (the untrained swap on a
    standard normal): a quarter of the steps still propose from the seed draws' Gaussian fit,
    its scale widened (here twice, in 2-D), so that a tail the map reaches only in rare
    excursions is visited in a run of a few hundred draws too."""
    seed_draws = jax.random.normal(jax.random.PRNGKey(2), (8, 300, 2))
    swap_map = init_proposal(
        jax.random.PRNGKey(0), InvolutionConfig(dimension=2), loc=jnp.zeros(2), scale=jnp.ones(2)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checked = _mixing_checked(
            swap_map,
            lambda x: 0.5 * jnp.sum(x**2),
            seed_draws,
            jax.random.PRNGKey(1),
            TrainingSettings(),
            fallback=_fallback_for(seed_draws),
        )
    assert checked.config.swap_probability == SINGLE_REGION_SWAP_PROBABILITY
    (scale_tril,) = np.asarray(checked.mixture.component_scale_trils)
    draws = np.asarray(seed_draws).reshape(-1, 2)
    np.testing.assert_allclose(checked.mixture.component_locs[0], draws.mean(0), atol=1e-12)
    widening = 1.0 + np.sqrt(SEED_FIT_WIDENING / 2)
    np.testing.assert_allclose(scale_tril @ scale_tril.T, widening**2 * np.cov(draws.T), rtol=1e-4)


def _chains(kernel, num_chains=4, num_warmup=500, num_samples=3000, method="vectorized"):
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=method,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(1), init_params=jnp.tile(MEANS[0], (num_chains, 1)))
    return mcmc


def test_trained_kernel_switches_modes_where_hmc_does_not(trained):
    history = trained.history
    assert 5 < len(history.accept_rates) <= 50 and history.seed_gradient_evaluations > 0
    # The swap from a Gaussian fit of the two modes accepts little: the paper's start is used.
    assert trained.config.swap is False
    # The check after training mixes independence proposals from the seed chains' modes into
    # the steps when its chains then know the modes' weights better.
    assert trained.config.swap_probability in (0.0, FALLBACK_SWAP_PROBABILITY)
    check = nx.involution_check(trained, jax.random.PRNGKey(2))
    assert check.max_involution_error < 1e-4 and check.max_log_det < 1e-4

    # Every chain starts in the right-hand mode.
    mcmc = _chains(nx.AiSampler(potential_fn=mog2_potential, params=trained))
    draws = np.asarray(mcmc.get_samples(group_by_chain=True))
    labels = (draws[..., 0] < 0).astype(int)
    assert nx.mode_switch_rate(labels) > 0.1
    assert float(np.mean(mcmc.get_extra_fields()["accept_prob"])) > 0.15
    # The left-hand mode's weight (exactly 1/2), with the Monte Carlo error of the indicator.
    ess = float(effective_sample_size(labels[..., None].astype(float))[0])
    assert ess > 1000
    stderr = 0.5 / np.sqrt(ess)
    assert abs(labels.mean() - 0.5) < 4 * stderr, (labels.mean(), stderr)
    second = draws[..., 0] ** 2
    second_stderr = np.std(second) / np.sqrt(float(effective_sample_size(second[..., None])[0]))
    assert abs(second.mean() - (25.0 + VARIANCE)) < 4 * second_stderr

    # The learned map alone crosses between the modes too.
    config = dataclasses.replace(trained.config, swap_probability=0.0)
    alone = _chains(
        nx.AiSampler(potential_fn=mog2_potential, params=trained.replace(config=config))
    )
    alone_labels = (np.asarray(alone.get_samples(group_by_chain=True))[..., 0] < 0).astype(int)
    assert nx.mode_switch_rate(alone_labels) > 0.05

    # HMC with the paper's fixed trajectory never leaves the mode it starts in.
    init_fn, sample_fn = hmc(potential_fn=mog2_potential, algo="HMC")
    state = init_fn(MEANS[0], num_warmup=0, step_size=0.05, num_steps=40, adapt_step_size=False)
    sample = jax.jit(sample_fn)
    signs = []
    for _ in range(300):
        state = sample(state)
        signs.append(float(state.z[0]) < 0)
    assert nx.mode_switch_rate(np.array(signs, int)) < 0.01


@pytest.mark.parametrize("mixture", [False, True], ids=["as trained", "with a seed mixture"])
def test_save_and_load_round_trip(trained, tmp_path, mixture):
    if mixture:
        config = dataclasses.replace(trained.config, swap_probability=FALLBACK_SWAP_PROBABILITY)
        trained = trained.replace(config=config, mixture=seed_mixture(_seed_draws(1.0)))
    else:
        trained = trained.replace(mixture=None)
    path = tmp_path / "mog2.msgpack"
    nx.save_involution(path, trained)
    loaded = nx.load_involution(path)
    assert loaded.config == trained.config and loaded.sites == trained.sites
    assert loaded.history.accept_rates == pytest.approx(trained.history.accept_rates, nan_ok=True)
    if mixture:
        for saved, restored in zip(trained.mixture, loaded.mixture, strict=True):
            np.testing.assert_array_equal(np.asarray(saved), np.asarray(restored))
    else:
        assert loaded.mixture is None
    kernel = nx.AiSampler(potential_fn=mog2_potential, params=trained)
    reloaded = nx.AiSampler(potential_fn=mog2_potential, params=loaded)
    first = _chains(kernel, num_chains=2, num_warmup=10, num_samples=50).get_samples()
    second = _chains(reloaded, num_chains=2, num_warmup=10, num_samples=50).get_samples()
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))


def test_a_corrupt_or_mismatched_file_is_refused(trained, tmp_path):
    path = tmp_path / "bad.msgpack"
    path.write_bytes(b"not a saved involution")
    with pytest.raises(ValueError, match="not a file saved by nx.save_involution"):
        nx.load_involution(path)
    nx.save_involution(tmp_path / "good.msgpack", trained)
    from flax import serialization

    payload = serialization.msgpack_restore((tmp_path / "good.msgpack").read_bytes())
    payload["arrays"]["loc"] = np.zeros(3)
    path.write_bytes(serialization.msgpack_serialize(payload))
    with pytest.raises(ValueError, match="has shape"):
        nx.load_involution(path)


def test_whitened_swap_start_accepts_on_a_correlated_gaussian():
    """On a correlated 6-D Gaussian (correlations 0.9, scales 0.37 to 2.7) the default start,
    the swap in coordinates whitened by the seed draws' covariance, accepts most proposals
    before any training; the paper's plain start with per-coordinate scales accepts almost
    none. The acceptance is the exact expectation of ``min(1, exp(H(s) - H(M s)))`` under the
    extended target, estimated on independent draws."""
    dimension = 6
    scales = jnp.exp(jnp.linspace(-1.0, 1.0, dimension))
    correlation = 0.9 + 0.1 * jnp.eye(dimension)
    covariance = correlation * scales[:, None] * scales[None]
    precision = jnp.linalg.inv(covariance)

    def energy(states):
        x, v = states[:, :dimension], states[:, dimension:]
        return 0.5 * jnp.einsum("bi,ij,bj->b", x, precision, x) + 0.5 * jnp.sum(v**2, -1)

    seed_key, state_key, momentum_key = jax.random.split(jax.random.PRNGKey(0), 3)
    seed = jax.random.multivariate_normal(seed_key, jnp.zeros(dimension), covariance, (2000,))
    states = jnp.concatenate(
        [
            jax.random.multivariate_normal(state_key, jnp.zeros(dimension), covariance, (4000,)),
            jax.random.normal(momentum_key, (4000, dimension)),
        ],
        -1,
    )
    rates = {}
    for swap in (True, False):
        loc, scale = _standardization(seed, whiten=swap)
        if swap:
            np.testing.assert_allclose(scale @ scale.T, jnp.cov(seed.T), rtol=1e-3)
        config = InvolutionConfig(dimension=dimension, swap=swap)
        proposal = init_proposal(jax.random.PRNGKey(1), config, loc, scale)
        images = involution(proposal, states)
        rates[swap] = float(jnp.mean(jnp.minimum(1.0, jnp.exp(energy(states) - energy(images)))))
    assert rates[True] > 0.8 and rates[False] < 0.1, rates
    # The estimate that chooses the start agrees, from the seed draws alone.
    loc, scale = _standardization(seed, whiten=True)
    potential = lambda x: 0.5 * x @ precision @ x  # noqa: E731
    estimate = _swap_acceptance(jax.random.PRNGKey(2), seed, loc, scale, potential)
    assert abs(estimate - rates[True]) < 0.05 and estimate > SWAP_ACCEPTANCE, (estimate, rates)


def test_the_schedule_defaults_follow_the_start():
    settings = TrainingSettings().validated()
    # From the swap: a short seed phase and an early stop once acceptance stops rising.
    swap, paper = settings.for_start(True), settings.for_start(False)
    assert (swap.seed_epochs, swap.patience) == (5, 5)
    # From the paper's flow: every epoch, since it learns to jump while acceptance is flat.
    assert (paper.seed_epochs, paper.patience) == (10, 0)
    assert TrainingSettings(epochs=4).validated().for_start(False).seed_epochs == 4
    explicit = TrainingSettings(seed_epochs=2, patience=3).validated().for_start(False)
    assert (explicit.seed_epochs, explicit.patience) == (2, 3)
    with pytest.raises(ValueError, match="seed_epochs"):
        TrainingSettings(epochs=3, seed_epochs=4).validated()


# A training small enough for a test of its schedule.
SMALL = dict(
    seed_chains=4,
    seed_warmup=100,
    seed_samples=100,
    num_chains=10,
    burn_in=10,
    num_kept=20,
    batch_size=256,
    hidden=8,
    discriminator_hidden=16,
    progress_bar=False,
)


def test_training_stops_when_the_bootstrap_acceptance_plateaus():
    """With a learning rate too small to move the flow, the bootstrap acceptance only
    fluctuates: training stops ``patience`` epochs after the best epoch that followed the seed
    epochs, and the history says so."""
    patience, seed_epochs, epochs = 3, 2, 40
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a flow that barely moves is warned about
        params = nx.train_ai_sampler(
            jax.random.PRNGKey(0),
            potential_fn=mog2_potential,
            initial_position=jnp.zeros(2),
            swap=False,
            learning_rate=1e-12,
            epochs=epochs,
            seed_epochs=seed_epochs,
            patience=patience,
            **SMALL,
        )
    history = params.history
    assert history.stopped == "plateau"
    trained_rates = np.asarray(history.accept_rates[seed_epochs:])
    assert len(history.accept_rates) < epochs
    # The first best epoch (a tie is no progress) is the last to have beaten the others.
    assert len(trained_rates) - 1 - int(np.argmax(trained_rates)) == patience
    np.testing.assert_array_equal(np.isnan(history.accept_rates[1:seed_epochs]), True)


def test_training_stops_once_the_acceptance_has_collapsed_below_its_best():
    """A learning rate far too large spoils the flow in the first seed epoch: the bootstrap
    acceptance falls from the untrained flow's to zero and stays there, so training stops
    ``DECLINE_PATIENCE`` bootstrap epochs later instead of running all its epochs."""
    epochs, seed_epochs = 40, 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the kept flow accepts little and is warned about
        params = nx.train_ai_sampler(
            jax.random.PRNGKey(0),
            potential_fn=mog2_potential,
            initial_position=jnp.zeros(2),
            swap=False,
            learning_rate=1.0,
            epochs=epochs,
            seed_epochs=seed_epochs,
            **SMALL,
        )
    history = params.history
    rates = np.asarray(history.accept_rates)
    assert history.stopped == "declined"
    assert rates[0] >= DECLINE_MIN_BEST
    np.testing.assert_array_equal(rates[seed_epochs:] < DECLINE_FRACTION * rates[0], True)
    assert len(rates) == seed_epochs + DECLINE_PATIENCE < epochs


def test_the_decline_count_restarts_when_the_acceptance_recovers():
    count = 0
    for rate in (0.3, 0.1, 0.1, 0.2):
        count = declined_epochs(count, rate, best_rate=0.3)
    assert count == 0
    # Before the best reaches DECLINE_MIN_BEST, a low acceptance is no decline.
    assert declined_epochs(4, 0.0, best_rate=0.05) == 0


@pytest.mark.parametrize("swap", [None, True], ids=["tested on the seed draws", "forced"])
def test_a_start_that_already_accepts_well_is_kept_untrained(swap):
    """On a Gaussian target the swap start accepts most proposals: training ends before any
    update, measured on the seed draws when the start is chosen there, else by the first
    bootstrap epoch. The flow kept is the untrained swap, and the history says so."""
    params = nx.train_ai_sampler(
        jax.random.PRNGKey(0),
        potential_fn=lambda x: 0.5 * jnp.sum(x**2),
        initial_position=jnp.zeros(3),
        swap=swap,
        **SMALL,
    )
    history = params.history
    assert history.stopped == "start accepted"
    assert len(history.accept_rates) == 1 and history.accept_rates[0] >= SWAP_ACCEPTANCE
    assert np.isnan(history.kernel_losses[0]) and np.isnan(history.discriminator_losses[0])
    states = jax.random.normal(jax.random.PRNGKey(1), (100, 6))
    np.testing.assert_allclose(
        involution(params, states)[:, :3], swap_involution(params, states)[:, :3], atol=1e-5
    )
