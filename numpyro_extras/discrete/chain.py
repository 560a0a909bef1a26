"""One ACS / DMALA chain as pure functions on a NamedTuple state, for the kernel shell.

:func:`acs_chain` assembles the chain of :class:`~numpyro_extras.ACS` from its parts: the
locally balanced proposal and exact MH test (:mod:`~numpyro_extras.discrete.proposal`, the ACS
paper's eqs. 5-6), the cyclical schedule (eqs. 7-8) and its tuning before warm-up
(:mod:`~numpyro_extras.discrete.tuning`, Alg. 2-5), and, with an inner kernel, NumPyro's
functional HMC/NUTS on the continuous sites, Gibbs style.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.gibbs import with_conditioning
from numpyro.infer.hmc import hmc

from numpyro_extras.discrete.proposal import (
    ChainState,
    init,
    local_differences_fn,
    scheduled_steps,
)
from numpyro_extras.discrete.target import DiscreteTarget
from numpyro_extras.discrete.tuning import (
    TuningResult,
    fixed_tuning,
    resolve_settings,
    tune_schedule,
    untuned_schedule,
)
from numpyro_extras.shell.compiled_chain import BuildTag
from numpyro_extras.shell.metropolis import running_accept_mean

__all__ = ["ACSState", "acs_chain", "as_site_dict"]


class ACSState(NamedTuple):
    """State of an ACS / DMALA chain.

    :param z: the sample field: dict of the discrete sites' values as the model samples them
        (ints for Bernoulli and Categorical, one-hot vectors for one-hot sites) and, with an
        inner kernel, the continuous sites' unconstrained values; for a ``potential_fn``, the
        variables' values.
    :param chain: the discrete core state (indices, cached ``U`` and differences).
    :param tuning: the frozen schedule and what the tuner found (``alpha_max``, ``alpha_min``,
        its acceptance at both ends; NaN acceptances for a schedule given by the user).
    :param iteration: transitions so far, warm-up included.
    :param alpha: the step size of the last transition.
    :param beta: its balancing exponent.
    :param accept_prob: its MH acceptance probability.
    :param mean_accept_prob: running mean of ``accept_prob``, restarted when warm-up ends.
    :param inner_state: the inner kernel's HMC state on the flat continuous sites (``None``
        without an inner kernel).
    :param build: the :class:`~numpyro_extras.shell.compiled_chain.BuildTag` of the kernel build.
    :param rng_key: random key.

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.ACS(nx.rbm_model), num_warmup=200, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), nx.random_rbm(jax.random.PRNGKey(1), 10, 20))
        mcmc.last_state.tuning, mcmc.last_state.mean_accept_prob
    """

    z: Any
    chain: ChainState
    tuning: TuningResult
    iteration: jax.Array
    alpha: jax.Array
    beta: jax.Array
    accept_prob: jax.Array
    mean_accept_prob: jax.Array
    inner_state: Any
    build: BuildTag
    rng_key: jax.Array

    @property
    def potential_energy(self):
        """``-log p`` of the model (or the potential) at ``z``, as NumPyro's HMC states carry
        it, so that ``extra_fields=("potential_energy",)`` reads it. With an inner kernel the
        continuous sites moved last, and its state holds the joint potential at the draw."""
        if self.inner_state is not None:
            return self.inner_state.potential_energy
        return -self.chain.log_density


def as_site_dict(values, name="x"):
    """``values`` as a dict of sites: a potential's single variable as ``{name: values}``."""
    return values if isinstance(values, dict) else {name: values}


class _InnerMove(NamedTuple):
    """NumPyro's functional HMC/NUTS on the continuous sites, given the discrete values.

    :param init: its ``init_kernel``.
    :param sample: its ``sample_kernel``.
    :param potential_fn_gen: ``(values, model_args, model_kwargs) -> (x -> potential)``, the
        potential of the continuous sites at the discrete ``values`` (:func:`_inner_potential`).
    :param dict settings: keyword arguments of ``init`` (step size, mass matrix, ...).
    """

    init: Callable
    sample: Callable
    potential_fn_gen: Callable
    settings: dict


class _ChainParts(NamedTuple):
    """What the pure functions of one ACS chain share, fixed when the kernel is built (the
    arguments of :func:`acs_chain`, with the inner move built).

    :param DiscreteTarget target: the model's (or potential's) discrete target.
    :param settings: the tuner's settings.
    :param schedule: a fixed schedule, or ``None`` to tune one at ``init``.
    :param int num_copies: chain copies the tuner averages over.
    :param int num_sweeps: sweeps that move the continuous sites before tuning.
    :param inner: the :class:`_InnerMove`, or ``None``.
    :param int discrete_steps: ACS moves per transition.
    :param int num_warmup: warm-up transitions.
    :param BuildTag tag: the kernel build's tag.
    :param bool model_sites: the sample field holds the model's sites.
    """

    target: DiscreteTarget
    settings: Any
    schedule: Any
    num_copies: int
    num_sweeps: int
    inner: _InnerMove | None
    discrete_steps: int
    num_warmup: int
    tag: BuildTag
    model_sites: bool


