"""Turn a NumPyro model into a flat unconstrained potential, and map flat draws back to its sites.

Every kernel of numpyro_extras works on one flat vector ``x`` of the model's unconstrained latent
values. This module is the single place that builds that view of a model (with NumPyro's own
:func:`~numpyro.infer.util.initialize_model`) and that maps draws back to the model's site names,
so no kernel carries its own copy of the plumbing.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.extend.core import jaxpr_as_fun
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to
from numpyro.handlers import condition, infer_config, seed, substitute, trace
from numpyro.infer.gibbs import prototype_trace
from numpyro.infer.util import (
    compute_log_probs,
    init_to_uniform,
    initialize_model,
    potential_energy,
    unconstrain_fn,
)
from numpyro.primitives import Messenger

from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.numpyro_adapter import substitute_unconstrained
from numpyro_extras.shell.validation import check_model, check_model_arguments, check_rng_key

__all__ = [
    "check_observed_data",
    "check_proper_prior",
    "improper_prior_sites",
    "FlatModel",
    "SplitModel",
    "split_model",
    "enumerated_support",
    "discrete_latent_sites",
    "continuous_latent_sites",
    "flatten_model",
    "flat_model_from_potential",
    "check_finite_potential",
    "evaluation_flops",
    "site_shapes",
    "flat_potential_for",
    "flat_target",
    "check_trained_for",
    "trace_once",
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
    :param sample_prior_fn: ``(rng_key, num_samples) -> x``, exact prior draws on the flat
        space, one key per draw (``None`` without a model).
    :param model_trace: NumPyro's trace of the model from its initialisation, so that other views
        of the model read its sites without running it again (``None`` without a model).

    **Example:**

    .. code-block:: python

        def model():
            numpyro.sample("scale", dist.HalfNormal(1.0))


        flat = nx.flatten_model(jax.random.PRNGKey(0), model)
        flat.latent_sites  # ("scale",)
        flat.constrain_fn(flat.unravel_fn(flat.initial_position))  # {"scale": ...}, positive
    """

    potential_fn: Callable[[jax.Array], jax.Array]
    unravel_fn: Callable[[jax.Array], Any]
    constrain_fn: Callable[[Any], Any]
    ravel_fn: Callable[[Any], jax.Array]
    initial_position: jax.Array
    latent_sites: tuple[str, ...]
    sample_prior_fn: Callable[[jax.Array, int], jax.Array] | None = None
    model_trace: Any = None

    @property
    def dimension(self) -> int:
        """Number of unconstrained latent dimensions."""
        return int(self.initial_position.shape[-1])


def _model_trace(model, model_args, model_kwargs):
    # NumPyro's prototype trace draws with init_to_sample, which also handles sites that cannot
    # be sampled (ImproperUniform).
    return prototype_trace(model, jax.random.PRNGKey(0), model_args, model_kwargs)


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
    return _names_from_trace(_discrete_latent_names, model, model_args, model_kwargs or {})


def continuous_latent_sites(model, model_args=(), model_kwargs=None) -> list[str]:
    """Names of the latent sample sites of ``model`` that :func:`discrete_latent_sites` does not
    list (continuous supports), in the order the model samples them; same arguments. E.g.
    ``["x"]`` for a model with ``k ~ Bernoulli`` and ``x ~ Normal``.
    """

    def continuous_names(model_trace):
        discrete = set(_discrete_latent_names(model_trace))
        return [name for name in _latent_names(model_trace) if name not in discrete]

    return _names_from_trace(continuous_names, model, model_args, model_kwargs or {})


def improper_prior_sites(model, model_args=(), model_kwargs=None) -> list[str]:
    """Names of the latent sites of ``model`` whose prior is improper (``ImproperUniform``,
    directly or wrapped by ``expand``, ``to_event`` or a mask): with one, the marginal
    likelihood ``log Z`` is not defined, though the posterior may be.

    :param model: a NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :return: list of site names, in the model's order.

    **Example:**

    .. code-block:: python

        def model():
            numpyro.sample("x", dist.ImproperUniform(dist.constraints.real, (), ()))

        improper_prior_sites(model)  # ["x"]
    """

    def improper_names(model_trace):
        names = []
        for name in _latent_names(model_trace):
            fn = model_trace[name]["fn"]
            while not isinstance(fn, dist.ImproperUniform) and hasattr(fn, "base_dist"):
                fn = fn.base_dist
            if isinstance(fn, dist.ImproperUniform):
                names.append(name)
        return names

    return _names_from_trace(improper_names, model, model_args, model_kwargs or {})


def check_proper_prior(model, model_args, model_kwargs, who):
    """Raise a clear error when ``model`` has a latent site with an improper prior, for a
    caller that estimates ``log Z``.

    :raises ValueError: naming the sites and ``who``.
    """
    improper = improper_prior_sites(model, model_args, model_kwargs)
    if improper:
        raise ValueError(
            f"{who} estimates the marginal likelihood log Z, which an improper prior leaves "
            f"undefined: the sites {improper} have one (ImproperUniform). Give them a proper "
            "prior to compare models by evidence; the posterior draws of a sampler do not need "
            "one. For the normalising constant of a density written as ImproperUniform sites "
            "plus numpyro.factor, build the kernel on potential_fn= (a potential's constant is "
            "defined)."
        )


def _names_from_trace(names_of, model, model_args, model_kwargs) -> list:
    """``names_of(trace)`` (a list) of the model's prototype trace, traced abstractly where it
    can be.

    Site names and supports do not depend on the values drawn, and an abstract trace
    (``jax.eval_shape``) compiles nothing, where running the model op by op compiles each of
    its operations on first use. A model whose Python code needs concrete values is run
    eagerly.
    """
    names = []

    def names_only():
        names.extend(names_of(_model_trace(model, model_args, model_kwargs)))
        return jnp.zeros(())

    try:
        jax.eval_shape(names_only)
    except Exception:  # noqa: BLE001 -- the eager trace below raises the model's own errors
        return names_of(_model_trace(model, model_args, model_kwargs))
    return names


