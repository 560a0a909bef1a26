"""Compiling the package's own programs for a short wait.

Most of a first call on a small model is XLA compiling programs that then run for milliseconds:
a base fit's loops, a pilot's chains, an annealing run, the starting draws. On CPU, XLA's LLVM
optimisation and its MLIR fusion emitters (before jaxlib 0.12) buy little speed for programs
this short and take most of their compile time; :func:`quick_jit` compiles without them, and
asks for Eigen's single-threaded runtime (a program-level option: XLA's CPU client may still run
a batched program on its thread pool, so a program that can wait forever there is restructured
where it is written, as the base fit's polishing is).
Programs that run for seconds keep LLVM's optimisation (``optimize=True``); those of a
network (the VAE's and the Ai-sampler's training, their chains and checks) and the pilot NUTS
chains take its first level (``optimize=1``), which XLA's default level compiles several times
longer and runs no faster.
The sampling loop of ``numpyro.infer.MCMC`` is NumPyro's program and keeps XLA's defaults.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from importlib.metadata import version

import jax

__all__ = ["fold_in_key", "quick_compiler_options", "quick_jit", "split_key", "split_each_key"]


def _release(text: str) -> tuple[int, ...]:
    """``(major, minor)`` of a version string, each from its leading digits."""
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in text.split(".")[:2])


@functools.lru_cache(maxsize=None, typed=True)
def quick_compiler_options(optimize: bool | int = False) -> dict:
    """XLA options that shorten compilation of CPU programs: ``{}`` off CPU.

    Options the user set through ``XLA_FLAGS`` are left to the user.

    :param optimize: ``False``: no LLVM optimisation; ``True``: XLA's default level, for a
        program whose run takes longer than its compilation; an int: that LLVM optimisation
        level (``1`` for a network's training, as fast as the default and compiled sooner).
    :return: a ``compiler_options`` dict for :func:`jax.jit`.

    **Example:**

    .. doctest::

        >>> from numpyro_extras.shell.compilation import quick_compiler_options
        >>> isinstance(quick_compiler_options(), dict)
        True
    """
    if jax.default_backend() != "cpu":
        return {}
    user_flags = os.environ.get("XLA_FLAGS", "")
    options = {}
    level = (None if optimize else 0) if isinstance(optimize, bool) else int(optimize)
    if level is not None and "xla_backend_optimization_level" not in user_flags:
        options["xla_backend_optimization_level"] = level
    # XLA's multi-threaded Eigen runtime can leave a batched program's result waiting forever,
    # every worker idle; these programs gain little from a second thread.
    if "xla_cpu_multi_thread_eigen" not in user_flags:
        options["xla_cpu_multi_thread_eigen"] = False
    # jaxlib 0.12 removed the older emitters and refuses the option.
    if _release(version("jaxlib")) < (0, 12) and "xla_cpu_use_fusion_emitters" not in user_flags:
        options["xla_cpu_use_fusion_emitters"] = False
    return options


class _QuickJit:
    """A :func:`jax.jit` built at its first call, when the backend is known; called inside
    another trace, a plain :func:`jax.jit` (the outer program's options apply to it)."""

    def __init__(self, fun: Callable, optimize: bool | int, jit_kwargs: dict):
        self._fun = fun
        self._optimize = optimize
        self._jit_kwargs = jit_kwargs
        self._jitted = None
        self._nested = jax.jit(fun, **jit_kwargs)
        functools.update_wrapper(self, fun)

    def _compiled(self):
        if self._jitted is None:
            self._jitted = jax.jit(
                self._fun,
                compiler_options=quick_compiler_options(self._optimize),
                **self._jit_kwargs,
            )
        return self._jitted

    def __call__(self, *args, **kwargs):
        leaves = jax.tree.leaves((args, kwargs))
        if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
            return self._nested(*args, **kwargs)
        return self._compiled()(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._compiled().lower(*args, **kwargs)


def quick_jit(fun: Callable | None = None, *, optimize: bool | int = False, **jit_kwargs):
    """:func:`jax.jit` with :func:`quick_compiler_options`.

    Use it as ``jax.jit`` is used, as a decorator (with or without keyword arguments) or a call.
    The options are looked up at the first call, so that decorating at import time leaves the
    backend uninitialised (``numpyro.set_host_device_count`` still works after the import).

    :param fun: the function to compile.
    :param optimize: LLVM's optimisation, as :func:`quick_compiler_options` takes it.
    :param jit_kwargs: further :func:`jax.jit` arguments (``static_argnums``, ...).
    :return: the compiled function.

    **Example:**

    .. doctest::

        >>> import jax.numpy as jnp
        >>> from numpyro_extras.shell.compilation import quick_jit
        >>> @quick_jit
        ... def sum_of_squares(x):
        ...     return jnp.sum(x**2)
        >>> float(sum_of_squares(jnp.arange(3.0)))
        5.0
    """
    if fun is None:
        return functools.partial(quick_jit, optimize=optimize, **jit_kwargs)
    return _QuickJit(fun, optimize, jit_kwargs)


# Key arithmetic outside a trace compiles a program per shape, with XLA's defaults unless
# compiled here.
_split = quick_jit(jax.random.split, static_argnums=1)
_split_each = quick_jit(jax.vmap(jax.random.split, in_axes=(0, None)), static_argnums=1)
_fold_in = quick_jit(jax.random.fold_in)


def split_key(rng_key, num: int = 2):
    """:func:`jax.random.split` of one key, compiled by :func:`quick_jit`.

    :param rng_key: a key.
    :param int num: how many keys.
    :return: ``num`` keys.

    **Example:**

    .. doctest::

        >>> import jax
        >>> from numpyro_extras.shell.compilation import split_key
        >>> split_key(jax.random.PRNGKey(0), 3).shape
        (3, 2)
    """
    return _split(rng_key, num)


def split_each_key(rng_keys, num: int = 2):
    """:func:`jax.random.split` of each key of a batch, compiled by :func:`quick_jit`.

    :param rng_keys: a batch of keys.
    :param int num: how many keys from each.
    :return: the keys, batch first.

    **Example:**

    .. doctest::

        >>> import jax
        >>> from numpyro_extras.shell.compilation import split_each_key
        >>> split_each_key(jax.random.split(jax.random.PRNGKey(0), 4)).shape
        (4, 2, 2)
    """
    return _split_each(rng_keys, num)


def fold_in_key(rng_key, data: int):
    """:func:`jax.random.fold_in`, compiled by :func:`quick_jit`.

    :param rng_key: a key.
    :param int data: the integer folded in.
    :return: a new key.

    **Example:**

    .. doctest::

        >>> import jax
        >>> from numpyro_extras.shell.compilation import fold_in_key
        >>> fold_in_key(jax.random.PRNGKey(0), 1).shape
        (2,)
    """
    return _fold_in(rng_key, data)
