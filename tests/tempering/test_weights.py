"""Exact identities of continuous tempering: weights (T4), the beta|x sampler (T3), the extended
potential's marginals (T1) and gradient (T2)."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import integrate, stats

import numpyro_extras as nx
from numpyro_extras.tempering.weights import (
    inverse_temperature_log_density,
    log_base_weight,
    log_target_weight,
    sample_inverse_temperature,
)

DELTAS = np.concatenate([-np.logspace(-12, 3, 60), [0.0], np.logspace(-12, 3, 60)])


def _exact_log_target_weight(delta):
    """log(Delta / (e^Delta - 1)) at 50 digits."""
    mpmath.mp.dps = 50
    delta = mpmath.mpf(float(delta))
    if delta == 0:
        return 0.0
    return float(mpmath.log(delta / mpmath.expm1(delta)))


def test_log_weights_match_high_precision_values():
    exact = np.array([_exact_log_target_weight(delta) for delta in DELTAS])
    ours = np.asarray(log_target_weight(jnp.asarray(DELTAS)))
    assert np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours, exact, rtol=1e-12, atol=1e-14)


def test_weight_identities():
    log_w1 = np.asarray(log_target_weight(DELTAS))
    log_w0 = np.asarray(log_base_weight(DELTAS))
    assert log_target_weight(0.0) == 0.0 and log_base_weight(0.0) == 0.0
    np.testing.assert_allclose(log_w0, np.asarray(log_target_weight(-DELTAS)), rtol=0, atol=0)
    # w1 = w0 exp(-Delta), both bounded like a defensive mixture (Graham & Storkey eq. 20-22)
    np.testing.assert_allclose(log_w1, log_w0 - DELTAS, rtol=1e-12, atol=1e-12)
    assert np.all(np.exp(log_w1) <= 1 + np.maximum(0, -DELTAS) + 1e-12)
    assert np.all(np.exp(log_w0) <= 1 + np.maximum(0, DELTAS) + 1e-12)


def test_weight_gradients_are_finite_at_zero():
    gradient = jax.grad(lambda delta: log_target_weight(delta))(0.0)
    assert np.isclose(gradient, -0.5)


@pytest.mark.parametrize("delta", [-500.0, -5.0, -1e-9, 0.0, 1e-9, 1.0, 5.0, 500.0, 1e4, -1e4])
def test_truncated_exponential_sampler_ks(delta):
    draws = np.asarray(sample_inverse_temperature(jax.random.PRNGKey(3), jnp.full(100_000, delta)))
    assert np.all((draws >= 0) & (draws <= 1))
    rate = abs(delta)
    # Distance from the end the density piles up at is a truncated exponential of rate |Delta|.
    distance = draws if delta >= 0 else 1.0 - draws

    def cdf(t):
        if rate < 1e-6:
            return t
        return np.expm1(-rate * t) / np.expm1(-rate)

    assert stats.kstest(distance, cdf).pvalue > 0.01


def test_conditional_density_normalised():
    for delta in [-30.0, -1.0, 1e-8, 2.0, 40.0]:
        total, _ = integrate.quad(
            lambda beta, delta=delta: np.exp(float(inverse_temperature_log_density(beta, delta))),
            0,
            1,
            points=[0.01, 0.99],
        )
        assert abs(total - 1) < 1e-8


def _one_dimensional_setup(log_zeta=0.3):
    target_loc, target_scale, log_z = 1.5, 0.7, 0.8
    base = nx.GaussianBase(jnp.array([-0.5]), jnp.array([[1.3]]), jnp.asarray(log_zeta))

    def target_potential(x):
        return 0.5 * jnp.sum(((x - target_loc) / target_scale) ** 2) - (
            log_z - np.log(target_scale * np.sqrt(2 * np.pi))
        )

    return target_potential, base, log_z


def test_extended_density_x_marginal_matches_closed_form():
    """T1: integrating exp(-U) over u gives exp(-psi) (1 - e^-Delta) / Delta = exp(-psi) / w0."""
    target_potential, base, _ = _one_dimensional_setup()
    potential = jax.jit(nx.extended_potential(target_potential, base, beta_scale=1.0))
    for x in [-2.0, 0.1, 1.5, 3.0]:
        numeric, _ = integrate.quad(
            lambda u, x=x: float(np.exp(-potential(jnp.array([x, u])))), -60, 60, limit=200
        )
        position = jnp.array([x])
        delta = target_potential(position) + base.log_zeta - base.potential(position)
        closed = float(jnp.exp(-base.potential(position) - log_base_weight(delta)))
        assert abs(numeric / closed - 1) < 1e-6


@pytest.mark.slow
def test_beta_marginal_matches_bridge_normalisers():
    """T1: p(beta) = z(beta) / (C zeta^beta), with z(beta) the bridge's normaliser (eq. 19)."""
    target_potential, base, _ = _one_dimensional_setup()

    def bridge(x, beta):
        position = jnp.array([x])
        return float(
            jnp.exp(-beta * target_potential(position) - (1 - beta) * base.potential(position))
        )

    def joint_density(x, beta):
        return bridge(x, beta) * np.exp(-beta * float(base.log_zeta))

    normaliser, _ = integrate.dblquad(lambda x, beta: joint_density(x, beta), 0, 1, -30, 30)
    for beta in [0.0, 0.3, 1.0]:
        z_beta, _ = integrate.quad(lambda x, beta=beta: bridge(x, beta), -30, 30)
        marginal, _ = integrate.quad(lambda x, beta=beta: joint_density(x, beta), -30, 30)
        expected = z_beta / (normaliser * np.exp(beta * float(base.log_zeta)))
        assert abs(marginal / normaliser / expected - 1) < 1e-6
    # the end points: p(1) / p(0) = Z / zeta
    _, _, log_z = _one_dimensional_setup()
    p0, _ = integrate.quad(lambda x: joint_density(x, 0.0), -30, 30)
    p1, _ = integrate.quad(lambda x: joint_density(x, 1.0), -30, 30)
    assert abs(np.log(p1 / p0) - (log_z - float(base.log_zeta))) < 1e-6