def _latent_names(model_trace) -> list[str]:
    return [
        name
        for name, site in model_trace.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and not site["infer"].get("is_auxiliary", False)
    ]


def _latent_site_kinds(model_trace) -> list[tuple[str, bool]]:
    """``(name, is_discrete)`` of every latent site, in the model's order."""
    discrete = set(_discrete_latent_names(model_trace))
    return [(name, name in discrete) for name in _latent_names(model_trace)]


def _latent_site_enumerability(model_trace) -> list[tuple[str, bool, bool]]:
    """``(name, is_discrete, can_enumerate)`` of every latent site, in the model's order."""
    return [
        (name, is_discrete, is_discrete and model_trace[name]["fn"].has_enumerate_support)
        for name, is_discrete in _latent_site_kinds(model_trace)
    ]


def _discrete_latent_names(model_trace) -> list[str]:
    # Wider than NumPyro's gibbs.discrete_latent_sites (enumerable supports only): a Poisson
    # site must be found too, so that the kernels can refuse it by name.
    return [
        name for name in _latent_names(model_trace) if model_trace[name]["fn"].support.is_discrete
    ]


def check_observed_data(model_trace, who="The model"):
    """Raise a clear error when an observed site's data hold NaN or infinite values (the
    model's density is then not finite anywhere, and samplers fail far from the cause).

    :param model_trace: a concrete trace of the model (not under ``jit``).
    :param str who: how the error names the caller.
    :raises ValueError: naming each observed site with non-finite data and how many values.

    **Example:**

    .. code-block:: python

        check_observed_data(trace(seed(model, 0)).get_trace(y))
    """
    problems = []
    for name, site in model_trace.items():
        if site["type"] != "sample" or not site["is_observed"]:
            continue
        value = site["value"]
        if isinstance(value, jax.core.Tracer) or not jnp.issubdtype(
            jnp.result_type(value), jnp.inexact
        ):
            continue
        non_finite = int(np.sum(~np.isfinite(np.asarray(value))))
        if non_finite:
            problems.append(f"{name!r} ({non_finite} of {np.size(value)} values)")
    if problems:
        raise ValueError(
            f"{who}: the observed data of site {', '.join(problems)} contain NaN or infinite "
            "values, so the model's density is not finite anywhere; drop or impute them, or "
            "leave them out of the likelihood (numpyro.handlers.mask)."
        )


def trace_once(fn, *example_args):
    """``fn`` traced to a JAX program once per kind of argument, and replayed from that program
    at every later call.

    A function built from a NumPyro model runs the model's Python each time JAX traces it: once
    for every program that calls it (every ``jit``, ``vmap`` or ``grad`` around it). Replaying
    the recorded program (a closed jaxpr) binds its operations directly, so the model runs once
    however many programs use it. A program is recorded for ``example_args`` at once and for
    each new combination of argument shapes and dtypes when it first comes (discrete values
    given as floats to take gradients, say). The replay may be batched, differentiated and
    compiled like ``fn``.

    :param fn: a function of arrays (pytrees of arrays) returning arrays.
    :param example_args: arguments of the structure, shapes and dtypes ``fn`` is called with.
    :return: a function with ``fn``'s signature and results.

    **Example:**

    .. code-block:: python

        potential_fn = trace_once(flat.potential_fn, flat.initial_position)
        jax.grad(potential_fn)(flat.initial_position)  # the model does not run again
    """
    argument_tree = jax.tree.structure(example_args)
    programs = {}

    def program_for(leaves):
        signature = tuple((leaf.shape, leaf.dtype) for leaf in leaves)
        if signature not in programs:
            shapes = [jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in leaves]
            closed, results = jax.make_jaxpr(fn, return_shape=True)(
                *jax.tree.unflatten(argument_tree, shapes)
            )
            programs[signature] = (jaxpr_as_fun(closed), jax.tree.structure(results))
        return programs[signature]

    def array_leaves(args):
        return [
            jnp.asarray(leaf, jnp.result_type(leaf)) for leaf in argument_tree.flatten_up_to(args)
        ]

    program_for(array_leaves(example_args))

    def replay(*args):
        leaves = array_leaves(args)
        program, result_tree = program_for(leaves)
        return jax.tree.unflatten(result_tree, program(*leaves))

    return functools.wraps(fn)(replay)


