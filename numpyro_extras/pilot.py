"""Pilot NUTS draws from dispersed starts: the seed data of the learned proposals.

A learned proposal can only learn the modes its training data shows it. Its first data come from
NumPyro NUTS chains started far apart on the flat unconstrained space, each of which settles in
the mode nearest its start: together they show the modes a single chain would miss (their mixing
proportions are whatever the starts give; the learned kernel's own exact chains correct them).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC, NUTS

__all__ = ["PilotDraws", "dispersed_nuts_draws"]


class PilotDraws(NamedTuple):
    """What :func:`dispersed_nuts_draws` returns.

    :param draws: the kept draws, ``(chains, samples, D)`` (numpy).
    :param gradient_evaluations: leapfrog steps of the whole run, warm-up included.
    :param num_divergent: divergent transitions after warm-up.
    """

    draws: np.ndarray
    gradient_evaluations: int
    num_divergent: int


def dispersed_nuts_draws(
    rng_key,
    potential_fn,
    initial_position,
    *,
    num_chains,
    num_warmup,
    num_samples,
    radius=2.0,
    progress_bar=True,
) -> PilotDraws:
    """Vectorized NUTS chains from starts uniform in ``[-radius, radius]^D`` (a start where the
    potential is not finite is replaced by ``initial_position``).

    :param rng_key: key for the starts and the run.
    :param potential_fn: ``x -> U(x)`` on flat 1-D points.
    :param initial_position: a flat point with a finite potential.
    :param int num_chains: chains.
    :param int num_warmup: warm-up transitions per chain.
    :param int num_samples: kept draws per chain.
    :param float radius: half-width of the box of starts.
    :param bool progress_bar: show NumPyro's progress bar.
    :return: :class:`PilotDraws`.

    **Example:**

    .. code-block:: python

        pilot = dispersed_nuts_draws(key, potential_fn, jnp.zeros(2), num_chains=16,
                                     num_warmup=300, num_samples=200)
        data = pilot.draws.reshape(-1, 2)
    """
    start_key, warmup_key, run_key = jax.random.split(rng_key, 3)
    initial_position = jnp.asarray(initial_position)
    dimension = initial_position.shape[-1]
    starts = jax.random.uniform(
        start_key, (num_chains, dimension), initial_position.dtype, -radius, radius
    )
    finite = jax.vmap(lambda x: jnp.isfinite(potential_fn(x)))(starts)
    starts = jnp.where(finite[:, None], starts, initial_position)
    mcmc = MCMC(
        NUTS(potential_fn=potential_fn),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=progress_bar,
    )
    mcmc.warmup(warmup_key, init_params=starts, collect_warmup=True, extra_fields=("num_steps",))
    evaluations = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
    mcmc.run(run_key, extra_fields=("num_steps", "diverging"))
    extra = mcmc.get_extra_fields()
    evaluations += int(np.sum(extra["num_steps"]))
    return PilotDraws(
        np.asarray(mcmc.get_samples(group_by_chain=True)),
        evaluations,
        int(np.sum(extra["diverging"])),
    )
