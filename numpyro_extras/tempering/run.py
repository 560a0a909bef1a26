"""What every estimator reads from a finished continuous tempering run.

The kernels' sample field is an exact posterior chain (the target replica), so
``mcmc.get_samples()`` needs no weights. The tempered chain is in the extra fields
``tempered_z``, ``beta``, ``delta`` and ``log_zeta``: draw ``t`` of chain ``c`` has target weight
``zeta_c w1(Delta_t)`` and base weight ``w0(Delta_t)``, with ``w1 = p(beta = 1 | x)`` and
``w0 = p(beta = 0 | x)``. This module is the one place that knows those field names and which
kernels write them.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from numpyro_extras.results.runs import finished_kernel
from numpyro_extras.tempering.kernels import GibbsContinuousTempering, JointContinuousTempering
from numpyro_extras.tempering.weights import log_base_weight, log_target_weight

__all__ = [
    "tempering_kernel",
    "chain_field",
    "deltas",
    "unnormalised_target_log_weights",
    "base_log_weights",
    "tempered_draws",
    "flat_tempered_draws",
]

_KERNELS = (JointContinuousTempering, GibbsContinuousTempering)


def tempering_kernel(mcmc):
    """The continuous tempering kernel of a finished MCMC run.

    :param mcmc: a :class:`~numpyro.infer.MCMC` run with a continuous tempering kernel.
    :return: the run's :class:`~numpyro_extras.JointContinuousTempering` or
        :class:`~numpyro_extras.GibbsContinuousTempering`.
    :raises TypeError: if the run used another kernel.
    :raises ValueError: if the MCMC has not been run yet.
    """
    return finished_kernel(
        mcmc,
        _KERNELS,
        "nx.JointContinuousTempering or nx.GibbsContinuousTempering",
        ran=lambda kernel: kernel.base is not None,
    )


def chain_field(mcmc, name):
    """One extra field collected by the run, with a leading chain dimension.

    :param mcmc: a finished run with a continuous tempering kernel.
    :param str name: the field, e.g. ``"beta"``, ``"delta"``, ``"log_zeta"``.
    :return: the field's values, shape ``(num_chains, num_draws, ...)``.
    :raises ValueError: if the run did not collect the field.
    """
    fields = mcmc.get_extra_fields(group_by_chain=True)
    if name not in fields:
        raise ValueError(
            f"The run did not collect {name!r}; keep the kernel's default fields "
            "(do not exclude them with extra_fields)."
        )
    return fields[name]


def deltas(mcmc):
    """``Delta = phi + log zeta - psi`` of every tempered draw.

    :param mcmc: a finished run with a continuous tempering kernel.
    :return: float64 array ``(num_chains, num_draws)``.
    """
    return np.asarray(chain_field(mcmc, "delta"), dtype=np.float64)


def unnormalised_target_log_weights(mcmc):
    """``log zeta_c + log w1`` of every tempered draw: the target weights of eqs. 20-21 before
    normalisation, on the scale on which their mean estimates ``Z / C_c`` (eq. 19).

    :param mcmc: a finished run with a continuous tempering kernel.
    :return: float64 array ``(num_chains, num_draws)``.
    """
    log_zeta = np.asarray(chain_field(mcmc, "log_zeta"), dtype=np.float64)
    return log_zeta + np.asarray(log_target_weight(deltas(mcmc)), dtype=np.float64)


def base_log_weights(mcmc):
    """``log w0`` of every tempered draw, the base weights of eqs. 20 and 22.

    :param mcmc: a finished run with a continuous tempering kernel.
    :return: float64 array ``(num_chains, num_draws)``.
    """
    return np.asarray(log_base_weight(deltas(mcmc)), dtype=np.float64)


def tempered_draws(mcmc, group_by_chain=False):
    """The tempered chain's draws on the unconstrained space, as the kernel collected them.

    :param mcmc: a finished run with a continuous tempering kernel.
    :param bool group_by_chain: keep a leading chain dimension.
    :return: dict of unconstrained site values (a flat array for a ``potential_fn`` kernel).
    """
    if group_by_chain:
        return chain_field(mcmc, "tempered_z")
    return mcmc.get_extra_fields()["tempered_z"]


def flat_tempered_draws(mcmc):
    """The tempered draws, pooled over chains, as flat unconstrained vectors.

    :param mcmc: a finished run with a continuous tempering kernel.
    :return: float64 array ``(num_chains * num_draws, D)``, rows in the order of
        ``deltas(mcmc).ravel()``.
    """
    draws = tempered_draws(mcmc)
    if tempering_kernel(mcmc).model is None:
        return np.asarray(draws, dtype=np.float64)
    return np.asarray(jax.vmap(lambda values: ravel_pytree(values)[0])(draws), dtype=np.float64)