def flatten_model(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    init_strategy=init_to_uniform,
    kernel_name="this kernel",
    discrete_advice=None,
    sum_out_discrete=False,
) -> FlatModel:
    """Build the flat unconstrained potential of a model with continuous latent sites.

    :param jax.random.PRNGKey rng_key: key for the initial point.
    :param model: a NumPyro model whose latent sites are all continuous.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param init_strategy: a NumPyro init strategy for the initial point.
    :param str kernel_name: named in the error raised for discrete sites.
    :param str discrete_advice: what that error suggests (``None``: the package's kernels for
        discrete latents, or marginalising the sites out).
    :param bool sum_out_discrete: sum discrete latent sites with finite supports out of the
        potential by NumPyro's enumeration (as its HMC and NUTS do; needs ``funsor``), instead
        of refusing them; a discrete site without a finite support is still refused.
    :return: a :class:`FlatModel`.
    :raises ValueError: if the model has discrete latent sites (that cannot be summed out) or
        no latent site.

    **Example:**

    .. code-block:: python

        def model(y):
            loc = numpyro.sample("loc", dist.Normal(0.0, 10.0))
            numpyro.sample("y", dist.Normal(loc, 1.0), obs=y)


        flat = nx.flatten_model(jax.random.PRNGKey(0), model, (jnp.array([0.5, 1.5]),))
        flat.potential_fn(flat.initial_position)  # -log p(loc, y) at a prior draw
    """
    check_rng_key(rng_key)
    check_model(model)
    model_args, model_kwargs = check_model_arguments(model_args, model_kwargs)
    site_check = functools.partial(
        _check_latent_sites,
        kernel_name=kernel_name,
        discrete_advice=discrete_advice,
        sum_out_discrete=sum_out_discrete,
    )
    try:
        # NumPyro's warnings are held until the sites are checked: a model this kernel refuses
        # gets its error alone.
        with warnings.catch_warnings(record=True) as held_warnings:
            warnings.simplefilter("always")
            # A batch of one key: NumPyro then finds the initial point in one compiled loop,
            # where for a single key it runs the model and its gradient op by op, compiling each
            # operation.
            model_info = initialize_model(
                jnp.asarray(rng_key)[None],
                model,
                model_args=model_args,
                model_kwargs=model_kwargs,
                init_strategy=init_strategy,
                dynamic_args=False,
            )
    except Exception as error:
        # NumPyro refuses some models the checks here name better (a discrete site it cannot
        # enumerate, enumeration without funsor); and when it finds no initial point,
        # non-finite data is the commonest cause, the one its message does not name.
        site_check(_names_from_trace(_latent_site_enumerability, model, model_args, model_kwargs))
        if isinstance(error, RuntimeError):
            check_observed_data(
                trace(seed(model, 0)).get_trace(*model_args, **model_kwargs), kernel_name
            )
        raise
    site_kinds = _latent_site_enumerability(model_info.model_trace)
    site_check(site_kinds)
    for held in held_warnings:
        warnings.warn_explicit(held.message, held.category, held.filename, held.lineno)
    # In the model's order (the batched result's dict is sorted by name), for latent_sites.
    batched_values = model_info.param_info.z
    names = [name for name, *_ in site_kinds if name in batched_values]
    names += [name for name in batched_values if name not in names]
    initial_values = {name: batched_values[name][0] for name in names}
    if not initial_values:
        raise ValueError(f"{kernel_name} needs a model with at least one latent sample site.")
    initial_position, unravel_fn = ravel_pytree(initial_values)
    dict_potential = model_info.potential_fn

    def model_potential_fn(position):
        return dict_potential(unravel_fn(position))

    potential_fn = trace_once(model_potential_fn, initial_position)

    def ravel_fn(constrained_values):
        latent = {name: constrained_values[name] for name in initial_values}
        # Seeded: a discrete site summed out of the potential is drawn in this plain trace,
        # though only the continuous sites' values are read from it.
        unconstrained = unconstrain_fn(seed(model, 0), model_args, model_kwargs, latent)
        return ravel_pytree(unconstrained)[0]

    draw_prior = _prior_sampler(model, model_args, model_kwargs, tuple(initial_values), ())

    def sample_prior_fn(rng_key, num_samples):
        return draw_prior(rng_key, num_samples)[0]

    return FlatModel(
        potential_fn=potential_fn,
        unravel_fn=unravel_fn,
        constrain_fn=model_info.postprocess_fn,
        ravel_fn=ravel_fn,
        initial_position=initial_position,
        latent_sites=tuple(initial_values),
        sample_prior_fn=sample_prior_fn,
        model_trace=model_info.model_trace,
    )


def _check_latent_sites(site_kinds, *, kernel_name, discrete_advice, sum_out_discrete):
    """Raise a clear error for latent sites a kernel on continuous values cannot take.

    :param site_kinds: ``(name, is_discrete, can_enumerate)`` of every latent site.
    :raises ValueError: for discrete sites that are not summed out, or only discrete sites.
    """
    discrete = [
        name
        for name, is_discrete, can_enumerate in site_kinds
        if is_discrete and not (sum_out_discrete and can_enumerate)
    ]
    if sum_out_discrete and len(discrete) < sum(kind[1] for kind in site_kinds):
        try:
            import funsor  # noqa: F401 -- NumPyro's enumeration runs on funsor
        except ImportError as error:
            raise ValueError(
                f"{kernel_name} sums the model's discrete latent sites out with NumPyro's "
                "enumeration, which needs funsor: pip install funsor (or numpyro-extras[enum])."
            ) from error
    if discrete:
        advice = discrete_advice or (
            "For discrete latent sites use nx.ReplicaExchange(model, inner_kernel=nx.ACS) "
            "(crosses between modes, gives log Z) or nx.ACS(model, inner_kernel=NUTS) (NUTS "
            "moves the continuous sites beside them), or marginalise them out "
            "(numpyro.contrib.funsor enumeration)."
        )
        raise ValueError(
            f"{kernel_name} needs continuous latent sites, but the model has discrete latent "
            f"sites {discrete}. {advice}"
        )
    all_discrete = [name for name, is_discrete, _ in site_kinds if is_discrete]
    if all_discrete and len(all_discrete) == len(site_kinds):
        raise ValueError(
            f"{kernel_name} needs continuous latent sites, but every latent site of the model "
            f"({all_discrete}) is discrete. {discrete_advice or ''}".rstrip()
        )


def flat_potential_for(model, unravel_fn):
    """The flat potential of ``model`` as a function of its arguments, for kernels whose target
    changes between steps (a block of NumPyro's :class:`~numpyro.infer.gibbs.Gibbs` gets new
    conditioning values in ``model_kwargs`` at every step).

    :param model: a NumPyro model with continuous latent sites.
    :param unravel_fn: flat ``x`` -> dict of unconstrained site values (:class:`FlatModel`'s).
    :return: ``(model_args, model_kwargs) -> (x -> U(x))``.

    **Example:**

    .. code-block:: python

        potential_for = flat_potential_for(model, flat.unravel_fn)
        potential_for((data,), {})(flat.initial_position)
    """

    def potential_for(model_args, model_kwargs):
        def potential_fn(position):
            return potential_energy(model, model_args, model_kwargs, unravel_fn(position))

        return potential_fn

    return potential_for


