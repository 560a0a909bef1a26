"""The one `MCMCKernel` shell that every kernel family of numpyro_extras sits on.

A family (continuous tempering, ACS, ...) writes pure ``init_one`` / ``step_one`` functions for one
chain on a NamedTuple state, BlackJAX style, and a short subclass of :class:`ExtrasKernel` that
says how to read a model. The shell does the NumPyro side once for all of them:

- a model xor a ``potential_fn``;
- the model's plumbing prepared per set of model arguments, and rebuilt when they change (also
  under ``MCMC(..., jit_model_args=True)``, where the compiled loop is retraced because every
  state carries its build's :class:`~numpyro_extras.shell.compiled_chain.BuildTag`);
- every chain initialised in one compiled, vmapped call under ``chain_method="vectorized"``;
- ``sample``, ``postprocess_fn``, and ``refresh`` / ``wrap_model``, so that a kernel whose target
  may change between steps is a block of NumPyro's :class:`~numpyro.infer.gibbs.Gibbs`;
- the settings of an HMC or NUTS move inside a kernel (:func:`hmc_settings`).

**Caching policy.** What a kernel builds from a model (the flat potential, a fitted base, the
compiled chain functions) is kept on the kernel object, keyed on a fingerprint of the model
arguments (:func:`arguments_fingerprint`: their structure and values) and the warm-up length.
It is reused only for the same key, dropped when the key changes, and never kept when the
arguments cannot be fingerprinted (tracers). :meth:`ExtrasKernel.wrap_model`
returns a copy that has nothing built.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import HMC, NUTS
from numpyro.infer.gibbs import GIBBS_SITES_KWARG
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.compiled_chain import compiled_chain, evaluated_now
from numpyro_extras.shell.numpyro_adapter import HMC_DEFAULTS, hmc_instance_settings
from numpyro_extras.shell.validation import check_count, check_real

__all__ = [
    "ExtrasKernel",
    "arguments_fingerprint",
    "build_fingerprint",
    "conditioning_values",
    "field_lookup",
    "fixed_target_functions",
    "hmc_settings",
    "rejected_move",
    "starting_positions",
    "without_conditioning",
]

# Build key of a kernel built from a potential function: it has no model arguments to change.
POTENTIAL_BUILD = "potential_fn"


def arguments_fingerprint(model_args, model_kwargs):
    """A hash of a model's arguments, to reuse what was built for them only for the same data.

    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :return: a hex digest of the arguments' structure and values, or ``None`` when any of them
        is a tracer (nothing can be cached then).

    **Example:**

    .. code-block:: python

        arguments_fingerprint((x, y), {}) == arguments_fingerprint((x.copy(), y), {})  # True
    """
    leaves, treedef = jax.tree.flatten((model_args, sorted((model_kwargs or {}).items())))
    digest = hashlib.sha256(repr(treedef).encode())
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer):
            return None
        if isinstance(leaf, (np.ndarray, jax.Array, np.generic, int, float, complex, bool)):
            array = np.asarray(leaf)
            digest.update(f"{array.shape}{array.dtype}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
        else:
            digest.update(repr(leaf).encode())
    return digest.hexdigest()


def _identity(values):
    return values


def conditioning_values(model_kwargs) -> dict:
    """The values a block of NumPyro's :class:`~numpyro.infer.gibbs.Gibbs` is conditioned on
    (the other blocks' sites), ``{}`` outside ``Gibbs``.

    :param dict model_kwargs: the keyword arguments the kernel was called with.
    :return: dict of site values.
    """
    return dict((model_kwargs or {}).get(GIBBS_SITES_KWARG, {}))


def without_conditioning(model_kwargs) -> dict:
    """``model_kwargs`` without the values of :func:`conditioning_values`."""
    return {k: v for k, v in (model_kwargs or {}).items() if k != GIBBS_SITES_KWARG}


def build_fingerprint(model_args, model_kwargs):
    """What a kernel's build depends on: the model arguments, and of the Gibbs conditioning
    values only their shapes and dtypes (they change at every sweep, and every step is given
    them anew).

    :return: a hex digest, or ``None`` when nothing may be cached (tracers among the arguments).
    """
    fingerprint = arguments_fingerprint(model_args, without_conditioning(model_kwargs))
    conditioning = conditioning_values(model_kwargs)
    if fingerprint is None or not conditioning:
        return fingerprint
    leaves = jax.tree.leaves(conditioning)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        return None
    shapes = jax.tree.map(lambda leaf: (jnp.shape(leaf), str(jnp.result_type(leaf))), conditioning)
    return hashlib.sha256(f"{fingerprint}{sorted(shapes.items())}".encode()).hexdigest()


class ExtrasKernel(MCMCKernel):
    """The shell of every numpyro_extras kernel: NumPyro's side, written once.

    A subclass supplies:

    - ``_prepare_target(model_args, model_kwargs)``: read the model (or the potential) into
      whatever its chain functions need; called once per set of model arguments.
    - ``_build(num_warmup, tag)``: the pure functions of one chain, ``(init_one, step_one)`` or
      ``(init_one, step_one, refresh_one)``. ``init_one(*inputs)`` returns a state holding
      ``tag`` and an ``rng_key``; ``step_one(state, model_args, model_kwargs)`` and
      ``refresh_one(state, model_args, model_kwargs)`` evaluate the model with the arguments they
      are given (a block of :class:`~numpyro.infer.gibbs.Gibbs` gets new conditioning values at
      every step).
    - ``_init_inputs(rng_key, init_params, batched, model_kwargs)``: the arguments of
      ``init_one`` (batched over chains when ``batched``), checked before any compilation.
    - ``_constrain_fn()``: unconstrained sample field -> the model's site values (``None``
      before the first ``init``).
    - optionally ``_check_initial_state(state)`` and ``_forget_target()`` (drop what
      ``_prepare_target`` built, for :meth:`wrap_model`).

    A family that cannot be a Gibbs block sets ``gibbs_block_error`` to the reason.

    :param model: a NumPyro model.
    :param potential_fn: alternatively, a potential in the family's convention.
    """

    sample_field = "z"
    gibbs_block_error: str | None = None

    def __init__(self, model=None, potential_fn=None):
        if (model is None) == (potential_fn is None):
            raise ValueError("Give exactly one of `model` or `potential_fn`.")
        self._model = model
        self._potential_fn = potential_fn
        self._prepared_for = None
        self._built = None
        self._step_fn: Callable | None = None
        self._refresh_fn: Callable | None = None
        # (target it was built for, compiled draw of a batch of chains' starting positions).
        self._batch_draws = None

    @property
    def model(self):
        return self._model

    # --- what a family supplies ---------------------------------------------------------------

    def _prepare_target(self, model_args, model_kwargs):
        raise NotImplementedError

    def _build(self, num_warmup, tag):
        raise NotImplementedError

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs) -> tuple:
        raise NotImplementedError

    def _constrain_fn(self) -> Callable | None:
        raise NotImplementedError

    def _check_initial_state(self, state):
        """Raise a clear error when a chain starts where the density is not finite."""

    def _forget_target(self):
        """Drop what :meth:`_prepare_target` built."""

    # --- the shell ------------------------------------------------------------------------------

    def _starting_positions(self, rng_key, init_params, batched, draw_position, dimension=None):
        """:func:`starting_positions`, the compiled draw of a batch of chains kept for the
        later runs on the same target (a new ``jax.jit`` would compile it again)."""
        built = self._batch_draws
        if built is None or built[0] is None or built[0] != self._prepared_for:
            built = self._batch_draws = (self._prepared_for, quick_jit(jax.vmap(draw_position)))
        return starting_positions(
            rng_key, init_params, batched, draw_position, dimension, batch_draw=built[1]
        )

    def _prepare(self, model_args, model_kwargs):
        """Build the target for these model arguments, unless it was built for the same ones."""
        if self._model is None:
            if self._prepared_for != POTENTIAL_BUILD:
                self._prepare_target(model_args, model_kwargs)
                self._prepared_for = POTENTIAL_BUILD
            return
        fingerprint = build_fingerprint(model_args, model_kwargs)
        if fingerprint is not None and fingerprint == self._prepared_for:
            return
        self._prepare_target(model_args, model_kwargs)
        self._prepared_for = fingerprint

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        # Under chain_method="parallel" init runs inside pmap's trace, but the model arguments are
        # concrete: build the plumbing eagerly, once per set of model arguments, so that it is
        # cached for later runs and never holds tracers.
        with evaluated_now(rng_key):
            self._prepare(model_args, model_kwargs or {})
        batched = not is_prng_key(rng_key)
        inputs = self._init_inputs(rng_key, init_params, batched, model_kwargs or {})
        # Rebuilding the chain functions would make a re-run compile again: reuse them while the
        # model arguments and the warm-up length stay the same.
        with evaluated_now(rng_key):
            self._built = compiled_chain(
                self._built,
                (self._prepared_for, num_warmup),
                lambda tag: self._build(num_warmup, tag),
            )
        init_fn, self._step_fn, self._refresh_fn = self._built.functions(batched)
        state = init_fn(*inputs)
        self._check_initial_state(state)
        return state

    def sample(self, state, model_args, model_kwargs):
        return self._step_fn(state, model_args, model_kwargs or {})

    def postprocess_fn(self, model_args, model_kwargs):
        constrain = self._constrain_fn()
        return _identity if constrain is None else constrain

    def _gibbs_error(self):
        return NotImplementedError(
            f"{type(self).__name__} cannot be a block of numpyro.infer.Gibbs: "
            f"{self.gibbs_block_error} Use it as the whole kernel of MCMC."
        )

    def refresh(self, state, model_args, model_kwargs):
        """Recompute what the state caches of the target (its log density and what depends on
        it) at the current draw, for new model arguments or conditioning values, without moving
        the chain. Blocks of :class:`~numpyro.infer.gibbs.Gibbs` are refreshed whenever a
        sibling block moved.

        :param state: the chain's state.
        :param tuple model_args: arguments of the model.
        :param dict model_kwargs: keyword arguments of the model, conditioning values included.
        :return: the state with its cached values recomputed.
        """
        if self.gibbs_block_error is not None:
            raise self._gibbs_error()
        if self._refresh_fn is None:
            raise RuntimeError(f"{type(self).__name__}.refresh needs init first.")
        return self._refresh_fn(state, model_args, model_kwargs or {})

    def wrap_model(self, wrapper):
        """A copy of this kernel on ``wrapper(self.model)``, with nothing built yet (NumPyro's
        :class:`~numpyro.infer.gibbs.Gibbs` wraps each block's model to condition it on the
        other blocks' sites).

        :param wrapper: maps a model to a model with the same call signature.
        :return: the new kernel.
        """
        if self.gibbs_block_error is not None:
            raise self._gibbs_error()
        if self._model is None:
            raise ValueError("`wrap_model` needs a kernel built on a model, not a potential_fn.")
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel._prepared_for = None
        kernel._built = None
        kernel._batch_draws = None
        kernel._step_fn = kernel._refresh_fn = None
        kernel._forget_target()
        return kernel


def hmc_settings(
    inner_kernel, *, owner_model=None, owner_defaults=None, **settings
) -> tuple[str, dict]:
    """Validate the settings of an HMC or NUTS move inside a kernel.

    :param inner_kernel: ``numpyro.infer.HMC`` or ``numpyro.infer.NUTS``, the class (then
        ``settings`` are its keyword arguments) or an instance (then its own settings are used,
        and it must be built on ``owner_model``: the move runs on the enclosing kernel's own
        potential, so an instance's model of its own would be silently ignored).
    :param owner_model: the enclosing kernel's model (``None`` for a ``potential_fn``).
    :param dict owner_defaults: the enclosing kernel's own defaults of ``settings`` (for a
        kernel whose signature lists HMC settings): with an instance, settings still at these
        defaults give way to the instance's; only those the user changed are an error.
    :param settings: keyword arguments of NumPyro's HMC initialisation (``step_size``,
        ``dense_mass``, ``num_steps``, ``trajectory_length``, ``max_tree_depth``, ...).
    :return: ``(algo, settings)`` with NumPyro's defaults filled in.
    :raises TypeError: for a setting NumPyro's HMC does not have.
    :raises ValueError: for a setting out of range, another kind of inner kernel, or an
        instance built on another model.

    **Example:**

    .. code-block:: python

        algo, settings = hmc_settings(NUTS, target_accept_prob=0.9)
        init_fn, sample_fn = numpyro.infer.hmc.hmc(potential_fn, algo=algo)
        state = init_fn(x0, num_warmup, rng_key=key, **settings)
    """
    if isinstance(inner_kernel, HMC):
        _check_instance_model(inner_kernel, owner_model)
        if owner_defaults is not None:
            settings = {
                name: value
                for name, value in settings.items()
                if name not in owner_defaults or value != owner_defaults[name]
            }
        if settings:
            raise ValueError(
                "Give the settings of an inner kernel instance to the instance itself, got "
                f"{sorted(settings)}."
            )
        algo, settings = hmc_instance_settings(inner_kernel)
    elif isinstance(inner_kernel, type) and issubclass(inner_kernel, HMC):
        algo = "NUTS" if issubclass(inner_kernel, NUTS) else "HMC"
    else:
        raise ValueError(
            "inner_kernel must be numpyro.infer.NUTS or HMC (the class, or an instance), got "
            f"{inner_kernel!r}."
        )
    unknown = sorted(set(settings) - set(HMC_DEFAULTS))
    if unknown:
        raise TypeError(
            f"Unknown inner kernel settings {unknown}; the HMC/NUTS move accepts "
            f"{sorted(HMC_DEFAULTS)}."
        )
    defaults = dict(HMC_DEFAULTS)
    if algo == "HMC" and settings.get("num_steps") is None:
        defaults["trajectory_length"] = 2 * math.pi
    merged = {**defaults, **settings}
    merged["step_size"] = check_real(
        "step_size", merged["step_size"], "a positive finite number", low=0.0
    )
    merged["target_accept_prob"] = check_real(
        "target_accept_prob", merged["target_accept_prob"], "a number in (0, 1)", low=0, high=1
    )
    for name in ("num_steps", "max_tree_depth"):
        # NUTS also takes max_tree_depth as a (warm-up, sampling) pair.
        if merged[name] is not None and not isinstance(merged[name], tuple):
            merged[name] = check_count(name, merged[name])
    if merged["trajectory_length"] is not None:
        merged["trajectory_length"] = check_real(
            "trajectory_length", merged["trajectory_length"], "a positive number", low=0.0
        )
    if algo == "HMC" and merged["num_steps"] is None and merged["trajectory_length"] is None:
        raise ValueError("HMC needs num_steps or trajectory_length.")
    return algo, merged


def _model_name(model):
    return getattr(model, "__name__", repr(model))


def _check_instance_model(inner_kernel: HMC, owner_model):
    """An inner ``HMC``/``NUTS`` instance must be built on the enclosing kernel's model."""
    name = type(inner_kernel).__name__
    if inner_kernel.model is owner_model:
        return
    if owner_model is None:
        raise ValueError(
            f"inner_kernel {name}({_model_name(inner_kernel.model)}) is built on a model, but "
            "this kernel samples a potential_fn: pass the class "
            f"{name} (settings as keywords) instead."
        )
    built_on = (
        "a potential_fn"
        if inner_kernel.model is None
        else f"another model, {_model_name(inner_kernel.model)}"
    )
    raise ValueError(
        f"inner_kernel {name}(...) is built on {built_on}, but this kernel samples "
        f"{_model_name(owner_model)}: its move runs on this kernel's own potential, so the "
        f"instance's would be ignored. Pass {name}({_model_name(owner_model)}) or the class "
        f"{name} (settings as keywords)."
    )


