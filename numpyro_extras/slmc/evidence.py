"""``log Z`` from a finished VAE-SLMC run, and its ArviZ export.

Every step draws an independent proposal ``(x', z') ~ q`` of the frozen VAE and keeps its log
importance weight ``log p~(x') + log r(z' | x') - log q(x', z')`` (the extra field
``proposal_log_weight``). Since ``r(. | x)`` integrates to one,
``E_q[p~(x) r(z | x) / q(x, z)] = Z``: the mean weight over every proposal of every chain is an
unbiased estimate of ``Z``, and its standard error is that of a mean of independent draws.
"""

from __future__ import annotations

import warnings

import numpy as np

from numpyro_extras.results.evidence import (
    INFINITE_VARIANCE_PARETO_K,
    UNRELIABLE_PARETO_K,
    Evidence,
    log_mean_and_influence,
    log_mean_exp,
    pareto_tail_index,
)
from numpyro_extras.results.runs import finished_kernel, inference_data
from numpyro_extras.slmc.kernels import VAESLMC

__all__ = ["slmc_kernel", "slmc_log_marginal_likelihood", "slmc_inference_data", "MIN_WEIGHT_ESS"]

# Fewer effective importance weights than this and the standard error itself is unreliable.
MIN_WEIGHT_ESS = 100.0


def slmc_kernel(mcmc) -> VAESLMC:
    """The VAE-SLMC kernel of a finished run.

    :raises TypeError: if the run used another kernel.
    :raises ValueError: if the MCMC has not been run yet.
    """
    return finished_kernel(mcmc, VAESLMC, "nx.VAESLMC")


def proposal_log_weights(mcmc):
    """The log importance weight of every proposal of the run, ``(num_chains, num_draws)``."""
    fields = mcmc.get_extra_fields(group_by_chain=True)
    if "proposal_log_weight" not in fields:
        raise ValueError(
            "The run did not collect 'proposal_log_weight'; keep the kernel's default fields "
            "(do not exclude them with extra_fields)."
        )
    return np.asarray(fields["proposal_log_weight"], dtype=np.float64)


def slmc_log_marginal_likelihood(mcmc, warn=True) -> Evidence:
    """``log Z`` of a VAE-SLMC run: the log mean importance weight of its proposals, with the
    delta-method standard error.

    A ``UserWarning`` says why the estimate may be unreliable: the isometric acceptance (its
    weights use ``Gamma`` of eq. 3, exact only for an isometric VAE, so the estimate is
    approximate), fewer than 100 effective weights (a proposal that covers the posterior
    poorly; the error bar is then itself uncertain), or a Pareto tail index of the weights
    above 0.5 (Vehtari et al., 2024: the weights' variance may be infinite, so the error bar
    may understate the error) or above 0.7 (a heavy tail of rare, huge weights, where the
    proposal is narrower than the posterior: the mean itself is unreliable).

    :param mcmc: a finished run with :class:`~numpyro_extras.VAESLMC`.
    :param bool warn: emit the warnings.
    :return: :class:`~numpyro_extras.Evidence` with the log weights and their importance
        sampling effective sample size ``(sum w)^2 / sum w^2`` and their Pareto ``k``.

    **Example:**

    .. code-block:: python

        evidence = slmc_log_marginal_likelihood(mcmc)
        print(f"{evidence.log_z:.2f} +- {evidence.stderr:.2f}")
    """
    kernel = slmc_kernel(mcmc)
    log_weights = proposal_log_weights(mcmc)
    log_z, stderr, _ = log_mean_exp(log_weights)
    # The importance-sampling ESS (Kish), not the autocorrelation ESS: the proposals are
    # independent, and what limits the estimate is how uneven their weights are.
    ess = 0.0
    if np.isfinite(log_z):
        _, influence = log_mean_and_influence(log_weights)
        ess = float(influence.size / np.mean(influence**2))
    pareto_k = pareto_tail_index(log_weights)
    history = getattr(kernel.proposal, "history", None)
    problems = list(history.problems) if history is not None else []
    if kernel.acceptance == "isometric":
        problems.append(
            "the isometric acceptance weighs proposals with Gamma (eq. 3), exact only for an "
            "isometric VAE, so log Z is approximate; use acceptance='exact'"
        )
    if not np.any(np.isfinite(log_weights)):
        problems.append(
            "no proposal of the run had a finite importance weight: the proposal does not "
            "reach the posterior's mass, so the run bounds log Z by nothing (its standard "
            "error is inf)"
        )
    elif not ess >= MIN_WEIGHT_ESS:
        problems.append(
            f"only {ess:.0f} effective importance weights of {log_weights.size}: the proposal "
            "covers the posterior poorly (a longer run, or more training)"
        )
    if not pareto_k <= UNRELIABLE_PARETO_K:
        problems.append(
            f"the importance weights have a heavy tail (Pareto k = {pareto_k:.2f} > "
            f"{UNRELIABLE_PARETO_K}): rare proposals with huge weights, where the proposal is "
            "narrower than the posterior, decide the mean, and its standard error understates "
            "the error (more training, or a longer run)"
        )
    elif pareto_k > INFINITE_VARIANCE_PARETO_K:
        problems.append(
            f"the importance weights' tail (Pareto k = {pareto_k:.2f} > "
            f"{INFINITE_VARIANCE_PARETO_K}) may have infinite variance, so the standard error "
            "may understate the error (more training shortens the tail)"
        )
    if warn and problems:
        warnings.warn(
            "The VAE-SLMC log Z may be unreliable: " + "; ".join(problems) + ".", stacklevel=3
        )
    return Evidence(
        log_z=log_z,
        stderr=stderr,
        log_weights=log_weights,
        ess=ess,
        pareto_k=pareto_k,
        problems=tuple(problems),
    )


def slmc_inference_data(mcmc):
    """ArviZ ``InferenceData`` of a VAE-SLMC run: :func:`arviz.from_numpyro`'s groups, the
    proposals' log weights and acceptance probabilities in ``sample_stats``, ``log Z`` (with its
    standard error and the weights' Pareto ``k``) and the mean acceptance rate in ``attrs``.

    :param mcmc: a run with :class:`~numpyro_extras.VAESLMC`.
    :return: what the installed ArviZ's :func:`arviz.from_numpyro` returns: ``InferenceData``
        (ArviZ 0.2x) or ``xarray.DataTree`` (ArviZ 1.x).
    """
    kernel = slmc_kernel(mcmc)
    idata = inference_data(mcmc, kernel.model is not None)
    evidence = slmc_log_marginal_likelihood(mcmc, warn=False)
    accept_prob = mcmc.get_extra_fields().get("accept_prob")
    idata.attrs.update(
        {
            "sampler": type(kernel).__name__,
            "acceptance": kernel.acceptance,
            "log_marginal_likelihood": evidence.log_z,
            "log_marginal_likelihood_stderr": evidence.stderr,
            "log_marginal_likelihood_pareto_k": evidence.pareto_k,
            "mean_accept_prob": float("nan")
            if accept_prob is None
            else float(np.mean(accept_prob)),
        }
    )
    return idata
