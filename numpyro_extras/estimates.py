"""The estimators a user calls on any finished run, whichever kernel made it.

``nx.log_marginal_likelihood(mcmc)`` and ``nx.to_inference_data(mcmc)`` read the run's kernel
and hand it to its family: continuous tempering (eq. 20 of Graham & Storkey), replica exchange
(stepping stone over the ladder) or VAE-SLMC (the proposals' importance weights). A run of a
kernel that gives no ``log Z`` (NUTS, ACS, the Ai-sampler, ...) still has its InferenceData.
"""

from __future__ import annotations

from numpyro_extras.exchange.diagnostics import (
    exchange_inference_data,
    exchange_log_marginal_likelihood,
)
from numpyro_extras.exchange.kernels import ReplicaExchange
from numpyro_extras.model.potential import check_proper_prior
from numpyro_extras.results.evidence import Evidence
from numpyro_extras.results.runs import inference_data
from numpyro_extras.shell.validation import check_mcmc
from numpyro_extras.slmc.evidence import slmc_inference_data, slmc_log_marginal_likelihood
from numpyro_extras.slmc.kernels import VAESLMC
from numpyro_extras.tempering import diagnostics as tempering_diagnostics
from numpyro_extras.tempering import posterior as tempering_posterior
from numpyro_extras.tempering.kernels import GibbsContinuousTempering, JointContinuousTempering

__all__ = ["log_marginal_likelihood", "to_inference_data", "has_own_log_z"]

_ESTIMATING_KERNELS = (
    "nx.JointContinuousTempering, nx.GibbsContinuousTempering, nx.ReplicaExchange or nx.VAESLMC"
)


def has_own_log_z(mcmc) -> bool:
    """Whether the run's kernel estimates ``log Z`` itself (:func:`log_marginal_likelihood`
    reads it); other runs' ``log Z`` comes from :func:`~numpyro_extras.bridge_sampling`.

    :param mcmc: a :class:`~numpyro.infer.MCMC`.
    :return: bool.
    """
    return isinstance(
        mcmc.sampler,
        JointContinuousTempering | GibbsContinuousTempering | ReplicaExchange | VAESLMC,
    )


def _check_estimating_kernel(mcmc):
    if not has_own_log_z(mcmc):
        raise TypeError(
            f"{type(mcmc.sampler).__name__} gives no log Z of its own: nx.bridge_sampling(mcmc) "
            "estimates it from this run's draws, or run the model with "
            f"{_ESTIMATING_KERNELS} (nx.ais estimates it without an MCMC run)."
        )


def log_marginal_likelihood(mcmc, check_base=True, warn=True) -> Evidence:
    """``log Z``, the log marginal likelihood of the model, with its standard error, from a
    finished run of a continuous tempering or replica-exchange kernel.

    The run is checked first; each problem found (chains that never reach one end of the
    temperature range, few round trips, a gap of the ladder that swaps rarely, divergent
    transitions, a tiny effective sample size, chains that disagree, a failed base-moment check)
    is reported in a ``UserWarning`` that says why the estimate may be unreliable.

    :param mcmc: a finished :class:`~numpyro.infer.MCMC` run with
        :class:`~numpyro_extras.JointContinuousTempering`,
        :class:`~numpyro_extras.GibbsContinuousTempering`,
        :class:`~numpyro_extras.ReplicaExchange` or :class:`~numpyro_extras.VAESLMC`.
    :param bool check_base: (continuous tempering) include the base-moment check (eq. 22).
    :param bool warn: emit the warnings.
    :return: :class:`~numpyro_extras.Evidence` (``log_z``, ``stderr``, ...).
    :raises ValueError: for a model with an improper prior (``ImproperUniform``), whose
        marginal likelihood is not defined.

    **Example:**

    .. code-block:: python

        nx.log_marginal_likelihood(mcmc)  # a tempering run: Evidence(log_z=..., stderr=...)
        nx.log_marginal_likelihood(exchange_mcmc)  # replica exchange: stepping stone
    """
    check_mcmc(mcmc, "nx.log_marginal_likelihood", finished=False)
    _check_estimating_kernel(mcmc)
    if mcmc.sampler.model is not None:
        # NumPyro's MCMC keeps the arguments of its last run (ArviZ's from_numpyro reads them).
        check_proper_prior(
            mcmc.sampler.model,
            getattr(mcmc, "_args", ()),
            getattr(mcmc, "_kwargs", {}),
            "nx.log_marginal_likelihood",
        )
    if isinstance(mcmc.sampler, ReplicaExchange):
        return exchange_log_marginal_likelihood(mcmc, warn=warn)
    if isinstance(mcmc.sampler, VAESLMC):
        return slmc_log_marginal_likelihood(mcmc, warn=warn)
    return tempering_diagnostics.log_marginal_likelihood(mcmc, check_base=check_base, warn=warn)


def to_inference_data(mcmc, rng_key=None):
    """ArviZ ``InferenceData`` of a finished run of any kernel: :func:`arviz.from_numpyro`'s
    groups (so ``az.summary``, ``az.loo`` and ``az.compare`` work as after NUTS) with the
    kernel's extra fields in ``sample_stats``; for a kernel that estimates ``log Z``, what it
    adds (the tempered chain, or the ladder's swap rates) and ``log Z`` in ``attrs``.

    :param mcmc: a finished :class:`~numpyro.infer.MCMC` run (of a kernel built on a model, or on
        a ``potential_fn``: then the draws are the ``posterior`` group as they are).
    :param rng_key: unused; kept so that existing calls keep working.
    :return: what the installed ArviZ's :func:`arviz.from_numpyro` returns: ``InferenceData``
        (ArviZ 0.2x) or ``xarray.DataTree`` (ArviZ 1.x); ``attrs["sampler"]`` names the kernel.

    **Example:**

    .. code-block:: python

        import arviz as az

        idata = nx.to_inference_data(mcmc)
        az.summary(idata), az.loo(idata)  # as after NUTS
        idata.attrs["log_marginal_likelihood"]  # log Z, where the kernel gives one
    """
    sampler = check_mcmc(mcmc, "nx.to_inference_data").sampler
    if isinstance(sampler, ReplicaExchange):
        return exchange_inference_data(mcmc)
    if isinstance(sampler, VAESLMC):
        return slmc_inference_data(mcmc)
    if isinstance(sampler, JointContinuousTempering | GibbsContinuousTempering):
        return tempering_posterior.to_inference_data(mcmc, rng_key)
    idata = inference_data(mcmc, getattr(sampler, "model", None) is not None)
    idata.attrs["sampler"] = type(sampler).__name__
    return idata
