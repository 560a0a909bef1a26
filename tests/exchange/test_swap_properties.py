"""Properties of the replica-exchange swap for arbitrary ladders and log-likelihoods: detailed
balance of a swap between neighbouring rungs, acceptance probabilities in [0, 1] and 0 next to a
NaN, and the even-odd swap's ``source`` a permutation that only exchanges neighbours across the
gaps of the scan's parity."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from numpyro_extras.exchange.core import even_odd_swap, swap_log_ratios
from numpyro_extras.shell.metropolis import acceptance_probability

SETTINGS = settings(max_examples=50, deadline=None, derandomize=True)
# One ladder size for every example, so that each function compiles once.
NUM_RUNGS = 6


@jax.jit
def _accept_prob(betas, log_likelihood):
    return acceptance_probability(swap_log_ratios(betas, log_likelihood))


_swap = jax.jit(even_odd_swap)


@st.composite
def ladders(draw):
    """``0 = beta_0 <= ... <= beta_{N-1} = 1``; equal neighbours (a zero gap) are allowed."""
    interior = draw(arrays(np.float64, NUM_RUNGS - 2, elements=st.floats(0.0, 1.0)))
    return np.concatenate([[0.0], np.sort(interior), [1.0]])


# Bounded so that a rejected swap's probability exp(log ratio) stays above the underflow: the
# balance is checked in log space, where a 0 would be -inf on one side only.
MODERATE = arrays(np.float64, NUM_RUNGS, elements=st.floats(-100.0, 100.0))
# Anything a model can give, including overflowing products and infinities.
ANY_LOG_LIKELIHOOD = arrays(
    np.float64,
    NUM_RUNGS,
    elements=st.one_of(st.floats(-1e308, 1e308), st.sampled_from([-np.inf, np.inf, np.nan])),
)
GAPS = st.integers(0, NUM_RUNGS - 2)
KEYS = st.integers(0, 2**32 - 1).map(jax.random.PRNGKey)


@SETTINGS
@given(betas=ladders(), log_likelihood=MODERATE, gap=GAPS)
def test_a_swap_satisfies_detailed_balance_for_the_product_of_tempered_targets(
    betas, log_likelihood, gap
):
    # State x at rung i and y at rung i + 1, against the same two states exchanged; only the
    # gap's two rungs change, so the other factors of the product cancel.
    swapped = log_likelihood.copy()
    swapped[[gap, gap + 1]] = log_likelihood[[gap + 1, gap]]
    low, high = betas[gap], betas[gap + 1]
    log_target = low * log_likelihood[gap] + high * log_likelihood[gap + 1]
    log_target_swapped = low * swapped[gap] + high * swapped[gap + 1]
    forward = np.asarray(_accept_prob(jnp.asarray(betas), jnp.asarray(log_likelihood)))[gap]
    backward = np.asarray(_accept_prob(jnp.asarray(betas), jnp.asarray(swapped)))[gap]
    # One of the two directions is always accepted: the other carries the whole ratio.
    assert max(forward, backward) == 1.0
    np.testing.assert_allclose(
        log_target + np.log(forward), log_target_swapped + np.log(backward), rtol=0, atol=1e-12
    )


@SETTINGS
@given(betas=ladders(), log_likelihood=ANY_LOG_LIKELIHOOD)
def test_acceptance_probabilities_lie_in_the_unit_interval(betas, log_likelihood):
    accept_prob = np.asarray(_accept_prob(jnp.asarray(betas), jnp.asarray(log_likelihood)))
    assert accept_prob.shape == (NUM_RUNGS - 1,)
    assert np.all((accept_prob >= 0.0) & (accept_prob <= 1.0))


@SETTINGS
@given(betas=ladders(), log_likelihood=ANY_LOG_LIKELIHOOD, rung=st.integers(0, NUM_RUNGS - 1))
def test_a_nan_log_likelihood_rejects_both_swaps_of_its_rung(betas, log_likelihood, rung):
    log_likelihood = log_likelihood.copy()
    log_likelihood[rung] = np.nan
    accept_prob = np.asarray(_accept_prob(jnp.asarray(betas), jnp.asarray(log_likelihood)))
    # The gaps below and above the rung, where they exist.
    neighbouring_gaps = [gap for gap in (rung - 1, rung) if 0 <= gap < NUM_RUNGS - 1]
    assert np.all(accept_prob[neighbouring_gaps] == 0.0)


@SETTINGS
@given(
    rng_key=KEYS,
    betas=ladders(),
    log_likelihood=ANY_LOG_LIKELIHOOD,
    parity=st.integers(0, 1),
)
def test_even_odd_swaps_exchange_neighbours_across_gaps_of_the_parity_only(
    rng_key, betas, log_likelihood, parity
):
    source, accept_prob = _swap(rng_key, jnp.asarray(betas), jnp.asarray(log_likelihood), parity)
    source, accept_prob = np.asarray(source), np.asarray(accept_prob)
    rungs = np.arange(NUM_RUNGS)
    assert accept_prob.shape == (NUM_RUNGS - 1,)
    np.testing.assert_array_equal(
        accept_prob, np.asarray(_accept_prob(jnp.asarray(betas), jnp.asarray(log_likelihood)))
    )
    np.testing.assert_array_equal(np.sort(source), rungs)
    assert np.all(np.abs(source - rungs) <= 1)
    # Rung j taking the state of rung j + 1 is a swap across gap j, so rung j + 1 takes rung j's.
    swapped_gaps = np.flatnonzero(source[:-1] == rungs[1:])
    np.testing.assert_array_equal(source[swapped_gaps + 1], swapped_gaps)
    assert np.all(swapped_gaps % 2 == parity)
    # A uniform in [0, 1) is below a probability 1 and never below 0.
    offered = rungs[:-1] % 2 == parity
    assert np.all(np.isin(np.flatnonzero(offered & (accept_prob == 1.0)), swapped_gaps))
    assert not np.any(np.isin(np.flatnonzero(accept_prob == 0.0), swapped_gaps))
