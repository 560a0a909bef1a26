"""The functional core of non-reversible parallel tempering: pure, jittable ``init``/``step``
functions on :class:`ExchangeState`, under the thin kernel class of
:mod:`numpyro_extras.exchange.kernels`.

One chain holds ``N`` replicas on a ladder ``0 = beta_0 < ... < beta_{N-1} = 1`` of the path of
:mod:`numpyro_extras.exchange.path`. One step (a "scan", Syed et al., JRSSB 2022, Algorithm 1):

1. every replica but the reference one makes one move of the inner kernel on its own
   ``pi_beta``, vmapped over the replicas with ``beta`` as data: HMC or NUTS
   (:func:`hmc_moves`, NumPyro's functional :func:`~numpyro.infer.hmc.hmc`, each rung adapting
   its own step size and mass matrix during warm-up) or ACS for discrete sites
   (:func:`~numpyro_extras.exchange.discrete_moves.acs_moves`);
2. the reference replica is replaced by an exact draw from the reference;
3. swaps are offered to the even gaps on even scans and to the odd gaps on odd scans (the
   deterministic even-odd scheme), each accepted with probability
   ``min(1, exp((beta_{i+1} - beta_i) (l(x_i) - l(x_{i+1}))))`` (their eq. 3);
4. during warm-up, at the end of rounds of doubling length, the ladder is re-tuned to equal
   rejection rates (:func:`~numpyro_extras.exchange.ladder.equalized_ladder`).

The inner kernel is a :class:`RungMoves`: its replicas cache ``-log r``, ``l`` and what its move
needs of them (gradients, differences), so a swap or a new ladder costs no evaluation of the
model: the inner state of a rung is re-expressed at its ``beta`` from the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.hmc import HMCState, hmc

from numpyro_extras.compiled_chain import BuildTag
from numpyro_extras.exchange.ladder import equalized_ladder, initial_ladder, tuning_rounds
from numpyro_extras.exchange.path import MixedPosition, TemperedPath, value_and_gradient
from numpyro_extras.kernel import field_lookup, rejected_move
from numpyro_extras.metropolis import acceptance_probability, select
from numpyro_extras.potential import SplitModel

__all__ = [
    "FIT_LEG",
    "PRIOR_LEG",
    "RungMoves",
    "ReplicaEvaluation",
    "ExchangeStatistics",
    "ExchangeState",
    "EXCHANGE_FIELDS",
    "swap_log_ratios",
    "even_odd_swap",
    "update_statistics",
    "hmc_moves",
    "synced_hmc_state",
    "replica_exchange",
    "exchange_scan",
    "ExchangeScan",
    "moving_rungs",
    "RungLanes",
    "ScanParts",
    "lane_explore",
    "scan_step",
    "batched_scan_step",
    "legged_hmc_moves",
    "swap_rates",
    "with_posterior_replica",
]


# The legs of legged_hmc_moves: the path from the fitted reference, and the one from the prior.
FIT_LEG = 0
PRIOR_LEG = 1


class RungMoves(NamedTuple):
    """How an inner kernel moves the replicas: the interface of the core to its inner kernel.

    A replica is an evaluation of its point (a NamedTuple with ``position``,
    ``reference_potential`` ``= -log r``, ``log_likelihood`` ``= l`` and a ``finite`` flag, plus
    whatever the move needs, e.g. gradients); it does not depend on ``beta``, so it travels with
    swaps unchanged. The inner state (adaptation, schedules) belongs to the rung.

    :param init: ``(positions, betas, rng_key, num_warmup, **settings) -> (replicas, inner)``
        for all ``N`` rungs (leading axis ``N``).
    :param explore: ``(rng_key, replica, inner, beta, iteration, num_warmup) -> (replica,
        inner)``: one move of one rung on ``pi_beta`` (vmapped by the core, ``beta`` as data);
        ``iteration`` counts the scans before this one.
    :param renew: ``(rng_key, replica) -> replica``: an exact reference draw, evaluated (in the
        dtype of ``replica``).
    :param sync: ``(inner, replicas, betas) -> inner`` for all rungs: the inner states
        re-expressed at the (possibly new) ``betas`` holding the (possibly swapped) replicas.
    """

    init: Callable
    explore: Callable
    renew: Callable
    sync: Callable


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


class ExchangeStatistics(NamedTuple):
    """Running counts of how the replicas communicate.

    :param accept_sum: per gap, the sum of swap acceptance probabilities since the last ladder
        update (warm-up) or since sampling began.
    :param num_scans: scans summed into ``accept_sum``.
    :param replica_labels: per rung, the label of the state it holds (labels travel with swaps).
    :param last_end: per label, the end of the ladder it last reached: -1 none yet, 0 the
        reference, 1 the target.
    :param num_round_trips: labels that went from the reference to the target and back, counted
        after warm-up.
    """

    accept_sum: jax.Array
    num_scans: jax.Array
    replica_labels: jax.Array
    last_end: jax.Array
    num_round_trips: jax.Array


class ExchangeState(NamedTuple):
    """State of one replica-exchange chain.

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
    :param statistics: :class:`ExchangeStatistics`.
    :param iteration: scans so far, warm-up included.
    :param build: the :class:`~numpyro_extras.compiled_chain.BuildTag` of the kernel build.
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


