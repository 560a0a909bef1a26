"""The base density of continuous tempering and its fit by variational inference.

Continuous tempering bridges a normalised base density ``exp(-psi)`` (inverse temperature 0) and
the target (inverse temperature 1). The closer the base is to the target and ``log zeta`` to
``log Z``, the flatter the marginal of the temperature and the better the chain mixes (paper
section 6, eqs. 23-25). :func:`fit_base` fits the base with NumPyro's SVI and autoguides.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import tqdm
from jax.flatten_util import ravel_pytree
from jax.scipy.linalg import solve_triangular
from numpyro.infer import SVI, Predictive, Trace_ELBO
from numpyro.infer.autoguide import AutoDiagonalNormal, AutoMultivariateNormal
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.svi import SVIState
from numpyro.optim import Adam
from scipy.special import logsumexp

from numpyro_extras.potential import flatten_model

__all__ = ["GaussianBase", "fit_base", "validate_base"]


class GaussianBase(NamedTuple):
    """A normalised Gaussian base density on the model's flat unconstrained space.

    :param loc: mean, shape ``(D,)``.
    :param scale_tril: lower Cholesky factor of the covariance, shape ``(D, D)``.
    :param log_zeta: the guess ``log zeta`` of the target's log normaliser ``log Z``.

    **Example:**

    .. code-block:: python

        base = GaussianBase(jnp.zeros(2), jnp.eye(2), log_zeta=0.0)
        base.potential(jnp.ones(2))  # psi(x) = -log N(x; loc, L L^T)
    """

    loc: jax.Array
    scale_tril: jax.Array
    log_zeta: jax.Array

    @property
    def dimension(self) -> int:
        return int(jnp.shape(self.loc)[-1])

    @property
    def covariance(self) -> jax.Array:
        return self.scale_tril @ self.scale_tril.T

    def potential(self, position):
        """``psi(x) = -log N(x; loc, scale_tril scale_tril^T)`` for one flat point."""
        whitened = solve_triangular(self.scale_tril, position - self.loc, lower=True)
        log_determinant = jnp.sum(jnp.log(jnp.diagonal(self.scale_tril)))
        return (
            0.5 * jnp.sum(whitened**2)
            + log_determinant
            + 0.5 * self.dimension * math.log(2 * math.pi)
        )

    def potential_function(self):
        """``psi`` as a function of one flat point, with the factorisation done once.

        :return: a function ``x -> psi(x)``; see :meth:`potential_and_gradient`.
        """
        potential_and_gradient = self.potential_and_gradient()
        return lambda position: potential_and_gradient(position)[0]

    def potential_and_gradient(self):
        """``psi`` and its gradient as one function of a flat point, factorised once.

        The precision matrix ``(L L^T)^{-1}`` is computed here with NumPy (so the result holds no
        JAX tracer); each call is then one matrix-vector product, ``grad psi = P (x - loc)`` and
        ``psi = (x - loc)^T grad psi / 2 + const``, or an elementwise scaling for a diagonal
        base.

        :return: a function ``x -> (psi(x), grad psi(x))``.

        **Example:**

        .. code-block:: python

            value, gradient = base.potential_and_gradient()(jnp.zeros(base.dimension))
        """
        scale_tril = np.asarray(self.scale_tril, dtype=np.float64)
        loc = jnp.asarray(self.loc)
        diagonal = np.diagonal(scale_tril)
        normalizer = jnp.asarray(
            np.sum(np.log(diagonal)) + 0.5 * self.dimension * math.log(2 * math.pi), loc.dtype
        )
        if not np.any(np.tril(scale_tril, -1)):
            precision_diagonal = jnp.asarray(diagonal**-2, loc.dtype)

            def diagonal_potential_and_gradient(position):
                centred = position - loc
                gradient = precision_diagonal * centred
                return 0.5 * jnp.sum(centred * gradient) + normalizer, gradient

            return diagonal_potential_and_gradient
        inverse_scale_tril = scipy.linalg.solve_triangular(
            scale_tril, np.eye(self.dimension), lower=True
        )
        precision = jnp.asarray(inverse_scale_tril.T @ inverse_scale_tril, loc.dtype)

        def dense_potential_and_gradient(position):
            centred = position - loc
            gradient = precision @ centred
            return 0.5 * jnp.sum(centred * gradient) + normalizer, gradient

        return dense_potential_and_gradient

    def sample(self, rng_key, sample_shape=()):
        """Draw ``sample_shape`` points from the base."""
        noise = jax.random.normal(rng_key, tuple(sample_shape) + (self.dimension,))
        return self.loc + noise @ self.scale_tril.T


def validate_base(base, dimension=None) -> GaussianBase:
    """Check that ``base`` is a normalised Gaussian of the right dimension; return it as arrays.

    :param base: a :class:`GaussianBase`.
    :param int dimension: the model's number of unconstrained dimensions, if known.
    :raises TypeError: if ``base`` is not a :class:`GaussianBase`.
    :raises ValueError: for wrong shapes, a non-finite ``log_zeta`` or a scale that is not a
        lower-triangular factor with a positive diagonal (then the density is not normalised).
    """
    if not isinstance(base, GaussianBase):
        raise TypeError(
            "base must be a numpyro_extras.GaussianBase (a normalised Gaussian density with loc, "
            f"scale_tril and log_zeta), got {type(base).__name__}. Fit one with nx.fit_base."
        )
    loc = np.asarray(base.loc)
    scale_tril = np.asarray(base.scale_tril)
    log_zeta = np.asarray(base.log_zeta)
    if loc.ndim != 1:
        raise ValueError(f"base.loc must be a vector of shape (D,), got shape {loc.shape}.")
    size = loc.shape[0]
    if scale_tril.shape != (size, size):
        raise ValueError(
            f"base.scale_tril must have shape {(size, size)} to match base.loc, got "
            f"{scale_tril.shape}."
        )
    if log_zeta.shape != () or not np.isfinite(log_zeta):
        raise ValueError(f"base.log_zeta must be a finite scalar, got {log_zeta}.")
    if not (np.all(np.isfinite(loc)) and np.all(np.isfinite(scale_tril))):
        raise ValueError("base.loc and base.scale_tril must be finite.")
    if np.any(np.triu(scale_tril, 1) != 0) or np.any(np.diagonal(scale_tril) <= 0):
        raise ValueError(
            "base.scale_tril must be lower triangular with a positive diagonal, or the base is "
            "not a normalised density."
        )
    if dimension is not None and size != dimension:
        raise ValueError(
            f"The base has dimension {size} but the model has {dimension} unconstrained dimensions."
        )
    return GaussianBase(jnp.asarray(loc), jnp.asarray(scale_tril), jnp.asarray(log_zeta))


class _LocalFit(NamedTuple):
    loc: np.ndarray
    covariance: np.ndarray
    elbo: float


def _fit_gaussians(
    rng_key, model, model_args, model_kwargs, flat_model, guide_class, num_fits, settings
) -> list[_LocalFit]:
    """Run ``num_fits`` Gaussian VI fits side by side (one compiled, vmapped SVI loop)."""
    init_key, uniform_key, prior_key, elbo_key = jax.random.split(rng_key, 4)
    guide = guide_class(model, init_loc_fn=init_to_uniform(radius=settings["init_radius"]))
    svi = SVI(
        model,
        guide,
        Adam(settings["learning_rate"]),
        Trace_ELBO(num_particles=settings["num_particles"]),
    )
    first_state = svi.init(init_key, *model_args, **model_kwargs)
    dimension = flat_model.dimension
    # The guide's flat order need not be ours: find the permutation by unravelling indices.
    index_sites = guide._unpack_latent(
        jnp.arange(dimension).astype(flat_model.initial_position.dtype)
    )
    order = np.asarray(
        ravel_pytree({name: index_sites[name] for name in flat_model.latent_sites})[0]
    ).astype(int)
    # Dispersed starts, in our flat order: half uniform on the unconstrained space, half prior
    # draws (a prior draw that does not map to a finite point is replaced by a uniform one).
    radius = settings["init_radius"]
    starts = jax.random.uniform(uniform_key, (num_fits, dimension), minval=-radius, maxval=radius)
    num_prior_starts = num_fits // 2
    if num_prior_starts:
        prior_draws = Predictive(model, num_samples=num_prior_starts)(
            prior_key, *model_args, **model_kwargs
        )
        prior_starts = jax.vmap(flat_model.ravel_fn)(prior_draws)
        finite = jnp.all(jnp.isfinite(prior_starts), axis=-1, keepdims=True)
        prior_rows = starts[1::2][:num_prior_starts]
        starts = starts.at[1::2].set(jnp.where(finite, prior_starts, prior_rows))
    guide_starts = jnp.zeros_like(starts).at[:, order].set(starts)
    # Every start shares the guide's parameter names, so one SVI object updates all of them.
    unconstrained_params = svi.optim.get_params(first_state.optim_state)
    loc_name = f"{guide.prefix}_loc"

    def state_from(loc, key):
        optim_state = svi.optim.init({**unconstrained_params, loc_name: loc})
        return SVIState(optim_state, first_state.mutable_state, key)

    states = jax.vmap(state_from)(guide_starts, jax.random.split(init_key, num_fits))

    num_steps = settings["num_steps"]
    # The steps run in compiled chunks so that a progress bar can report between them.
    chunk_length = max(1, num_steps // 20)

    @jax.jit
    def run_chunk(states):
        def one_step(states, _):
            return jax.vmap(lambda state: svi.update(state, *model_args, **model_kwargs))(states)

        return jax.lax.scan(one_step, states, None, length=chunk_length)

    all_losses = []
    with tqdm.trange(
        num_steps,
        desc=f"fit_base: {num_fits} Gaussian VI fit{'s' if num_fits > 1 else ''}",
        disable=not settings["progress_bar"],
        leave=False,
    ) as progress:
        for _ in range(num_steps // chunk_length):
            states, losses = run_chunk(states)
            all_losses.append(losses)
            progress.update(chunk_length)
            progress.set_postfix(loss=f"{float(jnp.min(losses[-1])):.3g}")
    losses = jnp.concatenate(all_losses)
    params = jax.vmap(svi.get_params)(states)
    # A precise ELBO: log zeta enters the estimator directly, so average many particles.
    precise_elbo = Trace_ELBO(num_particles=settings["elbo_particles"])
    elbos = -np.asarray(
        jax.jit(
            jax.vmap(
                lambda key, fit_params: precise_elbo.loss(
                    key, fit_params, model, guide, *model_args, **model_kwargs
                )
            )
        )(jax.random.split(elbo_key, num_fits), params),
        dtype=np.float64,
    )
    fits = []
    final_losses = np.asarray(losses[-10:], dtype=np.float64)
    for index in range(num_fits):
        fit_params = jax.tree.map(lambda leaf, index=index: leaf[index], params)
        posterior = guide.get_posterior(fit_params)
        loc = np.asarray(posterior.mean, dtype=np.float64)[order]
        if hasattr(posterior, "covariance_matrix"):
            covariance = np.asarray(posterior.covariance_matrix, dtype=np.float64)
        else:
            # a mean-field guide's posterior is an independent Normal
            covariance = np.diag(np.asarray(posterior.variance, dtype=np.float64))
        covariance = covariance[np.ix_(order, order)]
        values = (elbos[index], loc, covariance, final_losses[:, index])
        if all(np.all(np.isfinite(value)) for value in values):
            fits.append(_LocalFit(loc, covariance, float(elbos[index])))
    return fits


def _drop_duplicates(fits: list[_LocalFit], tolerance: float) -> list[_LocalFit]:
    """Keep the best of each group of fits whose means lie within ``tolerance`` standard units."""
    kept: list[_LocalFit] = []
    for fit in sorted(fits, key=lambda f: -f.elbo):
        duplicate = False
        for other in kept:
            scale = np.sqrt(np.maximum(np.diagonal(other.covariance), 1e-30))
            if np.max(np.abs(fit.loc - other.loc) / scale) < tolerance:
                duplicate = True
                break
        if not duplicate:
            kept.append(fit)
    return kept


def _moment_match(fits: list[_LocalFit]) -> tuple[np.ndarray, np.ndarray, float]:
    """One Gaussian with the moments of the ELBO-weighted mixture (paper eq. 25, spec 2.8)."""
    elbos = np.array([fit.elbo for fit in fits])
    log_zeta = float(logsumexp(elbos))
    mixture_weights = np.exp(elbos - log_zeta)
    locs = np.stack([fit.loc for fit in fits])
    mean = mixture_weights @ locs
    second_moment = sum(
        weight * (fit.covariance + np.outer(fit.loc, fit.loc))
        for weight, fit in zip(mixture_weights, fits, strict=True)
    )
    covariance = second_moment - np.outer(mean, mean)
    return mean, 0.5 * (covariance + covariance.T), log_zeta


def fit_base(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    method="mixture",
    num_starts=8,
    num_steps=2000,
    learning_rate=0.01,
    num_particles=4,
    elbo_particles=2000,
    guide="multivariate",
    init_radius=2.0,
    duplicate_tolerance=0.5,
    bootstrap_rounds=0,
    bootstrap_num_warmup=500,
    bootstrap_num_samples=1000,
    bootstrap_num_chains=4,
    progress_bar=True,
) -> GaussianBase:
    """Fit a Gaussian base density and ``log zeta`` for continuous tempering with NumPyro SVI.

    ``method="mixture"`` (spec 2.8 recipe 3, paper eq. 25) runs ``num_starts`` Gaussian VI fits
    from dispersed starts (half from the prior, half uniform in ``[-init_radius, init_radius]`` on
    the unconstrained space), drops duplicates (means closer than ``duplicate_tolerance`` standard
    deviations), weights each fit by ``exp(ELBO)``, and moment-matches the mixture into one
    Gaussian with ``log zeta = logsumexp(ELBOs)``. ``method="gaussian"`` is a single fit with
    ``log zeta = ELBO`` (recipe 1). The ELBOs are re-estimated with ``elbo_particles`` particles.

    :param jax.random.PRNGKey rng_key: random key.
    :param model: NumPyro model with continuous latent sites.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param str method: ``"mixture"`` or ``"gaussian"``.
    :param int num_starts: number of VI fits for ``"mixture"``.
    :param int num_steps: SVI steps per fit.
    :param float learning_rate: Adam learning rate.
    :param int num_particles: ELBO particles per SVI step.
    :param int elbo_particles: particles for the final ELBO of each fit.
    :param str guide: ``"multivariate"`` (:class:`~numpyro.infer.autoguide.AutoMultivariateNormal`)
        or ``"diagonal"`` (:class:`~numpyro.infer.autoguide.AutoDiagonalNormal`).
    :param float init_radius: radius of the uniform starts.
    :param float duplicate_tolerance: duplicate distance, in standard deviations of a kept fit.
    :param int bootstrap_rounds: after the VI fit, this many rounds of a short Gibbs tempering
        run followed by :func:`~numpyro_extras.refit_base` (spec 2.8 "bootstrap").
    :param int bootstrap_num_warmup: warm-up draws of each bootstrap run.
    :param int bootstrap_num_samples: kept draws per chain of each bootstrap run.
    :param int bootstrap_num_chains: vectorized chains of each bootstrap run.
    :param bool progress_bar: show the SVI progress (a tqdm bar).
    :return: a :class:`GaussianBase`.

    **Example:**

    .. code-block:: python

        base = nx.fit_base(jax.random.PRNGKey(0), model, (x, y))
        kernel = nx.GibbsContinuousTempering(model, base=base)
    """
    model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
    if method not in ("mixture", "gaussian"):
        raise ValueError(f"method must be 'mixture' or 'gaussian', got {method!r}.")
    guide_classes = {"multivariate": AutoMultivariateNormal, "diagonal": AutoDiagonalNormal}
    if guide not in guide_classes:
        raise ValueError(f"guide must be 'multivariate' or 'diagonal', got {guide!r}.")
    init_key, fits_key, bootstrap_key = jax.random.split(rng_key, 3)
    flat_model = flatten_model(init_key, model, model_args, model_kwargs, kernel_name="fit_base")
    settings = dict(
        num_steps=num_steps,
        learning_rate=learning_rate,
        num_particles=num_particles,
        elbo_particles=elbo_particles,
        init_radius=init_radius,
        progress_bar=progress_bar,
    )
    num_fits = 1 if method == "gaussian" else num_starts
    fits = _fit_gaussians(
        fits_key,
        model,
        model_args,
        model_kwargs,
        flat_model,
        guide_classes[guide],
        num_fits,
        settings,
    )
    if not fits:
        warnings.warn(
            "Every variational fit of the base diverged (NumPyro's autoguides cannot follow a "
            "support that depends on another latent site, for example); the base is the "
            "Gaussian with the moments of prior draws on the unconstrained space, and log zeta "
            "comes from importance sampling with it.",
            stacklevel=2,
        )
        return _prior_moment_base(fits_key, model, model_args, model_kwargs, flat_model)
    if len(fits) < num_fits:
        warnings.warn(
            f"{num_fits - len(fits)} of {num_fits} variational fits diverged and were dropped.",
            stacklevel=2,
        )
    fits = _drop_duplicates(fits, duplicate_tolerance)
    loc, covariance, log_zeta = _moment_match(fits)
    scale_tril = np.linalg.cholesky(covariance + 1e-10 * np.eye(len(loc)) * np.trace(covariance))
    dtype = flat_model.initial_position.dtype
    base = GaussianBase(
        jnp.asarray(loc, dtype), jnp.asarray(scale_tril, dtype), jnp.asarray(log_zeta, dtype)
    )
    return _bootstrap(
        bootstrap_key,
        model,
        model_args,
        model_kwargs,
        base,
        bootstrap_rounds,
        bootstrap_num_warmup,
        bootstrap_num_samples,
        bootstrap_num_chains,
    )


def _prior_moment_base(rng_key, model, model_args, model_kwargs, flat_model, num_draws=2000):
    """A base from the prior's moments on the flat space; ``log zeta`` by importance sampling.

    ``log zeta = log mean(exp(-phi(x) - log q(x)))`` with ``x ~ q``, an unbiased estimate of
    ``Z`` under the base ``q`` (only its log enters the kernels, which adapt it in warm-up).
    """
    prior_key, draw_key = jax.random.split(rng_key)
    prior_draws = Predictive(model, num_samples=num_draws)(prior_key, *model_args, **model_kwargs)
    positions = np.asarray(jax.vmap(flat_model.ravel_fn)(prior_draws), dtype=np.float64)
    positions = positions[np.all(np.isfinite(positions), axis=-1)]
    if positions.shape[0] < 2 * flat_model.dimension + 2:
        raise RuntimeError(
            "Every variational fit of the base diverged and too few prior draws map to finite "
            "unconstrained values to fit a base from the prior; pass a base."
        )
    loc = positions.mean(0)
    covariance = np.atleast_2d(np.cov(positions, rowvar=False))
    scale_tril = np.linalg.cholesky(covariance + 1e-8 * np.eye(len(loc)) * np.trace(covariance))
    dtype = flat_model.initial_position.dtype
    base = GaussianBase(jnp.asarray(loc, dtype), jnp.asarray(scale_tril, dtype), jnp.asarray(0.0))
    draws = base.sample(draw_key, (num_draws,))
    log_weights = -jax.vmap(flat_model.potential_fn)(draws) - jax.vmap(base.potential)(draws)
    log_weights = np.asarray(log_weights, dtype=np.float64)
    log_weights = log_weights[np.isfinite(log_weights)]
    log_zeta = logsumexp(log_weights) - np.log(max(len(log_weights), 1))
    return base._replace(log_zeta=jnp.asarray(log_zeta, dtype))


def _bootstrap(
    rng_key, model, model_args, model_kwargs, base, rounds, num_warmup, num_samples, num_chains
):
    # Imported here: the kernels module builds on this one.
    from numpyro.infer import MCMC

    from numpyro_extras.tempering.estimators import refit_base
    from numpyro_extras.tempering.kernels import GibbsContinuousTempering

    for round_key in jax.random.split(rng_key, rounds):
        mcmc = MCMC(
            GibbsContinuousTempering(model, base=base),
            num_warmup=num_warmup,
            num_samples=num_samples,
            num_chains=num_chains,
            chain_method="vectorized",
            progress_bar=False,
        )
        mcmc.run(round_key, *model_args, **model_kwargs)
        base = refit_base(mcmc)
    return base
