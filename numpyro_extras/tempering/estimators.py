"""Estimators from continuous tempering draws: ``log Z`` (eq. 20), target (eq. 21) and base (eq. 22)
expectations, weighted resampling to plain posterior draws, ArviZ export and mixing diagnostics.

All draws count, whatever their inverse temperature: draw ``t`` has target weight
``w1(Delta_t) = p(beta = 1 | x_t)`` and base weight ``w0(Delta_t) = p(beta = 0 | x_t)``.
Sums are pooled over chains before ratios are taken (spec 2.5).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import arviz as az
import jax
import numpy as np
from scipy.special import logsumexp

from numpyro_extras.evidence import Evidence
from numpyro_extras.tempering.base import GaussianBase
from numpyro_extras.tempering.kernels import NEAR_BASE, NEAR_TARGET, _ContinuousTemperingKernel
from numpyro_extras.tempering.weights import log_base_weight, log_target_weight

__all__ = [
    "tempering_log_normalizer",
    "log_marginal_likelihood",
    "target_log_weights",
    "posterior_samples",
    "to_inference_data",
    "BaseMomentCheck",
    "base_moment_check",
    "tempering_diagnostics",
    "plot_tempering",
    "refit_base",
]


def _as_chains(values):
    values = np.asarray(values, dtype=np.float64)
    return values[None] if values.ndim == 1 else values


def tempering_log_normalizer(delta, log_zeta) -> Evidence:
    """``log Z`` from the ``Delta`` of tempered draws (paper eq. 20, in log space).

    ``log Z = log zeta + logsumexp(log w1) - logsumexp(log w0)``, pooled over chains. The standard
    error is the delta-method error of the ratio: the Monte Carlo standard error (ArviZ, which
    accounts for autocorrelation and between-chain spread) of the mean of
    ``w1 / mean(w1) - w0 / mean(w0)``.

    :param delta: ``Delta`` of every draw, shape ``(num_chains, num_draws)`` or ``(num_draws,)``.
    :param float log_zeta: the base's ``log zeta``.
    :return: :class:`~numpyro_extras.Evidence` with ``log_weights`` = ``log w1`` per draw.

    **Example:**

    .. code-block:: python

        tempering_log_normalizer(np.zeros((4, 100)), log_zeta=1.5).log_z  # 1.5
    """
    delta = _as_chains(delta)
    if not np.all(np.isfinite(delta)):
        raise ValueError("Delta contains non-finite values; the draws cannot give log Z.")
    log_w1 = np.asarray(log_target_weight(delta), dtype=np.float64)
    log_w0 = np.asarray(log_base_weight(delta), dtype=np.float64)
    num_draws = delta.size
    log_mean_w1 = logsumexp(log_w1) - np.log(num_draws)
    log_mean_w0 = logsumexp(log_w0) - np.log(num_draws)
    log_z = float(log_zeta) + log_mean_w1 - log_mean_w0
    influence = np.exp(log_w1 - log_mean_w1) - np.exp(log_w0 - log_mean_w0)
    if delta.shape[-1] >= 4 and np.std(influence) > 0:
        stderr = float(az.mcse(influence, method="mean"))
        ess = float(az.ess(influence, method="mean"))
    else:
        stderr, ess = float("nan"), float("nan")
    return Evidence(log_z=float(log_z), stderr=stderr, log_weights=log_w1, ess=ess)


def _kernel_of(mcmc) -> _ContinuousTemperingKernel:
    kernel = mcmc.sampler
    if not isinstance(kernel, _ContinuousTemperingKernel):
        raise TypeError(
            "Expected an MCMC run with nx.JointContinuousTempering or "
            f"nx.GibbsContinuousTempering, got {type(kernel).__name__}."
        )
    if kernel.base is None or mcmc._states is None:
        raise ValueError("Run the MCMC first: `mcmc.run(rng_key, ...)`.")
    return kernel


def _deltas(mcmc):
    fields = mcmc.get_extra_fields(group_by_chain=True)
    if "delta" not in fields:
        raise ValueError("The run did not collect 'delta'; keep the kernel's default fields.")
    return np.asarray(fields["delta"], dtype=np.float64)


def log_marginal_likelihood(mcmc, check_base=True) -> Evidence:
    """``log Z`` (log marginal likelihood of a model) with its standard error from a tempering run.

    :param mcmc: a :class:`~numpyro.infer.MCMC` run with a continuous tempering kernel.
    :param bool check_base: also run :func:`base_moment_check` and warn if it fails badly.
    :return: :class:`~numpyro_extras.Evidence` (``log_z``, ``stderr``, ``log_weights``, ``ess``).

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.JointContinuousTempering(model), num_warmup=1000, num_samples=2000)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        nx.log_marginal_likelihood(mcmc)  # Evidence(log_z=..., stderr=...)
    """
    kernel = _kernel_of(mcmc)
    if check_base:
        base_moment_check(mcmc, warn=True)
    return tempering_log_normalizer(_deltas(mcmc), float(kernel.base.log_zeta))


def target_log_weights(mcmc):
    """Self-normalised log weights ``log w1`` of every draw for target expectations (eq. 21).

    :return: array ``(num_chains, num_draws)`` whose exponentials sum to 1 over all chains.
    """
    _kernel_of(mcmc)
    log_w1 = np.asarray(log_target_weight(_deltas(mcmc)), dtype=np.float64)
    return log_w1 - logsumexp(log_w1)


def _systematic_indices(rng, probabilities, num_samples):
    positions = (rng.uniform() + np.arange(num_samples)) / num_samples
    cumulative = np.cumsum(probabilities)
    cumulative[-1] = 1.0
    return np.searchsorted(cumulative, positions)


def _numpy_rng(rng_key):
    return np.random.default_rng(np.asarray(jax.random.key_data(rng_key)).ravel().tolist())


def posterior_samples(mcmc, rng_key, num_samples=None):
    """Equally weighted draws of the target posterior, keyed by the model's site names.

    Resamples the tempered draws (all of them, pooled over chains) with their target weights
    ``w1`` (paper eq. 21) by systematic resampling.

    :param mcmc: a run with a continuous tempering kernel.
    :param jax.random.PRNGKey rng_key: key for the resampling.
    :param int num_samples: number of draws; default the number of tempered draws.
    :return: dict of arrays with leading dimension ``num_samples`` (a flat array for a
        ``potential_fn`` kernel), ready for :class:`~numpyro.infer.Predictive`.

    **Example:**

    .. code-block:: python

        draws = nx.posterior_samples(mcmc, jax.random.PRNGKey(1))
        Predictive(model, draws)(jax.random.PRNGKey(2), x)
    """
    probabilities = np.exp(target_log_weights(mcmc)).ravel()
    num_samples = probabilities.size if num_samples is None else int(num_samples)
    indices = _systematic_indices(_numpy_rng(rng_key), probabilities, num_samples)
    # Systematic resampling returns sorted indices; shuffle so that slices are not biased.
    indices = _numpy_rng(jax.random.fold_in(rng_key, 1)).permutation(indices)
    return jax.tree.map(lambda values: np.asarray(values)[indices], mcmc.get_samples())


def to_inference_data(mcmc, rng_key=None):
    """ArviZ ``InferenceData`` whose ``posterior`` is the target posterior.

    Each chain is resampled with its own target weights by systematic resampling, which keeps
    the draws in time order, so ArviZ's R-hat and ESS remain meaningful. ``sample_stats`` holds,
    per tempered iteration, ``beta``, ``delta``, ``log_weight`` (``log w1``, self-normalised per
    chain), ``log_base_weight`` (``log w0``) and any other collected field; ``attrs`` records
    ``log_marginal_likelihood`` and its ``stderr``.

    :param mcmc: a run with a continuous tempering kernel.
    :param jax.random.PRNGKey rng_key: key for the resampling (default ``PRNGKey(0)``).
    :return: :class:`arviz.InferenceData`.
    """
    kernel = _kernel_of(mcmc)
    rng = _numpy_rng(jax.random.PRNGKey(0) if rng_key is None else rng_key)
    deltas = _deltas(mcmc)
    log_w1 = np.asarray(log_target_weight(deltas), dtype=np.float64)
    log_w1_per_chain = log_w1 - logsumexp(log_w1, axis=1, keepdims=True)
    num_chains, num_draws = deltas.shape
    chain_indices = np.stack(
        [
            _systematic_indices(rng, np.exp(log_w1_per_chain[chain]), num_draws)
            for chain in range(num_chains)
        ]
    )
    samples = mcmc.get_samples(group_by_chain=True)
    if not isinstance(samples, dict):
        samples = {"x": samples}
    posterior = {
        name: np.take_along_axis(
            np.asarray(values),
            chain_indices.reshape(chain_indices.shape + (1,) * (np.ndim(values) - 2)),
            axis=1,
        )
        for name, values in samples.items()
    }
    sample_stats = {
        name: np.asarray(values) for name, values in mcmc.get_extra_fields(True).items()
    }
    sample_stats["log_weight"] = log_w1_per_chain
    sample_stats["log_base_weight"] = np.asarray(log_base_weight(deltas), dtype=np.float64)
    if "diverging" in sample_stats:
        sample_stats["diverging"] = sample_stats["diverging"].astype(bool)
    evidence = tempering_log_normalizer(deltas, float(kernel.base.log_zeta))
    return az.from_dict(
        posterior=posterior,
        sample_stats=sample_stats,
        attrs={
            "log_marginal_likelihood": evidence.log_z,
            "log_marginal_likelihood_stderr": evidence.stderr,
            "inference_library": "numpyro_extras",
            "sampler": type(kernel).__name__,
        },
    )


class BaseMomentCheck(NamedTuple):
    """The necessary convergence check of paper eq. 22: base-weighted draws reproduce the base.

    :param mean_error: ``max_i |E_w0[x_i] - loc_i| / sd_i`` in base standard deviations.
    :param variance_ratio: the weighted variances over the base's, per coordinate.
    :param ess: effective number of base-weighted draws (Kish).
    :param passed: ``mean_error < 0.5`` and every variance ratio in [0.5, 2].
    """

    mean_error: float
    variance_ratio: np.ndarray
    ess: float
    passed: bool


def _unconstrained_draws(mcmc, kernel):
    samples = mcmc.get_samples(group_by_chain=False)
    ravel_fn = kernel.flat_model.ravel_fn
    if kernel.model is None:
        return np.asarray(samples, dtype=np.float64)
    return np.asarray(jax.vmap(ravel_fn)(samples), dtype=np.float64)


def base_moment_check(mcmc, warn=True) -> BaseMomentCheck:
    """Compare the ``w0``-weighted moments of the draws with the base's (paper eq. 22).

    Passing is necessary, not sufficient, for convergence: a chain that never visits ``beta``
    near 0 fails it, and so does a run whose base was not normalised.

    :param mcmc: a run with a continuous tempering kernel.
    :param bool warn: emit a ``UserWarning`` when the check fails.
    :return: :class:`BaseMomentCheck`.
    """
    kernel = _kernel_of(mcmc)
    draws = _unconstrained_draws(mcmc, kernel)
    log_w0 = np.asarray(log_base_weight(_deltas(mcmc)), dtype=np.float64).ravel()
    weights = np.exp(log_w0 - logsumexp(log_w0))
    mean = weights @ draws
    variance = weights @ (draws - mean) ** 2
    base_variance = np.diagonal(np.asarray(kernel.base.covariance, dtype=np.float64))
    base_loc = np.asarray(kernel.base.loc, dtype=np.float64)
    mean_error = float(np.max(np.abs(mean - base_loc) / np.sqrt(base_variance)))
    variance_ratio = variance / base_variance
    ess = float(1.0 / np.sum(weights**2))
    passed = bool(mean_error < 0.5 and np.all((variance_ratio > 0.5) & (variance_ratio < 2.0)))
    if warn and not passed:
        warnings.warn(
            "Continuous tempering base-moment check (eq. 22) failed: the base-weighted draws "
            f"miss the base mean by {mean_error:.2f} sd, variance ratios in "
            f"[{variance_ratio.min():.2f}, {variance_ratio.max():.2f}], ESS {ess:.0f}. The chains "
            "have not converged or rarely reach beta near 0; run longer or improve the base.",
            stacklevel=2,
        )
    return BaseMomentCheck(mean_error, variance_ratio, ess, passed)


def refit_base(mcmc) -> GaussianBase:
    """One bootstrap round (spec 2.8): a new base from a tempering run.

    The new base is the Gaussian with the run's target-weighted (``w1``, eq. 21) mean and
    covariance on the unconstrained space, and ``log zeta`` is the run's ``log Z`` estimate
    (eq. 20). Rerunning with it flattens the temperature marginal, like simulated tempering's
    weight iteration.

    :param mcmc: a run with a continuous tempering kernel.
    :return: :class:`~numpyro_extras.GaussianBase`.

    **Example:**

    .. code-block:: python

        mcmc.run(rng_key, data)
        better = MCMC(nx.GibbsContinuousTempering(model, base=nx.refit_base(mcmc)), ...)
    """
    kernel = _kernel_of(mcmc)
    draws = _unconstrained_draws(mcmc, kernel)
    weights = np.exp(target_log_weights(mcmc)).ravel()
    mean = weights @ draws
    centred = draws - mean
    covariance = (centred * weights[:, None]).T @ centred
    covariance = 0.5 * (covariance + covariance.T)
    jitter = 1e-10 * np.trace(covariance) / len(mean)
    scale_tril = np.linalg.cholesky(covariance + jitter * np.eye(len(mean)))
    log_z = tempering_log_normalizer(_deltas(mcmc), float(kernel.base.log_zeta)).log_z
    dtype = kernel.base.loc.dtype
    return GaussianBase(
        jax.numpy.asarray(mean, dtype),
        jax.numpy.asarray(scale_tril, dtype),
        jax.numpy.asarray(log_z, dtype),
    )


def tempering_diagnostics(mcmc) -> dict:
    """How well the inverse temperature mixed, per chain.

    :return: dict with ``fraction_near_base`` (``beta < 0.1``), ``fraction_near_target``
        (``beta > 0.9``), ``round_trips`` (base end -> target end -> base end) as arrays over
        chains, the ``target_ess`` (Kish ESS of the pooled target weights) and the
        :class:`BaseMomentCheck`.
    """
    _kernel_of(mcmc)
    beta = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["beta"], dtype=np.float64)
    round_trips = []
    for chain_beta in beta:
        ends = np.where(chain_beta < NEAR_BASE, 0, np.where(chain_beta > NEAR_TARGET, 1, -1))
        ends = ends[ends >= 0]
        round_trips.append(int(np.count_nonzero(np.diff(ends) != 0) // 2))
    weights = np.exp(target_log_weights(mcmc)).ravel()
    return {
        "fraction_near_base": np.mean(beta < NEAR_BASE, axis=1),
        "fraction_near_target": np.mean(beta > NEAR_TARGET, axis=1),
        "round_trips": np.array(round_trips),
        "target_ess": float(1.0 / np.sum(weights**2)),
        "base_moment_check": base_moment_check(mcmc, warn=False),
    }


def plot_tempering(mcmc, site=None, axes=None):
    """Plot the inverse-temperature traces, the ``beta`` histogram and a weighted target marginal.

    :param mcmc: a run with a continuous tempering kernel.
    :param str site: a scalar site (or first coordinate of a site) for the marginal panel;
        default the first latent site.
    :param axes: three matplotlib axes, or ``None`` for a new figure.
    :return: the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    kernel = _kernel_of(mcmc)
    if axes is None:
        figure, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    else:
        figure = axes[0].figure
    beta = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["beta"])
    for chain, chain_beta in enumerate(beta):
        axes[0].plot(chain_beta, lw=0.6, label=f"chain {chain}")
    axes[0].set(xlabel="draw", ylabel="inverse temperature beta", title="Temperature traces")
    axes[1].hist(beta.ravel(), bins=40, range=(0, 1), density=True, color="tab:gray")
    axes[1].set(xlabel="beta", ylabel="density", title="Marginal of beta")
    samples = mcmc.get_samples(group_by_chain=False)
    if isinstance(samples, dict):
        site = site or kernel.flat_model.latent_sites[0]
        values = np.asarray(samples[site]).reshape(len(beta.ravel()), -1)[:, 0]
    else:
        site = site or "x[0]"
        values = np.asarray(samples).reshape(len(beta.ravel()), -1)[:, 0]
    weights = np.exp(target_log_weights(mcmc)).ravel()
    axes[2].hist(values, bins=60, density=True, alpha=0.4, label="tempered draws")
    axes[2].hist(values, bins=60, weights=weights, density=True, alpha=0.7, label="target (w1)")
    axes[2].set(xlabel=site, ylabel="density", title="Target marginal")
    axes[2].legend(fontsize="small")
    figure.tight_layout()
    return figure