def swap_log_ratios(betas, log_likelihood):
    """Log acceptance ratio of a swap across every gap of the ladder:
    ``(beta_{i+1} - beta_i) (l(x_i) - l(x_{i+1}))`` (Syed et al. eq. 3).

    :param betas: the ladder, shape ``(N,)``.
    :param log_likelihood: ``l`` at every rung, shape ``(N,)``.
    :return: array ``(N - 1,)``; NaN (a rejection) where ``l`` is not finite on both sides.
    """
    return (betas[1:] - betas[:-1]) * (log_likelihood[:-1] - log_likelihood[1:])


def even_odd_swap(rng_key, betas, log_likelihood, parity):
    """Decide the swaps of one scan: the gaps ``i`` with ``i % 2 == parity`` are offered a swap
    (they are disjoint, so all are decided at once); each is accepted by a Metropolis step on the
    product of the replicas' targets.

    :param rng_key: key for the acceptance draws.
    :param betas: the ladder, shape ``(N,)``.
    :param log_likelihood: ``l`` at every rung, shape ``(N,)``.
    :param parity: 0 on even scans, 1 on odd ones.
    :return: ``(source, accept_prob)``: ``source[j]`` is the rung whose state rung ``j`` holds
        after the swaps, and ``accept_prob`` the acceptance probability of every gap (offered or
        not).

    **Example:**

    .. code-block:: python

        source, accept_prob = even_odd_swap(key, betas, log_likelihood, iteration % 2)
        positions = positions[source]
    """
    accept_prob = acceptance_probability(swap_log_ratios(betas, log_likelihood))
    gaps = jnp.arange(accept_prob.shape[0])
    uniform = jax.random.uniform(rng_key, accept_prob.shape, dtype=accept_prob.dtype)
    accept = ((gaps % 2) == parity) & (uniform < accept_prob)
    no_swap = jnp.zeros((1,), bool)
    swaps_up = jnp.concatenate([accept, no_swap])  # rung j takes the state of rung j + 1
    swaps_down = jnp.concatenate([no_swap, accept])  # rung j takes the state of rung j - 1
    rungs = jnp.arange(betas.shape[0])
    source = rungs + swaps_up.astype(rungs.dtype) - swaps_down.astype(rungs.dtype)
    return source, accept_prob


def update_statistics(statistics: ExchangeStatistics, source, accept_prob, counted):
    """The counts after a scan's swaps: labels follow their states (``source`` from
    :func:`even_odd_swap`), the swap acceptance is summed, and a label that reaches the
    reference after having reached the target completes a round trip (counted if ``counted``).
    """
    labels = statistics.replica_labels[source]
    last_end = statistics.last_end
    reference_label, target_label = labels[0], labels[-1]
    returned = last_end[reference_label] == 1
    # The target end is recorded only for a label that came from the reference, so a round trip
    # is reference -> target -> reference.
    last_end = last_end.at[target_label].set(
        jnp.where(last_end[target_label] == 0, 1, last_end[target_label])
    )
    last_end = last_end.at[reference_label].set(0)
    return ExchangeStatistics(
        accept_sum=statistics.accept_sum + accept_prob,
        num_scans=statistics.num_scans + 1,
        replica_labels=labels,
        last_end=last_end,
        num_round_trips=statistics.num_round_trips + (returned & counted).astype(jnp.int32),
    )


def _initial_statistics(num_replicas, dtype):
    labels = jnp.arange(num_replicas, dtype=jnp.int32)
    return ExchangeStatistics(
        accept_sum=jnp.zeros(num_replicas - 1, dtype),
        num_scans=jnp.zeros((), jnp.int32),
        replica_labels=labels,
        last_end=jnp.full(num_replicas, -1, jnp.int32).at[0].set(0),
        num_round_trips=jnp.zeros((), jnp.int32),
    )


