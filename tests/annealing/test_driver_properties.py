"""Properties of ``log Z`` from AIS log weights, for arbitrary weights: equivariance under shifts
of the weights and of ``log Z_0``, the reverse estimate as the forward one reflected about
``log Z_0``, agreement with a 40-digit reference, the ESS between 1 and ``N``, an infinite error
bar exactly when the ESS is too small, ``-inf`` weights as particles of zero weight, and errors
for weights that cannot give an estimate."""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from numpyro_extras.results.evidence import MIN_ESS_FOR_STDERR, evidence_from_log_weights

SETTINGS = settings(max_examples=50, deadline=None, derandomize=True)
EPS = np.finfo(np.float64).eps
# The ESS is computed with JAX: one number of particles keeps it to one compilation.
NUM_PARTICLES = 64


@st.composite
def log_weights(draw):
    # The spread ranges from equal weights (ESS = N) to a few particles carrying everything
    # (ESS near 1), so both sides of the ESS threshold of the error bar are reached.
    spread = draw(st.sampled_from([0.0, 1e-3, 0.1, 1.0, 3.0, 10.0, 100.0]))
    unit = draw(
        arrays(np.float64, NUM_PARTICLES, elements=st.floats(-1.0, 1.0, allow_subnormal=False))
    )
    return spread * unit + draw(st.floats(-700.0, 700.0))


@st.composite
def zero_weight_masks(draw):
    """Which particles have weight zero (log weight -inf); at least one has not."""
    mask = draw(arrays(bool, NUM_PARTICLES))
    mask[draw(st.integers(0, NUM_PARTICLES - 1))] = False
    return mask


def _exact_log_mean_exp(values, count):
    with mpmath.workdps(40):
        total = mpmath.fsum(mpmath.exp(mpmath.mpf(float(value))) for value in values)
        return float(mpmath.log(total / count))


def _same_error(stderr, expected):
    if math.isinf(expected):
        return math.isinf(stderr)
    return math.isclose(stderr, expected, rel_tol=1e-9, abs_tol=1e-12)


@SETTINGS
@given(weights=log_weights(), shift=st.floats(-700.0, 700.0), log_z0=st.floats(-1e3, 1e3))
def test_log_z_moves_with_a_shift_of_the_weights_and_of_log_z0(weights, shift, log_z0):
    evidence = evidence_from_log_weights(weights)
    shifted = evidence_from_log_weights(weights + shift, log_z0)
    # Adding the shift rounds each weight by half an ulp of |weights + shift|.
    scale = 1.0 + np.max(np.abs(weights)) + abs(shift) + abs(log_z0)
    assert abs(shifted.log_z - (evidence.log_z + shift + log_z0)) <= 8 * EPS * scale
    # A common factor of all weights cancels in the normalised weights.
    assert math.isclose(shifted.ess, evidence.ess, rel_tol=1e-9)
    assert _same_error(shifted.stderr, evidence.stderr)


@SETTINGS
@given(weights=log_weights(), log_z0=st.floats(-1e3, 1e3))
def test_forward_and_reverse_estimates_are_log_z0_plus_and_minus_the_log_mean_weight(
    weights, log_z0
):
    log_mean = _exact_log_mean_exp(weights, NUM_PARTICLES)
    forward = evidence_from_log_weights(weights, log_z0)
    reverse = evidence_from_log_weights(weights, log_z0, reverse=True)
    tolerance = 1e-12 * (1.0 + abs(log_mean) + abs(log_z0))
    assert abs(forward.log_z - (log_z0 + log_mean)) <= tolerance
    assert abs(reverse.log_z - (log_z0 - log_mean)) <= tolerance
    # The direction changes the sign of the estimate, not the weights' quality.
    assert reverse.ess == forward.ess
    assert _same_error(reverse.stderr, forward.stderr)


@SETTINGS
@given(weights=log_weights(), mask=zero_weight_masks())
def test_the_ess_lies_between_one_and_the_number_of_particles(weights, mask):
    weights = np.where(mask, -np.inf, weights)
    evidence = evidence_from_log_weights(weights)
    assert 1.0 - 1e-10 <= evidence.ess <= NUM_PARTICLES * (1.0 + 1e-10)
    # (sum w)^2 / sum w^2, from the weights relative to the largest, which stay representable.
    relative = np.exp(weights - np.max(weights))
    expected = np.sum(relative) ** 2 / np.sum(relative**2)
    assert math.isclose(evidence.ess, expected, rel_tol=1e-10)


@SETTINGS
@given(weights=log_weights(), mask=zero_weight_masks())
def test_the_error_bar_is_infinite_exactly_when_the_ess_is_below_the_threshold(weights, mask):
    evidence = evidence_from_log_weights(np.where(mask, -np.inf, weights))
    if evidence.ess < MIN_ESS_FOR_STDERR:
        assert evidence.stderr == math.inf
    else:
        assert math.isfinite(evidence.stderr) and evidence.stderr >= 0


@SETTINGS
@given(weights=log_weights())
def test_equal_weights_have_every_particle_effective_and_no_error(weights):
    evidence = evidence_from_log_weights(np.full_like(weights, weights[0]))
    assert math.isclose(evidence.ess, NUM_PARTICLES, rel_tol=1e-12)
    assert evidence.stderr == 0.0


@SETTINGS
@given(weights=log_weights(), mask=zero_weight_masks(), log_z0=st.floats(-1e3, 1e3))
def test_minus_infinite_weights_count_as_particles_of_zero_weight(weights, mask, log_z0):
    evidence = evidence_from_log_weights(np.where(mask, -np.inf, weights), log_z0)
    finite = weights[~mask]
    # Dropped from the sum, kept in the mean's count.
    expected = log_z0 + _exact_log_mean_exp(finite, NUM_PARTICLES)
    assert abs(evidence.log_z - expected) <= 1e-12 * (1.0 + abs(expected))
    assert not math.isnan(evidence.stderr)


@SETTINGS
@given(weights=log_weights(), mask=zero_weight_masks(), index=st.integers(0, NUM_PARTICLES - 1))
def test_a_nan_weight_is_an_error_whatever_the_other_weights(weights, mask, index):
    weights = np.where(mask, -np.inf, weights)
    weights[index] = np.nan
    with pytest.raises(ValueError, match="finite log weight"):
        evidence_from_log_weights(weights)


@pytest.mark.parametrize("num_particles", [1, NUM_PARTICLES])
def test_all_weights_minus_infinite_is_an_error(num_particles):
    with pytest.raises(ValueError, match="finite log weight"):
        evidence_from_log_weights(np.full(num_particles, -np.inf))
