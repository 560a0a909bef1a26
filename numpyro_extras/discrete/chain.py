"""One ACS / DMALA chain as pure functions on a NamedTuple state, for the kernel shell.

:func:`acs_chain` assembles the chain of :class:`~numpyro_extras.ACS` from its parts: the
locally balanced proposal and exact MH test (:mod:`~numpyro_extras.discrete.proposal`, the ACS
paper's eqs. 5-6), the cyclical schedule (eqs. 7-8) and its tuning before warm-up
(:mod:`~numpyro_extras.discrete.tuning`, Alg. 2-5), and, with an inner kernel, NumPyro's
functional HMC/NUTS on the continuous sites, Gibbs style.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.infer.gibbs import with_conditioning
from numpyro.infer.hmc import hmc

from numpyro_extras.compiled_chain import BuildTag
from numpyro_extras.discrete.proposal import (
    ChainState,
    init_chain,
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
from numpyro_extras.metropolis import running_accept_mean

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
    :param build: the :class:`~numpyro_extras.compiled_chain.BuildTag` of the kernel build.
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
    # One closure per chain, as BlackJAX builds a kernel: the pieces below (the discrete moves,
    # the Gibbs sweep with the inner move, the sweeps before tuning, init and step) share the
    # target, the schedule and the inner move, and split into functions only at that cost.
    variables = target.variables

    def evaluate_at(x, log_density_fn):
        return local_differences_fn(lambda values: log_density_fn(x, values), variables)

    def z_of(indices, x):
        return {**target.continuous_unravel_fn(x), **as_site_dict(target.site_values_fn(indices))}

    def z_for_potential(indices):
        return target.site_values_fn(indices)

    if inner is not None:
        algo, hmc_settings = inner

        def potential_fn_gen(values, model_args, model_kwargs):
            log_density_fn = target.log_density_for(model_args, model_kwargs)
            return lambda x: -log_density_fn(x, values)

        hmc_init, hmc_sample = hmc(potential_fn_gen=potential_fn_gen, algo=algo)

    def model_values(indices):
        """Discrete values for the inner kernel's potential, as the model samples them."""
        return as_site_dict(target.site_values_fn(indices))

    def discrete_moves(key, chain, schedule, first_position, evaluate):
        """``discrete_steps`` ACS moves at consecutive positions of the cyclical schedule
        (eq. 7-8)."""
        keys = jax.random.split(key, discrete_steps)
        return scheduled_steps(keys, chain, schedule, first_position, evaluate, variables)

    def sweep(keys, chain, inner_state, schedule, first_position, model_args, model_kwargs):
        """Discrete moves given the continuous sites, then one inner kernel move of the
        continuous sites given the discrete ones."""
        step_key, inner_key = keys
        x = inner_state.z
        evaluate = evaluate_at(x, target.log_density_for(model_args, model_kwargs))
        # The continuous sites moved since the cached U was computed.
        chain = init_chain(evaluate, chain.indices)
        chain, moves = discrete_moves(step_key, chain, schedule, first_position, evaluate)
        inner_args = (model_values(chain.indices), model_args, model_kwargs)
        potential, gradient = jax.value_and_grad(potential_fn_gen(*inner_args))(x)
        inner_state = inner_state._replace(
            potential_energy=potential, z_grad=gradient, rng_key=inner_key
        )
        return chain, hmc_sample(inner_state, model_args=inner_args), moves

    def move_continuous_first(key, x, indices, model_args, model_kwargs):
        """``num_sweeps`` sweeps at the untuned cycle of the tuner's burn-in (Alg. 3), the
        inner kernel adapting over them: the continuous sites (and the discrete ones with
        them) go from the prior draw to where the posterior puts them."""
        naive = untuned_schedule(resolve_settings(settings, variables))
        init_key, key = jax.random.split(key)
        inner_state = hmc_init(
            x,
            num_sweeps,
            model_args=(model_values(indices), model_args, model_kwargs),
            rng_key=init_key,
            **hmc_settings,
        )
        chain = init_chain(
            evaluate_at(x, target.log_density_for(model_args, model_kwargs)), indices
        )

        def one_sweep(carry, inputs):
            keys, sweep_index = inputs
            chain, inner_state = carry
            chain, inner_state, _ = sweep(
                keys,
                chain,
                inner_state,
                naive,
                sweep_index * discrete_steps,
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

    def init_one(rng_key, initial_indices, initial_x, conditioning):
        # In a Gibbs block the tuner and the cached U use this chain's conditioning values.
        model_args, model_kwargs = target.model_arguments
        if conditioning:
            model_kwargs = with_conditioning(model_kwargs, conditioning)
        log_density_fn = target.log_density_for(model_args, model_kwargs)
        draw_key, tune_key, inner_key, rng_key = jax.random.split(rng_key, 4)
        x, indices = target.sample_initial_fn(draw_key, num_copies)
        if initial_indices is not None:
            indices = {
                name: index.at[0].set(initial_indices[name]) for name, index in indices.items()
            }
        x0 = x[0] if initial_x is None else initial_x
        if num_sweeps:
            sweep_key, tune_key = jax.random.split(tune_key)
            first = jax.tree.map(lambda index: index[0], indices)
            x0, first = move_continuous_first(sweep_key, x0, first, model_args, model_kwargs)
            # Every copy the tuner averages over starts where the sweeps ended.
            indices = jax.tree.map(
                lambda index, moved: jnp.broadcast_to(moved, index.shape), indices, first
            )
        evaluate = evaluate_at(x0, log_density_fn)
        copies = jax.vmap(partial(init_chain, evaluate))(indices)
        if schedule is None:
            tuning, copies = tune_schedule(tune_key, copies, evaluate, variables, settings)
        else:
            tuning = fixed_tuning(schedule)
        chain = jax.tree.map(lambda leaf: leaf[0], copies)
        inner_state = None
        if inner is not None:
            inner_state = hmc_init(
                x0,
                num_warmup,
                model_args=(model_values(chain.indices), model_args, model_kwargs),
                rng_key=inner_key,
                **hmc_settings,
            )
        zero = jnp.zeros(())
        return ACSState(
            z_of(chain.indices, x0) if model_sites else z_for_potential(chain.indices),
            chain,
            tuning,
            jnp.zeros((), jnp.int32),
            tuning.schedule.step_sizes[0],
            tuning.schedule.balancing[0],
            zero,
            zero,
            inner_state,
            tag,
            rng_key,
        )

    def continuous_position(state):
        return jnp.zeros(target.dimension) if inner is None else state.inner_state.z

    def step_one(state: ACSState, model_args, model_kwargs):
        rng_key, step_key, inner_key = jax.random.split(state.rng_key, 3)
        schedule = state.tuning.schedule
        first_position = state.iteration * discrete_steps
        if inner is None:
            x = continuous_position(state)
            evaluate = evaluate_at(x, target.log_density_for(model_args, model_kwargs))
            inner_state = None
            chain, moves = discrete_moves(step_key, state.chain, schedule, first_position, evaluate)
        else:
            chain, inner_state, moves = sweep(
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
            state.mean_accept_prob, accept_prob, iteration, num_warmup
        )
        z = z_of(chain.indices, x) if model_sites else z_for_potential(chain.indices)
        return ACSState(
            z,
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

    def refresh_one(state: ACSState, model_args, model_kwargs):
        evaluate = evaluate_at(
            continuous_position(state), target.log_density_for(model_args, model_kwargs)
        )
        return state._replace(chain=init_chain(evaluate, state.chain.indices))

    return init_one, step_one, refresh_one
