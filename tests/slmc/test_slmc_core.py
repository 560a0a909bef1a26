"""The functional core of VAE-SLMC: the extended-space weights and acceptance against hand
computations, invariance of the target under a fixed (untrained) network, log Z against a closed
form, the exchange rule and the vectorised beta search."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from arviz import mcse
from numpyro.infer import MCMC
from scipy.stats import multivariate_normal, norm
from slmc_targets import correlated_gaussian

import numpyro_extras as nx
from numpyro_extras.slmc.annealing import (
    AnnealingHistory,
    AnnealingRung,
    candidate_betas,
    select_beta,
)
from numpyro_extras.slmc.chains import (
    SLMCInfo,
    build_kernel,
    draw_proposal,
    exchange_source,
    init,
    new_point,
    refresh_latent,
    shared_uniform_rates,
)
from numpyro_extras.slmc.vae import (
    VAEConfig,
    decode,
    encode,
    init_proposal,
    sample_extended,
    standardize,
    train_vae,
    vae_loss,
)

MEAN = np.array([1.0, -0.5])
COVARIANCE = np.array([[1.5**2, 0.6], [0.6, 0.7**2]])
PRECISION = np.linalg.inv(COVARIANCE)
LOG_OFFSET = 1.3  # log p~(x) = log N(x; MEAN, COVARIANCE) + LOG_OFFSET, so log Z = LOG_OFFSET


def gaussian_potential(x):
    centred = x - MEAN
    log_norm = -0.5 * np.log(np.linalg.det(2 * np.pi * COVARIANCE))
    return 0.5 * centred @ PRECISION @ centred - log_norm - LOG_OFFSET


def log_density(x):
    return -gaussian_potential(x)


def two_d_config(sizes, **network):
    """A VAE for the 2-D Gaussian with hidden widths ``sizes`` in both halves."""
    return VAEConfig(dimension=2, latent_dim=2, encoder_sizes=sizes, decoder_sizes=sizes, **network)


def broad_proposal(seed=0, decoder_scale=0.8):
    """An untrained network whose proposal is broad enough to cover the Gaussian target."""
    config = two_d_config((8,), decoder_scale=decoder_scale)
    return init_proposal(
        jax.random.PRNGKey(seed), config, loc=jnp.array([0.5, 0.0]), scale=jnp.array([2.0, 1.2])
    )


def learned_whitened_proposal(seed=0):
    """An untrained network with a learned (here: set by hand) decoder noise per coordinate and
    a whitening standardisation, broad enough to cover the Gaussian target."""
    config = two_d_config((8,), learn_decoder_scale=True, whiten=True)
    whitening = jnp.array([[2.0, 0.0], [0.9, 1.1]])
    proposal = init_proposal(
        jax.random.PRNGKey(seed), config, loc=jnp.array([0.5, 0.0]), scale=whitening
    )
    params = {**proposal.params, "decoder_log_var": jnp.log(jnp.array([0.9, 0.5]))}
    return proposal.replace(params=params)


def hand_log_weight(proposal, x, z, beta=1.0):
    """beta log p~(x) + log r(z | x) - log q(x, z), with scipy densities."""
    mean, log_var = (np.asarray(a) for a in encode(proposal, x))
    log_r = norm.logpdf(z, mean, np.exp(0.5 * log_var)).sum()
    centre = np.asarray(decode(proposal, z))
    noise_sd = np.asarray(proposal.scale) * proposal.config.decoder_scale
    log_q = norm.logpdf(z).sum() + norm.logpdf(x, centre, noise_sd).sum()
    return beta * float(log_density(x)) + log_r - log_q


def test_extended_weight_and_acceptance_match_hand_computation():
    proposal = broad_proposal()
    x, z = jnp.array([0.3, -1.1]), jnp.array([0.4, -0.2])
    point = new_point(proposal, "exact", log_density, x, z)
    assert float(point.log_weight(0.7)) == pytest.approx(hand_log_weight(proposal, x, z, 0.7))

    key = jax.random.PRNGKey(3)
    refresh_key, proposal_key, _ = jax.random.split(key, 3)
    refreshed = refresh_latent(refresh_key, point, proposal, "exact")
    proposed = draw_proposal(proposal_key, proposal, "exact", log_density)
    for beta in (0.3, 1.0):
        _, info = build_kernel(proposal, log_density)(key, point, beta)
        accept_prob = info.accept_prob
        np.testing.assert_allclose(info.proposal.position, proposed.position)
        hand_ratio = hand_log_weight(
            proposal, proposed.position, proposed.latent, beta
        ) - hand_log_weight(proposal, x, refreshed.latent, beta)
        assert float(accept_prob) == pytest.approx(min(1.0, np.exp(hand_ratio)), rel=1e-9)


def test_learned_noise_and_whitening_weight_match_hand_computation():
    """With a whitening factor L and decoder noise s, q(x | z) = N(x; loc + L Dec(z),
    L diag(s^2) L^T), and r sees u = L^-1 (x - loc)."""
    proposal = learned_whitened_proposal()
    whitening = np.asarray(proposal.scale)
    noise_variance = np.exp(np.asarray(proposal.params["decoder_log_var"]))
    x, z = jnp.array([0.3, -1.1]), jnp.array([0.4, -0.2])
    u = np.linalg.solve(whitening, np.asarray(x) - np.asarray(proposal.loc))
    np.testing.assert_allclose(standardize(proposal, x), u, rtol=1e-6)
    mean, log_var = (np.asarray(a) for a in encode(proposal, x))
    log_r = norm.logpdf(z, mean, np.exp(0.5 * log_var)).sum()
    log_q = norm.logpdf(z).sum() + multivariate_normal(
        np.asarray(decode(proposal, z)), whitening @ np.diag(noise_variance) @ whitening.T
    ).logpdf(np.asarray(x))
    point = new_point(proposal, "exact", log_density, x, z)
    hand = 0.7 * float(log_density(x)) + log_r - log_q
    assert float(point.log_weight(0.7)) == pytest.approx(hand, rel=1e-6)
    # the extended proposal draws x from that Gaussian given z
    keys = jax.random.split(jax.random.PRNGKey(5), 100_000)
    draws, latents = jax.vmap(lambda key: sample_extended(key, proposal))(keys)
    residuals = np.asarray(draws - jax.vmap(lambda latent: decode(proposal, latent))(latents))
    expected = whitening @ np.diag(noise_variance) @ whitening.T
    np.testing.assert_allclose(np.cov(residuals, rowvar=False), expected, rtol=0.03, atol=0.02)


def test_isometric_acceptance_refuses_a_learned_decoder_noise():
    with pytest.raises(ValueError, match="fixed decoder noise"):
        nx.VAESLMC(
            potential_fn=gaussian_potential,
            proposal=learned_whitened_proposal(),
            acceptance="isometric",
        )


def test_learned_noise_is_the_reconstruction_error_and_whitening_decorrelates():
    """After training, s_d^2 is the mean squared reconstruction error of the data (with the
    calibration's reparameterisation noise), and the whitened data have unit covariance."""
    data = jax.random.multivariate_normal(jax.random.PRNGKey(5), MEAN, COVARIANCE, (2000,))
    config = two_d_config((16,), learn_decoder_scale=True, whiten=True)
    key = jax.random.PRNGKey(2)
    proposal, _ = jax.jit(
        lambda key, proposal, data: train_vae(
            key, proposal, data, epochs=20, batch_size=256, learning_rate=3e-3
        )
    )(key, init_proposal(jax.random.PRNGKey(0), config), data)
    u = np.asarray(standardize(proposal, data))
    np.testing.assert_allclose(np.cov(u, rowvar=False), np.eye(2), atol=1e-4)
    _, noise_key, _ = jax.random.split(key, 3)
    mean, log_var = encode(proposal, data)
    # train_vae works in single precision, and so draws this noise
    noise = jax.random.normal(noise_key, mean.shape, jnp.float32)
    latents = mean + jnp.exp(0.5 * log_var) * noise
    reconstruction = standardize(proposal, decode(proposal, latents))
    squared_error = np.mean((u - np.asarray(reconstruction)) ** 2, 0)
    np.testing.assert_allclose(
        np.exp(np.asarray(proposal.params["decoder_log_var"])), squared_error, rtol=1e-3
    )


def test_several_latents_weight_and_acceptance_match_hand_computation():
    """With K latents log W = beta log p~(x) - log mean_k q(x, z_k) / r(z_k | x)."""
    proposal = broad_proposal()
    x = jnp.array([0.3, -1.1])
    latents = jnp.array([[0.4, -0.2], [-1.0, 0.3], [0.1, 0.9]])

    def hand_several(position, several, beta):
        per_latent = np.array(
            [hand_log_weight(proposal, position, z, 0.0) for z in np.asarray(several)]
        )
        log_mean_q_over_r = np.log(np.mean(np.exp(-per_latent)))
        return beta * float(log_density(position)) - log_mean_q_over_r

    point = new_point(proposal, "exact", log_density, x, latents)
    assert float(point.log_weight(0.7)) == pytest.approx(hand_several(x, latents, 0.7))
    key = jax.random.PRNGKey(4)
    refresh_key, proposal_key, _ = jax.random.split(key, 3)
    refreshed = refresh_latent(refresh_key, point, proposal, "exact")
    proposed = draw_proposal(proposal_key, proposal, "exact", log_density, num_latents=3)
    assert refreshed.latent.shape == proposed.latent.shape == (3, 2)
    # the first latent generates x', the others are encoder draws at x'
    np.testing.assert_allclose(
        proposed.position,
        draw_proposal(proposal_key, proposal, "exact", log_density).position,
    )
    accept_prob = build_kernel(proposal, log_density)(key, point)[1].accept_prob
    hand_ratio = hand_several(proposed.position, proposed.latent, 1.0) - hand_several(
        x, refreshed.latent, 1.0
    )
    assert float(accept_prob) == pytest.approx(min(1.0, np.exp(hand_ratio)), rel=1e-9)


def test_isometric_density_matches_eq_12():
    proposal = broad_proposal()
    x = jnp.array([0.3, -1.1])
    mean, log_var = (np.asarray(a) for a in encode(proposal, x))
    beta_vae = proposal.config.beta_vae
    hand = (
        -0.5 * mean @ mean
        - np.log(2 * np.pi)
        + 0.5 * log_var.sum()
        - np.log(beta_vae / 2)
        - np.log(np.asarray(proposal.scale)).sum()
    )
    point = new_point(proposal, "isometric", log_density, x, jnp.zeros(2))
    assert float(point.correction) == pytest.approx(-hand)


def test_non_finite_proposal_is_a_rejection():
    proposal = broad_proposal()
    point = new_point(proposal, "exact", log_density, jnp.array([0.3, -1.1]), jnp.zeros(2))
    moved, info = build_kernel(proposal, lambda x: jnp.nan)(jax.random.PRNGKey(0), point)
    assert not bool(info.is_accepted) and float(info.accept_prob) == 0.0
    assert float(info.proposal.log_weight(1.0)) == -np.inf
    np.testing.assert_array_equal(moved.position, point.position)


@pytest.mark.parametrize(
    "num_latents, make_proposal",
    [(1, broad_proposal), (4, broad_proposal), (4, learned_whitened_proposal)],
    ids=["one latent", "four latents", "four latents, learned noise, whitened"],
)
def test_one_move_from_the_target_stays_on_it(num_latents, make_proposal):
    """Exact invariance, without autocorrelation: independent states drawn from the target (and
    their latents from the encoder) are still target draws after one move, for any network."""
    proposal = make_proposal()
    num_states = 200_000
    kernel = build_kernel(proposal, log_density)

    def one_move(position, rng_key):
        refresh_key, move_key = jax.random.split(rng_key)
        point = init(position, log_density, proposal, refresh_key, num_latents=num_latents)
        moved, info = kernel(move_key, point)
        return moved.position, info.accept_prob

    starts = jax.random.multivariate_normal(jax.random.PRNGKey(1), MEAN, COVARIANCE, (num_states,))
    moved, accept_prob = jax.jit(jax.vmap(one_move))(
        starts, jax.random.split(jax.random.PRNGKey(2), num_states)
    )
    moved = np.asarray(moved)
    assert float(np.mean(accept_prob)) > 0.05
    for statistic, truth in (
        (moved[:, 0], MEAN[0]),
        (moved[:, 1], MEAN[1]),
        (moved[:, 0] ** 2, MEAN[0] ** 2 + COVARIANCE[0, 0]),
        (moved[:, 0] * moved[:, 1], MEAN[0] * MEAN[1] + COVARIANCE[0, 1]),
    ):
        assert abs(statistic.mean() - truth) < 4 * statistic.std() / np.sqrt(num_states)


def test_the_core_runs_a_chain_and_estimates_log_z_without_mcmc():
    """``init`` and ``build_kernel``'s kernel alone, scanned: the draws have the target's
    moments and the proposals' importance weights give log Z, each within Monte Carlo error."""
    proposal = broad_proposal()
    kernel = build_kernel(proposal, log_density)
    num_chains, num_steps = 4, 20_000

    def chain(rng_key):
        init_key, run_key = jax.random.split(rng_key)
        state = init(jnp.asarray(MEAN), log_density, proposal, init_key)

        def step(state, key):
            state, info = kernel(key, state)
            return state, (state.position, info.proposal.log_weight(1.0), info.is_accepted)

        return jax.lax.scan(step, state, jax.random.split(run_key, num_steps))[1]

    draws, log_weights, accepted = jax.jit(jax.vmap(chain))(
        jax.random.split(jax.random.PRNGKey(7), num_chains)
    )
    draws = np.asarray(draws)
    assert 0.05 < float(np.mean(accepted)) < 0.95
    for statistic, truth in (
        (draws[..., 0], MEAN[0]),
        (draws[..., 1], MEAN[1]),
        (draws[..., 0] ** 2, MEAN[0] ** 2 + COVARIANCE[0, 0]),
    ):
        error = float(mcse(statistic))
        assert error < 0.05 * statistic.std()  # an effective sample size above 400
        assert abs(statistic.mean() - truth) < 4 * error
    # The proposals are independent draws of q: their weights' mean is an unbiased estimate of
    # Z, and the delta method gives the standard error of its log.
    weights = np.exp(np.asarray(log_weights, np.float64).ravel() - LOG_OFFSET)
    log_z = LOG_OFFSET + np.log(weights.mean())
    stderr = weights.std() / weights.mean() / np.sqrt(weights.size)
    assert stderr < 0.05
    assert abs(log_z - LOG_OFFSET) < 4 * stderr


def test_kernel_info_describes_the_transition():
    proposal = broad_proposal()
    point = init(jnp.array([0.3, -1.1]), log_density, proposal, jax.random.PRNGKey(1))
    for seed in range(10):
        moved, info = build_kernel(proposal, log_density)(jax.random.PRNGKey(seed), point)
        assert isinstance(info, SLMCInfo)
        expected = info.proposal if bool(info.is_accepted) else point
        np.testing.assert_array_equal(moved.position, expected.position)
        np.testing.assert_array_equal(moved.log_density, expected.log_density)
        assert 0.0 <= float(info.accept_prob) <= 1.0


@pytest.fixture(scope="module", params=[1, 4], ids=["one latent", "four latents"])
def gaussian_run(request):
    kernel = nx.VAESLMC(
        potential_fn=gaussian_potential, proposal=broad_proposal(), num_latents=request.param
    )
    mcmc = MCMC(
        kernel,
        num_warmup=200,
        num_samples=10_000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0))
    return mcmc


