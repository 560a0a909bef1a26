"""Training the Ai-sampler on mog2 (the paper's 2-D benchmark, the reference code's recipe):
the trained kernel switches modes where HMC never does, stays exact, and saves and loads."""

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
from numpyro_extras.involutive.networks import InvolutionConfig, init_proposal, involution
from numpyro_extras.involutive.training import (
    FALLBACK_SWAP_PROBABILITY,
    MAX_MIXING_RHAT,
    SWAP_ACCEPTANCE,
    TrainingSettings,
    _mixing_checked,
    _mixing_rhat,
    _standardization,
    _swap_acceptance,
)

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


def _check_starts():
    return jnp.tile(MEANS, (4, 1))


def test_mixing_check_warns_for_a_kernel_that_never_crosses_between_modes():
    """An untrained map on unit scale moves by about one unit, and the swap from N(0, I) never
    reaches modes five units out: chains started in mog2's two modes stay in them, and the
    check after training warns. (The trained fixture above passes it without a warning.)"""
    proposal = init_proposal(jax.random.PRNGKey(0), InvolutionConfig(dimension=2, swap=False))
    with pytest.warns(UserWarning, match="does not move between the regions its 8 NUTS seed"):
        _mixing_checked(
            proposal, mog2_potential, _check_starts(), jax.random.PRNGKey(1), TrainingSettings()
        )


def test_mixing_check_mixes_in_the_swap_when_the_map_does_not_cross():
    """A map that never crosses between the modes, with a standardisation that spans both (as
    the seed draws' fit does when the seed chains found both): its chains disagree, the swap
    from that fit crosses, so the check keeps half the steps for it and does not warn. With
    every ``V = 0`` the map is ``u -> -u`` in standardised coordinates, here
    ``(x1, x2) -> (-x1, 6 - x2)``, which sends a mode to empty space: always rejected."""
    proposal = init_proposal(
        jax.random.PRNGKey(0),
        InvolutionConfig(dimension=2, swap=False),
        loc=jnp.array([0.0, 3.0]),
        scale=jnp.array([5.0, 3.0]),
    )
    proposal = proposal.replace(params=jax.tree.map(jnp.zeros_like, proposal.params))
    settings = TrainingSettings()
    starts, key = _check_starts(), jax.random.PRNGKey(1)
    # NaN: chains that never move have no within-chain variance
    assert not _mixing_rhat(proposal, mog2_potential, starts, key, settings) <= MAX_MIXING_RHAT
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checked = _mixing_checked(proposal, mog2_potential, starts, key, settings)
    assert checked.config.swap_probability == FALLBACK_SWAP_PROBABILITY
    assert _mixing_rhat(checked, mog2_potential, starts, key, settings) <= MAX_MIXING_RHAT


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
    # Its map crosses between the modes on its own: no swap is mixed in.
    assert trained.config.swap_probability == 0.0
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

    # HMC with the paper's fixed trajectory never leaves the mode it starts in.
    init_fn, sample_fn = hmc(potential_fn=mog2_potential, algo="HMC")
    state = init_fn(MEANS[0], num_warmup=0, step_size=0.05, num_steps=40, adapt_step_size=False)
    sample = jax.jit(sample_fn)
    signs = []
    for _ in range(300):
        state = sample(state)
        signs.append(float(state.z[0]) < 0)
    assert nx.mode_switch_rate(np.array(signs, int)) < 0.01


def test_save_and_load_round_trip(trained, tmp_path):
    path = tmp_path / "mog2.msgpack"
    nx.save_involution(path, trained)
    loaded = nx.load_involution(path)
    assert loaded.config == trained.config and loaded.sites == trained.sites
    assert loaded.history.accept_rates == pytest.approx(trained.history.accept_rates, nan_ok=True)
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