def site_shapes(flat_model: FlatModel) -> tuple:
    """``((name, unconstrained shape), ...)`` of a flat model's latent sites (empty for a
    ``potential_fn``): what a trained proposal must match to be used on the model.

    :param FlatModel flat_model: the model's flat potential.
    :return: tuple of ``(name, shape)`` pairs, in the order of the flat vector.
    """
    if not flat_model.latent_sites:
        return ()
    values = flat_model.unravel_fn(flat_model.initial_position)
    return tuple((name, tuple(np.shape(values[name]))) for name in flat_model.latent_sites)


def flat_target(
    rng_key, model, model_args, model_kwargs, potential_fn, initial_position, kernel_name
) -> FlatModel:
    """The flat target a learned proposal trains on: a model's flat potential, or a
    ``potential_fn`` with its ``initial_position`` (exactly one of ``model`` and
    ``potential_fn``).

    :return: :class:`FlatModel`.
    :raises ValueError: for both or neither, or a ``potential_fn`` without a starting point.
    """
    if (model is None) == (potential_fn is None):
        raise ValueError("Give exactly one of `model` or `potential_fn`.")
    if model is not None:
        return flatten_model(
            rng_key, model, model_args, model_kwargs or {}, kernel_name=kernel_name
        )
    if initial_position is None:
        raise ValueError("With `potential_fn`, give `initial_position` (a flat 1-D point).")
    return flat_model_from_potential(potential_fn, jnp.asarray(initial_position))


def check_trained_for(trained_sites, trained_dimension, flat_model, has_model, what, trainer):
    """Raise a clear ``ValueError`` when something trained (a learned proposal) does not fit
    ``flat_model``: other latent sites, other unconstrained shapes or another dimension.

    :param tuple trained_sites: ``((name, shape), ...)`` it was trained on (:func:`site_shapes`).
    :param int trained_dimension: its number of unconstrained dimensions.
    :param FlatModel flat_model: the target it is to be used on.
    :param bool has_model: whether the target is a model (then the sites must agree).
    :param str what: what was trained, for the message (e.g. ``"The involution"``).
    :param str trainer: the function that trains one, for the message.
    """
    expected = site_shapes(flat_model)
    if has_model and tuple(trained_sites) != expected:
        raise ValueError(
            f"{what} was trained for other latent sites: it has {_describe_sites(trained_sites)}"
            f", the model {_describe_sites(expected)} (unconstrained shapes). Train one for this "
            f"model with {trainer}."
        )
    if trained_dimension != flat_model.dimension:
        raise ValueError(
            f"{what} works on {trained_dimension} unconstrained dimensions, the target has "
            f"{flat_model.dimension}."
        )


def _describe_sites(sites):
    if not sites:
        return "no named sites (a potential_fn)"
    return ", ".join(f"{name} {tuple(shape)}" for name, shape in sites)


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


@functools.lru_cache(maxsize=8)
def _batched_value_and_grad(potential_fn):
    """One compiled program per potential, kept for a kernel's later runs."""
    return quick_jit(jax.vmap(jax.value_and_grad(potential_fn)))


def check_finite_potential(potential_fn, positions, what="the initial point"):
    """Raise a clear error when the potential or its gradient is not finite at ``positions``.

    All points are evaluated in one compiled call: evaluating a model's potential op by op
    compiles each of its operations apart, which takes longer than compiling it whole.

    :param potential_fn: ``x -> -log density``.
    :param positions: one flat point ``(D,)`` or one per chain ``(chains, D)``, concrete (not
        traced).
    :param str what: names the point in the error message (``"... of chain i"`` is added for
        a batch).

    **Example:**

    .. code-block:: python

        check_finite_potential(flat_model.potential_fn, starts, "the start")  # (4, D): silent
    """
    positions = jnp.asarray(positions)
    batch = positions.reshape(-1, positions.shape[-1])
    shape = jax.eval_shape(potential_fn, batch[0]).shape
    if shape != ():
        raise ValueError(f"The potential must return a scalar, but returned shape {shape}.")
    values, gradients = _batched_value_and_grad(potential_fn)(batch)
    values, gradients = np.asarray(values), np.asarray(gradients)
    finite_gradients = np.all(np.isfinite(gradients), -1)
    for index in np.flatnonzero(~(np.isfinite(values) & finite_gradients))[:1]:
        where = f"{what} of chain {index}" if positions.ndim > 1 else what
        raise ValueError(
            f"The potential energy is not finite at {where} (value {float(values[index])}, "
            f"gradient finite: {bool(finite_gradients[index])}). Check the model's support, "
            "its data, or the initial values."
        )


def evaluation_flops(fn, *example_args) -> float:
    """The floating-point operations of one call of ``fn``, as XLA's cost analysis counts them
    in its lowered program: a measure of a potential's cost known before anything compiles.

    :param fn: a JAX-traceable function.
    :param example_args: its arguments, arrays or ``jax.ShapeDtypeStruct`` (only their shapes
        and dtypes are used; nothing is evaluated).
    :return: ``float``; ``inf`` where the backend gives no count.

    **Example:**

    .. code-block:: python

        evaluation_flops(lambda x: x @ x, jax.ShapeDtypeStruct((100,), jnp.float32))  # 200.0
    """
    # Shapes and dtypes alone: an argument's sharding (an abstract mesh inside pmap's trace,
    # under chain_method="parallel") would tie the lowering to devices it does not need.
    shapes = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(jnp.shape(leaf), jnp.result_type(leaf)), example_args
    )
    try:
        cost = jax.jit(fn).lower(*shapes).cost_analysis()
    except NotImplementedError:
        return math.inf
    # Older JAX returns one dict per program, newer JAX the dict.
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    flops = None if cost is None else cost.get("flops")
    return math.inf if flops is None or not flops >= 0 else float(flops)


# ------------------------------------------------------------------------------------------------
# Prior / likelihood split and enumeration, for annealing paths (AIS, marginalized AIS)
# ------------------------------------------------------------------------------------------------