@pytest.mark.parametrize("beta_scale", [1.0, 8.0])
@pytest.mark.parametrize("control", [-30.0, -5.0, 0.0, 2.5, 30.0])
def test_extended_potential_gradient_matches_closed_form(control, beta_scale):
    """T2: dU/du = [beta (1 - beta) Delta + 2 beta - 1] / s and dU/dx, with jax.grad."""
    target_potential, base, _ = _one_dimensional_setup()
    potential = nx.extended_potential(target_potential, base, beta_scale=beta_scale)
    position = jnp.array([0.4])
    gradient = jax.grad(potential)(jnp.append(position, control))
    assert np.all(np.isfinite(gradient))
    beta = jax.nn.sigmoid(control / beta_scale)
    delta = target_potential(position) + base.log_zeta - base.potential(position)
    expected_u = (beta * (1 - beta) * delta + 2 * beta - 1) / beta_scale
    expected_x = beta * jax.grad(target_potential)(position) + (1 - beta) * jax.grad(
        base.potential
    )(position)
    np.testing.assert_allclose(gradient[-1], expected_u, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(gradient[:-1], expected_x, rtol=1e-6, atol=1e-12)


def test_log_normalizer_of_constant_delta():
    evidence = nx.tempering_log_normalizer(np.zeros((2, 50)), log_zeta=1.5)
    assert evidence.log_z == 1.5


@pytest.mark.parametrize("diagonal", [True, False])
def test_base_potential_function_matches_the_density(diagonal):
    scale_tril = jnp.diag(jnp.array([0.5, 2.0, 1.5]))
    if not diagonal:
        scale_tril = scale_tril.at[2, 0].set(0.7).at[1, 0].set(-0.3)
    base = nx.GaussianBase(jnp.array([1.0, -1.0, 0.0]), scale_tril, jnp.asarray(0.0))
    position = jnp.array([0.3, 2.0, -1.0])
    expected = -stats.multivariate_normal(base.loc, base.covariance).logpdf(position)
    assert abs(float(base.potential(position)) - expected) < 1e-10
    assert abs(float(base.potential_function()(position)) - expected) < 1e-10
    np.testing.assert_allclose(
        jax.grad(base.potential_function())(position), jax.grad(base.potential)(position)
    )
    value, gradient = base.potential_and_gradient()(position)
    assert abs(float(value) - expected) < 1e-10
    np.testing.assert_allclose(gradient, jax.grad(base.potential)(position), rtol=1e-10)


def test_extended_potential_matches_autodiff_of_eq_14():
    """The hand-written value and gradient against autodiff of eq. 14 on a dense 3-D base,
    in reverse and forward mode."""
    scale_tril = jnp.array([[0.5, 0.0, 0.0], [-0.3, 2.0, 0.0], [0.7, 0.2, 1.5]])
    base = nx.GaussianBase(jnp.array([1.0, -1.0, 0.0]), scale_tril, jnp.asarray(0.8))

    def target_potential(position):
        return jnp.sum(position**4) - jnp.prod(jnp.sin(position))

    def reference(extended_position, beta_scale=2.0):
        position, control = extended_position[:-1], extended_position[-1] / beta_scale
        beta = jax.nn.sigmoid(control)
        return (
            beta * (target_potential(position) + base.log_zeta)
            + (1 - beta) * base.potential(position)
            + jax.nn.softplus(control)
            + jax.nn.softplus(-control)
        )

    potential = nx.extended_potential(target_potential, base, beta_scale=2.0)
    point = jnp.array([0.3, 2.0, -1.0, 1.7])
    assert abs(float(potential(point) - reference(point))) < 1e-10
    np.testing.assert_allclose(jax.grad(potential)(point), jax.grad(reference)(point), rtol=1e-10)
    direction = jnp.array([1.0, -2.0, 0.5, 3.0])
    _, forward = jax.jvp(potential, (point,), (direction,))
    _, expected = jax.jvp(reference, (point,), (direction,))
    assert abs(float(forward - expected)) < 1e-9
