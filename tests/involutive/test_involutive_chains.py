"""The Ai-sampler's core transition, run without NumPyro: pairwise detailed balance, and
exactness of an untrained kernel (for any parameters M is an involution with unit Jacobian, so
eq. 3 is exact)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.diagnostics import effective_sample_size

from numpyro_extras.involutive.chains import (
    InvolutiveInfo,
    InvolutiveState,
    build_kernel,
    extended_energy,
    init,
    involutive_proposal,
)
from numpyro_extras.involutive.networks import InvolutionConfig, init_proposal, involution
from numpyro_extras.model.bases import MixtureBase

VARIANCES = jnp.array([1.0, 4.0])


def _potential(x):
    return 0.5 * jnp.sum(x**2 / VARIANCES, axis=-1)


def _untrained():
    # The paper's plain flow with Glorot-normal V: a nonlinear map, unlike the swap start.
    return init_proposal(jax.random.PRNGKey(0), InvolutionConfig(dimension=2, swap=False))


def test_pairwise_detailed_balance():
    """p(s) a(s -> M s) = p(M s) a(M s -> s) for the extended target p(x) N(v; 0, I)."""
    proposal = _untrained()
    states = 2.0 * jax.random.normal(jax.random.PRNGKey(1), (200, 4), jnp.float64)
    images = involution(proposal, states)

    def log_density(state):
        return -extended_energy(_potential(state[..., :2]), state[..., 2:])

    forward = jnp.minimum(0.0, log_density(images) - log_density(states))
    backward = jnp.minimum(0.0, log_density(states) - log_density(images))
    np.testing.assert_allclose(
        log_density(states) + forward, log_density(images) + backward, rtol=1e-9, atol=1e-9
    )
    # The moves are not trivial: some are rejected, some accepted.
    assert 0.05 < float(jnp.mean(jnp.exp(forward))) < 0.95


def _run(kernel, num_chains=64, num_steps=20_000, burn_in=2_000):
    """``num_chains`` chains of ``kernel(rng_key, state) -> (state, info)`` from the origin:
    their draws after ``burn_in`` and the mean acceptance of each chain."""
    states = jax.vmap(lambda _: init(jnp.zeros(2), _potential))(jnp.arange(num_chains))
    keys = jax.random.split(jax.random.PRNGKey(2), num_steps)

    @jax.jit
    def run(states):
        def transition(states, key):
            states, info = jax.vmap(kernel)(jax.random.split(key, num_chains), states)
            return states, (states.position, info.accept_prob)

        return jax.lax.scan(transition, states, keys)

    _, (positions, accept_probs) = run(states)
    draws = np.swapaxes(np.asarray(positions[burn_in:]), 0, 1)
    return draws, np.asarray(accept_probs[burn_in:]).mean(0)


def _z_scores(draws):
    """z-scores of the mean and of the second moment against N(0, diag(1, 4)), each with its
    Monte Carlo error from NumPyro's ESS (of x, and of x^2: an antithetic chain's ESS of x can
    exceed the number of draws)."""
    mean_ess = effective_sample_size(draws)
    square_ess = effective_sample_size(draws**2)
    variances = np.asarray(VARIANCES)
    mean_z = draws.mean((0, 1)) / np.sqrt(variances / mean_ess)
    second_z = ((draws**2).mean((0, 1)) - variances) / np.sqrt(2 * variances**2 / square_ess)
    return mean_z, second_z, square_ess


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the always-accepting chain overflows
@pytest.mark.parametrize(
    "mixed_in", [None, "swap", "mixture"], ids=["learned map", "swap mixed in", "mixture mixed in"]
)
def test_untrained_kernel_is_exact_and_always_accepting_is_not(mixed_in):
    """Exact for the untrained map alone and for a state-independent choice between it and the
    plain swap, or independence proposals from a Gaussian mixture (a standardisation and a
    mixture that do not fit the target, so that no move is trivial)."""
    # The learned map alone standardises with the target's scales, so that its chains mix fast
    # enough for the ESS floor below whatever the key: unstandardised, x_2's moves are small
    # against its scale.
    proposal = _untrained().replace(scale=jnp.sqrt(VARIANCES))
    if mixed_in:
        # Wider than the target in both coordinates, so that the swap's independence-like moves
        # have heavier tails than the target (and the chain is geometrically ergodic), while
        # still not fitting it.
        config = dataclasses.replace(proposal.config, swap_probability=0.5)
        proposal = proposal.replace(
            config=config, loc=jnp.array([0.5, -0.5]), scale=jnp.array([1.5, 2.5])
        )
    if mixed_in == "mixture":
        mixture = MixtureBase(
            jnp.array([[-1.0, 0.0], [1.5, 0.5]]),
            jnp.stack([jnp.diag(jnp.array([1.0, 1.5])), jnp.diag(jnp.array([0.8, 2.5]))]),
            jnp.log(jnp.array([0.3, 0.7])),
            jnp.zeros(()),
        )
        proposal = proposal.replace(mixture=mixture)
    draws, accept_rates = _run(build_kernel(proposal, _potential))
    mean_z, second_z, square_ess = _z_scores(draws)
    assert np.all(square_ess > 1_500), square_ess
    assert 0.2 < float(np.mean(accept_rates)) < 0.9
    assert _passes(mean_z, second_z), (mean_z, second_z)

    def always_accept(rng_key, state):
        _, position, _ = involutive_proposal(rng_key, proposal, state.position)
        moved = InvolutiveState(position, _potential(position))
        return moved, InvolutiveInfo(jnp.ones(()), jnp.array(True), moved)

    draws, _ = _run(always_accept, num_chains=16, num_steps=5_000, burn_in=500)
    mean_z, second_z, _ = _z_scores(draws)
    assert not _passes(mean_z, second_z), (mean_z, second_z)


def _passes(mean_z, second_z):
    return bool(np.all(np.abs(mean_z) < 4) and np.all(np.abs(second_z) < 4))


def test_a_non_finite_proposal_is_rejected():
    proposal = _untrained()

    def potential(x):
        # Infinite on half of the plane: every proposal there must be rejected, never kept.
        return jnp.where(x[0] > 0.5, jnp.inf, _potential(x))

    state = init(jnp.zeros(2), potential)
    kernel = jax.jit(build_kernel(proposal, potential))
    rejected = 0
    for key in jax.random.split(jax.random.PRNGKey(3), 200):
        state, info = kernel(key, state)
        assert isinstance(info, InvolutiveInfo)
        assert np.isfinite(state.potential_energy)
        assert float(state.position[0]) <= 0.5
        if float(info.proposal.position[0]) > 0.5:
            rejected += 1
            assert not bool(info.is_accepted) and float(info.accept_prob) == 0.0
            assert float(info.proposal.potential_energy) == np.inf
    assert rejected > 0


def test_kernel_info_describes_the_transition():
    """``is_accepted`` says whether the state became ``info.proposal``, and the new state's
    energy is the potential at its position."""
    proposal = _untrained()
    kernel = jax.jit(build_kernel(proposal, _potential))
    state = init(jnp.array([0.3, -1.0]), _potential)
    moved = stayed = 0
    for key in jax.random.split(jax.random.PRNGKey(4), 100):
        new_state, info = kernel(key, state)
        expected = info.proposal if bool(info.is_accepted) else state
        np.testing.assert_array_equal(new_state.position, expected.position)
        np.testing.assert_allclose(new_state.potential_energy, _potential(new_state.position))
        assert 0.0 <= float(info.accept_prob) <= 1.0
        moved += bool(info.is_accepted)
        stayed += not bool(info.is_accepted)
        state = new_state
    assert moved > 0 and stayed > 0


def test_a_traced_share_of_independence_steps_runs_the_same_kernels():
    """One compiled kernel with a traced ``swap_probability``: at 0 its transitions are those of
    the learned map alone, at 0.5 those of the proposal whose configuration mixes in half of
    its steps from the mixture (the same keys, the same draws)."""
    mixture = MixtureBase(
        jnp.array([[-1.0, 0.0], [1.5, 0.5]]),
        jnp.stack([jnp.diag(jnp.array([1.0, 1.5])), jnp.diag(jnp.array([0.8, 2.5]))]),
        jnp.log(jnp.array([0.3, 0.7])),
        jnp.zeros(()),
    )
    plain = _untrained()
    with_mixture = plain.replace(mixture=mixture)
    half = with_mixture.replace(config=dataclasses.replace(plain.config, swap_probability=0.5))

    @jax.jit
    def traced_step(keys, states, swap_probability):
        kernel = build_kernel(with_mixture, _potential, swap_probability)
        return jax.vmap(kernel)(keys, states)

    keys = jax.random.split(jax.random.PRNGKey(5), 256)
    starts = jax.random.normal(jax.random.PRNGKey(6), (256, 2))
    states = jax.vmap(lambda x: init(x, _potential))(starts)
    for share, reference in ((0.0, plain), (0.5, half)):
        new_states, info = traced_step(keys, states, share)
        expected, expected_info = jax.vmap(build_kernel(reference, _potential))(keys, states)
        np.testing.assert_allclose(new_states.position, expected.position, rtol=1e-12)
        np.testing.assert_array_equal(info.is_accepted, expected_info.is_accepted)
        np.testing.assert_allclose(info.accept_prob, expected_info.accept_prob, rtol=1e-9)
    # At 0.5 some of the steps moved to a draw of the mixture: the two kernels differ.
    zero_share, _ = traced_step(keys, states, 0.0)
    assert not np.allclose(zero_share.position, new_states.position)
