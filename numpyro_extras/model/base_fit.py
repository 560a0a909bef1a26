"""The numerics of fitting a base density (:mod:`numpyro_extras.model.bases`) to a model's flat
potential: Gaussian variational fits (the objective of NumPyro's autoguides under
``Trace_ELBO``), their polish, the test of two fits for one mode, moment matching, prior draws
and dispersed starts, and the local optima of the potential.

None of them runs a sampler: :func:`~numpyro_extras.fit_base` (continuous tempering) drives
them through its refitting rounds, and the other families use them directly (the batched Gaussian
fits of :func:`~numpyro_extras.batched_ais`, the mode search of bridge sampling, the host-side
draws of several samplers, the check of a kernel's ``fit_base_kwargs``).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.linalg
from jax.scipy.stats import norm
from scipy.special import logsumexp

from numpyro_extras.model.bases import MixtureBase, gaussian_log_normalizers
from numpyro_extras.model.potential import FlatModel
from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.progress import run_chunks
from numpyro_extras.shell.validation import check_count, check_real, is_flag

__all__ = [
    "LocalOptima",
    "check_fit_base_settings",
    "defensive_component",
    "drop_duplicates",
    "elbo_moment_match",
    "fit_gaussian",
    "gaussian_log_densities",
    "jittered_cholesky",
    "local_optima",
    "moment_match",
    "numpy_rng",
    "polish_flagged",
    "posterior_modes",
    "prior_and_uniform_starts",
    "same_basin",
    "sample_prior_positions",
    "starts_from_weighted_draws",
    "uncovered_optima",
    "variational_fitter",
    "vectorized_potential",
]


class _LocalFit(NamedTuple):
    loc: np.ndarray
    covariance: np.ndarray
    elbo: float


def numpy_rng(rng_key) -> np.random.Generator:
    """A NumPy generator seeded by a JAX key, for the host-side draws of a fit: one eager JAX
    draw compiles a program per shape, which costs more than the fit's small draws themselves.

    :param rng_key: a JAX PRNG key.
    :return: :class:`numpy.random.Generator`.

    **Example:**

    .. code-block:: python

        numpy_rng(jax.random.PRNGKey(0)).standard_normal(3)
    """
    return np.random.default_rng(np.asarray(jax.random.key_data(rng_key)).ravel().tolist())


def prior_and_uniform_starts(rng, num_fits, dimension, radius, prior_positions):
    """Starting points of fits on the flat unconstrained space: half prior draws (where there are
    any), half uniform in ``[-radius, radius]``.

    :param rng: the NumPy generator of the uniform draws (:func:`numpy_rng`).
    :param int num_fits: how many starts.
    :param int dimension: the flat dimension.
    :param float radius: the half-width of the uniform draws.
    :param prior_positions: prior draws on the flat space, ``(M, D)``
        (:func:`sample_prior_positions`); the odd-numbered starts take the first of them.
    :return: NumPy array ``(num_fits, D)``.
    """
    starts = rng.uniform(-radius, radius, (num_fits, dimension))
    num_prior_starts = min(num_fits // 2, len(prior_positions))
    starts[1::2][:num_prior_starts] = prior_positions[:num_prior_starts]
    return starts


def _scale_tril(raw_scale, unit_lower):
    """A Cholesky factor ``diag(exp(raw_scale)) @ (I + strictly lower part)`` (the
    parametrisation of NumPyro's AutoMultivariateNormal, with ``exp`` for its ``softplus``);
    ``unit_lower`` holds the strictly lower entries row by row, empty for a diagonal factor.

    Adam moves ``raw_scale`` by about its step size per step. Under ``softplus`` that grows a
    scale linearly, to about 30 in 2000 steps of 0.03, short of a posterior as wide as a vague
    prior; under ``exp`` the log scale moves, as under ``softplus`` below a scale of 0.1."""
    dimension = raw_scale.shape[-1]
    scale = jnp.exp(raw_scale)
    if unit_lower.shape[-1] == 0:
        return jnp.diag(scale)
    rows, columns = np.tril_indices(dimension, -1)
    unit = jnp.eye(dimension, dtype=raw_scale.dtype).at[rows, columns].set(unit_lower)
    return scale[:, None] * unit


# The fixed-point steps that finish a fit Adam left unsettled (see ``_polish`` below): their
# number, the draws their expectations average over, the draws that judge them, and the largest
# dimension where a Hessian per draw is cheap.
POLISH_STEPS = 3
POLISH_DRAWS = 32
POLISH_CHECK_DRAWS = 256
MAX_POLISH_DIMENSION = 100
# A fit is unsettled where phi's curvature at its mean and its own precision differ more than
# UNSETTLED_RATIO-fold along a coordinate where phi is quadratic (its curvature the same within
# QUADRATIC_TOLERANCE a posterior standard deviation away): a posterior much narrower (or wider)
# than Adam's steps could resolve, on which the fixed-point steps are exact.
UNSETTLED_RATIO = 100.0
QUADRATIC_TOLERANCE = 1.3


def variational_fitter(flat_model, full_rank, settings):
    """``fit(rng_key, starts, steps) -> list[_LocalFit]``: Gaussian VI fits side by side from the
    flat points ``starts``.

    Each fit minimises, with Adam, the negative ELBO ``E_q[phi(z) + log q(z)]`` of a Gaussian ``q``
    on the flat unconstrained space, estimated with ``num_particles`` reparametrised draws per
    step: the objective of NumPyro's AutoMultivariateNormal (``full_rank``) or
    AutoDiagonalNormal under Trace_ELBO, with their parametrisation (``exp`` for ``softplus``,
    :func:`_scale_tril`) and initial scale 0.1, but
    on the potential already built, so that the model is not traced again for a guide. All fits
    run in one compiled, vmapped loop, compiled once per fitter (the refitting rounds call
    ``fit`` again with as many starts), ``steps`` steps (default ``num_steps``).

    :param FlatModel flat_model: the model's flat potential.
    :param bool full_rank: a full-rank Gaussian (``True``) or a diagonal one.
    :param dict settings: ``num_steps``, ``learning_rate``, ``num_particles``, ``elbo_particles``
        (the draws of a precise ELBO per fit; 0 ranks the fits by their last losses) and
        ``progress_bar``, as for :func:`~numpyro_extras.fit_base`.
    :return: ``fit(rng_key, starts, steps=num_steps)``, returning the fits whose ELBO, moments
        and last losses stayed finite, each with its ``loc``, ``covariance`` and ``elbo``.
    """
    potential_fn = flat_model.potential_fn
    dimension = flat_model.dimension
    dtype = flat_model.initial_position.dtype
    num_lower = dimension * (dimension - 1) // 2 if full_rank else 0
    optimizer = optax.scale_by_adam()
    negative_elbo = functools.partial(_negative_elbo, potential_fn, dimension, dtype)
    one_step = functools.partial(
        _adam_step, negative_elbo, optimizer, settings["learning_rate"], settings["num_particles"]
    )
    start_state = functools.partial(_start_state, optimizer, dimension, num_lower, dtype)

    num_steps = settings["num_steps"]
    # The steps run in compiled chunks so that a progress bar can report between them.
    chunk_length = max(1, num_steps // 20)

    @quick_jit(optimize=True)
    def run_chunk(states, progress):
        # progress: each step's share of the fit's steps done, the same for every fit.
        return jax.lax.scan(jax.vmap(one_step, (0, None)), states, progress)

    # One fit per program: all fits in one vmapped program (32 fits of a 92-coordinate
    # regression) left the result waiting forever in XLA's CPU runtime, every worker idle.
    polish_one = quick_jit(functools.partial(_polish, potential_fn, full_rank, dimension, dtype))

    @quick_jit
    def moments_and_elbos(params, seed):
        rng_keys = jax.random.split(jax.random.key(seed, impl="unsafe_rbg"), len(params[0]))

        def moments(fit_params, rng_key):
            scale_tril = _scale_tril(*fit_params[1:])
            # A precise ELBO only where it is used (log zeta = ELBO enters the estimator
            # directly); otherwise the fits are ranked by their last losses.
            elbo = (
                -negative_elbo(fit_params, rng_key, settings["elbo_particles"])
                if settings["elbo_particles"]
                else jnp.zeros((), dtype)
            )
            unsettled = _unsettled(potential_fn, dimension, dtype, fit_params)
            return fit_params[0], scale_tril @ scale_tril.T, elbo, unsettled

        return jax.vmap(moments)(params, rng_keys)

    @quick_jit
    def start_states(starts, seed):
        # The draws of the fits' ELBO estimates come from XLA's bit generator: a threefry draw
        # in the vmapped, scanned step compiles into a program three times as large, and the
        # fits need no more of their noise than independence between steps.
        fit_keys = jax.random.split(jax.random.key(seed, impl="unsafe_rbg"), len(starts))
        return jax.vmap(start_state)(starts, fit_keys)

    def fit(rng_key, starts, steps=num_steps) -> list[_LocalFit]:
        rng = numpy_rng(rng_key)
        num_fits = len(starts)
        num_chunks = max(1, steps // chunk_length)
        states = start_states(jnp.asarray(starts, dtype), rng.integers(2**31 - 1))
        progress = np.arange(num_chunks * chunk_length).reshape(num_chunks, chunk_length)
        progress = (progress / (num_chunks * chunk_length)).astype(dtype)
        states, all_losses = run_chunks(
            run_chunk,
            states,
            [(chunk_progress, chunk_length) for chunk_progress in progress],
            total=num_chunks * chunk_length,
            description=f"fit_base: {num_fits} Gaussian VI fit{'s' if num_fits > 1 else ''}",
            progress_bar=settings["progress_bar"],
            postfix=lambda losses: {"loss": f"{np.min(np.asarray(losses[-1])):.3g}"},
        )
        final_losses = np.concatenate([np.asarray(losses) for losses in all_losses])[-10:]
        final_losses = final_losses.astype(np.float64)
        params = states[0]
        seed = rng.integers(2**31 - 1)
        means, covariances, precise_elbos, to_polish = (
            np.asarray(value) for value in moments_and_elbos(params, seed)
        )
        elbos = precise_elbos if settings["elbo_particles"] else -final_losses.mean(0)
        if np.any(to_polish) and dimension <= MAX_POLISH_DIMENSION:
            means, covariances, elbos = _polished_moments(
                polish_one,
                moments_and_elbos,
                seed,
                params,
                to_polish,
                (means, covariances, elbos),
                settings["elbo_particles"],
            )
        return _finite_fits(means, covariances, elbos, final_losses)

    return fit


def fit_gaussian(
    potential_fn, start, rng_key, *, num_steps=2000, learning_rate=0.03, num_particles=4
):
    """One full-rank Gaussian VI fit of a flat potential, in pure JAX: the fit of
    :func:`~numpyro_extras.fit_base`'s first stage (the objective of NumPyro's
    AutoMultivariateNormal, Adam with a cosine-decayed step size, initial scale 0.1) without its
    checks, polish or progress bar, so that it can be vmapped, e.g. over the data sets of
    :func:`~numpyro_extras.batched_ais`.

    :param potential_fn: the flat potential ``phi(z)``, minus the log joint density.
    :param start: the fit's starting mean, shape ``(D,)``.
    :param rng_key: the key of the ELBO's draws.
    :param int num_steps: Adam steps.
    :param float learning_rate: the first steps' size.
    :param int num_particles: the ELBO's draws per step.
    :return: ``(loc, scale_tril, loss)``: the Gaussian's mean and lower Cholesky factor, and
        the mean negative ELBO of the last tenth of the steps.

    **Example:**

    .. code-block:: python

        loc, scale_tril, loss = fit_gaussian(lambda z: 0.5 * z @ z, jnp.ones(2), key)
    """
    dimension = jnp.shape(start)[-1]
    dtype = jnp.result_type(start)
    optimizer = optax.scale_by_adam()
    negative_elbo = functools.partial(_negative_elbo, potential_fn, dimension, dtype)
    one_step = functools.partial(_adam_step, negative_elbo, optimizer, learning_rate, num_particles)
    state = _start_state(
        optimizer, dimension, dimension * (dimension - 1) // 2, dtype, start, rng_key
    )
    progress = jnp.arange(num_steps, dtype=dtype) / num_steps
    (params, _, _), losses = jax.lax.scan(one_step, state, progress)
    return params[0], _scale_tril(*params[1:]), jnp.mean(losses[-max(1, num_steps // 10) :])


def _start_state(optimizer, dimension, num_lower, dtype, loc, rng_key):
    """A fit's first state ``(params, optimizer_state, rng_key)``: at ``loc``, with the
    autoguides' initial scale 0.1 and no correlation.

    :param optimizer: ``optax.scale_by_adam()``.
    :param int dimension: the fit's dimension.
    :param int num_lower: the entries of its strictly lower factor (0 for a diagonal fit).
    :param dtype: the parameters' dtype.
    :param loc: the start.
    :param rng_key: the fit's key.
    :return: the state.
    """
    # exp(raw) = 0.1, the autoguides' init_scale.
    initial_raw_scale = math.log(0.1)
    params = (
        loc,
        jnp.full((dimension,), initial_raw_scale, dtype),
        jnp.zeros((num_lower,), dtype),
    )
    return params, optimizer.init(params), rng_key


def _negative_elbo(potential_fn, dimension, dtype, params, rng_key, num_particles):
    """The negative ELBO ``E_q[phi(z) + log q(z)]`` of one Gaussian fit, estimated with
    ``num_particles`` reparametrised draws.

    :param potential_fn: the flat potential ``phi``.
    :param int dimension: its dimension.
    :param dtype: the draws' dtype.
    :param params: the fit's ``(loc, raw_scale, unit_lower)`` (:func:`_scale_tril`).
    :param rng_key: the draws' key.
    :param int num_particles: the draws.
    :return: the estimate.
    """
    loc, raw_scale, unit_lower = params
    scale_tril = _scale_tril(raw_scale, unit_lower)
    noise = jax.random.normal(rng_key, (num_particles, dimension), dtype)
    potentials = jax.vmap(potential_fn)(loc + noise @ scale_tril.T)
    # log q at each draw, as Trace_ELBO scores the guide's samples: when q is close to the
    # target, phi + log q varies far less between draws than phi alone. The draw is
    # loc + L noise, so log q = log N(noise; 0, I) - log det L.
    log_q = jnp.sum(norm.logpdf(noise), axis=-1) - jnp.sum(jnp.log(jnp.diagonal(scale_tril)))
    return jnp.mean(potentials + log_q)


def _adam_step(negative_elbo, optimizer, learning_rate, num_particles, state, progress):
    """One Adam step of one fit, its step size cosine-decayed with the fit's ``progress``.

    :param negative_elbo: ``(params, rng_key, num_particles) -> loss``.
    :param optimizer: ``optax.scale_by_adam()``.
    :param float learning_rate: the first steps' size.
    :param int num_particles: the loss's draws per step.
    :param state: ``(params, optimizer_state, rng_key)``.
    :param progress: the share of the fit's steps done.
    :return: ``(state, loss)``.
    """
    params, optimizer_state, rng_key = state
    rng_key, step_key = jax.random.split(rng_key)
    loss, gradients = jax.value_and_grad(negative_elbo)(params, step_key, num_particles)
    directions, optimizer_state = optimizer.update(gradients, optimizer_state)
    # A step size cosine-decayed to a hundredth over the fit's steps: large first steps
    # cross a correlated posterior in a few hundred steps, small last ones settle the fit
    # where a constant step size leaves Adam's iterate wandering about the optimum.
    decay = 0.01 + 0.495 * (1.0 + jnp.cos(jnp.pi * progress))
    params = jax.tree.map(
        lambda value, direction: value - learning_rate * decay * direction, params, directions
    )
    return (params, optimizer_state, rng_key), loss


def _polish(potential_fn, full_rank, dimension, dtype, params):
    """Fixed-point steps of the Gaussian ELBO's stationarity conditions,
    ``E_q[grad phi] = 0`` and ``Sigma^-1 = E_q[hess phi]`` (diagonal of it for a diagonal
    ``q``), with the expectations over fixed draws; each step is kept only where it raises
    the ELBO on other fixed draws. Adam moves the mean by about its step size whatever the
    posterior's width, so a posterior much narrower than the last steps is left unresolved;
    these steps are exact for a Gaussian posterior and scale-free.

    :param potential_fn: the flat potential ``phi``.
    :param bool full_rank: whether the fit is a full-rank Gaussian.
    :param int dimension: the potential's dimension.
    :param dtype: the draws' dtype.
    :param params: one fit's ``(loc, raw_scale, unit_lower)``.
    :return: ``(polished_params, check_elbo, improved)``.
    """
    noise = jax.random.normal(jax.random.PRNGKey(0), (POLISH_DRAWS, dimension), dtype)
    # Judged on draws of their own, so that a step fitted to the first draws' noise is not
    # kept for it.
    check_noise = jax.random.normal(jax.random.PRNGKey(1), (POLISH_CHECK_DRAWS, dimension), dtype)
    hessian_fn = jax.vmap(jax.hessian(potential_fn))
    gaussian_entropy_constant = 0.5 * dimension * (1.0 + math.log(2.0 * math.pi))
    gradient_fn = jax.vmap(jax.grad(potential_fn))

    def elbo_on_draws(loc, scale_tril):
        potentials = jax.vmap(potential_fn)(loc + check_noise @ scale_tril.T)
        entropy = jnp.sum(jnp.log(jnp.diagonal(scale_tril))) + gaussian_entropy_constant
        return entropy - jnp.mean(potentials)

    def step(fit_params, _):
        loc, raw_scale, unit_lower = fit_params
        scale_tril = _scale_tril(raw_scale, unit_lower)
        draws = loc + noise @ scale_tril.T
        mean_hessian = jnp.mean(hessian_fn(draws), axis=0)
        mean_hessian = 0.5 * (mean_hessian + mean_hessian.T)
        new_loc = loc - jnp.linalg.solve(mean_hessian, jnp.mean(gradient_fn(draws), axis=0))
        if full_rank:
            new_tril = jnp.linalg.cholesky(jnp.linalg.inv(mean_hessian))
            new_raw_scale = jnp.log(jnp.diagonal(new_tril))
            rows, columns = np.tril_indices(dimension, -1)
            new_unit_lower = (new_tril / jnp.diagonal(new_tril)[:, None])[rows, columns]
        else:
            new_raw_scale = -0.5 * jnp.log(jnp.diagonal(mean_hessian))
            new_unit_lower = unit_lower
        candidate = (new_loc, new_raw_scale, new_unit_lower)
        better = elbo_on_draws(new_loc, _scale_tril(new_raw_scale, new_unit_lower))
        better = better > elbo_on_draws(loc, scale_tril)
        keep = better & jnp.all(jnp.array([jnp.all(jnp.isfinite(v)) for v in candidate]))
        return jax.tree.map(lambda a, b: jnp.where(keep, a, b), candidate, fit_params), None

    polished = jax.lax.scan(step, params, None, length=POLISH_STEPS)[0]
    check_elbo = elbo_on_draws(polished[0], _scale_tril(*polished[1:]))
    return polished, check_elbo, check_elbo > elbo_on_draws(params[0], _scale_tril(*params[1:]))


def _unsettled(potential_fn, dimension, dtype, fit_params):
    """Whether Adam left the fit short of a posterior that is Gaussian on its own scale:
    along some coordinate, phi's curvature at the fit's mean differs from the fit's
    conditional precision more than ``UNSETTLED_RATIO``-fold, and is the same (within
    ``QUADRATIC_TOLERANCE``) a posterior standard deviation away, so that the fixed-point
    steps of :func:`_polish` apply.

    :param potential_fn: the flat potential ``phi``.
    :param int dimension: its dimension.
    :param dtype: the fit's dtype.
    :param fit_params: one fit's ``(loc, raw_scale, unit_lower)``.
    :return: a boolean scalar.
    """
    loc = fit_params[0]
    scale_tril = _scale_tril(*fit_params[1:])
    identity = jnp.eye(dimension, dtype=dtype)
    conditional_precision = jnp.diagonal(jax.scipy.linalg.cho_solve((scale_tril, True), identity))
    centre = potential_fn(loc)

    def curvature(steps):
        offsets = jnp.diag(steps)
        up = jax.vmap(potential_fn)(loc + offsets)
        down = jax.vmap(potential_fn)(loc - offsets)
        return (up + down - 2.0 * centre) / steps**2

    near = curvature(0.1 / jnp.sqrt(conditional_precision))
    positive = near > 0
    far = curvature(1.0 / jnp.sqrt(jnp.where(positive, near, conditional_precision)))
    mismatch = jnp.abs(jnp.log(jnp.where(positive, near, 1.0) / conditional_precision))
    quadratic = jnp.abs(jnp.log(jnp.where(positive & (far > 0), far / near, 0.0))) < jnp.log(
        QUADRATIC_TOLERANCE
    )
    return jnp.any(positive & (far > 0) & quadratic & (mismatch > jnp.log(UNSETTLED_RATIO)))


def _polished_moments(polish_one, moments_and_elbos, seed, params, flags, moments, elbo_particles):
    """The fits' moments and ELBOs with the flagged fits polished (:func:`_polish`) where that
    raised their ELBO on its check draws.

    :param polish_one: the compiled polish of one fit.
    :param moments_and_elbos: ``(params, seed) -> (means, covariances, elbos, unsettled)``.
    :param seed: the seed the unpolished fits' ELBOs were estimated with.
    :param params: the fits' parameters.
    :param flags: the fits to polish.
    :param moments: the unpolished fits' ``(means, covariances, elbos)``.
    :param int elbo_particles: the draws of a precise ELBO (0: the fits are ranked by their
        last losses).
    :return: ``(means, covariances, elbos)``.
    """
    means, covariances, elbos = moments
    polished, check_elbos, improved = polish_flagged(polish_one, params, flags)
    polished_moments = moments_and_elbos(polished, seed)
    keep = flags & np.asarray(improved)
    means, covariances = (
        np.where(keep.reshape((-1,) + (1,) * (np.ndim(old) - 1)), new, old)
        for new, old in zip(polished_moments[:2], (means, covariances), strict=True)
    )
    # A polished fit is ranked by its ELBO on the check draws where no precise ELBO
    # is computed: its last losses were the unpolished fit's.
    new_elbos = polished_moments[2] if elbo_particles else check_elbos
    return means, covariances, np.where(keep, new_elbos, elbos)


def _finite_fits(means, covariances, elbos, final_losses):
    """The fits whose ELBO, moments and last losses are all finite, as :class:`_LocalFit`.

    :param means: the fits' means ``(fits, D)``, with their ``covariances`` and ``elbos``.
    :param final_losses: their last losses ``(steps, fits)``.
    :return: ``list[_LocalFit]``.
    """
    means, covariances, elbos = (
        np.asarray(value, dtype=np.float64) for value in (means, covariances, elbos)
    )
    fits = []
    for index in range(len(elbos)):
        values = (elbos[index], means[index], covariances[index], final_losses[:, index])
        if all(np.all(np.isfinite(value)) for value in values):
            fits.append(_LocalFit(means[index], covariances[index], float(elbos[index])))
    return fits


def polish_flagged(polish_one, params, flags):
    """``polish_one`` applied to the fits flagged in ``flags``, one after another (a polishing
    step costs a Hessian per draw), the other fits left as they were.

    :param polish_one: ``fit_params -> (polished_params, check_elbo, improved)`` for one fit.
    :param params: the fits' parameters, a tuple of arrays with the fits along the first axis.
    :param flags: ``(num_fits,)`` booleans, the fits to polish.
    :return: ``(params, check_elbos, improved)``: the parameters with the flagged fits' replaced,
        each fit's check ELBO (``-inf`` where not polished) and whether polishing improved it.

    **Example:**

    .. code-block:: python

        params = (np.zeros((3, 2)),)
        polished, _, improved = polish_flagged(
            lambda fit: ((fit[0] + 1.0,), 0.0, True), params, np.array([True, False, True])
        )
        polished[0][:, 0]  # [1, 0, 1]
    """
    polished = [np.array(leaf) for leaf in params]
    check_elbos = np.full(len(flags), -np.inf)
    improved = np.zeros(len(flags), bool)
    for index in np.flatnonzero(flags):
        result, check_elbos[index], improved[index] = polish_one(
            tuple(leaf[index] for leaf in params)
        )
        for leaf, value in zip(polished, result, strict=True):
            leaf[index] = np.asarray(value)
    return tuple(polished), check_elbos, improved


def drop_duplicates(fits: list[_LocalFit], tolerance: float, batched_potential=None):
    """Keep the best of each group of fits of one mode.

    Two fits are of one mode when their means lie within ``tolerance`` standard deviations (of
    the kept fit) in every coordinate, or, given ``batched_potential`` (``phi`` of every row of
    an array), when the target has no
    barrier between their means: ``phi`` on the segment between them never rises more than
    ``_BARRIER`` nats above its higher end. The second test holds for two loosely converged fits
    of one mode in many dimensions, which seldom pass the first.

    :param list fits: fits of :func:`variational_fitter` (each with its ``loc``, ``covariance``
        and ``elbo``).
    :param float tolerance: the distance, in standard deviations of the kept fit, within which
        two means are of one mode.
    :param batched_potential: ``positions (N, D) -> phi (N,)`` (:func:`vectorized_potential`),
        or ``None`` for the distance test alone.
    :return: the kept fits, the highest ELBO first.
    """
    fits = sorted(fits, key=lambda f: -f.elbo)
    one_basin = (
        same_basin(batched_potential, np.stack([fit.loc for fit in fits]))
        if batched_potential is not None and len(fits) > 1
        else np.zeros((len(fits), len(fits)), dtype=bool)
    )
    kept: list[int] = []
    for index, fit in enumerate(fits):
        duplicate = False
        for other in kept:
            scale = np.sqrt(np.maximum(np.diagonal(fits[other].covariance), 1e-30))
            close = np.max(np.abs(fit.loc - fits[other].loc) / scale) < tolerance
            if close or one_basin[index, other]:
                duplicate = True
                break
        if not duplicate:
            kept.append(index)
    return [fits[index] for index in kept]


# A rise of the potential between two fits' means, in nats, that counts as a barrier.
_BARRIER = 1.0
_SEGMENT_POINTS = 9
_POTENTIAL_BLOCK = 1024


def vectorized_potential(potential_fn):
    """``phi`` of every row of a NumPy array, in float64, from one compiled, vmapped function.

    Rows go through in blocks of ``_POTENTIAL_BLOCK`` (the last one padded), so that the rounds
    of the fit, whose numbers of importance draws and segment points vary, share one
    compilation.

    :param potential_fn: ``x -> phi(x)`` for one flat point.
    :return: ``positions (N, D) numpy -> phi (N,) numpy float64``.
    """
    compiled = quick_jit(jax.vmap(potential_fn))

    def batched(positions):
        num_rows = len(positions)
        num_blocks = max(1, -(-num_rows // _POTENTIAL_BLOCK))
        padded = np.zeros((num_blocks * _POTENTIAL_BLOCK,) + positions.shape[1:])
        padded[:num_rows] = positions
        blocks = padded.reshape((num_blocks, _POTENTIAL_BLOCK) + positions.shape[1:])
        values = [np.asarray(compiled(jnp.asarray(block)), dtype=np.float64) for block in blocks]
        return np.concatenate(values)[:num_rows]

    return batched


def same_basin(batched_potential, locs):
    """``[K, K]`` booleans: no barrier in ``phi`` (a rise of more than one nat above both ends)
    on the straight segment between points ``i`` and ``j``.

    :param batched_potential: ``positions (N, D) -> phi (N,)`` (:func:`vectorized_potential`).
    :param locs: ``(K, D)`` points.
    :return: NumPy boolean array ``(K, K)``.
    """
    fractions = np.linspace(0.0, 1.0, _SEGMENT_POINTS)
    points = (
        locs[:, None, None, :] * (1.0 - fractions)[:, None]
        + locs[None, :, None, :] * fractions[:, None]
    )
    potentials = batched_potential(points.reshape(-1, locs.shape[-1])).reshape(points.shape[:3])
    potentials = np.where(np.isfinite(potentials), potentials, np.inf)
    ends = np.maximum(potentials[..., 0], potentials[..., -1])
    return np.max(potentials, axis=-1) <= ends + _BARRIER


def elbo_moment_match(fits: list[_LocalFit]) -> tuple[np.ndarray, np.ndarray, float]:
    """One Gaussian with the moments of the ELBO-weighted mixture of fits (paper eq. 25).

    :param list fits: fits of :func:`variational_fitter` (each with its ``loc``, ``covariance``
        and ``elbo``).
    :return: ``(loc, covariance, log_zeta)``: the mixture's mean and covariance, and the log of
        the sum of the fits' ``exp(ELBO)``.
    """
    elbos = np.array([fit.elbo for fit in fits])
    log_zeta = float(logsumexp(elbos))
    loc, covariance = moment_match(
        np.exp(elbos - log_zeta),
        np.stack([fit.loc for fit in fits]),
        np.stack([fit.covariance for fit in fits]),
    )
    return loc, covariance, log_zeta


def moment_match(masses, locs, covariances) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the Gaussian mixture with weights ``masses``.

    :param masses: the components' weights ``(K,)``, summing to one.
    :param locs: their means ``(K, D)``.
    :param covariances: their covariances ``(K, D, D)``.
    :return: ``(mean, covariance)``, the covariance symmetrised.
    """
    mean = masses @ locs
    second_moment = np.einsum(
        "k,kij->ij", masses, covariances + np.einsum("ki,kj->kij", locs, locs)
    )
    covariance = second_moment - np.outer(mean, mean)
    return mean, 0.5 * (covariance + covariance.T)


