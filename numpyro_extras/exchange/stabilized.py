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
(its own ladder tuning, adaptation and stepping stone); crossing the junction re-evaluates the
state on the other leg's path (one evaluation of the model and its gradient per crossing).
Each leg's stepping stone estimates the same ``log Z``: their agreement checks that the fitted
reference did not miss mass.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from numpyro_extras.compiled_chain import BuildTag
from numpyro_extras.exchange.chains import (
    EXCHANGE_FIELDS,
    ExchangeState,
    replica_exchange,
    with_posterior_replica,
)
from numpyro_extras.kernel import field_lookup
from numpyro_extras.metropolis import select

__all__ = ["StabilizedState", "STABILIZED_FIELDS", "stabilized_exchange", "junction_parity"]


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
    :param build: the :class:`~numpyro_extras.compiled_chain.BuildTag` of the kernel build.
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
    fit_moves,
    prior_moves,
    unravel_fn,
    *,
    num_fit_replicas,
    num_prior_replicas,
    tag=None,
    fit_betas=None,
    prior_betas=None,
):
    """Pure ``init``/``step`` of stabilised replica exchange for one chain.

    :param fit_moves: the HMC/NUTS moves on the fitted reference's path
        (:func:`~numpyro_extras.exchange.chains.hmc_moves`, with ``evaluate``).
    :param prior_moves: those on the prior path.
    :param unravel_fn: a flat position -> the ``z`` stored in the state.
    :param int num_fit_replicas: rungs of the fitted leg (at least 2).
    :param int num_prior_replicas: rungs of the prior leg (at least 2, of the same parity as
        ``num_fit_replicas`` so that the joined line alternates even and odd gaps).
    :param tag: the build tag stored in the state.
    :param fit_betas: the fitted leg's starting ladder (default the initial ladder).
    :param prior_betas: the prior leg's.
    :return: ``(init_fn, step_fn)``: ``init_fn(positions, rng_key, num_warmup, **settings)``
        with ``positions`` of leading axis ``num_fit_replicas + num_prior_replicas`` (the
        fitted leg's starts first), and ``step_fn(state, num_warmup)``.
    :raises ValueError: if the two counts differ in parity.

    **Example:**

    .. code-block:: python

        init_fn, step_fn = stabilized_exchange(
            hmc_moves(fit_path), hmc_moves(prior_path), lambda x: x,
            num_fit_replicas=8, num_prior_replicas=16,
        )
        state = init_fn(positions, key, 500)   # positions: (24, D)
        state = step_fn(state, 500)
    """
    if (num_fit_replicas - num_prior_replicas) % 2:
        raise ValueError(
            "The two legs must have counts of the same parity, got "
            f"{num_fit_replicas} and {num_prior_replicas}."
        )
    fit_init, fit_step = replica_exchange(
        fit_moves, unravel_fn, num_replicas=num_fit_replicas, tag=tag, betas=fit_betas
    )
    prior_init, prior_step = replica_exchange(
        prior_moves, unravel_fn, num_replicas=num_prior_replicas, tag=tag, betas=prior_betas
    )
    parity = junction_parity(num_fit_replicas)

    def init_fn(positions, rng_key, num_warmup, **settings):
        fit_key, prior_key, rng_key = jax.random.split(rng_key, 3)
        fit_leg = fit_init(positions[:num_fit_replicas], fit_key, num_warmup, **settings)
        prior_leg = prior_init(positions[num_fit_replicas:], prior_key, num_warmup, **settings)
        return StabilizedState(fit_leg, prior_leg, tag, rng_key)

    def step_fn(state: StabilizedState, num_warmup):
        fit_key, prior_key, rng_key = jax.random.split(state.rng_key, 3)
        fit_leg = fit_step(state.fit_leg._replace(rng_key=fit_key), num_warmup)
        prior_leg = prior_step(state.prior_leg._replace(rng_key=prior_key), num_warmup)
        # Both legs have stepped once, so their iteration counts the scan being made.
        offered = fit_leg.iteration % 2 == parity
        fit_top = jax.tree.map(lambda leaf: leaf[-1], fit_leg.replicas)
        prior_top = jax.tree.map(lambda leaf: leaf[-1], prior_leg.replicas)
        into_fit = fit_moves.evaluate(prior_top.position)
        into_prior = prior_moves.evaluate(fit_top.position)
        crossed = offered & into_fit.finite & into_prior.finite
        fit_leg = select(
            crossed,
            with_posterior_replica(fit_leg, into_fit, fit_moves.sync, unravel_fn),
            fit_leg,
        )
        prior_leg = select(
            crossed,
            with_posterior_replica(prior_leg, into_prior, prior_moves.sync, unravel_fn),
            prior_leg,
        )
        return StabilizedState(fit_leg, prior_leg, state.build, rng_key)

    return init_fn, step_fn