def _inner_potential(target: DiscreteTarget, values, model_args, model_kwargs) -> Callable:
    """The potential of the continuous sites at the discrete ``values``, the inner kernel's
    ``potential_fn_gen``.

    :param DiscreteTarget target: the model's discrete target.
    :param dict values: the discrete sites' values, as the model samples them.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :return: ``x -> -log density`` at the flat continuous sites ``x``.
    """
    log_density_fn = target.log_density_for(model_args, model_kwargs)
    return lambda x: -log_density_fn(x, values)


def _inner_move(target: DiscreteTarget, algo, hmc_settings: dict) -> _InnerMove:
    """NumPyro's functional HMC/NUTS on the continuous sites of ``target``.

    :param DiscreteTarget target: the model's discrete target.
    :param str algo: ``"HMC"`` or ``"NUTS"``.
    :param dict hmc_settings: keyword arguments of its ``init``.
    :return: :class:`_InnerMove`.
    """
    potential_fn_gen = partial(_inner_potential, target)
    hmc_init, hmc_sample = hmc(potential_fn_gen=potential_fn_gen, algo=algo)
    return _InnerMove(hmc_init, hmc_sample, potential_fn_gen, hmc_settings)


def _evaluate_at(variables: dict, x, log_density_fn: Callable) -> Callable:
    """``indices -> (U, differences)`` of the discrete variables at the continuous sites ``x``.

    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :param x: the flat continuous sites.
    :param log_density_fn: ``(x, values) -> log density``.
    :return: the evaluation function (:func:`~numpyro_extras.discrete.local_differences_fn`).
    """
    return local_differences_fn(lambda values: log_density_fn(x, values), variables)


def _model_values(target: DiscreteTarget, indices) -> dict:
    """Discrete values for the inner kernel's potential, as the model samples them.

    :param DiscreteTarget target: the model's discrete target.
    :param dict indices: the discrete variables' indices.
    :return: dict of site values.
    """
    return as_site_dict(target.site_values_fn(indices))


def _sample_field(parts: _ChainParts, indices, x):
    """The state's sample field: the model's sites (continuous ones unconstrained) or the
    potential's variables.

    :param _ChainParts parts: the chain's parts.
    :param dict indices: the discrete variables' indices.
    :param x: the flat continuous sites.
    :return: the ``z`` of :class:`ACSState`.
    """
    target = parts.target
    if parts.model_sites:
        return {**target.continuous_unravel_fn(x), **as_site_dict(target.site_values_fn(indices))}
    return target.site_values_fn(indices)


def _discrete_moves(parts: _ChainParts, key, chain, schedule, first_position, evaluate):
    """``discrete_steps`` ACS moves at consecutive positions of the cyclical schedule (eq. 7-8).

    :param _ChainParts parts: the chain's parts.
    :param key: PRNG key, split into one key a move.
    :param ChainState chain: the discrete core state.
    :param CyclicalSchedule schedule: the cycle.
    :param first_position: the schedule position of the first move.
    :param evaluate: ``indices -> (U, differences)``.
    :return: ``(chain, (alpha, beta, accept_prob))``: the step size and balancing exponent of
        the last move, the mean acceptance probability of the moves.
    """
    keys = jax.random.split(key, parts.discrete_steps)
    return scheduled_steps(keys, chain, schedule, first_position, evaluate, parts.target.variables)


def _sweep(
    parts: _ChainParts, keys, chain, inner_state, schedule, first_position, model_args, model_kwargs
):
    """Discrete moves given the continuous sites, then one inner kernel move of the
    continuous sites given the discrete ones.

    :param _ChainParts parts: the chain's parts (with an inner move).
    :param keys: ``(step_key, inner_key)``.
    :param ChainState chain: the discrete core state.
    :param inner_state: the inner kernel's HMC state.
    :param CyclicalSchedule schedule: the cycle.
    :param first_position: the schedule position of the first discrete move.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :return: ``(chain, inner_state, (alpha, beta, accept_prob))``.
    """
    target, inner = parts.target, parts.inner
    step_key, inner_key = keys
    x = inner_state.z
    evaluate = _evaluate_at(target.variables, x, target.log_density_for(model_args, model_kwargs))
    # The continuous sites moved since the cached U was computed.
    chain = init(chain.indices, evaluate)
    chain, moves = _discrete_moves(parts, step_key, chain, schedule, first_position, evaluate)
    inner_args = (_model_values(target, chain.indices), model_args, model_kwargs)
    potential, gradient = jax.value_and_grad(inner.potential_fn_gen(*inner_args))(x)
    inner_state = inner_state._replace(
        potential_energy=potential, z_grad=gradient, rng_key=inner_key
    )
    return chain, inner.sample(inner_state, model_args=inner_args), moves


