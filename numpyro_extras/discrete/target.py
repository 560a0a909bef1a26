"""A model or a potential read into the terms of the discrete samplers.

:func:`model_target` and :func:`potential_target` build the :class:`DiscreteTarget` that
:class:`~numpyro_extras.ACS`, :class:`~numpyro_extras.DMALA` and replica exchange over ACS
moves sample: the discrete variables, each with the way its proposal gets the change of ``U``
per coordinate (gradients, or exact differences), the log density, prior draws and the maps
back to the model's site values.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.util import not_jax_tracer

from numpyro_extras.discrete.proposal import KINDS, DiscreteVariable, decode, local_differences_fn
from numpyro_extras.model.potential import discrete_latent_model
from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.kernel import conditioning_values, without_conditioning

__all__ = ["GRAD_MODES", "DiscreteTarget", "model_target", "potential_target"]

# How the proposal gets the change of U per coordinate:
#   auto      gradients for Bernoulli and one-hot sites when the model can be differentiated in
#             them (checked once by tracing) and the first-order differences match the exact
#             ones at a few prior draws up to an offset common to every move; exact differences
#             otherwise and for Categorical
#   gradient  gradients for Bernoulli and one-hot sites (an error if the model cannot be
#             differentiated in them); Categorical sites still use exact differences
#   exact     exact differences everywhere: d (K - 1) extra evaluations of the model per step
GRAD_MODES = ("auto", "gradient", "exact")
# What tracing a model with float values for a discrete site raises when the model reads the
# value as an integer (an index, a count, a Python int). Any other error is the model's own and
# propagates; one of these raised whatever the dtype is raised again by the exact differences.
NOT_DIFFERENTIABLE_ERRORS = (TypeError, ValueError, IndexError)


class DiscreteTarget(NamedTuple):
    """What the kernel needs of a model or a potential, built once per set of model arguments
    (:meth:`ACS.discrete_target`)."""

    variables: dict
    log_density_fn: Any  # (x, values) -> U at the model arguments it was prepared for
    log_density_for: Any  # (model_args, model_kwargs) -> log_density_fn for other arguments
    sample_initial_fn: Any  # (key, n) -> (x (n, dim), indices dict (n, ...))
    site_values_fn: Any  # indices -> values in the model's / user's representation
    continuous_unravel_fn: Any  # flat x -> dict of unconstrained continuous values
    constrain_fn: Any  # z -> constrained values
    dimension: int
    continuous_sites: tuple = ()
    model_arguments: tuple = ((), {})  # the (model_args, model_kwargs) it was prepared for
    conditioned: bool = False  # a block of NumPyro's Gibbs, conditioned on other sites
    split: Any = None  # the model's prior/likelihood split (SplitModel; None for a potential)


def potential_target(potential_fn, variables, grad_mode) -> DiscreteTarget:
    """The discrete target of a potential over ``variables``.

    :param potential_fn: ``values -> U`` (``values`` a dict of the variables, or the single
        variable's value).
    :param variables: a :class:`~numpyro_extras.discrete.proposal.DiscreteVariable` or a dict
        of them.
    :param str grad_mode: one of :data:`GRAD_MODES`.
    :return: :class:`DiscreteTarget`.
    """
    given = variables
    single = isinstance(given, DiscreteVariable)
    variables = {"x": given} if single else dict(given)
    for name, variable in variables.items():
        if variable.kind not in KINDS:
            raise ValueError(f"Variable {name!r}: kind must be one of {KINDS}.")
        if variable.kind == "binary" and variable.num_values != 2:
            raise ValueError(f"Variable {name!r} is binary but has {variable.num_values}.")
        if variable.kind == "categorical" or grad_mode == "exact":
            variables[name] = variable._replace(gradient=False)

    def log_density_fn(x, values):
        return -potential_fn(values["x"] if single else values)

    def log_density_for(model_args, model_kwargs):
        return log_density_fn

    def sample_initial_fn(key, num):
        keys = jax.random.split(key, len(variables))
        indices = {
            name: jax.random.randint(k, (num,) + tuple(v.shape), 0, v.num_values)
            for (name, v), k in zip(variables.items(), keys, strict=True)
        }
        return jnp.zeros((num, 0)), indices

    def site_values_fn(indices):
        values = {}
        for name, variable in variables.items():
            if variable.kind == "one_hot":
                values[name] = jax.nn.one_hot(indices[name], variable.num_values)
            else:
                values[name] = indices[name]
        return values["x"] if single else values

    return DiscreteTarget(
        variables,
        log_density_fn,
        log_density_for,
        sample_initial_fn,
        site_values_fn,
        lambda x: {},
        lambda z: z,
        0,
    )


def model_target(model, model_args, model_kwargs, grad_mode, with_inner_kernel) -> DiscreteTarget:
    """The discrete target of a NumPyro model at these arguments: its discrete sites as
    variables, each with the way it gets its differences (``grad_mode``), the model's log
    density and prior/likelihood split, prior draws and the maps back to site values.

    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments (a Gibbs block's conditioning among them).
    :param str grad_mode: one of :data:`GRAD_MODES`.
    :param bool with_inner_kernel: an inner HMC/NUTS move samples the continuous sites.
    :return: :class:`DiscreteTarget`.
    :raises ValueError: when the model has continuous sites and no inner kernel moves them, or
        an inner kernel and no continuous sites, or ``grad_mode="gradient"`` and a site the
        model cannot be differentiated in.
    """
    latent = discrete_latent_model(
        jax.random.PRNGKey(0), model, model_args, model_kwargs, kernel_name="ACS"
    )
    split = latent.split
    if split.continuous_sites and not with_inner_kernel:
        raise ValueError(
            f"The model has continuous latent sites {list(split.continuous_sites)}; ACS "
            "moves discrete sites only. Pass inner_kernel=NUTS (or HMC) to sample them too."
        )
    if not split.continuous_sites and with_inner_kernel:
        raise ValueError(
            "inner_kernel moves continuous latent sites, but the model has none (its latent "
            "sites are all discrete): use nx.ACS(model) without inner_kernel."
        )
    layouts = {layout.name: layout for layout in latent.layouts}
    variables = {}
    x_prototype = jnp.zeros(split.dimension)
    for name, layout in layouts.items():
        use_gradient = layout.kind != "categorical" and grad_mode != "exact"
        if use_gradient and grad_mode == "auto":
            use_gradient = _first_order_is_faithful(latent, layout)
        elif use_gradient and not _differentiable(latent, layouts, name, x_prototype):
            raise ValueError(
                f"grad_mode='gradient', but the model cannot be differentiated in the "
                f"discrete site {name!r} (it probably indexes with its value); use "
                "grad_mode='auto' or 'exact'."
            )
        dtype = None if use_gradient else layout.dtype
        variables[name] = DiscreteVariable(
            layout.shape, layout.num_values, layout.kind, use_gradient, dtype
        )

    def site_values_fn(indices):
        values = {}
        for name, layout in layouts.items():
            if layout.kind == "one_hot":
                values[name] = jax.nn.one_hot(indices[name], layout.num_values, dtype=layout.dtype)
            else:
                values[name] = indices[name].astype(layout.dtype)
        return values

    def sample_initial_fn(key, num):
        x, discrete = split.sample_prior_fn(key, num)
        return x, jax.vmap(partial(decode, variables))(discrete)

    continuous = split.continuous_sites

    def constrain_fn(z):
        x = ravel_pytree({name: z[name] for name in continuous})[0]
        return latent.constrain_fn(x, {name: z[name] for name in layouts})

    return DiscreteTarget(
        variables,
        latent.log_density_fn,
        latent.log_density_for,
        sample_initial_fn,
        site_values_fn,
        split.unravel_fn,
        constrain_fn,
        split.dimension,
        continuous,
        (model_args, without_conditioning(model_kwargs)),
        bool(conditioning_values(model_kwargs)),
        split,
    )


def _differentiable(latent, layouts, name, x):
    """Whether the model's log density can be traced and differentiated with float values
    for the site ``name`` (the others at their sampled dtype)."""
    values = {}
    for other, layout in layouts.items():
        if layout.kind == "one_hot":
            values[other] = jnp.zeros(layout.shape + (layout.num_values,), layout.dtype)
        else:
            values[other] = jnp.zeros(layout.shape, layout.dtype)
    layout = layouts[name]
    float_value = jnp.zeros(jnp.shape(values[name]), jnp.result_type(float))

    def log_density_in(value):
        return latent.log_density_fn(x, {**values, name: value})

    try:
        jax.eval_shape(jax.grad(log_density_in), float_value)
    except NOT_DIFFERENTIABLE_ERRORS:
        return False
    return layout.kind in ("binary", "one_hot")


# Prior draws at which grad_mode="auto" compares first-order and exact differences, and the
# median error (in nats) of the first-order ones, beyond a common offset, above which a site gets
# exact differences.
NUM_CHECK_POINTS = 4
FIRST_ORDER_TOLERANCE = 0.5


def _moved_values(layout, index):
    """Every coordinate moved to another value: the complement of a binary state, the next class
    of a one-hot one."""
    return (index + 1) % layout.num_values


def _first_order_is_faithful(latent, layout) -> bool:
    """Whether the model can be differentiated in one binary or one-hot discrete site and the
    gradient's first-order differences of ``U`` (ACS paper eq. 4) are close to the exact ones at a
    few prior draws, up to an error common to every move.

    Such a common error ``delta`` shifts every logit of eq. 5 by ``beta delta`` per changed
    coordinate, exactly as the distance term ``D / (2 alpha)`` does (``D = 1`` per flip or class
    change): the proposal is the exact-difference one at another ``alpha``, which the tuner sets.
    It arises wherever ``U`` is quadratic in each coordinate with the same curvature everywhere,
    e.g. a likelihood ``N(y | mu (2 z - 1), sigma)``, off by ``2 mu^2 / sigma^2`` per flip. So the
    offset is the median error over the moves at each continuous value, taken at the drawn
    discrete state and at every coordinate moved (an error that depends on a coordinate's own
    value, as through a comparison, differs between the two), and the rest is what must be small.

    The remainder is zero for a log density linear or uniformly quadratic in each coordinate
    (Ising and Boltzmann energies, Gaussian likelihoods of such values), and large where the model
    reads the value through a comparison (``jnp.where(z == 1, ...)`` has a zero gradient) or very
    non-linearly (a spike-and-slab scale ``spike + z (slab - spike)``): there the proposal would
    almost never suggest the moves the target favours.
    """
    if layout.kind not in ("binary", "one_hot"):
        return False
    name = layout.name
    first_order = DiscreteVariable(layout.shape, layout.num_values, layout.kind, True, None)
    exact = DiscreteVariable(layout.shape, layout.num_values, layout.kind, False, layout.dtype)

    def errors_at(x, discrete):
        def log_density(values):
            return latent.log_density_fn(x, {**discrete, **values})

        def signed_errors(index):
            approximate = local_differences_fn(log_density, {name: first_order})(index)[1][name]
            exact_differences = local_differences_fn(log_density, {name: exact})(index)[1][name]
            moves = jnp.isfinite(exact_differences) & (exact_differences != 0.0)
            return jnp.where(moves, approximate - exact_differences, jnp.nan)

        index = decode({name: exact}, discrete)[name]
        errors = jnp.stack(
            [signed_errors({name: index}), signed_errors({name: _moved_values(layout, index)})]
        )
        return jnp.abs(errors - jnp.nanmedian(errors))

    def errors_from(key):
        return jax.vmap(errors_at)(*latent.split.sample_prior_fn(key, NUM_CHECK_POINTS))

    # Drawing the points and comparing in one compiled call: run op by op, the prior draws alone
    # would compile every sampling operation of the model separately.
    try:
        errors = quick_jit(errors_from)(jax.random.PRNGKey(0))
    except NOT_DIFFERENTIABLE_ERRORS:
        return False
    if not not_jax_tracer(errors):
        # Conditioning values traced by pmap (a Gibbs block under chain_method="parallel"):
        # nothing to compare, keep the gradient.
        return True
    errors = np.asarray(errors)
    errors = errors[np.isfinite(errors)]
    return errors.size == 0 or float(np.median(errors)) <= FIRST_ORDER_TOLERANCE