def jittered_cholesky(covariance):
    """The lower Cholesky factor of ``covariance`` with a jitter of ``1e-10`` times its mean
    variance on the diagonal, so that a covariance that rounding left barely positive definite
    still factors.

    :param covariance: a ``(D, D)`` NumPy covariance.
    :return: NumPy array ``(D, D)``, lower triangular.
    """
    jitter = 1e-10 * max(np.trace(covariance) / len(covariance), 1e-30)
    return np.linalg.cholesky(covariance + jitter * np.eye(len(covariance)))


def sample_prior_positions(rng_key, flat_model, num_draws, stacklevel=3):
    """Prior draws on the flat unconstrained space, rows with a non-finite entry dropped; none
    for a potential without a model or a model whose prior cannot be sampled (an improper prior;
    any other failure warns, with ``stacklevel`` counted from this function).

    :param rng_key: the key of the draws.
    :param FlatModel flat_model: the model's flat potential, with its ``sample_prior_fn``.
    :param int num_draws: prior draws.
    :param int stacklevel: the warning's ``stacklevel``, counted from this function.
    :return: NumPy array ``(M, D)`` float64, ``M <= num_draws``.
    """
    if flat_model.sample_prior_fn is None:
        return np.zeros((0, flat_model.dimension))
    try:
        positions = quick_jit(flat_model.sample_prior_fn, static_argnums=1)(rng_key, num_draws)
        positions = np.asarray(positions, dtype=np.float64)
    except NotImplementedError:
        # An improper prior (ImproperUniform) has no sampler: the fits start from uniform draws.
        return np.zeros((0, flat_model.dimension))
    except Exception as error:  # noqa: BLE001 -- any other failure is the model's, and said
        warnings.warn(
            f"fit_base could not draw from the model's prior ({type(error).__name__}: "
            f"{error}); its fits start from uniform draws in [-init_radius, init_radius] only, "
            "which may miss modes that prior draws would reach.",
            stacklevel=stacklevel,
        )
        return np.zeros((0, flat_model.dimension))
    return positions[np.all(np.isfinite(positions), axis=-1)]


