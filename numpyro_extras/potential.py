"""Turn a NumPyro model into a flat unconstrained potential, and map flat draws back to its sites.

Every kernel of numpyro_extras works on one flat vector ``x`` of the model's unconstrained latent
values. This module is the single place that builds that view of a model (with NumPyro's own
:func:`~numpyro.infer.util.initialize_model`) and that maps draws back to the model's site names,
so no kernel carries its own copy of the plumbing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.handlers import seed, trace
from numpyro.infer.util import init_to_uniform, initialize_model, unconstrain_fn

__all__ = [
    "FlatModel",
    "discrete_latent_sites",
    "flatten_model",
    "flat_model_from_potential",
    "check_finite_potential",
]


class FlatModel(NamedTuple):
    """A model seen as a potential on one flat vector of unconstrained latent values.

    :param potential_fn: ``x -> -log density`` of the (unnormalised) target at flat ``x``,
        Jacobians of the constraining transforms included.
    :param unravel_fn: flat ``x`` -> dict of unconstrained site values (identity without a model).
    :param constrain_fn: dict of unconstrained values -> dict of constrained latent and
        deterministic site values (identity without a model).
    :param ravel_fn: dict of constrained latent values -> flat unconstrained ``x``
        (identity without a model).
    :param initial_position: a flat point where the potential is finite.
    :param latent_sites: names of the latent sites, in the order they appear in ``x``.
    """

    potential_fn: Callable[[jax.Array], jax.Array]
    unravel_fn: Callable[[jax.Array], Any]
    constrain_fn: Callable[[Any], Any]
    ravel_fn: Callable[[Any], jax.Array]
    initial_position: jax.Array
    latent_sites: tuple[str, ...]

    @property
    def dimension(self) -> int:
        """Number of unconstrained latent dimensions."""
        return int(self.initial_position.shape[-1])


def _model_trace(model, model_args, model_kwargs):
    return trace(seed(model, jax.random.PRNGKey(0))).get_trace(*model_args, **model_kwargs)


def discrete_latent_sites(model, model_args=(), model_kwargs=None) -> list[str]:
    """Names of the latent (unobserved) sample sites of ``model`` with a discrete support.

    :param model: a NumPyro model.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :return: the site names, in the order the model samples them.

    **Example:**

    .. code-block:: python

        def model():
            numpyro.sample("k", dist.Bernoulli(0.5))
            numpyro.sample("x", dist.Normal())

        discrete_latent_sites(model)  # ["k"]
    """
    model_trace = _model_trace(model, model_args, model_kwargs or {})
    return [
        name
        for name, site in model_trace.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and not site["infer"].get("is_auxiliary", False)
        and site["fn"].support.is_discrete
    ]


def flatten_model(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    init_strategy=init_to_uniform,
    kernel_name="this kernel",
) -> FlatModel:
    """Build the flat unconstrained potential of a model with continuous latent sites.

    :param jax.random.PRNGKey rng_key: key for the initial point.
    :param model: a NumPyro model whose latent sites are all continuous.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param init_strategy: a NumPyro init strategy for the initial point.
    :param str kernel_name: named in the error raised for discrete sites.
    :return: a :class:`FlatModel`.
    :raises ValueError: if the model has discrete latent sites or no latent site.

    **Example:**

    .. code-block:: python

        flat = flatten_model(jax.random.PRNGKey(0), model, (data,))
        flat.potential_fn(flat.initial_position)
    """
    model_kwargs = {} if model_kwargs is None else model_kwargs
    discrete = discrete_latent_sites(model, model_args, model_kwargs)
    if discrete:
        raise ValueError(
            f"{kernel_name} needs continuous latent sites, but the model has discrete latent "
            f"sites {discrete}. Marginalise them out (numpyro.contrib.funsor enumeration), or use "
            "a kernel for discrete latents such as numpyro's DiscreteHMCGibbs."
        )
    model_info = initialize_model(
        rng_key,
        model,
        model_args=model_args,
        model_kwargs=model_kwargs,
        init_strategy=init_strategy,
        dynamic_args=False,
    )
    initial_values = model_info.param_info.z
    if not initial_values:
        raise ValueError(f"{kernel_name} needs a model with at least one latent sample site.")
    initial_position, unravel_fn = ravel_pytree(initial_values)
    dict_potential = model_info.potential_fn

    def potential_fn(position):
        return dict_potential(unravel_fn(position))

    def ravel_fn(constrained_values):
        latent = {name: constrained_values[name] for name in initial_values}
        unconstrained = unconstrain_fn(model, model_args, model_kwargs, latent)
        return ravel_pytree(unconstrained)[0]

    return FlatModel(
        potential_fn=potential_fn,
        unravel_fn=unravel_fn,
        constrain_fn=model_info.postprocess_fn,
        ravel_fn=ravel_fn,
        initial_position=initial_position,
        latent_sites=tuple(initial_values),
    )


def _identity(value):
    return value


def flat_model_from_potential(potential_fn, initial_position) -> FlatModel:
    """Wrap a user potential on flat vectors into a :class:`FlatModel`.

    :param potential_fn: ``x -> -log density`` for a flat 1-D array ``x``.
    :param initial_position: a flat point of the right dimension.
    :return: a :class:`FlatModel` whose site maps are the identity.
    """
    initial_position = jnp.asarray(initial_position)
    if initial_position.ndim != 1:
        raise ValueError(
            "potential_fn kernels work on flat 1-D positions; got an initial position of shape "
            f"{initial_position.shape}."
        )
    return FlatModel(
        potential_fn=potential_fn,
        unravel_fn=_identity,
        constrain_fn=_identity,
        ravel_fn=_identity,
        initial_position=initial_position,
        latent_sites=(),
    )


def check_finite_potential(potential_fn, position, what="the initial point"):
    """Raise a clear error when the potential or its gradient is not finite at ``position``.

    :param potential_fn: ``x -> -log density``.
    :param position: a flat point (no batch dimension), concrete (not traced).
    :param str what: names the point in the error message.
    """
    value, gradient = jax.value_and_grad(potential_fn)(position)
    value = np.asarray(value)
    if value.shape != ():
        raise ValueError(
            f"The potential must return a scalar, but returned shape {value.shape} at {what}."
        )
    if not (np.isfinite(value) and np.all(np.isfinite(np.asarray(gradient)))):
        raise ValueError(
            f"The potential energy is not finite at {what} (value {float(value)}, gradient "
            f"finite: {bool(np.all(np.isfinite(np.asarray(gradient))))}). Check the model's "
            "support, its data, or the initial values."
        )
