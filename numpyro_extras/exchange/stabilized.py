"""Stabilised variational parallel tempering: a fitted-reference ladder and a prior ladder
joined at the posterior (Surjanovic, Syed, Bouchard-Cote and Campbell, "Parallel tempering with
a variational reference", NeurIPS 2022, section 4).

A reference fitted to the posterior makes the ladder short and the posterior replica mix fast,
but a mode the fit misses is suppressed at every ``beta < 1`` of its path, so its mass can be
missed with a small error bar. The prior path reaches every mode the prior covers, slowly. The
two ladders run side by side as one line, ``q = beta_0 < ... < 1`` (the fitted leg) followed by
``1 > ... > 0 = prior`` (the prior leg), so a state can travel from either reference to the
posterior and on to the other reference. The gap between the two ``beta = 1`` replicas holds
the same density on both sides, so a swap across it is always accepted; it is offered on the
scans whose parity the deterministic even-odd scheme gives it in the joined line (the gaps on
either side of it are offered on the other scans), so states keep their direction across it.

Each leg is a :func:`~numpyro_extras.exchange.chains.replica_exchange` chain on its own path
(its own ladder tuning, adaptation and stepping stone) whose rungs move together with the other
leg's; crossing the junction re-evaluates the state on the other leg's path (one evaluation of
the model and its gradient per crossing).
Each leg's stepping stone estimates the same ``log Z``: their agreement checks that the fitted
reference did not miss mass.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_extras.exchange.chains import (
    EXCHANGE_FIELDS,
    FIT_LEG,
    PRIOR_LEG,
    ExchangeScan,
    ExchangeState,
    ScanParts,
    exchange_scan,
    with_posterior_replica,
)
from numpyro_extras.exchange.core import lane_explore
from numpyro_extras.shell.compiled_chain import BuildTag
from numpyro_extras.shell.kernel import field_lookup
from numpyro_extras.shell.metropolis import select

__all__ = [
    "StabilizedState",
    "STABILIZED_FIELDS",
    "stabilized_exchange",
    "leg_moves",
    "junction_parity",
]


_missing_field, _field_item = field_lookup(
    "A stabilised replica exchange state", lambda: STABILIZED_FIELDS
)
# What the state reads from its fitted leg, whose beta = 1 replica is the posterior draw.
_FIT_LEG_NAMES = frozenset(EXCHANGE_FIELDS) | {"betas", "statistics", "replicas", "inner_state"}


class StabilizedState(NamedTuple):
    """State of one chain of stabilised replica exchange: two legs joined at the posterior.

    The posterior draw ``z`` and the fields NumPyro users read (``potential_energy``,
    ``diverging``, ``accept_prob``, ...) are those of the fitted leg's ``beta = 1`` replica;
    ``prior_log_likelihood``, ``prior_betas`` and ``prior_swap_accept_prob`` are the prior
    leg's ``l``, ladder and swap acceptance.

    :param fit_leg: the :class:`~numpyro_extras.exchange.chains.ExchangeState` of the leg from
        the fitted reference.
    :param prior_leg: that of the leg from the prior.
    :param build: the :class:`~numpyro_extras.shell.compiled_chain.BuildTag` of the kernel build.
    :param rng_key: random key.
    """

    fit_leg: ExchangeState
    prior_leg: ExchangeState
    build: BuildTag
    rng_key: jax.Array

    @property
    def prior_log_likelihood(self):
        return self.prior_leg.log_likelihood

    @property
    def prior_betas(self):
        return self.prior_leg.betas

    @property
    def prior_swap_accept_prob(self):
        return self.prior_leg.swap_accept_prob

    def __getattr__(self, name):
        if name in _FIT_LEG_NAMES:
            return getattr(self.fit_leg, name)
        return _missing_field(self, name)

    __getitem__ = _field_item


STABILIZED_FIELDS = EXCHANGE_FIELDS + (
    "prior_log_likelihood",
    "prior_betas",
    "prior_swap_accept_prob",
)


def junction_parity(num_fit_replicas):
    """The parity of the scans on which the junction gap is offered a swap: in the joined line
    of ``num_fit_replicas`` fitted rungs then the prior rungs, the junction is gap
    ``num_fit_replicas - 1``.

    :param int num_fit_replicas: rungs of the fitted leg.
    :return: 0 or 1.
    """
    return (num_fit_replicas - 1) % 2


def stabilized_exchange(
    moves,
    unravel_fn,
    *,
    num_fit_replicas,
    num_prior_replicas,
    tag=None,
    fit_betas=None,
    prior_betas=None,
):
    """Pure ``init`` and scan of stabilised replica exchange for one chain.

    Each leg keeps its own ladder, tuning, statistics and stepping stone, but the rungs of both
    legs move as one vectorised program (``moves`` takes the leg as data), so a scan waits for
    the longest NUTS tree of any rung once, not once per leg.

    :param moves: the HMC/NUTS moves of both legs
        (:func:`~numpyro_extras.exchange.chains.legged_hmc_moves`: leg ``FIT_LEG`` the fitted
        reference's path, ``PRIOR_LEG`` the prior's).
    :param unravel_fn: a flat position -> the ``z`` stored in the state.
    :param int num_fit_replicas: rungs of the fitted leg (at least 2).
    :param int num_prior_replicas: rungs of the prior leg (at least 2, of the same parity as
        ``num_fit_replicas`` so that the joined line alternates even and odd gaps).
    :param tag: the build tag stored in the state.
    :param fit_betas: the fitted leg's starting ladder (default the initial ladder).
    :param prior_betas: the prior leg's.
    :return: :class:`~numpyro_extras.exchange.chains.ExchangeScan`: ``init(positions, rng_key,
        num_warmup, **settings)`` with ``positions`` of leading axis ``num_fit_replicas +
        num_prior_replicas`` (the fitted leg's starts first), and ``parts(num_warmup)``, the
        scan (:func:`~numpyro_extras.exchange.chains.scan_step` for one chain,
        :func:`~numpyro_extras.exchange.chains.batched_scan_step` for a batch).
    :raises ValueError: if the two counts differ in parity.

    **Example:**

    .. code-block:: python

        scan = stabilized_exchange(
            legged_hmc_moves(split, base), lambda x: x,
            num_fit_replicas=8, num_prior_replicas=16,
        )
        state = scan.init(positions, key, 500)   # positions: (24, D)
        state = scan_step(scan.parts(500))(state)
    """
    if (num_fit_replicas - num_prior_replicas) % 2:
        raise ValueError(
            "The two legs must have counts of the same parity, got "
            f"{num_fit_replicas} and {num_prior_replicas}."
        )
    fit_scan, prior_scan = (
        exchange_scan(
            leg_moves(moves, leg, count), unravel_fn, num_replicas=count, tag=tag, betas=betas
        )
        for leg, count, betas in (
            (FIT_LEG, num_fit_replicas, fit_betas),
            (PRIOR_LEG, num_prior_replicas, prior_betas),
        )
    )
    parity = junction_parity(num_fit_replicas)
    # The leg of every moving rung: the fitted leg's rungs 1, ..., N_fit - 1, then the prior's.
    moving_legs = np.concatenate(
        [np.full(num_fit_replicas - 1, FIT_LEG), np.full(num_prior_replicas - 1, PRIOR_LEG)]
    )

    def init_fn(positions, rng_key, num_warmup, **settings):
        fit_key, prior_key, rng_key = jax.random.split(rng_key, 3)
        fit_leg = fit_scan.init(positions[:num_fit_replicas], fit_key, num_warmup, **settings)
        prior_leg = prior_scan.init(positions[num_fit_replicas:], prior_key, num_warmup, **settings)
        return StabilizedState(fit_leg, prior_leg, tag, rng_key)

    def parts(num_warmup):
        fit_parts, prior_parts = fit_scan.parts(num_warmup), prior_scan.parts(num_warmup)

        def lanes(state: StabilizedState):
            fit_key, prior_key, rng_key = jax.random.split(state.rng_key, 3)
            fit_lanes, fit_carry = fit_parts.lanes(state.fit_leg._replace(rng_key=fit_key))
            prior_lanes, prior_carry = prior_parts.lanes(
                state.prior_leg._replace(rng_key=prior_key)
            )
            both = jax.tree.map(
                lambda fit, prior: jnp.concatenate([fit, prior]), fit_lanes, prior_lanes
            )
            return both._replace(given=jnp.asarray(moving_legs)), (fit_carry, prior_carry, rng_key)

        def complete(state: StabilizedState, moved, carry):
            fit_carry, prior_carry, rng_key = carry
            fit_moved = jax.tree.map(lambda leaf: leaf[: num_fit_replicas - 1], moved)
            prior_moved = jax.tree.map(lambda leaf: leaf[num_fit_replicas - 1 :], moved)
            fit_leg = fit_parts.complete(state.fit_leg, fit_moved, fit_carry)
            prior_leg = prior_parts.complete(state.prior_leg, prior_moved, prior_carry)
            # Both legs have stepped once, so their iteration counts the scan being made.
            offered = fit_leg.iteration % 2 == parity
            fit_top = jax.tree.map(lambda leaf: leaf[-1], fit_leg.replicas)
            prior_top = jax.tree.map(lambda leaf: leaf[-1], prior_leg.replicas)
            into_fit = moves.evaluate(prior_top.position, FIT_LEG)
            into_prior = moves.evaluate(fit_top.position, PRIOR_LEG)
            crossed = offered & into_fit.finite & into_prior.finite
            fit_leg = select(
                crossed,
                with_posterior_replica(fit_leg, into_fit, moves.sync, unravel_fn),
                fit_leg,
            )
            prior_leg = select(
                crossed,
                with_posterior_replica(prior_leg, into_prior, moves.sync, unravel_fn),
                prior_leg,
            )
            return StabilizedState(fit_leg, prior_leg, state.build, rng_key)

        return ScanParts(lanes, lane_explore(moves.explore, num_warmup), complete)

    return ExchangeScan(init_fn, parts)


def leg_moves(moves, leg, num_replicas):
    """The :class:`~numpyro_extras.exchange.core.RungMoves` of one leg of ``moves``
    (:func:`~numpyro_extras.exchange.chains.legged_hmc_moves`): its leg fixed.

    :param moves: the moves of both legs.
    :param int leg: ``FIT_LEG`` or ``PRIOR_LEG``.
    :param int num_replicas: the leg's rungs.
    :return: :class:`~numpyro_extras.exchange.core.RungMoves` (with ``evaluate``).

    **Example:**

    .. code-block:: python

        prior_moves = leg_moves(legged_hmc_moves(split, base), PRIOR_LEG, 16)
    """
    legs = np.full(num_replicas, leg)

    def init(positions, betas, rng_key, num_warmup, **settings):
        return moves.init(positions, betas, rng_key, num_warmup, jnp.asarray(legs), **settings)

    return type(moves)(
        init,
        functools.partial(moves.explore, given=leg),
        functools.partial(moves.renew, given=leg),
        moves.sync,
        functools.partial(moves.evaluate, given=leg),
    )
