"""The functional core of non-reversible parallel tempering, in BlackJAX's shape: a
:class:`LadderState` and a :class:`LadderInfo`, :func:`init`, and :func:`build_kernel` returning
a pure ``kernel(rng_key, state) -> (state, info)``.

One chain holds ``N`` replicas on a ladder ``0 = beta_0 < ... < beta_{N-1} = 1`` of the path of
:mod:`numpyro_extras.exchange.path`. One transition is a "scan" (Syed et al., JRSSB 2022,
Algorithm 1):

1. every replica but the reference one makes one move of the inner kernel on its own
   ``pi_beta``, vmapped over the replicas with ``beta`` as data: HMC or NUTS
   (:func:`~numpyro_extras.exchange.chains.hmc_moves`, each rung adapting its own step size and
   mass matrix during warm-up) or ACS for discrete sites
   (:func:`~numpyro_extras.exchange.discrete_moves.acs_moves`);
2. the reference replica is replaced by an exact draw from the reference;
3. swaps are offered to the even gaps on even scans and to the odd gaps on odd scans (the
   deterministic even-odd scheme), each accepted with probability
   ``min(1, exp((beta_{i+1} - beta_i) (l(x_i) - l(x_{i+1}))))`` (their eq. 3);
4. during warm-up, at the end of rounds of doubling length, the ladder is re-tuned to equal
   rejection rates (:func:`~numpyro_extras.exchange.ladder.equalized_ladder`).

The inner kernel is a :class:`RungMoves`: its replicas cache ``-log r``, ``l`` and what its move
needs of them (gradients, differences), so a swap or a new ladder costs no evaluation of the
model: the inner state of a rung is re-expressed at its ``beta`` from the cache. Inner
HMC/NUTS adapts during warm-up, so the warm-up length is part of :func:`init` and
:func:`build_kernel`.

The core knows nothing of NumPyro's ``MCMC``: the chain's key, the build tag and the posterior
draw as site values belong to the shell,
:class:`~numpyro_extras.exchange.chains.ExchangeState`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.exchange.ladder import equalized_ladder, initial_ladder, tuning_rounds
from numpyro_extras.shell.metropolis import acceptance_probability, select

__all__ = [
    "RungMoves",
    "ExchangeStatistics",
    "LadderState",
    "LadderInfo",
    "LadderParts",
    "RungLanes",
    "init",
    "build_kernel",
    "kernel_parts",
    "swap_log_ratios",
    "even_odd_swap",
    "update_statistics",
    "moving_rungs",
    "lane_explore",
    "swap_rates",
]


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


class LadderState(NamedTuple):
    """Where one replica-exchange chain is: its ``N`` rungs, bottom (the reference) to top (the
    posterior).

    :param replicas: every rung's evaluation of its point (leading axis ``N``): a
        :class:`~numpyro_extras.exchange.chains.ReplicaEvaluation` for HMC/NUTS moves. It does
        not depend on ``beta``, so it travels with swaps.
    :param inner_state: the inner kernel's state of every rung (leading axis ``N``), which
        stays with its rung: NumPyro HMC/NUTS states, or the ACS schedules of
        :class:`~numpyro_extras.exchange.discrete_moves.DiscreteRungState`.
    :param betas: the ladder, shape ``(N,)`` (tuned in warm-up, then fixed).
    :param statistics: :class:`ExchangeStatistics`.
    :param iteration: scans so far, warm-up included.
    """

    replicas: Any
    inner_state: Any
    betas: jax.Array
    statistics: ExchangeStatistics
    iteration: jax.Array


class LadderInfo(NamedTuple):
    """What one scan did.

    :param swap_accept_prob: every gap's swap acceptance probability, offered or not (a
        Rao-Blackwellised estimate of the gap's swap rate), shape ``(N - 1,)``.
    :param swap_source: per rung, the rung whose state it holds after the swaps, shape ``(N,)``.
    :param reference_renewed: whether the reference rung took its fresh reference draw (one
        where the cached values are not finite is discarded).
    :param ladder_retuned: whether the scan ended a tuning round and re-tuned the ladder.
    """

    swap_accept_prob: jax.Array
    swap_source: jax.Array
    reference_renewed: jax.Array
    ladder_retuned: jax.Array


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
    warm-up the counts are reset too, so that after warm-up they describe the sampling ladder.
    Returns the statistics, the ladder and whether it was re-tuned."""
    at_round_end = jnp.isin(iteration, round_ends) if round_ends.size else jnp.zeros((), bool)
    mean_accept = statistics.accept_sum / jnp.maximum(statistics.num_scans, 1)
    betas = jnp.where(at_round_end, equalized_ladder(betas, mean_accept), betas)
    reset = at_round_end | (iteration == num_warmup)
    statistics = statistics._replace(
        accept_sum=jnp.where(reset, 0.0, statistics.accept_sum),
        num_scans=jnp.where(reset, 0, statistics.num_scans),
    )
    return statistics, betas, at_round_end