def starting_positions(
    rng_key, init_params, batched, draw_position, dimension=None, batch_draw=None
):
    """Each chain's state key and starting position, as a kernel's ``init`` needs them.

    Every chain's key is split into the key its state keeps and a key for its starting draw;
    ``draw_position(draw_key, init_params)`` makes the position of one chain (vmapped, and
    compiled, over the chains of a batched init).

    :param rng_key: one key, or one per chain when ``batched``.
    :param init_params: the user's ``init_params`` (one chain's, or one per chain), or ``None``.
    :param bool batched: whether the keys and ``init_params`` have a leading chain axis.
    :param draw_position: ``(draw_key, init_params) -> flat position`` of one chain.
    :param int dimension: the model's number of unconstrained dimensions, to check the
        positions against; ``None`` skips the check.
    :param batch_draw: ``draw_position`` vmapped and compiled, for a batch (default built
        here).
    :return: ``(positions, chain_keys)``.
    :raises ValueError: for positions of another dimension.

    **Example:**

    .. code-block:: python

        positions, keys = starting_positions(key, None, False, draw, dimension=3)
    """
    if batched:
        keys = jax.vmap(jax.random.split)(rng_key)
        batch_draw = batch_draw or quick_jit(jax.vmap(draw_position))
        positions = batch_draw(keys[:, 1], init_params)
        chain_keys = keys[:, 0]
    else:
        chain_keys, draw_key = jax.random.split(rng_key)
        positions = draw_position(draw_key, init_params)
    if dimension is not None and jnp.shape(positions)[-1] != dimension:
        raise ValueError(
            f"init_params have {jnp.shape(positions)[-1]} unconstrained dimensions, the model "
            f"{dimension}."
        )
    return positions, chain_keys


