"""The functional core of replica exchange: exact checks of the swap step and the ladder."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exchange_targets import swap_matrix

from numpyro_extras.exchange import equalized_ladder, even_odd_swap, initial_ladder
from numpyro_extras.exchange.chains import (
    ExchangeStatistics,
    swap_log_ratios,
    update_statistics,
)
from numpyro_extras.exchange.ladder import communication_barrier, tuning_rounds
from numpyro_extras.metropolis import acceptance_probability

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