def defensive_component(locs, covariances, prior_positions):
    """The broad Gaussian of the fitting rounds, over every fit and the prior: the moments of
    the fits (equally weighted) mixed half and half with the prior's; without enough prior
    draws, the fits' moments with four times the covariance.

    A mode no fit found lies where the fits' own tails never reach; the prior's spread puts
    some of the importance draws there, so a later round can start a fit in it.

    :param locs: the fits' means ``(K, D)``.
    :param covariances: their covariances ``(K, D, D)``.
    :param prior_positions: prior draws on the flat space ``(M, D)``
        (:func:`sample_prior_positions`), used when ``M > 2 D + 2``.
    :return: ``(loc, covariance)`` of the broad Gaussian.
    """
    num_fits = len(locs)
    loc, covariance = moment_match(np.full(num_fits, 1.0 / num_fits), locs, covariances)
    dimension = len(loc)
    if len(prior_positions) <= 2 * dimension + 2:
        return loc, 4.0 * covariance
    prior_loc = prior_positions.mean(0)
    prior_covariance = np.atleast_2d(np.cov(prior_positions, rowvar=False))
    return moment_match(
        np.array([0.5, 0.5]), np.stack([loc, prior_loc]), np.stack([covariance, prior_covariance])
    )


def gaussian_log_densities(positions, locs, scale_trils):
    """``log N(x_i; mu_k, L_k L_k^T)`` for every point and component, with NumPy (the
    importance draws live on the host).

    :param positions: the points ``(N, D)``.
    :param locs: the Gaussians' means ``(K, D)``.
    :param scale_trils: their lower Cholesky factors ``(K, D, D)``.
    :return: NumPy array ``(N, K)``.
    """
    columns = []
    for loc, scale_tril, log_normalizer in zip(
        locs, scale_trils, gaussian_log_normalizers(scale_trils), strict=True
    ):
        whitened = scipy.linalg.solve_triangular(scale_tril, (positions - loc).T, lower=True)
        columns.append(log_normalizer - 0.5 * np.sum(whitened**2, axis=0))
    return np.stack(columns, axis=-1)