def _retune_ladder(statistics: ExchangeStatistics, betas, iteration, round_ends, num_warmup):
    """At the end of a tuning round: the equalised ladder, and the counts reset. At the end of
    warm-up the counts are reset too, so that after warm-up they describe the sampling ladder."""
    at_round_end = jnp.isin(iteration, round_ends) if round_ends.size else jnp.zeros((), bool)
    mean_accept = statistics.accept_sum / jnp.maximum(statistics.num_scans, 1)
    betas = jnp.where(at_round_end, equalized_ladder(betas, mean_accept), betas)
    reset = at_round_end | (iteration == num_warmup)
    statistics = statistics._replace(
        accept_sum=jnp.where(reset, 0.0, statistics.accept_sum),
        num_scans=jnp.where(reset, 0, statistics.num_scans),
    )
    return statistics, betas


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
    :return: :class:`RungMoves`; its ``init`` takes NumPyro's HMC settings (``step_size``,
        ``dense_mass``, ...) as keyword arguments. It also carries ``evaluate(position,
        given=None) -> ReplicaEvaluation``.

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
        (:func:`~numpyro_extras.potential.split_model`), continuous sites only.
    :param base: the fitted leg's reference, a :class:`~numpyro_extras.GaussianBase` or
        :class:`~numpyro_extras.MixtureBase` on the same flat space.
    :param str algo: ``"NUTS"`` or ``"HMC"``.
    :return: :class:`RungMoves` with ``evaluate``, as :func:`hmc_moves`'s; ``renew`` takes the
        leg as a Python int.

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
    """:class:`RungMoves` of :func:`hmc_moves`, with the evaluation of one point (for a sweep
    that moves another block of the point in between)."""

    init: Callable
    explore: Callable
    renew: Callable
    sync: Callable
    evaluate: Callable


def _float_dtype(positions):
    """The dtype of the ladder: the positions' own when they are real (a flat vector), the
    default float for discrete values."""
    dtype = jax.tree.leaves(positions)[0].dtype
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


def _rung(tree, index):
    return jax.tree.map(lambda leaf: leaf[index], tree)


