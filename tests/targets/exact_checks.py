"""Exact-answer helpers shared by the target tests: a model's potential as HMC sees it, and the
trapezoid rule in log space."""

import math

import jax
import numpy as np
from numpyro.infer.util import potential_energy


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