class LocalOptima(NamedTuple):
    """Distinct local minima of ``phi`` and whether a refitting round has started a fit there."""

    positions: np.ndarray
    potentials: np.ndarray
    tried: np.ndarray


def local_optima(potential_fn, starts, num_steps, dtype, learning_rate=0.1) -> LocalOptima:
    """Local minima of ``phi`` from many starts at once: Adam (optax) with a cosine-decayed step
    size, vmapped over the starts, in one compiled loop.

    A minimisation is far cheaper than a variational fit, so hundreds of them find most modes of
    a posterior with many (each start lands in the mode whose basin holds it), where a few dozen
    fits find only some; the refitting rounds then start fits only in the modes the base misses.
    Minima with a non-finite ``phi`` or gradient are dropped, and so are repeats (closer than
    ``1e-3`` of the minima's spread).

    :param potential_fn: the flat potential ``phi``.
    :param starts: the starts ``(N, D)``.
    :param int num_steps: Adam steps of each minimisation.
    :param dtype: the dtype the minimisations run in.
    :param float learning_rate: Adam's first step size.
    :return: :class:`LocalOptima`, ordered by ``phi`` (the highest density first), none tried.
    """
    if len(starts) == 0:
        return LocalOptima(starts, np.zeros(0), np.zeros(0, dtype=bool))
    value_and_gradient = jax.vmap(jax.value_and_grad(potential_fn))
    optimizer = optax.adam(optax.cosine_decay_schedule(learning_rate, num_steps, alpha=0.01))

    @quick_jit(optimize=True)
    def minimise(positions):
        def step(carry, _):
            positions, optimizer_state = carry
            _, gradients = value_and_gradient(positions)
            # A start where phi is not finite stays where it is and is dropped below.
            gradients = jnp.where(jnp.isfinite(gradients), gradients, 0.0)
            updates, optimizer_state = optimizer.update(gradients, optimizer_state)
            return (optax.apply_updates(positions, updates), optimizer_state), None

        (positions, _), _ = jax.lax.scan(
            step, (positions, optimizer.init(positions)), None, length=num_steps
        )
        return (positions, *value_and_gradient(positions))

    positions, potentials, gradients = (
        np.asarray(value, dtype=np.float64) for value in minimise(jnp.asarray(starts, dtype))
    )
    finite = np.isfinite(potentials) & np.all(np.isfinite(gradients), axis=-1)
    positions, potentials = positions[finite], potentials[finite]
    order = np.argsort(potentials)
    positions, potentials = positions[order], potentials[order]
    if len(positions) > 1:
        spread = max(float(np.max(np.std(positions, axis=0))), 1e-12)
        kept = [0]
        for index in range(1, len(positions)):
            distances = np.max(np.abs(positions[kept] - positions[index]), axis=1)
            if np.min(distances) > 1e-3 * spread:
                kept.append(index)
        positions, potentials = positions[kept], potentials[kept]
    return LocalOptima(positions, potentials, np.zeros(len(positions), dtype=bool))


