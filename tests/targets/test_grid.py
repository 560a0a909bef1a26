"""Exact checks of the ACS paper's synthetic multimodal grid: density, enumeration, layouts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_extras.targets.grid import (
    make_multimodal_grid,
    multimodal_grid_log_density,
    multimodal_grid_nearest_mode,
    multimodal_grid_probabilities,
)

# The density is checked to 1e-12 relative, beyond float32.
jax.config.update("jax_enable_x64", True)


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
