"""Joint and Gibbs continuous tempering kernels (Graham & Storkey, "Continuously tempered HMC").

Both kernels sample the target ``exp(-phi(x)) / Z`` together with an inverse temperature
``beta`` in [0, 1] that bridges a normalised base ``exp(-psi(x))`` (``beta = 0``) and the target
(``beta = 1``). Every draw carries the Rao-Blackwellised weights of paper eqs. 20-22, from which
:mod:`numpyro_extras.tempering.estimators` computes ``log Z`` and target expectations.

The functional core (``joint_tempering`` and ``gibbs_tempering``, each returning pure
``init``/``step`` functions on :class:`TemperingState`) sits under two thin
:class:`~numpyro.infer.mcmc.MCMCKernel` classes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer import HMC, NUTS
from numpyro.infer.hmc import HMCState, hmc
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from numpyro_extras.compiled_chain import compiled_chain
from numpyro_extras.potential import (
    FlatModel,
    arguments_fingerprint,
    check_finite_potential,
    flat_model_from_potential,
    flatten_model,
)
from numpyro_extras.tempering.base import GaussianBase, fit_base, validate_base
from numpyro_extras.tempering.weights import sample_inverse_temperature

__all__ = [
    "TemperatureMixing",
    "TemperingState",
    "JointContinuousTempering",
    "GibbsContinuousTempering",
    "extended_potential",
    "inverse_temperature",
    "joint_tempering",
    "gibbs_tempering",
]

# Draws with beta below / above these count as visits to the base / target end (spec 3.1).
NEAR_BASE = 0.1
NEAR_TARGET = 0.9


class TemperatureMixing(NamedTuple):
    """Running counts, over the kept draws, of how well the inverse temperature mixes.

    :param num_draws: draws counted (warm-up excluded).
    :param num_near_base: draws with ``beta < 0.1``.
    :param num_near_target: draws with ``beta > 0.9``.
    :param num_end_switches: moves from one end to the other; two make a round trip.
    :param last_end: -1 before any end was visited, 0 at the base end, 1 at the target end.
    """

    num_draws: jax.Array
    num_near_base: jax.Array
    num_near_target: jax.Array
    num_end_switches: jax.Array
    last_end: jax.Array

    @property
    def num_round_trips(self):
        return self.num_end_switches // 2


class TemperingState(NamedTuple):
    """State of a continuous tempering chain.

    :param z: the target-space position: a dict of unconstrained site values for a model, or the
        flat position for a ``potential_fn``. This is the ``sample_field``.
    :param beta: inverse temperature in [0, 1].
    :param delta: ``Delta(x) = phi(x) + log zeta - psi(x)`` (spec 2.1) at ``z``.
    :param iteration: number of transitions so far, warm-up included.
    :param inner_state: the NumPyro HMC/NUTS state the kernel moves with (on the extended space
        ``(x, u)`` for joint tempering, on ``x`` for Gibbs tempering).
    :param mixing: :class:`TemperatureMixing` counts.
    :param rng_key: random key.
    """

    z: Any
    beta: jax.Array
    delta: jax.Array
    iteration: jax.Array
    inner_state: HMCState
    mixing: TemperatureMixing
    rng_key: jax.Array

    @property
    def diverging(self):
        return self.inner_state.diverging

    @property
    def accept_prob(self):
        return self.inner_state.accept_prob

    @property
    def mean_accept_prob(self):
        return self.inner_state.mean_accept_prob

    @property
    def num_steps(self):
        return self.inner_state.num_steps

    @property
    def step_size(self):
        return self.inner_state.adapt_state.step_size


def inverse_temperature(temperature_control, beta_scale=1.0):
    """``beta = sigmoid(u / s)`` (spec 2.2), the map from the unbounded control ``u`` to [0, 1]."""
    return jax.nn.sigmoid(temperature_control / beta_scale)


def tempered_potential(target_potential_fn, base: GaussianBase):
    """``(x, beta) -> beta phi(x) + (1 - beta) psi(x)``: the tempered family's potential (eq. 8).

    The gradient (in ``x`` and in ``beta``, through ``jax.grad`` and ``jax.jvp``) is computed in
    the same pass as the value, from ``phi``'s gradient and ``psi``'s closed-form one: autodiff
    through the ``beta``-weighted sum costs, under ``vmap`` on CPU, about as much again as
    ``phi``'s own gradient on a 92-dimensional model.

    :param target_potential_fn: ``phi``, the target's potential on flat ``x``.
    :param GaussianBase base: the base density ``psi``.
    :return: a function ``(x, beta) -> scalar``.

    **Example:**

    .. code-block:: python

        potential = tempered_potential(phi, base)
        jax.grad(potential)(x, 0.5)   # 0.5 * grad phi(x) + 0.5 * grad psi(x)
    """
    target_value_and_grad = jax.value_and_grad(target_potential_fn)
    base_potential_and_gradient = base.potential_and_gradient()

    def value_and_gradients(position, beta):
        target_potential, target_gradient = target_value_and_grad(position)
        base_potential, base_gradient = base_potential_and_gradient(position)
        difference = target_potential - base_potential
        value = base_potential + beta * difference
        return value, base_gradient + beta * (target_gradient - base_gradient), difference

    @jax.custom_jvp
    def potential(position, beta):
        return value_and_gradients(position, beta)[0]

    @potential.defjvp
    def potential_jvp(primals, tangents):
        value, position_gradient, difference = value_and_gradients(*primals)
        position_tangent, beta_tangent = tangents
        return value, jnp.dot(position_gradient, position_tangent) + difference * beta_tangent

    return potential


def extended_potential(target_potential_fn, base: GaussianBase, beta_scale=1.0):
    """The potential of joint continuous tempering on the extended space ``(x, u)`` (eq. 14-15).

    ``U(x, u) = beta [phi(x) + log zeta] + (1 - beta) psi(x) + softplus(-u/s) + softplus(u/s)``
    with ``beta = sigmoid(u / s)``; the last two terms are ``-log |d beta / d u|`` (up to the
    constant ``log s``), which make the implied prior on ``beta`` uniform (spec 2.3, pitfall P3).

    :param target_potential_fn: ``phi``, the target's potential on flat ``x``.
    :param GaussianBase base: the base density ``psi`` and ``log zeta``.
    :param float beta_scale: the scale ``s``.
    :return: a function of the flat extended position ``concatenate([x, [u]])``, differentiable
        through :func:`tempered_potential`'s hand-written gradient.

    **Example:**

    .. code-block:: python

        potential = extended_potential(phi, base)
        jax.grad(potential)(jnp.append(x, -10.0))
    """
    tempered = tempered_potential(target_potential_fn, base)

    def potential(extended_position):
        position, temperature_control = extended_position[:-1], extended_position[-1]
        scaled_control = temperature_control / beta_scale
        beta = jax.nn.sigmoid(scaled_control)
        log_jacobian = jax.nn.softplus(-scaled_control) + jax.nn.softplus(scaled_control)
        return tempered(position, beta) + beta * base.log_zeta + log_jacobian

    return potential


def _initial_mixing():
    zero = jnp.zeros((), dtype=jnp.int32)
    return TemperatureMixing(zero, zero, zero, zero, jnp.full((), -1, dtype=jnp.int32))


def _update_mixing(mixing: TemperatureMixing, beta, counted) -> TemperatureMixing:
    near_base = beta < NEAR_BASE
    near_target = beta > NEAR_TARGET
    end = jnp.where(near_base, 0, jnp.where(near_target, 1, -1))
    switched = (end >= 0) & (mixing.last_end >= 0) & (end != mixing.last_end)
    counted = counted.astype(jnp.int32)
    return TemperatureMixing(
        num_draws=mixing.num_draws + counted,
        num_near_base=mixing.num_near_base + counted * near_base,
        num_near_target=mixing.num_near_target + counted * near_target,
        num_end_switches=mixing.num_end_switches + counted * switched,
        last_end=jnp.where(end >= 0, end, mixing.last_end).astype(jnp.int32),
    )


def joint_tempering(
    target_potential_fn, base: GaussianBase, inner_kernel: MCMCKernel, unravel_fn, beta_scale
):
    """Pure ``init``/``step`` of joint continuous tempering around an initialised inner kernel.

    :param target_potential_fn: ``phi`` on flat ``x``.
    :param GaussianBase base: base density and ``log zeta``.
    :param inner_kernel: a NumPyro kernel (HMC, NUTS, ...) built on :func:`extended_potential`.
    :param unravel_fn: flat ``x`` -> the ``z`` stored in the state.
    :param float beta_scale: the scale ``s`` of ``beta = sigmoid(u / s)``.
    :return: ``(init_fn, step_fn)``: ``init_fn(inner_state, rng_key)`` and
        ``step_fn(state, num_warmup)``, both for one chain.
    """

    base_potential = base.potential_function()

    def state_from_inner(inner_state, iteration, mixing, rng_key):
        position = inner_state.z[:-1]
        beta = inverse_temperature(inner_state.z[-1], beta_scale)
        delta = target_potential_fn(position) + base.log_zeta - base_potential(position)
        return TemperingState(
            unravel_fn(position), beta, delta, iteration, inner_state, mixing, rng_key
        )

    def init_fn(inner_state, rng_key):
        return state_from_inner(inner_state, jnp.zeros((), jnp.int32), _initial_mixing(), rng_key)

    def step_fn(state: TemperingState, num_warmup):
        rng_key, inner_key = jax.random.split(state.rng_key)
        inner_state = inner_kernel.sample(state.inner_state._replace(rng_key=inner_key), (), {})
        iteration = state.iteration + 1
        new_state = state_from_inner(inner_state, iteration, state.mixing, rng_key)
        mixing = _update_mixing(state.mixing, new_state.beta, iteration > num_warmup)
        return new_state._replace(mixing=mixing)

    return init_fn, step_fn


def gibbs_tempering(target_potential_fn, base: GaussianBase, unravel_fn, algo="HMC"):
    """Pure ``init``/``step`` of Gibbs continuous tempering (spec 2.7).

    Each step moves ``x`` with HMC or NUTS leaving ``exp(-beta phi - (1 - beta) psi)`` invariant
    (NumPyro's :func:`~numpyro.infer.hmc.hmc`, whose warm-up adapts step size and mass), then draws
    ``beta | x`` exactly from the truncated exponential of paper eq. 17.

    :param target_potential_fn: ``phi`` on flat ``x``.
    :param GaussianBase base: base density and ``log zeta``.
    :param unravel_fn: flat ``x`` -> the ``z`` stored in the state.
    :param str algo: ``"HMC"`` or ``"NUTS"``.
    :return: ``(init_fn, step_fn)``: ``init_fn(position, rng_key, num_warmup, **hmc_settings)``
        and ``step_fn(state, num_warmup)``, both for one chain.
    """

    tempered = tempered_potential(target_potential_fn, base)

    def tempered_potential_fn_gen(beta):
        return lambda position: tempered(position, beta)

    hmc_init, hmc_sample = hmc(potential_fn_gen=tempered_potential_fn_gen, algo=algo)
    target_value_and_grad = jax.value_and_grad(target_potential_fn)
    base_value_and_grad = base.potential_and_gradient()

    def evaluate(position):
        """phi, psi and their gradients at one point: all a change of beta needs."""
        return target_value_and_grad(position), base_value_and_grad(position)

    def retemper(inner_state: HMCState, evaluation, beta):
        """The x-move's potential and gradient at a new beta, without new gradient evaluations."""
        (target_value, target_grad), (base_value, base_grad) = evaluation
        return inner_state._replace(
            potential_energy=beta * target_value + (1.0 - beta) * base_value,
            z_grad=beta * target_grad + (1.0 - beta) * base_grad,
        )

    def delta_of(evaluation):
        (target_value, _), (base_value, _) = evaluation
        return target_value + base.log_zeta - base_value

    def init_fn(position, rng_key, num_warmup, **hmc_settings):
        hmc_key, rng_key = jax.random.split(rng_key)
        beta = jnp.zeros((), dtype=position.dtype)
        inner_state = hmc_init(
            position, num_warmup, model_args=(beta,), rng_key=hmc_key, **hmc_settings
        )
        return TemperingState(
            unravel_fn(position),
            beta,
            delta_of(evaluate(position)),
            jnp.zeros((), jnp.int32),
            inner_state,
            _initial_mixing(),
            rng_key,
        )

    def step_fn(state: TemperingState, num_warmup):
        rng_key, hmc_key, beta_key = jax.random.split(state.rng_key, 3)
        moved = hmc_sample(state.inner_state._replace(rng_key=hmc_key), model_args=(state.beta,))
        evaluation = evaluate(moved.z)
        delta = delta_of(evaluation)
        target_grad = evaluation[0][1]
        finite = jnp.isfinite(delta) & jnp.all(jnp.isfinite(target_grad))
        beta = sample_inverse_temperature(beta_key, delta)
        inner_state = retemper(moved, evaluation, beta)
        # A point where phi or its gradient is not finite is a rejected, divergent step: the
        # chain keeps its (x, beta); the adaptation and iteration counters still move on.
        rejected = state.inner_state._replace(
            i=moved.i,
            adapt_state=moved.adapt_state,
            num_steps=moved.num_steps,
            accept_prob=jnp.zeros_like(moved.accept_prob),
            mean_accept_prob=moved.mean_accept_prob,
            diverging=jnp.ones_like(moved.diverging),
            rng_key=moved.rng_key,
        )
        keep = partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
        inner_state = keep(inner_state, rejected)
        beta, delta = keep((beta, delta), (state.beta, state.delta))
        iteration = state.iteration + 1
        mixing = _update_mixing(state.mixing, beta, iteration > num_warmup)
        return TemperingState(
            unravel_fn(inner_state.z), beta, delta, iteration, inner_state, mixing, rng_key
        )

    return init_fn, step_fn


@lru_cache(maxsize=8)
def _batched_value_and_grad(potential_fn):
    return jax.jit(jax.vmap(jax.value_and_grad(potential_fn)))


def _is_concrete(value):
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(value))