def _float_dtype(positions):
    """The dtype of the ladder: the positions' own when they are real (a flat vector), the
    default float for discrete values."""
    dtype = jax.tree.leaves(positions)[0].dtype
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


def _rung(tree, index):
    return jax.tree.map(lambda leaf: leaf[index], tree)


def moving_rungs(state: LadderState):
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
    :param given: its ``given`` argument (the leg of
        :func:`~numpyro_extras.exchange.chains.legged_hmc_moves`), or ``None``.
    """

    rng_key: jax.Array
    replica: Any
    inner: Any
    beta: jax.Array
    iteration: jax.Array
    given: Any = None


def lane_explore(explore, num_warmup):
    """``RungLanes -> (replica, inner)``: ``RungMoves.explore`` on one lane."""

    def explore_lane(lane: RungLanes):
        arguments = (lane.rng_key, lane.replica, lane.inner, lane.beta, lane.iteration, num_warmup)
        return explore(*arguments) if lane.given is None else explore(*arguments, lane.given)

    return explore_lane


class LadderParts(NamedTuple):
    """One scan split around its rungs' moves (:func:`kernel_parts`), so that a caller can move
    the rungs of many chains, or of two ladders, in one vectorised call; :func:`build_kernel`
    is their composition for one chain.

    :param lanes: ``(rng_key, state) -> (RungLanes, carry)``: the moves to make, and what the
        rest of the scan needs.
    :param explore: ``RungLanes -> (replica, inner)`` of one lane.
    :param complete: ``(state, moved, carry) -> (state, info)``, ``moved`` the lanes' results
        (leading axis ``N - 1``).
    """

    lanes: Callable
    explore: Callable
    complete: Callable


def init(positions, moves: RungMoves, rng_key, num_warmup, betas=None, **settings) -> LadderState:
    """The state of a chain with one start per rung.

    :param positions: the starts, leading axis ``N`` (flat vectors, discrete values or
        :class:`~numpyro_extras.exchange.path.MixedPosition` points, as ``moves`` takes them).
    :param RungMoves moves: the inner kernel.
    :param rng_key: the key of the inner kernel's ``init`` (used as it is).
    :param int num_warmup: the warm-up scans, in which inner HMC/NUTS adapts.
    :param betas: the starting ladder, shape ``(N,)`` from 0 to 1 (e.g. one tuned by a pilot
        run); default :func:`~numpyro_extras.exchange.ladder.initial_ladder`.
    :param settings: the settings of ``moves.init`` (NumPyro's HMC settings for
        :func:`~numpyro_extras.exchange.chains.hmc_moves`).
    :return: :class:`LadderState`, in the dtype of real ``positions`` (else the default float).

    **Example:**

    .. code-block:: python

        state = init(jnp.zeros((8, 2)), hmc_moves(path), jax.random.PRNGKey(0), 500)
    """
    num_replicas = jax.tree.leaves(positions)[0].shape[0]
    dtype = _float_dtype(positions)
    ladder = (
        initial_ladder(num_replicas, dtype=dtype) if betas is None else jnp.asarray(betas, dtype)
    )
    replicas, inner = moves.init(positions, ladder, rng_key, num_warmup, **settings)
    return LadderState(
        replicas, inner, ladder, _initial_statistics(num_replicas, dtype), jnp.zeros((), jnp.int32)
    )


def kernel_parts(moves: RungMoves, num_warmup) -> LadderParts:
    """The scan of :func:`build_kernel` split around the rungs' moves (:class:`LadderParts`).

    :param RungMoves moves: the inner kernel.
    :param int num_warmup: the warm-up scans: ladder tuning rounds end within them, and the
        round trips are counted after them.
    :return: :class:`LadderParts`.

    **Example:**

    .. code-block:: python

        parts = kernel_parts(moves, 500)
        lanes, carry = jax.vmap(parts.lanes)(keys, states)        # a batch of chains
        flat = jax.tree.map(lambda leaf: leaf.reshape((-1,) + leaf.shape[2:]), lanes)
        moved = jax.vmap(parts.explore)(flat)                       # every rung of every chain
    """
    round_ends = jnp.asarray(tuning_rounds(num_warmup))

    def lanes(rng_key, state: LadderState):
        # Keys 1-3 of a four-way split: a caller that carries a chain's key on may keep key 0.
        _, move_key, reference_key, swap_key = jax.random.split(rng_key, 4)
        replicas, inner, betas = moving_rungs(state)
        moving = RungLanes(
            jax.random.split(move_key, betas.shape[0]),
            replicas,
            inner,
            betas,
            jnp.broadcast_to(state.iteration, betas.shape),
        )
        return moving, (reference_key, swap_key)

    def complete(state: LadderState, moved, keys):
        reference_key, swap_key = keys
        moved, moved_inner = moved
        reference = _rung(state.replicas, 0)
        fresh = moves.renew(reference_key, reference)
        renewed = fresh.finite
        fresh = select(renewed, fresh, reference)
        replicas = jax.tree.map(lambda new, rest: jnp.concatenate([new[None], rest]), fresh, moved)
        inner = jax.tree.map(
            lambda first, rest: jnp.concatenate([first[:1], rest]), state.inner_state, moved_inner
        )
        iteration = state.iteration + 1
        source, accept_prob = even_odd_swap(
            swap_key, state.betas, replicas.log_likelihood, iteration % 2
        )
        replicas = jax.tree.map(lambda leaf: leaf[source], replicas)
        statistics = update_statistics(
            state.statistics, source, accept_prob, iteration > num_warmup
        )
        statistics, betas, retuned = _retune_ladder(
            statistics, state.betas, iteration, round_ends, num_warmup
        )
        inner = moves.sync(inner, replicas, betas)
        new_state = LadderState(replicas, inner, betas, statistics, iteration)
        return new_state, LadderInfo(accept_prob, source, renewed, retuned)

    return LadderParts(lanes, lane_explore(moves.explore, num_warmup), complete)


def build_kernel(moves: RungMoves, num_warmup) -> Callable:
    """One scan of non-reversible parallel tempering (Syed et al. Algorithm 1): rungs ``1, ...,
    N - 1`` move with ``moves`` on their own ``pi_beta``, the reference rung is renewed by an
    exact reference draw, the even or odd gaps are offered swaps accepted with probability
    ``min(1, exp((beta_{i+1} - beta_i) (l(x_i) - l(x_{i+1}))))`` (their eq. 3), and in warm-up
    the ladder is re-tuned at the end of each tuning round.

    :param RungMoves moves: the inner kernel (:func:`~numpyro_extras.exchange.chains.hmc_moves`,
        :func:`~numpyro_extras.exchange.discrete_moves.acs_moves`, ...).
    :param int num_warmup: the warm-up scans (as given to :func:`init`).
    :return: ``kernel(rng_key, state) -> (state, info)``, pure and traceable
        (:class:`LadderState`, :class:`LadderInfo`). The scan draws from keys 1-3 of
        ``jax.random.split(rng_key, 4)``.

    **Example:**

    .. code-block:: python

        moves = hmc_moves(path)
        kernel = jax.jit(build_kernel(moves, 500))
        state = init(jnp.zeros((8, 2)), moves, jax.random.PRNGKey(0), 500)
        for key in jax.random.split(jax.random.PRNGKey(1), 1500):
            state, info = kernel(key, state)
    """
    parts = kernel_parts(moves, num_warmup)

    def kernel(rng_key, state: LadderState):
        lanes, carry = parts.lanes(rng_key, state)
        return parts.complete(state, jax.vmap(parts.explore)(lanes), carry)

    return kernel


def swap_rates(state):
    """The ladder of a run and the mean swap acceptance probability of each of its gaps over the
    scans counted so far (Rao-Blackwellised), whose complements sum to the communication barrier
    (:func:`~numpyro_extras.exchange.ladder.communication_barrier`, Syed et al. 2022 eq. 12).

    :param state: a :class:`LadderState` of one chain, or its shell's
        :class:`~numpyro_extras.exchange.chains.ExchangeState`.
    :return: ``(betas, accept_rates)``: the ladder ``(N,)`` and the rates ``(N - 1,)``.

    **Example:**

    .. code-block:: python

        kernel = build_kernel(moves, 256)
        step = lambda state, key: kernel(key, state)
        state, _ = jax.lax.scan(step, init(positions, moves, key, 256), keys)  # 640 keys
        betas, rates = swap_rates(state)
        barrier = communication_barrier(rates)[-1]
    """
    statistics = state.statistics
    return state.betas, statistics.accept_sum / jnp.maximum(statistics.num_scans, 1)