class _ScaleSites(Messenger):
    """Multiply the log density of the sample sites ``select(name)`` picks by ``scale``.

    Unlike :class:`numpyro.handlers.scale` it acts on chosen sites only and accepts a traced or
    zero scale (an inverse temperature inside a scan). The Jacobian factors that
    :func:`~numpyro.infer.util.potential_energy` adds while substituting unconstrained values
    pass through this handler too, so they are selected by their own names.
    """

    def __init__(self, fn=None, *, scale, select):
        self.scale = scale
        self.select = select
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "sample" and self.select(msg["name"]):
            msg["scale"] = self.scale if msg.get("scale") is None else self.scale * msg["scale"]


def enumerated_support(site) -> jax.Array:
    """The values a discrete sample site can take, as a flat array (e.g. ``[0, 1]``).

    :param dict site: a trace site whose distribution has an enumerable support that is the same
        for every element (Bernoulli, Categorical, ...).
    :return: array ``(K,)`` of support values, in the site's dtype.
    :raises ValueError: if the distribution cannot enumerate its support.

    **Example:**

    .. code-block:: python

        site = trace(seed(model, key)).get_trace()["z"]   # z ~ Categorical(probs of size 3)
        enumerated_support(site)                           # [0, 1, 2]
    """
    # ``.expand([n]).to_event(1)`` wrappers cannot enumerate; their base has the same values.
    fn = _unwrapped_distribution(site["fn"])
    if not fn.has_enumerate_support:
        raise ValueError(
            f"The discrete site {site['name']!r} ({type(fn).__name__}) cannot enumerate its "
            "support; only sites such as Bernoulli and Categorical can be updated or summed out."
        )
    values = jnp.reshape(fn.enumerate_support(expand=False), (-1,))
    return values.astype(jnp.result_type(site["value"]))


class SplitModel(NamedTuple):
    """A model's log density on flat unconstrained continuous values plus discrete values.

    The latent state is ``(x, discrete)``: ``x`` the flat unconstrained vector of the continuous
    latent sites, ``discrete`` a dict of the values of the discrete latent sites that are not
    summed out. The likelihood is every observed site (``obs=`` or ``numpyro.factor``); the
    prior is every latent site plus the Jacobians of the constraining transforms.

    :param log_prior_fn: ``(x, discrete) -> log prior``, Jacobians included (``None`` when sites
        are summed out: the split is then not defined).
    :param log_likelihood_fn: ``(x, discrete) -> log likelihood`` (``None`` likewise).
    :param scaled_log_density_fn: ``(x, discrete, prior_scale, likelihood_scale) -> log of
        sum_h p(latent)^prior_scale p(h | ...) p(obs | ...)^likelihood_scale``, the sum over the
        ``marginalized_sites`` ``h`` done by enumeration with the scales applied INSIDE the sum
        (mAIS paper eq. 19-21: the marginal of the tempered joint). ``h`` is never scaled.
    :param sample_prior_fn: ``(rng_key, num_samples) -> (x, discrete)`` exact prior draws.
    :param ravel_fn: dict of constrained site values (one draw) -> ``(x, discrete)``.
    :param unravel_fn: flat ``x`` -> dict of unconstrained continuous site values.
    :param continuous_sites: names of the continuous latent sites, in the order of ``x``.
    :param discrete_sites: names of the discrete latent sites that are not summed out.
    :param marginalized_sites: names of the discrete sites summed out by enumeration.
    :param likelihood_sites: names of the observed sites.
    :param supports: for each of ``discrete_sites``, its enumerated support (``(K,)``).
    :param dimension: length of ``x``.
    """

    log_prior_fn: Callable | None
    log_likelihood_fn: Callable | None
    scaled_log_density_fn: Callable
    sample_prior_fn: Callable
    ravel_fn: Callable
    unravel_fn: Callable
    continuous_sites: tuple[str, ...]
    discrete_sites: tuple[str, ...]
    marginalized_sites: tuple[str, ...]
    likelihood_sites: tuple[str, ...]
    supports: dict
    dimension: int


def _max_plate_nesting(model_trace):
    """How many batch dimensions the model's plates use (enumeration goes to the left of them)."""
    dims = [
        frame.dim
        for site in model_trace.values()
        if site["type"] == "sample"
        for frame in site["cond_indep_stack"]
        if frame.dim is not None
    ]
    return -min(dims) if dims else 0


def _check_marginalizable(model_trace, marginalize):
    for name in marginalize:
        site = model_trace.get(name)
        if site is None or site["type"] != "sample":
            sample_sites = [n for n, s in model_trace.items() if s["type"] == "sample"]
            raise ValueError(
                f"Cannot sum out {name!r}: the model has no sample site of that name (its sample "
                f"sites are {sample_sites})."
            )
        if site["is_observed"]:
            raise ValueError(f"Cannot sum out {name!r}: it is an observed site, not a latent one.")
        if not site["fn"].support.is_discrete:
            raise ValueError(
                f"Cannot sum out {name!r}: it is a continuous site; only discrete latent sites "
                "(Bernoulli, Categorical, ...) can be summed out by enumeration."
            )
        enumerated_support(site)


def _unconstrained_values(model_trace, names):
    """The values of the trace's sites ``names`` on the unconstrained space, as NumPyro's
    :func:`~numpyro.infer.util.unconstrain_fn` maps them, read from the trace instead of running
    the model again (each site's support is its distribution's in this trace)."""
    return {
        name: biject_to(model_trace[name]["fn"].support).inv(model_trace[name]["value"])
        for name in names
    }