class _ContinuousTemperingKernel(MCMCKernel):
    """What the joint and Gibbs kernels share: model plumbing, the base, init and postprocess."""

    sample_field = "z"
    _kernel_name = "continuous tempering"

    def __init__(
        self,
        model=None,
        potential_fn=None,
        *,
        base=None,
        init_strategy=init_to_uniform,
        fit_base_kwargs=None,
        fit_base_seed=0,
    ):
        if (model is None) == (potential_fn is None):
            raise ValueError("Give exactly one of `model` or `potential_fn`.")
        if potential_fn is not None and base is None:
            raise ValueError(
                "With `potential_fn`, `base` is required: a GaussianBase on the same flat space "
                "(fitting one needs a model)."
            )
        self._model = model
        self._potential_fn = potential_fn
        self._base = None if base is None else validate_base(base)
        self._user_base = self._base is not None
        self._init_strategy = init_strategy
        self._fit_base_kwargs = dict(fit_base_kwargs or {})
        self._fit_base_seed = fit_base_seed
        self._flattened_for = None
        self._built = None
        self._flat_model: FlatModel | None = None
        self._step_fn: Callable | None = None
        self._num_warmup = 0

    @property
    def model(self):
        return self._model

    @property
    def base(self) -> GaussianBase | None:
        """The base density and ``log zeta`` in use (fitted on the first ``init`` if not given)."""
        return self._base

    @property
    def flat_model(self) -> FlatModel | None:
        return self._flat_model

    @property
    def default_fields(self):
        return ("z", "beta", "delta", "diverging")

    def postprocess_fn(self, model_args, model_kwargs):
        if self._flat_model is None:
            return lambda z: z
        return self._flat_model.constrain_fn

    def _prepare(self, rng_key, model_args, model_kwargs):
        """Build the flat potential and the base for these model arguments."""
        if self._model is None:
            if self._flat_model is None:
                self._flat_model = flat_model_from_potential(self._potential_fn, self._base.loc)
                self._flattened_for = "potential_fn"
            return
        fingerprint = arguments_fingerprint(model_args, model_kwargs)
        if fingerprint is not None and fingerprint == self._flattened_for:
            return
        # The initial point of the flat model does not matter: chains start from the base.
        self._flat_model = flatten_model(
            jax.random.PRNGKey(self._fit_base_seed),
            self._model,
            model_args,
            model_kwargs,
            init_strategy=self._init_strategy,
            kernel_name=type(self).__name__,
        )
        if self._user_base:
            validate_base(self._base, self._flat_model.dimension)
        else:
            # A fixed seed: every chain method (a traced key under pmap included) fits one base.
            self._base = fit_base(
                jax.random.PRNGKey(self._fit_base_seed),
                self._model,
                model_args,
                model_kwargs,
                **self._fit_base_kwargs,
            )
        # Model plumbing and base are built once per set of model arguments, not once per chain.
        self._flattened_for = fingerprint

    def _initial_positions(self, rng_key, init_params, batched):
        """Flat starting points: ``init_params`` if given, else draws from the base (spec P7)."""
        if init_params is not None:
            if self._model is None:
                return jnp.asarray(init_params)
            if batched:
                return jax.vmap(lambda params: ravel_pytree(params)[0])(init_params)
            return ravel_pytree(init_params)[0]
        dtype = self._flat_model.initial_position.dtype
        if batched:
            return jax.vmap(self._base.sample)(rng_key).astype(dtype)
        return self._base.sample(rng_key).astype(dtype)

    def _check_initial_positions(self, positions):
        if not _is_concrete(positions):
            return
        positions = jnp.reshape(positions, (-1, self._flat_model.dimension))
        # One compiled, vmapped evaluation for all chains; only a failing chain is re-checked
        # one by one, for the error message.
        values, gradients = _batched_value_and_grad(self._flat_model.potential_fn)(positions)
        finite = np.isfinite(np.asarray(values)) & np.all(np.isfinite(np.asarray(gradients)), -1)
        for chain in np.flatnonzero(~finite)[:1]:
            what = f"the initial point of chain {chain}"
            check_finite_potential(self._flat_model.potential_fn, positions[chain], what)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        # Under chain_method="parallel" init runs inside pmap's trace, but the model arguments are
        # concrete: evaluate the plumbing and the base fit eagerly, so they are built once, cached
        # for later runs, and never leak tracers.
        with jax.ensure_compile_time_eval():
            self._prepare(rng_key, model_args, model_kwargs or {})
        self._num_warmup = num_warmup
        batched = not is_prng_key(rng_key)
        position_keys = (
            jax.vmap(jax.random.split)(rng_key) if batched else jax.random.split(rng_key)
        )
        chain_keys = position_keys[..., 0, :] if batched else position_keys[0]
        draw_keys = position_keys[..., 1, :] if batched else position_keys[1]
        positions = self._initial_positions(draw_keys, init_params, batched)
        if positions.shape[-1] != self._flat_model.dimension:
            raise ValueError(
                f"init_params have {positions.shape[-1]} unconstrained dimensions, the model "
                f"{self._flat_model.dimension}."
            )
        self._check_initial_positions(positions)
        # Rebuilding the step function would make a re-run recompile, so reuse it while the model
        # arguments and warm-up length stay the same.
        # One compiled init instead of NumPyro's HMC init run operation by operation.
        self._built = compiled_chain(
            self._built, (self._flattened_for, num_warmup), lambda: self._build(num_warmup)
        )
        init_fn, self._step_fn = self._built.functions(batched)
        return init_fn(positions, chain_keys)

    def sample(self, state, model_args, model_kwargs):
        return self._step_fn(state)

    def get_diagnostics_str(self, state):
        mixing = state.mixing
        counted = max(int(mixing.num_draws), 1)
        return (
            f"{int(state.num_steps)} steps of size {float(state.step_size):.2e}. "
            f"acc. prob={float(state.mean_accept_prob):.2f} beta={float(state.beta):.2f} "
            f"near 0/1: {int(mixing.num_near_base) / counted:.0%}/"
            f"{int(mixing.num_near_target) / counted:.0%} "
            f"round trips={int(mixing.num_round_trips)}"
        )

    def _build(self, num_warmup):
        raise NotImplementedError


