"""The functional core of joint and Gibbs continuous tempering (Graham & Storkey,
"Continuously tempered HMC"), in BlackJAX's shape: a :class:`TemperingChainState` and a
:class:`TemperingInfo`, ``init`` functions (:func:`joint_init`, :func:`gibbs_init`) and
``build_kernel`` functions (:func:`build_joint_kernel`, :func:`build_gibbs_kernel`) returning a
pure ``kernel(rng_key, state) -> (state, info)``.

Both chains sample the target ``exp(-phi(x)) / Z`` together with an inverse temperature
``beta`` in [0, 1] that bridges a normalised base ``exp(-psi(x))`` (``beta = 0``) and the target
(``beta = 1``). Every tempered draw carries the Rao-Blackwellised weights of paper eqs. 20-22.

Beside the tempered chain ``(x, beta)`` each chain keeps a target replica ``y``: after every
transition, ``x`` and ``y`` swap places with probability
``min(1, exp((1 - beta) (Delta(y) - Delta(x))))``, a Metropolis step on the product density
``p(x, beta) p(y)`` (paper eq. 16 times the target). So ``y`` is an exact posterior chain.
``phi``, its gradient and ``psi`` are cached at ``y``, so a swap costs no gradient evaluation.

The inner HMC/NUTS moves adapt during warm-up, so the warm-up length is part of a kernel's
build. The core works on flat positions and knows nothing of NumPyro's ``MCMC``: the chain's key,
the build tag, the site values and the moves per kept draw belong to the kernels of
:mod:`numpyro_extras.tempering.kernels` (:class:`~numpyro_extras.TemperingState`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer.hmc import HMCState, hmc
from numpyro.infer.util import ParamInfo

from numpyro_extras.model.bases import GaussianBase
from numpyro_extras.shell.kernel import rejected_move
from numpyro_extras.shell.metropolis import metropolis_accept, select
from numpyro_extras.tempering.weights import sample_inverse_temperature

__all__ = [
    "GIBBS_KEYS",
    "INIT_KEYS",
    "JOINT_KEYS",
    "PointEvaluation",
    "TemperatureMixing",
    "TemperingChainState",
    "TemperingInfo",
    "build_gibbs_kernel",
    "build_joint_kernel",
    "extended_potential",
    "gibbs_init",
    "inverse_temperature",
    "joint_init",
    "log_zeta_step_size",
    "propose_from_base",
    "swap_with_replica",
    "tempered_potential",
    "unreached_ends",
]

# Draws with beta below / above these count as visits to the base / target end.
NEAR_BASE = 0.1
NEAR_TARGET = 0.9

# How many keys an init and a transition split their key in. Each leaves one of them unused (the
# last of an init's, the first of a transition's), so that a driver keeping one key per chain, as
# the NumPyro kernels do, carries that one on without a split of its own.
INIT_KEYS = 3
JOINT_KEYS = 5
GIBBS_KEYS = 6


def unreached_ends(beta) -> list[str]:
    """The chains that never reached an end of the inverse temperature, as problem sentences.

    A chain that never reached ``beta`` near 0 has no base-end visits, so the ratio estimate of
    ``log Z`` (eq. 20) rests on nothing; one that never reached ``beta`` near 1 has no target
    draws.

    :param beta: array ``(num_chains, num_draws)`` of a run's inverse temperatures.
    :return: one sentence per unreached end, empty when every chain reached both.

    **Example:**

    .. code-block:: python

        unreached_ends(np.array([[0.05, 0.95], [0.5, 0.97]]))  # ['chains [1] never reached ...']
    """
    beta = np.asarray(beta)
    chains = np.arange(beta.shape[0])
    never_base = chains[~np.any(beta < NEAR_BASE, axis=1)]
    never_target = chains[~np.any(beta > NEAR_TARGET, axis=1)]
    problems = []
    if never_base.size:
        problems.append(f"chains {never_base.tolist()} never reached beta < {NEAR_BASE}")
    if never_target.size:
        problems.append(f"chains {never_target.tolist()} never reached beta > {NEAR_TARGET}")
    return problems


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


class PointEvaluation(NamedTuple):
    """``phi``, ``psi`` and their gradients at one flat point: all a swap or a new ``beta`` needs.

    :param position: the flat point ``x``.
    :param target_potential: ``phi(x)``.
    :param target_gradient: ``grad phi(x)``.
    :param base_potential: ``psi(x)``.
    :param base_gradient: ``grad psi(x)``.
    """

    position: jax.Array
    target_potential: jax.Array
    target_gradient: jax.Array
    base_potential: jax.Array
    base_gradient: jax.Array

    @property
    def log_ratio(self):
        """``phi(x) - psi(x)``, which is ``Delta(x) - log zeta``."""
        return self.target_potential - self.base_potential

    @property
    def finite(self):
        return jnp.isfinite(self.log_ratio) & jnp.all(jnp.isfinite(self.target_gradient))


class TemperingChainState(NamedTuple):
    """Where one continuous tempering chain is, on flat positions: the core's state.

    :param tempered: the :class:`PointEvaluation` at the tempered chain's position ``x``.
    :param replica: the :class:`PointEvaluation` at the target replica ``y``, an exact posterior
        draw.
    :param beta: the tempered chain's inverse temperature in [0, 1].
    :param log_zeta: this chain's ``log zeta``: adapted during warm-up (if enabled), then fixed.
    :param iteration: number of transitions so far, warm-up included.
    :param inner_state: the NumPyro HMC/NUTS state the tempered chain moves with (on the extended
        space ``(x, u)`` for joint tempering, on ``x`` for Gibbs tempering).
    :param replica_inner_state: the NumPyro HMC/NUTS state of the replica's own move on the
        target (``None`` when the kernel makes none).
    :param mixing: :class:`TemperatureMixing` counts.

    **Example:**

    .. code-block:: python

        state = joint_init(x0, potential_fn, base, jax.random.PRNGKey(0), num_warmup=500)
        state.beta, state.delta  # about 4.5e-5 and Delta(x0)
    """

    tempered: PointEvaluation
    replica: PointEvaluation
    beta: jax.Array
    log_zeta: jax.Array
    iteration: jax.Array
    inner_state: HMCState
    replica_inner_state: HMCState | None
    mixing: TemperatureMixing

    @property
    def delta(self):
        """``Delta(x) = phi(x) + log zeta - psi(x)`` at the tempered position."""
        return self.tempered.log_ratio + self.log_zeta


class TemperingInfo(NamedTuple):
    """What one transition of continuous tempering did.

    :param swap_accept_prob: acceptance probability of the swap of ``x`` and ``y``.
    :param base_accept_prob: acceptance probability of the proposal of a new ``x`` drawn from
        the base (0 when the kernel makes none).
    :param accept_prob: acceptance probability of the tempered chain's HMC/NUTS move.
    :param diverging: whether that move diverged (or reached a point where ``phi`` or its
        gradient is not finite).
    :param num_steps: leapfrog steps of that move.
    :param replica_accept_prob: acceptance probability of the replica's own HMC/NUTS move (0
        when there is none).
    :param replica_diverging: whether the replica's move diverged (``False`` when there is
        none).
    :param replica_num_steps: leapfrog steps of the replica's move (0 when there is none): a
        transition evaluates ``phi`` and its gradient ``num_steps + replica_num_steps + 2``
        times, the two beside the moves at the moved ``x`` and at a draw from the base (one
        fewer without base proposals).

    **Example:**

    .. code-block:: python

        state, info = kernel(jax.random.PRNGKey(1), state)
        info.swap_accept_prob, info.diverging
    """

    swap_accept_prob: jax.Array
    base_accept_prob: jax.Array
    accept_prob: jax.Array
    diverging: jax.Array
    num_steps: jax.Array
    replica_accept_prob: jax.Array
    replica_diverging: jax.Array
    replica_num_steps: jax.Array


def inverse_temperature(temperature_control, beta_scale=1.0):
    """``beta = sigmoid(u / s)``, the map from the unbounded control ``u`` to [0, 1] (paper
    section 4)."""
    return jax.nn.sigmoid(temperature_control / beta_scale)


def log_zeta_step_size(iteration):
    """Gain of the warm-up update of ``log zeta`` at ``iteration`` (1, 2, ...).

    A Robbins-Monro sequence (sum diverges, sum of squares converges): about 0.5 nats at the
    start, so a ``log zeta`` many nats off is corrected within the first hundred transitions,
    and about 0.05 after a thousand, so it settles.
    """
    return 0.5 / (1.0 + iteration / 20.0) ** 0.6


def tempered_potential(target_potential_fn, base: GaussianBase):
    """``(x, beta) -> beta phi(x) + (1 - beta) psi(x)``: the tempered family's potential (eq. 8).

    The gradient (in ``x`` and in ``beta``, through ``jax.grad`` and ``jax.jvp``) is computed in
    the same pass as the value, from ``phi``'s gradient and ``psi``'s closed-form one: autodiff
    through the ``beta``-weighted sum costs, under ``vmap`` on CPU, about as much again as
    ``phi``'s own gradient.

    :param target_potential_fn: ``phi``, the target's potential on flat ``x``.
    :param GaussianBase base: the base density ``psi``.
    :return: a function ``(x, beta) -> scalar``.

    **Example:**

    .. code-block:: python

        phi = lambda x: 0.5 * jnp.sum((x - 3.0) ** 2)  # a model's potential, -log density
        base = nx.GaussianBase(jnp.zeros(2), jnp.eye(2), log_zeta=0.0)
        potential = nx.tempered_potential(phi, base)
        jax.grad(potential)(jnp.ones(2), 0.5)  # 0.5 * grad phi(x) + 0.5 * grad psi(x)
    """
    target_value_and_grad = jax.value_and_grad(target_potential_fn)
    base_potential_and_gradient = base.potential_and_gradient()

    def value_and_gradients(position, beta):
        target_potential, target_gradient = target_value_and_grad(position)
        base_potential, base_gradient = base_potential_and_gradient(position)
        # Weighted, not ``psi + beta (phi - psi)``: at beta = 1 this is phi to the last bit,
        # which the target replica's moves rely on.
        value = beta * target_potential + (1.0 - beta) * base_potential
        gradient = beta * target_gradient + (1.0 - beta) * base_gradient
        return value, gradient, target_potential - base_potential

    @jax.custom_jvp
    def potential(position, beta):
        return value_and_gradients(position, beta)[0]

    @potential.defjvp
    def potential_jvp(primals, tangents):
        value, position_gradient, difference = value_and_gradients(*primals)
        position_tangent, beta_tangent = tangents
        return value, jnp.dot(position_gradient, position_tangent) + difference * beta_tangent

    return potential


def _log_jacobian(scaled_control):
    """``-log |d beta / d u|`` up to the constant ``log s`` (paper eq. 14)."""
    return jax.nn.softplus(-scaled_control) + jax.nn.softplus(scaled_control)


def _extended_potential_family(target_potential_fn, base: GaussianBase, beta_scale):
    """``(extended_position, log_zeta, pinned) -> U``: eq. 14's potential, or, where
    ``pinned``, the target's ``phi(x)`` with ``u`` a standard normal of its own, so that the
    target replica moves with the same HMC/NUTS transition on the same space."""
    tempered = tempered_potential(target_potential_fn, base)

    def potential(extended_position, log_zeta, pinned=False):
        position, temperature_control = extended_position[:-1], extended_position[-1]
        scaled_control = temperature_control / beta_scale
        beta = jnp.where(pinned, 1.0, jax.nn.sigmoid(scaled_control))
        temperature_terms = jnp.where(
            pinned,
            0.5 * temperature_control**2,
            beta * log_zeta + _log_jacobian(scaled_control),
        )
        return tempered(position, beta) + temperature_terms

    return potential


def extended_potential(target_potential_fn, base: GaussianBase, beta_scale=1.0, log_zeta=None):
    """The potential of joint continuous tempering on the extended space ``(x, u)`` (eq. 14-15).

    ``U(x, u) = beta [phi(x) + log zeta] + (1 - beta) psi(x) + softplus(-u/s) + softplus(u/s)``
    with ``beta = sigmoid(u / s)``; the last two terms are ``-log |d beta / d u|`` (up to the
    constant ``log s``), which make the implied prior on ``beta`` uniform (eq. 16).

    :param target_potential_fn: ``phi``, the target's potential on flat ``x``.
    :param GaussianBase base: the base density ``psi``.
    :param float beta_scale: the scale ``s``.
    :param log_zeta: ``log zeta``; default ``base.log_zeta``.
    :return: a function of the flat extended position ``concatenate([x, [u]])``, differentiable
        through :func:`tempered_potential`'s hand-written gradient.

    **Example:**

    .. code-block:: python

        phi = lambda x: 0.5 * jnp.sum((x - 3.0) ** 2)  # a model's potential, -log density
        base = nx.GaussianBase(jnp.zeros(2), jnp.eye(2), log_zeta=0.0)
        potential = nx.extended_potential(phi, base)
        jax.grad(potential)(jnp.append(jnp.ones(2), -10.0))  # (x, u): beta = sigmoid(u) near 0
    """
    family = _extended_potential_family(target_potential_fn, base, beta_scale)
    log_zeta = base.log_zeta if log_zeta is None else log_zeta
    return lambda extended_position: family(extended_position, log_zeta)


def _joint_energy(evaluation: PointEvaluation, temperature_control, log_zeta, beta_scale):
    """``U(x, u)`` of eq. 14 and its gradient from cached values of ``phi`` and ``psi``."""
    scaled_control = temperature_control / beta_scale
    beta = jax.nn.sigmoid(scaled_control)
    delta = evaluation.log_ratio + log_zeta
    energy = (
        beta * (evaluation.target_potential + log_zeta)
        + (1.0 - beta) * evaluation.base_potential
        + _log_jacobian(scaled_control)
    )
    position_gradient = beta * evaluation.target_gradient + (1.0 - beta) * evaluation.base_gradient
    control_gradient = (beta * (1.0 - beta) * delta + 2.0 * beta - 1.0) / beta_scale
    return energy, jnp.append(position_gradient, control_gradient)


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


def _point_evaluator(target_potential_fn, base: GaussianBase):
    target_value_and_grad = jax.value_and_grad(target_potential_fn)
    base_value_and_grad = base.potential_and_gradient()

    def evaluate(position) -> PointEvaluation:
        target_potential, target_gradient = target_value_and_grad(position)
        base_potential, base_gradient = base_value_and_grad(position)
        return PointEvaluation(
            position, target_potential, target_gradient, base_potential, base_gradient
        )

    return evaluate


def swap_with_replica(rng_key, beta, tempered: PointEvaluation, replica: PointEvaluation):
    """Propose to swap the tempered point ``x`` and the target replica ``y``.

    The swap is a Metropolis step on ``p(x, beta) p(y)``, with ``p(x, beta)`` the joint density
    of paper eq. 16 and ``p(y)`` the target; the ratio is
    ``exp((1 - beta) (Delta(y) - Delta(x)))``, in which ``log zeta`` cancels. It needs only the
    cached values, no new evaluation of ``phi``.

    :param rng_key: key for the acceptance draw.
    :param beta: the tempered chain's inverse temperature.
    :param PointEvaluation tempered: the evaluation at ``x``.
    :param PointEvaluation replica: the evaluation at ``y``.
    :return: ``(tempered, replica, accept_prob)`` after the swap (or without it).

    **Example:**

    .. code-block:: python

        tempered, replica, accept_prob = swap_with_replica(key, 0.3, evaluate(x), evaluate(y))
    """
    log_ratio = (1.0 - beta) * (replica.log_ratio - tempered.log_ratio)
    accept, accept_prob = metropolis_accept(rng_key, log_ratio)
    return select(accept, replica, tempered), select(accept, tempered, replica), accept_prob


def propose_from_base(rng_key, beta, tempered: PointEvaluation, base, evaluate):
    """Propose a new tempered point ``x'`` drawn from the base, keeping ``beta``.

    An independence Metropolis-Hastings step on ``x | beta``, whose density
    ``exp(-beta phi - (1 - beta) psi)`` (paper eq. 8) divided by the proposal ``exp(-psi)`` is
    ``exp(-beta Delta)``: the acceptance is ``min(1, exp(-beta (Delta(x') - Delta(x))))``. Near
    ``beta = 0`` almost every proposal is accepted, so a chain that goes down to the base leaves
    its mode for a fresh draw from the whole base instead of drifting from where it was; near
    ``beta = 1`` it moves only to points the target weighs more than the base does. It costs one
    evaluation of ``phi`` and its gradient.

    :param rng_key: key for the proposal and the acceptance draw.
    :param beta: the inverse temperature of the move.
    :param PointEvaluation tempered: the evaluation at the current ``x``.
    :param base: the base density (anything with ``sample(rng_key)``).
    :param evaluate: flat position -> :class:`PointEvaluation`.
    :return: ``(tempered, accept_prob)``.

    **Example:**

    .. code-block:: python

        tempered, accept_prob = propose_from_base(key, 0.05, evaluate(x), base, evaluate)
    """
    proposal_key, accept_key = jax.random.split(rng_key)
    proposal = evaluate(base.sample(proposal_key).astype(tempered.position.dtype))
    return _accept_base_proposal(accept_key, beta, tempered, proposal)


def _accept_base_proposal(rng_key, beta, tempered: PointEvaluation, proposal):
    """The Metropolis step of :func:`propose_from_base` on an evaluated base draw ``proposal``
    (``None``: no proposal, no move)."""
    if proposal is None:
        return tempered, jnp.zeros_like(tempered.log_ratio)
    log_ratio = -beta * (proposal.log_ratio - tempered.log_ratio)
    # A proposal where phi or its gradient is not finite is a rejection.
    log_ratio = jnp.where(proposal.finite, log_ratio, -jnp.inf)
    accept, accept_prob = metropolis_accept(rng_key, log_ratio)
    return select(accept, proposal, tempered), accept_prob


def _stack_pair(first, second):
    """Two pytrees of the same structure as one, each leaf stacked along a new first axis."""
    return jax.tree.map(
        lambda *leaves: jnp.stack([jnp.asarray(leaf) for leaf in leaves]), first, second
    )


def _unstack_pair(pair):
    """The two pytrees that :func:`_stack_pair` stacked."""
    return jax.tree.map(lambda leaf: leaf[0], pair), jax.tree.map(lambda leaf: leaf[1], pair)


def _evaluator_with_base_draws(base, evaluate, enabled):
    """``(rng_key, position) -> (evaluation, proposal)``: the evaluation at the moved ``x`` and,
    when enabled, at a fresh draw from the base for :func:`propose_from_base`'s step
    (``None`` when disabled).

    The two points are evaluated by one vmapped call, so that ``phi``'s gradient appears once in
    the compiled transition instead of twice; the draw does not depend on ``beta``, so it can
    be made before the move's ``beta`` is known.
    """
    if not enabled:
        return lambda rng_key, position: (evaluate(position), None)

    def evaluate_with_draw(rng_key, position):
        draw = base.sample(rng_key).astype(position.dtype)
        return _unstack_pair(jax.vmap(evaluate)(_stack_pair(position, draw)))

    return evaluate_with_draw


class _ReplicaSpace(NamedTuple):
    """How the target replica ``y`` sits in the tempered move's state space.

    ``lift(replica, z)`` gives the HMC state's ``(z, potential_energy, z_grad)`` at
    ``replica``'s cached values (``z`` is the replica's current HMC position, for any
    coordinates besides ``y``); ``lower(state)`` gives ``(y, phi(y), grad phi(y))`` back.
    ``args`` are the ``model_args`` of the tempered family that make it the target.
    """

    lift: Any
    lower: Any
    args: tuple


def _paired_moves(hmc_sample, base, space: _ReplicaSpace | None):
    """``move(rng_key, inner, args, replica, replica_inner)``: the tempered chain's HMC/NUTS
    transition and the target replica's own, in one ``lax.scan`` of length two.

    The swaps alone move ``y`` only when the tempered chain comes near ``beta = 1`` with a new
    point, which in many dimensions is seldom; a move of ``y`` that leaves the target invariant
    makes ``y`` a NUTS (or HMC) chain on the posterior between swaps, which still bring it
    points from other modes. The replica moves with the tempered family itself at the
    arguments that make it the target (``space.args``), with its own warm-up (step size and
    mass matrix), so the two transitions share one compiled body instead of two. The two act on
    independent parts of the state, so moving both at once is their composition. ``phi`` and
    its gradient are cached as NumPyro's state does, so a swap needs no new evaluation.

    :return: ``(moved_inner, replica, replica_inner)``; without ``space``, the replica and its
        (``None``) state unchanged.
    """
    if space is None:
        return lambda rng_key, inner, args, replica, replica_inner: (
            hmc_sample(inner._replace(rng_key=rng_key), model_args=args),
            replica,
            replica_inner,
        )
    base_value_and_grad = base.potential_and_gradient()

    def move(rng_key, inner: HMCState, args, replica: PointEvaluation, replica_inner: HMCState):
        tempered_key, replica_key = jax.random.split(rng_key)
        # A swap may have replaced y since the last move: restart from the cached values at y.
        z, potential_energy, z_grad = space.lift(replica, replica_inner.z)
        synced = replica_inner._replace(
            z=z,
            potential_energy=potential_energy,
            z_grad=z_grad,
            energy=replica_inner.energy + potential_energy - replica_inner.potential_energy,
            rng_key=replica_key,
        )
        states = _stack_pair(inner._replace(rng_key=tempered_key), synced)
        stacked_args = _stack_pair(args, space.args)

        def transition(_, state_and_args):
            state, model_args = state_and_args
            return None, hmc_sample(state, model_args=model_args)

        # A scan, not a vmap: the two trees differ in length, and a vmapped NUTS waits for the
        # longer one with both.
        _, moved = jax.lax.scan(transition, None, (states, stacked_args))
        moved_inner, moved_replica = _unstack_pair(moved)
        position, target_potential, target_gradient = space.lower(moved_replica)
        evaluation = PointEvaluation(
            position, target_potential, target_gradient, *base_value_and_grad(position)
        )
        finite = evaluation.finite
        return (
            moved_inner,
            select(finite, evaluation, replica),
            select(finite, moved_replica, rejected_move(synced, moved_replica)),
        )

    return move


def _replica_settings(settings):
    # A mass matrix given for the tempered move (of (x, u) under joint tempering) need not fit
    # y; the replica's warm-up adapts its own.
    return {key: value for key, value in settings.items() if key != "inverse_mass_matrix"}


def _replica_init(hmc_init, position, args, num_warmup, rng_key, settings):
    settings = _replica_settings(settings)
    return hmc_init(position, num_warmup, model_args=args, rng_key=rng_key, **settings)


def _adapt_log_zeta(log_zeta, tempered: PointEvaluation, iteration, num_warmup, adapt):
    """One Robbins-Monro step of ``log zeta`` during warm-up.

    The fixed point balances the two ends of ``beta``: ``E[tanh(-Delta / 2)] = 0``, which for a
    base proportional to the target is ``zeta = Z``, where ``p(beta = 1) / p(beta = 0) = Z / zeta``
    (paper eq. 19) is 1. A chain stuck at ``beta`` near 0 has ``Delta > 0`` and lowers
    ``log zeta``; one stuck near 1 raises it.
    """
    delta = tempered.log_ratio + log_zeta
    updated = log_zeta + log_zeta_step_size(iteration) * jnp.tanh(-0.5 * delta)
    in_warmup = adapt & (iteration <= num_warmup) & jnp.isfinite(updated)
    return jnp.where(in_warmup, updated, log_zeta)


def _moved_or_rejected(state: TemperingChainState, moved: HMCState, evaluation: PointEvaluation):
    """The move's point, or the previous one if ``phi`` or its gradient is not finite there."""
    finite = evaluation.finite
    return (
        select(finite, evaluation, state.tempered),
        select(finite, moved, rejected_move(state.inner_state, moved)),
    )


def _advanced(state: TemperingChainState, moved_on, accept_probs, num_warmup):
    """The state and info after one transition: ``moved_on`` is ``(tempered, replica, beta,
    log_zeta, inner_state, replica_inner_state)`` and ``accept_probs`` is ``(swap_accept_prob,
    base_accept_prob)``."""
    tempered, replica, beta, log_zeta, inner, replica_inner = moved_on
    iteration = state.iteration + 1
    mixing = _update_mixing(state.mixing, beta, iteration > num_warmup)
    new_state = TemperingChainState(
        tempered, replica, beta, log_zeta, iteration, inner, replica_inner, mixing
    )
    if replica_inner is None:
        replica_moved = (
            jnp.zeros_like(beta),
            jnp.zeros(jnp.shape(beta), bool),
            jnp.zeros(jnp.shape(beta), inner.num_steps.dtype),
        )
    else:
        replica_moved = (
            replica_inner.accept_prob,
            replica_inner.diverging,
            replica_inner.num_steps,
        )
    info = TemperingInfo(
        *accept_probs, inner.accept_prob, inner.diverging, inner.num_steps, *replica_moved
    )
    return new_state, info


def _initial_state(evaluation: PointEvaluation, beta, log_zeta, inner_states):
    """The state at the start, with ``x`` and ``y`` both at ``evaluation``'s point."""
    inner, replica_inner = inner_states
    zero = jnp.zeros((), jnp.int32)
    return TemperingChainState(
        evaluation, evaluation, beta, log_zeta, zero, inner, replica_inner, _initial_mixing()
    )


def _primed_moves(hmc_pair, target, tempered_start, replica_space, base_proposals, settings):
    """``(move, evaluate_with_draw)`` of a kernel: :func:`_paired_moves` with NumPyro's ``hmc``
    pair ``hmc_pair``, and :func:`_evaluator_with_base_draws`.

    NumPyro's init stores the warm-up length and the move's settings in the pair's closure, where
    its sample function reads them, so the init is traced here once, abstractly, at a given point
    and potential: nothing is evaluated or compiled, and the kernel needs no chain's init. It is
    the last init a chain's start makes: the replica's (``replica_space``) when there is one,
    else the tempered move's.

    :param target: ``(target_potential_fn, base, num_warmup)``.
    :param tempered_start: ``(dimension, model_args)`` of the tempered move's init.
    """
    target_potential_fn, base, num_warmup = target
    hmc_init, hmc_sample = hmc_pair
    dimension, model_args = tempered_start
    if replica_space is not None:
        model_args, settings = replica_space.args, _replica_settings(settings)

    def initialise():
        zero = jnp.zeros(dimension)
        hmc_init(
            ParamInfo(zero, jnp.zeros(()), zero),
            num_warmup,
            model_args=model_args,
            rng_key=jax.random.PRNGKey(0),
            **settings,
        )

    jax.eval_shape(initialise)
    evaluate = _point_evaluator(target_potential_fn, base)
    return (
        _paired_moves(hmc_sample, base, replica_space),
        _evaluator_with_base_draws(base, evaluate, base_proposals),
    )


# The replica of joint tempering moves on (y, v), v a standard normal coordinate standing in
# for u.
_JOINT_REPLICA_SPACE = _ReplicaSpace(
    lift=lambda replica, z: (
        jnp.append(replica.position, z[-1]),
        replica.target_potential + 0.5 * z[-1] ** 2,
        jnp.append(replica.target_gradient, z[-1]),
    ),
    lower=lambda moved: (
        moved.z[:-1],
        moved.potential_energy - 0.5 * moved.z[-1] ** 2,
        moved.z_grad[:-1],
    ),
    args=(0.0, True),
)

# The tempered family of Gibbs tempering at beta = 1 is the target.
_GIBBS_REPLICA_SPACE = _ReplicaSpace(
    lift=lambda replica, z: (replica.position, replica.target_potential, replica.target_gradient),
    lower=lambda moved: (moved.z, moved.potential_energy, moved.z_grad),
    args=(1.0,),
)


def _joint_hmc(target_potential_fn, base, algo, beta_scale):
    """NumPyro's ``hmc`` pair on eq. 14's extended space, with ``(log_zeta, pinned)`` as model
    arguments."""
    potential_family = _extended_potential_family(target_potential_fn, base, beta_scale)

    def potential_fn_gen(log_zeta, pinned=False):
        return lambda extended_position: potential_family(extended_position, log_zeta, pinned)

    return hmc(potential_fn_gen=potential_fn_gen, algo=algo)


def _gibbs_hmc(target_potential_fn, base, algo):
    """NumPyro's ``hmc`` pair on the tempered family of eq. 8, with ``beta`` as model argument."""
    tempered_fn = tempered_potential(target_potential_fn, base)

    def tempered_potential_fn_gen(beta):
        return lambda position: tempered_fn(position, beta)

    return hmc(potential_fn_gen=tempered_potential_fn_gen, algo=algo)


def joint_init(
    position,
    target_potential_fn,
    base: GaussianBase,
    rng_key,
    *,
    num_warmup,
    algo="NUTS",
    beta_scale=1.0,
    initial_beta_logit=-10.0,
    replica_moves=True,
    **hmc_settings,
) -> TemperingChainState:
    """The state of a joint continuous tempering chain at ``position``, with ``u / s =
    initial_beta_logit`` and the target replica at the same point.

    :param position: flat start ``x``.
    :param target_potential_fn: ``phi`` on flat ``x``.
    :param GaussianBase base: base density and initial ``log zeta``.
    :param rng_key: key of the initialisation of NumPyro's HMC/NUTS (split in
        ``INIT_KEYS``, the last left unused).
    :param int num_warmup: warm-up length, which NumPyro's HMC initialisation takes.
    :param str algo: ``"NUTS"`` or ``"HMC"``.
    :param float beta_scale: the scale ``s`` of ``beta = sigmoid(u / s)``.
    :param float initial_beta_logit: starting ``u / s``.
    :param bool replica_moves: whether the kernel moves the replica with its own HMC/NUTS
        transition (then its state is initialised here).
    :param hmc_settings: settings of NumPyro's HMC initialisation (``step_size``,
        ``dense_mass``, ...), the same as :func:`build_joint_kernel`'s.
    :return: :class:`TemperingChainState`.

    **Example:**

    .. code-block:: python

        state = joint_init(x0, potential_fn, base, jax.random.PRNGKey(0), num_warmup=500)
    """
    hmc_init, _ = _joint_hmc(target_potential_fn, base, algo, beta_scale)
    hmc_key, replica_key = jax.random.split(rng_key, INIT_KEYS)[:2]
    control = jnp.asarray(initial_beta_logit * beta_scale, position.dtype)
    log_zeta = jnp.asarray(base.log_zeta, position.dtype)
    inner = hmc_init(
        jnp.append(position, control),
        num_warmup,
        model_args=(log_zeta,),
        rng_key=hmc_key,
        **hmc_settings,
    )
    evaluation = _point_evaluator(target_potential_fn, base)(position)
    replica_inner = None
    if replica_moves:
        replica_position = jnp.append(position, jnp.zeros((), position.dtype))
        replica_inner = _replica_init(
            hmc_init,
            replica_position,
            _JOINT_REPLICA_SPACE.args,
            num_warmup,
            replica_key,
            hmc_settings,
        )
    beta = inverse_temperature(control, beta_scale)
    return _initial_state(evaluation, beta, log_zeta, (inner, replica_inner))


def build_joint_kernel(
    target_potential_fn,
    base: GaussianBase,
    *,
    num_warmup,
    algo="NUTS",
    beta_scale=1.0,
    adapt_log_zeta=True,
    base_proposals=True,
    replica_moves=True,
    **hmc_settings,
):
    """The transition of joint continuous tempering with a target replica.

    One transition is an HMC or NUTS move on the extended space ``(x, u)`` of paper eq. 14
    (NumPyro's :func:`~numpyro.infer.hmc.hmc`, whose warm-up adapts step size and mass, ``u``
    included) together with a move of the replica on the target, then a proposal of ``x`` from
    the base at the new ``beta`` (:func:`propose_from_base`), then :func:`swap_with_replica`;
    during the first ``num_warmup`` transitions ``log zeta`` is adapted so that the chain
    reaches both ends of ``beta``.

    :param target_potential_fn: ``phi`` on flat ``x``.
    :param GaussianBase base: base density (its ``log_zeta`` is the states').
    :param int num_warmup: warm-up length: the transitions over which the inner HMC/NUTS adapts
        its step size and mass, and ``log zeta`` is adapted.
    :param str algo: ``"NUTS"`` or ``"HMC"``.
    :param float beta_scale: the scale ``s`` of ``beta = sigmoid(u / s)``.
    :param bool adapt_log_zeta: adapt ``log zeta`` during warm-up.
    :param bool base_proposals: after the HMC move, propose a new ``x`` drawn from the base.
    :param bool replica_moves: move the replica ``y`` with its own HMC or NUTS transition
        (``algo``) on the target, beside the tempered move; the state must come from
        :func:`joint_init` with the same setting.
    :param hmc_settings: settings of NumPyro's HMC (``target_accept_prob``, ``num_steps``,
        ``max_tree_depth``, ...), the same as :func:`joint_init`'s.
    :return: ``kernel(rng_key, state) -> (state, info)``, pure and traceable
        (:class:`TemperingChainState`, :class:`TemperingInfo`). It splits ``rng_key`` in
        ``JOINT_KEYS`` and leaves the first unused.

    **Example:**

    .. code-block:: python

        kernel = jax.jit(build_joint_kernel(potential_fn, base, num_warmup=500))
        state = joint_init(x0, potential_fn, base, jax.random.PRNGKey(0), num_warmup=500)
        for key in jax.random.split(jax.random.PRNGKey(1), 1500):
            state, info = kernel(key, state)
    """
    move, evaluate_with_draw = _primed_moves(
        _joint_hmc(target_potential_fn, base, algo, beta_scale),
        (target_potential_fn, base, num_warmup),
        (base.dimension + 1, (jnp.asarray(base.log_zeta),)),
        _JOINT_REPLICA_SPACE if replica_moves else None,
        base_proposals,
        hmc_settings,
    )

    def kernel(rng_key, state: TemperingChainState):
        _, hmc_key, draw_key, base_key, swap_key = jax.random.split(rng_key, JOINT_KEYS)
        moved, replica, replica_inner = move(
            hmc_key,
            state.inner_state,
            (state.log_zeta, False),
            state.replica,
            state.replica_inner_state,
        )
        evaluation, proposal = evaluate_with_draw(draw_key, moved.z[:-1])
        tempered, inner = _moved_or_rejected(state, moved, evaluation)
        control = inner.z[-1]
        beta = inverse_temperature(control, beta_scale)
        tempered, base_accept_prob = _accept_base_proposal(base_key, beta, tempered, proposal)
        log_zeta = _adapt_log_zeta(
            state.log_zeta, tempered, state.iteration + 1, num_warmup, adapt_log_zeta
        )
        tempered, replica, swap_accept_prob = swap_with_replica(swap_key, beta, tempered, replica)
        # The moves above may have changed x: the HMC state follows from the cached values.
        energy, gradient = _joint_energy(tempered, control, log_zeta, beta_scale)
        inner = inner._replace(
            z=jnp.append(tempered.position, control),
            potential_energy=energy,
            z_grad=gradient,
            energy=inner.energy + energy - inner.potential_energy,
        )
        moved_on = (tempered, replica, beta, log_zeta, inner, replica_inner)
        return _advanced(state, moved_on, (swap_accept_prob, base_accept_prob), num_warmup)

    return kernel


def gibbs_init(
    position,
    target_potential_fn,
    base: GaussianBase,
    rng_key,
    *,
    num_warmup,
    algo="HMC",
    replica_moves=True,
    **hmc_settings,
) -> TemperingChainState:
    """The state of a Gibbs continuous tempering chain at ``position``, with ``beta = 0`` and the
    target replica at the same point.

    :param position: flat start ``x``.
    :param target_potential_fn: ``phi`` on flat ``x``.
    :param GaussianBase base: base density and initial ``log zeta``.
    :param rng_key: key of the initialisation of NumPyro's HMC/NUTS (split in
        ``INIT_KEYS``, the last left unused).
    :param int num_warmup: warm-up length, which NumPyro's HMC initialisation takes.
    :param str algo: ``"HMC"`` or ``"NUTS"``.
    :param bool replica_moves: whether the kernel moves the replica with its own HMC/NUTS
        transition (then its state is initialised here).
    :param hmc_settings: settings of NumPyro's HMC initialisation, the same as
        :func:`build_gibbs_kernel`'s.
    :return: :class:`TemperingChainState`.

    **Example:**

    .. code-block:: python

        state = gibbs_init(x0, potential_fn, base, jax.random.PRNGKey(0), num_warmup=500,
                           num_steps=20)
    """
    hmc_init, _ = _gibbs_hmc(target_potential_fn, base, algo)
    hmc_key, replica_key = jax.random.split(rng_key, INIT_KEYS)[:2]
    beta = jnp.zeros((), dtype=position.dtype)
    inner = hmc_init(position, num_warmup, model_args=(beta,), rng_key=hmc_key, **hmc_settings)
    evaluation = _point_evaluator(target_potential_fn, base)(position)
    replica_inner = None
    if replica_moves:
        replica_inner = _replica_init(
            hmc_init, position, _GIBBS_REPLICA_SPACE.args, num_warmup, replica_key, hmc_settings
        )
    log_zeta = jnp.asarray(base.log_zeta, position.dtype)
    return _initial_state(evaluation, beta, log_zeta, (inner, replica_inner))


def _retempered(inner: HMCState, evaluation: PointEvaluation, beta):
    """The x-move's state at ``evaluation``'s point and a new beta, from cached values."""
    potential_energy = beta * evaluation.target_potential + (1.0 - beta) * evaluation.base_potential
    return inner._replace(
        z=evaluation.position,
        potential_energy=potential_energy,
        z_grad=beta * evaluation.target_gradient + (1.0 - beta) * evaluation.base_gradient,
        energy=inner.energy + potential_energy - inner.potential_energy,
    )


def build_gibbs_kernel(
    target_potential_fn,
    base: GaussianBase,
    *,
    num_warmup,
    algo="HMC",
    adapt_log_zeta=True,
    base_proposals=True,
    replica_moves=True,
    **hmc_settings,
):
    """The transition of Gibbs continuous tempering with a target replica.

    One transition moves ``x`` with HMC or NUTS leaving ``exp(-beta phi - (1 - beta) psi)``
    invariant (NumPyro's :func:`~numpyro.infer.hmc.hmc`, whose warm-up adapts step size and
    mass) together with a move of the replica on the target, then a proposal of ``x`` from the
    base at the same ``beta`` (:func:`propose_from_base`), draws ``beta | x`` exactly from the
    truncated exponential of paper eq. 17, then :func:`swap_with_replica`; during the first
    ``num_warmup`` transitions ``log zeta`` is adapted first.

    :param target_potential_fn: ``phi`` on flat ``x``.
    :param GaussianBase base: base density (its ``log_zeta`` is the states').
    :param int num_warmup: warm-up length: the transitions over which the inner HMC/NUTS adapts
        its step size and mass, and ``log zeta`` is adapted.
    :param str algo: ``"HMC"`` or ``"NUTS"``.
    :param bool adapt_log_zeta: adapt ``log zeta`` during warm-up.
    :param bool base_proposals: after the HMC move, propose a new ``x`` drawn from the base.
    :param bool replica_moves: move the replica ``y`` with its own HMC or NUTS transition
        (``algo``) on the target, beside the tempered move; the state must come from
        :func:`gibbs_init` with the same setting.
    :param hmc_settings: settings of NumPyro's HMC, the same as :func:`gibbs_init`'s.
    :return: ``kernel(rng_key, state) -> (state, info)``, pure and traceable
        (:class:`TemperingChainState`, :class:`TemperingInfo`). It splits ``rng_key`` in
        ``GIBBS_KEYS`` and leaves the first unused.

    **Example:**

    .. code-block:: python

        kernel = jax.jit(build_gibbs_kernel(potential_fn, base, num_warmup=500, num_steps=20))
        state = gibbs_init(x0, potential_fn, base, jax.random.PRNGKey(0), num_warmup=500,
                           num_steps=20)
        state, info = kernel(jax.random.PRNGKey(1), state)
    """
    move, evaluate_with_draw = _primed_moves(
        _gibbs_hmc(target_potential_fn, base, algo),
        (target_potential_fn, base, num_warmup),
        (base.dimension, (0.0,)),
        _GIBBS_REPLICA_SPACE if replica_moves else None,
        base_proposals,
        hmc_settings,
    )

    def kernel(rng_key, state: TemperingChainState):
        keys = jax.random.split(rng_key, GIBBS_KEYS)
        _, hmc_key, draw_key, base_key, beta_key, swap_key = keys
        moved, replica, replica_inner = move(
            hmc_key, state.inner_state, (state.beta,), state.replica, state.replica_inner_state
        )
        evaluation, proposal = evaluate_with_draw(draw_key, moved.z)
        tempered, inner = _moved_or_rejected(state, moved, evaluation)
        tempered, base_accept_prob = _accept_base_proposal(base_key, state.beta, tempered, proposal)
        log_zeta = _adapt_log_zeta(
            state.log_zeta, tempered, state.iteration + 1, num_warmup, adapt_log_zeta
        )
        beta = sample_inverse_temperature(beta_key, tempered.log_ratio + log_zeta)
        tempered, replica, swap_accept_prob = swap_with_replica(swap_key, beta, tempered, replica)
        inner = _retempered(inner, tempered, beta)
        moved_on = (tempered, replica, beta, log_zeta, inner, replica_inner)
        return _advanced(state, moved_on, (swap_accept_prob, base_accept_prob), num_warmup)

    return kernel
