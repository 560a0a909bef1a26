"""The ladder of inverse temperatures and its tuning from swap rejection rates.

Syed et al. ("Non-reversible parallel tempering", JRSSB 2022, section 5) show that the
round-trip rate of non-reversible parallel tempering is highest when every gap of the ladder has
the same swap rejection rate. The rejection rates ``r_i`` of a run give the cumulative
communication barrier ``Lambda(beta_i) = sum_{j < i} r_j``; the tuned ladder puts
``beta_i = Lambda^{-1}(i Lambda(1) / N)`` (their Algorithm 4). ``Lambda(1)`` is a property of
the path, not of the ladder; about ``2 Lambda(1)`` replicas is where more stop paying.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

__all__ = [
    "initial_ladder",
    "equalized_ladder",
    "communication_barrier",
    "replicas_for_barrier",
    "tuning_rounds",
    "MINIMUM_REJECTION",
    "MAX_REPLICA_VALUES",
    "MIN_AUTO_REPLICAS",
    "MIN_AUTO_LEG_REPLICAS",
    "MAX_AUTO_REPLICAS",
]

# A gap whose swaps are always accepted still spans a little of the path; without a floor the
# cumulative barrier would be flat there and could not be inverted.
MINIMUM_REJECTION = 1e-4
# Replicas x values of one replica (unconstrained dimensions, or discrete values) of one chain, a
# bound on the state's size (positions, gradients and a mass matrix per replica).
MAX_REPLICA_VALUES = 2_000_000
# Past 2 Lambda more rungs no longer add round trips, but the stepping-stone estimate of log Z
# still gains: each gap's ratio has less variance the closer its two rungs are. The floor keeps
# that precision on easy paths; more than the maximum cost more than they could still gain.
MIN_AUTO_REPLICAS = 16
# Each leg of a stabilised run (a fitted leg and a prior leg) has its own stepping stone, and
# the pooled estimate gains the precision of both: half the floor per leg keeps the run's
# replicas at those of one ladder.
MIN_AUTO_LEG_REPLICAS = MIN_AUTO_REPLICAS // 2
MAX_AUTO_REPLICAS = 64


def initial_ladder(num_replicas, power=4.0, dtype=jnp.float64):
    """``beta_i = (i / (N - 1))^power``: dense near the reference, where the path usually changes
    fastest, before any tuning.

    :param int num_replicas: ``N``, at least 2.
    :param float power: the exponent.
    :return: array ``(N,)`` from 0 to 1.

    **Example:**

    .. code-block:: python

        initial_ladder(5)  # [0, 0.0039, 0.0625, 0.316, 1]
    """
    return jnp.linspace(0.0, 1.0, num_replicas, dtype=dtype) ** power


def communication_barrier(accept_rates):
    """The cumulative barrier ``Lambda(beta_i)`` at the ladder's points from the mean swap
    acceptance of each gap.

    :param accept_rates: mean swap acceptance probability of each gap, shape ``(N - 1,)``.
    :return: array ``(N,)``, 0 at the reference; its last entry is the global barrier.
    """
    rejection = jnp.clip(1.0 - accept_rates, MINIMUM_REJECTION, 1.0)
    return jnp.concatenate([jnp.zeros(1, rejection.dtype), jnp.cumsum(rejection)])


def equalized_ladder(betas, accept_rates, num_replicas=None):
    """The ladder with equal swap rejection in every gap (Syed et al. Algorithm 4), from the
    rejection rates measured on ``betas``, with as many rungs or ``num_replicas``.

    ``Lambda`` is interpolated linearly between the measured points (monotone, so its inverse
    exists); the ends stay at ``betas[0]`` and ``betas[-1]``.

    :param betas: the current ladder, shape ``(N,)``, increasing.
    :param accept_rates: mean swap acceptance probability of each gap, shape ``(N - 1,)``.
    :param int num_replicas: the new ladder's length ``M`` (default ``N``), at least 2.
    :return: the new ladder, shape ``(M,)``.

    **Example:**

    .. code-block:: python

        equalized_ladder(jnp.array([0.0, 0.5, 1.0]), jnp.array([0.9, 0.1]))  # [0, 0.722, 1]
        equalized_ladder(jnp.array([0.0, 0.5, 1.0]), jnp.array([0.9, 0.1]), 2)  # [0, 1]
    """
    barrier = communication_barrier(accept_rates)
    length = betas.shape[0] if num_replicas is None else num_replicas
    targets = jnp.linspace(0.0, 1.0, length, dtype=betas.dtype) * barrier[-1]
    tuned = jnp.interp(targets, barrier, betas)
    return tuned.at[0].set(betas[0]).at[-1].set(betas[-1])


def replicas_for_barrier(
    barrier,
    values_per_replica=1,
    minimum=MIN_AUTO_REPLICAS,
    maximum=MAX_AUTO_REPLICAS,
    max_values=MAX_REPLICA_VALUES,
):
    """The number of replicas for a path with global communication barrier ``Lambda``:
    ``ceil(2 Lambda)``, where the round-trip rate of non-reversible parallel tempering has
    nearly reached its limit ``1 / (2 + 2 Lambda)`` for many replicas, so that more replicas
    stop paying (Syed et al. 2022, section 5), clipped to ``[minimum, cap]`` with
    ``cap = min(maximum, max_values // values_per_replica)`` (the memory bound of one chain).

    :param float barrier: ``Lambda``, e.g. ``communication_barrier(accept_rates)[-1]``.
    :param int values_per_replica: the values one replica holds (unconstrained dimensions, or
        discrete values).
    :param int minimum: the smallest count returned (unless the cap is smaller).
    :param int maximum: the largest count returned.
    :param int max_values: replicas x ``values_per_replica`` allowed per chain.
    :return: ``int``, at least 2.
    :raises ValueError: if not even 2 replicas fit the memory bound, or ``barrier`` is not a
        finite non-negative number.

    **Example:**

    .. code-block:: python

        replicas_for_barrier(3.2)  # 16, the floor
        replicas_for_barrier(3.2, minimum=4)  # 7
        replicas_for_barrier(40.0, values_per_replica=100_000)  # 20, the memory bound
    """
    barrier = float(barrier)
    if not (math.isfinite(barrier) and barrier >= 0):
        raise ValueError(f"The communication barrier must be finite and >= 0, got {barrier}.")
    cap = min(maximum, max_values // values_per_replica)
    if cap < 2:
        raise ValueError(
            f"Two replicas of {values_per_replica} values each exceed the memory bound of "
            f"{max_values} values per chain."
        )
    return int(min(max(math.ceil(2.0 * barrier), minimum), cap))


def tuning_rounds(num_warmup, first_round=8, last_fraction=0.75):
    """The warm-up iterations after which the ladder is re-tuned: rounds of doubling length
    (8, 16, 32, ... scans), the last ending by ``last_fraction`` of the warm-up so that the
    inner kernels adapt to the final ladder before sampling.

    :param int num_warmup: warm-up length.
    :return: numpy int array of iteration numbers (1-based, increasing), possibly empty.

    **Example:**

    .. code-block:: python

        tuning_rounds(1000)  # [8, 16, 32, 64, 128, 256, 512]
    """
    ends = []
    end = first_round
    while end <= last_fraction * num_warmup:
        ends.append(end)
        end *= 2
    return np.asarray(ends, dtype=np.int32)