def test_fixed_untrained_network_leaves_target_invariant(gaussian_run):
    draws = np.asarray(gaussian_run.get_samples(group_by_chain=True))
    accept = float(np.mean(gaussian_run.get_extra_fields()["accept_prob"]))
    assert 0.05 < accept < 0.95  # the network is poor but the chain moves
    for statistic, truth in (
        (draws, MEAN),
        (draws**2, MEAN**2 + np.diag(COVARIANCE)),
        (draws[..., 0] * draws[..., 1], MEAN[0] * MEAN[1] + COVARIANCE[0, 1]),
    ):
        statistic = statistic.reshape(statistic.shape[:2] + (-1,))
        truth = np.atleast_1d(truth)
        for i in range(statistic.shape[-1]):
            error = float(mcse(statistic[..., i]))
            assert abs(statistic[..., i].mean() - truth[i]) < 4 * error
    evidence = nx.log_marginal_likelihood(gaussian_run, warn=False)
    assert abs(evidence.log_z - LOG_OFFSET) < 4 * evidence.stderr


def test_init_estimates_a_given_proposals_acceptance_rate_optimistically(gaussian_run):
    """The rate estimated at init from 1000 of the proposal's importance weights stands in the
    reweighted proposals for the posterior, so it is optimistic: at least the chains' rate."""
    observed = float(np.mean(gaussian_run.get_extra_fields()["accept_prob"]))
    assert observed <= gaussian_run.sampler.expected_accept_rate < observed + 0.1


