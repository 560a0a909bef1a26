"""Annealed importance sampling for any NumPyro model, marginalized AIS and reverse (BDMC) runs.

:func:`ais` turns a model into an annealing path with the shared model plumbing
(:func:`numpyro_extras.potential.split_model`) and runs it with the shared driver
(:func:`numpyro_extras.annealing.driver.anneal`):

- ``base="prior"``: ``log f_beta(x) = log p(x) + beta log p(y | x)`` on the flat unconstrained
  space (Jacobians in the prior part), from exact prior draws, ``log Z_0 = 0``.
- a :class:`~numpyro_extras.GaussianBase`: the geometric path
  ``log f_beta(x) = -(1 - beta) psi(x) + beta log p(x, y)`` (continuous tempering spec 2.9,
  mAIS paper eq. 5), from base draws, ``log Z_0 = 0``.
- ``marginalize=(site, ...)``: those discrete sites are summed out by NumPyro's enumeration with
  the tempering applied inside the sum (the marginal of the tempered joint, mAIS paper eq. 19-21).

Transitions: HMC (BlackJAX) on the continuous sites, exact single-site Gibbs on the discrete
ones, alternating in mixed models; or a user transition.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import blackjax
import jax
import jax.numpy as jnp
import numpy as np

from numpyro_extras.annealing.driver import (
    anneal,
    evidence_from_log_weights,
    inverse_temperature_schedule,
)
from numpyro_extras.evidence import Evidence
from numpyro_extras.potential import SplitModel, arguments_fingerprint, split_model
from numpyro_extras.tempering.base import GaussianBase, validate_base

__all__ = ["HMCAdaptation", "ais", "annealing_path", "gibbs_sweep"]


class HMCAdaptation(NamedTuple):
    """The HMC settings carried from one temperature to the next.

    :param log_step_size: per particle, the log of the leapfrog step size, shape ``(N,)``.
    :param inverse_mass: per particle, a diagonal inverse mass matrix, shape ``(N, D)``.
    """

    log_step_size: jax.Array
    inverse_mass: jax.Array


def annealing_path(split: SplitModel, base="prior"):
    """The tempered log density ``log f(position, beta)`` of :func:`ais` and its increment.

    :param SplitModel split: the model, from :func:`~numpyro_extras.potential.split_model`.
    :param base: ``"prior"`` (``log p(x) + beta log p(y | x)``) or a
        :class:`~numpyro_extras.GaussianBase` (``-(1 - beta) psi(x) + beta log p(x, y)``). With
        summed-out sites ``h`` both are marginals of a tempered joint (mAIS paper eq. 19-21):
        ``log sum_h p(x) p(h | x) p(y | x, h)^beta``, and for the base
        ``-(1 - beta) psi(x) + log sum_h p(x)^beta p(h | x) p(y | x, h)^beta`` (``h`` keeps its
        untempered prior, so ``Z_0 = 1``).
    :return: ``(log_density_fn, log_weight_increment_fn)`` for one particle
        ``position = (x, discrete)``; the increment is ``None`` when it has no cheaper form than
        a difference of two densities (summed-out sites).

    **Example:**

    .. code-block:: python

        log_f, increment = annealing_path(split_model(key, model, (x, y)))
        log_f((x0, {}), 0.5)
    """
    scaled = split.scaled_log_density_fn
    summed_out = bool(split.marginalized_sites)
    if isinstance(base, str):

        def log_density_fn(position, beta):
            x, discrete = position
            return scaled(x, discrete, 1.0, beta)

        def increment_fn(position, beta_previous, beta):
            # mAIS paper eq. 12: log w_k = (beta_k - beta_{k-1}) log p(y | x) on this path.
            return (beta - beta_previous) * split.log_likelihood_fn(*position)

    else:
        base_potential = base.potential_function()

        def log_density_fn(position, beta):
            x, discrete = position
            return -(1.0 - beta) * base_potential(x) + scaled(x, discrete, beta, beta)

        def increment_fn(position, beta_previous, beta):
            x, discrete = position
            return (beta - beta_previous) * (scaled(x, discrete, 1.0, 1.0) + base_potential(x))

    return log_density_fn, (None if summed_out else increment_fn)


def gibbs_sweep(rng_key, position, log_density_fn, supports):
    """One systematic sweep of exact single-site Gibbs over every discrete element.

    Each element of each discrete site in turn is redrawn from its full conditional under the
    current tempered density, computed by evaluating the density at every value of the
    element's support (enumeration). Candidates with a non-finite density get probability zero;
    an element whose candidates are all non-finite keeps its value (a rejected move).

    :param rng_key: PRNG key.
    :param position: ``(x, discrete)`` of ONE particle.
    :param log_density_fn: ``position -> log density`` at the current temperature.
    :param dict supports: site name -> support values ``(K,)``.
    :return: the updated ``(x, discrete)``.

    **Example:**

    .. code-block:: python

        position = gibbs_sweep(key, (x, {"s": s}), lambda p: log_f(p, beta), {"s": jnp.arange(2)})
    """
    x, discrete = position
    discrete = dict(discrete)
    for name, site_key in zip(supports, jax.random.split(rng_key, len(supports)), strict=True):
        values = supports[name]
        shape = jnp.shape(discrete[name])
        size = int(np.prod(shape))

        def update_element(flat, inputs, name=name, values=values, shape=shape):
            index, element_key = inputs

            def log_density_at(value):
                candidate = flat.at[index].set(value).reshape(shape)
                return log_density_fn((x, {**discrete, name: candidate}))

            logits = jax.vmap(log_density_at)(values)
            # NaN or +-inf would poison the draw: such candidates simply get zero probability.
            finite = jnp.isfinite(logits)
            logits = jnp.where(finite, logits, -jnp.inf)
            choice = jax.random.categorical(element_key, logits)
            new_value = jnp.where(jnp.any(finite), values[choice], flat[index])
            return flat.at[index].set(new_value), None

        flat = jnp.reshape(discrete[name], (-1,))
        element_keys = jax.random.split(site_key, size)
        flat, _ = jax.lax.scan(update_element, flat, (jnp.arange(size), element_keys))
        discrete[name] = flat.reshape(shape)
    return x, discrete


def _hmc_step(rng_key, x, discrete, beta, adaptation, log_density_fn, num_leapfrog_steps, settings):
    """One vectorized HMC move of the continuous part of every particle, then adaptation.

    Each particle's next step size and mass come from the OTHER particles only (leave one out):
    a kernel tuned on the particle's own state is not invariant, and over many temperatures
    that biases the weights (log Z came out 7 stderr too high with a shared variance).
    """
    kernel = blackjax.mcmc.hmc.build_kernel()

    def move_one(key, position, discrete_values, log_step_size, inverse_mass):
        def logdensity(flat):
            return log_density_fn((flat, discrete_values), beta)

        state = blackjax.mcmc.hmc.init(position, logdensity)
        step_size = jnp.exp(log_step_size)
        proposal, info = kernel(key, state, logdensity, step_size, inverse_mass, num_leapfrog_steps)
        # A non-finite density or position is a rejected move, never a NaN particle.
        accepted = jnp.isfinite(proposal.logdensity) & jnp.all(jnp.isfinite(proposal.position))
        acceptance = jnp.where(jnp.isfinite(info.acceptance_rate), info.acceptance_rate, 0.0)
        alive = jnp.isfinite(state.logdensity)
        return jnp.where(accepted, proposal.position, position), acceptance, alive

    keys = jax.random.split(rng_key, x.shape[0])
    x, acceptance, alive = jax.vmap(move_one)(
        keys, x, discrete, adaptation.log_step_size, adaptation.inverse_mass
    )
    # Dead particles (zero weight already) say nothing about the step size.
    acceptance = jnp.where(alive, acceptance, 0.0)
    num_alive = jnp.sum(alive)
    mean_acceptance = jnp.sum(acceptance) / jnp.maximum(num_alive, 1)
    log_step_size = adaptation.log_step_size
    if settings["adapt_step_size"]:
        others = num_alive - alive
        others_acceptance = (jnp.sum(acceptance) - acceptance) / jnp.maximum(others, 1)
        # Robbins-Monro on the log step size towards the target acceptance.
        log_step_size = log_step_size + jnp.where(
            others > 0, settings["adaptation_rate"] * (others_acceptance - settings["target"]), 0
        )
    inverse_mass = adaptation.inverse_mass
    if settings["adapt_mass"]:
        inverse_mass = _particle_variance(x, alive, inverse_mass)
    return x, HMCAdaptation(log_step_size, inverse_mass), mean_acceptance


def _particle_variance(x, alive, fallback):
    """Per particle, the per-dimension variance of the OTHER live particles, shape ``(N, D)``."""
    weights = alive.astype(x.dtype)[:, None]
    count = jnp.sum(weights)
    mean = jnp.sum(weights * x, axis=0) / jnp.maximum(count, 1)
    deviation = x - mean
    sum_of_squares = jnp.sum(weights * deviation**2, axis=0)
    others = count - weights
    # Sum of squares about the others' mean: remove the particle and the mean's shift.
    others_sum_of_squares = sum_of_squares - weights * deviation**2 * count / jnp.maximum(others, 1)
    variance = others_sum_of_squares / jnp.maximum(others - 1, 1)
    usable = (others > 1) & jnp.isfinite(variance) & (variance > 0)
    return jnp.where(usable, variance, fallback)


def _default_transition(split, log_density_fn, settings):
    """HMC on the continuous sites, then a Gibbs sweep on the discrete ones (for all particles)."""

    def transition_fn(rng_key, positions, beta, adaptation):
        x, discrete = positions
        hmc_key, gibbs_key = jax.random.split(rng_key)
        acceptance = jnp.asarray(1.0, x.dtype)
        if split.dimension:
            for step_key in jax.random.split(hmc_key, settings["num_mcmc_steps"]):
                x, adaptation, acceptance = _hmc_step(
                    step_key,
                    x,
                    discrete,
                    beta,
                    adaptation,
                    log_density_fn,
                    settings["num_leapfrog_steps"],
                    settings,
                )
        if split.discrete_sites:
            keys = jax.random.split(gibbs_key, x.shape[0])

            def sweep(key, position):
                return gibbs_sweep(key, position, lambda p: log_density_fn(p, beta), split.supports)

            x, discrete = jax.vmap(sweep)(keys, (x, discrete))
        return (x, discrete), adaptation, acceptance

    return transition_fn


def _user_transition(split, log_density_fn, transition):
    """Vectorize a per-particle user transition, rejecting moves to a non-finite density."""
    has_discrete = bool(split.discrete_sites)

    def transition_fn(rng_key, positions, beta, kernel_state):
        def move_one(key, position):
            def logdensity(user_position):
                return log_density_fn(user_position if has_discrete else (user_position, {}), beta)

            user_position = position if has_discrete else position[0]
            proposal = transition(key, user_position, logdensity)
            accepted = jnp.isfinite(logdensity(proposal))
            return jax.tree.map(
                lambda new, old: jnp.where(accepted, new, old), proposal, user_position
            )

        keys = jax.random.split(rng_key, positions[0].shape[0])
        moved = jax.vmap(move_one)(keys, positions)
        return (moved if has_discrete else (moved, positions[1])), kernel_state, jnp.nan

    return transition_fn


def _initial_positions(rng_key, split, base, num_particles, reverse, init_samples):
    if reverse:
        draws = {name: jnp.asarray(value) for name, value in init_samples.items()}
        missing = [n for n in split.continuous_sites + split.discrete_sites if n not in draws]
        if missing:
            raise ValueError(
                f"init_samples lacks the latent sites {missing}; pass posterior draws of every "
                "latent site that is not summed out (as MCMC.get_samples() returns them)."
            )
        needed = split.continuous_sites + split.discrete_sites
        num_draws = int(jnp.shape(draws[needed[0]])[0]) if needed else num_particles
        # Distinct draws when there are enough of them, otherwise draws reused at random.
        indices = jax.random.choice(
            rng_key, num_draws, (num_particles,), replace=num_draws < num_particles
        )
        chosen = {name: draws[name][indices] for name in needed}
        return jax.vmap(split.ravel_fn)(chosen)
    if isinstance(base, str):
        return split.sample_prior_fn(rng_key, num_particles)
    return base.sample(rng_key, (num_particles,)), {}


# Built annealing functions per model, arguments and settings: a repeated call (another seed,
# another particle count) then reuses the driver's compiled scan instead of compiling anew.
_FUNCTION_CACHE: OrderedDict = OrderedDict()
_FUNCTION_CACHE_SIZE = 16


def _annealing_functions(model, model_args, model_kwargs, marginalize, base, transition, settings):
    """``(split, log_density_fn, increment_fn, transition_fn)`` of :func:`ais`, cached."""
    base_fingerprint = base if isinstance(base, str) else arguments_fingerprint((base,), {})
    arguments = arguments_fingerprint(model_args, model_kwargs)
    cache_key = None
    if arguments is not None and base_fingerprint is not None:
        cache_key = (
            model,
            arguments,
            marginalize,
            base_fingerprint,
            transition,
            tuple(sorted(settings.items())),
        )
        if cache_key in _FUNCTION_CACHE:
            _FUNCTION_CACHE.move_to_end(cache_key)
            return _FUNCTION_CACHE[cache_key]
    # The structure key only picks the values of the one trace that reads the model's sites.
    split = split_model(
        jax.random.PRNGKey(0), model, model_args, model_kwargs, marginalize=marginalize
    )
    path_base = base if isinstance(base, str) else validate_base(base, split.dimension)
    log_density_fn, increment_fn = annealing_path(split, path_base)
    if transition is not None:
        transition_fn = _user_transition(split, log_density_fn, transition)
    else:
        transition_fn = _default_transition(split, log_density_fn, settings)
    functions = (split, log_density_fn, increment_fn, transition_fn)
    if cache_key is not None:
        _FUNCTION_CACHE[cache_key] = functions
        if len(_FUNCTION_CACHE) > _FUNCTION_CACHE_SIZE:
            _FUNCTION_CACHE.popitem(last=False)
    return functions


def _check_arguments(num_particles, base, reverse, init_samples, split):
    if int(num_particles) < 1:
        raise ValueError(f"num_particles must be a positive integer, got {num_particles!r}.")
    if reverse and init_samples is None:
        raise ValueError(
            "reverse=True anneals from the posterior to the base: pass init_samples, posterior "
            "draws of the model's latent sites (e.g. mcmc.get_samples())."
        )
    if init_samples is not None and not reverse:
        raise ValueError("init_samples is only used with reverse=True.")
    if isinstance(base, str):
        if base != "prior":
            raise ValueError(f"base must be 'prior' or a GaussianBase, got {base!r}.")
        return base
    if split.discrete_sites:
        raise ValueError(
            "A GaussianBase covers continuous sites only, but the model has discrete latent "
            f"sites {list(split.discrete_sites)}: sum them out with marginalize=, or use "
            "base='prior'."
        )
    return validate_base(base, split.dimension)


def ais(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    num_particles: int,
    num_temperatures: int,
    schedule="sigmoid",
    base: str | GaussianBase = "prior",
    marginalize=(),
    reverse: bool = False,
    init_samples: dict | None = None,
    transition: Callable | None = None,
    step_size: float | None = None,
    num_leapfrog_steps: int = 5,
    num_mcmc_steps: int = 1,
    target_accept: float = 0.75,
    adaptation_rate: float = 1.0,
    adapt_mass: bool = True,
    num_pilot_steps: int = 10,
    progress_bar: bool = True,
) -> Evidence:
    """Estimate ``log Z`` of a NumPyro model by annealed importance sampling.

    ``num_particles`` particles start from exact draws of the base (the prior, or a
    :class:`~numpyro_extras.GaussianBase`), move through the tempered densities of the schedule
    and collect log weights ``sum_k log f_k(x_k) - log f_{k-1}(x_k)`` (mAIS paper eq. 10-16,
    continuous tempering spec 2.9); ``Z_hat = mean exp(log weights)`` is unbiased, so ``log Z``
    is a stochastic lower bound. All particles run vectorized.

    **Transitions.** Continuous sites: BlackJAX HMC with ``num_leapfrog_steps`` steps; unless
    ``step_size`` is given, the step size is adapted from the particles' mean acceptance after
    every temperature (towards ``target_accept``), starting from a pilot of ``num_pilot_steps``
    moves at the first temperature (the moved particles are still exact draws there); with
    ``adapt_mass`` the diagonal inverse mass matrix is the particles' variance.
    Each particle is tuned on the OTHER particles (leave one out), so its kernel never depends
    on its own state (which would bias the weights); fix ``step_size`` and ``adapt_mass=False``
    for exactly independent runs. Discrete sites: exact single-site Gibbs from the enumerated full
    conditionals (Bernoulli, Categorical, under plates or with event dims). Mixed models
    alternate the two. A move to a non-finite density is rejected.

    **Marginalized AIS.** ``marginalize=("h", ...)`` sums those discrete sites out exactly with
    ``numpyro.contrib.funsor`` and anneals the rest; the likelihood is tempered inside the sum,
    ``log f_beta(x) = log sum_h p(x) p(h | x) p(y | x, h)^beta`` (mAIS paper eq. 19-26), the
    marginal of the tempered joint rather than the tempered marginal.

    **Bidirectional Monte Carlo.** ``reverse=True`` starts from ``init_samples`` (posterior draws,
    constrained, by site name as ``MCMC.get_samples()`` gives them), anneals from ``beta = 1`` to
    ``0`` and returns ``log Z_0 - log mean exp(log weights)``, a stochastic UPPER bound on
    ``log Z`` (Grosse et al. 2015), to sandwich the truth with a forward run.

    :param rng_key: PRNG key.
    :param model: a NumPyro model; observed sites (and ``numpyro.factor``) form the likelihood.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param int num_particles: number of annealing runs ``N``.
    :param int num_temperatures: number of annealing steps ``K`` (ignored for an array schedule).
    :param schedule: ``"sigmoid"``, ``"linear"``, ``"geometric"`` or an array of inverse
        temperatures from 0 to 1 (see
        :func:`~numpyro_extras.annealing.driver.inverse_temperature_schedule`).
    :param base: ``"prior"`` or a :class:`~numpyro_extras.GaussianBase` (from
        :func:`~numpyro_extras.fit_base`) for the geometric path from it.
    :param marginalize: names of discrete latent sites to sum out exactly.
    :param bool reverse: anneal from the posterior to the base (needs ``init_samples``).
    :param dict init_samples: posterior draws for ``reverse=True``; ``N`` of them are used
        (drawn with replacement when there are fewer).
    :param transition: a per-particle transition ``(rng_key, position, log_density_fn) ->
        position`` leaving ``exp(log_density_fn)`` invariant, replacing HMC and Gibbs;
        ``position`` is the flat unconstrained vector, or ``(x, discrete_dict)`` when the model
        keeps discrete sites.
    :param float step_size: a fixed HMC step size (no step-size adaptation).
    :param int num_leapfrog_steps: leapfrog steps per HMC move.
    :param int num_mcmc_steps: HMC moves per temperature.
    :param float target_accept: target mean acceptance of the step-size adaptation.
    :param float adaptation_rate: gain of the log step-size update per temperature.
    :param bool adapt_mass: use the particles' variance as the diagonal inverse mass matrix.
    :param int num_pilot_steps: pilot HMC moves at the first temperature.
    :param bool progress_bar: show the driver's progress bar.
    :return: :class:`~numpyro_extras.Evidence` with ``log_z``, ``stderr``, ``log_weights`` and
        ``ess``.
    :raises ValueError: for an unknown, observed or continuous site in ``marginalize``, zero
        particles, a schedule that does not run from 0 to 1, ``reverse=True`` without
        ``init_samples``, or a Gaussian base with discrete latent sites left.

    **Example:**

    .. code-block:: python

        evidence = nx.ais(key, model, model_args=(x, y), num_particles=1000,
                          num_temperatures=500)
        print(f"log Z = {evidence.log_z:.3f} +- {evidence.stderr:.3f} (ESS {evidence.ess:.0f})")
    """
    model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
    betas = inverse_temperature_schedule(schedule, num_temperatures)
    _, init_key, anneal_key = jax.random.split(rng_key, 3)
    settings = dict(
        adapt_step_size=step_size is None,
        adapt_mass=adapt_mass,
        target=target_accept,
        adaptation_rate=adaptation_rate,
        num_leapfrog_steps=num_leapfrog_steps,
        num_mcmc_steps=num_mcmc_steps,
    )
    split, log_density_fn, increment_fn, transition_fn = _annealing_functions(
        model, model_args, model_kwargs, tuple(marginalize), base, transition, settings
    )
    base = _check_arguments(num_particles, base, reverse, init_samples, split)
    num_particles = int(num_particles)
    if reverse:
        betas = betas[::-1]
    positions = _initial_positions(init_key, split, base, num_particles, reverse, init_samples)

    dtype = jnp.result_type(float)
    adaptation = HMCAdaptation(
        jnp.full((num_particles,), jnp.log(0.5 if step_size is None else step_size), dtype),
        jnp.ones((num_particles, split.dimension), dtype),
    )
    if transition is None and split.dimension and num_pilot_steps > 0:
        # The pilot is a run of transitions at the first temperature, as leading steps of the
        # schedule: their weight increments are zero and the moved particles are still exact
        # draws of f(., beta_0), so one compiled scan does both.
        betas = np.concatenate([np.full(num_pilot_steps, betas[0]), betas])
    result = anneal(
        anneal_key,
        log_density_fn,
        positions,
        transition_fn,
        betas,
        adaptation,
        log_weight_increment_fn=increment_fn,
        progress_bar=progress_bar,
    )
    return evidence_from_log_weights(result.log_weights, 0.0, reverse=reverse)
