"""ACS and DMALA moves of the replicas of a model whose latent sites are all discrete.

Replica ``i`` targets ``U_beta(theta) = log p0(theta) + beta l(theta)`` (the prior path of
:mod:`numpyro_extras.exchange.path` on the sites' values), and moves by one step of the
locally balanced proposal of the ACS paper (Pynadath et al. 2024, eq. 5) with its exact
Metropolis-Hastings test (eq. 6), at the ``(alpha, beta)`` of a cyclical schedule (eq. 7-8).

A replica caches ``log p0`` and ``l`` with their differences per coordinate separately
(:class:`DiscreteEvaluation`): the differences of ``U_beta`` are ``Delta p0 + beta Delta l``
(exactly so for exact differences, and for first-order ones since the gradient is linear), so a
swap or a new ``beta`` re-expresses a replica without evaluating the model, and the swap test
(Syed et al. eq. 3) reads ``l`` from the cache.

The schedule is tuned at ``init`` by the ACS tuner (Alg. 2-5) on every rung at its starting
``beta`` (vmapped over the rungs, ``beta`` as data); when the ladder moves during warm-up each
rung reads its schedule at its new ``beta`` by interpolating the tuned ones (log step sizes and
balancing exponents, linearly in ``beta``). After warm-up the ladder, and with it every
schedule, is frozen, so every kept transition leaves its rung's target invariant.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.discrete.proposal import (
    ChainState,
    acs_step,
    decode,
    init_chain,
    local_differences_fn,
)
from numpyro_extras.discrete.schedule import CyclicalSchedule
from numpyro_extras.discrete.tuning import (
    TuningResult,
    TuningSettings,
    fixed_tuning,
    tune_schedule,
)
from numpyro_extras.exchange.chains import RungMoves
from numpyro_extras.exchange.path import TemperedPath
from numpyro_extras.metropolis import running_accept_mean

__all__ = [
    "DiscreteEvaluation",
    "DiscreteRungState",
    "acs_moves",
    "discrete_evaluation_fn",
    "schedule_at",
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
    """``indices -> DiscreteEvaluation``: ``log p0`` and ``l`` with their differences per
    coordinate, each by :func:`~numpyro_extras.discrete.local_differences_fn` (one gradient,
    or exact differences, as ``variables`` say).

    :param TemperedPath path: the prior path on the sites' values.
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :return: the evaluation function of one state.

    **Example:**

    .. code-block:: python

        evaluation = discrete_evaluation_fn(path, variables)({"z": jnp.array([0, 1, 1])})
        log_density, differences = evaluation.tempered(0.5)
    """
    prior_differences = local_differences_fn(
        lambda values: -path.reference_potential_fn(values), variables
    )
    likelihood_differences = local_differences_fn(path.log_likelihood_fn, variables)

    def evaluate(indices) -> DiscreteEvaluation:
        log_prior, prior_change = prior_differences(indices)
        log_likelihood, likelihood_change = likelihood_differences(indices)
        return DiscreteEvaluation(
            indices, -log_prior, prior_change, log_likelihood, likelihood_change
        )

    return evaluate


def acs_moves(
    path: TemperedPath,
    variables: dict,
    *,
    schedule: CyclicalSchedule | None = None,
    settings: TuningSettings | None = None,
    num_tuning_chains=8,
) -> RungMoves:
    """ACS (or, with a one-entry ``schedule`` at balancing 0.5, DMALA) moves of the replicas of
    a model whose latent sites are all discrete, for
    :func:`~numpyro_extras.exchange.chains.replica_exchange`.

    :param TemperedPath path: the prior path on the sites' values
        (:func:`~numpyro_extras.exchange.path.prior_path`).
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable` (how
        each site is encoded and gets its differences; e.g. ``nx.ACS(model)
        .discrete_target(args).variables``).
    :param CyclicalSchedule schedule: a fixed schedule for every rung; ``None``: tuned per rung
        at ``init``.
    :param TuningSettings settings: the tuner's constants.
    :param int num_tuning_chains: copies per rung the tuner averages over.
    :return: :class:`~numpyro_extras.exchange.chains.RungMoves` on index dicts; a scan moves
        each rung by one ACS step, at the position of the cycle given by the scan count.

    **Example:**

    .. code-block:: python

        target = nx.ACS(nx.ising_model).discrete_target((4,))
        moves = acs_moves(prior_path(target.split), target.variables)
        init_fn, step_fn = replica_exchange(moves, target.site_values_fn, num_replicas=8)
    """
    evaluate = discrete_evaluation_fn(path, variables)

    def tempered_evaluate(beta):
        """``indices -> (U_beta, differences, evaluation)``: the evaluation is kept as the
        chain state's cache, so an accepted state brings its parts along."""

        def evaluate_at(indices):
            evaluation = evaluate(indices)
            return (*evaluation.tempered(beta), evaluation)

        return evaluate_at

    def chain_at(replica: DiscreteEvaluation, beta) -> ChainState:
        return ChainState(replica.position, *replica.tempered(beta), replica)

    def draw_indices(rng_key):
        return decode(variables, path.sample_reference_fn(rng_key))

    def tune_rung(rng_key, position, beta):
        """The rung's schedule by the ACS tuner (Alg. 2-5) at its ``beta``, from ``position``
        and prior draws, and the state it ends in."""
        draw_key, tune_key = jax.random.split(rng_key)
        copies = jax.vmap(draw_indices)(jax.random.split(draw_key, num_tuning_chains))
        copies = jax.tree.map(lambda draws, start: draws.at[0].set(start), copies, position)
        evaluate_at = tempered_evaluate(beta)
        chains = jax.vmap(lambda indices: init_chain(evaluate_at, indices))(copies)
        tuning, chains = tune_schedule(tune_key, chains, evaluate_at, variables, settings)
        return tuning, chains.indices

    def init(positions, betas, rng_key, num_warmup):
        if schedule is None:
            tunings, positions = jax.vmap(tune_rung)(
                jax.random.split(rng_key, betas.shape[0]), positions, betas
            )
            # Each rung starts where its first tuning copy (its own start) ended.
            positions = jax.tree.map(lambda leaf: leaf[:, 0], positions)
        else:
            tunings = jax.vmap(lambda _: fixed_tuning(schedule))(betas)
        replicas = jax.vmap(evaluate)(positions)
        zeros = jnp.zeros_like(betas)
        inner = DiscreteRungState(
            tunings.schedule,
            tunings,
            betas,
            zeros,
            zeros,
            zeros,
            zeros,
        )
        return replicas, inner

    def explore(rng_key, replica, inner: DiscreteRungState, beta, iteration, num_warmup):
        # Every rung is at the same position of its cycle (eq. 7-8): scans count the moves.
        k = iteration % inner.schedule.step_sizes.shape[-1]
        alpha, balancing = inner.schedule.step_sizes[k], inner.schedule.balancing[k]
        chain, accept_prob = acs_step(
            rng_key, chain_at(replica, beta), alpha, balancing, tempered_evaluate(beta), variables
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
        return inner._replace(schedule=schedule_at(inner.tuned_beta, inner.tuning.schedule, betas))

    return RungMoves(init, explore, renew, sync)