def test_a_proposal_blind_to_the_correlations_warns_at_init():
    """A proposal with the right marginal variances but no correlation, on a Gaussian with
    condition number 1e4: the chains hardly move, and init says so."""
    model, covariance, _ = correlated_gaussian(6)
    config = VAEConfig(
        dimension=6, latent_dim=6, encoder_sizes=(8,), decoder_sizes=(8,), learn_decoder_scale=True
    )
    proposal = init_proposal(jax.random.PRNGKey(0), config, sites=(("x", (6,)),))
    marginal_log_var = jnp.log(jnp.diag(covariance)).astype(jnp.float32)
    proposal = proposal.replace(params={**proposal.params, "decoder_log_var": marginal_log_var})
    kernel = nx.VAESLMC(model, proposal=proposal)
    mcmc = MCMC(
        kernel,
        num_warmup=100,
        num_samples=1000,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    with pytest.warns(UserWarning, match="expected acceptance rate on this target is"):
        mcmc.run(jax.random.PRNGKey(0))
    observed = float(np.mean(mcmc.get_extra_fields()["accept_prob"]))
    assert observed <= kernel.expected_accept_rate < 0.01


def test_a_proposal_narrower_than_the_target_warns_of_its_heavy_weight_tail():
    """A proposal a third as wide as the target meets its tails only with rare, huge weights:
    the Pareto k of the weights says so (the broad proposal's pass, in the test above)."""
    config = two_d_config((8,), decoder_scale=0.3)
    narrow = init_proposal(
        jax.random.PRNGKey(0), config, loc=jnp.asarray(MEAN), scale=jnp.array([0.5, 0.25])
    )
    mcmc = MCMC(
        nx.VAESLMC(potential_fn=gaussian_potential, proposal=narrow),
        num_warmup=100,
        num_samples=2000,
        num_chains=2,
        progress_bar=False,
        chain_method="vectorized",
    )
    mcmc.run(jax.random.PRNGKey(3), init_params=jnp.tile(jnp.asarray(MEAN), (2, 1)))
    with pytest.warns(UserWarning, match="Pareto k"):
        evidence = nx.log_marginal_likelihood(mcmc)
    assert evidence.pareto_k > 0.7


def test_what_the_training_found_wrong_is_a_problem_of_every_log_z():
    """The training's final check is warned of once, at training; every run of the proposal
    then lists it among its estimate's problems, as the tempering kernels list their base
    fit's. Its weights can look fine where its draws sat in the wrong region throughout."""
    found = "the trained VAE proposal's draws at beta = 1.0 are not where the target's mass is"
    history = AnnealingHistory(
        rungs=(AnnealingRung(0, 0, 1.0, float("nan"), False, 1.5, float("nan")),),
        num_models=1,
        final_accept_rates=(0.4,),
        final_log_z=(1.2,),
        chosen_model=0,
        ar_min=0.1,
        problems=(found,),
    )
    config = two_d_config((8,))
    proposal = init_proposal(
        jax.random.PRNGKey(0), config, loc=jnp.asarray(MEAN), scale=jnp.array([2.0, 1.0])
    ).replace(history=history)
    mcmc = MCMC(
        nx.VAESLMC(potential_fn=gaussian_potential, proposal=proposal),
        num_warmup=50,
        num_samples=500,
        num_chains=2,
        progress_bar=False,
        chain_method="vectorized",
    )
    mcmc.run(jax.random.PRNGKey(0), init_params=jnp.tile(jnp.asarray(MEAN), (2, 1)))
    with pytest.warns(UserWarning, match="not where the target's mass is"):
        evidence = nx.log_marginal_likelihood(mcmc)
    assert found in evidence.problems


@pytest.mark.parametrize(
    "network, min_ess",
    [
        (dict(), 2000),
        (dict(learn_decoder_scale=True), 2000),
        # whitened, the Gaussian target needs no latent: the proposal is the target itself
        (dict(learn_decoder_scale=True, whiten=True), 9000),
    ],
    ids=["paper", "learned noise", "learned noise, whitened"],
)
def test_log_z_against_closed_form(network, min_ess):
    """With a network trained on the target (the default beta_VAE), the proposals' weights give
    log Z within 4 stderr, a small stderr, and a light tail."""
    data = jax.random.multivariate_normal(jax.random.PRNGKey(5), MEAN, COVARIANCE, (4000,))
    config = two_d_config((16, 16), **network)
    proposal = init_proposal(jax.random.PRNGKey(0), config)
    proposal, losses = jax.jit(
        lambda key, proposal, data: train_vae(
            key, proposal, data, epochs=100, batch_size=256, learning_rate=3e-3
        )
    )(jax.random.PRNGKey(2), proposal, data)
    assert losses[-1] < losses[0]
    kernel = nx.VAESLMC(potential_fn=gaussian_potential, proposal=proposal)
    mcmc = MCMC(
        kernel,
        num_warmup=100,
        num_samples=5000,
        num_chains=2,
        progress_bar=False,
        chain_method="vectorized",
    )
    mcmc.run(jax.random.PRNGKey(1))
    evidence = nx.log_marginal_likelihood(mcmc)
    assert evidence.log_weights.shape == (2, 5000)
    assert evidence.ess > min_ess
    assert evidence.stderr < 0.02
    assert abs(evidence.log_z - LOG_OFFSET) < 4 * evidence.stderr
    assert evidence.pareto_k < 0.5  # a light tail: the standard error can be trusted


def two_d_training(key, proposal, data, **settings):
    """``train_vae`` with the batches, learning rate and held-out share of these tests."""
    return train_vae(
        key,
        proposal,
        data,
        batch_size=256,
        learning_rate=3e-3,
        validation_fraction=0.2,
        **settings,
    )


def test_early_stopping_follows_the_held_out_rule():
    """Training stops at the first epoch where the held-out loss has gone ``patience`` epochs
    without falling ``tolerance`` (relative) below its last improvement, and returns the
    parameters of the lowest held-out loss, not the last ones."""
    data = jax.random.multivariate_normal(jax.random.PRNGKey(5), MEAN, COVARIANCE, (2000,))
    config = two_d_config((16, 16))
    key, patience, tolerance, epochs = jax.random.PRNGKey(2), 5, 0.01, 300
    proposal, losses = jax.jit(
        lambda key, proposal, data: two_d_training(
            key, proposal, data, epochs=epochs, patience=patience, tolerance=tolerance
        )
    )(key, init_proposal(jax.random.PRNGKey(0), config), data)
    losses = np.asarray(losses)
    run = int(np.isfinite(losses).sum())
    assert patience < run < epochs
    assert np.all(np.isfinite(losses[:run])) and np.all(np.isnan(losses[run:]))
    anchor, wait = np.inf, 0
    for epoch, loss in enumerate(losses[:run]):
        if loss < anchor - tolerance * abs(anchor) or epoch == 0:
            anchor, wait = loss, 0
        else:
            wait += 1
        assert (wait >= patience) == (epoch == run - 1)
    # The held-out points and noise, drawn as train_vae draws them.
    split_key, noise_key, _ = jax.random.split(key, 3)
    points = standardize(proposal, data).astype(jnp.float32)
    held_out = points[jax.random.permutation(split_key, points.shape[0])][:400]
    returned_loss = float(vae_loss(proposal.params, proposal, held_out, noise_key))
    assert returned_loss == pytest.approx(losses[:run].min(), rel=1e-4)
    assert losses[:run].min() < losses[run - 1]


def test_one_compiled_training_serves_lengths_stopping_rules_and_noises():
    """``epochs``, ``patience`` and ``fixed_noise`` are data of the compiled training: one
    program runs a training of any length, with or without early stopping, with the learned
    or eq. 2's fixed noise."""
    data = jax.random.multivariate_normal(jax.random.PRNGKey(5), MEAN, COVARIANCE, (1000,))
    proposal = init_proposal(jax.random.PRNGKey(0), two_d_config((8,), learn_decoder_scale=True))
    trained = jax.jit(
        lambda key, proposal, data, epochs, patience, fixed_noise: two_d_training(
            key,
            proposal,
            data,
            epochs=epochs,
            patience=patience,
            max_epochs=12,
            fixed_noise=fixed_noise,
        )
    )
    key = jax.random.PRNGKey(2)
    for epochs, patience, fixed_noise in ((5, 0, False), (12, 2, False), (3, 0, True)):
        result, losses = trained(key, proposal, data, epochs, patience, fixed_noise)
        losses = np.asarray(losses)
        run = int(np.isfinite(losses).sum())
        assert losses.shape == (12,) and np.all(np.isnan(losses[run:]))
        assert run == epochs if patience == 0 else 2 < run <= epochs
        noise = np.asarray(result.params["decoder_log_var"])
        initial_noise = np.asarray(proposal.params["decoder_log_var"])
        # a fixed-noise training leaves the learned noise as it was
        assert np.array_equal(noise, initial_noise) == fixed_noise
    assert trained._cache_size() == 1


def test_fixed_noise_training_is_eq_2s_training():
    """With ``fixed_noise`` a model with a learned decoder scale trains its networks exactly as
    the same networks with eq. 2's fixed noise do."""
    data = jax.random.multivariate_normal(jax.random.PRNGKey(5), MEAN, COVARIANCE, (600,))
    learned = init_proposal(jax.random.PRNGKey(0), two_d_config((8,), learn_decoder_scale=True))
    fixed = init_proposal(jax.random.PRNGKey(0), two_d_config((8,), learn_decoder_scale=False))
    settings = dict(epochs=4, batch_size=128, learning_rate=3e-3, patience=2)
    key = jax.random.PRNGKey(3)
    from_learned, learned_losses = train_vae(key, learned, data, fixed_noise=True, **settings)
    from_fixed, fixed_losses = train_vae(key, fixed, data, **settings)
    np.testing.assert_allclose(learned_losses, fixed_losses, rtol=1e-6)
    for part in ("encoder", "decoder"):
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
            from_learned.params[part],
            from_fixed.params[part],
        )