def _move_continuous_first(parts: _ChainParts, key, x, indices, model_args, model_kwargs):
    """``num_sweeps`` sweeps at the untuned cycle of the tuner's burn-in (Alg. 3), the inner
    kernel adapting over them: the continuous sites (and the discrete ones with them) go from
    the prior draw to where the posterior puts them.

    :param _ChainParts parts: the chain's parts (with an inner move).
    :param key: PRNG key.
    :param x: the flat continuous sites' starting values.
    :param dict indices: the discrete variables' starting indices.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :return: ``(x, indices)`` after the sweeps.
    """
    target, inner, num_sweeps = parts.target, parts.inner, parts.num_sweeps
    naive = untuned_schedule(resolve_settings(parts.settings, target.variables))
    init_key, key = jax.random.split(key)
    inner_state = inner.init(
        x,
        num_sweeps,
        model_args=(_model_values(target, indices), model_args, model_kwargs),
        rng_key=init_key,
        **inner.settings,
    )
    chain = init(
        indices,
        _evaluate_at(target.variables, x, target.log_density_for(model_args, model_kwargs)),
    )

    def one_sweep(carry, inputs):
        keys, sweep_index = inputs
        chain, inner_state = carry
        chain, inner_state, _ = _sweep(
            parts,
            keys,
            chain,
            inner_state,
            naive,
            sweep_index * parts.discrete_steps,
            model_args,
            model_kwargs,
        )
        return (chain, inner_state), None

    (chain, inner_state), _ = jax.lax.scan(
        one_sweep,
        (chain, inner_state),
        (jax.random.split(key, (num_sweeps, 2)), jnp.arange(num_sweeps)),
    )
    return inner_state.z, chain.indices


def _init_one(parts: _ChainParts, rng_key, initial_indices, initial_x, conditioning) -> ACSState:
    """``init`` of one chain: the starting point, the sweeps before tuning (with an inner
    kernel), the tuner on ``num_copies`` copies (or the fixed schedule) and the inner kernel's
    state.

    :param _ChainParts parts: the chain's parts.
    :param rng_key: PRNG key.
    :param dict initial_indices: the discrete variables' starting indices, or ``None`` for a
        prior draw.
    :param initial_x: the flat continuous sites' starting values, or ``None`` for a prior draw.
    :param dict conditioning: the values of a Gibbs block's other sites (empty outside one).
    :return: :class:`ACSState`.
    """
    target, inner = parts.target, parts.inner
    # In a Gibbs block the tuner and the cached U use this chain's conditioning values.
    model_args, model_kwargs = target.model_arguments
    if conditioning:
        model_kwargs = with_conditioning(model_kwargs, conditioning)
    log_density_fn = target.log_density_for(model_args, model_kwargs)
    draw_key, tune_key, inner_key, rng_key = jax.random.split(rng_key, 4)
    x, indices = target.sample_initial_fn(draw_key, parts.num_copies)
    if initial_indices is not None:
        indices = {name: index.at[0].set(initial_indices[name]) for name, index in indices.items()}
    x0 = x[0] if initial_x is None else initial_x
    if parts.num_sweeps:
        sweep_key, tune_key = jax.random.split(tune_key)
        first = jax.tree.map(lambda index: index[0], indices)
        x0, first = _move_continuous_first(parts, sweep_key, x0, first, model_args, model_kwargs)
        # Every copy the tuner averages over starts where the sweeps ended.
        indices = jax.tree.map(
            lambda index, moved: jnp.broadcast_to(moved, index.shape), indices, first
        )
    evaluate = _evaluate_at(target.variables, x0, log_density_fn)
    copies = jax.vmap(lambda one: init(one, evaluate))(indices)
    if parts.schedule is None:
        tuning, copies = tune_schedule(tune_key, copies, evaluate, target.variables, parts.settings)
    else:
        tuning = fixed_tuning(parts.schedule)
    chain = jax.tree.map(lambda leaf: leaf[0], copies)
    inner_state = None
    if inner is not None:
        inner_state = inner.init(
            x0,
            parts.num_warmup,
            model_args=(_model_values(target, chain.indices), model_args, model_kwargs),
            rng_key=inner_key,
            **inner.settings,
        )
    zero = jnp.zeros(())
    return ACSState(
        _sample_field(parts, chain.indices, x0),
        chain,
        tuning,
        jnp.zeros((), jnp.int32),
        tuning.schedule.step_sizes[0],
        tuning.schedule.balancing[0],
        zero,
        zero,
        inner_state,
        parts.tag,
        rng_key,
    )