# A local minimum where the target's density is this many times the base's (times zeta) lies
# in a mode that no component of the base covers.
_UNCOVERED_RATIO = 10.0


def posterior_modes(
    rng_key, model, model_args, model_kwargs, flat_model, num_starts=64, num_steps=250
) -> LocalOptima:
    """Local maxima of a model's posterior density on the flat unconstrained space: Adam
    minimisations of ``phi`` from ``num_starts`` dispersed starts (half prior draws, half uniform
    in ``[-2, 2]``), all in one compiled loop, as the refitting rounds of
    :func:`~numpyro_extras.fit_base` seed theirs.

    :param jax.random.PRNGKey rng_key: random key.
    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param FlatModel flat_model: its flat potential (:func:`~numpyro_extras.flatten_model`).
    :param int num_starts: minimisations.
    :param int num_steps: Adam steps of each.
    :return: :class:`LocalOptima`, the distinct minima of ``phi``, lowest first.

    **Example:**

    .. code-block:: python

        flat = nx.flatten_model(jax.random.PRNGKey(0), model, (y,))
        modes = posterior_modes(jax.random.PRNGKey(1), model, (y,), {}, flat)
        modes.positions  # (num_modes, D), the highest density first
    """
    prior_key, starts_key = np.asarray(jax.random.split(rng_key))
    prior_positions = sample_prior_positions(prior_key, flat_model, num_draws=num_starts)
    starts = prior_and_uniform_starts(
        numpy_rng(starts_key), num_starts, flat_model.dimension, 2.0, prior_positions
    )
    return local_optima(
        flat_model.potential_fn, starts, num_steps, flat_model.initial_position.dtype
    )


