"""Checks of user settings shared by every sampler family: counts, real numbers and flags.

Each check runs before any work and raises an error that names the argument. Values are refused
rather than converted: ``int(50.5)`` would silently run 50 steps, and ``float("0.1")`` would hide a
wrongly parsed setting (and reach JAX as a string otherwise).
"""

from __future__ import annotations

import inspect
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

__all__ = [
    "check_count",
    "check_real",
    "check_flag",
    "check_init_strategy",
    "check_model_arguments",
    "check_model",
    "check_rng_key",
    "check_mcmc",
    "check_setting_names",
    "is_flag",
]


def is_flag(value) -> bool:
    """Whether ``value`` is a Python or NumPy boolean."""
    return isinstance(value, (bool, np.bool_))


def check_flag(name, value) -> bool:
    """``value`` as a ``bool`` if it is a Python or NumPy boolean (a string such as ``"no"``
    would otherwise count as true).

    :param str name: the argument's name, for the error message.
    :param value: the value to check.
    :return: ``bool(value)``.
    :raises TypeError: if ``value`` is not a boolean.

    **Example:**

    .. code-block:: python

        check_flag("adapt_log_zeta", np.True_)  # True
    """
    if not is_flag(value):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__}).")
    return bool(value)


def check_init_strategy(value):
    """``value`` if it is a NumPyro init strategy (a callable such as ``init_to_median``).

    :param value: the value to check.
    :return: ``value``.
    :raises TypeError: for a string (``"uniform"``) or anything else not callable.

    **Example:**

    .. code-block:: python

        check_init_strategy(numpyro.infer.init_to_median)
    """
    if not callable(value):
        hint = f" (numpyro.infer.init_to_{value})" if isinstance(value, str) else ""
        raise TypeError(
            "init_strategy must be a NumPyro init strategy, a callable such as "
            f"numpyro.infer.init_to_uniform{hint}; got {value!r} ({type(value).__name__})."
        )
    return value


def check_model_arguments(model_args, model_kwargs):
    """``(tuple(model_args), dict(model_kwargs))`` if they are a sequence of positional
    arguments and a mapping (or ``None``): ``model_args=y`` for ``(y,)`` is a common slip,
    which otherwise fails deep in the model with an unrelated count of arguments.

    :param model_args: the model's positional arguments.
    :param model_kwargs: the model's keyword arguments, or ``None``.
    :return: ``(model_args, model_kwargs)`` as a tuple and a dict.
    :raises TypeError: for anything else.

    **Example:**

    .. code-block:: python

        check_model_arguments([x, y], None)  # ((x, y), {})
    """
    if not isinstance(model_args, (tuple, list)):
        raise TypeError(
            "model_args must be a tuple of the model's positional arguments, e.g. (y,) for "
            f"model(y); got a value of type {type(model_args).__name__}."
        )
    if model_kwargs is not None and not isinstance(model_kwargs, dict):
        raise TypeError(
            "model_kwargs must be a dict of the model's keyword arguments, got a "
            f"{type(model_kwargs).__name__}."
        )
    return tuple(model_args), dict(model_kwargs or {})


def check_model(model, name="model"):
    """``model`` if it is callable, a NumPyro model function.

    :param model: the value to check.
    :param str name: the argument's name, for the error message.
    :return: ``model``.
    :raises TypeError: for anything else (a model's name as a string, its return value).

    **Example:**

    .. code-block:: python

        check_model(my_model)
    """
    if not callable(model):
        raise TypeError(
            f"{name} must be a NumPyro model, a Python function whose body calls "
            f"numpyro.sample; got {model!r:.60} ({type(model).__name__})."
        )
    return model