def _posterior_fields(replicas, unravel_fn):
    """The fields of :class:`ExchangeState` that the replicas' caches determine."""
    return {
        "z": unravel_fn(_rung(replicas.position, -1)),
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


def moving_rungs(state: ExchangeState):
    """The replicas, inner states and ``beta`` of rungs ``1, ..., N - 1``: those a scan moves.

    The ``beta = 0`` rung is renewed by an exact draw from the reference instead (Syed et al.
    section 3): new mass enters the ladder there and travels up by swaps. Its own move would be
    discarded, and near the prior the tempered density is widest, so NUTS trees there are the
    longest that the vectorised rungs wait for.
    """
    return jax.tree.map(lambda leaf: leaf[1:], (state.replicas, state.inner_state, state.betas))


class RungLanes(NamedTuple):
    """The moves a scan makes, one lane per moving rung (leading axis): the arguments of
    ``RungMoves.explore`` but ``num_warmup``.

    :param rng_key: each lane's key.
    :param replica: its replica.
    :param inner: its inner state.
    :param beta: its inverse temperature.
    :param iteration: the scans its chain has made.
    :param given: its ``given`` argument (the leg of :func:`legged_hmc_moves`), or ``None``.
    """

    rng_key: jax.Array
    replica: Any
    inner: Any
    beta: jax.Array
    iteration: jax.Array
    given: Any = None


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


def lane_explore(explore, num_warmup):
    """``RungLanes -> (replica, inner)``: ``RungMoves.explore`` on one lane."""

    def explore_lane(lane: RungLanes):
        arguments = (lane.rng_key, lane.replica, lane.inner, lane.beta, lane.iteration, num_warmup)
        return explore(*arguments) if lane.given is None else explore(*arguments, lane.given)

    return explore_lane


def scan_step(parts: ScanParts):
    """``state -> state``: one scan of one chain from its :class:`ScanParts`."""

    def step(state):
        lanes, carry = parts.lanes(state)
        return parts.complete(state, jax.vmap(parts.explore)(lanes), carry)

    return step


def batched_scan_step(parts: ScanParts):
    """``states -> states``: one scan of a batch of chains (leading axis), the moves of all
    their rungs one vectorised call over ``chains x rungs`` lanes.

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
        moved = jax.vmap(parts.explore)(flat)
        moved = jax.tree.map(lambda leaf: leaf.reshape(batch_shape + leaf.shape[1:]), moved)
        return jax.vmap(parts.complete)(states, moved, carry)

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
    call (:func:`batched_scan_step`) and two ladders can move theirs together.

    The arguments are :func:`replica_exchange`'s.

    **Example:**

    .. code-block:: python

        scan = exchange_scan(hmc_moves(path), lambda x: x, num_replicas=8)
        state = scan.init(jnp.zeros((8, 2)), key, 500)
        state = scan_step(scan.parts(500))(state)
    """

    def state_of(replicas, inner, betas, accept_prob, statistics, iteration, rng_key):
        return ExchangeState(
            **_posterior_fields(replicas, unravel_fn),
            betas=betas,
            swap_accept_prob=accept_prob,
            replicas=replicas,
            inner_state=inner,
            statistics=statistics,
            iteration=iteration,
            build=tag,
            rng_key=rng_key,
        )

    def init_fn(positions, rng_key, num_warmup, **settings):
        inner_key, rng_key = jax.random.split(rng_key)
        dtype = _float_dtype(positions)
        ladder = (
            initial_ladder(num_replicas, dtype=dtype)
            if betas is None
            else jnp.asarray(betas, dtype=dtype)
        )
        replicas, inner = moves.init(positions, ladder, inner_key, num_warmup, **settings)
        return state_of(
            replicas,
            inner,
            ladder,
            jnp.ones(num_replicas - 1, dtype),
            _initial_statistics(num_replicas, dtype),
            jnp.zeros((), jnp.int32),
            rng_key,
        )

    def parts(num_warmup):
        def lanes(state: ExchangeState):
            rng_key, move_key, reference_key, swap_key = jax.random.split(state.rng_key, 4)
            replicas, inner, betas = moving_rungs(state)
            moving = RungLanes(
                jax.random.split(move_key, num_replicas - 1),
                replicas,
                inner,
                betas,
                jnp.broadcast_to(state.iteration, betas.shape),
            )
            return moving, (rng_key, reference_key, swap_key)

        def complete(state, moved, carry):
            return finish(state, moved, num_warmup, carry)

        return ScanParts(lanes, lane_explore(moves.explore, num_warmup), complete)

    def finish(state: ExchangeState, moved, num_warmup, keys):
        """The rest of a scan once rungs ``1, ..., N - 1`` have moved (``moved``: their
        replicas and inner states): the reference renewed, the swaps, the statistics and the
        ladder; ``keys`` are the state's next key and those of the renewal and the swaps."""
        rng_key, reference_key, swap_key = keys
        moved, moved_inner = moved
        betas = state.betas
        reference = _rung(state.replicas, 0)
        fresh = moves.renew(reference_key, reference)
        fresh = select(fresh.finite, fresh, reference)
        replicas = jax.tree.map(lambda new, rest: jnp.concatenate([new[None], rest]), fresh, moved)
        inner = jax.tree.map(
            lambda first, rest: jnp.concatenate([first[:1], rest]), state.inner_state, moved_inner
        )

        iteration = state.iteration + 1
        source, accept_prob = even_odd_swap(swap_key, betas, replicas.log_likelihood, iteration % 2)
        replicas = jax.tree.map(lambda leaf: leaf[source], replicas)
        statistics = update_statistics(
            state.statistics, source, accept_prob, iteration > num_warmup
        )
        statistics, betas = _retune_ladder(
            statistics, betas, iteration, jnp.asarray(tuning_rounds(num_warmup)), num_warmup
        )
        inner = moves.sync(inner, replicas, betas)
        return state_of(replicas, inner, betas, accept_prob, statistics, iteration, rng_key)

    return ExchangeScan(init_fn, parts)


def swap_rates(state: ExchangeState):
    """The ladder of a run and the mean swap acceptance probability of each of its gaps over the
    scans counted so far (Rao-Blackwellised), whose complements sum to the communication barrier
    (:func:`~numpyro_extras.exchange.ladder.communication_barrier`, Syed et al. 2022 eq. 12).

    :param state: an :class:`ExchangeState` of one chain.
    :return: ``(betas, accept_rates)``: the ladder ``(N,)`` and the rates ``(N - 1,)``.

    **Example:**

    .. code-block:: python

        init_fn, step_fn = replica_exchange(hmc_moves(path), lambda x: x, num_replicas=16)
        state = init_fn(positions, key, 256)
        state = jax.lax.fori_loop(0, 384, lambda _, state: step_fn(state, 256), state)
        betas, rates = swap_rates(state)
        barrier = communication_barrier(rates)[-1]
    """
    statistics = state.statistics
    return state.betas, statistics.accept_sum / jnp.maximum(statistics.num_scans, 1)
