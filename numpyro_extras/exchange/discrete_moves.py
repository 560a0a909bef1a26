"""ACS and DMALA moves of the replicas of a model with discrete latent sites, and Gibbs sweeps
(ACS on the discrete sites, HMC/NUTS on the continuous ones) for a model with both.

Replica ``i`` targets ``U_beta(theta) = log p0(theta) + beta l(theta)`` (the prior path of
:mod:`numpyro_extras.exchange.path` on the sites' values), and moves by steps of the
locally balanced proposal of the ACS paper (Pynadath et al. 2024, eq. 5) with its exact
Metropolis-Hastings test (eq. 6), at the ``(alpha, beta)`` of a cyclical schedule (eq. 7-8).

A replica caches ``log p0`` and ``l`` with their differences per coordinate separately
(:class:`DiscreteEvaluation`): the differences of ``U_beta`` are ``Delta p0 + beta Delta l``
(exactly so for exact differences, and for first-order ones since the gradient is linear), so a
swap or a new ``beta`` re-expresses a replica without evaluating the model, and the swap test
(Syed et al. eq. 3) reads ``l`` from the cache.

The schedule is tuned at ``init`` by the ACS tuner (Alg. 2-5) on a few rungs spread over the
ladder (never the reference one: renewed by exact draws, it never moves), each at its starting
``beta`` (vmapped over those rungs, ``beta`` as data); every other rung reads its schedule by
interpolating the tuned ones (log step sizes and balancing exponents, linearly in ``beta``), as
each rung does again at its new ``beta`` when the ladder moves during warm-up. After warm-up the
ladder, and with it every schedule, is frozen, so every kept transition leaves its rung's target
invariant.

For a model with continuous sites too, a replica is a point ``(x, theta)`` and its rung makes
a Gibbs sweep on ``log p0(x, theta) + beta l(x, theta)`` (:func:`mixed_moves`): ACS steps on
``theta`` given ``x``, then an HMC/NUTS move of ``x`` given ``theta``, each block caching its
own parts so that swaps still cost no evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.hmc import HMCState

from numpyro_extras.discrete.proposal import (
    ChainState,
    decode,
    encode,
    local_differences_fn,
    scheduled_steps,
)
from numpyro_extras.discrete.proposal import init as acs_init
from numpyro_extras.discrete.schedule import CyclicalSchedule
from numpyro_extras.discrete.tuning import (
    TuningResult,
    TuningSettings,
    fixed_tuning,
    resolve_settings,
    tune_schedule,
    untuned_schedule,
)
from numpyro_extras.exchange.chains import ReplicaEvaluation, hmc_moves, synced_hmc_state
from numpyro_extras.exchange.core import RungMoves
from numpyro_extras.exchange.path import MixedPosition, TemperedPath
from numpyro_extras.shell.metropolis import running_accept_mean

# The schedule changes smoothly with beta (larger steps on hotter rungs), so a few tuned rungs
# interpolated in beta serve the whole ladder; tuning every rung costs more model evaluations
# per chain than the sampling itself.
NUM_TUNED_RUNGS = 4

__all__ = [
    "NUM_TUNED_RUNGS",
    "DiscreteEvaluation",
    "DiscreteRungMoves",
    "DiscreteRungState",
    "MixedEvaluation",
    "MixedRungState",
    "acs_moves",
    "discrete_evaluation_fn",
    "mixed_moves",
    "schedule_at",
    "tuned_rungs",
]


class DiscreteEvaluation(NamedTuple):
    """What a discrete replica caches about its state: all a move, a swap or a new ``beta``
    needs.

    :param position: dict name -> integer index array, the state ``theta``.
    :param reference_potential: ``-log p0(theta)``.
    :param reference_differences: dict name -> ``shape + (K,)``, the change of ``log p0`` when
        one coordinate moves to each value (0 at the current value, ``-inf`` where not finite).
    :param log_likelihood: ``l(theta)``.
    :param log_likelihood_differences: the same for ``l``.
    """

    position: dict
    reference_potential: jax.Array
    reference_differences: dict
    log_likelihood: jax.Array
    log_likelihood_differences: dict

    def tempered(self, beta):
        """``(U_beta, differences of U_beta)`` from the cached parts."""
        differences = {
            # A move where l is not finite is never proposed, whatever beta (0 * -inf is NaN).
            name: prior + jnp.where(jnp.isfinite(likelihood), beta * likelihood, -jnp.inf)
            for (name, prior), likelihood in zip(
                self.reference_differences.items(),
                self.log_likelihood_differences.values(),
                strict=True,
            )
        }
        return -self.reference_potential + beta * self.log_likelihood, differences

    @property
    def finite(self):
        return jnp.isfinite(self.reference_potential) & jnp.isfinite(self.log_likelihood)


class DiscreteRungState(NamedTuple):
    """A rung's ACS state: its schedule and its last move.

    :param schedule: the rung's :class:`~numpyro_extras.discrete.CyclicalSchedule`, read at its
        ``beta`` (:func:`schedule_at`).
    :param tuning: what the tuner found at ``tuned_beta`` (the rung's starting ``beta``).
    :param tuned_beta: the ``beta`` the rung was tuned at.
    :param alpha: the step size of the last move.
    :param balancing: its balancing exponent.
    :param accept_prob: its MH acceptance probability.
    :param mean_accept_prob: running mean of ``accept_prob``, restarted when warm-up ends.
    """

    schedule: CyclicalSchedule
    tuning: TuningResult
    tuned_beta: jax.Array
    alpha: jax.Array
    balancing: jax.Array
    accept_prob: jax.Array
    mean_accept_prob: jax.Array

    @property
    def diverging(self):
        """Never: an ACS move has no trajectory to diverge (the field every rung state has)."""
        return jnp.zeros_like(self.accept_prob, dtype=bool)


def schedule_at(tuned_betas, schedules: CyclicalSchedule, betas) -> CyclicalSchedule:
    """The schedules at ``betas``, interpolated from schedules tuned at ``tuned_betas``: log step
    sizes and balancing exponents linearly in ``beta``, entry by entry of the cycle (constant
    beyond the ends).

    Every entry stays a valid ``(alpha > 0, 0.5 <= beta <= 1)`` pair and the balancing stays
    non-increasing along the cycle (ACS eq. 8), since both are convex combinations.

    :param tuned_betas: increasing, shape ``(M,)``.
    :param CyclicalSchedule schedules: leading axis ``M``, cycles of ``s`` entries.
    :param betas: shape ``(N,)``.
    :return: :class:`~numpyro_extras.discrete.CyclicalSchedule` with leading axis ``N``.

    **Example:**

    .. code-block:: python

        schedule_at(jnp.array([0.0, 1.0]), tuned, jnp.array([0.5]))  # geometric mean of alphas
    """

    def interpolate(values):
        return jax.vmap(lambda column: jnp.interp(betas, tuned_betas, column), 1, 1)(values)

    return CyclicalSchedule(
        jnp.exp(interpolate(jnp.log(schedules.step_sizes))), interpolate(schedules.balancing)
    )


def discrete_evaluation_fn(path: TemperedPath, variables: dict):
    """``(indices, given=None) -> DiscreteEvaluation``: ``log p0`` and ``l`` with their
    differences per coordinate, each by :func:`~numpyro_extras.discrete.local_differences_fn`
    (one gradient, or exact differences, as ``variables`` say).

    :param TemperedPath path: the prior path on the sites' values (or on
        :class:`~numpyro_extras.exchange.path.MixedPosition` points, then ``given`` is the flat
        continuous position the discrete sites are moved at).
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :return: the evaluation function of one state.

    **Example:**

    .. code-block:: python

        evaluation = discrete_evaluation_fn(path, variables)({"z": jnp.array([0, 1, 1])})
        log_density, differences = evaluation.tempered(0.5)
    """

    def evaluate(indices, given=None) -> DiscreteEvaluation:
        def at(values):
            return values if given is None else MixedPosition(given, values)

        log_prior, prior_change = local_differences_fn(
            lambda values: -path.reference_potential_fn(at(values)), variables
        )(indices)
        log_likelihood, likelihood_change = local_differences_fn(
            lambda values: path.log_likelihood_fn(at(values)), variables
        )(indices)
        return DiscreteEvaluation(
            indices, -log_prior, prior_change, log_likelihood, likelihood_change
        )

    return evaluate


class DiscreteRungMoves(NamedTuple):
    """:class:`~numpyro_extras.exchange.core.RungMoves` of :func:`acs_moves`, with the
    evaluation of one state (for a sweep that moves another block in between)."""

    init: Callable
    explore: Callable
    renew: Callable
    sync: Callable
    evaluate: Callable


def _rung_states(tunings: TuningResult, tuned_betas) -> DiscreteRungState:
    zeros = jnp.zeros_like(tuned_betas)
    return DiscreteRungState(tunings.schedule, tunings, tuned_betas, zeros, zeros, zeros, zeros)


def tuned_rungs(num_replicas, num_tuned_rungs):
    """The indices of the rungs the tuner runs on: ``num_tuned_rungs`` (at least the two ends)
    of rungs ``1 .. N - 1`` spread evenly, both ends included (all of them when there are no
    more).

    :param int num_replicas: ``N``, the rungs of the ladder (rung 0 is never tuned).
    :param int num_tuned_rungs: how many to tune.
    :return: increasing integer array of rung indices.

    **Example:**

    .. code-block:: python

        tuned_rungs(16, 4)  # array([ 1,  6, 10, 15])
    """
    count = min(max(int(num_tuned_rungs), 2), num_replicas - 1)
    return np.unique(np.round(np.linspace(1, num_replicas - 1, count)).astype(int))


def _interpolated_tunings(tuned_betas, tunings: TuningResult, betas, tuned) -> TuningResult:
    """Every rung's :class:`~numpyro_extras.discrete.TuningResult`: the tuner's on rungs
    ``tuned`` (at ``tuned_betas``), elsewhere the schedule read at the rung's beta from them, with
    no acceptance measured (NaN) and no tuning step taken."""
    schedules = schedule_at(tuned_betas, tunings.schedule, betas)
    nan = jnp.full(betas.shape, jnp.nan, tunings.accept_at_max.dtype)
    read = TuningResult(
        schedules,
        schedules.step_sizes.max(-1).astype(tunings.alpha_max.dtype),
        schedules.step_sizes.min(-1).astype(tunings.alpha_min.dtype),
        nan,
        nan,
        jnp.zeros(betas.shape, tunings.num_steps.dtype),
    )
    return jax.tree.map(lambda leaf, own: leaf.at[tuned].set(own), read, tunings)


def acs_moves(
    path: TemperedPath,
    variables: dict,
    *,
    schedule: CyclicalSchedule | None = None,
    settings: TuningSettings | None = None,
    num_tuning_chains=8,
    discrete_steps=1,
    num_tuned_rungs=NUM_TUNED_RUNGS,
) -> DiscreteRungMoves:
    """ACS (or, with a one-entry ``schedule`` at balancing 0.5, DMALA) moves of the replicas of
    a model's discrete sites, for :func:`~numpyro_extras.exchange.chains.replica_exchange`.

    For a path on :class:`~numpyro_extras.exchange.path.MixedPosition` points the moves are
    those of the discrete block given the continuous one: ``init``, ``explore`` and
    ``evaluate`` then take the flat continuous position as a trailing ``given`` argument (see
    :func:`mixed_moves`).

    :param TemperedPath path: the prior path on the sites' values
        (:func:`~numpyro_extras.exchange.path.prior_path`).
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable` (how
        each site is encoded and gets its differences; e.g. ``nx.ACS(model)
        .discrete_target(args).variables``).
    :param CyclicalSchedule schedule: a fixed schedule for every rung; ``None``: tuned per rung
        at ``init``.
    :param TuningSettings settings: the tuner's constants.
    :param int num_tuning_chains: copies per rung the tuner averages over.
    :param int discrete_steps: ACS moves per scan, at consecutive positions of the cycle.
    :param int num_tuned_rungs: rungs the tuner runs on, spread evenly over the ladder from the
        first above the reference one to the posterior one; the others read their schedules
        from them (every rung is tuned when the ladder has no more).
    :return: :class:`DiscreteRungMoves` on index dicts; a scan moves each rung by
        ``discrete_steps`` ACS steps, at the positions of the cycle given by the scan count.

    **Example:**

    .. code-block:: python

        target = nx.ACS(nx.ising_model).discrete_target((4,))
        moves = acs_moves(prior_path(target.split), target.variables)
        init_fn, step_fn = replica_exchange(moves, target.site_values_fn, num_replicas=8)
    """
    evaluate = discrete_evaluation_fn(path, variables)

    def tempered_evaluate(beta, given):
        """``indices -> (U_beta, differences, evaluation)``: the evaluation is kept as the
        chain state's cache, so an accepted state brings its parts along."""

        def evaluate_at(indices):
            evaluation = evaluate(indices, given)
            return (*evaluation.tempered(beta), evaluation)

        return evaluate_at

    def chain_at(replica: DiscreteEvaluation, beta) -> ChainState:
        return ChainState(replica.position, *replica.tempered(beta), replica)

    def draw_indices(rng_key):
        draw = path.sample_reference_fn(rng_key)
        return decode(variables, draw.discrete if isinstance(draw, MixedPosition) else draw)

    def tune_rung(rng_key, position, beta, given):
        """The rung's schedule by the ACS tuner (Alg. 2-5) at its ``beta``, from ``position``
        and prior draws, and the state it ends in."""
        draw_key, tune_key = jax.random.split(rng_key)
        copies = jax.vmap(draw_indices)(jax.random.split(draw_key, num_tuning_chains))
        copies = jax.tree.map(lambda draws, start: draws.at[0].set(start), copies, position)
        evaluate_at = tempered_evaluate(beta, given)
        chains = jax.vmap(lambda indices: acs_init(indices, evaluate_at))(copies)
        tuning, chains = tune_schedule(tune_key, chains, evaluate_at, variables, settings)
        # Each rung starts where its first tuning copy (its own start) ended.
        return tuning, jax.tree.map(lambda leaf: leaf[0], chains.indices)

    def init(positions, betas, rng_key, num_warmup, given=None):
        if schedule is None:
            # The beta = 0 rung is renewed by reference draws and never moves: it is never
            # tuned, and holds rung 1's schedule, never read.
            tuned = tuned_rungs(betas.shape[0], num_tuned_rungs)
            picked = jax.tree.map(lambda leaf: leaf[tuned], (positions, betas, given))
            tunings, moved = jax.vmap(tune_rung)(
                jax.random.split(rng_key, betas.shape[0])[tuned], *picked
            )
            tuned_betas = betas.at[0].set(betas[1])
            positions = jax.tree.map(lambda leaf, end: leaf.at[tuned].set(end), positions, moved)
            tunings = _interpolated_tunings(betas[tuned], tunings, tuned_betas, tuned)
        else:
            tunings = jax.vmap(lambda _: fixed_tuning(schedule))(betas)
            tuned_betas = betas
        replicas = jax.vmap(evaluate)(positions, given)
        return replicas, _rung_states(tunings, tuned_betas)

    def explore(
        rng_key, replica, inner: DiscreteRungState, beta, iteration, num_warmup, given=None
    ):
        # Every rung is at the same position of its cycle (eq. 7-8): scans count the moves.
        keys = rng_key[None] if discrete_steps == 1 else jax.random.split(rng_key, discrete_steps)
        chain, (alpha, balancing, accept_prob) = scheduled_steps(
            keys,
            chain_at(replica, beta),
            inner.schedule,
            iteration * discrete_steps,
            tempered_evaluate(beta, given),
            variables,
        )
        mean_accept_prob = running_accept_mean(
            inner.mean_accept_prob, accept_prob, iteration + 1, num_warmup
        )
        return chain.cache, inner._replace(
            alpha=alpha,
            balancing=balancing,
            accept_prob=accept_prob,
            mean_accept_prob=mean_accept_prob,
        )

    def renew(rng_key, replica):
        return evaluate(draw_indices(rng_key))

    def sync(inner: DiscreteRungState, replicas, betas):
        # The replicas' caches do not depend on beta; only tuned schedules follow a new ladder.
        if schedule is not None:
            return inner
        tuned = jax.tree.map(lambda leaf: leaf[1:], (inner.tuned_beta, inner.tuning.schedule))
        return inner._replace(schedule=schedule_at(*tuned, betas))

    return DiscreteRungMoves(init, explore, renew, sync, evaluate)


class MixedEvaluation(NamedTuple):
    """What a replica of a model with continuous and discrete latent sites caches about its
    point ``(x, theta)``: both blocks' caches, valid at the same point.

    :param continuous: :class:`~numpyro_extras.exchange.chains.ReplicaEvaluation` of ``x``
        given ``theta`` (``-log r``, ``l`` and their gradients in ``x``).
    :param discrete: :class:`DiscreteEvaluation` of ``theta`` given ``x`` (``-log r``, ``l``
        and their differences per discrete coordinate).
    """

    continuous: ReplicaEvaluation
    discrete: DiscreteEvaluation

    @property
    def position(self) -> MixedPosition:
        """``(x, theta)``, the discrete sites as index arrays."""
        return MixedPosition(self.continuous.position, self.discrete.position)

    @property
    def reference_potential(self):
        return self.continuous.reference_potential

    @property
    def log_likelihood(self):
        return self.continuous.log_likelihood

    @property
    def finite(self):
        return self.continuous.finite & self.discrete.finite


class MixedRungState(NamedTuple):
    """A rung's state for a model with continuous and discrete latent sites: its ACS state
    and its HMC/NUTS state (whose step size and mass matrix adapt during warm-up).

    The HMC/NUTS fields (``diverging``, ``accept_prob``, ``adapt_state``, ...) are read from
    ``continuous``; the ACS move's acceptance is ``discrete.accept_prob``.
    """

    discrete: DiscreteRungState
    continuous: HMCState

    @property
    def diverging(self):
        return self.continuous.diverging

    @property
    def accept_prob(self):
        return self.continuous.accept_prob

    @property
    def mean_accept_prob(self):
        return self.continuous.mean_accept_prob

    @property
    def num_steps(self):
        return self.continuous.num_steps

    @property
    def energy(self):
        return self.continuous.energy

    @property
    def adapt_state(self):
        return self.continuous.adapt_state


def mixed_moves(
    path: TemperedPath,
    variables: dict,
    algo="NUTS",
    *,
    schedule: CyclicalSchedule | None = None,
    settings: TuningSettings | None = None,
    num_tuning_chains=32,
    num_tuning_sweeps=50,
    discrete_steps=20,
) -> RungMoves:
    """Gibbs sweeps of the replicas of a model with continuous and discrete latent sites: at
    its ``beta``, each rung moves the discrete sites given the continuous ones by
    ``discrete_steps`` ACS steps (ACS paper eq. 5-6, :func:`acs_moves`), then the continuous
    sites given the discrete ones by one HMC/NUTS move
    (:func:`~numpyro_extras.exchange.chains.hmc_moves`), both on the rung's tempered density
    ``log p0(x, theta) + beta l(x, theta)`` (Syed et al. eq. 2). Each block's move leaves its
    conditional of that density invariant, so the sweep leaves the density invariant.

    A replica caches both blocks' parts at its point (:class:`MixedEvaluation`), so a swap or a
    new ``beta`` costs no evaluation of the model. At ``init`` every rung but the reference
    one first makes ``num_tuning_sweeps`` sweeps at the tuner's untuned cycle (Alg. 3), its
    HMC/NUTS move adapting over them, so that its continuous sites leave their prior draw; then
    its ACS schedule is tuned (Alg. 2-5) given where they are, and its HMC/NUTS adaptation
    starts afresh for the warm-up.

    :param TemperedPath path: the prior path on
        :class:`~numpyro_extras.exchange.path.MixedPosition` points.
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :param str algo: ``"NUTS"`` or ``"HMC"``.
    :param CyclicalSchedule schedule: a fixed schedule for every rung; ``None``: tuned per rung.
    :param TuningSettings settings: the tuner's constants.
    :param int num_tuning_chains: copies per rung the tuner averages over.
    :param int num_tuning_sweeps: sweeps per rung before the tuner (0: tune at the start).
    :param int discrete_steps: ACS moves per sweep (a whole cycle by default, as in
        :class:`~numpyro_extras.ACS` with an inner kernel).
    :return: :class:`~numpyro_extras.exchange.core.RungMoves` on
        :class:`~numpyro_extras.exchange.path.MixedPosition` points with index dicts; its
        ``init`` takes NumPyro's HMC settings as keyword arguments.

    **Example:**

    .. code-block:: python

        target = nx.ACS(model, inner_kernel=NUTS).discrete_target((x, y))
        moves = mixed_moves(prior_path(target.split), target.variables)
        init_fn, step_fn = replica_exchange(moves, unravel_fn, num_replicas=8)
    """
    # One factory for the four moves, as NumPyro's hmc() builds its init and sample together:
    # they share the two blocks' moves and the variables, and each is short.
    discrete = acs_moves(
        path,
        variables,
        schedule=schedule,
        settings=settings,
        num_tuning_chains=num_tuning_chains,
        discrete_steps=discrete_steps,
    )
    continuous = hmc_moves(path, algo)

    def evaluate(x, indices) -> MixedEvaluation:
        return MixedEvaluation(
            continuous.evaluate(x, encode(variables, indices)), discrete.evaluate(indices, x)
        )

    def explore(
        rng_key, replica: MixedEvaluation, inner: MixedRungState, beta, iteration, num_warmup
    ):
        discrete_key, continuous_key = jax.random.split(rng_key)
        x = replica.continuous.position
        moved, discrete_inner = discrete.explore(
            discrete_key, replica.discrete, inner.discrete, beta, iteration, num_warmup, x
        )
        values = encode(variables, moved.position)
        # The continuous block's cache and HMC state at the moved discrete values.
        here = continuous.evaluate(x, values)
        continuous_replica, continuous_inner = continuous.explore(
            continuous_key,
            here,
            synced_hmc_state(inner.continuous, here, beta),
            beta,
            iteration,
            num_warmup,
            values,
        )
        # The discrete block's cache at the moved continuous position, for the next sweep.
        moved = discrete.evaluate(moved.position, continuous_replica.position)
        return MixedEvaluation(continuous_replica, moved), MixedRungState(
            discrete_inner, continuous_inner
        )

    def burn_in(rng_key, position: MixedPosition, beta, hmc_settings):
        """``num_tuning_sweeps`` sweeps of one rung at the untuned cycle, its HMC/NUTS move
        adapting over them; the point they end at."""
        naive = untuned_schedule(resolve_settings(settings, variables))
        init_key, rng_key = jax.random.split(rng_key)
        x, indices = position
        inner = MixedRungState(
            _rung_states(fixed_tuning(naive), beta),
            hmc_init_one(
                x, encode(variables, indices), beta, init_key, num_tuning_sweeps, hmc_settings
            ),
        )

        def sweep(carry, inputs):
            key, iteration = inputs
            return explore(key, *carry, beta, iteration, num_tuning_sweeps), None

        (replica, _), _ = jax.lax.scan(
            sweep,
            (evaluate(x, indices), inner),
            (jax.random.split(rng_key, num_tuning_sweeps), jnp.arange(num_tuning_sweeps)),
        )
        return replica.position

    def hmc_init_one(x, values, beta, rng_key, num_warmup, hmc_settings):
        x, beta, values = jax.tree.map(lambda leaf: leaf[None], (x, beta, values))
        _, inner = continuous.init(x, beta, rng_key, num_warmup, values, **hmc_settings)
        return jax.tree.map(lambda leaf: leaf[0], inner)

    def init(positions: MixedPosition, betas, rng_key, num_warmup, **hmc_settings):
        sweep_key, discrete_key, continuous_key = jax.random.split(rng_key, 3)
        if num_tuning_sweeps and schedule is None:
            # As for the tuner, the reference rung is skipped: it never moves.
            tail = jax.tree.map(lambda leaf: leaf[1:], (positions, betas))
            moved = jax.vmap(
                lambda key, position, beta: burn_in(key, position, beta, hmc_settings)
            )(jax.random.split(sweep_key, betas.shape[0] - 1), *tail)
            positions = jax.tree.map(
                lambda head, rest: jnp.concatenate([head[:1], rest]), positions, moved
            )
        x = positions.continuous
        discrete_replicas, discrete_inner = discrete.init(
            positions.discrete, betas, discrete_key, num_warmup, x
        )
        values = jax.vmap(encode, in_axes=(None, 0))(variables, discrete_replicas.position)
        continuous_replicas, continuous_inner = continuous.init(
            x, betas, continuous_key, num_warmup, values, **hmc_settings
        )
        return MixedEvaluation(continuous_replicas, discrete_replicas), MixedRungState(
            discrete_inner, continuous_inner
        )

    def renew(rng_key, replica: MixedEvaluation):
        draw = path.sample_reference_fn(rng_key)
        x = draw.continuous.astype(replica.continuous.position.dtype)
        return evaluate(x, decode(variables, draw.discrete))

    def sync(inner: MixedRungState, replicas: MixedEvaluation, betas):
        return MixedRungState(
            discrete.sync(inner.discrete, replicas.discrete, betas),
            continuous.sync(inner.continuous, replicas.continuous, betas),
        )

    return RungMoves(init, explore, renew, sync)
