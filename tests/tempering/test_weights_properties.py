"""Properties of the exact draw of ``beta | x``, the exponential of rate ``Delta`` truncated to
[0, 1], for arbitrary ``Delta`` and keys: draws finite and in [0, 1] from ``Delta = 0`` through
``1e-300`` to ``1e6`` of either sign, a draw for ``-Delta`` the mirror image of the draw for
``Delta``, and each draw the exact inverse CDF of its uniform, checked at 50 digits."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from numpyro_extras.tempering.weights import sample_inverse_temperature

SETTINGS = settings(max_examples=50, deadline=None, derandomize=True)
EPS = np.finfo(np.float64).eps
# One shape for every example, so that the sampler compiles once.
SHAPE = (16,)

sample = jax.jit(sample_inverse_temperature)


@jax.jit
def _uniform(rng_key):
    return jax.random.uniform(rng_key, SHAPE, dtype=jnp.float64)


KEYS = st.integers(0, 2**32 - 1).map(jax.random.PRNGKey)
SIGNS = st.sampled_from([-1.0, 1.0])
# The edges of the sampler's branches: 0, 1e-300 and 1e-100 deep in its uniform branch, either
# side of its switch to it at 1e-12, 745 where exp(-Delta) underflows, and far beyond.
SPECIAL = st.sampled_from(
    [0.0, 1e-300, 1e-100, 1e-13, 1e-12, 1.1e-12, 1e-6, 1.0, 700.0, 745.0, 1e4, 1e6]
)


def _deltas(magnitudes):
    return st.tuples(SIGNS, magnitudes).map(lambda pair: pair[0] * pair[1])


ANY_DELTA = st.one_of(
    _deltas(SPECIAL),
    _deltas(st.floats(-300.0, 6.0).map(lambda exponent: 10.0**exponent)),
    st.floats(-1e6, 1e6),
)
# Where the inverse CDF is checked at 50 digits: |Delta| log-uniform in [1e-6, 700].
MODERATE_DELTA = _deltas(st.floats(-6.0, np.log10(700.0)).map(lambda exponent: 10.0**exponent))


def _delta_arrays(elements):
    return arrays(np.float64, SHAPE, elements=elements)


@SETTINGS
@given(rng_key=KEYS, delta=_delta_arrays(ANY_DELTA))
def test_draws_are_finite_inverse_temperatures_for_any_delta(rng_key, delta):
    beta = np.asarray(sample(rng_key, jnp.asarray(delta)))
    assert beta.shape == SHAPE and beta.dtype == np.float64
    assert np.all(np.isfinite(beta))
    assert np.all((beta >= 0.0) & (beta <= 1.0))


# XLA on CPU flushes subnormal numbers to zero, so a subnormal Delta loses its sign (harmlessly:
# the density is flat to double precision there, and either end is an exact draw).
NORMAL_MAGNITUDE = ANY_DELTA.map(abs).filter(lambda value: value >= np.finfo(np.float64).tiny)


@SETTINGS
@given(rng_key=KEYS, magnitude=_delta_arrays(NORMAL_MAGNITUDE))
def test_the_draw_for_minus_delta_mirrors_the_draw_for_delta(rng_key, magnitude):
    # The density exp(-Delta beta) reflected about beta = 1/2 is exp(Delta beta) up to a
    # constant, and one key gives one uniform: the draws are mirror images, bit for bit (in this
    # direction: 1 - (1 - t) need not round back to t).
    beta = np.asarray(sample(rng_key, jnp.asarray(magnitude)))
    mirrored = np.asarray(sample(rng_key, jnp.asarray(-magnitude)))
    np.testing.assert_array_equal(mirrored, 1.0 - beta)


def _exact_cdf(beta, delta):
    """``(1 - exp(-Delta beta)) / (1 - exp(-Delta))`` at 50 digits, for ``Delta != 0``."""
    with mpmath.workdps(50):
        beta, delta = mpmath.mpf(float(beta)), mpmath.mpf(float(delta))
        return float(mpmath.expm1(-delta * beta) / mpmath.expm1(-delta))


@SETTINGS
@given(rng_key=KEYS, delta=_delta_arrays(MODERATE_DELTA))
def test_each_draw_is_the_exact_inverse_cdf_of_its_uniform(rng_key, delta):
    beta = np.asarray(sample(rng_key, jnp.asarray(delta)))
    uniform = np.asarray(_uniform(rng_key))
    cdf = np.array([_exact_cdf(b, d) for b, d in zip(beta, delta, strict=True)])
    # For Delta < 0 the draw is the mirror image 1 - t of the draw t for |Delta| from the same
    # uniform u, so its CDF value is 1 - u (still a uniform).
    expected = np.where(delta > 0, uniform, 1.0 - uniform)
    # Why this tolerance: with t = -log1p(x) / a and x = u expm1(-a), rounding x by a few eps
    # relatively moves F(t) = x / expm1(-a) by as much; rounding the division by a moves t by an
    # eps relatively, which moves F by t F'(t) = a t exp(-a t) / (1 - exp(-a)) <= 1 times that;
    # an absolute error e of log1p moves F by exp(-a t) e / (1 - exp(-a)). A correctly rounded
    # log1p would keep all of it within a few eps, but XLA's CPU log1p is off by up to 64 eps
    # (absolutely) for arguments in [-0.415, -0.366], which x reaches only when
    # 1 - exp(-a) > 0.36: that is up to 64 / 0.36 < 180 eps of F, hence 256 eps in all. For
    # Delta < 0, 1 - t is rounded by up to eps / 2 absolutely, and F' <= a / (1 - exp(-a))
    # <= 1 + a turns that into up to (1 + a) eps / 2.
    magnitude = np.abs(delta)
    tolerance = 256 * EPS + np.where(delta < 0, (1.0 + magnitude) * EPS / 2, 0.0)
    error = np.abs(cdf - expected)
    assert np.all(error <= tolerance), (delta[error > tolerance], error[error > tolerance])
