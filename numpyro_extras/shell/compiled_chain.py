"""The compiled init and step functions of a kernel, for one chain and for a batch of chains.

NumPyro calls a kernel's ``init`` with one key (``chain_method`` "sequential" or "parallel") or
with a batch of keys ("vectorized"), then its ``sample`` many times. Every kernel of
numpyro_extras builds a pure ``init_one`` / ``step_one`` pair for one chain; this module compiles
that pair once per build key (the model arguments' fingerprint and the warm-up length) so that a
re-run with the same arguments does not trace and compile again.

NumPyro's ``MCMC`` caches its compiled sampling loop by the kernel object and the state's shape.
Under ``jit_model_args=True`` a second run on new data would reuse a loop traced around the old
data's step function. Every state therefore carries a :class:`BuildTag`: a static leaf that
differs between builds, so a rebuilt kernel changes the state's tree structure and JAX traces the
loop again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Hashable
from typing import NamedTuple

import jax

from numpyro_extras.shell.compilation import quick_jit

__all__ = ["BuildTag", "CompiledChain", "compiled_chain", "evaluated_now"]

_unique_builds = itertools.count()


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class BuildTag:
    """A static (leafless) pytree node naming the build a chain state belongs to.

    :param key: the build key, or a unique number for a build that is never reused.
    """

    key: Hashable


class CompiledChain(NamedTuple):
    """A kernel's chain functions, built for ``build_key``.

    :param build_key: what they were built for; its first entry is ``None`` when the model
        arguments could not be fingerprinted (then they are never reused).
    :param init_one: jitted ``init`` of one chain.
    :param step_one: ``step(state, model_args, model_kwargs)`` of one chain (NumPyro's ``MCMC``
        compiles the sampling loop).
    :param refresh_one: ``refresh(state, model_args, model_kwargs)`` of one chain, or ``None``.
    :param init_batch: jitted, vmapped ``init`` of a batch of chains.
    :param step_batch: ``step`` vmapped over a batch of chains (not over the model arguments).
    :param refresh_batch: ``refresh`` likewise, or ``None``.
    :param tag: the :class:`BuildTag` the kernel puts in its states.
    """

    build_key: Hashable
    init_one: Callable
    step_one: Callable
    refresh_one: Callable | None
    init_batch: Callable
    step_batch: Callable
    refresh_batch: Callable | None
    tag: BuildTag

    def functions(self, batched: bool) -> tuple[Callable, Callable, Callable | None]:
        """``(init, step, refresh)`` for a batch of chains or for one."""
        if batched:
            return self.init_batch, self.step_batch, self.refresh_batch
        return self.init_one, self.step_one, self.refresh_one


def evaluated_now(rng_key):
    """A context in which work on concrete values is computed, not traced, when ``rng_key`` is a
    tracer (NumPyro calls ``init`` inside ``pmap``'s trace under ``chain_method="parallel"``).

    Outside a trace it does nothing: :func:`jax.ensure_compile_time_eval` would also evaluate
    every constant operation met while tracing a ``jax.jit`` inside it, each as an eager
    program compiled of its own, which multiplies the compilations of a base fit or a pilot run.

    :param rng_key: the key (or batch of keys) ``init`` was called with.
    :return: a context manager.

    **Example:**

    .. code-block:: python

        with evaluated_now(rng_key):
            self._prepare(model_args, model_kwargs)
    """
    if isinstance(rng_key, jax.core.Tracer):
        return jax.ensure_compile_time_eval()
    return contextlib.nullcontext()


def _over_chains(function):
    """``function(state, model_args, model_kwargs)`` vmapped over the state only: the model
    arguments are the same for every chain and may hold values JAX cannot batch."""
    if function is None:
        return None

    def batched(states, model_args, model_kwargs):
        return jax.vmap(lambda state: function(state, model_args, model_kwargs))(states)

    return batched


def compiled_chain(previous: CompiledChain | None, build_key, build_fn) -> CompiledChain:
    """Reuse ``previous`` if it was built for ``build_key``, else build the chain functions.

    :param previous: the kernel's last :class:`CompiledChain`, or ``None``.
    :param tuple build_key: ``(arguments fingerprint, num_warmup, ...)``.
    :param build_fn: ``tag -> (init_one, step_one)``, ``(init_one, step_one, refresh_one)`` or
        ``(init_one, step_one, refresh_one, step_batch)``: the kernel's pure functions for one
        chain (``refresh_one`` may be ``None``), and optionally its own step of a batch of
        chains (default ``step_one`` vmapped); ``init_one`` puts ``tag`` (a
        :class:`BuildTag`) in the state it returns.
    :return: a :class:`CompiledChain`.

    **Example:**

    .. code-block:: python

        self._compiled = compiled_chain(self._compiled, (fingerprint, num_warmup), build)
        init_fn, self._step_fn, self._refresh_fn = self._compiled.functions(batched)
    """
    if previous is not None and previous.build_key == build_key and build_key[0] is not None:
        return previous
    reusable = build_key[0] is not None
    tag = BuildTag(build_key if reusable else ("unique build", next(_unique_builds)))
    init_one, step_one, *rest = build_fn(tag)
    refresh_one = rest[0] if rest else None
    step_batch = rest[1] if len(rest) > 1 else _over_chains(step_one)
    return CompiledChain(
        build_key,
        quick_jit(init_one),
        step_one,
        refresh_one,
        quick_jit(jax.vmap(init_one)),
        step_batch,
        _over_chains(refresh_one),
        tag,
    )