def check_rng_key(rng_key, name="rng_key"):
    """``rng_key`` if it is a JAX PRNG key: a typed key (``jax.random.key(0)``) or a raw
    ``uint32`` key (``jax.random.PRNGKey(0)``).

    :param rng_key: the value to check.
    :param str name: the argument's name, for the error message.
    :return: ``rng_key``.
    :raises TypeError: for an integer seed, ``None`` or any other array.

    **Example:**

    .. code-block:: python

        check_rng_key(jax.random.PRNGKey(0))
    """
    dtype = getattr(rng_key, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == np.uint32 and np.ndim(rng_key) >= 1 and np.shape(rng_key)[-1] in (2, 4)
    if not (typed or raw):
        seed = isinstance(rng_key, (int, np.integer)) and not is_flag(rng_key)
        example = (
            f"not a seed: jax.random.PRNGKey({rng_key})" if seed else "e.g. jax.random.PRNGKey(0)"
        )
        raise TypeError(
            f"{name} must be a JAX PRNG key ({example}); got {rng_key!r:.60} "
            f"({type(rng_key).__name__})."
        )
    return rng_key


def check_mcmc(mcmc, who=None, finished=True):
    """``mcmc`` if it is a :class:`~numpyro.infer.MCMC` (that has run, with ``finished``).

    :param mcmc: the value to check.
    :param str who: the function that reads it, for the error message.
    :param bool finished: also require a finished run.
    :return: ``mcmc``.
    :raises TypeError: for anything but an ``MCMC`` (its draws, its kernel, ...).
    :raises ValueError: for an ``MCMC`` that has not run, with ``finished``.

    **Example:**

    .. code-block:: python

        check_mcmc(mcmc, "nx.to_inference_data")
    """
    if not isinstance(mcmc, MCMC):
        expected = f"{who}: expected" if who else "Expected"
        raise TypeError(
            f"{expected} a numpyro.infer.MCMC run (the object mcmc.run(...) was called on), "
            f"got {type(mcmc).__name__}."
        )
    if finished and mcmc.last_state is None:
        run = f"{who}: run" if who else "Run"
        raise ValueError(f"{run} the MCMC first: `mcmc.run(rng_key, ...)`.")
    return mcmc


def check_setting_names(settings, function, fields, owner=None, set_by_kernel=()):
    """Check the names of keyword arguments meant for ``function``: its settings ``fields``
    (what its ``**settings`` takes) or, for a kernel's dict of them (``owner`` names it), those
    and ``function``'s keyword-only arguments that the kernel does not set itself.

    :param settings: the names given (a dict or any iterable of names).
    :param function: the function the settings are for.
    :param fields: the names its ``**settings`` takes.
    :param str owner: how the error names where the settings came from, e.g.
        ``"AiSampler(train_kwargs=...)"``; ``None`` for ``function``'s own ``**settings``.
    :param set_by_kernel: keyword-only arguments the kernel passes itself.
    :return: the accepted names, a list.
    :raises TypeError: for an unknown name.

    **Example:**

    .. code-block:: python

        check_setting_names({"epochs": 3}, train_ai_sampler, TrainingSettings._fields)
    """
    accepted = list(fields)
    if owner is not None:
        keywords = inspect.signature(function).parameters.items()
        accepted = [
            name
            for name, parameter in keywords
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in set_by_kernel
        ] + accepted
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        raise TypeError(
            f"{owner or function.__name__} got unknown settings {unknown}; the settings are "
            f"{accepted}."
        )
    return accepted


def check_count(name, value, minimum=1) -> int:
    """``value`` as an ``int`` if it is a Python or NumPy integer of at least ``minimum``.

    :param str name: the argument's name, for the error message.
    :param value: the value to check.
    :param int minimum: the smallest value allowed.
    :return: ``int(value)``.
    :raises TypeError: if ``value`` is not an integer (strings, floats such as ``50.0`` and
        booleans included).
    :raises ValueError: if ``value < minimum``.

    **Example:**

    .. code-block:: python

        check_count("num_particles", np.int64(100))  # 100
    """
    description = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    if is_flag(value) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be {description}, got {value!r} ({type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"{name} must be {description}, got {value!r}.")
    return int(value)


def check_real(
    name,
    value,
    requirement="a finite real number",
    *,
    low=None,
    high=None,
    open_low=True,
    open_high=True,
) -> float:
    """``float(value)`` for a finite real number, optionally inside ``(low, high)``.

    :param str name: the argument's name, for the error message.
    :param value: a Python or NumPy real number, or a scalar array of one.
    :param str requirement: how the error message describes a valid value.
    :param float low: the lower bound, if any.
    :param float high: the upper bound, if any.
    :param bool open_low: whether ``low`` itself is excluded.
    :param bool open_high: whether ``high`` itself is excluded.
    :return: the value as a ``float``.
    :raises TypeError: if ``value`` is not a real number (a string, a boolean, an array).
    :raises ValueError: if it is not finite or out of range.

    **Example:**

    .. code-block:: python

        check_real("step_size", 0.1, "a positive number", low=0.0)  # 0.1
    """
    is_number = isinstance(value, numbers.Real) and not is_flag(value)
    is_scalar_array = (
        isinstance(value, (np.ndarray, jax.Array))
        and not isinstance(value, jax.core.Tracer)
        and np.shape(value) == ()
        and (jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer))
    )
    if not (is_number or is_scalar_array):
        raise TypeError(f"{name} must be {requirement}, got {value!r} ({type(value).__name__}).")
    number = float(value)
    below = low is not None and (number <= low if open_low else number < low)
    above = high is not None and (number >= high if open_high else number > high)
    if not math.isfinite(number) or below or above:
        raise ValueError(f"{name} must be {requirement}, got {value!r}.")
    return number
