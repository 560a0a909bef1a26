"""Exact checks of the built-in targets: normalizers, moments and potentials."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.special
import scipy.stats
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.infer.util import init_to_uniform, potential_energy

from numpyro_extras.targets import (
    BIMODAL_LOCS,
    BIMODAL_SCALES,
    BIMODAL_WEIGHTS,
    BoltzmannRelaxation,
    _enumerate_boltzmann_machine,
    bimodal_mode_weights,
    bimodal_model,
    boltzmann_relaxation_model,
    boltzmann_relaxation_potential,
    gaussian_model,
    linear_regression_log_evidence,
    linear_regression_model,
    load_radon,
    make_boltzmann_relaxation,
    make_linear_regression_data,
    make_multimodal_grid,
    multimodal_grid_log_density,
    multimodal_grid_nearest_mode,
    multimodal_grid_probabilities,
    radon_model,
)

# Quadrature checks to 1e-6 and beyond need double precision.
jax.config.update("jax_enable_x64", True)


def model_potential(model, *args, **kwargs):
    """The (jitted) potential energy NumPyro's HMC would use for ``model``, on the unconstrained
    space and including Jacobians, as a function of a dict of unconstrained site values."""
    return jax.jit(lambda params: potential_energy(model, args, kwargs, params))


def log_trapezoid(log_values, spacing):
    """Log of the trapezoid rule of ``exp(log_values)`` on a uniform grid, any number of axes.

    For smooth integrands that decay to zero at the grid ends the trapezoid rule converges
    geometrically fast, so it is as accurate as adaptive quadrature here.
    """
    weights = np.ones(log_values.shape)
    for axis in range(log_values.ndim):
        edge_shape = [1] * log_values.ndim
        edge_shape[axis] = log_values.shape[axis]
        edge_weights = np.ones(log_values.shape[axis])
        edge_weights[[0, -1]] = 0.5
        weights = weights * edge_weights.reshape(edge_shape)
    max_log_value = np.max(log_values)
    total = np.sum(weights * np.exp(log_values - max_log_value))
    return max_log_value + math.log(total) + log_values.ndim * math.log(spacing)


def brute_force_boltzmann_machine(weights, biases):
    """log Z_B, E[s], E[s s^T] by a plain loop over all states."""
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=len(biases))))
    log_weights = np.array([0.5 * s @ weights @ s + s @ biases for s in states])
    log_z = scipy.special.logsumexp(log_weights)
    probs = np.exp(log_weights - log_z)
    return log_z, probs @ states, (states * probs[:, None]).T @ states


# ------------------------------------------------------------------------------------------------
# Bimodal target
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("log_scale", [0.0, 2.5, -3.0])
def test_bimodal_log_z_by_quadrature(log_scale):
    potential_fn = model_potential(bimodal_model, log_scale=log_scale)
    grid, spacing = np.linspace(-40.0, 50.0, 90_001, retstep=True)
    potentials = np.asarray(jax.vmap(lambda x: potential_fn({"x": x}))(jnp.asarray(grid)))
    assert log_trapezoid(-potentials, spacing) == pytest.approx(log_scale, abs=1e-6)


def test_bimodal_potential_is_mixture():
    potential_fn = model_potential(bimodal_model, log_scale=1.0)
    points = np.array([-9.0, -8.0, 0.0, 3.0, 8.0, 12.0])
    mixture_density = sum(
        weight * scipy.stats.norm(loc, scale).pdf(points)
        for weight, loc, scale in zip(BIMODAL_WEIGHTS, BIMODAL_LOCS, BIMODAL_SCALES, strict=True)
    )
    potentials = np.array([potential_fn({"x": jnp.asarray(point)}) for point in points])
    np.testing.assert_allclose(potentials, -np.log(mixture_density) - 1.0, rtol=1e-12)


def test_bimodal_mode_weights():
    rng = np.random.default_rng(0)
    num_draws = 200_000
    component = rng.choice(2, size=num_draws, p=BIMODAL_WEIGHTS)
    draws = rng.normal(np.take(BIMODAL_LOCS, component), np.take(BIMODAL_SCALES, component))
    fractions = np.asarray(bimodal_mode_weights(draws.reshape(4, -1)))
    standard_error = math.sqrt(0.6 * 0.4 / num_draws)
    np.testing.assert_allclose(fractions, BIMODAL_WEIGHTS, atol=5 * standard_error)
    assert fractions.sum() == pytest.approx(1.0)

    # Weighted: draws from N(0, 10^2) importance-weighted to the target recover the mode masses.
    proposal_draws = rng.normal(0.0, 10.0, size=num_draws)
    target_density = sum(
        weight * scipy.stats.norm(loc, scale).pdf(proposal_draws)
        for weight, loc, scale in zip(BIMODAL_WEIGHTS, BIMODAL_LOCS, BIMODAL_SCALES, strict=True)
    )
    importance_weights = target_density / scipy.stats.norm(0.0, 10.0).pdf(proposal_draws)
    weighted_fractions = np.asarray(bimodal_mode_weights(proposal_draws, importance_weights))
    np.testing.assert_allclose(weighted_fractions, BIMODAL_WEIGHTS, atol=0.01)

    np.testing.assert_allclose(
        bimodal_mode_weights(np.array([-1.0, 0.0, 2.0]), np.array([3.0, 1.0, 0.0])), [0.75, 0.25]
    )


# ------------------------------------------------------------------------------------------------
# Gaussian target
# ------------------------------------------------------------------------------------------------


def test_gaussian_potential_and_log_z():
    loc = np.array([1.0, -2.0])
    scale_tril = np.array([[1.5, 0.0], [0.7, 0.4]])
    log_scale = -1.25
    potential_fn = model_potential(
        gaussian_model, jnp.asarray(loc), jnp.asarray(scale_tril), log_scale=log_scale
    )
    covariance = scale_tril @ scale_tril.T
    point = np.array([0.3, -1.1])
    expected = -scipy.stats.multivariate_normal(loc, covariance).logpdf(point) - log_scale
    assert float(potential_fn({"x": jnp.asarray(point)})) == pytest.approx(expected, rel=1e-12)

    grid, spacing = np.linspace(-12.0, 12.0, 481, retstep=True)
    mesh = np.stack(np.meshgrid(grid + loc[0], grid + loc[1], indexing="ij"), axis=-1)
    potentials = jax.vmap(jax.vmap(lambda x: potential_fn({"x": x})))(jnp.asarray(mesh))
    assert log_trapezoid(-np.asarray(potentials), spacing) == pytest.approx(log_scale, abs=1e-8)


# ------------------------------------------------------------------------------------------------
# Bayesian linear regression
# ------------------------------------------------------------------------------------------------


def test_make_linear_regression_data():
    features, targets = make_linear_regression_data(3, num_data=7, num_features=4)
    assert features.shape == (7, 4) and targets.shape == (7,)
    assert features.dtype == np.float64 and targets.dtype == np.float64
    features_again, targets_again = make_linear_regression_data(3, num_data=7, num_features=4)
    np.testing.assert_array_equal(features, features_again)
    np.testing.assert_array_equal(targets, targets_again)


@pytest.mark.parametrize("prior_scale, noise_scale", [(1.0, 1.0), (2.0, 0.3)])
def test_linear_regression_log_evidence_by_bayes_rule(prior_scale, noise_scale):
    # For a Gaussian model, log p(y) = log p(y | w) + log p(w) - log p(w | y) at ANY w, with the
    # exact Gaussian posterior; -potential(w) = log p(y | w) + log p(w) also tests the model.
    features, targets = make_linear_regression_data(
        1, num_data=30, num_features=4, prior_scale=prior_scale, noise_scale=noise_scale
    )
    log_evidence = linear_regression_log_evidence(features, targets, prior_scale, noise_scale)
    potential_fn = model_potential(
        linear_regression_model, features, targets, prior_scale, noise_scale
    )
    posterior_precision = features.T @ features / noise_scale**2 + np.eye(4) / prior_scale**2
    posterior_covariance = np.linalg.inv(posterior_precision)
    posterior_mean = posterior_covariance @ features.T @ targets / noise_scale**2
    posterior = scipy.stats.multivariate_normal(posterior_mean, posterior_covariance)
    for weights in [posterior_mean, np.zeros(4), np.array([1.0, -2.0, 0.5, 3.0])]:
        log_joint = -float(potential_fn({"w": jnp.asarray(weights)}))
        assert log_joint - posterior.logpdf(weights) == pytest.approx(log_evidence, abs=1e-9)


def test_linear_regression_log_evidence_by_quadrature():
    features, targets = make_linear_regression_data(2, num_data=20, num_features=1)
    prior_scale, noise_scale = 1.5, 0.8
    potential_fn = model_potential(
        linear_regression_model, features, targets, prior_scale, noise_scale
    )
    grid, spacing = np.linspace(-10.0, 10.0, 20_001, retstep=True)
    potentials = jax.vmap(lambda w: potential_fn({"w": w}))(jnp.asarray(grid)[:, None])
    log_evidence = linear_regression_log_evidence(features, targets, prior_scale, noise_scale)
    assert log_trapezoid(-np.asarray(potentials), spacing) == pytest.approx(log_evidence, abs=1e-8)


# ------------------------------------------------------------------------------------------------
# Boltzmann machine relaxation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_units", [2, 5, 9])
def test_boltzmann_relaxation_structure(num_units):
    relaxation = make_boltzmann_relaxation(7, num_units=num_units)
    assert isinstance(relaxation, BoltzmannRelaxation)
    weights, projection, diagonal = relaxation.weights, relaxation.projection, relaxation.diagonal
    assert weights.shape == (num_units, num_units)
    assert projection.shape == (num_units - 1, num_units)
    assert relaxation.mean.shape == (num_units - 1,)
    assert relaxation.covariance.shape == (num_units - 1, num_units - 1)
    np.testing.assert_array_equal(weights, weights.T)
    np.testing.assert_array_equal(np.diag(weights), 0.0)
    np.testing.assert_allclose(projection.T @ projection, weights + np.diag(diagonal), atol=1e-12)
    # Diagonal shift: D = -lambda_min(W) I.
    np.testing.assert_allclose(diagonal, -np.linalg.eigvalsh(weights)[0], rtol=1e-10)
    again = make_boltzmann_relaxation(7, num_units=num_units)
    np.testing.assert_array_equal(relaxation.projection, again.projection)
    assert relaxation.log_z == again.log_z


def test_boltzmann_generation_follows_appendix_b():
    # Off-diagonal W equals V = R diag(e) R^T with |e_i| < 6, so the eigenvalues of
    # W = V - diag(V) lie within 6 + max|V_ii| of zero; biases are small.
    relaxation = make_boltzmann_relaxation(11, num_units=14)
    eigenvalues = np.linalg.eigvalsh(relaxation.weights)
    assert np.max(np.abs(eigenvalues)) < 12.0
    assert np.max(np.abs(relaxation.biases)) < 0.5


@pytest.mark.parametrize("num_units", [3, 6, 10])
def test_enumeration_matches_brute_force_and_chunk_sizes(num_units):
    relaxation = make_boltzmann_relaxation(num_units, num_units=num_units)
    expected = brute_force_boltzmann_machine(relaxation.weights, relaxation.biases)
    for chunk_size in [1, 3, 64, 2**16]:
        log_z, mean, second_moment = _enumerate_boltzmann_machine(
            relaxation.weights, relaxation.biases, chunk_size=chunk_size
        )
        assert log_z == pytest.approx(expected[0], abs=1e-10)
        np.testing.assert_allclose(mean, expected[1], atol=1e-12)
        np.testing.assert_allclose(second_moment, expected[2], atol=1e-12)


def test_enumeration_does_not_overflow():
    # Log weights around 1e3 would overflow a naive exp; the running-maximum rescaling copes.
    rng = np.random.default_rng(0)
    weights = 100.0 * rng.standard_normal((8, 8))
    weights = weights + weights.T - np.diag(2 * np.diag(weights))
    biases = rng.standard_normal(8)
    expected = brute_force_boltzmann_machine(weights, biases)
    log_z, mean, _ = _enumerate_boltzmann_machine(weights, biases, chunk_size=5)
    assert log_z == pytest.approx(expected[0], rel=1e-12)
    np.testing.assert_allclose(mean, expected[1], atol=1e-12)


def test_boltzmann_log_z_by_quadrature_one_dimension():
    relaxation = make_boltzmann_relaxation(0, num_units=2)
    potential = boltzmann_relaxation_potential(relaxation)

    def density(x, power=0):
        return x**power * math.exp(-float(potential(jnp.array([x]))))

    states = np.array(list(itertools.product([-1.0, 1.0], repeat=2)))
    peaks = np.sort(states @ relaxation.projection[0])
    limit = np.max(np.abs(peaks)) + 15.0
    moments = [
        scipy.integrate.quad(
            density, -limit, limit, args=(power,), points=peaks, epsabs=0, epsrel=1e-12, limit=200
        )[0]
        for power in range(3)
    ]
    integral, first, second = moments
    assert math.log(integral) == pytest.approx(relaxation.log_z, abs=1e-8)
    mean = first / integral
    assert mean == pytest.approx(relaxation.mean[0], abs=1e-8)
    assert second / integral - mean**2 == pytest.approx(relaxation.covariance[0, 0], abs=1e-8)


def test_boltzmann_log_z_and_moments_by_grid_two_dimensions():
    # Independent of the enumeration: integrate exp(-phi) of eq. 51 over a dense 2-D grid and
    # compare with eqs. 52-54.
    relaxation = make_boltzmann_relaxation(1, num_units=3)
    potential = boltzmann_relaxation_potential(relaxation)
    # Component means Q^T s lie within |Q^T s| <= sum_i |q_i|; unit-variance tails need ~10 more.
    half_width = np.sum(np.linalg.norm(relaxation.projection, axis=0)) + 10.0
    grid, spacing = np.linspace(-half_width, half_width, 1201, retstep=True)
    mesh = np.stack(np.meshgrid(grid, grid, indexing="ij"), axis=-1)
    log_density = -np.asarray(potential(jnp.asarray(mesh)))
    log_z = log_trapezoid(log_density, spacing)
    assert log_z == pytest.approx(relaxation.log_z, abs=1e-8)

    probs = np.exp(log_density - log_z) * spacing**2
    mean = np.einsum("ij,ijk->k", probs, mesh)
    centred = mesh - mean
    covariance = np.einsum("ij,ijk,ijl->kl", probs, centred, centred)
    np.testing.assert_allclose(mean, relaxation.mean, atol=1e-8)
    np.testing.assert_allclose(covariance, relaxation.covariance, atol=1e-8)


def test_boltzmann_moments_by_exact_sampling():
    # Exact draws from the mixture: s from the enumerated Boltzmann distribution, then
    # x = Q^T s + noise. Tolerances are 5 Monte Carlo standard errors.
    relaxation = make_boltzmann_relaxation(2, num_units=8)
    rng = np.random.default_rng(1)
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=8)))
    log_weights = 0.5 * np.einsum("ni,ij,nj->n", states, relaxation.weights, states)
    log_weights += states @ relaxation.biases
    probs = np.exp(log_weights - scipy.special.logsumexp(log_weights))
    num_draws = 400_000
    sampled_states = states[rng.choice(len(states), size=num_draws, p=probs)]
    draws = sampled_states @ relaxation.projection.T + rng.standard_normal((num_draws, 7))

    mean_error = draws.mean(axis=0) - relaxation.mean
    mean_standard_error = draws.std(axis=0) / math.sqrt(num_draws)
    assert np.all(np.abs(mean_error) < 5 * mean_standard_error)

    centred = draws - relaxation.mean
    products = centred[:, :, None] * centred[:, None, :]
    covariance_error = products.mean(axis=0) - relaxation.covariance
    covariance_standard_error = products.std(axis=0) / math.sqrt(num_draws)
    assert np.all(np.abs(covariance_error) < 5 * covariance_standard_error)


def test_boltzmann_model_potential_equals_phi():
    relaxation = make_boltzmann_relaxation(3, num_units=6)
    potential = jax.jit(boltzmann_relaxation_potential(relaxation))
    potential_fn = model_potential(boltzmann_relaxation_model, relaxation)
    points = 4.0 * jax.random.normal(jax.random.PRNGKey(1), (5, 5))
    for point in points:
        assert float(potential_fn({"x": point})) == pytest.approx(
            float(potential(point)), rel=1e-12, abs=1e-12
        )
    # Batched evaluation agrees with pointwise evaluation.
    np.testing.assert_allclose(
        potential(points), [potential(point) for point in points], rtol=1e-12
    )


def test_boltzmann_potential_is_numerically_stable():
    relaxation = make_boltzmann_relaxation(4, num_units=5)
    potential = jax.jit(boltzmann_relaxation_potential(relaxation))
    far_point = jnp.full(4, 1e4)
    assert np.isfinite(float(potential(far_point)))
    assert np.all(np.isfinite(np.asarray(jax.jit(jax.grad(potential))(far_point))))
    # Reference value of log cosh by direct evaluation where it does not overflow.
    point = jnp.array([0.5, -1.0, 2.0, 0.0])
    arguments = np.asarray(point) @ relaxation.projection + relaxation.biases
    expected = 0.5 * float(point @ point) - np.sum(np.log(np.cosh(arguments)))
    assert float(potential(point)) == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------------------------------------
# Radon
# ------------------------------------------------------------------------------------------------


def test_load_radon():
    data = load_radon()
    assert data["num_counties"] == 85
    for key in ["floor", "log_uranium", "county", "log_radon"]:
        assert data[key].shape == (919,)
    assert data["county"].min() == 0 and data["county"].max() == 84
    assert len(np.unique(data["county"])) == 85
    assert set(np.unique(data["floor"])) == {0.0, 1.0}
    # Log uranium is a county-level covariate.
    for county in range(85):
        assert np.ptp(data["log_uranium"][data["county"] == county]) == 0.0


def radon_initial_params(rng_key, data):
    """Unconstrained initial values as NumPyro's default ``init_to_uniform`` draws them (in one
    jitted call; ``initialize_model`` would do the same but compiles far more slowly)."""

    def initialize(rng_key):
        seeded_model = handlers.seed(radon_model, rng_key)
        model_trace = handlers.trace(
            handlers.substitute(seeded_model, substitute_fn=init_to_uniform)
        ).get_trace(**data)
        return {
            name: biject_to(site["fn"].support).inv(site["value"])
            for name, site in model_trace.items()
            if site["type"] == "sample" and not site["is_observed"]
        }

    return jax.jit(initialize)(rng_key)


def test_radon_model_dimension_and_potential():
    data = load_radon()
    params = radon_initial_params(jax.random.PRNGKey(0), data)
    flat_params, _ = ravel_pytree(params)
    assert flat_params.shape == (92,)
    potential, gradient = jax.jit(
        jax.value_and_grad(lambda params: potential_energy(radon_model, (), data, params))
    )(params)
    assert np.isfinite(float(potential))
    assert np.all(np.isfinite(ravel_pytree(gradient)[0]))

    # The potential equals the hand-written negative log joint in unconstrained coordinates
    # (scales sampled as their logs, with log-Jacobian log sigma).
    params = {name: np.asarray(value) for name, value in params.items()}
    sigma_alpha, sigma_beta, epsilon = (
        np.exp(params[name]) for name in ["sigma_alpha", "sigma_beta", "epsilon"]
    )
    standard_normal = scipy.stats.norm()
    half_cauchy = scipy.stats.halfcauchy(scale=2.5)
    alpha = params["mu_alpha"] + sigma_alpha * params["alpha_offset"]
    beta = params["mu_beta"] + sigma_beta * params["beta_offset"]
    predicted = alpha[data["county"]] + beta[0] * data["floor"] + beta[1] * data["log_uranium"]
    log_joint = (
        standard_normal.logpdf(params["mu_alpha"])
        + standard_normal.logpdf(params["mu_beta"])
        + sum(half_cauchy.logpdf(scale) + np.log(scale) for scale in [sigma_alpha, sigma_beta])
        + half_cauchy.logpdf(epsilon)
        + np.log(epsilon)
        + standard_normal.logpdf(params["alpha_offset"]).sum()
        + standard_normal.logpdf(params["beta_offset"]).sum()
        + scipy.stats.norm(predicted, epsilon).logpdf(data["log_radon"]).sum()
    )
    assert float(potential) == pytest.approx(-log_joint, rel=1e-10)


def test_multimodal_grid_matches_its_formula_and_is_normalised():
    grid = make_multimodal_grid(uneven=True)
    theta = np.array([[25.0, 25.0], [40.0, 71.0], [149.0, 0.0]])
    distances = np.linalg.norm(theta[:, None, :] - grid.modes[None], axis=-1)
    expected = np.log(np.sum(grid.weights * np.exp(-distances / grid.scale), -1) + 1e-10)
    np.testing.assert_allclose(multimodal_grid_log_density(grid, theta), expected, rtol=1e-12)
    probabilities = multimodal_grid_probabilities(grid)
    assert probabilities.shape == (150, 150)
    np.testing.assert_allclose(probabilities.sum(), 1.0, rtol=1e-12)
    # The heavy top-left mode holds the most mass; every mode centre is a local maximum.
    assert np.unravel_index(np.argmax(probabilities), probabilities.shape) == (25, 25)
    values = np.stack(np.meshgrid(np.arange(150), np.arange(150), indexing="ij"), -1)
    nearest, _ = multimodal_grid_nearest_mode(grid, values)
    masses = np.bincount(nearest.ravel(), probabilities.ravel(), minlength=25)
    assert masses[0] == masses.max() and masses[0] > 2.0 * np.median(masses)
    # The distance has a kink at each centre: the gradient there must be finite.
    gradient = jax.grad(lambda x: multimodal_grid_log_density(grid, x))(jnp.array([50.0, 75.0]))
    assert np.all(np.isfinite(np.asarray(gradient)))


def test_multimodal_diagonal_layout_has_one_mode_per_row():
    """The diagonal layout's premise, exactly: given one coordinate at a mode centre, the
    conditional of the other holds less than 1e-6 within 15 values of another mode's
    coordinate, so a one-coordinate (Gibbs) update almost never jumps to another mode; on the
    grid layout that mass is most of the row. (The
    benchmark's layout: 5 modes 75 apart on 450 values, each as wide as the paper's.)"""
    diagonal = make_multimodal_grid(5, 75, 450, sigma2=0.15 * 25 / 5, layout="diagonal")
    assert diagonal.modes.shape == (5, 2)
    assert len(set(diagonal.modes[:, 0])) == len(set(diagonal.modes[:, 1])) == 5

    def other_modes_mass_in_row(grid, mode):
        probabilities = multimodal_grid_probabilities(grid)
        row = probabilities[int(grid.modes[mode][0])]
        conditional = row / row.sum()
        columns = np.arange(grid.num_values)
        others = np.delete(grid.modes[:, 1], mode)
        near_another = np.any(np.abs(columns[:, None] - others) < 15, -1)
        return conditional[near_another].sum()

    assert max(other_modes_mass_in_row(diagonal, m) for m in range(5)) < 1e-6
    grid = make_multimodal_grid(5, spacing=75, num_values=450)
    assert other_modes_mass_in_row(grid, 0) > 0.5
    with pytest.raises(ValueError, match="layout"):
        make_multimodal_grid(layout="rotated")
