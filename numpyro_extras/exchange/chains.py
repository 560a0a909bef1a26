"""Replica exchange's chain under NumPyro: the inner HMC/NUTS moves of the rungs, and the shell
around the functional core of :mod:`numpyro_extras.exchange.core` that the kernel class of
:mod:`numpyro_extras.exchange.kernels` steps.

The core's :class:`~numpyro_extras.exchange.core.LadderState` holds the flat replicas, the ladder,
the inner states and the statistics; :class:`ExchangeState` adds what NumPyro's ``MCMC`` reads
and carries: the posterior draw ``z`` as site values, its potential energy, ``l`` at every rung,
the last scan's swap acceptance, the build tag and the chain's key. :func:`replica_exchange`
gives ``init``/``step`` on it; :func:`exchange_scan` the same scan split around the rungs' moves
(:class:`ScanParts`), so that a batch of chains, or the two legs of
:func:`~numpyro_extras.exchange.stabilized.stabilized_exchange`, move all their rungs in one
vectorised call.

The rungs move by :func:`hmc_moves` (NumPyro's functional :func:`~numpyro.infer.hmc.hmc` with
``beta`` passed as the potential's argument), :func:`legged_hmc_moves` (both legs of a
stabilised run), or the ACS moves of :mod:`numpyro_extras.exchange.discrete_moves`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.hmc import HMCState, hmc

from numpyro_extras.exchange.core import (
    ExchangeStatistics,
    LadderState,
    RungMoves,
    init,
    kernel_parts,
)
from numpyro_extras.exchange.path import MixedPosition, TemperedPath, value_and_gradient
from numpyro_extras.model.potential import SplitModel
from numpyro_extras.shell.compiled_chain import BuildTag
from numpyro_extras.shell.devices import constrain_leading_axis, readable_on_every_process
from numpyro_extras.shell.kernel import field_lookup, rejected_move
from numpyro_extras.shell.metropolis import select

__all__ = [
    "FIT_LEG",
    "PRIOR_LEG",
    "ReplicaEvaluation",
    "ExchangeState",
    "EXCHANGE_FIELDS",
    "hmc_moves",
    "synced_hmc_state",
    "replica_exchange",
    "exchange_scan",
    "ExchangeScan",
    "ScanParts",
    "scan_step",
    "batched_scan_step",
    "legged_hmc_moves",
    "with_posterior_replica",
]


# The legs of legged_hmc_moves: the path from the fitted reference, and the one from the prior.
FIT_LEG = 0
PRIOR_LEG = 1


class ReplicaEvaluation(NamedTuple):
    """What a replica caches about its point: all a swap or a new ``beta`` needs.

    :param position: the flat point ``x``, shape ``(..., D)``.
    :param reference_potential: ``-log r(x)``.
    :param reference_gradient: its gradient.
    :param log_likelihood: ``l(x)``.
    :param log_likelihood_gradient: its gradient.
    """

    position: jax.Array
    reference_potential: jax.Array
    reference_gradient: jax.Array
    log_likelihood: jax.Array
    log_likelihood_gradient: jax.Array

    def potential(self, beta):
        """``U_beta(x)`` and its gradient from the cached parts."""
        beta_column = jnp.expand_dims(beta, -1)
        return (
            self.reference_potential - beta * self.log_likelihood,
            self.reference_gradient - beta_column * self.log_likelihood_gradient,
        )

    @property
    def finite(self):
        return (
            jnp.isfinite(self.reference_potential)
            & jnp.isfinite(self.log_likelihood)
            & jnp.all(jnp.isfinite(self.reference_gradient), -1)
            & jnp.all(jnp.isfinite(self.log_likelihood_gradient), -1)
        )


class ExchangeState(NamedTuple):
    """State of one replica-exchange chain under NumPyro's ``MCMC``: the core's
    :class:`~numpyro_extras.exchange.core.LadderState` (:attr:`ladder`) and what the kernel keeps
    beside it.

    :param z: the ``beta = 1`` replica's position (a dict of unconstrained site values for a
        model, the flat position for a ``potential_fn``): the posterior draw, and the
        ``sample_field``.
    :param potential_energy: ``-log p(x, y)`` at ``z``.
    :param log_likelihood: ``l`` at every rung, shape ``(N,)``; the stepping-stone estimate of
        ``log Z`` reads it.
    :param betas: the ladder, shape ``(N,)`` (tuned in warm-up, then fixed).
    :param swap_accept_prob: this scan's swap acceptance probability of every gap, offered or
        not (a Rao-Blackwellised estimate of the gap's swap rate), shape ``(N - 1,)``.
    :param replicas: the evaluation of every rung (leading axis ``N``): a
        :class:`ReplicaEvaluation` for HMC/NUTS moves.
    :param inner_state: the inner kernel's states of the rungs (leading axis ``N``): NumPyro
        HMC/NUTS states, or the ACS schedules of
        :class:`~numpyro_extras.exchange.discrete_moves.DiscreteRungState`.
    :param statistics: :class:`~numpyro_extras.exchange.core.ExchangeStatistics`.
    :param iteration: scans so far, warm-up included.
    :param build: the :class:`~numpyro_extras.shell.compiled_chain.BuildTag` of the kernel build.
    :param rng_key: random key.
    """

    z: Any
    potential_energy: jax.Array
    log_likelihood: jax.Array
    betas: jax.Array
    swap_accept_prob: jax.Array
    replicas: Any
    inner_state: Any
    statistics: ExchangeStatistics
    iteration: jax.Array
    build: BuildTag
    rng_key: jax.Array

    @property
    def ladder(self) -> LadderState:
        """The core's state: replicas, inner states, ladder, statistics and iteration."""
        return LadderState(
            self.replicas, self.inner_state, self.betas, self.statistics, self.iteration
        )

    @property
    def diverging(self):
        """Whether the posterior replica's move diverged."""
        return self.inner_state.diverging[..., -1]

    @property
    def replica_diverging(self):
        """Whether each rung's move diverged, shape ``(N,)``."""
        return self.inner_state.diverging

    @property
    def accept_prob(self):
        """The posterior replica's HMC/NUTS acceptance probability."""
        return self.inner_state.accept_prob[..., -1]

    @property
    def replica_accept_prob(self):
        return self.inner_state.accept_prob

    @property
    def mean_accept_prob(self):
        return self.inner_state.mean_accept_prob[..., -1]

    @property
    def num_steps(self):
        return self.inner_state.num_steps[..., -1]

    @property
    def energy(self):
        return self.inner_state.energy[..., -1]

    @property
    def step_size(self):
        return self.inner_state.adapt_state.step_size[..., -1]

    @property
    def adapt_state(self):
        """The posterior replica's step-size and mass-matrix adaptation state."""
        return _last_rung(self)

    @property
    def num_round_trips(self):
        return self.statistics.num_round_trips

    @property
    def prior_log_likelihood(self):
        """Empty: one ladder has no prior leg (the field of a stabilised run's state, which a
        kernel with ``reference="auto"`` collects before it knows it runs one ladder)."""
        return self.log_likelihood[..., :0]

    @property
    def prior_swap_accept_prob(self):
        """Empty, as :attr:`prior_log_likelihood`."""
        return self.swap_accept_prob[..., :0]

    __getattr__, __getitem__ = field_lookup("A replica exchange state", lambda: EXCHANGE_FIELDS)


def _last_rung(state: ExchangeState):
    adapt_state = state.inner_state.adapt_state
    num_replicas = state.betas.shape[-1]
    axis = state.betas.ndim - 1
    return jax.tree.map(
        lambda leaf: jnp.take(leaf, num_replicas - 1, axis=axis) if jnp.ndim(leaf) > axis else leaf,
        adapt_state,
    )


EXCHANGE_FIELDS = ExchangeState._fields[:5] + (
    "iteration",
    "diverging",
    "replica_diverging",
    "accept_prob",
    "replica_accept_prob",
    "mean_accept_prob",
    "num_steps",
    "energy",
    "step_size",
    "adapt_state.step_size",
    "num_round_trips",
)


def synced_hmc_state(inner: HMCState, replica: ReplicaEvaluation, beta) -> HMCState:
    """The HMC state of a rung at ``beta`` holding ``replica``'s point, from the cached parts."""
    potential_energy, gradient = replica.potential(beta)
    return inner._replace(
        z=replica.position,
        potential_energy=potential_energy,
        z_grad=gradient,
        energy=inner.energy + potential_energy - inner.potential_energy,
    )


def hmc_moves(path: TemperedPath, algo="NUTS") -> RungMoves:
    """HMC or NUTS moves of the replicas on ``path``: NumPyro's functional
    :func:`~numpyro.infer.hmc.hmc` with ``beta`` passed as the potential's argument, one
    adaptation state (step size, mass matrix) per rung.

    For a path on :class:`~numpyro_extras.exchange.path.MixedPosition` points the moves are
    those of the continuous block given the discrete one: ``init``, ``explore`` and the
    returned ``evaluate`` then take the discrete values as a trailing ``given`` argument (the
    conditional of the Gibbs sweep of :func:`~numpyro_extras.exchange.discrete_moves.
    mixed_moves`), the replica caching ``-log r``, ``l`` and their gradients in the continuous
    block.

    :param TemperedPath path: the reference, ``l`` and reference draws, on flat positions (or
        mixed ones).
    :param str algo: ``"NUTS"`` or ``"HMC"``.
    :return: :class:`~numpyro_extras.exchange.core.RungMoves`; its ``init`` takes NumPyro's HMC
        settings (``step_size``, ``dense_mass``, ...) as keyword arguments. It also carries
        ``evaluate(position, given=None) -> ReplicaEvaluation``.

    **Example:**

    .. code-block:: python

        init_fn, step_fn = replica_exchange(hmc_moves(path), lambda x: x, num_replicas=8)
    """

    def at(position, given):
        return position if given is None else MixedPosition(position, given)

    return _hmc_rung_moves(
        lambda position, given: path.reference_potential_fn(at(position, given)),
        lambda position, given: path.log_likelihood_fn(at(position, given)),
        lambda rng_key, given: path.sample_reference_fn(rng_key),
        algo,
    )


def legged_hmc_moves(split: SplitModel, base, algo="NUTS") -> RungMoves:
    """HMC or NUTS moves of the replicas of both legs of stabilised replica exchange
    (:func:`~numpyro_extras.exchange.stabilized.stabilized_exchange`) as one vectorised move:
    a replica's leg, 0 on the path from the fitted ``base`` (``(1 - beta) log q + beta log p(x,
    y)``) and 1 on the path from the prior (``log p0 + beta l``), is the ``given`` argument of
    ``init``, ``explore``, ``renew`` and ``evaluate``, so that the rungs of both legs make their
    moves in one program and a scan waits for the longest NUTS tree once, not once per leg.

    Both legs' densities come from one evaluation of the model, its prior and likelihood terms
    scaled per leg (``split.scaled_log_density_fn``), and one of ``q``.

    :param SplitModel split: the model's prior/likelihood split
        (:func:`~numpyro_extras.model.potential.split_model`), continuous sites only.
    :param base: the fitted leg's reference, a :class:`~numpyro_extras.GaussianBase` or
        :class:`~numpyro_extras.MixtureBase` on the same flat space.
    :param str algo: ``"NUTS"`` or ``"HMC"``.
    :return: :class:`~numpyro_extras.exchange.core.RungMoves` with ``evaluate``, as
        :func:`hmc_moves`'s; ``renew`` takes the leg as a Python int.

    **Example:**

    .. code-block:: python

        moves = legged_hmc_moves(split_model(key, model, (x, y)), nx.fit_base(key, model, (x, y)))
        replica = moves.evaluate(x0, 1)   # on the prior leg
    """
    base_potential = base.potential_function()

    def log_density(position, prior_scale, likelihood_scale):
        return split.scaled_log_density_fn(position, {}, prior_scale, likelihood_scale)

    def fitted_leg_term(leg, value):
        return jnp.where(leg == PRIOR_LEG, 0.0, value)

    def reference_potential_fn(position, leg):
        return jnp.where(
            leg == PRIOR_LEG, -log_density(position, 1.0, 0.0), base_potential(position)
        )

    def log_likelihood_fn(position, leg):
        # l = log p(y | x) on the prior leg, log p(x, y) - log q(x) on the fitted one.
        prior_scale = fitted_leg_term(leg, 1.0)
        return log_density(position, prior_scale, 1.0) + fitted_leg_term(
            leg, base_potential(position)
        )

    def potential_fn(position, beta, leg):
        prior_scale = jnp.where(leg == PRIOR_LEG, 1.0, beta)
        return -log_density(position, prior_scale, beta) + fitted_leg_term(
            leg, (1.0 - beta) * base_potential(position)
        )

    def sample_reference_fn(rng_key, leg):
        if leg == PRIOR_LEG:
            return split.sample_prior_fn(rng_key, 1)[0][0]
        return base.sample(rng_key)

    return _hmc_rung_moves(
        reference_potential_fn, log_likelihood_fn, sample_reference_fn, algo, potential_fn
    )


def _hmc_rung_moves(
    reference_potential_fn, log_likelihood_fn, sample_reference_fn, algo, potential_fn=None
):
    """:class:`HMCRungMoves` on a path given by ``-log r(x, given)``, ``l(x, given)`` and
    ``sample_reference_fn(rng_key, given)``; the moves' potential ``U_beta(x, given)`` is
    ``potential_fn(x, beta, given)`` if given, else ``-log r - beta l``."""
    if potential_fn is None:

        def potential_fn(position, beta, given):
            return reference_potential_fn(position, given) - beta * log_likelihood_fn(
                position, given
            )

    def potential_fn_gen(beta, given=None):
        return lambda position: potential_fn(position, beta, given)

    hmc_init, hmc_sample = hmc(potential_fn_gen=potential_fn_gen, algo=algo)

    def likelihood_value_and_grad(position, given):
        return value_and_gradient(lambda x: log_likelihood_fn(x, given))(position)

    def evaluate(position, given=None) -> ReplicaEvaluation:
        reference_potential, reference_gradient = value_and_gradient(
            lambda x: reference_potential_fn(x, given)
        )(position)
        log_likelihood, log_likelihood_gradient = likelihood_value_and_grad(position, given)
        return ReplicaEvaluation(
            position,
            reference_potential,
            reference_gradient,
            log_likelihood,
            log_likelihood_gradient,
        )

    def moved_evaluation(moved: HMCState, beta, given) -> ReplicaEvaluation:
        # U_beta = -log r - beta l: with l and its gradient, the reference part follows from the
        # move's own cached potential, one gradient of l instead of two gradients.
        log_likelihood, log_likelihood_gradient = likelihood_value_and_grad(moved.z, given)
        return ReplicaEvaluation(
            moved.z,
            moved.potential_energy + beta * log_likelihood,
            moved.z_grad + beta * log_likelihood_gradient,
            log_likelihood,
            log_likelihood_gradient,
        )

    def init(positions, betas, rng_key, num_warmup, given=None, **hmc_settings):
        replicas = jax.vmap(evaluate)(positions, given)
        inner = jax.vmap(
            lambda position, beta, key, given: hmc_init(
                position, num_warmup, model_args=(beta, given), rng_key=key, **hmc_settings
            )
        )(positions, betas, jax.random.split(rng_key, betas.shape[0]), given)
        return replicas, inner

    def explore(
        rng_key,
        replica: ReplicaEvaluation,
        inner: HMCState,
        beta,
        iteration,
        num_warmup,
        given=None,
    ):
        moved = hmc_sample(inner._replace(rng_key=rng_key), model_args=(beta, given))
        evaluation = moved_evaluation(moved, beta, given)
        finite = evaluation.finite
        return select(finite, evaluation, replica), select(
            finite, moved, rejected_move(inner, moved)
        )

    def renew(rng_key, replica: ReplicaEvaluation, given=None):
        draw = sample_reference_fn(rng_key, given).astype(replica.position.dtype)
        return evaluate(draw, given)

    def sync(inner, replicas, betas):
        # The adaptation state stays with its rung; the point and the cached potential follow
        # the swapped states and the (possibly new) beta.
        return jax.vmap(synced_hmc_state)(inner, replicas, betas)

    return HMCRungMoves(init, explore, renew, sync, evaluate)


class HMCRungMoves(NamedTuple):
    """:class:`~numpyro_extras.exchange.core.RungMoves` of :func:`hmc_moves`, with the
    evaluation of one point (for a sweep that moves another block of the point in between)."""

    init: Callable
    explore: Callable
    renew: Callable
    sync: Callable
    evaluate: Callable


def _posterior_fields(replicas, unravel_fn):
    """The fields of :class:`ExchangeState` that the replicas' caches determine."""
    return {
        "z": unravel_fn(jax.tree.map(lambda leaf: leaf[-1], replicas.position)),
        "potential_energy": -(replicas.log_likelihood[-1] - replicas.reference_potential[-1]),
        "log_likelihood": replicas.log_likelihood,
    }


def with_posterior_replica(state: ExchangeState, replica, sync, unravel_fn) -> ExchangeState:
    """``state`` with its ``beta = 1`` replica replaced by ``replica`` (an evaluation on the
    state's own path), the inner states re-expressed at the ladder.

    :param ExchangeState state: a chain's state.
    :param replica: the new evaluation of the top rung (e.g. ``moves.evaluate(x)``).
    :param sync: ``moves.sync`` of the state's inner kernel.
    :param unravel_fn: a position -> the ``z`` stored in the state.
    :return: :class:`ExchangeState`.
    """
    replicas = jax.tree.map(lambda leaf, new: leaf.at[-1].set(new), state.replicas, replica)
    return state._replace(
        **_posterior_fields(replicas, unravel_fn),
        replicas=replicas,
        inner_state=sync(state.inner_state, replicas, state.betas),
    )


class ScanParts(NamedTuple):
    """One scan split around its rungs' moves, so that the moves of every rung of every chain
    of a batch are one vectorised call (:func:`batched_scan_step`) instead of a vectorised
    call inside another, which compiles about twice as slowly.

    :param lanes: ``state -> (RungLanes, carry)``: the moves to make, and what the rest of the
        scan needs.
    :param explore: ``RungLanes -> (replica, inner)`` of one lane.
    :param complete: ``(state, moved, carry) -> state``, ``moved`` the lanes' results.
    """

    lanes: Callable
    explore: Callable
    complete: Callable


def _explored_lanes(explore, lanes, lane_sharding):
    """The moves of ``lanes`` (leading axis), split over devices by ``lane_sharding``: each
    device moves its share of the rungs, and the swaps that follow gather them."""
    lanes = constrain_leading_axis(lanes, lane_sharding)
    return constrain_leading_axis(jax.vmap(explore)(lanes), lane_sharding)


def scan_step(parts: ScanParts, lane_sharding=None):
    """``state -> state``: one scan of one chain from its :class:`ScanParts`; its rungs' moves
    split over devices by ``lane_sharding``
    (:func:`~numpyro_extras.shell.devices.leading_axis_sharding`, or ``None``)."""

    def step(state):
        lanes, carry = parts.lanes(state)
        moved = _explored_lanes(parts.explore, lanes, lane_sharding)
        return readable_on_every_process(parts.complete(state, moved, carry), lane_sharding)

    return step


def batched_scan_step(parts: ScanParts, lane_sharding=None):
    """``states -> states``: one scan of a batch of chains (leading axis), the moves of all
    their rungs one vectorised call over ``chains x rungs`` lanes, split over devices by
    ``lane_sharding`` (:func:`~numpyro_extras.shell.devices.leading_axis_sharding`, or ``None``).

    **Example:**

    .. code-block:: python

        scan = exchange_scan(hmc_moves(path), lambda x: x, num_replicas=8)
        states = jax.vmap(functools.partial(scan.init, num_warmup=500))(positions, keys)
        states = batched_scan_step(scan.parts(500))(states)
    """

    def step(states):
        lanes, carry = jax.vmap(parts.lanes)(states)
        batch_shape = lanes.beta.shape[:2]
        flat = jax.tree.map(lambda leaf: leaf.reshape((-1,) + leaf.shape[2:]), lanes)
        moved = _explored_lanes(parts.explore, flat, lane_sharding)
        moved = jax.tree.map(lambda leaf: leaf.reshape(batch_shape + leaf.shape[1:]), moved)
        states = jax.vmap(parts.complete)(states, moved, carry)
        return readable_on_every_process(states, lane_sharding)

    return step


def replica_exchange(moves: RungMoves, unravel_fn, *, num_replicas, tag=None, betas=None):
    """Pure ``init``/``step`` of non-reversible parallel tempering for one chain, the replicas
    moved by ``moves``.

    :param RungMoves moves: the inner kernel (:func:`hmc_moves`, or
        :func:`~numpyro_extras.exchange.discrete_moves.acs_moves`).
    :param unravel_fn: a replica's ``position`` -> the ``z`` stored in the state.
    :param int num_replicas: ``N``, the ladder's length (at least 2).
    :param tag: the build tag stored in the state.
    :param betas: the starting ladder, shape ``(N,)`` from 0 to 1 (e.g. one tuned by a pilot
        run); default :func:`~numpyro_extras.exchange.ladder.initial_ladder`.
    :return: ``(init_fn, step_fn)``: ``init_fn(positions, rng_key, num_warmup, **settings)``
        with ``positions`` of leading axis ``N`` (one start per rung) and ``settings`` those of
        ``moves.init``, and ``step_fn(state, num_warmup)``.

    **Example:**

    .. code-block:: python

        init_fn, step_fn = replica_exchange(hmc_moves(path), lambda x: x, num_replicas=8)
        state = init_fn(jnp.zeros((8, 2)), key, 500)
        state = step_fn(state, 500)
    """
    scan = exchange_scan(moves, unravel_fn, num_replicas=num_replicas, tag=tag, betas=betas)

    def step_fn(state, num_warmup):
        return scan_step(scan.parts(num_warmup))(state)

    return scan.init, step_fn


class ExchangeScan(NamedTuple):
    """The functions of :func:`exchange_scan`.

    :param init: ``(positions, rng_key, num_warmup, **settings) -> ExchangeState``.
    :param parts: ``num_warmup -> ScanParts`` of one scan (:func:`scan_step` makes it a step).
    """

    init: Callable
    parts: Callable


def exchange_scan(moves: RungMoves, unravel_fn, *, num_replicas, tag=None, betas=None):
    """:func:`replica_exchange`'s functions with its scan split around the rungs' moves
    (:class:`ExchangeScan`), so that a batch of chains moves all its rungs in one vectorised
    call (:func:`batched_scan_step`) and two ladders can move theirs together: the shell of
    the core's :func:`~numpyro_extras.exchange.core.init` and
    :func:`~numpyro_extras.exchange.core.kernel_parts`, which owns the chain's key, the build
    tag and the posterior draw as site values.

    The arguments are :func:`replica_exchange`'s.

    **Example:**

    .. code-block:: python

        scan = exchange_scan(hmc_moves(path), lambda x: x, num_replicas=8)
        state = scan.init(jnp.zeros((8, 2)), key, 500)
        state = scan_step(scan.parts(500))(state)
    """

    def shell_state(ladder: LadderState, swap_accept_prob, rng_key):
        return ExchangeState(
            **_posterior_fields(ladder.replicas, unravel_fn),
            betas=ladder.betas,
            swap_accept_prob=swap_accept_prob,
            replicas=ladder.replicas,
            inner_state=ladder.inner_state,
            statistics=ladder.statistics,
            iteration=ladder.iteration,
            build=tag,
            rng_key=rng_key,
        )

    def init_fn(positions, rng_key, num_warmup, **settings):
        starts = jax.tree.leaves(positions)[0].shape[0]
        if starts != num_replicas:
            raise ValueError(
                f"Replica exchange with {num_replicas} replicas needs one start per rung, got "
                f"{starts}."
            )
        inner_key, rng_key = jax.random.split(rng_key)
        ladder = init(positions, moves, inner_key, num_warmup, betas=betas, **settings)
        return shell_state(ladder, jnp.ones(num_replicas - 1, ladder.betas.dtype), rng_key)

    def parts(num_warmup):
        core = kernel_parts(moves, num_warmup)

        def lanes(state: ExchangeState):
            # The core draws from keys 1-3 of this split; key 0 carries the chain on.
            next_key = jax.random.split(state.rng_key, 4)[0]
            moving, carry = core.lanes(state.rng_key, state.ladder)
            return moving, (next_key, carry)

        def complete(state: ExchangeState, moved, carry):
            next_key, core_carry = carry
            ladder, info = core.complete(state.ladder, moved, core_carry)
            return shell_state(ladder, info.swap_accept_prob, next_key)

        return ScanParts(lanes, core.explore, complete)

    return ExchangeScan(init_fn, parts)