def _prior_sampler(model, model_args, model_kwargs, continuous_sites, discrete_sites):
    """``(rng_key, num_samples) -> (x, discrete)``: exact prior draws, ``x`` the flat unconstrained
    values of ``continuous_sites``, from one draw per key recorded (:func:`trace_once`) at the
    first call.

    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param tuple continuous_sites: the continuous latent sites, the flat vector's.
    :param tuple discrete_sites: the discrete sites whose values are returned.
    :return: the sampling function of :class:`SplitModel`.
    """

    def one_prior_draw(key):
        draw = trace(seed(model, key)).get_trace(*model_args, **model_kwargs)
        flat = ravel_pytree(_unconstrained_values(draw, continuous_sites))[0]
        return flat, {name: draw[name]["value"] for name in discrete_sites}

    @functools.cache
    def recorded_prior_draw():
        # Recorded when first needed: most kernels never draw from the prior.
        return trace_once(one_prior_draw, jax.random.PRNGKey(0))

    # Compiled once per number of draws: a map called outside ``jit`` is traced and compiled
    # anew at every call.
    @functools.partial(quick_jit, static_argnums=1)
    def prior_draws(key, num_samples):
        # One key per draw, as NumPyro's Predictive splits them; a sequential map over them:
        # XLA compiles a batch of per-key random draws (a vmap, often nested in the chains'
        # own) several times more slowly on CPU than the loop, and the loop's run is short.
        keys = jax.random.split(key, num_samples) if num_samples > 1 else key[None]
        return jax.lax.map(recorded_prior_draw(), keys)

    def sample_prior_fn(key, num_samples):
        if jax.dtypes.issubdtype(jnp.result_type(key), jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        return prior_draws(key, num_samples)

    return sample_prior_fn


def _split_densities(
    model, model_args, model_kwargs, model_trace, marginalize, likelihood_sites, unravel_fn, example
):
    """A split model's prior, likelihood and scaled log densities: without summed-out sites, all
    three from one recorded program (:func:`trace_once`) of the prior and likelihood terms.

    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param model_trace: a trace of the model (its plates, for enumeration).
    :param tuple marginalize: the discrete sites summed out by enumeration.
    :param tuple likelihood_sites: the observed sites.
    :param unravel_fn: flat ``x`` -> dict of unconstrained continuous site values.
    :param tuple example: ``(x, discrete)``, a state of the shapes and dtypes the densities take.
    :return: ``(log_prior_fn, log_likelihood_fn, scaled_log_density_fn)`` of
        :class:`SplitModel` (the first two ``None`` when sites are summed out).
    """
    is_likelihood = frozenset(likelihood_sites).__contains__
    if marginalize:
        # Summed-out sites tie prior and likelihood together: there is no split.
        scaled_log_density_fn = _marginal_scaled_log_density(
            model, model_args, model_kwargs, model_trace, marginalize, is_likelihood, unravel_fn
        )
        example_scale = jnp.ones((), example[0].dtype)
        return None, None, trace_once(scaled_log_density_fn, *example, example_scale, example_scale)

    def model_log_density_terms(x, discrete):
        # The sites of -potential_energy, the Jacobian factors among the prior's, summed per
        # part in the model's order.
        conditioned = substitute(model, data=discrete)
        log_probs, _ = compute_log_probs(
            substitute_unconstrained(conditioned, unravel_fn(x)), model_args, model_kwargs, {}
        )
        prior = sum((value for name, value in log_probs.items() if not is_likelihood(name)), 0.0)
        likelihood = sum((value for name, value in log_probs.items() if is_likelihood(name)), 0.0)
        return prior, likelihood

    log_density_terms = trace_once(model_log_density_terms, *example)

    def log_prior_fn(x, discrete):
        return log_density_terms(x, discrete)[0]

    def log_likelihood_fn(x, discrete):
        return log_density_terms(x, discrete)[1]

    def scaled_log_density_fn(x, discrete, prior_scale, likelihood_scale):
        prior, likelihood = log_density_terms(x, discrete)
        return prior_scale * prior + likelihood_scale * likelihood

    return log_prior_fn, log_likelihood_fn, scaled_log_density_fn


def _marginal_scaled_log_density(
    model, model_args, model_kwargs, model_trace, marginalize, is_likelihood, unravel_fn
):
    """``(x, discrete, prior_scale, likelihood_scale) -> log sum_h p(latent)^prior_scale
    p(h | ...) p(obs | ...)^likelihood_scale``, the sum over the summed-out sites ``h`` by
    NumPyro's enumeration."""
    try:
        from numpyro.contrib.funsor import enum as enum_handler
    except ImportError as error:
        raise ImportError(
            "Summing sites out (marginalize=) needs funsor, NumPyro's enumeration engine: "
            "pip install 'numpyro-extras[enum]' (or pip install funsor)."
        ) from error
    summed = frozenset(marginalize)
    max_plate_nesting = _max_plate_nesting(model_trace)

    def is_prior(name):
        return name not in summed and not is_likelihood(name)

    def mark_enumerated(site):
        return {"enumerate": "parallel"} if site["name"] in summed else {}

    def scaled_log_density_fn(x, discrete, prior_scale, likelihood_scale):
        scaled = _ScaleSites(
            _ScaleSites(
                substitute(model, data=discrete), scale=likelihood_scale, select=is_likelihood
            ),
            scale=prior_scale,
            select=is_prior,
        )
        # funsor multiplies each site's log density by its scale before the logsumexp over the
        # enumerated values, so the likelihood is tempered inside the sum (mAIS eq. 19).
        enumerated = enum_handler(
            infer_config(scaled, config_fn=mark_enumerated), -max_plate_nesting - 1
        )
        return -potential_energy(enumerated, model_args, model_kwargs, unravel_fn(x), enum=True)

    return scaled_log_density_fn


def split_model(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    marginalize=(),
    model_trace=None,
    flat_model=None,
) -> SplitModel:
    """Split a NumPyro model's log density into prior and likelihood, with discrete sites.

    The annealing paths of :func:`numpyro_extras.ais` are built from this view: the prior path
    ``log p(x, z) + beta log p(y | x, z)`` (Graham & Storkey's AIS baseline, eq. 10; mAIS paper
    eq. 5 with the prior as ``P_0``) and, with ``marginalize``, its marginal over the summed-out
    sites with the likelihood scaled inside the sum (mAIS paper eq. 19-21). Summing out uses
    NumPyro's own enumeration engine (``numpyro.contrib.funsor``, which applies each site's
    scale before the contraction). Every density is evaluated with NumPyro's
    :func:`~numpyro.infer.util.potential_energy`, so constraints, Jacobians and plates are
    handled as in NUTS.

    :param rng_key: key for the trace that reads the model's structure.
    :param model: a NumPyro model.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param marginalize: names of discrete latent sites to sum out exactly.
    :param model_trace: a trace of the model with these arguments to read its structure from
        (e.g. NumPyro's ``prototype_trace``), when the caller has one; ``None`` traces it here.
    :param flat_model: the model's :class:`FlatModel` for these arguments, when the caller has
        one: the split then reads the sites from its trace and, without discrete sites, draws
        from the prior with its sampler, running the model no more to build them.
    :return: a :class:`SplitModel`.
    :raises ValueError: for a site in ``marginalize`` that is unknown, observed, continuous or
        not enumerable, or a discrete latent site whose support cannot be enumerated.

    **Example:**

    .. code-block:: python

        split = split_model(key, model, (x, y))
        x0, discrete0 = split.sample_prior_fn(key, 100)
        half_tempered = split.scaled_log_density_fn(x0[0], {}, 1.0, 0.5)
    """
    model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
    marginalize = tuple(marginalize)
    if model_trace is None and flat_model is not None:
        model_trace = flat_model.model_trace
    if model_trace is None:
        model_trace = trace(seed(model, rng_key)).get_trace(*model_args, **model_kwargs)
    _check_marginalizable(model_trace, marginalize)
    check_observed_data(model_trace)
    latent = {
        name: site
        for name, site in model_trace.items()
        if site["type"] == "sample"
        and not site["is_observed"]
        and not site["infer"].get("is_auxiliary", False)
    }
    likelihood_sites = tuple(
        name
        for name, site in model_trace.items()
        if site["type"] == "sample" and site["is_observed"]
    )
    continuous_sites = tuple(n for n, s in latent.items() if not s["fn"].support.is_discrete)
    discrete_sites = tuple(
        n for n, s in latent.items() if s["fn"].support.is_discrete and n not in marginalize
    )
    supports = {name: enumerated_support(latent[name]) for name in discrete_sites}
    all_discrete = {n: s["value"] for n, s in latent.items() if s["fn"].support.is_discrete}

    def unconstrain(continuous_values, discrete_values):
        # The transforms of the continuous sites may depend on the discrete values (rarely),
        # so the discrete ones are conditioned on while unconstraining.
        conditioned = condition(model, data=discrete_values)
        return unconstrain_fn(conditioned, model_args, model_kwargs, continuous_values)

    first_position, unravel_fn = ravel_pytree(_unconstrained_values(model_trace, continuous_sites))

    def ravel_fn(values):
        missing = [name for name in continuous_sites + discrete_sites if name not in values]
        if missing:
            raise ValueError(f"The samples lack the latent sites {missing}.")
        discrete = {name: jnp.asarray(values[name]) for name in discrete_sites}
        continuous = {name: values[name] for name in continuous_sites}
        conditioning = {**all_discrete, **discrete}
        flat = ravel_pytree(unconstrain(continuous, conditioning))[0]
        return flat, discrete

    example_discrete = {name: all_discrete[name] for name in discrete_sites}
    log_prior_fn, log_likelihood_fn, scaled_log_density_fn = _split_densities(
        model,
        model_args,
        model_kwargs,
        model_trace,
        marginalize,
        likelihood_sites,
        unravel_fn,
        (first_position, example_discrete),
    )
    if flat_model is not None and flat_model.sample_prior_fn is not None and not all_discrete:

        def sample_prior_fn(rng_key, num_samples):
            return flat_model.sample_prior_fn(rng_key, num_samples), {}

    else:
        sample_prior_fn = _prior_sampler(
            model, model_args, model_kwargs, continuous_sites, discrete_sites
        )

    return SplitModel(
        log_prior_fn=log_prior_fn,
        log_likelihood_fn=log_likelihood_fn,
        scaled_log_density_fn=scaled_log_density_fn,
        sample_prior_fn=sample_prior_fn,
        ravel_fn=ravel_fn,
        unravel_fn=unravel_fn,
        continuous_sites=continuous_sites,
        discrete_sites=discrete_sites,
        marginalized_sites=marginalize,
        likelihood_sites=likelihood_sites,
        supports=supports,
        dimension=int(first_position.shape[0]),
    )


# ------------------------------------------------------------------------------------------------
# Discrete latent sites for gradient-based discrete samplers (ACS, DMALA)
# ------------------------------------------------------------------------------------------------

# Site kinds a gradient-based discrete sampler can move, by the values a site takes:
#   binary      Bernoulli: {0, 1}
#   categorical Categorical: class indices {0, ..., K-1}
#   one_hot     OneHotCategorical: one-hot vectors of length K
DISCRETE_SITE_KINDS = ("binary", "categorical", "one_hot")


class DiscreteSiteLayout(NamedTuple):
    """How one discrete latent site is laid out as coordinates.

    :param str name: the site name.
    :param str kind: one of :data:`DISCRETE_SITE_KINDS`.
    :param tuple shape: shape of the site's coordinates (the value's shape, without the one-hot
        axis for ``one_hot`` sites), plates and event dimensions included.
    :param int num_values: ``K``, values per coordinate (2 for ``binary``).
    :param dtype: dtype of the site's values as the model samples them.
    """

    name: str
    kind: str
    shape: tuple
    num_values: int
    dtype: Any


def _unwrapped_distribution(fn):
    """The distribution under ``.expand``, ``.to_event`` and ``.mask`` wrappers."""
    from numpyro.distributions import ExpandedDistribution, Independent, MaskedDistribution

    while isinstance(fn, (ExpandedDistribution, Independent, MaskedDistribution)):
        fn = fn.base_dist
    return fn


def _site_layout(name, site):
    import numpyro.distributions as dist
    from numpyro.distributions import constraints

    base = _unwrapped_distribution(site["fn"])
    value = site["value"]
    shape = tuple(jnp.shape(value))
    dtype = jnp.result_type(value)
    if isinstance(base, (dist.BernoulliProbs, dist.BernoulliLogits)):
        return DiscreteSiteLayout(name, "binary", shape, 2, dtype)
    if isinstance(base, (dist.CategoricalProbs, dist.CategoricalLogits)):
        return DiscreteSiteLayout(
            name, "categorical", shape, int(base.support.upper_bound) + 1, dtype
        )
    support = getattr(base, "support", None)
    if (
        support is not None
        and support.is_discrete
        and support.event_dim == 1
        and base.has_enumerate_support
        and base.event_shape
    ):
        size = int(base.event_shape[-1])
        values = np.asarray(base.enumerate_support(expand=False)).reshape(size, size)
        if np.array_equal(values, np.eye(size)):
            return DiscreteSiteLayout(name, "one_hot", shape[:-1], size, dtype)
    kind = type(base).__name__
    if isinstance(support, type(constraints.boolean)):
        kind += " (boolean, but not a Bernoulli)"
    raise ValueError(
        f"The discrete latent site {name!r} is a {kind} site; gradient-based discrete samplers "
        "handle Bernoulli, Categorical and OneHotCategorical sites only. Marginalise it out "
        "(infer={'enumerate': 'parallel'} with numpyro's kernels), condition on it, or "
        "rewrite it as one of those."
    )


def discrete_site_layouts(model, model_args=(), model_kwargs=None, *, kernel_name="this kernel"):
    """The coordinates of every discrete latent site of a model.

    Sites may be scalars, in plates, or written with ``.expand([...]).to_event(...)``.

    :param model: a NumPyro model.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param str kernel_name: named in the errors.
    :return: tuple of :class:`DiscreteSiteLayout`, in the order the model samples the sites.
    :raises ValueError: if the model has no discrete latent site, or one whose distribution is
        not Bernoulli, Categorical or one-hot categorical (the error names it).

    **Example:**

    .. code-block:: python

        def model():
            with numpyro.plate("n", 5):
                numpyro.sample("z", dist.Bernoulli(0.3))

        discrete_site_layouts(model)  # (DiscreteSiteLayout("z", "binary", (5,), 2, int32),)
    """
    return _site_layouts(_model_trace(model, model_args, model_kwargs or {}), kernel_name)


def _site_layouts(model_trace, kernel_name):
    names = _discrete_latent_names(model_trace)
    if not names:
        raise ValueError(
            f"{kernel_name} samples discrete latent sites, but the model has none (its latent "
            "sites are all continuous or observed). Use NUTS for continuous models."
        )
    return tuple(_site_layout(name, model_trace[name]) for name in names)


class DiscreteLatentModel(NamedTuple):
    """A model's joint log density as a function of continuous and discrete latent values.

    :param split: the model's :class:`SplitModel` (continuous sites as flat unconstrained ``x``).
    :param layouts: a :class:`DiscreteSiteLayout` per discrete latent site.
    :param log_density_fn: ``(x, discrete) -> log p(x, discrete, observed)`` with the discrete
        values given as a dict (a LOG density; Jacobians of the continuous transforms included).
        Bernoulli and one-hot values may be floats, so the density can be differentiated in them.
    :param constrain_fn: ``(x, discrete) -> dict`` of the constrained latent site values plus
        the model's deterministic sites.
    :param log_density_for: ``(model_args, model_kwargs) -> log_density_fn`` for other values of
        the model's arguments with the same structure (new data under ``jit_model_args``, new
        conditioning values in a block of NumPyro's ``Gibbs``).
    """

    split: SplitModel
    layouts: tuple
    log_density_fn: Callable
    constrain_fn: Callable
    log_density_for: Callable


def discrete_latent_model(
    rng_key, model, model_args=(), model_kwargs=None, *, kernel_name="this kernel"
) -> DiscreteLatentModel:
    """Build the log density of a model with discrete latent sites (and maybe continuous ones).

    :param rng_key: key for the traces that read the model's structure.
    :param model: a NumPyro model with Bernoulli / Categorical / one-hot categorical latents.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param str kernel_name: named in the errors.
    :return: a :class:`DiscreteLatentModel`.
    :raises ValueError: see :func:`discrete_site_layouts`.

    **Example:**

    .. code-block:: python

        latent = discrete_latent_model(key, model, (data,))
        x, discrete = latent.split.sample_prior_fn(key, 1)
        latent.log_density_fn(x[0], {name: value[0] for name, value in discrete.items()})
    """
    from numpyro.infer.util import constrain_fn as numpyro_constrain_fn

    model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
    # One eager trace (the model run op by op, slow to dispatch) reads the structure for both.
    model_trace = prototype_trace(model, rng_key, model_args, model_kwargs)
    layouts = _site_layouts(model_trace, kernel_name)
    split = split_model(rng_key, model, model_args, model_kwargs, model_trace=model_trace)

    def log_density_for(args, kwargs):
        def log_density_fn(x, discrete):
            return -potential_energy(
                substitute(model, data=discrete), args, kwargs, split.unravel_fn(x)
            )

        return log_density_fn

    def constrain_fn(x, discrete):
        constrained = numpyro_constrain_fn(
            substitute(model, data=discrete),
            model_args,
            model_kwargs,
            split.unravel_fn(x),
            return_deterministic=True,
        )
        return {**discrete, **constrained}

    return DiscreteLatentModel(
        split, layouts, log_density_for(model_args, model_kwargs), constrain_fn, log_density_for
    )