def uncovered_optima(optima: LocalOptima, base: MixtureBase) -> np.ndarray:
    """The local minima of ``phi`` that the base does not cover (the target's density there is
    more than ``_UNCOVERED_RATIO`` times ``zeta`` times the base's) and that no round has started
    a fit at, the highest target density first, at most one per mode (two minima are of one mode
    when they lie within 0.1 standard deviations of the base's broad component of each other).

    :param LocalOptima optima: the local minima (:func:`local_optima`), the highest density
        first, with those a round has started a fit at marked ``tried``.
    :param MixtureBase base: the mixture so far, its broad component last.
    :return: indices into ``optima``.
    """
    if len(optima.positions) == 0:
        return np.zeros(0, dtype=int)
    locs = np.asarray(base.component_locs, dtype=np.float64)
    scale_trils = np.asarray(base.component_scale_trils, dtype=np.float64)
    log_weights = np.asarray(base.component_log_weights, dtype=np.float64)
    log_base = logsumexp(
        gaussian_log_densities(optima.positions, locs, scale_trils) + log_weights, axis=1
    )
    log_ratio = -optima.potentials - float(base.log_zeta) - log_base
    candidates = np.flatnonzero((log_ratio > math.log(_UNCOVERED_RATIO)) & ~optima.tried)
    whitened = scipy.linalg.solve_triangular(
        scale_trils[-1], optima.positions[candidates].T, lower=True
    ).T
    chosen: list[int] = []
    for row in range(len(candidates)):
        if not chosen or np.min(np.max(np.abs(whitened[chosen] - whitened[row]), axis=1)) > 0.1:
            chosen.append(row)
    return candidates[chosen]


