"""Automatic tuning of the cyclical schedule (ACS paper Algorithms 2-5, with the spec's fixes).

The tuner runs a batch of chains (acceptance is averaged over them, as in the paper) and
returns a frozen :class:`~numpyro_extras.discrete.schedule.CyclicalSchedule` together with the
batch's final states. Its draws are warm-up draws and are never kept (spec P9).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.discrete.proposal import ChainState, acs_transition
from numpyro_extras.discrete.schedule import (
    CyclicalSchedule,
    cosine_balancing,
    cyclical_step_sizes,
)

__all__ = [
    "ALPHA_MAX_RULES",
    "TuningSettings",
    "TuningResult",
    "default_alpha_ceil",
    "default_alpha_max_rule",
    "default_beta_max",
    "resolve_settings",
    "tune_schedule",
    "tuning_cost",
]

#: How the tuner picks ``alpha_max`` among the step sizes its downward search tries:
#: ``"acceptance"``: the one whose acceptance is closest to ``rho*`` (the paper's Alg. 4);
#: ``"jump"``: the one with the largest expected squared jump distance
#: ``E[A(theta' | theta) D(theta', theta)]``, which keeps a large step whose rare accepted
#: moves cross between modes (the paper sets ``alpha_max`` by hand for such targets).
#: ``None`` in :class:`TuningSettings` chooses by the variables (:func:`default_alpha_max_rule`).
ALPHA_MAX_RULES = ("acceptance", "jump")


class TuningSettings(NamedTuple):
    """Every constant of the tuner; defaults are the ACS paper's (spec section 3 table), except
    that ``alpha_ceil``, ``beta_max`` and ``alpha_max_rule`` default to choices by the variables
    (``None``; :func:`resolve_settings`).

    :param int steps_per_cycle: ``s`` (paper 20 for sampling).
    :param float target_accept_prob: ``rho*`` (paper 0.5).
    :param float beta_max: balancing exponent at ``alpha_max`` (paper 0.95 for RBMs);
        ``None``: :func:`default_beta_max` of the variables.
    :param float beta_min: balancing exponent at ``alpha_min`` (always 0.5).
    :param float alpha_ceil: where the search for ``alpha_max`` starts (paper 5, spec P5);
        ``None``: :func:`default_alpha_ceil` of the variables (5, or more for ordinal ones).
    :param float alpha_floor: where the search for ``alpha_min`` starts (paper 0.05).
    :param float zeta: the search's relative step ``zeta`` (paper 0.5, "insensitive").
    :param int budget: MH steps for the two step-size searches together (paper 200; 500 for
        runs of 5000 steps or more, spec Sec. 4.4, the default here).
    :param int num_burnin: InitBurnin steps without MH (paper 50, spec P10).
    :param int num_burnin_mh: InitBurnin steps with MH, rounded down to whole cycles (paper 50).
    :param int num_alpha_candidates: ``t`` of Alg. 4 (paper 5).
    :param int num_beta_candidates: ``t`` of Alg. 5 (paper 10).
    :param int test_steps: MH steps per candidate; acceptance is averaged over them and the
        chains (spec P8).
    :param str alpha_max_rule: one of :data:`ALPHA_MAX_RULES`; ``None``:
        :func:`default_alpha_max_rule` of the variables.
    """

    steps_per_cycle: int = 20
    target_accept_prob: float = 0.5
    beta_max: float | None = None
    beta_min: float = 0.5
    alpha_ceil: float | None = None
    alpha_floor: float = 0.05
    zeta: float = 0.5
    budget: int = 500
    num_burnin: int = 50
    num_burnin_mh: int = 50
    num_alpha_candidates: int = 5
    num_beta_candidates: int = 10
    test_steps: int = 1
    alpha_max_rule: str | None = None

    def validate(self) -> TuningSettings:
        """Raise a ValueError naming the first bad setting; return self."""
        if int(self.steps_per_cycle) < 2:
            raise ValueError(f"steps_per_cycle must be >= 2, got {self.steps_per_cycle}.")
        if not 0.0 < self.target_accept_prob < 1.0:
            raise ValueError(
                f"target_accept_prob must lie in (0, 1), got {self.target_accept_prob}."
            )
        beta_max = 1.0 if self.beta_max is None else self.beta_max
        if not 0.5 <= self.beta_min <= beta_max <= 1.0:
            raise ValueError(
                "Need 0.5 <= beta_min <= beta_max <= 1 (spec P20), got "
                f"beta_min={self.beta_min}, beta_max={self.beta_max}."
            )
        if self.alpha_max_rule is not None and self.alpha_max_rule not in ALPHA_MAX_RULES:
            raise ValueError(
                f"alpha_max_rule must be one of {ALPHA_MAX_RULES}, got {self.alpha_max_rule!r}."
            )
        if not 0.0 < self.alpha_floor < (math.inf if self.alpha_ceil is None else self.alpha_ceil):
            raise ValueError(
                "Need 0 < alpha_floor < alpha_ceil, got "
                f"alpha_floor={self.alpha_floor}, alpha_ceil={self.alpha_ceil}."
            )
        if not 0.0 < self.zeta < 2.0:
            raise ValueError(f"zeta must lie in (0, 2), got {self.zeta}.")
        for name in ("num_alpha_candidates", "num_beta_candidates", "test_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.rounds_per_search < 1:
            raise ValueError(
                f"budget={self.budget} is too small: each step-size search needs at least "
                f"num_alpha_candidates * test_steps = "
                f"{self.num_alpha_candidates * self.test_steps} steps."
            )
        if int(self.num_burnin) < 0 or int(self.num_burnin_mh) < 0:
            raise ValueError("num_burnin and num_burnin_mh must be >= 0.")
        return self

    @property
    def rounds_per_search(self) -> int:
        """Rounds of Alg. 4 in each search: half the budget, ``t * test_steps`` steps a round."""
        return int(self.budget) // 2 // (int(self.num_alpha_candidates) * int(self.test_steps))


class TuningResult(NamedTuple):
    """What the tuner found.

    :param CyclicalSchedule schedule: the frozen ``(alpha_k, beta_k)``, ``k = 0..s-1``.
    :param alpha_max: the tuned largest step size.
    :param alpha_min: the tuned smallest step size.
    :param accept_at_max: the tuner's mean acceptance at ``(alpha_max, beta_max)``.
    :param accept_at_min: the tuner's mean acceptance at ``(alpha_min, beta_min)``.
    :param num_steps: MH steps the tuner took per chain of its batch (each one evaluation of
        the model): at most :func:`tuning_cost`, fewer when a search reaches ``rho*`` early or
        cycle entries are clipped to ``alpha_min``. Vectorised (vmapped) tuners still execute
        the skipped steps as masked lanes; one chain at a time does not.
    """

    schedule: CyclicalSchedule
    alpha_max: jax.Array
    alpha_min: jax.Array
    accept_at_max: jax.Array
    accept_at_min: jax.Array
    num_steps: jax.Array


def tuning_cost(settings: TuningSettings) -> int:
    """Number of MH steps (evaluations per chain) the tuner takes, an upper bound."""
    s = int(settings.steps_per_cycle)
    burnin = int(settings.num_burnin) + s * (int(settings.num_burnin_mh) // s)
    searches = 2 * settings.rounds_per_search * settings.num_alpha_candidates
    balancing = (s - 2) * int(settings.num_beta_candidates)
    return burnin + (searches + balancing) * int(settings.test_steps)


def default_alpha_ceil(variables: dict) -> float:
    """Where the ``alpha_max`` search starts when ``alpha_ceil`` is not given.

    5 (the paper's, spec P5) for binary, categorical and one-hot coordinates, where a step of
    5 already proposes moves nearly by ``exp(beta Delta)`` alone. An ordinal coordinate with
    ``K`` values can move ``K - 1``; ``(K - 1)^2 / 4`` makes a jump across half its range cost
    half a nat in the proposal (the paper's hand-set 1575 on 450 values is of this kind), so
    the downward search can start above every useful step.

    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :return: float.
    """
    ceiling = 5.0
    for variable in variables.values():
        if variable.kind == "ordinal":
            ceiling = max(ceiling, (variable.num_values - 1) ** 2 / 4.0)
    return ceiling


def _has_ordinal(variables: dict) -> bool:
    return any(variable.kind == "ordinal" for variable in variables.values())


def default_alpha_max_rule(variables: dict) -> str:
    """``"jump"`` when a variable is ordinal, else ``"acceptance"`` (the paper's Alg. 4).

    An ordinal coordinate can move far in one step, and a step that crosses between its modes
    is accepted rarely: acceptance near ``rho*`` picks a step that never crosses (measured on
    the ACS paper's synthetic grid: 9 of 25 modes against 24 with the jump rule, all chains
    started in one). A binary or categorical coordinate moves by one value at most, and there the
    jump rule's lower acceptance cost effective samples (docs/benchmarks.md: about 15% less ESS
    per evaluation on an RBM).

    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :return: one of :data:`ALPHA_MAX_RULES`.
    """
    return "jump" if _has_ordinal(variables) else "acceptance"


def default_beta_max(variables: dict) -> float:
    """``beta_max`` when not given: 0.5 when a variable is ordinal, else the paper's 0.95.

    ``beta`` weighs the first-order change ``grad U . (v - theta)``, which is trusted over the
    whole jump. Across a long ordinal jump that linear extrapolation is far off (on the
    paper's synthetic grid it points every proposal back past the current mode), and the paper
    itself ran its ordinal experiment with ``beta = 0.5`` throughout. Measured with the jump
    rule (docs/benchmarks.md): more modes per chain on the paper's grid and its diagonal
    variant at 0.5 than at 0.95.

    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :return: float.
    """
    return 0.5 if _has_ordinal(variables) else 0.95


def resolve_settings(settings: TuningSettings | None, variables: dict) -> TuningSettings:
    """``settings`` with every ``None`` field set by the variables: :func:`default_alpha_ceil`,
    :func:`default_beta_max` (never below ``beta_min``) and :func:`default_alpha_max_rule`.

    :param TuningSettings settings: the tuner's constants (``None``: all defaults).
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :return: a validated :class:`TuningSettings` without ``None`` fields.
    """
    settings = TuningSettings() if settings is None else settings
    if settings.alpha_ceil is None:
        settings = settings._replace(alpha_ceil=default_alpha_ceil(variables))
    if settings.beta_max is None:
        settings = settings._replace(beta_max=max(default_beta_max(variables), settings.beta_min))
    if settings.alpha_max_rule is None:
        settings = settings._replace(alpha_max_rule=default_alpha_max_rule(variables))
    return settings.validate()


def _take(tree, index):
    return jax.tree.map(lambda leaf: leaf[index], tree)


def tune_schedule(
    rng_key,
    states: ChainState,
    evaluate_fn: Callable,
    variables: dict,
    settings: TuningSettings | None = None,
) -> tuple[TuningResult, ChainState]:
    """Tune the cyclical schedule on a batch of chains (spec Alg. 2: Alg. 3, 4 twice, 5).

    1. InitBurnin (Alg. 3): ``num_burnin`` proposals at ``(alpha_ceil, beta_max)`` accepted
       without MH, then whole cycles of the naive cosine schedule with MH.
    2. EstimateAlpha (Alg. 4, multiplicative form, spec P6) for ``alpha_min`` from
       ``alpha_floor`` upward at ``beta_min``, then for ``alpha_max`` from ``alpha_ceil``
       downward at ``beta_max`` (acceptance is non-monotone in alpha, so the search starts from
       above). Each round tries ``t`` candidates from the same states, each for ``test_steps``
       MH steps, and keeps the one whose mean acceptance probability is closest to ``rho*``
       (spec P8: probabilities, not 0/1 accepts). With ``alpha_max_rule="jump"`` (the default
       for ordinal variables, :func:`default_alpha_max_rule`) the downward search runs the same
       way, but ``alpha_max`` is the candidate it tried with the largest expected squared jump
       ``E[A D]`` (:func:`~numpyro_extras.discrete.acs_transition`), not the last one.
    3. The step sizes of the corrected eq. 7.
    4. EstimateBalSched (Alg. 5 with spec P7): ``beta_0 = beta_max``; for ``k = 1..s-2`` the
       ``beta`` in ``linspace(beta_min, beta_{k-1}, t)`` with the highest mean acceptance at
       ``alpha_k`` (so the schedule is non-increasing, eq. 8); entries clipped to ``alpha_min``
       and the last one get ``beta_min``.

    :param rng_key: PRNG key.
    :param ChainState states: a batch of chains (leading axis), e.g. ``jax.vmap(init_chain)``.
    :param evaluate_fn: ``indices -> (U, differences)`` for ONE chain.
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :param TuningSettings settings: the tuner's constants (``None``: the paper's defaults, with
        ``alpha_ceil``, ``beta_max`` and ``alpha_max_rule`` chosen by the variables,
        :func:`resolve_settings`).
    :return: ``(TuningResult, final_states)``; the tuner takes :func:`tuning_cost` steps.

    **Example:**

    .. code-block:: python

        states = jax.vmap(lambda i: init_chain(evaluate, i))(initial_indices)   # 32 chains
        result, states = tune_schedule(key, states, evaluate, variables)
        result.schedule.step_sizes, result.schedule.balancing
    """
    settings = resolve_settings(settings, variables)
    jump_rule = settings.alpha_max_rule == "jump"
    dtype = jnp.result_type(float)
    s = int(settings.steps_per_cycle)
    target = settings.target_accept_prob

    def batch_step(key, batch, alpha, beta, mh=True):
        keys = jax.random.split(key, jax.tree.leaves(batch.log_density)[0].shape[0])
        return jax.vmap(
            lambda k, state: acs_transition(k, state, alpha, beta, evaluate_fn, variables, mh)
        )(keys, batch)

    def run_steps(key, batch, alpha, beta):
        """``test_steps`` MH steps; the mean acceptance probability and expected squared jump
        over steps and chains."""

        def one(carry, step_key):
            batch, accept_total, jump_total = carry
            batch, accept_prob, jump = batch_step(step_key, batch, alpha, beta)
            return (batch, accept_total + jnp.mean(accept_prob), jump_total + jnp.mean(jump)), None

        keys = jax.random.split(key, settings.test_steps)
        zero = jnp.zeros((), dtype)
        (batch, accept_total, jump_total), _ = jax.lax.scan(one, (batch, zero, zero), keys)
        return batch, accept_total / settings.test_steps, jump_total / settings.test_steps

    def try_candidates(key, batch, alphas, betas):
        """Every candidate from the same states (sequentially, to bound memory)."""
        keys = jax.random.split(key, alphas.shape[0])
        return jax.lax.map(lambda c: run_steps(c[0], batch, c[1], c[2]), (keys, alphas, betas))

    # --- Alg. 3: InitBurnin ---------------------------------------------------------------------
    burnin_key, alpha_key, beta_key = jax.random.split(rng_key, 3)

    naive_alphas = cyclical_step_sizes(settings.alpha_ceil, settings.alpha_floor, s)
    naive_betas = cosine_balancing(settings.beta_max, settings.beta_min, s)
    num_free = int(settings.num_burnin)
    num_cycle_steps = s * (int(settings.num_burnin_mh) // s)
    # The free moves at (alpha_ceil, beta_max) and the MH cycles of the naive schedule run in one
    # compiled loop: one copy of the ACS step to compile instead of two.
    cycle_positions = jnp.arange(num_cycle_steps) % s
    burnin_alphas = jnp.concatenate(
        [jnp.full((num_free,), settings.alpha_ceil, dtype), naive_alphas[cycle_positions]]
    )
    burnin_betas = jnp.concatenate(
        [jnp.full((num_free,), settings.beta_max, dtype), naive_betas[cycle_positions]]
    )
    burnin_mh = jnp.arange(num_free + num_cycle_steps) >= num_free

    def burnin_step(batch, inputs):
        key, alpha, beta, mh = inputs
        return batch_step(key, batch, alpha, beta, mh)[0], None

    states, _ = jax.lax.scan(
        burnin_step,
        states,
        (
            jax.random.split(burnin_key, num_free + num_cycle_steps),
            burnin_alphas,
            burnin_betas,
            burnin_mh,
        ),
    )

    # --- Alg. 4: EstimateAlpha ------------------------------------------------------------------
    t = int(settings.num_alpha_candidates)
    fractions = jnp.linspace(0.0, 1.0, t)

    def estimate_alpha(batch, inputs):
        """Alg. 4 from ``bound``; returns ``(states, (alpha, acceptance at alpha, steps))``. With
        the jump rule and ``search_maximum``, ``alpha`` is the tried candidate with the largest
        expected squared jump instead of the search's end point. ``search_maximum`` is traced:
        both searches run in one compiled loop, one copy of the ACS step to compile."""
        key, bound, beta, search_maximum = inputs
        # Which candidate the jump rule keeps: (alpha, acceptance, expected squared jump).
        no_best = (jnp.asarray(bound, dtype), jnp.zeros((), dtype), jnp.full((), -1.0, dtype))

        def one_round(carry, round_key):
            batch, bound, rho, done, best_jump = carry
            shift = settings.zeta * jnp.abs(target - rho)
            # Down from alpha_ceil for alpha_max, up from alpha_floor for alpha_min.
            proposal = jnp.where(search_maximum, bound * (1.0 - shift), bound * (1.0 + shift))
            candidates = jnp.where(
                search_maximum,
                proposal + (bound - proposal) * fractions,
                bound + (proposal - bound) * fractions,
            )

            def search(batch, best_jump):
                finals, rhos, jumps = try_candidates(
                    round_key, batch, candidates, jnp.full((t,), beta, dtype)
                )
                distance = jnp.abs(rhos - target)
                # Upward, ties (e.g. every candidate accepts with probability 1 because none
                # moves) go to the candidate farthest along the search, or it never leaves
                # alpha_floor.
                best = jnp.where(
                    search_maximum, jnp.argmin(distance), t - 1 - jnp.argmin(distance[::-1])
                )
                farthest = jnp.argmax(jumps)
                best_jump = jax.tree.map(
                    lambda new, old: jnp.where(jumps[farthest] > best_jump[2], new, old),
                    (candidates[farthest], rhos[farthest], jumps[farthest]),
                    best_jump,
                )
                return _take(finals, best), candidates[best], rhos[best], best_jump

            def stay(batch, best_jump):
                return batch, bound, rho, best_jump

            batch, bound, rho, best_jump = jax.lax.cond(done, stay, search, batch, best_jump)
            # The search only moves one way (down for alpha_max, up for alpha_min), so once the
            # acceptance has reached rho* it stops: noise would otherwise push it past the target
            # with no way back (the reference code's early stop, spec P6).
            reached = jnp.where(search_maximum, rho >= target, rho <= target)
            steps = jnp.where(done, 0, t * int(settings.test_steps))
            return (batch, bound, rho, done | reached, best_jump), steps

        keys = jax.random.split(key, settings.rounds_per_search)
        start = (batch, no_best[0], no_best[1], jnp.zeros((), bool), no_best)
        (batch, bound, rho, _, best_jump), steps = jax.lax.scan(one_round, start, keys)
        by_jump = search_maximum & jump_rule
        alpha = jnp.where(by_jump, best_jump[0], bound)
        rho = jnp.where(by_jump, best_jump[1], rho)
        return batch, (alpha, rho, jnp.sum(steps))

    states, (alphas, accepts, search_steps) = jax.lax.scan(
        estimate_alpha,
        states,
        (
            jax.random.split(alpha_key, 2),
            jnp.asarray([settings.alpha_floor, settings.alpha_ceil], dtype),
            jnp.asarray([settings.beta_min, settings.beta_max], dtype),
            jnp.asarray([False, True]),
        ),
    )
    alpha_min, alpha_max = alphas[0], alphas[1]
    accept_at_min, accept_at_max = accepts[0], accepts[1]
    min_steps, max_steps = search_steps[0], search_steps[1]
    # Where rho* is reached only at tiny steps (a near-deterministic conditional: no move is
    # likely), the downward search can end below alpha_min; the cycle is then constant.
    alpha_max = jnp.maximum(alpha_max, alpha_min)
    step_sizes = cyclical_step_sizes(alpha_max, alpha_min, s)

    # --- Alg. 5: EstimateBalSched ---------------------------------------------------------------
    u = int(settings.num_beta_candidates)
    beta_fractions = jnp.linspace(0.0, 1.0, u)

    def balancing_entry(carry, inputs):
        batch, beta_ceiling = carry
        key, alpha = inputs

        def search(batch):
            candidates = settings.beta_min + (beta_ceiling - settings.beta_min) * beta_fractions
            finals, rhos, _ = try_candidates(key, batch, jnp.full((u,), alpha, dtype), candidates)
            best = jnp.argmax(rhos)
            return _take(finals, best), candidates[best]

        def clipped(batch):
            return batch, jnp.asarray(settings.beta_min, dtype)

        # Entries clipped to alpha_min are the exploitation phase: beta_min (spec P7).
        batch, beta = jax.lax.cond(alpha > alpha_min, search, clipped, batch)
        steps = jnp.where(alpha > alpha_min, u * int(settings.test_steps), 0)
        return (batch, beta), (beta, steps)

    middle = step_sizes[1 : s - 1]
    (states, _), (middle_betas, balancing_steps) = jax.lax.scan(
        balancing_entry,
        (states, jnp.asarray(settings.beta_max, dtype)),
        (jax.random.split(beta_key, middle.shape[0]), middle),
    )
    balancing = jnp.concatenate(
        [
            jnp.full((1,), settings.beta_max, dtype),
            middle_betas,
            jnp.full((1,), settings.beta_min, dtype),
        ]
    )
    num_steps = (
        int(settings.num_burnin)
        + num_cycle_steps
        + min_steps
        + max_steps
        + jnp.sum(balancing_steps)
    )
    result = TuningResult(
        CyclicalSchedule(step_sizes, balancing),
        alpha_max,
        alpha_min,
        accept_at_max,
        accept_at_min,
        num_steps,
    )
    return result, states
