"""What numpyro_extras reads from NumPyro beyond its public API, in one place.

NumPyro has no public accessor for the settings an ``HMC``/``NUTS`` instance was built with, its
``MCMC`` does not pass ``progress_bar`` to a kernel's ``init``, and the substitution of
unconstrained values that its ``potential_energy`` makes is not public on its own. The functions
here bridge those three gaps and nothing else in the package reaches past NumPyro's public names;
``tests/shell/test_numpyro_adapter.py`` checks each against the installed NumPyro, so a release that
renames what they read fails there, by name, rather than somewhere inside a kernel.
"""

from __future__ import annotations

import inspect
from typing import Any

from numpyro.infer import HMC
from numpyro.infer import util as infer_util
from numpyro.infer.mcmc import MCMC

__all__ = [
    "HMC_DEFAULTS",
    "calling_mcmc_progress_bar",
    "hmc_instance_settings",
    "substitute_unconstrained",
]

# The keyword arguments of the initialisation of NumPyro's functional HMC/NUTS
# (``numpyro.infer.hmc.hmc``'s ``init_kernel``) that configure the move, with NumPyro's
# defaults.
HMC_DEFAULTS = dict(
    step_size=1.0,
    inverse_mass_matrix=None,
    adapt_step_size=True,
    adapt_mass_matrix=True,
    dense_mass=False,
    target_accept_prob=0.8,
    num_steps=None,
    trajectory_length=None,
    max_tree_depth=10,
    find_heuristic_step_size=False,
    forward_mode_differentiation=False,
    regularize_mass_matrix=True,
)


def hmc_instance_settings(kernel: HMC) -> tuple[str, dict[str, Any]]:
    """The algorithm and the settings a NumPyro ``HMC``/``NUTS`` instance was built with.

    NumPyro keeps them in private attributes named after :data:`HMC_DEFAULTS`'s keys.

    :param kernel: a ``numpyro.infer.HMC`` or ``NUTS`` instance.
    :return: ``(algo, settings)``: ``"HMC"`` or ``"NUTS"``, and a dict with one entry per key
        of :data:`HMC_DEFAULTS`.

    **Example:**

    .. code-block:: python

        algo, settings = hmc_instance_settings(NUTS(model, target_accept_prob=0.9))
        # ("NUTS", {"target_accept_prob": 0.9, "max_tree_depth": 10, ...})
    """
    algo = kernel._algo
    return algo, {name: getattr(kernel, "_" + name) for name in HMC_DEFAULTS}


def calling_mcmc_progress_bar(default=True):
    """The ``progress_bar`` of the :class:`~numpyro.infer.MCMC` running this kernel, if any.

    NumPyro does not pass ``progress_bar`` to a kernel's ``init``; work that runs there (a base
    fit, a training) reads it from the ``MCMC`` found up the call stack, so that
    ``progress_bar=False`` silences every bar.

    :param bool default: what to return outside an ``MCMC`` run.
    :return: bool.

    **Example:**

    .. code-block:: python

        fit_base(key, model, args, progress_bar=calling_mcmc_progress_bar())
    """
    frame = inspect.currentframe()
    try:
        while frame is not None:
            caller = frame.f_locals.get("self")
            if isinstance(caller, MCMC):
                return bool(caller.progress_bar)
            frame = frame.f_back
    finally:
        del frame
    return default


def substitute_unconstrained(model, params):
    """``model`` with its latent sites set from unconstrained values, as NumPyro's
    :func:`~numpyro.infer.util.potential_energy` sets them: each site's value is its support's
    bijection of ``params[name]``, and the log Jacobian determinant of that bijection enters the
    trace as a factor site named ``_{name}_log_det``.

    :param model: a NumPyro model.
    :param dict params: unconstrained values of (some of) its latent sites.
    :return: the substituted model; its log density (e.g. by
        :func:`~numpyro.infer.util.compute_log_probs`) is ``-potential_energy`` split per site.

    **Example:**

    .. code-block:: python

        substituted = substitute_unconstrained(model, {"scale": 0.3})
        log_probs, _ = compute_log_probs(substituted, (), {}, {})
        # {"_scale_log_det": 0.3, "scale": log HalfNormal(exp(0.3))}
    """
    return infer_util._unconstrain_params(model, params)
