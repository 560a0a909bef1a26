"""The 2-D energies: exact mode weights against brute-force integration on a grid."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_extras.targets.planar import PLANAR_TARGETS, planar_target


@pytest.mark.parametrize("name", PLANAR_TARGETS)
def test_mode_weights_match_a_grid_integral(name):
    target = planar_target(name)
    axis = np.linspace(-9.0, 9.0, 1201)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    energy = np.asarray(jax.jit(jax.vmap(target.potential_fn))(jnp.asarray(grid)))
    density = np.exp(-(energy - energy.min()))
    labels = target.label_fn(grid)
    weights = np.bincount(labels, weights=density, minlength=len(target.mode_weights))
    np.testing.assert_allclose(weights / weights.sum(), target.mode_weights, atol=2e-3)
    np.testing.assert_array_equal(target.label_fn(target.starts), np.arange(len(target.starts)))


def test_the_targets_are_reachable_from_the_package():
    import numpyro_extras as nx

    assert nx.targets.planar_target is planar_target
