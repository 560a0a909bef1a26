"""Checks of user settings shared by every sampler family: counts, real numbers and flags.

Each check runs before any work and raises an error that names the argument. Values are refused
rather than converted: ``int(50.5)`` would silently run 50 steps, and ``float("0.1")`` would hide a
wrongly parsed setting (and reach JAX as a string otherwise).
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "check_count",
    "check_real",
    "check_flag",
    "check_init_strategy",
    "check_model_arguments",
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
            f"model(y); got a {type(model_args).__name__}."
        )
    if model_kwargs is not None and not isinstance(model_kwargs, dict):
        raise TypeError(
            "model_kwargs must be a dict of the model's keyword arguments, got a "
            f"{type(model_kwargs).__name__}."
        )
    return tuple(model_args), dict(model_kwargs or {})


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
