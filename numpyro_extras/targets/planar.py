"""Two-dimensional energies with exact mode weights: the learned-kernel benchmarks of A-NICE-MC
and the Ai-sampler paper (mog2, mog6, ring, ring5; the reference code's constants) and an uneven
mixture of our own.

Each is a potential ``U(x)`` on ``R^2`` (``p ∝ exp(-U)``) with a labelling of points by mode (the
nearest component, or the nearest ring) and the exact weight of each label, from the mixture
weights (Gaussian components far enough apart that their overlap is below 1e-12) or from radial
quadrature (rings).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import scipy.integrate
from jax.scipy.special import logsumexp

__all__ = ["PlanarTarget", "planar_target", "PLANAR_TARGETS"]

PLANAR_TARGETS = ("mog2", "mog6", "ring", "ring5", "uneven3")

# The reference code's component variance (the paper's text says a standard deviation of 0.5).
MIXTURE_VARIANCE = 0.5


class PlanarTarget(NamedTuple):
    """A 2-D target.

    :param name: its name.
    :param potential_fn: ``U(x)`` for ``x`` of shape ``(2,)`` (jittable).
    :param label_fn: numpy ``(..., 2) -> (...)`` integer mode labels.
    :param mode_weights: exact weight of each label.
    :param starts: one point per mode (a chain started at ``starts[0]`` is in mode 0).

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import planar_target
        target = planar_target("mog2")
        target.label_fn(target.starts), target.mode_weights  # [0, 1], [0.5, 0.5]
    """

    name: str
    potential_fn: object
    label_fn: object
    mode_weights: np.ndarray
    starts: np.ndarray


def _mixture(name, means, weights):
    means = np.asarray(means, dtype=np.float64)
    log_weights = jnp.log(jnp.asarray(weights))
    jnp_means = jnp.asarray(means)

    def potential_fn(x):
        squared = jnp.sum((x - jnp_means) ** 2, -1)
        return -logsumexp(log_weights - 0.5 * squared / MIXTURE_VARIANCE)

    def label_fn(x):
        x = np.asarray(x)
        return np.argmin(np.sum((x[..., None, :] - means) ** 2, -1), -1)

    return PlanarTarget(name, potential_fn, label_fn, np.asarray(weights, np.float64), means)


def _rings(name, radial_energy, radii):
    """A target whose energy depends on the radius only; label = the nearest of ``radii``."""
    radii = np.asarray(radii, dtype=np.float64)

    def potential_fn(x):
        return radial_energy(jnp.sqrt(jnp.sum(x**2)), jnp)

    def label_fn(x):
        radius = np.sqrt(np.sum(np.asarray(x) ** 2, -1))
        return np.argmin(np.abs(radius[..., None] - radii), -1)

    # p(r) ∝ r exp(-U(r)); the boundaries between labels lie halfway between the radii.
    edges = np.concatenate([[0.0], 0.5 * (radii[1:] + radii[:-1]), [radii[-1] + 10.0]])

    def density(r):
        return r * math.exp(-float(radial_energy(r, np)))

    masses = np.array(
        [
            scipy.integrate.quad(density, low, high, limit=200, epsabs=0, epsrel=1e-10)[0]
            for low, high in zip(edges[:-1], edges[1:], strict=True)
        ]
    )
    starts = np.stack([radii, np.zeros_like(radii)], -1)
    return PlanarTarget(name, potential_fn, label_fn, masses / masses.sum(), starts)


def planar_target(name) -> PlanarTarget:
    """One of :data:`PLANAR_TARGETS`.

    - ``mog2``: ``N((±5, 0), 0.5 I)``, equal weights.
    - ``mog6``: six equal components at ``5 (sin(i pi / 3), cos(i pi / 3))``, variance 0.5.
    - ``ring``: ``U = (r - 2)^2 / 0.32``, one label.
    - ``ring5``: ``U = min_i (r - i)^2 / 0.04``, ``i = 1..5``; label = the nearest ring, exact
      masses by radial quadrature.
    - ``uneven3``: three components at the vertices of an equilateral triangle of radius 5,
      variance 0.5, weights ``(1/6, 1/6, 2/3)``.

    :param str name: the target.
    :return: :class:`PlanarTarget`.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets.planar import planar_target
        planar_target("ring5").mode_weights  # about [1, 2, 3, 4, 5] / 15
    """
    if name == "mog2":
        return _mixture(name, [[5.0, 0.0], [-5.0, 0.0]], [0.5, 0.5])
    if name == "mog6":
        angles = np.arange(1, 7) * np.pi / 3
        return _mixture(name, 5.0 * np.stack([np.sin(angles), np.cos(angles)], -1), [1 / 6] * 6)
    if name == "uneven3":
        angles = np.pi / 2 + 2 * np.pi * np.arange(3) / 3
        means = 5.0 * np.stack([np.cos(angles), np.sin(angles)], -1)
        return _mixture(name, means, [1 / 6, 1 / 6, 2 / 3])
    if name == "ring":
        return _rings(name, lambda r, xp: (r - 2.0) ** 2 / 0.32, [2.0])
    if name == "ring5":
        return _rings(
            name,
            lambda r, xp: xp.min(xp.stack([(r - i) ** 2 / 0.04 for i in range(1, 6)]), axis=0),
            [1.0, 2.0, 3.0, 4.0, 5.0],
        )
    raise ValueError(f"name must be one of {PLANAR_TARGETS}, got {name!r}.")
