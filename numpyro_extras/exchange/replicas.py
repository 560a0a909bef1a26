"""The replicas of one chain on a read target: how many and on which starting ladder, the scan
of the core that moves them, where they start, and the checks of those starts.

The scan is :func:`~numpyro_extras.exchange.chains.exchange_scan` over the rungs' moves (HMC/NUTS
on continuous sites, ACS/DMALA on discrete ones, a Gibbs sweep of both on a mixed model), or
:func:`~numpyro_extras.exchange.stabilized.stabilized_exchange` for two legs joined at the
posterior.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.util import not_jax_tracer

from numpyro_extras.discrete.proposal import decode
from numpyro_extras.discrete.target import DiscreteTarget
from numpyro_extras.exchange.chains import exchange_scan, hmc_moves, legged_hmc_moves
from numpyro_extras.exchange.discrete_moves import acs_moves, mixed_moves
from numpyro_extras.exchange.path import MixedPosition, TemperedPath
from numpyro_extras.exchange.pilot import ReplicaPlan, floor_plan, requested_plan, run_pilot
from numpyro_extras.exchange.stabilized import stabilized_exchange
from numpyro_extras.exchange.target import ExchangeTarget
from numpyro_extras.model.potential import check_finite_potential

__all__ = [
    "check_given_starts",
    "check_tuned_starts",
    "plan_replicas",
    "discrete_positions",
    "initial_positions",
    "leg_positions",
    "replica_scan",
]


def replica_scan(target: ExchangeTarget, acs, algo, hmc_settings, plan: ReplicaPlan, tag=None):
    """The core of a chain on ``target``'s path(s) with the rungs and starting ladders of
    ``plan``.

    :param target: the :class:`~numpyro_extras.exchange.target.ExchangeTarget`.
    :param acs: the ACS/DMALA kernel of discrete moves, or ``None`` for HMC/NUTS moves.
    :param str algo: ``"NUTS"`` or ``"HMC"``, the move of continuous sites (``None`` with
        ``acs``, whose own continuous move a mixed model uses).
    :param dict hmc_settings: the settings of that move's ``init``.
    :param plan: the :class:`~numpyro_extras.exchange.pilot.ReplicaPlan`: rungs of the path
        (of the fitted leg) and of the prior leg of a stabilised reference, and their starting
        ladders (``None`` for the initial ladder).
    :param tag: the build's :class:`~numpyro_extras.shell.compiled_chain.BuildTag`.
    :return: ``(scan, settings)``: the :class:`~numpyro_extras.exchange.chains.ExchangeScan`
        and the settings of its ``init``.
    """
    num_replicas, betas = plan.num_replicas, plan.starting_betas
    settings = hmc_settings
    if target.stabilized:
        scan = stabilized_exchange(
            legged_hmc_moves(target.split, target.fitted_reference, algo),
            target.flat_model.unravel_fn,
            num_fit_replicas=num_replicas,
            num_prior_replicas=plan.num_prior_replicas,
            tag=tag,
            fit_betas=betas,
            prior_betas=plan.prior_starting_betas,
        )
        return scan, settings
    if acs is not None:
        discrete = target.discrete_target
        acs_settings = {
            "schedule": acs.schedule,
            "settings": acs.tuning_settings,
            "num_tuning_chains": acs.num_tuning_chains,
            "discrete_steps": acs.moves_per_transition(target.mixed),
        }
        if target.mixed:
            algo, settings = acs.inner_settings
            moves = mixed_moves(
                target.path,
                discrete.variables,
                algo,
                num_tuning_sweeps=acs.num_tuning_sweeps,
                **acs_settings,
            )

            def unravel_fn(position):
                return {
                    **discrete.continuous_unravel_fn(position.continuous),
                    **discrete.site_values_fn(position.discrete),
                }

        else:
            moves = acs_moves(target.path, discrete.variables, **acs_settings)
            unravel_fn = discrete.site_values_fn
    else:
        moves = hmc_moves(target.path, algo)
        unravel_fn = target.flat_model.unravel_fn
    scan = exchange_scan(moves, unravel_fn, num_replicas=num_replicas, tag=tag, betas=betas)
    return scan, settings


def plan_replicas(
    target: ExchangeTarget, acs, algo, hmc_settings, num_replicas, cheap, seed
) -> ReplicaPlan:
    """The rungs of a chain on ``target`` and their starting ladders: a given count from the
    initial ladder; for ``"auto"`` on a ``cheap`` potential the floor's count, else the count
    and ladder of a pilot run of the core on the path (of each leg, for a stabilised reference;
    Syed et al. 2022, ``N = ceil(2 Lambda)`` for the communication barrier ``Lambda`` of their
    eq. 12).

    :param target: the :class:`~numpyro_extras.exchange.target.ExchangeTarget`.
    :param acs: the ACS/DMALA kernel of discrete moves, or ``None``.
    :param str algo: the move of continuous sites (see :func:`replica_scan`).
    :param dict hmc_settings: the settings of that move.
    :param num_replicas: the kernel's count: an integer, or ``"auto"``.
    :param bool cheap: whether the potential is cheap enough to run without a pilot.
    :param int seed: the pilot's seed (the kernel's ``fit_base_seed``).
    :return: a :class:`~numpyro_extras.exchange.pilot.ReplicaPlan`.

    **Example:**

    .. code-block:: python

        plan = plan_replicas(target, None, "NUTS", {}, "auto", cheap=False, seed=0)
        plan.num_replicas, plan.pilot.barrier
    """
    if num_replicas != "auto":
        return requested_plan(num_replicas)
    if cheap:
        return floor_plan(target.values_per_replica, target.stabilized)
    return run_pilot(
        lambda rungs: replica_scan(target, acs, algo, hmc_settings, requested_plan(rungs)),
        lambda key, rungs: initial_positions(key, None, target, rungs, rungs),
        seed,
        target.values_per_replica,
        target.stabilized,
    )


def discrete_positions(rng_key, init_params, target: DiscreteTarget, num_replicas):
    """One chain's starting states on a discrete (or mixed) target: ``init_params`` for every
    rung if given (continuous sites unconstrained), else prior draws.

    :param rng_key: the key of the draws.
    :param dict init_params: site values, or ``None``.
    :param target: the :class:`~numpyro_extras.discrete.target.DiscreteTarget`.
    :param int num_replicas: ``N``, the rungs.
    :return: index arrays with leading axis ``N`` (a
        :class:`~numpyro_extras.exchange.path.MixedPosition` with the flat continuous
        positions, ``(N, D)``, for a mixed model).
    :raises ValueError: for ``init_params`` that lack a site or have another dimension.
    """
    mixed = bool(target.continuous_sites)
    if init_params is None:
        x, indices = target.sample_initial_fn(rng_key, num_replicas)
        return MixedPosition(x, indices) if mixed else indices
    missing = [
        name for name in (*target.variables, *target.continuous_sites) if name not in init_params
    ]
    if missing:
        raise ValueError(f"init_params lack the latent sites {missing}.")
    position = decode(target.variables, init_params)
    if mixed:
        continuous = {name: init_params[name] for name in target.continuous_sites}
        x = ravel_pytree(continuous)[0]
        if x.shape[-1] != target.dimension:
            raise ValueError(
                f"init_params have {x.shape[-1]} unconstrained dimensions, the model "
                f"{target.dimension}."
            )
        position = MixedPosition(x, position)
    return jax.tree.map(lambda leaf: jnp.broadcast_to(leaf, (num_replicas,) + leaf.shape), position)


def initial_positions(
    rng_key, init_params, target: ExchangeTarget, num_replicas, num_prior_replicas=None
):
    """One chain's starting points: ``init_params`` for every rung if given, else reference
    draws, each replaced by the model's initial point where the rung's tempered density is not
    finite there.

    :param rng_key: the key of the draws.
    :param init_params: one chain's ``init_params`` (site values, or a flat position for a
        potential), or ``None``.
    :param target: the :class:`~numpyro_extras.exchange.target.ExchangeTarget`.
    :param int num_replicas: rungs of the path (of the fitted leg).
    :param int num_prior_replicas: rungs of the prior leg, for a stabilised reference.
    :return: ``(N, D)``, the fitted leg's rungs then the prior leg's for a stabilised
        reference (:func:`discrete_positions` for a discrete target).
    """
    if target.discrete_target is not None:
        return discrete_positions(rng_key, init_params, target.discrete_target, num_replicas)
    if not target.stabilized:
        return leg_positions(rng_key, init_params, target, num_replicas, target.path)
    fit_key, prior_key = jax.random.split(rng_key)
    return jnp.concatenate(
        [
            leg_positions(fit_key, init_params, target, num_replicas, target.path),
            leg_positions(
                prior_key, init_params, target, num_prior_replicas, target.prior_leg_path
            ),
        ]
    )


def leg_positions(rng_key, init_params, target: ExchangeTarget, num_replicas, path: TemperedPath):
    """Starting points of ``num_replicas`` rungs of ``path`` (see :func:`initial_positions`).

    :param rng_key: the key of the reference draws.
    :param init_params: one chain's ``init_params``, or ``None``.
    :param target: the :class:`~numpyro_extras.exchange.target.ExchangeTarget` (its flat
        model's initial point is the fallback).
    :param int num_replicas: the rungs.
    :param path: the leg's :class:`~numpyro_extras.exchange.path.TemperedPath`.
    :return: ``(num_replicas, D)``.
    """
    fallback = target.flat_model.initial_position
    if init_params is not None:
        position = jnp.asarray(
            init_params if target.from_potential else ravel_pytree(init_params)[0]
        )
        # Its own length, so that a wrong one reaches the dimension check with a clear error.
        return jnp.broadcast_to(position, (num_replicas,) + position.shape[-1:])
    keys = jax.random.split(rng_key, num_replicas)
    draws = jax.vmap(path.sample_reference_fn)(keys).astype(fallback.dtype)
    betas = jnp.linspace(0.0, 1.0, num_replicas, dtype=fallback.dtype)

    def finite_at(position, beta):
        value, gradient = jax.value_and_grad(path.potential_fn(beta))(position)
        return jnp.isfinite(value) & jnp.all(jnp.isfinite(gradient))

    finite = jax.vmap(finite_at)(draws, betas)
    return jnp.where(finite[:, None], draws, fallback)


def check_given_starts(positions, target: ExchangeTarget, num_replicas, num_prior_replicas):
    """Raise where the posterior rung's potential is not finite at a given start (drawn starts
    are finite already: a draw where its rung's density or gradient is not finite is replaced by
    the model's initial point).

    :param positions: the chains' starts, ``(..., rungs, D)``; tracers are not checked.
    :param target: the :class:`~numpyro_extras.exchange.target.ExchangeTarget`.
    :param int num_replicas: rungs of the path (of the fitted leg, which comes first).
    :param int num_prior_replicas: rungs of the prior leg, for a stabilised reference.
    :raises ValueError: for a start where the potential is not finite.
    """
    if not not_jax_tracer(positions):
        return
    rungs = num_replicas + (num_prior_replicas if target.stabilized else 0)
    starts = np.reshape(np.asarray(positions), (-1, rungs, positions.shape[-1]))
    # The posterior rung: the last of the (fitted) leg that comes first.
    check_finite_potential(target.path.potential_fn(1.0), starts[:, num_replicas - 1], "the start")


def check_tuned_starts(state, target: ExchangeTarget):
    """Raise where a discrete (or mixed) chain's tempered log density is not finite at the
    starting state of a rung, checked after ``init`` where every rung has its tuned state
    (tracers are not checked; continuous starts are checked by :func:`check_given_starts`).

    :param state: the chains' initial state.
    :param target: the :class:`~numpyro_extras.exchange.target.ExchangeTarget`.
    :raises ValueError: for a start where the density is not finite.

    **Example:**

    .. code-block:: python

        check_tuned_starts(init_fn(positions, key, 500), target)
    """
    if target.discrete_target is None or not not_jax_tracer(state.log_likelihood):
        return
    if not np.asarray(state.replicas.finite).all():
        raise ValueError(
            "The tempered log density is not finite at the starting state of a replica "
            "(after tuning); check the model's support and data, or give init_params."
        )