def rejected_move(previous, moved):
    """The NumPyro HMC/NUTS state after a move to a point where the density or its gradient is
    not finite: the previous point, with the adaptation and counters moved on and the move
    marked divergent (a numerical failure is a rejected step).

    :param previous: the :class:`~numpyro.infer.hmc.HMCState` before the move.
    :param moved: the state the move returned.
    :return: the state to keep.
    """
    return previous._replace(
        i=moved.i,
        adapt_state=moved.adapt_state,
        num_steps=moved.num_steps,
        accept_prob=jnp.zeros_like(moved.accept_prob),
        mean_accept_prob=moved.mean_accept_prob,
        diverging=jnp.ones_like(moved.diverging),
        rng_key=moved.rng_key,
    )


def fixed_target_functions(init_fn, step_fn, num_warmup, settings):
    """``(init_one, step_one)`` for the shell from a family's core whose target is fixed per
    build: ``init_fn(inputs, rng_key, num_warmup, **settings)`` and ``step_fn(state,
    num_warmup)``. The shell builds the potential per set of model arguments, so the step does
    not read them.

    **Example:**

    .. code-block:: python

        def _build(self, num_warmup, tag):
            init_fn, step_fn = vae_slmc(proposal, log_density_fn, unravel_fn, tag=tag)
            return fixed_target_functions(init_fn, step_fn, num_warmup, {})
    """

    def init_one(inputs, rng_key):
        return init_fn(inputs, rng_key, num_warmup, **settings)

    def step_one(state, model_args, model_kwargs):
        return step_fn(state, num_warmup)

    return init_one, step_one


def field_lookup(description, field_names):
    """``(__getattr__, __getitem__)`` for a NamedTuple state, so that an unknown name in
    ``MCMC(..., extra_fields=...)`` raises an error listing the names that exist (NumPyro's
    field lookup falls back to indexing, which for a tuple would say "tuple indices must be
    integers").

    :param str description: what the state belongs to, e.g. ``"A replica exchange state"``.
    :param field_names: a function returning the names ``extra_fields`` can use (called when
        an error is raised, so it may refer to names defined after the class).
    :return: the two methods, to assign in the class body.
    """

    def message(name):
        return (
            f"{description} has no field {name!r}. extra_fields can name: "
            f"{', '.join(field_names())}."
        )

    def getattr_(self, name):
        # Reached only for names that are neither fields nor properties.
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(message(name))

    def getitem(self, key):
        if isinstance(key, str):
            raise AttributeError(message(key))
        return tuple.__getitem__(self, key)

    return getattr_, getitem