class JointContinuousTempering(_ContinuousTemperingKernel):
    """Joint continuous tempering: NUTS (or HMC) on the extended space ``(x, u)``.

    The inverse temperature is ``beta = sigmoid(u / beta_scale)`` and the extended potential is
    paper eq. 14 (:func:`extended_potential`), so any NumPyro gradient kernel samples it and its
    warm-up adapts step size and mass matrix, ``u`` included. Chains start with ``x`` drawn from
    the base and ``u = -10 * beta_scale`` (``beta`` about 4.5e-5, spec P7). Every draw records
    ``beta`` and ``delta`` (spec 2.1); :func:`numpyro_extras.log_marginal_likelihood` turns them
    into ``log Z`` (eq. 20).

    Under ``chain_method="vectorized"``, chains at different temperatures build NUTS trees of
    different lengths and wait for the longest one every transition; ``"parallel"``,
    ``"sequential"`` or a fixed-length ``inner_kernel=HMC`` avoid that loss.

    :param model: a NumPyro model with continuous latent sites.
    :param potential_fn: alternatively, ``phi`` on flat 1-D positions (then ``base`` is required).
    :param GaussianBase base: base density and ``log zeta``; ``None`` fits one with
        :func:`~numpyro_extras.fit_base` on the first ``init`` (once per set of model arguments).
    :param inner_kernel: the NumPyro kernel class on the extended space (``NUTS`` or ``HMC``).
    :param float beta_scale: the scale ``s`` of ``beta = sigmoid(u / s)`` (spec 2.2).
    :param float initial_beta_logit: starting ``u / s``.
    :param init_strategy: NumPyro init strategy (only used to build the model's flat view).
    :param dict fit_base_kwargs: keyword arguments for :func:`~numpyro_extras.fit_base`.
    :param int fit_base_seed: seed of the base fit, the same for every chain method.
    :param inner_kwargs: passed to ``inner_kernel`` (``step_size``, ``dense_mass``, ...).

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.JointContinuousTempering(model), num_warmup=1000, num_samples=2000)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        nx.log_marginal_likelihood(mcmc)
    """

    def __init__(
        self,
        model=None,
        potential_fn=None,
        *,
        base=None,
        inner_kernel=NUTS,
        beta_scale=1.0,
        initial_beta_logit=-10.0,
        init_strategy=init_to_uniform,
        fit_base_kwargs=None,
        fit_base_seed=0,
        **inner_kwargs,
    ):
        super().__init__(
            model,
            potential_fn,
            base=base,
            init_strategy=init_strategy,
            fit_base_kwargs=fit_base_kwargs,
            fit_base_seed=fit_base_seed,
        )
        if beta_scale <= 0:
            raise ValueError(f"beta_scale must be positive, got {beta_scale}.")
        self._inner_kernel_class = inner_kernel
        self._inner_kwargs = inner_kwargs
        self._beta_scale = float(beta_scale)
        self._initial_beta_logit = float(initial_beta_logit)
        self._inner_kernel = None

    @property
    def inner_kernel(self):
        return self._inner_kernel

    def _build(self, num_warmup):
        flat_model, base = self._flat_model, self._base
        potential = extended_potential(flat_model.potential_fn, base, self._beta_scale)
        self._inner_kernel = self._inner_kernel_class(potential_fn=potential, **self._inner_kwargs)
        init_fn, step_fn = joint_tempering(
            flat_model.potential_fn,
            base,
            self._inner_kernel,
            flat_model.unravel_fn,
            self._beta_scale,
        )
        temperature_control = self._initial_beta_logit * self._beta_scale

        def init_one(position, rng_key):
            inner_key, rng_key = jax.random.split(rng_key)
            extended = jnp.append(position, jnp.asarray(temperature_control, position.dtype))
            inner_state = self._inner_kernel.init(inner_key, num_warmup, extended, (), {})
            return init_fn(inner_state, rng_key)

        def step_one(state):
            return step_fn(state, num_warmup)

        return init_one, step_one


