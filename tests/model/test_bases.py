"""The base densities shared by tempering and AIS."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from scipy.stats import multivariate_normal

import numpyro_extras as nx
from numpyro_extras.model.bases import gaussian_log_density, gaussian_log_normalizers, validate_base


def test_the_one_gaussian_density_against_scipy():
    """gaussian_log_density batched over components, and gaussian_log_normalizers (the density
    at the mean), against SciPy's multivariate normal with the covariance L L^T."""
    locs = np.array([[-2.0, 0.5], [1.5, 1.0]])
    trils = np.array([[[1.0, 0.0], [0.4, 0.7]], [[0.5, 0.0], [-0.2, 1.3]]])
    point = np.array([0.3, -1.1])
    expected = [
        multivariate_normal(loc, tril @ tril.T).logpdf(point)
        for loc, tril in zip(locs, trils, strict=True)
    ]
    np.testing.assert_allclose(gaussian_log_density(point, locs, trils), expected, rtol=1e-12)
    at_means = [
        multivariate_normal(loc, tril @ tril.T).logpdf(loc)
        for loc, tril in zip(locs, trils, strict=True)
    ]
    np.testing.assert_allclose(gaussian_log_normalizers(trils), at_means, rtol=1e-12)


def test_mixture_base_density_and_gradient():
    """psi and its gradient against NumPyro's mixture log density and jax.grad."""
    base = nx.MixtureBase(
        jnp.array([[-2.0, 0.5], [1.5, 1.0]]),
        jnp.array([[[1.0, 0.0], [0.4, 0.7]], [[0.5, 0.0], [-0.2, 1.3]]]),
        jnp.log(jnp.array([0.3, 0.7])),
        jnp.asarray(0.0),
    )
    mixture = dist.MixtureSameFamily(
        dist.Categorical(probs=jnp.array([0.3, 0.7])),
        dist.MultivariateNormal(base.component_locs, scale_tril=base.component_scale_trils),
    )
    potential_and_gradient = base.potential_and_gradient()
    for point in jax.random.normal(jax.random.PRNGKey(1), (5, 2)) * 2:
        value, gradient = potential_and_gradient(point)
        np.testing.assert_allclose(value, -mixture.log_prob(point), rtol=1e-10)
        expected = jax.grad(lambda x: -mixture.log_prob(x))(point)
        np.testing.assert_allclose(gradient, expected, rtol=1e-8, atol=1e-12)
        # the jittable log density, also with the mixture's arrays traced
        np.testing.assert_allclose(base.log_prob(point), mixture.log_prob(point), rtol=1e-10)
        traced = jax.jit(lambda b, x: b.log_prob(x))(base, point)
        np.testing.assert_allclose(traced, mixture.log_prob(point), rtol=1e-10)
        traced_potential = jax.jit(lambda b, x: b.potential(x))(base, point)
        np.testing.assert_allclose(traced_potential, -mixture.log_prob(point), rtol=1e-10)
        components = dist.MultivariateNormal(
            base.component_locs, scale_tril=base.component_scale_trils
        ).log_prob(point) + jnp.log(jnp.array([0.3, 0.7]))
        np.testing.assert_allclose(base.component_log_densities(point), components, rtol=1e-10)
    draws = base.sample(jax.random.PRNGKey(2), (20000,))
    np.testing.assert_allclose(draws.mean(0), base.loc, atol=0.05)
    assert validate_base(base, 2) is not None
    with pytest.raises(ValueError, match="sum to 1"):
        validate_base(base._replace(component_log_weights=jnp.zeros(2)))
