r"""The ACS paper's synthetic two-dimensional multimodal distribution over ordinal integers (its
Sec. 4.1, App. D.1 and Table 3), with its exact distribution by enumeration
(:func:`multimodal_grid_probabilities`) and a NumPyro model on two categorical sites
(:func:`multimodal_grid_model`).
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = [
    "MULTIMODAL_LAYOUTS",
    "MultimodalGrid",
    "make_multimodal_grid",
    "multimodal_grid_log_density",
    "multimodal_grid_model",
    "multimodal_grid_nearest_mode",
    "multimodal_grid_probabilities",
]

# ------------------------------------------------------------------------------------------------
# Synthetic multimodal distribution over ordinal integers (ACS paper Sec. 4.1, Table 3)
# ------------------------------------------------------------------------------------------------


class MultimodalGrid(NamedTuple):
    """
    The ACS paper's synthetic two-dimensional target on ``{0, ..., N - 1}^2`` (its Sec. 4.1 and
    App. D.1): modes on a square grid and the log density of the paper's code,

    .. math::

        U(\\theta) = \\log\\Big(\\sum_m w_m \\exp\\big(-\\lVert\\theta - \\mu_m\\rVert_2 / s\\big)
        + 10^{-10}\\Big),

    with the **unsquared** Euclidean distance and ``s = sigma^2 L``: the code made the paper's
    figures, while the paper's eq. 2 has the exponent's sign wrong and a scale inconsistent with
    ``sigma^2 = 0.15``. Build one with :func:`make_multimodal_grid`.

    :param int num_values: ``N``, the number of values of each coordinate.
    :param modes: mode centres ``mu_m``, float array ``[L, 2]``.
    :param weights: mode weights ``w_m``, float array ``[L]``.
    :param float scale: ``s = sigma^2 L``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_multimodal_grid
        grid = make_multimodal_grid(modes_per_side=3, layout="diagonal")
        grid.modes  # [[25, 25], [50, 50], [75, 75]]
    """

    num_values: int
    modes: np.ndarray
    weights: np.ndarray
    scale: float


#: Where :func:`make_multimodal_grid` puts the modes: ``"grid"`` (the paper's square grid) or
#: ``"diagonal"`` (one mode per row and column).
MULTIMODAL_LAYOUTS = ("grid", "diagonal")


def make_multimodal_grid(
    modes_per_side=5,
    spacing=25,
    num_values=150,
    sigma2=None,
    uneven=False,
    heavy_weight=1.0,
    light_weight=0.4,
    layout="grid",
):
    """
    The synthetic multimodal target of the ACS paper (its Fig. 1 and Table 3) scaled to CPU size.

    ``L = modes_per_side^2`` modes at ``(spacing (i + 1), spacing (j + 1))``, ``i, j = 0, ...,
    modes_per_side - 1`` (the paper's layout; its printed formula for the centres is a typo).
    The even case has ``w_m = 1`` and ``sigma^2 = 0.15`` (the paper's Fig. 1); the uneven case
    (Table 3) gives the top-left mode ``(spacing, spacing)`` the weight ``heavy_weight`` and every
    other mode ``light_weight``, with ``sigma^2 = 0.2`` (the paper's code). The paper says only
    that the top-left mode is the heaviest (Fig. 5); the defaults 1.0 and 0.4 are its code's
    weights.

    ``layout="diagonal"`` puts ``L = modes_per_side`` modes at ``(spacing (k + 1), spacing
    (k + 1))`` instead: neighbours are ``sqrt(2) spacing`` apart, as far as on the grid, but no
    row or column holds two modes, so a sampler that moves one coordinate at a time (Gibbs)
    cannot step from one mode to the next, as it can along the grid's rows. The modes of
    correlated coordinates look like this.

    :param int modes_per_side: ``sqrt(L)`` (paper 5).
    :param int spacing: ``Delta`` between neighbouring modes (paper 75; 25 at CPU size).
    :param int num_values: ``N`` values per coordinate (paper 450; 150 at CPU size).
    :param float sigma2: ``sigma^2``; ``None`` for the paper's 0.15 (even) or 0.2 (uneven).
    :param bool uneven: uneven mode weights (Table 3).
    :param str layout: one of :data:`MULTIMODAL_LAYOUTS`.
    :return: :class:`MultimodalGrid`.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_multimodal_grid, multimodal_grid_probabilities
        grid = make_multimodal_grid()
        multimodal_grid_probabilities(grid).shape  # (150, 150)
    """
    modes_per_side, spacing, num_values = int(modes_per_side), int(spacing), int(num_values)
    if modes_per_side < 1 or spacing < 1 or spacing * modes_per_side >= num_values:
        raise ValueError(
            f"The modes must lie inside {{0, ..., {num_values - 1}}}^2: got modes_per_side="
            f"{modes_per_side}, spacing={spacing}."
        )
    if layout not in MULTIMODAL_LAYOUTS:
        raise ValueError(f"layout must be one of {MULTIMODAL_LAYOUTS}, got {layout!r}.")
    centres = spacing * (np.arange(modes_per_side) + 1.0)
    if layout == "grid":
        rows, columns = np.meshgrid(centres, centres, indexing="ij")
        modes = np.stack([rows.ravel(), columns.ravel()], -1)
    else:
        modes = np.stack([centres, centres], -1)
    weights = np.ones(len(modes))
    if uneven:
        weights[:] = light_weight
        weights[0] = heavy_weight
    if sigma2 is None:
        sigma2 = 0.2 if uneven else 0.15
    return MultimodalGrid(num_values, modes, weights, float(sigma2) * len(modes))


def _safe_norm(offsets):
    """Euclidean norm over the last axis whose gradient is 0 (not NaN) at the origin."""
    squared = jnp.sum(offsets**2, -1)
    positive = squared > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, squared, 1.0)), 0.0)


def multimodal_grid_log_density(grid, theta):
    """
    ``U(theta)`` of :class:`MultimodalGrid` (a log density, unnormalised), differentiable.

    The distance's gradient is taken as 0 at a mode centre, where the Euclidean norm has none,
    so that any gradient user (not only ACS, which reads a non-finite gradient as flat) gets a
    finite value there.

    :param MultimodalGrid grid: the target.
    :param theta: coordinates, float array ``[..., 2]`` (integers in ``{0, ..., N - 1}``).
    :return: array ``[...]``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_multimodal_grid, multimodal_grid_log_density
        grid = make_multimodal_grid()
        multimodal_grid_log_density(grid, grid.modes[:2])  # at two mode centres
    """
    theta = jnp.asarray(theta, dtype=jnp.result_type(float))
    distances = _safe_norm(theta[..., None, :] - jnp.asarray(grid.modes))
    log_mixture = jax.nn.logsumexp(
        -distances / grid.scale + jnp.log(jnp.asarray(grid.weights)), axis=-1
    )
    return jnp.logaddexp(log_mixture, math.log(1e-10))


def multimodal_grid_probabilities(grid):
    """
    The exact distribution of :class:`MultimodalGrid` over all ``N^2`` states, by enumeration.

    :param MultimodalGrid grid: the target.
    :return: float64 numpy array ``[N, N]`` summing to 1; entry ``[a, b]`` is ``P(theta = (a, b))``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_multimodal_grid, multimodal_grid_probabilities
        probabilities = multimodal_grid_probabilities(make_multimodal_grid())
        probabilities[25, 25] / probabilities[0, 0]  # a mode centre against a corner
    """
    values = np.arange(grid.num_values, dtype=np.float64)
    theta = np.stack(np.meshgrid(values, values, indexing="ij"), -1)
    log_p = np.asarray(multimodal_grid_log_density(grid, theta), dtype=np.float64)
    p = np.exp(log_p - log_p.max())
    return p / p.sum()


def multimodal_grid_nearest_mode(grid, theta):
    """
    Index of the nearest mode centre (ties to the lower index) for each state.

    :param MultimodalGrid grid: the target.
    :param theta: coordinates, array ``[..., 2]``.
    :return: integer numpy array ``[...]`` and the distance to that mode, float array ``[...]``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_multimodal_grid, multimodal_grid_nearest_mode
        grid = make_multimodal_grid()
        mode, distance = multimodal_grid_nearest_mode(grid, [[24, 27], [149, 149]])  # [0, 24]
    """
    theta = np.asarray(theta, dtype=np.float64)
    distances = np.linalg.norm(theta[..., None, :] - grid.modes, axis=-1)
    nearest = np.argmin(distances, -1)
    return nearest, np.take_along_axis(distances, nearest[..., None], -1)[..., 0]


def multimodal_grid_model(grid):
    """
    :class:`MultimodalGrid` as a NumPyro model with two ``Categorical(N)`` latent sites ``"a"``
    and ``"b"`` (the two coordinates) and a factor site ``"log_density"``; the uniform
    categorical prior is a constant, so the posterior is exactly the grid distribution (for
    NumPyro's discrete Gibbs kernels, which enumerate the values of one site at a time).

    :param MultimodalGrid grid: the target.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_multimodal_grid, multimodal_grid_model
        mcmc = MCMC(nx.ACS(multimodal_grid_model), num_warmup=300, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), make_multimodal_grid())
    """
    logits = jnp.zeros(grid.num_values)
    a = numpyro.sample("a", dist.Categorical(logits=logits))
    b = numpyro.sample("b", dist.Categorical(logits=logits))
    numpyro.factor("log_density", multimodal_grid_log_density(grid, jnp.stack([a, b], -1)))
