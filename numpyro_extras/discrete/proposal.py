"""The locally balanced proposal of the ACS paper and its exact Metropolis-Hastings correction.

Everything here is pure and works on ONE chain; ``jax.vmap`` batches it over chains. The target
is ``pi(theta) ∝ exp(U(theta))`` with ``U`` a LOG density: NumPyro's potential energy
is ``-U``.

A discrete state is a dict of integer *index* arrays, one per :class:`DiscreteVariable`: entry
``theta_i`` of a variable with ``K`` values is in ``{0, ..., K - 1}``. Each coordinate is
proposed from its own categorical distribution (ACS paper eq. 5), all coordinates at once (one block
move with one MH test, not a sweep), and the move is accepted with the MH probability of eq. 6.

The transition has BlackJAX's shape: a :class:`ChainState` and an :class:`ACSInfo`, :func:`init`,
and :func:`build_kernel` returning a pure ``kernel(rng_key, state, alpha, beta) -> (state,
info)``. The cyclical schedule, the tuner and the NumPyro kernel
(:class:`~numpyro_extras.discrete.ACS`) drive it with their own ``(alpha, beta)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.shell.metropolis import acceptance_probability as metropolis_acceptance
from numpyro_extras.shell.metropolis import metropolis_accept, select

__all__ = [
    "KINDS",
    "ACSInfo",
    "DiscreteVariable",
    "ChainState",
    "build_kernel",
    "init",
    "encode",
    "decode",
    "local_differences_fn",
    "proposal_logits",
    "proposal_log_prob",
    "init_chain",
    "acs_step",
    "acs_transition",
    "scheduled_steps",
    "squared_jump",
    "acceptance_probability",
    "log_acceptance_ratio",
]

# How a variable's values enter the log density and how far apart two values are:
#   binary      {0, 1} as floats; a flip costs distance 1 (ACS paper eq. 5, binary case)
#   ordinal     {0, ..., K-1} as floats; distance (v - theta_i)^2 (ACS paper eq. 5, ordinal case)
#   categorical {0, ..., K-1} as integers (e.g. a NumPyro Categorical site); Hamming distance
#   one_hot     one-hot float vectors (..., K); Hamming distance (the ACS reference
#               code's convention, so alpha means the same for a flip and a class change)
KINDS = ("binary", "ordinal", "categorical", "one_hot")


class DiscreteVariable(NamedTuple):
    """A block of discrete coordinates of the same kind.

    :param tuple shape: shape of the block of coordinates (for ``one_hot``, without the one-hot
        axis).
    :param int num_values: ``K``, the number of values of every coordinate (2 for ``binary``).
    :param str kind: one of ``"binary"``, ``"ordinal"``, ``"categorical"``, ``"one_hot"``.
    :param bool gradient: ``True``: the first-order differences ``grad U . (v - theta)`` of
        ACS paper eq. 5 (one gradient evaluation); ``False``: exact differences
        ``U(theta with theta_i <- v) - U(theta)`` (``d (K - 1)`` extra evaluations of ``U``;
        needed when ``U`` is not differentiable in the variable, e.g. it indexes with it).
        ``categorical`` variables are integers and always use exact differences.
    :param dtype: the dtype the log density receives (``None``: float for ``binary``,
        ``ordinal`` and ``one_hot``, int32/int64 for ``categorical``; ``binary`` and ``ordinal``
        variables without gradients get this dtype too).

    **Example:**

    .. code-block:: python

        def potential(spins):  # -log density of a ferromagnetic chain of 16 spins in {0, 1}
            return -jnp.sum((2 * spins[:-1] - 1) * (2 * spins[1:] - 1))


        kernel = nx.ACS(potential_fn=potential, variables=nx.DiscreteVariable((16,), num_values=2))
    """

    shape: tuple
    num_values: int
    kind: str = "binary"
    gradient: bool = True
    dtype: Any = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


class ChainState(NamedTuple):
    """One chain of the discrete sampler, with what the next proposal needs cached.

    :param indices: dict name -> integer array of the variable's shape, the current values.
    :param log_density: ``U`` at ``indices``.
    :param differences: dict name -> array ``shape + (K,)``: the (first-order or exact) change
        of ``U`` when one coordinate moves to each value; 0 at the current value, ``-inf``
        where it is not finite. Caching it makes a step cost one evaluation (ACS paper eq. 6).
    :param cache: whatever else the evaluation function returns about the point (its optional
        third output, ``None`` without one), carried with the state through accepts and
        rejections: e.g. the separate parts of a tempered log density, so that the state can
        be re-expressed at another temperature without evaluating the model.
    """

    indices: dict
    log_density: jax.Array
    differences: dict
    cache: Any = None


def _float_dtype():
    return jnp.result_type(float)


def _value_dtype(variable: DiscreteVariable):
    if variable.dtype is not None:
        return variable.dtype
    if variable.kind == "categorical":
        return jnp.result_type(int)
    return _float_dtype()


def _encode_one(variable: DiscreteVariable, index):
    if variable.kind == "one_hot":
        return jax.nn.one_hot(index, variable.num_values, dtype=_float_dtype())
    if variable.gradient:
        return index.astype(_float_dtype())
    return index.astype(_value_dtype(variable))


def encode(variables: dict, indices: dict) -> dict:
    """Index arrays -> the values the log density receives (floats where it is differentiated).

    :param dict variables: name -> :class:`DiscreteVariable`.
    :param dict indices: name -> integer array.
    :return: dict name -> values.
    """
    return {name: _encode_one(variables[name], indices[name]) for name in variables}


def decode(variables: dict, values: dict) -> dict:
    """Values as a user or a model holds them -> integer index arrays (inverse of encode)."""
    indices = {}
    for name, variable in variables.items():
        value = jnp.asarray(values[name])
        if variable.kind == "one_hot":
            indices[name] = jnp.argmax(value, -1).astype(jnp.int32)
        else:
            indices[name] = jnp.round(value).astype(jnp.int32)
    return indices


def _distance(variable: DiscreteVariable, offset):
    """``D`` of a coordinate moved by ``offset``: squared for binary/ordinal, Hamming otherwise."""
    if variable.kind in ("binary", "ordinal"):
        return (offset**2).astype(_float_dtype())
    return (offset != 0).astype(_float_dtype())


def _distances(variable: DiscreteVariable, index):
    """``D(v, theta_i)`` for every value ``v`` of every coordinate."""
    return _distance(variable, jnp.arange(variable.num_values) - index[..., None])


def squared_jump(variables: dict, indices: dict, other: dict) -> jax.Array:
    """The proposal's distance between two states, summed over coordinates (ACS paper eq. 5):
    squared differences for binary and ordinal coordinates, the number of changed coordinates
    for categorical and one-hot ones (the reference code's convention).

    :param dict variables: name -> :class:`DiscreteVariable`.
    :param dict indices: name -> integer array, one state.
    :param dict other: name -> integer array, the other state.
    :return: scalar.
    """
    return sum(
        jnp.sum(_distance(variable, other[name] - indices[name]))
        for name, variable in variables.items()
    )


def _sanitize(differences, index):
    """0 at the current value, ``-inf`` wherever the difference is not finite.

    A deterministic function of the state, so the proposal stays a Markov kernel and the MH
    test keeps the chain exact; non-finite directions are simply never proposed.
    """
    current = jnp.arange(differences.shape[-1]) == index[..., None]
    finite = jnp.where(jnp.isfinite(differences), differences, -jnp.inf)
    return jnp.where(current, 0.0, finite)


def local_differences_fn(log_density_fn: Callable, variables: dict) -> Callable:
    """Build ``indices -> (U, differences)``: one ``value_and_grad`` plus exact differences.

    For a variable with ``gradient=True`` the change of ``U`` when coordinate ``i`` moves to
    ``v`` is approximated to first order (ACS paper eq. 4-5): ``dU/dtheta_i (v - theta_i)`` for
    binary and ordinal values, ``G_{i,v} - G_{i,theta_i}`` with ``G = dU/d onehot`` for one-hot
    values. With ``gradient=False`` it is computed exactly by evaluating ``U`` at all
    ``d (K - 1)`` single-coordinate changes (``vmap``; memory and time ``d K`` evaluations).

    :param log_density_fn: ``values dict -> U`` (a log density, not a potential energy).
    :param dict variables: name -> :class:`DiscreteVariable`.
    :return: a function ``indices -> (log_density, differences)``.
    """
    gradient_names = [name for name, v in variables.items() if v.gradient]
    for name in gradient_names:
        if variables[name].kind == "categorical":
            raise ValueError(
                f"Variable {name!r} is categorical (integer values): its log density has no "
                "gradient; use gradient=False (exact differences) or a one_hot variable."
            )

    def evaluate(indices):
        values = encode(variables, indices)
        if gradient_names:

            def log_density_of(differentiated):
                return log_density_fn({**values, **differentiated})

            log_density, gradients = jax.value_and_grad(log_density_of)(
                {name: values[name] for name in gradient_names}
            )
        else:
            log_density = log_density_fn(values)
        if gradient_names:
            # A non-finite gradient (e.g. of a distance at its kink) says nothing about where the
            # target is: read it as flat. Dropping those directions instead would make such states
            # unreachable (a move into one could never be proposed back), silently.
            gradients = {
                name: jnp.where(jnp.isfinite(gradient), gradient, 0.0)
                for name, gradient in gradients.items()
            }
        differences = {}
        for name, variable in variables.items():
            index = indices[name]
            if variable.gradient and variable.kind == "one_hot":
                gradient = gradients[name]
                current = jnp.take_along_axis(gradient, index[..., None], -1)
                raw = gradient - current
            elif variable.gradient:
                offset = jnp.arange(variable.num_values) - index[..., None]
                raw = gradients[name][..., None] * offset
            else:
                raw = _exact_differences(log_density_fn, variable, name, values, index)
                raw = raw - log_density
            differences[name] = _sanitize(raw, index)
        return log_density, differences

    return evaluate


def _exact_differences(log_density_fn, variable, name, values, index):
    """``U`` at every single-coordinate change of one variable, shape ``shape + (K,)``."""
    flat = jnp.reshape(index, (-1,))

    def log_density_at(coordinate, value):
        moved = flat.at[coordinate].set(value.astype(flat.dtype)).reshape(variable.shape)
        return log_density_fn({**values, name: _encode_one(variable, moved)})

    table = jax.vmap(jax.vmap(log_density_at, in_axes=(None, 0)), in_axes=(0, None))(
        jnp.arange(flat.shape[0]), jnp.arange(variable.num_values)
    )
    return table.reshape(tuple(variable.shape) + (variable.num_values,))


def proposal_logits(variables: dict, indices: dict, differences: dict, alpha, beta) -> dict:
    """Per-coordinate logits of ACS paper eq. 5: ``beta Delta_i(v) - D(v, theta_i) / (2 alpha)``.

    :param dict variables: name -> :class:`DiscreteVariable`.
    :param dict indices: the current state.
    :param dict differences: its cached differences (:class:`ChainState`).
    :param alpha: step size, ``> 0``; ``inf`` drops the distance term (``1 / (2 alpha) = 0``).
    :param beta: balancing exponent (``g(t) = t^beta``).
    :return: dict name -> logits ``shape + (K,)``; the current value's logit is 0.
    """
    inverse_two_alpha = 0.5 / alpha
    return {
        name: beta * differences[name] - _distances(variable, indices[name]) * inverse_two_alpha
        for name, variable in variables.items()
    }


def proposal_log_prob(logits: dict, indices: dict) -> jax.Array:
    """``log Q(theta' | theta)``: the sum over coordinates of ``log_softmax(logits)[theta'_i]``."""
    total = 0.0
    for name, logit in logits.items():
        log_probs = jax.nn.log_softmax(logit, -1)
        total = total + jnp.sum(jnp.take_along_axis(log_probs, indices[name][..., None], -1))
    return total


class ACSInfo(NamedTuple):
    """What one transition did.

    :param accept_prob: ``A(theta' | theta)`` of ACS paper eq. 6 (0 for a proposal whose ``U``
        is not finite).
    :param is_accepted: whether the chain moved to the proposal.
    :param proposal: the proposed :class:`ChainState`, with its differences.
    :param expected_squared_jump: ``A(theta' | theta) D(theta', theta)``, with ``D`` the
        distance of the proposal (:func:`squared_jump`): its mean over chains is the
        Rao-Blackwellised expected squared jump distance that the tuner's
        ``alpha_max_rule="jump"`` maximises.
    """

    accept_prob: jax.Array
    is_accepted: jax.Array
    proposal: ChainState
    expected_squared_jump: jax.Array


def init(indices: dict, evaluate_fn: Callable) -> ChainState:
    """The state of a chain at ``indices`` (one evaluation).

    :param dict indices: name -> integer array, the chain's discrete position.
    :param evaluate_fn: ``indices -> (U, differences)`` from :func:`local_differences_fn`, or
        ``indices -> (U, differences, cache)`` to keep more about the point in the state.
    :return: :class:`ChainState`.

    **Example:**

    .. code-block:: python

        evaluate = local_differences_fn(log_density_fn, variables)
        state = init({"x": jnp.zeros(10, jnp.int32)}, evaluate)
    """
    indices = {name: jnp.asarray(index, jnp.int32) for name, index in indices.items()}
    return ChainState(indices, *evaluate_fn(indices))


def init_chain(evaluate_fn: Callable, indices: dict) -> ChainState:
    """:func:`init` with the evaluation function first.

    :param evaluate_fn: as in :func:`init`.
    :param dict indices: name -> integer array.
    :return: :class:`ChainState`.
    """
    return init(indices, evaluate_fn)


def build_kernel(evaluate_fn: Callable, variables: dict, mh=True) -> Callable:
    """The ACS/DMALA transition: propose every coordinate at once from the locally balanced
    proposal of ACS paper eq. 5 at ``(alpha, beta)``, then accept with eq. 6,
    ``A = min(1, exp(U(theta') - U(theta)) Q(theta | theta') / Q(theta' | theta))``. The
    reverse proposal uses the differences at ``theta'``, which the state caches for the next
    step, so a step costs one evaluation of ``evaluate_fn``. A proposal whose ``U`` is not
    finite, or whose ratio is NaN, is rejected.

    :param evaluate_fn: ``indices -> (U, differences)`` from :func:`local_differences_fn` (or
        with a third output, the state's ``cache``).
    :param dict variables: name -> :class:`DiscreteVariable`.
    :param mh: apply the Metropolis-Hastings test (a Python bool, or a traced boolean); without
        it every proposal with a finite density is accepted (biased; only for the tuner's free
        burn-in moves).
    :return: ``kernel(rng_key, state, alpha, beta) -> (state, info)``, pure and traceable
        (:class:`ChainState`, :class:`ACSInfo`), at step size ``alpha > 0`` (may be ``inf``)
        and balancing exponent ``beta``.

    **Example:**

    .. code-block:: python

        evaluate = local_differences_fn(log_density_fn, variables)
        kernel = jax.jit(build_kernel(evaluate, variables))
        state = init({"x": jnp.zeros(10, jnp.int32)}, evaluate)
        state, info = kernel(jax.random.PRNGKey(0), state, 0.5, 0.5)  # a DMALA step
    """
    names = list(variables)

    def kernel(rng_key, state: ChainState, alpha, beta):
        proposal_key, accept_key = jax.random.split(rng_key)
        forward_logits = proposal_logits(variables, state.indices, state.differences, alpha, beta)
        keys = jax.random.split(proposal_key, len(names))
        proposed = {
            name: jax.random.categorical(key, forward_logits[name], -1).astype(jnp.int32)
            for name, key in zip(names, keys, strict=True)
        }
        proposed_state = ChainState(proposed, *evaluate_fn(proposed))
        free_move = jnp.where(jnp.isfinite(proposed_state.log_density), 0.0, -jnp.inf)
        if isinstance(mh, bool):
            log_ratio = (
                log_acceptance_ratio(variables, state, proposed_state, alpha, beta)
                if mh
                else free_move
            )
        else:
            # A traced flag (the tuner's burn-in runs free and MH moves in one compiled loop).
            mh_ratio = log_acceptance_ratio(variables, state, proposed_state, alpha, beta)
            log_ratio = jnp.where(mh, mh_ratio, free_move)
        accept, accept_prob = metropolis_accept(accept_key, log_ratio)
        jump = accept_prob * squared_jump(variables, state.indices, proposed)
        new_state = select(accept, proposed_state, state)
        return new_state, ACSInfo(accept_prob, accept, proposed_state, jump)

    return kernel


def acs_step(
    rng_key, state: ChainState, alpha, beta, evaluate_fn: Callable, variables: dict, mh=True
) -> tuple[ChainState, jax.Array]:
    """One ACS/DMALA transition at fixed ``(alpha, beta)``: propose all coordinates, MH-correct.

    ``A = min(1, exp(U(theta') - U(theta)) Q(theta | theta') / Q(theta' | theta))`` (ACS eq. 6);
    the reverse proposal uses the differences at ``theta'``, which are cached for the next step,
    so a step costs one evaluation of ``evaluate_fn``. A proposal whose ``U`` is not finite, or
    whose acceptance ratio is NaN, is rejected (acceptance probability 0).

    :param rng_key: PRNG key.
    :param ChainState state: the current state.
    :param alpha: step size ``> 0`` (may be ``inf``).
    :param beta: balancing exponent.
    :param evaluate_fn: ``indices -> (U, differences)`` from :func:`local_differences_fn` (or
        with a third output, the state's ``cache``).
    :param dict variables: name -> :class:`DiscreteVariable`.
    :param bool mh: ``False`` skips the MH test (biased; only for the tuner's burn-in);
        non-finite proposals are still rejected.
    :return: ``(new_state, acceptance_probability)``.

    **Example:**

    .. code-block:: python

        evaluate = local_differences_fn(log_density_fn, variables)
        state = init({"x": jnp.zeros(10, jnp.int32)}, evaluate)
        state, accept_prob = acs_step(key, state, 0.5, 0.5, evaluate, variables)  # DMALA
    """
    new_state, info = build_kernel(evaluate_fn, variables, mh)(rng_key, state, alpha, beta)
    return new_state, info.accept_prob


def scheduled_steps(
    keys, state: ChainState, schedule, first_position, evaluate_fn: Callable, variables: dict
):
    """``len(keys)`` ACS steps at consecutive positions of a cyclical schedule (ACS paper
    Alg. 1, eq. 7-8), from position ``first_position`` of the cycle on.

    :param keys: PRNG keys, one per step (leading axis: the number of steps).
    :param ChainState state: the current state.
    :param schedule: a :class:`~numpyro_extras.discrete.CyclicalSchedule`.
    :param first_position: the position in the cycle of the first step (taken modulo ``s``).
    :param evaluate_fn: as in :func:`acs_step`.
    :param dict variables: name -> :class:`DiscreteVariable`.
    :return: ``(new_state, (alpha, beta, accept_prob))``: the step size and balancing
        exponent of the last step, the mean acceptance probability of the steps.

    **Example:**

    .. code-block:: python

        keys = jax.random.split(key, schedule.steps_per_cycle)
        state, (alpha, beta, accept_prob) = scheduled_steps(
            keys, state, schedule, 0, evaluate, variables
        )  # one whole cycle
    """

    kernel = build_kernel(evaluate_fn, variables)

    def step(state, inputs):
        key, position = inputs
        k = position % schedule.step_sizes.shape[0]
        alpha, beta = schedule.step_sizes[k], schedule.balancing[k]
        state, info = kernel(key, state, alpha, beta)
        return state, (alpha, beta, info.accept_prob)

    positions = first_position + jnp.arange(keys.shape[0])
    state, (alphas, betas, accept_probs) = jax.lax.scan(step, state, (keys, positions))
    return state, (alphas[-1], betas[-1], jnp.mean(accept_probs))


def acs_transition(
    rng_key, state: ChainState, alpha, beta, evaluate_fn: Callable, variables: dict, mh=True
) -> tuple[ChainState, jax.Array, jax.Array]:
    """:func:`acs_step`, also returning the expected squared jump of the transition
    (:class:`ACSInfo`'s ``expected_squared_jump``).

    :param mh: as in :func:`build_kernel`.
    :return: ``(new_state, acceptance_probability, expected_squared_jump)``.
    """
    new_state, info = build_kernel(evaluate_fn, variables, mh)(rng_key, state, alpha, beta)
    return new_state, info.accept_prob, info.expected_squared_jump


def acceptance_probability(
    variables: dict, state: ChainState, proposed: ChainState, alpha, beta
) -> jax.Array:
    """``A(theta' | theta)`` of ACS paper eq. 6 for the proposal of eq. 5 at ``(alpha, beta)``:
    0 when ``U(theta')`` is not finite or the ratio is NaN (a numerical failure is a rejection).

    :return: scalar in [0, 1].
    """
    return metropolis_acceptance(log_acceptance_ratio(variables, state, proposed, alpha, beta))


def log_acceptance_ratio(
    variables: dict, state: ChainState, proposed: ChainState, alpha, beta
) -> jax.Array:
    """The log Metropolis-Hastings ratio of the ACS paper's eq. 6 for the proposal of eq. 5 at
    ``(alpha, beta)``: ``U(theta') - U(theta) + log Q(theta | theta') - log Q(theta' | theta)``,
    ``-inf`` when ``U(theta')`` is not finite (a numerical failure is a rejection).

    :param dict variables: name -> :class:`DiscreteVariable`.
    :param ChainState state: ``theta`` with its cached differences.
    :param ChainState proposed: ``theta'`` with its differences (for the reverse proposal).
    :return: scalar; :func:`~numpyro_extras.shell.metropolis.metropolis_accept` turns it into a
        decision (NaN is a rejection).
    """
    forward = proposal_logits(variables, state.indices, state.differences, alpha, beta)
    reverse = proposal_logits(variables, proposed.indices, proposed.differences, alpha, beta)
    log_ratio = (
        proposed.log_density
        - state.log_density
        + proposal_log_prob(reverse, state.indices)
        - proposal_log_prob(forward, proposed.indices)
    )
    return jnp.where(jnp.isfinite(proposed.log_density), log_ratio, -jnp.inf)