def test_exchange_rule():
    key = jax.random.PRNGKey(0)
    equal = jnp.array([0.4, 0.4, 0.4])
    for k in jax.random.split(key, 20):
        source, prob = exchange_source(k, equal, jnp.array([-1.0, -50.0, 3.0]))
        assert float(prob) == 1.0 and sorted(np.asarray(source).tolist()) == [0, 1, 2]
        assert (np.asarray(source) != np.arange(3)).sum() == 2
    # The colder model holds the better state: beta_0 - beta_1 = -0.5, l1 - l0 = 2.
    source, prob = exchange_source(key, jnp.array([0.5, 1.0]), jnp.array([-3.0, -1.0]))
    assert float(prob) == pytest.approx(np.exp(-0.5 * 2.0))


def test_vectorised_search_equals_per_candidate_runs():
    rng = np.random.default_rng(0)
    density, correction = rng.normal(size=(2, 3, 50)) * 3
    start = rng.normal(size=(2, 3))
    uniforms = rng.uniform(size=(3, 50))
    betas = jnp.array([1.0, 0.6, 0.2])
    probs, fractions = shared_uniform_rates((density, correction), tuple(start), betas, uniforms)
    for beta, prob, fraction in zip(np.asarray(betas), probs, fractions, strict=True):
        accepted, total_prob = 0, 0.0
        for chain in range(3):
            current = beta * start[0, chain] + start[1, chain]
            for t in range(50):
                candidate = beta * density[chain, t] + correction[chain, t]
                p = min(1.0, np.exp(candidate - current))
                total_prob += p
                if uniforms[chain, t] < p:
                    accepted += 1
                    current = candidate
        assert float(prob) == pytest.approx(total_prob / 150)
        assert float(fraction) == pytest.approx(accepted / 150)


def test_beta_selection_rule():
    grid = candidate_betas(0.1, 1.0, 0.1)
    np.testing.assert_allclose(grid, [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    rates = np.linspace(0.05, 0.9, grid.size)  # falls as beta rises
    assert select_beta(grid, rates, 0.1, 0.3, 1.0) == pytest.approx(0.7)
    assert select_beta(grid, rates, 0.8, 0.3, 1.0) == 0.8  # none above 0.8 passes: retrain
    assert select_beta(grid, rates, 0.1, 0.4, 0.5) == pytest.approx(0.6)  # ar_max binds
    assert multivariate_normal(MEAN, COVARIANCE).logpdf(MEAN) == pytest.approx(
        float(log_density(jnp.asarray(MEAN))) - LOG_OFFSET
    )
