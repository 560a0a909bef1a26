"""The functional core of replica exchange: exact checks of the swap step, the ladder, the
prior path, the legs scored together and the scan of a batch of chains."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from exchange_targets import swap_matrix
from numpyro.infer.util import potential_energy

import numpyro_extras as nx
from numpyro_extras.exchange import equalized_ladder, even_odd_swap, initial_ladder
from numpyro_extras.exchange.chains import (
    FIT_LEG,
    PRIOR_LEG,
    batched_scan_step,
    hmc_moves,
    legged_hmc_moves,
    scan_step,
)
from numpyro_extras.exchange.core import ExchangeStatistics, swap_log_ratios, update_statistics
from numpyro_extras.exchange.ladder import communication_barrier, tuning_rounds
from numpyro_extras.exchange.path import prior_path, reference_path
from numpyro_extras.exchange.stabilized import stabilized_exchange
from numpyro_extras.model.potential import split_model
from numpyro_extras.shell.metropolis import acceptance_probability

# A three-point state space, a uniform reference and an l that makes the three tempered
# targets pi_beta(x) ~ exp(beta l(x)) differ.
LOG_LIKELIHOOD = np.array([0.0, 2.0, -1.5])
BETAS = np.array([0.0, 0.4, 1.0])


def _product_target(betas):
    """pi_0 x pi_1 x pi_2 over the 27 joint states, in itertools.product order."""
    marginals = [
        np.exp(beta * LOG_LIKELIHOOD) / np.exp(beta * LOG_LIKELIHOOD).sum() for beta in betas
    ]
    return np.array(
        [
            np.prod([m[s] for m, s in zip(marginals, states, strict=True)])
            for states in itertools.product(range(3), repeat=len(betas))
        ]
    )


def _swap_matrix(betas, parity):
    return swap_matrix(betas, LOG_LIKELIHOOD, parity)


@pytest.mark.parametrize("parity", [0, 1])
def test_swap_step_leaves_the_product_of_tempered_targets_invariant(parity):
    target = _product_target(BETAS)
    matrix = _swap_matrix(BETAS, parity)
    np.testing.assert_allclose(matrix.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(target @ matrix, target, atol=1e-12)
    # each half is reversible; their alternation (the non-reversible scheme) is not, but it
    # still leaves the product invariant
    flows = target[:, None] * matrix
    np.testing.assert_allclose(flows, flows.T, atol=1e-12)
    even_then_odd = _swap_matrix(BETAS, 0) @ _swap_matrix(BETAS, 1)
    np.testing.assert_allclose(target @ even_then_odd, target, atol=1e-12)
    flows = target[:, None] * even_then_odd
    assert np.max(np.abs(flows - flows.T)) > 1e-3


def test_even_odd_swap_follows_its_acceptance_probabilities():
    """The swap decided with random draws matches the exact probabilities within Monte Carlo
    error, and only offered gaps ever swap."""
    betas = jnp.array([0.0, 0.3, 0.6, 1.0])
    log_likelihood = jnp.array([-1.0, 0.5, -0.2, 1.0])
    keys = jax.random.split(jax.random.PRNGKey(0), 20000)
    for parity in (0, 1):
        sources, accept_prob = jax.vmap(
            lambda key, parity=parity: even_odd_swap(key, betas, log_likelihood, parity)
        )(keys)
        sources = np.asarray(sources)
        swapped_up = sources[:, :-1] == np.arange(1, 4)
        expected = np.asarray(accept_prob[0]) * (np.arange(3) % 2 == parity)
        stderr = np.sqrt(expected * (1 - expected) / len(keys)) + 1e-12
        assert np.all(np.abs(swapped_up.mean(0) - expected) < 4 * stderr + 1e-9)
        # a source is always a permutation
        assert np.all(np.sort(sources, axis=1) == np.arange(4))


def test_equal_temperatures_always_swap_and_non_finite_never_does():
    betas = jnp.array([0.0, 0.5, 0.5, 1.0])
    accept = acceptance_probability(swap_log_ratios(betas, jnp.array([3.0, -2.0, 7.0, 0.0])))
    assert float(accept[1]) == 1.0
    accept = acceptance_probability(
        swap_log_ratios(betas, jnp.array([-jnp.inf, 0.0, jnp.nan, 0.0]))
    )
    assert np.all(np.asarray(accept) == 0.0)


def test_equalized_ladder_equalises_rejection():
    betas = jnp.array([0.0, 0.5, 1.0])
    tuned = equalized_ladder(betas, jnp.array([0.9, 0.1]))
    # Lambda = [0, 0.1, 1.0]: the midpoint 0.5 lies in the second gap, 4/9 of the way
    np.testing.assert_allclose(np.asarray(tuned), [0.0, 0.5 + 0.5 * 4 / 9, 1.0])
    np.testing.assert_allclose(
        np.asarray(communication_barrier(jnp.array([0.9, 0.1]))), [0.0, 0.1, 1.0]
    )
    # a ladder already equalised stays put, and a tuned ladder is increasing
    ladder = initial_ladder(6)
    np.testing.assert_allclose(
        np.asarray(equalized_ladder(ladder, jnp.full(5, 0.7))), np.asarray(ladder), atol=1e-12
    )
    uneven = equalized_ladder(ladder, jnp.array([1.0, 0.99, 0.2, 0.5, 0.9]))
    assert np.all(np.diff(np.asarray(uneven)) > 0)
    assert list(tuning_rounds(1000)) == [8, 16, 32, 64, 128, 256, 512]
    assert list(tuning_rounds(10)) == []


def test_round_trips_count_reference_to_target_and_back():
    statistics = ExchangeStatistics(
        accept_sum=jnp.zeros(2),
        num_scans=jnp.zeros((), jnp.int32),
        replica_labels=jnp.arange(3, dtype=jnp.int32),
        last_end=jnp.array([0, -1, -1], jnp.int32),
        num_round_trips=jnp.zeros((), jnp.int32),
    )
    up, down, stay = jnp.array([1, 0, 2]), jnp.array([1, 0, 2]), jnp.arange(3)
    to_top = jnp.array([0, 2, 1])
    accept = jnp.zeros(2)
    # label 0 climbs rung 0 -> 1 -> 2, then back down to 0: one round trip
    for source in (up, to_top, stay, to_top, down):
        statistics = update_statistics(statistics, source, accept, True)
    assert int(statistics.replica_labels[0]) == 0
    assert int(statistics.num_round_trips) == 1


def _scale_model(y):
    s = numpyro.sample("s", dist.HalfNormal(2.0))
    m = numpyro.sample("m", dist.Normal(0.0, 3.0))
    numpyro.sample("y", dist.Normal(m, s), obs=y)
    numpyro.factor("pull", -0.5 * m**2)


def test_the_prior_path_tempers_observed_sites_and_factors_not_the_prior():
    """Replica beta targets log p0(x) + beta l(x) on the unconstrained space: p0 the latent
    sites with the Jacobians of their constraining transforms, untempered; l the observed sites
    and the factor terms. beta = 0 is the prior, beta = 1 the model's own potential."""
    y = jnp.array([0.3, -1.2, 2.0])
    split = split_model(jax.random.PRNGKey(0), _scale_model, (y,))
    path = prior_path(split)
    x = jnp.array([0.7, -0.4])
    values = split.unravel_fn(x)
    m, log_s = values["m"], values["s"]
    s = jnp.exp(log_s)
    log_prior = dist.Normal(0.0, 3.0).log_prob(m) + dist.HalfNormal(2.0).log_prob(s) + log_s
    log_likelihood = jnp.sum(dist.Normal(m, s).log_prob(y)) - 0.5 * m**2
    np.testing.assert_allclose(path.reference_potential_fn(x), -log_prior, rtol=1e-10)
    np.testing.assert_allclose(path.log_likelihood_fn(x), log_likelihood, rtol=1e-10)
    for beta in (0.0, 0.3, 1.0):
        np.testing.assert_allclose(
            path.potential_fn(beta)(x), -log_prior - beta * log_likelihood, rtol=1e-10
        )
    np.testing.assert_allclose(
        path.potential_fn(1.0)(x), potential_energy(_scale_model, (y,), {}, values), rtol=1e-10
    )
    # The beta = 0 replica is renewed by exact prior draws.
    draws = jax.vmap(path.sample_reference_fn)(jax.random.split(jax.random.PRNGKey(1), 4000))
    sites = jax.vmap(split.unravel_fn)(draws)
    scales, locations = np.exp(np.asarray(sites["s"])), np.asarray(sites["m"])
    assert abs(scales.mean() - 2.0 * np.sqrt(2 / np.pi)) < 4 * scales.std() / np.sqrt(4000)
    assert abs(locations.mean()) < 4 * 3.0 / np.sqrt(4000)
    assert abs(locations.std() - 3.0) < 0.15


