"""Posterior draws from a continuous tempering run and its ArviZ export.

The kernels' sample field is already an exact posterior chain (the target replica). The tempered
chain's draws, at every inverse temperature, give posterior draws too once weighted by their
target weights (Graham & Storkey eq. 21).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.smc.resampling import systematic
from scipy.special import logsumexp

from numpyro_extras.model.base_fit import numpy_rng
from numpyro_extras.results.arviz_adapter import add_sample_stats
from numpyro_extras.results.runs import inference_data
from numpyro_extras.shell.validation import check_count, check_rng_key
from numpyro_extras.tempering.evidence import run_log_normalizer, target_log_weights
from numpyro_extras.tempering.run import (
    base_log_weights,
    tempered_draws,
    tempering_kernel,
    unnormalised_target_log_weights,
)

__all__ = ["tempered_samples", "posterior_samples", "to_inference_data"]


def tempered_samples(mcmc, group_by_chain=False):
    """The tempered chain's draws (every inverse temperature), constrained, by site name.

    They are not posterior draws; weighted by :func:`~numpyro_extras.target_log_weights` they give
    target expectations (eq. 21).

    :param mcmc: a run with a continuous tempering kernel.
    :param bool group_by_chain: keep a leading chain dimension.
    :return: dict of arrays (a flat array for a ``potential_fn`` kernel).

    **Example:**

    .. code-block:: python

        draws = nx.tempered_samples(mcmc, group_by_chain=True)["intercept"]  # (chains, draws)
        (np.exp(nx.target_log_weights(mcmc)) * draws).sum()  # its posterior mean (eq. 21)
    """
    kernel = tempering_kernel(mcmc)
    draws = tempered_draws(mcmc, group_by_chain)
    if kernel.model is None:
        return np.asarray(draws)
    constrain = kernel.flat_model.constrain_fn
    if group_by_chain:
        constrain = jax.vmap(constrain)
    return jax.tree.map(np.asarray, jax.vmap(constrain)(draws))


def posterior_samples(mcmc, rng_key, num_samples=None):
    """Equally weighted posterior draws resampled from the tempered chain (eq. 21).

    ``mcmc.get_samples()`` already holds exact posterior draws; this resamples ALL tempered
    draws, pooled over chains, with their target weights by systematic resampling, which often
    uses more of the run.

    :param mcmc: a run with a continuous tempering kernel.
    :param jax.random.PRNGKey rng_key: key for the resampling.
    :param int num_samples: number of draws; default the number of tempered draws.
    :return: dict of arrays with leading dimension ``num_samples`` (a flat array for a
        ``potential_fn`` kernel), ready for :class:`~numpyro.infer.Predictive`.

    **Example:**

    .. code-block:: python

        draws = nx.posterior_samples(mcmc, jax.random.PRNGKey(1))
        Predictive(model, draws)(jax.random.PRNGKey(2), x)["y"]  # posterior predictive draws of y
    """
    check_rng_key(rng_key)
    probabilities = np.exp(target_log_weights(mcmc)).ravel()
    num_samples = (
        probabilities.size if num_samples is None else check_count("num_samples", num_samples)
    )
    indices = np.asarray(systematic(rng_key, jnp.asarray(probabilities), num_samples))
    # Systematic resampling returns sorted indices; shuffle so that slices are not biased.
    indices = numpy_rng(jax.random.fold_in(rng_key, 1)).permutation(indices)
    return jax.tree.map(lambda values: np.asarray(values)[indices], tempered_samples(mcmc))


def to_inference_data(mcmc, rng_key=None):
    """ArviZ ``InferenceData`` of a tempering run, with the tempered chain beside the posterior.

    ``posterior``, ``log_likelihood`` and ``observed_data`` are those of
    :func:`arviz.from_numpyro` (the kernel's posterior draws), so ``az.summary``, ``az.loo``,
    ``az.waic`` and ``az.compare`` work as after NUTS. ``sample_stats`` holds, per iteration, the
    tempered chain's ``beta``, ``delta``, ``log_zeta``, ``log_weight`` (log target weight,
    self-normalised per chain), ``log_base_weight`` (``log w0``), ``swap_accept_prob`` and any
    other collected field; ``attrs`` records ``log_marginal_likelihood`` and its ``stderr``.

    :param mcmc: a run with a continuous tempering kernel.
    :param rng_key: unused; kept so that existing calls keep working.
    :return: what the installed ArviZ's :func:`arviz.from_numpyro` returns: ``InferenceData``
        (ArviZ 0.2x) or ``xarray.DataTree`` (ArviZ 1.x).
    """
    kernel = tempering_kernel(mcmc)
    idata = inference_data(mcmc, kernel.model is not None, exclude_fields=("tempered_z",))
    log_weights = unnormalised_target_log_weights(mcmc)
    extra = {
        "log_weight": log_weights - logsumexp(log_weights, axis=1, keepdims=True),
        "log_base_weight": base_log_weights(mcmc),
    }
    add_sample_stats(idata, extra)
    evidence = run_log_normalizer(mcmc)
    idata.attrs.update(
        {
            "log_marginal_likelihood": evidence.log_z,
            "log_marginal_likelihood_stderr": evidence.stderr,
            "sampler": type(kernel).__name__,
        }
    )
    return idata
