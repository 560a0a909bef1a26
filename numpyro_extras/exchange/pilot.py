"""How many replicas a replica-exchange chain runs, and from which ladder.

A count is given, or ``num_replicas="auto"`` chooses it per set of model arguments: from a short
pilot run of the kernel's own core, whose tuned ladder measures the path's communication barrier
``Lambda`` (Syed et al., "Non-reversible parallel tempering", JRSSB 2022, section 5), or, where
the potential is cheap, the floor's count without a pilot. Either way the replicas of one chain
must fit the memory bound :data:`~numpyro_extras.exchange.ladder.MAX_REPLICA_VALUES`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from numpyro_extras.exchange.chains import scan_step
from numpyro_extras.exchange.core import swap_rates
from numpyro_extras.exchange.ladder import (
    MAX_AUTO_REPLICAS,
    MAX_REPLICA_VALUES,
    MIN_AUTO_LEG_REPLICAS,
    MIN_AUTO_REPLICAS,
    communication_barrier,
    equalized_ladder,
    replicas_for_barrier,
)
from numpyro_extras.model.potential import evaluation_flops
from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.numpyro_adapter import calling_mcmc_progress_bar
from numpyro_extras.shell.progress import run_chunks
from numpyro_extras.shell.validation import check_count

__all__ = [
    "ReplicaPilot",
    "ReplicaPlan",
    "PILOT_REPLICAS",
    "PILOT_TUNING_SCANS",
    "PILOT_SCANS",
    "PILOT_CHUNK",
    "replica_count_setting",
    "requested_plan",
    "check_replica_memory",
    "potential_flops",
    "floor_plan",
    "pilot_result",
    "run_pilot",
]

# The pilot's ladder: long enough that a barrier of several units is still measured on gaps whose
# swaps are often accepted (a gap that rejects nearly always understates its share of Lambda),
# short enough that its scans cost little beside the run.
PILOT_REPLICAS = 16
# Rounds of 8, ..., 128 scans tune the pilot's ladder; the scans after them measure its rates.
PILOT_TUNING_SCANS = 256
PILOT_SCANS = 128
# The pilot runs in compiled chunks of this many scans, between which its progress bar moves.
PILOT_CHUNK = 32


class ReplicaPilot(NamedTuple):
    """What the pilot run of ``num_replicas="auto"`` measured.

    :param barrier: the global communication barrier ``Lambda`` of the path.
    :param num_replicas: the count chosen from it (``replicas_for_barrier``).
    :param betas: the pilot's tuned ladder, ``(PILOT_REPLICAS,)`` (fewer under the memory bound).
    :param swap_accept_rate: its mean swap acceptance per gap.
    :param starting_betas: the run's starting ladder: the pilot's equalised for the chosen
        count.
    """

    barrier: float
    num_replicas: int
    betas: np.ndarray
    swap_accept_rate: np.ndarray
    starting_betas: np.ndarray


class ReplicaPlan(NamedTuple):
    """The replicas of one chain: their counts, starting ladders and the pilots they came from.

    :param num_replicas: replicas per chain (the fitted leg's, for a stabilised reference);
        ``None`` while ``"auto"`` has not chosen.
    :param num_prior_replicas: the prior leg's count, for a stabilised reference.
    :param starting_betas: the starting ladder, or ``None`` for the initial ladder.
    :param prior_starting_betas: the prior leg's starting ladder, or ``None``.
    :param pilot: what the pilot measured (of the fitted leg), or ``None`` without a pilot.
    :param prior_leg_pilot: what the prior leg's pilot measured, or ``None``.
    """

    num_replicas: int | None
    num_prior_replicas: int | None
    starting_betas: np.ndarray | None = None
    prior_starting_betas: np.ndarray | None = None
    pilot: ReplicaPilot | None = None
    prior_leg_pilot: ReplicaPilot | None = None


def replica_count_setting(num_replicas):
    """``num_replicas`` checked: ``"auto"`` or an ``int`` of at least 2.

    :raises TypeError: for another string, a float or a flag.
    :raises ValueError: for an integer below 2.
    """
    if isinstance(num_replicas, str) and num_replicas == "auto":
        return num_replicas
    try:
        return check_count("num_replicas", num_replicas, minimum=2)
    except TypeError:
        raise TypeError(
            f"num_replicas must be 'auto' or an integer >= 2, got {num_replicas!r}."
        ) from None


def requested_plan(num_replicas) -> ReplicaPlan:
    """The plan before any pilot: a given count on each leg, no count for ``"auto"``.

    :param num_replicas: a value of :func:`replica_count_setting`.
    :return: a :class:`ReplicaPlan` starting from the initial ladder.
    """
    count = None if num_replicas == "auto" else num_replicas
    return ReplicaPlan(count, count)


def check_replica_memory(values, num_replicas, stabilized, description):
    """Raise if the replicas of one chain would hold more than ``MAX_REPLICA_VALUES`` values (for
    ``"auto"``: if not even two would fit).

    :param int values: the values one replica holds.
    :param num_replicas: the requested count per leg, or ``"auto"``.
    :param bool stabilized: whether each rung count holds a replica of each of two legs.
    :param str description: the model's size, for the message.
    :raises ValueError: past the bound.
    """
    if stabilized:
        values *= 2  # a replica of each leg per rung count
    if num_replicas == "auto":
        if 2 * values > MAX_REPLICA_VALUES:
            raise ValueError(
                f"Two replicas of a model with {description} exceed the memory bound of "
                f"{MAX_REPLICA_VALUES} values per chain."
            )
        return
    if values * num_replicas > MAX_REPLICA_VALUES:
        raise ValueError(
            f"{num_replicas} replicas of a model with {description} exceed the memory bound of "
            f"{MAX_REPLICA_VALUES} values per chain; use fewer replicas."
        )


def potential_flops(path) -> float:
    """Floating-point operations of one evaluation of a rung's potential on ``path``, the
    model's density and the reference's (traced and lowered at the reference's draw shape, not
    compiled).

    :param path: a :class:`~numpyro_extras.exchange.path.TemperedPath`.
    :return: XLA's count.
    """
    position = jax.eval_shape(path.sample_reference_fn, jax.random.PRNGKey(0))
    return evaluation_flops(path.potential_fn(1.0), position)


def floor_plan(values_per_replica, stabilized) -> ReplicaPlan:
    """The plan of ``"auto"`` without a pilot: the floor's count (half of it per leg of a
    stabilised reference) within the memory bound, from the initial ladder.

    :param int values_per_replica: the values one replica holds.
    :param bool stabilized: whether the replicas run on two legs.
    :return: a :class:`ReplicaPlan`.
    """
    legs = 2 if stabilized else 1
    count = replicas_for_barrier(
        0.0,
        values_per_replica * legs,
        minimum=MIN_AUTO_LEG_REPLICAS if stabilized else MIN_AUTO_REPLICAS,
    )
    return ReplicaPlan(count, count if stabilized else None)


def pilot_result(state, values, minimum) -> ReplicaPilot:
    """What a pilot's final state of one ladder measured, and the count chosen from it.

    :param state: the :class:`~numpyro_extras.exchange.chains.ExchangeState` of one ladder.
    :param int values: the values one rung count holds (of both legs, for a stabilised run).
    :param int minimum: the floor of the count.
    :return: a :class:`ReplicaPilot`.
    """
    betas, accept_rates = swap_rates(state)
    barrier = float(communication_barrier(accept_rates)[-1])
    count = replicas_for_barrier(barrier, values, minimum=minimum)
    return ReplicaPilot(
        barrier,
        count,
        np.asarray(betas),
        np.asarray(accept_rates),
        np.asarray(equalized_ladder(betas, accept_rates, count)),
    )


def run_pilot(
    build_scan: Callable,
    draw_positions: Callable,
    seed: int,
    values_per_replica: int,
    stabilized: bool,
) -> ReplicaPlan:
    """Measure the communication barrier of the path (of each leg, for a stabilised reference,
    in one run of both) with a short run of the core on ``PILOT_REPLICAS`` rungs per leg, and
    plan the count and starting ladder from it.

    :param build_scan: ``count -> (scan, settings)``, the
        :class:`~numpyro_extras.exchange.chains.ExchangeScan` with ``count`` rungs per leg and
        the settings of its ``init``.
    :param draw_positions: ``(rng_key, count) -> positions``, one chain's starting points of
        ``count`` rungs per leg.
    :param int seed: the pilot's seed (the kernel's ``fit_base_seed``).
    :param int values_per_replica: the values one replica holds.
    :param bool stabilized: whether the replicas run on two legs.
    :return: a :class:`ReplicaPlan` with the pilot(s).
    """
    values = values_per_replica * (2 if stabilized else 1)
    pilot_count = min(PILOT_REPLICAS, MAX_AUTO_REPLICAS, MAX_REPLICA_VALUES // values)
    # Its own stream, apart from the fit's: the same for every chain method and key.
    position_key, run_key = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), 1))
    scan, settings = build_scan(pilot_count)
    description = "replica exchange" + (" (both legs)" if stabilized else "")
    positions = quick_jit(lambda key: draw_positions(key, pilot_count))(position_key)
    state = quick_jit(functools.partial(scan.init, num_warmup=PILOT_TUNING_SCANS, **settings))(
        positions, run_key
    )
    step = scan_step(scan.parts(PILOT_TUNING_SCANS))

    @quick_jit
    def run_chunk(state, _):
        return jax.lax.fori_loop(0, PILOT_CHUNK, lambda _, state: step(state), state), None

    num_scans = PILOT_TUNING_SCANS + PILOT_SCANS
    state, _ = run_chunks(
        run_chunk,
        state,
        [(None, PILOT_CHUNK)] * (num_scans // PILOT_CHUNK),
        total=num_scans,
        description=f"{description}: pilot scans",
        progress_bar=calling_mcmc_progress_bar(),
    )
    if not stabilized:
        pilot = pilot_result(state, values, MIN_AUTO_REPLICAS)
        return ReplicaPlan(pilot.num_replicas, None, pilot.starting_betas, pilot=pilot)
    pilot = pilot_result(state.fit_leg, values, MIN_AUTO_LEG_REPLICAS)
    prior_pilot = pilot_result(state.prior_leg, values, MIN_AUTO_LEG_REPLICAS)
    count = prior_pilot.num_replicas
    if (count - pilot.num_replicas) % 2:
        # The joined line alternates even and odd gaps only if both legs have counts of the
        # same parity.
        count = count + 1 if count < MAX_AUTO_REPLICAS else count - 1
    prior_betas = np.asarray(
        equalized_ladder(prior_pilot.betas, prior_pilot.swap_accept_rate, count)
    )
    return ReplicaPlan(
        pilot.num_replicas, count, pilot.starting_betas, prior_betas, pilot, prior_pilot
    )