def _two_paths():
    """The _scale_model's prior path and the path from a Gaussian base, on the same split."""
    y = jnp.array([0.3, -1.2, 2.0])
    split = split_model(jax.random.PRNGKey(0), _scale_model, (y,))
    base = nx.GaussianBase(jnp.array([0.2, -0.1]), jnp.array([[0.8, 0.0], [0.1, 0.5]]), 0.0)

    def potential(x):
        return potential_energy(_scale_model, (y,), {}, split.unravel_fn(x))

    return split, base, prior_path(split), reference_path(potential, base)


def test_legged_moves_evaluate_each_leg_as_its_own_path():
    """Both legs scored from one evaluation of the model equal each leg's own path, values and
    gradients, and so does the potential the HMC move runs on at every beta."""
    split, base, prior, fitted = _two_paths()
    legged = legged_hmc_moves(split, base)
    x = jnp.array([0.7, -0.4])
    for leg, path in ((FIT_LEG, fitted), (PRIOR_LEG, prior)):
        single = hmc_moves(path).evaluate(x)
        both = legged.evaluate(x, leg)
        for expected, actual in zip(single, both, strict=True):
            np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-12)
        for beta in (0.0, 0.35, 1.0):
            value, gradient = both.potential(beta)
            expected = jax.value_and_grad(path.potential_fn(beta))(x)
            np.testing.assert_allclose(value, expected[0], rtol=1e-10)
            np.testing.assert_allclose(gradient, expected[1], rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_a_batch_of_chains_moves_as_flat_lanes_exactly_as_chain_by_chain():
    """One scan of a batch of stabilised chains with every rung of every chain in one vmap
    gives the same states as each chain's own scan."""
    split, base, _, _ = _two_paths()
    scan = stabilized_exchange(
        legged_hmc_moves(split, base), lambda x: x, num_fit_replicas=4, num_prior_replicas=4
    )
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    positions = jax.random.normal(jax.random.PRNGKey(4), (3, 8, 2)) * 0.3
    states = jax.vmap(lambda x, key: scan.init(x, key, 20))(positions, keys)
    parts = scan.parts(20)
    batched = jax.jit(batched_scan_step(parts))
    one_by_one = jax.jit(jax.vmap(scan_step(parts)))
    for _ in range(3):
        expected, states = one_by_one(states), batched(states)
        for leaf, expected_leaf in zip(
            jax.tree.leaves(states), jax.tree.leaves(expected), strict=True
        ):
            np.testing.assert_allclose(leaf, expected_leaf, rtol=1e-9, atol=1e-12)
    # The scans moved the rungs: positions differ from the starts.
    assert not np.allclose(states.prior_leg.replicas.position, positions[:, 4:])
