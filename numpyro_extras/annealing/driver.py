"""The annealing driver shared by every AIS flavour: schedules, the weighted scan, the evidence.

Annealed importance sampling (Neal 2001; mAIS paper eq. 7-16) moves ``N`` particles through a
sequence of densities ``f_0, ..., f_K`` and accumulates, per particle, the log weight
``sum_k [log f_k(x_k) - log f_{k-1}(x_k)]``, where ``x_k`` is the particle after the transition
that leaves ``f_{k-1}`` invariant. ``exp(log weight)`` is an unbiased estimate of
``Z_K / Z_0`` (eq. 13). The driver knows nothing about models: it takes the tempered log density
``log f(x, beta)`` and a batched transition, so plain AIS on a NumPyro model, marginalized AIS
(mAIS eq. 24-26) and the Boltzmann-machine kernels (eq. 41-42) all run through it.

One step has BlackJAX's shape: an :class:`AnnealingState` and an :class:`AnnealingInfo`,
:func:`init`, and :func:`build_kernel` returning a pure ``kernel(rng_key, state,
beta_previous, beta) -> (state, info)``; :func:`anneal` scans it over a schedule in compiled
chunks, with a progress bar.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_extras.shell.compilation import quick_jit, split_key
from numpyro_extras.shell.devices import check_devices, gathered, leading_axis_sharding
from numpyro_extras.shell.progress import run_chunks
from numpyro_extras.shell.validation import check_count

__all__ = [
    "MIN_ESS_FRACTION",
    "warn_on_small_ess",
    "AnnealingInfo",
    "AnnealingResult",
    "AnnealingState",
    "build_kernel",
    "init",
    "anneal",
    "compiled_annealing_chunk",
    "inverse_temperature_schedule",
]

SCHEDULES = ("linear", "sigmoid", "geometric")


def inverse_temperature_schedule(schedule, num_temperatures=None, *, sigmoid_width=4.0):
    """The inverse temperatures ``0 = beta_0 < ... < beta_K = 1`` of an annealing run.

    :param schedule: ``"linear"`` (``beta_k = k / K``, the mAIS paper's), ``"sigmoid"`` (Grosse
        et al. 2015: ``sigmoid`` of ``K + 1`` evenly spaced points in
        ``[-sigmoid_width, sigmoid_width]``, rescaled to [0, 1]; denser at both ends),
        ``"geometric"`` (``beta_k = 10^(-4 (1 - k / K))`` for ``k >= 1``, dense near 0), or an
        array of inverse temperatures.
    :param int num_temperatures: ``K``, the number of annealing steps (ignored for an array).
    :param float sigmoid_width: the half-width of the sigmoid schedule's grid.
    :return: NumPy array of shape ``(K + 1,)``.
    :raises TypeError: for a ``K`` that is not an integer (with a named schedule).
    :raises ValueError: for an unknown name, ``K < 1``, or an array that does not rise from 0
        to 1.

    **Example:**

    .. code-block:: python

        inverse_temperature_schedule("linear", 4)   # [0, 0.25, 0.5, 0.75, 1]
    """
    if isinstance(schedule, str):
        if schedule not in SCHEDULES:
            raise ValueError(f"Unknown schedule {schedule!r}; use one of {SCHEDULES} or an array.")
        if num_temperatures is None:
            raise ValueError(f"num_temperatures is needed with schedule={schedule!r}.")
        num_temperatures = check_count("num_temperatures", num_temperatures)
        steps = np.linspace(0.0, 1.0, num_temperatures + 1)
        if schedule == "linear":
            betas = steps
        elif schedule == "sigmoid":
            raw = 1.0 / (1.0 + np.exp(-sigmoid_width * (2.0 * steps - 1.0)))
            betas = (raw - raw[0]) / (raw[-1] - raw[0])
        else:
            betas = np.concatenate([[0.0], 10.0 ** (-4.0 * (1.0 - steps[1:]))])
        betas[0], betas[-1] = 0.0, 1.0
        return betas
    betas = np.asarray(schedule, dtype=np.float64)
    if betas.ndim != 1 or betas.shape[0] < 2:
        raise ValueError(
            f"A schedule array needs at least two inverse temperatures, got shape {betas.shape}."
        )
    if not np.all(np.isfinite(betas)):
        raise ValueError("The schedule contains non-finite inverse temperatures.")
    if betas[0] != 0.0 or betas[-1] != 1.0:
        raise ValueError(
            f"The schedule must start at 0 and end at 1, got {betas[0]!r} ... {betas[-1]!r}."
        )
    if np.any(np.diff(betas) < 0):
        raise ValueError("The schedule's inverse temperatures must not decrease.")
    return betas


class AnnealingResult(NamedTuple):
    """What :func:`anneal` returns.

    :param log_weights: per-particle log weights, shape ``(N,)``; ``-inf`` for a particle whose
        weight increment was not finite (it carries no weight, never a NaN).
    :param positions: the particles after the last step.
    :param kernel_state: the transition's state after the last step (e.g. adapted step sizes).
    :param acceptance: mean acceptance of the transition at each step, shape ``(K,)`` (the last
        entry is ``nan`` unless ``transition_at_last``).
    :param log_weight_trace: per-step cumulative log weights ``(K, N)``, if asked for.
    """

    log_weights: jax.Array
    positions: Any
    kernel_state: Any
    acceptance: jax.Array
    log_weight_trace: jax.Array | None = None


class AnnealingState(NamedTuple):
    """The particles of an annealing run.

    :param positions: pytree of particles with a leading axis ``N``.
    :param log_weights: their cumulative log weights ``(N,)``; ``-inf`` for a particle whose
        weight increment was not finite.
    :param kernel_state: the transition's state (e.g. adapted step sizes), or ``None``.
    """

    positions: Any
    log_weights: jax.Array
    kernel_state: Any = None


class AnnealingInfo(NamedTuple):
    """What one annealing step did.

    :param acceptance: the transition's mean acceptance (``nan`` where the step did not move
        the particles).
    :param log_weight_increments: each particle's ``log f(x, beta) - log f(x, beta_previous)``
        ``(N,)``.
    """

    acceptance: jax.Array
    log_weight_increments: jax.Array


def init(positions, kernel_state=None) -> AnnealingState:
    """The state of ``N`` particles drawn exactly from ``f(., beta_0) / Z_0``, every log weight
    zero.

    :param positions: pytree of particles with a leading axis ``N``.
    :param kernel_state: the transition's initial state.
    :return: :class:`AnnealingState`.

    **Example:**

    .. code-block:: python

        state = init(jax.random.normal(key, (1000, 2)))
    """
    num_particles = jnp.shape(jax.tree.leaves(positions)[0])[0]
    return AnnealingState(
        positions, jnp.zeros((num_particles,), jnp.result_type(float)), kernel_state
    )


def build_kernel(
    log_density_fn: Callable,
    transition_fn: Callable,
    log_weight_increment_fn: Callable | None = None,
    *parameters,
) -> Callable:
    """One step of annealed importance sampling (Neal 2001; mAIS paper eq. 7-13): every
    particle's log weight gains ``log f(x, beta) - log f(x, beta_previous)``, then the
    particles move with a transition that leaves ``f(., beta)`` invariant.

    :param log_density_fn: ``(position, beta, *parameters) -> log f(position, beta)`` for ONE
        particle.
    :param transition_fn: ``(rng_key, positions, beta, kernel_state, *parameters) ->
        (positions, kernel_state, mean_acceptance)`` for ALL particles at once.
    :param log_weight_increment_fn: ``(position, beta_previous, beta, *parameters) ->
        increment`` for one particle, when there is a cheaper form than two calls of
        ``log_density_fn``.
    :param parameters: data the three functions take last (e.g. the base density of the path).
    :return: ``kernel(rng_key, state, beta_previous, beta, move=True) -> (state, info)``, pure
        and traceable (:class:`AnnealingState`, :class:`AnnealingInfo`); ``move`` (a bool,
        possibly traced) says whether the transition runs after the weight update.

    **Example:**

    .. code-block:: python

        kernel = build_kernel(lambda x, b: -0.5 * b * x @ x, transition)
        state = init(x0)
        for key, previous, beta in zip(keys, betas[:-1], betas[1:]):
            state, info = kernel(key, state, previous, beta)
    """
    if log_weight_increment_fn is None:

        def log_weight_increment_fn(position, beta_previous, beta, *parameters):
            return log_density_fn(position, beta, *parameters) - log_density_fn(
                position, beta_previous, *parameters
            )

    def kernel(rng_key, state: AnnealingState, beta_previous, beta, move=True):
        increments = jax.vmap(
            lambda position: log_weight_increment_fn(position, beta_previous, beta, *parameters)
        )(state.positions)
        # A particle whose increment is not finite has (numerically) zero weight from here on.
        log_weights = jnp.where(jnp.isfinite(increments), state.log_weights + increments, -jnp.inf)
        dtype = log_weights.dtype

        def moved(operand):
            positions, kernel_state = operand
            positions, kernel_state, acceptance = transition_fn(
                rng_key, positions, beta, kernel_state, *parameters
            )
            return positions, kernel_state, jnp.reshape(jnp.asarray(acceptance, dtype), ())

        def stayed(operand):
            positions, kernel_state = operand
            return positions, kernel_state, jnp.asarray(jnp.nan, dtype)

        positions, kernel_state, acceptance = jax.lax.cond(
            move, moved, stayed, (state.positions, state.kernel_state)
        )
        return AnnealingState(positions, log_weights, kernel_state), AnnealingInfo(
            acceptance, increments
        )

    return kernel


def anneal(
    rng_key,
    log_density_fn: Callable,
    initial_positions,
    transition_fn: Callable,
    inverse_temperatures,
    kernel_state=None,
    *,
    log_weight_increment_fn: Callable | None = None,
    transition_at_last: bool = False,
    keep_trace: bool = False,
    progress_bar: bool = True,
    num_chunks: int = 20,
    parameters=None,
    devices=None,
) -> AnnealingResult:
    """Run annealed importance sampling over a schedule (mAIS paper eq. 7-16, Neal 2001).

    For ``k = 1..K``: add ``log f(x, beta_k) - log f(x, beta_{k-1})`` to every particle's log
    weight, then (for ``k < K``, or also at ``K`` with ``transition_at_last``) move the
    particles with a transition that leaves ``f(., beta_k)`` invariant. The schedule may run in
    either direction: from 0 to 1 the weights estimate ``Z_1 / Z_0``; from 1 to 0 (the reverse
    run of bidirectional Monte Carlo) they estimate ``Z_0 / Z_1``.

    :param rng_key: PRNG key.
    :param log_density_fn: ``(position, beta) -> log f(position, beta)`` for ONE particle.
    :param initial_positions: pytree of particles with a leading axis ``N``, exact draws from
        ``f(., beta_0) / Z_0``.
    :param transition_fn: ``(rng_key, positions, beta, kernel_state) -> (positions,
        kernel_state, mean_acceptance)`` for ALL particles at once (so that it may adapt, e.g. a
        step size, from all of them).
    :param inverse_temperatures: array ``(K + 1,)``, see :func:`inverse_temperature_schedule`.
    :param kernel_state: the transition's initial state.
    :param log_weight_increment_fn: ``(position, beta_previous, beta) -> increment`` for one
        particle, when there is a cheaper form than two calls of ``log_density_fn``.
    :param bool transition_at_last: also transition after the last weight update.
    :param bool keep_trace: also return the cumulative log weights after every step.
    :param bool progress_bar: show a tqdm bar (the scan runs in ``num_chunks`` compiled pieces).
    :param int num_chunks: pieces of the scan between progress updates.
    :param parameters: a pytree of arrays passed as the last argument to ``log_density_fn``,
        ``log_weight_increment_fn`` and ``transition_fn`` when it is not ``None`` (e.g. the
        base density of the path). It enters the compiled scan as data, so runs whose paths
        differ only in these values share one compilation.
    :param devices: split the particles over these devices
        (:func:`~numpyro_extras.shell.devices.check_devices`: a number or a sequence of
        ``jax.Device``): the positions and the kernel state are placed along their particle
        axis, and the compiled scan runs each device's share there, a transition's sums over
        particles as collectives. ``None``: JAX's default device.
    :return: :class:`AnnealingResult`.

    **Example:**

    .. code-block:: python

        betas = inverse_temperature_schedule("linear", 100)
        result = anneal(key, lambda x, b: -0.5 * b * x @ x, x0, transition, betas)
        evidence_from_log_weights(result.log_weights, log_z0)
    """
    betas = jnp.asarray(inverse_temperatures)
    num_steps = int(betas.shape[0]) - 1
    if num_steps < 1:
        raise ValueError("An annealing schedule needs at least two inverse temperatures.")
    leaves = jax.tree.leaves(initial_positions)
    if not leaves or int(jnp.shape(leaves[0])[0]) < 1:
        raise ValueError("anneal needs at least one particle.")
    dtype = jnp.result_type(float)
    betas = betas.astype(dtype)

    do_transition = np.arange(1, num_steps + 1) < num_steps
    if transition_at_last:
        do_transition[:] = True

    # The scan runs in equal compiled chunks (the last one padded with inactive steps), so the
    # progress bar moves without recompiling per chunk.
    num_chunks = max(1, min(int(num_chunks), num_steps)) if progress_bar else 1
    chunk_length = math.ceil(num_steps / num_chunks)
    padded = chunk_length * num_chunks
    pad = padded - num_steps
    beta_previous = jnp.concatenate([betas[:-1], jnp.full((pad,), betas[-1], dtype)])
    beta_next = jnp.concatenate([betas[1:], jnp.full((pad,), betas[-1], dtype)])
    transitions = jnp.asarray(np.concatenate([do_transition, np.zeros(pad, bool)]))
    active = jnp.asarray(np.arange(padded) < num_steps)
    step_keys = split_key(rng_key, padded)
    inputs = (beta_previous, beta_next, step_keys, transitions, active)

    run_chunk = compiled_annealing_chunk(
        log_density_fn,
        log_weight_increment_fn,
        transition_fn,
        keep_trace,
        jnp.dtype(dtype),
        parameters is not None,
    )
    if devices is not None:
        sharding = leading_axis_sharding(
            check_devices(devices, int(jnp.shape(leaves[0])[0])), "particles"
        )
        initial_positions, kernel_state = jax.device_put(
            (initial_positions, kernel_state), sharding
        )
    carry = init(initial_positions, kernel_state)
    chunks = [
        (
            jax.tree.map(lambda a, start=start: a[start : start + chunk_length], inputs),
            min(chunk_length, num_steps - start),
        )
        for start in range(0, padded, chunk_length)
    ]
    carry, outputs = run_chunks(
        lambda carry, chunk_inputs: run_chunk(carry, chunk_inputs, parameters),
        carry,
        chunks,
        total=num_steps,
        description="annealing",
        progress_bar=progress_bar,
    )
    acceptances, traces = zip(*outputs, strict=True)
    acceptance = jnp.concatenate(acceptances)[:num_steps]
    log_weight_trace = jnp.concatenate(traces)[:num_steps] if keep_trace else None
    # Gathered whole on every process when the particles were split over several processes.
    return AnnealingResult(
        *gathered(
            (carry.log_weights, carry.positions, carry.kernel_state, acceptance, log_weight_trace)
        )
    )


@lru_cache(maxsize=32)
def compiled_annealing_chunk(
    log_density_fn, log_weight_increment_fn, transition_fn, keep_trace, dtype, with_parameters
):
    """The compiled scan over a chunk of annealing steps, built once per set of functions.

    Callers that pass the same functions again (:func:`~numpyro_extras.ais` caches them per model
    and arguments) reuse the compiled scan instead of tracing and compiling it anew; the cache
    holds the 32 latest (``functools.lru_cache``: ``compiled_annealing_chunk.cache_info()``
    shows its hits and misses).

    :param log_density_fn: ``(position, beta, *parameters) -> log density`` on the path.
    :param log_weight_increment_fn: ``(position, beta_previous, beta, *parameters) ->``
        increment of the log weight, or ``None`` for the difference of ``log_density_fn``.
    :param transition_fn: ``(key, positions, beta, kernel_state, *parameters) -> (positions,
        kernel_state, acceptance)``, a move of every particle leaving the path at ``beta``
        invariant.
    :param bool keep_trace: also return every step's log weights.
    :param dtype: the float dtype of the weights.
    :param bool with_parameters: the functions take the path parameters as their last argument.
    :return: ``(state, chunk_inputs, parameters) -> (state, (acceptance, log_weight_trace))``,
        jitted: a scan of :func:`build_kernel`'s kernel over an :class:`AnnealingState`.

    **Example:**

    .. code-block:: python

        before = compiled_annealing_chunk.cache_info().misses
        anneal(key, ...)  # with the same functions as an earlier run: no new compilation
        assert compiled_annealing_chunk.cache_info().misses == before
    """

    def one_step(parameters, state, inputs):
        extra = (parameters,) if with_parameters else ()
        beta_previous, beta, step_key, transition, active = inputs
        kernel = build_kernel(log_density_fn, transition_fn, log_weight_increment_fn, *extra)
        new_state, info = kernel(step_key, state, beta_previous, beta, transition & active)
        # A padded step of the last chunk does not move the particles, nor change their weights
        # (where a particle's density is not finite, even its zero-length increment is NaN).
        log_weights = jnp.where(active, new_state.log_weights, state.log_weights)
        state = new_state._replace(log_weights=log_weights)
        trace = log_weights if keep_trace else None
        return state, (info.acceptance.astype(dtype), trace)

    return quick_jit(
        lambda state, chunk, parameters: jax.lax.scan(
            lambda step_state, inputs: one_step(parameters, step_state, inputs), state, chunk
        ),
        optimize=True,
    )


# Below this fraction of the particles a few weights carry the estimate, and the sample variance
# of those few weights understates the error: a wrong log Z would come with a small error bar.
MIN_ESS_FRACTION = 0.05


def small_ess_problem(evidence, num_particles, bias, advice) -> str | None:
    """What is wrong with an annealed importance sampling estimate that rests on too few
    effective particles, or ``None`` when its final ESS is at least ``MIN_ESS_FRACTION`` of them.

    :param Evidence evidence: the estimate, with its final ``ess``.
    :param int num_particles: the particles it used.
    :param str bias: which way such weights push the estimate.
    :param str advice: what to change.
    :return: the problem, one sentence, or ``None``.

    **Example:**

    .. code-block:: python

        problem = small_ess_problem(evidence, 500, "biased low", "use more temperatures")
    """
    if evidence.ess >= MIN_ESS_FRACTION * num_particles:
        return None
    return (
        f"final ESS {evidence.ess:.1f} of {num_particles} particles "
        f"({100 * evidence.ess / num_particles:.1f}%, below {100 * MIN_ESS_FRACTION:.0f}%): a "
        f"few particles carry almost all the weight, so the log Z estimate ({evidence.log_z:.3f}) "
        f"and its stderr ({evidence.stderr:.3f}) are unreliable ({bias}); {advice}"
    )


def warn_on_small_ess(estimator, evidence, num_particles, bias, advice, stacklevel=3):
    """Warn when an annealed importance sampling estimate rests on too few effective particles
    (:func:`small_ess_problem`), and record the problem in the estimate.

    :param str estimator: how the message starts, naming the estimator (e.g. ``"AIS"``).
    :param Evidence evidence: the estimate, with its final ``ess``.
    :param int num_particles: the particles it used.
    :param str bias: which way such weights push the estimate.
    :param str advice: what to change.
    :param int stacklevel: as for :func:`warnings.warn`, counted from the caller of this
        function.
    :return: ``evidence``, with the problem added to its ``problems`` when it warned.

    **Example:**

    .. code-block:: python

        evidence = warn_on_small_ess("AIS", evidence, 500, "biased low", "use more temperatures")
    """
    problem = small_ess_problem(evidence, num_particles, bias, advice)
    if problem is None:
        return evidence
    warnings.warn(f"{estimator} {problem}.", UserWarning, stacklevel=stacklevel + 1)
    return evidence._replace(problems=(*evidence.problems, problem))
