"""Properties of the stepping-stone estimate for arbitrary log-likelihoods and ladders: exact for
a constant log-likelihood, equivariant under a shift of it, the one-gap sums against a 40-digit
reference, and the estimate the mean of the chains' bracket midpoints with an error bar that
covers half the bracket."""

import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from numpyro_extras.exchange.evidence import stepping_stone

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
NUM_CHAINS, NUM_DRAWS, NUM_RUNGS = 2, 50, 4
SHIFTS = st.floats(-1e3, 1e3)


@st.composite
def ladders(draw, num_rungs=NUM_RUNGS):
    """One ladder per chain, all from ``beta_0`` anywhere in [0, 0.5] to ``beta_{N-1}`` anywhere
    in [0.5, 1] (so that the span varies too; the chains of a run share both ends, or their
    estimates would differ by design), with their own rungs in between; equal neighbours are
    allowed."""
    low, high = draw(st.floats(0.0, 0.5)), draw(st.floats(0.5, 1.0))
    interior = draw(arrays(np.float64, (NUM_CHAINS, num_rungs - 2), elements=st.floats(0.0, 1.0)))
    return np.concatenate(
        [
            np.full((NUM_CHAINS, 1), low),
            low + (high - low) * np.sort(interior, axis=1),
            np.full((NUM_CHAINS, 1), high),
        ],
        axis=1,
    )


@st.composite
def log_likelihoods(draw, num_rungs=NUM_RUNGS):
    # From nearly equal weights to a few draws carrying each gap's mean.
    spread = draw(st.sampled_from([1e-3, 0.1, 1.0, 10.0]))
    unit = draw(
        arrays(
            np.float64,
            (NUM_CHAINS, NUM_DRAWS, num_rungs),
            elements=st.floats(-1.0, 1.0, allow_subnormal=False),
        )
    )
    return spread * unit + draw(st.floats(-100.0, 100.0))


def _exact_log_mean_exp(values):
    with mpmath.workdps(40):
        total = mpmath.fsum(mpmath.exp(mpmath.mpf(float(value))) for value in values)
        return float(mpmath.log(total / len(values)))


@SETTINGS
@given(betas=ladders(), value=SHIFTS)
def test_a_constant_log_likelihood_gives_its_value_times_the_span_and_no_error(betas, value):
    estimate = stepping_stone(np.full((NUM_CHAINS, NUM_DRAWS, NUM_RUNGS), value), betas)
    span = betas[:, -1] - betas[:, 0]
    np.testing.assert_allclose(estimate.forward, value * span, rtol=0, atol=1e-9)
    np.testing.assert_allclose(estimate.reverse, value * span, rtol=0, atol=1e-9)
    assert abs(estimate.log_z - np.mean(value * span)) <= 1e-9
    assert 0.0 <= estimate.stderr <= 1e-9


@SETTINGS
@given(betas=ladders(), log_likelihood=log_likelihoods(), shift=SHIFTS)
def test_a_shift_of_the_log_likelihood_moves_the_estimate_by_shift_times_the_span(
    betas, log_likelihood, shift
):
    estimate = stepping_stone(log_likelihood, betas)
    shifted = stepping_stone(log_likelihood + shift, betas)
    span = betas[:, -1] - betas[:, 0]
    # Adding the shift rounds each value by half an ulp of at most 1100, about 1e-13.
    np.testing.assert_allclose(shifted.forward, estimate.forward + shift * span, atol=1e-11)
    np.testing.assert_allclose(shifted.reverse, estimate.reverse + shift * span, atol=1e-11)
    assert abs(shifted.log_z - (estimate.log_z + np.mean(shift * span))) <= 1e-11
    # The weights of each gap change by a common factor, which their normalisation removes.
    np.testing.assert_allclose(shifted.stderr, estimate.stderr, rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(shifted.chain_stderr, estimate.chain_stderr, rtol=1e-8, atol=1e-11)


@SETTINGS
@given(log_likelihood=log_likelihoods(num_rungs=2))
def test_one_gap_sums_are_the_log_mean_weights_at_its_two_ends(log_likelihood):
    estimate = stepping_stone(log_likelihood, np.array([0.0, 1.0]))
    for chain in range(NUM_CHAINS):
        # Z_1 / Z_0 = E_0[exp(l)] from the draws at beta = 0 and Z_0 / Z_1 = E_1[exp(-l)] from
        # those at beta = 1.
        forward = _exact_log_mean_exp(log_likelihood[chain, :, 0])
        reverse = -_exact_log_mean_exp(-log_likelihood[chain, :, 1])
        assert abs(estimate.forward[chain] - forward) <= 1e-12 * (1.0 + abs(forward))
        assert abs(estimate.reverse[chain] - reverse) <= 1e-12 * (1.0 + abs(reverse))


@SETTINGS
@given(betas=ladders(), log_likelihood=log_likelihoods())
def test_the_estimate_is_the_mean_of_the_chains_bracket_midpoints(betas, log_likelihood):
    estimate = stepping_stone(log_likelihood, betas)
    midpoints = (estimate.forward + estimate.reverse) / 2
    np.testing.assert_allclose(estimate.chain_log_z, midpoints, rtol=1e-15, atol=1e-13)
    assert abs(estimate.log_z - np.mean(midpoints)) <= 1e-13 * (1.0 + abs(estimate.log_z))
    # A ladder too coarse for the draws shows as a wide bracket, which the error bar covers.
    half_bracket = np.mean(np.abs(estimate.reverse - estimate.forward)) / 2
    assert estimate.stderr >= half_bracket
    assert estimate.stderr >= np.sqrt(np.sum(estimate.chain_stderr**2)) / NUM_CHAINS
