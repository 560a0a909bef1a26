"""Checks and pictures of a trained Ai-sampler: the involution and unit-Jacobian checks that make
its kernel exact, the training curve, and its proposals over a 2-D target."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_extras.involutive.chains import involutive_proposal
from numpyro_extras.involutive.networks import InvolutiveProposal, involution
from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.plotting import pyplot
from numpyro_extras.shell.validation import check_rng_key

__all__ = ["InvolutionCheck", "involution_check", "mode_switch_rate", "plot_ai_sampler"]


class InvolutionCheck(NamedTuple):
    """What :func:`involution_check` measured.

    :param max_involution_error: ``max |M(M(s)) - s|`` over the points.
    :param max_log_det: ``max |log |det dM/ds||`` over the points (0 for a volume-preserving map).

    **Example:**

    .. code-block:: python

        check = nx.involution_check(params, jax.random.PRNGKey(0))
        check.max_involution_error, check.max_log_det  # both about 0
    """

    max_involution_error: float
    max_log_det: float


def involution_check(params: InvolutiveProposal, rng_key, num_points=256, spread=3.0):
    """Check on random extended states that ``M`` is an involution with unit Jacobian, the two
    properties that make the kernel exact (eq. 3 with ``|det dM/ds| = 1``).

    The states are ``(x, v)`` with ``x = loc + spread * scale e`` and ``v = spread * e'``,
    ``e, e' ~ N(0, I)``: around and well beyond where the network was trained.

    :param InvolutiveProposal params: the involution.
    :param rng_key: key for the points.
    :param int num_points: points checked (the Jacobian on the first 32).
    :param float spread: how far out the points go, in standard deviations.
    :return: :class:`InvolutionCheck`.

    **Example:**

    .. code-block:: python

        check = nx.involution_check(params, jax.random.PRNGKey(0))
        assert check.max_involution_error < 1e-4
    """
    check_rng_key(rng_key)
    error, log_det = _check(params, rng_key, num_points, spread)
    return InvolutionCheck(float(error), float(log_det))


@partial(quick_jit, static_argnums=(2,))
def _check(params, rng_key, num_points, spread):
    n = params.dimension
    noise = spread * jax.random.normal(rng_key, (num_points, 2 * n), params.loc.dtype)
    states = noise.at[:, :n].set(params.unstandardize(noise[:, :n]))
    images = involution(params, states)
    error = jnp.max(jnp.abs(involution(params, images) - states))
    jacobians = jax.vmap(jax.jacfwd(lambda state: involution(params, state)))(states[:32])
    return error, jnp.max(jnp.abs(jnp.linalg.slogdet(jacobians)[1]))


def mode_switch_rate(labels):
    """The fraction of transitions whose mode label differs from the previous one.

    :param labels: integer mode labels, ``(num_chains, num_draws)`` or ``(num_draws,)``.
    :return: the fraction (float), over every chain.

    **Example:**

    .. code-block:: python

        labels = jnp.array([[0, 0, 1, 1], [1, 0, 1, 0]])  # e.g. the sign of a coordinate per draw
        nx.mode_switch_rate(labels)  # 4 switches in 6 transitions: 0.67
    """
    labels = np.atleast_2d(np.asarray(labels))
    numeric = np.issubdtype(labels.dtype, np.number) or labels.dtype == np.bool_
    if labels.ndim != 2 or not numeric:
        raise TypeError(
            "labels must be numeric mode labels of shape (num_chains, num_draws) or "
            f"(num_draws,), got an array of {labels.dtype} and shape {labels.shape}."
        )
    if labels.shape[1] < 2:
        raise ValueError(f"labels need at least 2 draws per chain, got shape {labels.shape}.")
    return float(np.mean(labels[:, 1:] != labels[:, :-1]))


def plot_ai_sampler(params: InvolutiveProposal, potential_fn=None, rng_key=None, axes=None):
    """Plot the training curve (bootstrap acceptance per epoch) and, on a 2-D target, the
    proposals ``x -> x'`` of the trained map from the training chains' last positions over the
    target's density.

    :param InvolutiveProposal params: a trained involution (with its ``history``).
    :param potential_fn: ``U(x)`` of a 2-D target for the density contours (optional).
    :param rng_key: key for the momenta of the drawn proposals.
    :param axes: two matplotlib axes, or ``None`` for a new figure.
    :return: the matplotlib figure.

    **Example:**

    .. code-block:: python

        nx.plot_ai_sampler(params).savefig("ai_sampler.png")
    """
    plt = pyplot("plot_ai_sampler")

    if axes is None:
        figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    else:
        figure = axes[0].figure
    history = params.history
    if history is not None:
        axes[0].plot(np.arange(1, len(history.accept_rates) + 1), history.accept_rates, ".-")
    axes[0].set(xlabel="epoch", ylabel="bootstrap acceptance", ylim=(0, 1))
    if params.dimension != 2:
        axes[1].set_axis_off()
        axes[1].text(0.5, 0.5, f"{params.dimension}-D target: no proposal plot", ha="center")
        return figure
    starts = np.asarray(params.starts)
    if potential_fn is not None:
        low, high = (
            starts.min(0) - 3 * np.asarray(params.marginal_scale),
            starts.max(0) + 3 * np.asarray(params.marginal_scale),
        )
        grid = np.stack(
            np.meshgrid(np.linspace(low[0], high[0], 120), np.linspace(low[1], high[1], 120)), -1
        )
        energy = np.asarray(jax.vmap(potential_fn)(jnp.asarray(grid.reshape(-1, 2))))
        density = np.exp(-(energy - np.nanmin(energy))).reshape(grid.shape[:2])
        axes[1].contour(grid[..., 0], grid[..., 1], density, levels=8, cmap="Greys")
    key = jax.random.PRNGKey(0) if rng_key is None else rng_key
    keys = jax.random.split(key, len(starts))
    proposed = jax.vmap(lambda k, x: involutive_proposal(k, params, x)[1])(
        keys, jnp.asarray(starts)
    )
    proposed = np.asarray(proposed)
    axes[1].scatter(starts[:, 0], starts[:, 1], s=12, label="x")
    axes[1].scatter(proposed[:, 0], proposed[:, 1], s=12, label="proposal M(x, v)")
    for start, end in zip(starts, proposed, strict=True):
        axes[1].plot([start[0], end[0]], [start[1], end[1]], lw=0.5, color="grey")
    axes[1].legend()
    axes[1].set(xlabel="x[0]", ylabel="x[1]")
    return figure