def _continuous_position(parts: _ChainParts, state: ACSState):
    """The flat continuous sites of ``state``: zeros of the target's dimension without an
    inner kernel.

    :param _ChainParts parts: the chain's parts.
    :param ACSState state: the chain.
    :return: flat array.
    """
    return jnp.zeros(parts.target.dimension) if parts.inner is None else state.inner_state.z


def _step_one(parts: _ChainParts, state: ACSState, model_args, model_kwargs) -> ACSState:
    """One transition: ``discrete_steps`` ACS moves (then, with an inner kernel, its move of
    the continuous sites).

    :param _ChainParts parts: the chain's parts.
    :param ACSState state: the chain before the transition.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :return: :class:`ACSState`.
    """
    target = parts.target
    rng_key, step_key, inner_key = jax.random.split(state.rng_key, 3)
    schedule = state.tuning.schedule
    first_position = state.iteration * parts.discrete_steps
    if parts.inner is None:
        x = _continuous_position(parts, state)
        evaluate = _evaluate_at(
            target.variables, x, target.log_density_for(model_args, model_kwargs)
        )
        inner_state = None
        chain, moves = _discrete_moves(
            parts, step_key, state.chain, schedule, first_position, evaluate
        )
    else:
        chain, inner_state, moves = _sweep(
            parts,
            (step_key, inner_key),
            state.chain,
            state.inner_state,
            schedule,
            first_position,
            model_args,
            model_kwargs,
        )
        x = inner_state.z
    alpha, beta, accept_prob = moves
    iteration = state.iteration + 1
    mean_accept_prob = running_accept_mean(
        state.mean_accept_prob, accept_prob, iteration, parts.num_warmup
    )
    return ACSState(
        _sample_field(parts, chain.indices, x),
        chain,
        state.tuning,
        iteration,
        alpha,
        beta,
        accept_prob,
        mean_accept_prob,
        inner_state,
        state.build,
        rng_key,
    )


def _refresh_one(parts: _ChainParts, state: ACSState, model_args, model_kwargs) -> ACSState:
    """``state`` with the cached ``U`` recomputed for these model arguments (after the
    continuous sites or the conditioning changed).

    :param _ChainParts parts: the chain's parts.
    :param ACSState state: the chain.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :return: :class:`ACSState`.
    """
    target = parts.target
    evaluate = _evaluate_at(
        target.variables,
        _continuous_position(parts, state),
        target.log_density_for(model_args, model_kwargs),
    )
    return state._replace(chain=init(state.chain.indices, evaluate))


def acs_chain(
    target: DiscreteTarget,
    settings,
    *,
    schedule,
    num_copies,
    num_sweeps,
    inner,
    discrete_steps,
    num_warmup,
    tag,
    model_sites,
):
    """The pure functions of one ACS chain on ``target``, for the kernel shell.

    :param DiscreteTarget target: the model's (or potential's) discrete target.
    :param settings: the tuner's :class:`~numpyro_extras.discrete.tuning.TuningSettings`.
    :param schedule: a fixed :class:`~numpyro_extras.discrete.schedule.CyclicalSchedule`, or
        ``None`` to tune one at ``init`` (Alg. 2-5).
    :param int num_copies: chain copies the tuner averages over (1 with a fixed schedule).
    :param int num_sweeps: sweeps at the untuned cycle that move the continuous sites from
        their prior draw before tuning (0 without an inner kernel).
    :param inner: ``(algo, hmc_settings)`` of the inner HMC/NUTS move, or ``None``.
    :param int discrete_steps: ACS moves per transition.
    :param int num_warmup: warm-up transitions (the inner kernel adapts over them).
    :param BuildTag tag: the kernel build's tag, carried by every state.
    :param bool model_sites: the sample field holds the model's sites (else the potential's
        variables).
    :return: ``(init_one, step_one, refresh_one)``: ``init_one(rng_key, initial_indices,
        initial_x, conditioning) -> ACSState``, ``step_one(state, model_args, model_kwargs) ->
        ACSState``, ``refresh_one(state, model_args, model_kwargs) -> ACSState`` (the cached
        ``U`` recomputed after the continuous sites or the conditioning changed).

    **Example:**

    .. code-block:: python

        init_one, step_one, _ = acs_chain(target, settings, schedule=None, num_copies=8,
                                          num_sweeps=0, inner=None, discrete_steps=1,
                                          num_warmup=100, tag=tag, model_sites=True)
    """
    parts = _ChainParts(
        target,
        settings,
        schedule,
        num_copies,
        num_sweeps,
        None if inner is None else _inner_move(target, *inner),
        discrete_steps,
        num_warmup,
        tag,
        model_sites,
    )
    return partial(_init_one, parts), partial(_step_one, parts), partial(_refresh_one, parts)
