"""Cyclical step-size and balancing schedules of the ACS paper (ACS paper eq. 7-8)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["CyclicalSchedule", "cyclical_step_sizes", "cosine_balancing", "check_schedule"]


class CyclicalSchedule(NamedTuple):
    """The ``(alpha_k, beta_k)`` used at step ``k mod s`` of every cycle (the paper's Alg. 1).

    :param step_sizes: ``alpha_0..alpha_{s-1}``, each ``> 0`` (``inf`` allowed).
    :param balancing: ``beta_0..beta_{s-1}``, each in ``[0.5, 1]`` (the paper's ``[0.5, 1)``,
        and ``1`` as its reference code allows).

    **Example:**

    .. code-block:: python

        schedule = nx.CyclicalSchedule(
            step_sizes=jnp.array([2.0, 1.0, 0.5, 0.2]), balancing=jnp.array([0.9, 0.7, 0.5, 0.5])
        )
        kernel = nx.ACS(nx.rbm_model, schedule=schedule, steps_per_cycle=4)  # skips the tuner
    """

    step_sizes: jax.Array
    balancing: jax.Array

    @property
    def steps_per_cycle(self) -> int:
        return int(jnp.shape(self.step_sizes)[-1])


def cyclical_step_sizes(alpha_max, alpha_min, steps_per_cycle):
    """Cosine step sizes ``alpha_k = max((alpha_max / 2)(cos(pi k / s) + 1), alpha_min)``.

    The ACS paper's eq. 7 as intended (the printed form misplaces the 1/2 and the +1):
    ``alpha_0 = alpha_max``, non-increasing within a cycle, never below ``alpha_min``.

    :param alpha_max: largest step size (first step of a cycle).
    :param alpha_min: smallest step size.
    :param int steps_per_cycle: ``s``.
    :return: array ``(s,)``.

    **Example:**

    .. code-block:: python

        cyclical_step_sizes(2.0, 0.1, 20)[0]  # 2.0
    """
    steps = jnp.arange(int(steps_per_cycle))
    cosine = jnp.cos(jnp.pi * steps / steps_per_cycle) + 1.0
    return jnp.maximum(0.5 * alpha_max * cosine, alpha_min)


def cosine_balancing(beta_max, beta_min, steps_per_cycle):
    """``beta_k = beta_min + (beta_max - beta_min)(1 + cos(pi k / s)) / 2``, the naive schedule
    of the tuner's burn-in (the paper's Alg. 3), array ``(s,)``."""
    steps = jnp.arange(int(steps_per_cycle))
    return beta_min + (beta_max - beta_min) * 0.5 * (
        1.0 + jnp.cos(jnp.pi * steps / steps_per_cycle)
    )


def check_schedule(schedule) -> CyclicalSchedule:
    """Validate a user schedule (concrete arrays): same length, ``alpha > 0``, ``beta`` in
    ``[0.5, 1]``; returns it as float arrays."""
    if isinstance(schedule, str) or not hasattr(schedule, "__len__") or len(schedule) != 2:
        raise TypeError(
            "schedule must be a pair (step sizes, balancing exponents) of equal-length arrays, "
            f"or None to tune one; got {schedule!r}."
        )
    step_sizes = np.atleast_1d(np.asarray(schedule[0], dtype=float))
    balancing = np.atleast_1d(np.asarray(schedule[1], dtype=float))
    if step_sizes.ndim != 1 or step_sizes.shape != balancing.shape or step_sizes.size == 0:
        raise ValueError(
            "A schedule is two 1-D arrays of the same length (step sizes, balancing exponents); "
            f"got shapes {step_sizes.shape} and {balancing.shape}."
        )
    if not np.all(step_sizes > 0):
        raise ValueError(f"Step sizes alpha must be positive (inf allowed), got {step_sizes}.")
    if not np.all((balancing >= 0.5) & (balancing <= 1.0)):
        raise ValueError(f"Balancing exponents beta must lie in [0.5, 1], got {balancing}.")
    dtype = jnp.result_type(float)
    return CyclicalSchedule(jnp.asarray(step_sizes, dtype), jnp.asarray(balancing, dtype))
