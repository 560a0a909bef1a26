"""Properties of ``log mean exp`` and the influence behind its standard error, for arbitrary
values: equivariance under a shift (also where a naive ``exp`` overflows), the mean between the
extremes, agreement with a 40-digit reference, a zero error for equal values, and influences
averaging to one."""

import math

import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from numpyro_extras.results.evidence import log_mean_and_influence, log_mean_exp

SETTINGS = settings(max_examples=50, deadline=None, derandomize=True)
EPS = np.finfo(np.float64).eps

# At least 4 draws, so that the standard error is defined; ArviZ's MCSE is NumPy code, so the
# shapes may vary without recompiling anything.
SHAPES = st.tuples(st.integers(1, 4), st.integers(4, 40))
SPREAD = st.floats(-50.0, 50.0, allow_nan=False, allow_infinity=False)


@st.composite
def log_values(draw, shapes=SHAPES, elements=SPREAD):
    return draw(arrays(np.float64, draw(shapes), elements=elements))


def _exact_log_mean_exp(values):
    with mpmath.workdps(40):
        total = mpmath.fsum(mpmath.exp(mpmath.mpf(float(value))) for value in values.ravel())
        return float(mpmath.log(total / values.size))


def _on_grid(low, high):
    """Multiples of 2^-20 in [low, high]: sums of a few of them below 2^11 are exact, so a shift
    cannot merge values that differ by less than its rounding (equal values take a shortcut to
    ``ess = N``, which a shift must neither create nor undo)."""
    return st.integers(int(low * 2**20), int(high * 2**20)).map(lambda k: k / 2**20)


@SETTINGS
@given(
    values=log_values(elements=_on_grid(-50.0, 50.0)),
    centre=_on_grid(-700.0, 700.0),
    shift=_on_grid(-700.0, 700.0),
)
def test_a_shift_moves_the_log_mean_and_leaves_the_error_and_ess_alone(values, centre, shift):
    # Centred anywhere in +-700 and shifted by as much again, the values reach beyond 709, where
    # exp overflows: the result must come from the differences alone.
    values = values + centre
    log_mean, stderr, ess = log_mean_exp(values)
    shifted_log_mean, shifted_stderr, shifted_ess = log_mean_exp(values + shift)
    assert math.isfinite(shifted_log_mean)
    # logsumexp rounds by a few ulps of the largest value, up to 1450.
    scale = 1.0 + np.max(np.abs(values)) + abs(shift)
    assert abs(shifted_log_mean - (log_mean + shift)) <= 8 * EPS * scale
    np.testing.assert_allclose(shifted_stderr, stderr, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(shifted_ess, ess, rtol=1e-8)


@SETTINGS
@given(values=log_values(elements=st.floats(-1e4, 1e4)))
def test_the_log_mean_lies_between_the_smallest_and_largest_value(values):
    log_mean, stderr, ess = log_mean_exp(values)
    # Equal values give log_mean = a + log(n) - log(n), which may round off by an ulp or two.
    slack = 4 * EPS * (1.0 + np.max(np.abs(values)) + math.log(values.size))
    assert np.min(values) - slack <= log_mean <= np.max(values) + slack
    assert stderr >= 0 and math.isfinite(stderr)
    assert 0 < ess


@SETTINGS
@given(values=log_values())
def test_the_log_mean_matches_a_forty_digit_reference(values):
    exact = _exact_log_mean_exp(values)
    log_mean = log_mean_exp(values)[0]
    assert abs(log_mean - exact) <= 1e-12 * (1.0 + abs(exact))


@SETTINGS
@given(
    shape=SHAPES,
    value=st.floats(-1e4, 1e4),
)
def test_equal_values_have_zero_error_and_every_draw_effective(shape, value):
    values = np.full(shape, value)
    log_mean, stderr, ess = log_mean_exp(values)
    assert abs(log_mean - value) <= 4 * EPS * (1.0 + abs(value) + math.log(values.size))
    assert stderr == 0.0
    assert ess == values.size


@SETTINGS
@given(values=log_values(shapes=st.tuples(st.integers(1, 4), st.integers(1, 3))))
def test_fewer_than_four_draws_give_no_error_but_still_a_log_mean(values):
    log_mean, stderr, ess = log_mean_exp(values)
    assert math.isfinite(log_mean)
    assert math.isnan(stderr) and math.isnan(ess)


@SETTINGS
@given(
    values=log_values(shapes=st.tuples(st.integers(1, 4), st.integers(1, 40))),
    centre=st.floats(-700.0, 700.0),
)
def test_the_influences_average_to_one_in_the_shape_of_the_values(values, centre):
    values = values + centre
    log_mean, influence = log_mean_and_influence(values)
    assert influence.shape == values.shape
    assert np.all(np.isfinite(influence)) and np.all(influence >= 0)
    # Each influence is exp(a - log_mean), whose argument is rounded by an ulp or two of the
    # values' size: the mean is 1 up to that relative error.
    assert abs(np.mean(influence) - 1.0) <= 8 * EPS * (1.0 + np.max(np.abs(values)))
    # The largest value has the largest influence, whatever the offset of the values.
    assert influence.flat[np.argmax(values)] == np.max(influence)


def test_no_finite_value_gives_an_unbounded_error():
    """Weights that are all zero (log -inf) give no estimate: an infinite error, not 0."""
    log_mean, stderr, ess = log_mean_exp(np.full((2, 10), -np.inf))
    assert log_mean == -np.inf and stderr == np.inf and ess == 0.0
    some = np.r_[np.full(10, -np.inf), np.zeros(10)].reshape(2, 10)
    log_mean, stderr, _ = log_mean_exp(some)
    assert abs(log_mean - np.log(0.5)) < 1e-12 and 0 < stderr < np.inf


@SETTINGS
@given(values=log_values(), centre=st.floats(-700.0, 700.0))
def test_an_axis_gives_each_column_its_own_log_mean_and_influences(values, centre):
    """Over ``axis=0`` every column is averaged alone: the same log mean and influences as the
    column given by itself."""
    values = values + centre
    log_means, influences = log_mean_and_influence(values, axis=0)
    assert log_means.shape == values.shape[1:] and influences.shape == values.shape
    for column in range(values.shape[1]):
        log_mean, influence = log_mean_and_influence(values[:, column])
        np.testing.assert_allclose(log_means[column], log_mean, rtol=1e-15, atol=0)
        np.testing.assert_allclose(influences[:, column], influence, rtol=1e-15, atol=0)


def test_a_nested_list_is_read_as_its_array():
    values = [[0.1, 0.5, 0.3, 0.2, 0.9], [0.4, -0.2, 0.0, 0.7, 0.1]]
    assert log_mean_exp(values) == log_mean_exp(np.array(values))
