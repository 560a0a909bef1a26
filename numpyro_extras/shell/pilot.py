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
from numpyro.infer import NUTS
from numpyro.infer.hmc import hmc

from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.kernel import hmc_settings
from numpyro_extras.shell.progress import scan_in_chunks

__all__ = ["PilotDraws", "dispersed_starts", "dispersed_nuts_draws", "nuts_draws"]


class PilotDraws(NamedTuple):
    """What :func:`dispersed_nuts_draws` returns.

    :param draws: the kept draws, ``(chains, samples, D)`` (numpy).
    :param gradient_evaluations: leapfrog steps of the whole run, warm-up included.
    :param num_divergent: divergent transitions after warm-up.
    :param max_depth_share: the share of the transitions after warm-up whose NUTS tree reached
        its maximum depth (its trajectory was cut short, not ended by a U-turn).
    """

    draws: np.ndarray
    gradient_evaluations: int
    num_divergent: int
    max_depth_share: float = 0.0


def dispersed_starts(rng_key, potential_fn, initial_position, num_chains, radius=2.0):
    """``num_chains`` starts uniform in ``[-radius, radius]^D``, as NumPyro's ``init_to_uniform``
    on the unconstrained space; a start where the potential is not finite is replaced by
    ``initial_position``.

    :param rng_key: key.
    :param potential_fn: ``x -> U(x)`` on flat 1-D points.
    :param initial_position: a flat point with a finite potential.
    :param int num_chains: starts.
    :param float radius: half-width of the box.
    :return: ``(num_chains, D)`` starts.

    **Example:**

    .. code-block:: python

        starts = dispersed_starts(key, potential_fn, jnp.zeros(2), num_chains=16)
    """
    initial_position = jnp.asarray(initial_position)
    dimension = initial_position.shape[-1]
    starts = jax.random.uniform(
        rng_key, (num_chains, dimension), initial_position.dtype, -radius, radius
    )
    finite = quick_jit(jax.vmap(lambda x: jnp.isfinite(potential_fn(x))))(starts)
    return jnp.where(finite[:, None], starts, initial_position)


def nuts_draws(
    rng_key,
    potential_fn,
    starts,
    *,
    num_warmup,
    num_samples,
    progress_bar=True,
    description="pilot NUTS chains",
) -> PilotDraws:
    """Vectorized NUTS chains (NumPyro's NUTS with its default adaptation) from ``starts``.

    Warm-up and draws run in one compiled loop: NumPyro's functional NUTS adapts while its
    transition count is below ``num_warmup``, where ``MCMC.warmup`` and ``MCMC.run`` would
    compile a loop each.

    :param rng_key: key for the run.
    :param potential_fn: ``x -> U(x)`` on flat 1-D points.
    :param starts: ``(chains, D)`` starting points with a finite potential.
    :param int num_warmup: warm-up transitions per chain.
    :param int num_samples: kept draws per chain.
    :param bool progress_bar: show a progress bar.
    :param str description: the bar's label.
    :return: :class:`PilotDraws`.

    **Example:**

    .. code-block:: python

        pilot = nuts_draws(key, potential_fn, starts, num_warmup=300, num_samples=200)
        data = pilot.draws.reshape(-1, starts.shape[-1])
    """
    num_chains = starts.shape[0]
    init_kernel, sample_kernel = hmc(potential_fn, algo="NUTS")
    _, settings = hmc_settings(NUTS)
    states = quick_jit(
        jax.vmap(lambda start, key: init_kernel(start, num_warmup, rng_key=key, **settings))
    )(starts, jax.random.split(rng_key, num_chains))

    def transition(states, _):
        states = jax.vmap(sample_kernel)(states)
        return states, (states.z, states.num_steps, states.diverging)

    # LLVM's first optimisation level: a pilot runs for a few seconds at most, and XLA's
    # default level compiles its tree-building loops for longer than it saves.
    _, (draws, num_steps, diverging) = scan_in_chunks(
        transition,
        states,
        num_warmup + num_samples,
        description=description,
        progress_bar=progress_bar,
        optimize=1,
    )
    max_tree_depth = settings["max_tree_depth"]
    if isinstance(max_tree_depth, tuple):  # NUTS's (warm-up, draws) pair
        max_tree_depth = max_tree_depth[1]
    # A tree that reached depth d made its last doubling, at least 2^(d - 1) leapfrog steps.
    reached_max_depth = np.asarray(num_steps[num_warmup:]) >= 2 ** (max_tree_depth - 1)
    return PilotDraws(
        np.swapaxes(draws[num_warmup:], 0, 1),
        int(np.sum(num_steps)),
        int(np.sum(diverging[num_warmup:])),
        float(np.mean(reached_max_depth)) if num_samples else 0.0,
    )


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
    """Vectorized NUTS chains from :func:`dispersed_starts`, run by :func:`nuts_draws`.

    :param rng_key: key for the starts and the run.
    :param potential_fn: ``x -> U(x)`` on flat 1-D points.
    :param initial_position: a flat point with a finite potential.
    :param int num_chains: chains.
    :param int num_warmup: warm-up transitions per chain.
    :param int num_samples: kept draws per chain.
    :param float radius: half-width of the box of starts.
    :param bool progress_bar: show a progress bar.
    :return: :class:`PilotDraws`.

    **Example:**

    .. code-block:: python

        pilot = dispersed_nuts_draws(key, potential_fn, jnp.zeros(2), num_chains=16,
                                     num_warmup=300, num_samples=200)
        data = pilot.draws.reshape(-1, 2)
    """
    start_key, run_key = jax.random.split(rng_key)
    starts = dispersed_starts(start_key, potential_fn, initial_position, num_chains, radius)
    return nuts_draws(
        run_key,
        potential_fn,
        starts,
        num_warmup=num_warmup,
        num_samples=num_samples,
        progress_bar=progress_bar,
    )
