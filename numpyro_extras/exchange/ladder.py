"""The ladder of inverse temperatures and its tuning from swap rejection rates.

Syed et al. ("Non-reversible parallel tempering", JRSSB 2022, section 5) show that the
round-trip rate of non-reversible parallel tempering is highest when every gap of the ladder has
the same swap rejection rate. The rejection rates ``r_i`` of a run give the cumulative
communication barrier ``Lambda(beta_i) = sum_{j < i} r_j``; the tuned ladder puts
``beta_i = Lambda^{-1}(i Lambda(1) / N)`` (their Algorithm 4). ``Lambda(1)`` is a property of
the path, not of the ladder; about ``2 Lambda(1)`` replicas is where more stop paying.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = [
    "initial_ladder",
    "equalized_ladder",
    "communication_barrier",
    "tuning_rounds",
    "MINIMUM_REJECTION",
]

# A gap whose swaps are always accepted still spans a little of the path; without a floor the
# cumulative barrier would be flat there and could not be inverted.
MINIMUM_REJECTION = 1e-4


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


def equalized_ladder(betas, accept_rates):
    """The ladder with equal swap rejection in every gap (Syed et al. Algorithm 4), from the
    rejection rates measured on ``betas``.

    ``Lambda`` is interpolated linearly between the measured points (monotone, so its inverse
    exists); the ends stay at ``betas[0]`` and ``betas[-1]``.

    :param betas: the current ladder, shape ``(N,)``, increasing.
    :param accept_rates: mean swap acceptance probability of each gap, shape ``(N - 1,)``.
    :return: the new ladder, shape ``(N,)``.

    **Example:**

    .. code-block:: python

        equalized_ladder(jnp.array([0.0, 0.5, 1.0]), jnp.array([0.9, 0.1]))  # [0, 0.55, 1]
    """
    barrier = communication_barrier(accept_rates)
    targets = jnp.linspace(0.0, 1.0, betas.shape[0], dtype=betas.dtype) * barrier[-1]
    tuned = jnp.interp(targets, barrier, betas)
    return tuned.at[0].set(betas[0]).at[-1].set(betas[-1])


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