def starts_from_weighted_draws(positions, log_weights, existing, scale_tril, num_starts, rng):
    """Starting points for new fits from weighted draws: half resampled by weight, half spread
    out by farthest-point selection among the draws that carry weight, away from the ``existing``
    fits' means too, so that each separate region of weight gets a fit of its own.

    :param positions: the draws ``(N, D)``.
    :param log_weights: their log weights ``(N,)``, all finite.
    :param existing: the means of the fits so far ``(K, D)``.
    :param scale_tril: the lower Cholesky factor ``(D, D)`` that whitens distances (the broad
        component's).
    :param int num_starts: how many starts; draws repeat when too few carry weight.
    :param rng: the NumPy generator of the resampling (:func:`numpy_rng`).
    :return: NumPy array ``(num_starts, D)``, rows of ``positions``.
    """
    weights = np.exp(log_weights - logsumexp(log_weights))
    num_resampled = num_starts - num_starts // 2
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0
    chosen = list(
        np.searchsorted(cumulative, (rng.uniform() + np.arange(num_resampled)) / num_resampled)
    )
    candidates = np.flatnonzero(weights > 1e-3 / len(weights))

    def whiten(points):
        return scipy.linalg.solve_triangular(scale_tril, np.atleast_2d(points).T, lower=True).T

    whitened = whiten(positions[candidates])
    taken = whiten(np.concatenate([positions[chosen], existing]))
    nearest = np.min(np.sum((whitened[:, None] - taken[None]) ** 2, -1), axis=1)
    for _ in range(min(num_starts // 2, len(candidates))):
        pick = int(np.argmax(nearest))
        chosen.append(candidates[pick])
        nearest = np.minimum(nearest, np.sum((whitened - whitened[pick]) ** 2, -1))
    # Always num_starts points, so that every round reuses the first round's compiled fits.
    chosen += chosen[: num_starts - len(chosen)]
    return positions[np.asarray(chosen)]


# fit_base's settings, each with its check: (kind, minimum) for counts, (kind, low, high) for
# real numbers in an open interval, the accepted values for choices.
_FIT_BASE_SETTINGS = {
    "method": ("choice", ("mixture", "gaussian")),
    "num_starts": ("count", 1),
    "num_steps": ("count", 1),
    "learning_rate": ("real", 0.0, None),
    "num_particles": ("count", 1),
    "elbo_particles": ("count", 1),
    "guide": ("choice", ("multivariate", "diagonal")),
    "init_radius": ("real", 0.0, None),
    "duplicate_tolerance": ("real", 0.0, None),
    "importance_draws": ("count", 1),
    "defensive_weight": ("real", 0.0, 1.0),
    "num_optima": ("count", 0),
    "bootstrap_rounds": ("count or None", 0),
    "bootstrap_num_warmup": ("count", 0),
    "bootstrap_num_samples": ("count", 1),
    "bootstrap_num_chains": ("count", 1),
    "progress_bar": ("flag",),
    "flat_model": ("flat model",),
}


def check_fit_base_settings(owner="fit_base", **settings):
    """Check settings of :func:`~numpyro_extras.fit_base` by name before any work: unknown names,
    and values of the wrong kind or out of range, raise an error that names the setting and what
    it accepts.

    :param str owner: how the error names where the settings came from (a kernel's
        ``fit_base_kwargs``, say).
    :param settings: the settings, by :func:`~numpyro_extras.fit_base`'s keyword names.
    :return: the settings, unchanged.
    :raises TypeError: for an unknown name or a value of the wrong kind.
    :raises ValueError: for a value out of range.

    **Example:**

    .. code-block:: python

        check_fit_base_settings("fit_base_kwargs", num_starts=8, num_steps=500)
    """
    unknown = sorted(set(settings) - set(_FIT_BASE_SETTINGS))
    if unknown:
        raise TypeError(
            f"{owner}: unknown fit_base setting{'s' * (len(unknown) > 1)} {unknown}; the "
            f"settings are {sorted(_FIT_BASE_SETTINGS)}."
        )
    for name, value in settings.items():
        kind, *limits = _FIT_BASE_SETTINGS[name]
        label = f"{owner}: {name}" if owner != "fit_base" else name
        if kind == "choice" and value not in limits[0]:
            raise ValueError(f"{label} must be one of {limits[0]}, got {value!r}.")
        if kind == "count" or (kind == "count or None" and value is not None):
            check_count(label, value, minimum=limits[0])
        if kind == "real":
            low, high = limits
            requirement = (
                "a positive number" if high is None else f"a number in ({low:g}, {high:g})"
            )
            check_real(label, value, requirement, low=low, high=high)
        if kind == "flag" and not is_flag(value):
            raise TypeError(f"{label} must be True or False, got {value!r}.")
        if kind == "flat model" and value is not None and not isinstance(value, FlatModel):
            raise TypeError(
                f"{label} must be a FlatModel (nx.flatten_model) or None, got "
                f"{type(value).__name__}."
            )
    return settings