class GibbsContinuousTempering(_ContinuousTemperingKernel):
    """Gibbs continuous tempering: an HMC (or NUTS) move on ``x`` given ``beta``, then ``beta | x``.

    The ``x``-move leaves ``exp(-beta phi - (1 - beta) psi)`` invariant; ``beta`` is then drawn
    exactly from the exponential with rate ``Delta(x)`` truncated to [0, 1] (paper eq. 17),
    numerically stable for any ``|Delta|``. Warm-up adapts the step size (and, by default, a
    diagonal mass matrix). Chains start with ``x`` from the base and ``beta = 0`` (spec P7).

    :param model: a NumPyro model with continuous latent sites.
    :param potential_fn: alternatively, ``phi`` on flat 1-D positions (then ``base`` is required).
    :param GaussianBase base: base density and ``log zeta``; ``None`` fits one with
        :func:`~numpyro_extras.fit_base` on the first ``init``.
    :param inner_kernel: ``HMC`` (fixed number of leapfrog steps) or ``NUTS``.
    :param int num_steps: leapfrog steps of an HMC move (paper: 20).
    :param float step_size: initial step size.
    :param bool adapt_step_size: adapt the step size in warm-up (dual averaging).
    :param bool adapt_mass_matrix: adapt the mass matrix in warm-up.
    :param bool dense_mass: dense instead of diagonal mass matrix.
    :param float target_accept_prob: target acceptance of the step-size adaptation.
    :param int max_tree_depth: NUTS tree depth.
    :param init_strategy: NumPyro init strategy (only used to build the model's flat view).
    :param dict fit_base_kwargs: keyword arguments for :func:`~numpyro_extras.fit_base`.
    :param int fit_base_seed: seed of the base fit, the same for every chain method.

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.GibbsContinuousTempering(model), num_warmup=500, num_samples=5000)
        mcmc.run(jax.random.PRNGKey(0), data)
        mcmc.get_extra_fields()["beta"]
    """

    def __init__(
        self,
        model=None,
        potential_fn=None,
        *,
        base=None,
        inner_kernel=HMC,
        num_steps=20,
        step_size=1.0,
        adapt_step_size=True,
        adapt_mass_matrix=True,
        dense_mass=False,
        target_accept_prob=0.8,
        max_tree_depth=10,
        init_strategy=init_to_uniform,
        fit_base_kwargs=None,
        fit_base_seed=0,
    ):
        super().__init__(
            model,
            potential_fn,
            base=base,
            init_strategy=init_strategy,
            fit_base_kwargs=fit_base_kwargs,
            fit_base_seed=fit_base_seed,
        )
        if inner_kernel not in (HMC, NUTS):
            raise ValueError("inner_kernel must be numpyro.infer.HMC or numpyro.infer.NUTS.")
        self._algo = "NUTS" if inner_kernel is NUTS else "HMC"
        self._hmc_settings = dict(
            step_size=float(step_size),
            adapt_step_size=adapt_step_size,
            adapt_mass_matrix=adapt_mass_matrix,
            dense_mass=dense_mass,
            target_accept_prob=target_accept_prob,
            num_steps=int(num_steps) if self._algo == "HMC" else None,
            trajectory_length=None,
            max_tree_depth=max_tree_depth,
        )

    def _build(self, num_warmup):
        flat_model = self._flat_model
        init_fn, step_fn = gibbs_tempering(
            flat_model.potential_fn, self._base, flat_model.unravel_fn, self._algo
        )

        def init_one(position, rng_key):
            return init_fn(position, rng_key, num_warmup, **self._hmc_settings)

        def step_one(state):
            return step_fn(state, num_warmup)

        return init_one, step_one
