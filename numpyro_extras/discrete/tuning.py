"""Automatic tuning of the cyclical schedule (ACS paper Algorithms 2-5).

The tuner runs a batch of chains (acceptance is averaged over them, as in the paper) and
returns a frozen :class:`~numpyro_extras.discrete.schedule.CyclicalSchedule` together with the
batch's final states. Its draws are warm-up draws and are never kept (an adapting schedule
would not leave the target invariant).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_extras.discrete.proposal import ChainState, build_kernel
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
    "fixed_tuning",
    "resolve_settings",
    "tune_schedule",
    "tuning_cost",
    "untuned_schedule",
]

#: How the tuner picks ``alpha_max`` among the step sizes its downward search tries:
#: ``"acceptance"``: the one whose acceptance is closest to ``rho*`` (the paper's Alg. 4);
#: ``"jump"``: the one with the largest expected squared jump distance
#: ``E[A(theta' | theta) D(theta', theta)]``, which keeps a large step whose rare accepted
#: moves cross between modes (the paper sets ``alpha_max`` by hand for such targets).
#: ``None`` in :class:`TuningSettings` chooses by the variables (:func:`default_alpha_max_rule`).
ALPHA_MAX_RULES = ("acceptance", "jump")


class TuningSettings(NamedTuple):
    """Every constant of the tuner; defaults are the ACS paper's (App. A.1 and its code), except
    that ``alpha_ceil``, ``beta_max`` and ``alpha_max_rule`` default to choices by the variables
    (``None``; :func:`resolve_settings`).

    :param int steps_per_cycle: ``s`` (paper 20 for sampling).
    :param float target_accept_prob: ``rho*`` (paper 0.5).
    :param float beta_max: balancing exponent at ``alpha_max`` (paper 0.95 for RBMs);
        ``None``: :func:`default_beta_max` of the variables.
    :param float beta_min: balancing exponent at ``alpha_min`` (always 0.5).
    :param float alpha_ceil: where the search for ``alpha_max`` starts (paper 5, App. A.1 and
        its code; the Alg. 2 box says 60);
        ``None``: :func:`default_alpha_ceil` of the variables (5, or more for ordinal ones).
    :param float alpha_floor: where the search for ``alpha_min`` starts (paper 0.05).
    :param float zeta: the search's relative step ``zeta`` (paper 0.5, "insensitive").
    :param int budget: MH steps for the two step-size searches together (paper 200; 500 for
        runs of 5000 steps or more, the paper's setting for long runs, the default here).
    :param int num_burnin: InitBurnin steps without MH (paper 50).
    :param int num_burnin_mh: InitBurnin steps with MH, rounded down to whole cycles (paper 50).
    :param int num_alpha_candidates: ``t`` of Alg. 4 (paper 5).
    :param int num_beta_candidates: ``t`` of Alg. 5 (paper 10).
    :param int test_steps: MH steps per candidate; acceptance is averaged over them and the
        chains (probabilities, not 0/1 accepts: less noise).
    :param str alpha_max_rule: one of :data:`ALPHA_MAX_RULES`; ``None``:
        :func:`default_alpha_max_rule` of the variables.

    **Example:**

    .. code-block:: python

        nx.TuningSettings().budget  # 500 MH steps for the step-size searches
        kernel = nx.ACS(nx.rbm_model, tuning_settings={"budget": 200})  # the paper's, short runs
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
                "Need 0.5 <= beta_min <= beta_max <= 1 (t^beta is a balancing function there), "
                "got "
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


def fixed_tuning(schedule: CyclicalSchedule) -> TuningResult:
    """The :class:`TuningResult` of a schedule given by the user: no tuner ran, so its
    acceptances are NaN and its step count 0.

    :param CyclicalSchedule schedule: the fixed ``(alpha_k, beta_k)``.
    :return: :class:`TuningResult`.

    **Example:**

    .. code-block:: python

        fixed_tuning(CyclicalSchedule(jnp.array([0.2]), jnp.array([0.5])))  # DMALA's
    """
    nan = jnp.full((), jnp.nan)
    return TuningResult(
        schedule,
        jnp.max(schedule.step_sizes),
        jnp.min(schedule.step_sizes),
        nan,
        nan,
        jnp.zeros((), jnp.int32),
    )


def tuning_cost(settings: TuningSettings) -> int:
    """Number of MH steps (evaluations per chain) the tuner takes, an upper bound."""
    s = int(settings.steps_per_cycle)
    burnin = int(settings.num_burnin) + s * (int(settings.num_burnin_mh) // s)
    searches = 2 * settings.rounds_per_search * settings.num_alpha_candidates
    balancing = (s - 2) * int(settings.num_beta_candidates)
    return burnin + (searches + balancing) * int(settings.test_steps)


def default_alpha_ceil(variables: dict) -> float:
    """Where the ``alpha_max`` search starts when ``alpha_ceil`` is not given.

    5 (the paper's App. A.1) for binary, categorical and one-hot coordinates, where a step of
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
    is accepted rarely: acceptance near ``rho*`` picks a step that never crosses, and the
    chains stay in the modes they start in. A binary or categorical coordinate moves by one
    value at most, and there the jump rule's lower acceptance only costs effective samples
    (docs/benchmarks.md, the ACS section, has both comparisons).

    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :return: one of :data:`ALPHA_MAX_RULES`.
    """
    return "jump" if _has_ordinal(variables) else "acceptance"


def default_beta_max(variables: dict) -> float:
    """``beta_max`` when not given: 0.5 when a variable is ordinal, else the paper's 0.95.

    ``beta`` weighs the first-order change ``grad U . (v - theta)``, which is trusted over the
    whole jump. Across a long ordinal jump that linear extrapolation is far off (on the
    paper's synthetic grid it points every proposal back past the current mode), and the paper
    itself ran its ordinal experiment with ``beta = 0.5`` throughout; with the jump rule, chains
    visit more modes on the paper's grid at 0.5 than at 0.95 (docs/benchmarks.md).

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


# The tuner's phases, in the order its single loop of MH steps runs them.
_FREE_BURNIN, _NAIVE_CYCLES, _SEARCH_ALPHA_MIN, _SEARCH_ALPHA_MAX, _BALANCING = range(5)


def untuned_schedule(settings: TuningSettings) -> CyclicalSchedule:
    """The cycle of the tuner's burn-in (Alg. 3): cosine step sizes from ``alpha_ceil`` down to
    ``alpha_floor`` (eq. 7), balancing from ``beta_max`` down to ``beta_min`` (eq. 8).

    :param TuningSettings settings: resolved settings (:func:`resolve_settings`).
    :return: :class:`~numpyro_extras.discrete.CyclicalSchedule` of ``steps_per_cycle`` entries.

    **Example:**

    .. code-block:: python

        naive = untuned_schedule(resolve_settings(TuningSettings(), variables))
    """
    s = settings.steps_per_cycle
    return CyclicalSchedule(
        cyclical_step_sizes(settings.alpha_ceil, settings.alpha_floor, s),
        cosine_balancing(settings.beta_max, settings.beta_min, s),
    )


class _StepPlan(NamedTuple):
    """What each step of the tuner's loop does, fixed by the settings (one entry per step)."""

    phase: np.ndarray  # one of the phases above
    candidate: np.ndarray  # which candidate of its round the step tries
    first: np.ndarray  # the candidate's first test step: it starts from the round's states
    last: np.ndarray  # the candidate's last test step: its acceptance is complete
    round_first: np.ndarray
    round_last: np.ndarray  # the round picks its best candidate
    phase_last: np.ndarray
    entry: np.ndarray  # the schedule entry a balancing round tunes, minus one


def _step_plan(settings: TuningSettings, num_burnin_steps: int) -> _StepPlan:
    steps = int(settings.test_steps)
    rows = [(_FREE_BURNIN, 0, 0, 0, 0)] * int(settings.num_burnin)
    rows += [(_NAIVE_CYCLES, 0, 0, 0, 0)] * (num_burnin_steps - int(settings.num_burnin))
    for phase, num_rounds, num_candidates in (
        (_SEARCH_ALPHA_MIN, settings.rounds_per_search, int(settings.num_alpha_candidates)),
        (_SEARCH_ALPHA_MAX, settings.rounds_per_search, int(settings.num_alpha_candidates)),
        (_BALANCING, int(settings.steps_per_cycle) - 2, int(settings.num_beta_candidates)),
    ):
        rows += [
            (phase, round_index, candidate, step, num_candidates)
            for round_index in range(num_rounds)
            for candidate in range(num_candidates)
            for step in range(steps)
        ]
    table = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
    phase, round_index, candidate, step, num_candidates = table.T
    searching = phase >= _SEARCH_ALPHA_MIN
    first = searching & (step == 0)
    last = searching & (step == steps - 1)
    next_phase = np.append(phase[1:], -1)
    return _StepPlan(
        phase=phase,
        candidate=candidate,
        first=first,
        last=last,
        round_first=first & (candidate == 0),
        round_last=last & (candidate == num_candidates - 1),
        phase_last=next_phase != phase,
        entry=np.where(phase == _BALANCING, round_index, 0),
    )


class _TunerState(NamedTuple):
    batch: ChainState  # the chains after the latest step
    round_start: ChainState  # the chains every candidate of the round starts from
    best_batch: ChainState  # the round's best candidate's final chains so far
    accept_total: jax.Array  # the current candidate's summed mean acceptance
    jump_total: jax.Array
    best_score: jax.Array  # the round's best candidate: score, value tried, acceptance
    best_value: jax.Array
    best_accept: jax.Array
    bound: jax.Array  # Alg. 4: where the search stands, with its acceptance
    accept: jax.Array
    done: jax.Array
    jump_best: tuple  # the searched alpha with the largest expected squared jump
    alpha_min: jax.Array
    accept_at_min: jax.Array
    alpha_max: jax.Array
    accept_at_max: jax.Array
    beta_ceiling: jax.Array
    balancing: jax.Array  # the tuned beta of schedule entries 1..s-2
    num_steps: jax.Array


def _where(flag, new, old):
    return jax.tree.map(lambda a, b: jnp.where(flag, a, b), new, old)


class _TunerSetup(NamedTuple):
    """What every step of the tuner's loop reads and never changes.

    :param TuningSettings settings: resolved settings (:func:`resolve_settings`).
    :param alpha_fractions: where a round's step-size candidates lie, as fractions of the way
        from the search's bound to its proposal (``linspace(0, 1, t)``).
    :param beta_fractions: where a balancing round's candidates lie, as fractions of the way
        from ``beta_min`` to the previous entry's beta.
    :param move: ``(key, batch, alpha, beta, mh) -> (batch, mean acceptance, mean jump)``, one
        ACS step of every chain of the batch (:func:`_batch_step`).
    :param hold: the same signature, for a step the tuner skips: the batch unchanged.
    """

    settings: TuningSettings
    alpha_fractions: jax.Array
    beta_fractions: jax.Array
    move: Callable
    hold: Callable


class _StepValues(NamedTuple):
    """Where one step of the tuner's loop moves the chains.

    :param alpha: the step size of the move.
    :param beta: its balancing exponent.
    :param active: whether the step moves the chains (else it is skipped and not counted).
    :param search_alpha: the step size a search step tries (Alg. 4).
    :param entry_beta: the beta a balancing step tries (Alg. 5).
    """

    alpha: jax.Array
    beta: jax.Array
    active: jax.Array
    search_alpha: jax.Array
    entry_beta: jax.Array


def _loop_inputs(settings: TuningSettings, dtype) -> tuple:
    """What each step of the tuner's loop does (:func:`_step_plan`) and the ``(alpha, beta)``
    of Alg. 3's burn-in at it: free moves at ``(alpha_ceil, beta_max)``, then whole MH cycles
    of the naive schedule, then zeros for the steps after the burn-in (which set their own).

    :param TuningSettings settings: resolved settings (:func:`resolve_settings`).
    :param dtype: the float dtype of the schedule.
    :return: ``(plan, burnin_alphas, burnin_betas)``, one entry a step of the loop.
    """
    s = int(settings.steps_per_cycle)
    num_free = int(settings.num_burnin)
    num_cycle_steps = s * (int(settings.num_burnin_mh) // s)
    cycle_positions = jnp.arange(num_cycle_steps) % s
    burnin_alphas = jnp.concatenate(
        [
            jnp.full((num_free,), settings.alpha_ceil, dtype),
            cyclical_step_sizes(settings.alpha_ceil, settings.alpha_floor, s)[cycle_positions],
        ]
    )
    burnin_betas = jnp.concatenate(
        [
            jnp.full((num_free,), settings.beta_max, dtype),
            cosine_balancing(settings.beta_max, settings.beta_min, s)[cycle_positions],
        ]
    )
    plan = _step_plan(settings, num_free + num_cycle_steps)
    num_plan_steps = plan.phase.shape[0]
    pad = num_plan_steps - (num_free + num_cycle_steps)
    burnin_alphas = jnp.concatenate([burnin_alphas, jnp.zeros((pad,), dtype)])
    burnin_betas = jnp.concatenate([burnin_betas, jnp.zeros((pad,), dtype)])
    return plan, burnin_alphas, burnin_betas


def _batch_step(evaluate_fn: Callable, variables: dict, key, batch, alpha, beta, mh):
    """One ACS step (the kernel of :func:`~numpyro_extras.discrete.proposal.build_kernel`) of
    every chain of the batch, each with its own key split from ``key``.

    :param evaluate_fn: ``indices -> (U, differences)`` for ONE chain.
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :param key: PRNG key.
    :param ChainState batch: the chains (leading axis).
    :param alpha: the step size.
    :param beta: the balancing exponent.
    :param mh: whether the MH test applies (else every proposal is accepted).
    :return: ``(batch, mean acceptance probability, mean expected squared jump)``.
    """
    keys = jax.random.split(key, jax.tree.leaves(batch.log_density)[0].shape[0])
    kernel = build_kernel(evaluate_fn, variables, mh)
    new_batch, info = jax.vmap(lambda k, state: kernel(k, state, alpha, beta))(keys, batch)
    return new_batch, jnp.mean(info.accept_prob), jnp.mean(info.expected_squared_jump)


def _hold(dtype, key, batch, alpha, beta, mh):
    """A skipped step: the batch unchanged, zero acceptance and jump (of ``dtype``); the
    signature of :func:`_batch_step` after its first two arguments."""
    return batch, jnp.zeros((), dtype), jnp.zeros((), dtype)


def _step_values(setup: _TunerSetup, state: _TunerState, step, burnin_alpha, burnin_beta):
    """The ``(alpha, beta)`` of one step of the tuner's loop, by its phase: the burn-in's,
    a search's candidate (Alg. 4) or a balancing candidate (Alg. 5).

    :param _TunerSetup setup: the loop's constants.
    :param _TunerState state: the tuner before the step.
    :param _StepPlan step: the step's row of the plan.
    :param burnin_alpha: the burn-in's step size at this step.
    :param burnin_beta: the burn-in's balancing exponent at this step.
    :return: :class:`_StepValues`.
    """
    settings, phase = setup.settings, step.phase
    s = int(settings.steps_per_cycle)
    searching = (phase == _SEARCH_ALPHA_MIN) | (phase == _SEARCH_ALPHA_MAX)
    search_maximum = phase == _SEARCH_ALPHA_MAX
    balancing = phase == _BALANCING

    # Alg. 4, multiplicative form: down from alpha_ceil for alpha_max, up from alpha_floor
    # for alpha_min, by zeta |rho* - rho|, trying t candidates between bound and proposal.
    shift = settings.zeta * jnp.abs(settings.target_accept_prob - state.accept)
    proposal = jnp.where(search_maximum, state.bound * (1.0 - shift), state.bound * (1.0 + shift))
    alpha_fractions = setup.alpha_fractions
    fraction = alpha_fractions[jnp.minimum(step.candidate, alpha_fractions.shape[0] - 1)]
    search_alpha = jnp.where(
        search_maximum,
        proposal + (state.bound - proposal) * fraction,
        state.bound + (proposal - state.bound) * fraction,
    )
    # Alg. 5: entry k of the corrected eq. 7 cycle, beta from beta_min to the previous
    # entry's beta (so the schedule is non-increasing, eq. 8).
    entry_alpha = cyclical_step_sizes(state.alpha_max, state.alpha_min, s)[step.entry + 1]
    beta_fractions = setup.beta_fractions
    entry_beta = (
        settings.beta_min
        + (state.beta_ceiling - settings.beta_min)
        * (beta_fractions[jnp.minimum(step.candidate, beta_fractions.shape[0] - 1)])
    )
    alpha = jnp.where(searching, search_alpha, jnp.where(balancing, entry_alpha, burnin_alpha))
    beta = jnp.where(
        searching,
        jnp.where(search_maximum, settings.beta_max, settings.beta_min),
        jnp.where(balancing, entry_beta, burnin_beta),
    )
    # A search stops once it reaches rho*; entries clipped to alpha_min are the exploitation
    # phase and keep beta_min.
    active = jnp.where(
        searching, ~state.done, jnp.where(balancing, entry_alpha > state.alpha_min, True)
    )
    return _StepValues(alpha, beta, active, search_alpha, entry_beta)


def _keep_best(settings: TuningSettings, state: _TunerState, step, values: _StepValues):
    """A candidate is complete: keep it if it is the round's best so far.

    Searches keep the acceptance closest to ``rho*`` (probabilities, not 0/1 accepts), upward
    ties going to the candidate farthest along (where no candidate moves, every one accepts
    with probability 1, and the search must still leave ``alpha_floor``); balancing keeps the
    highest acceptance. The jump rule's candidate is tracked over the whole downward search.

    :param TuningSettings settings: resolved settings.
    :param _TunerState state: the tuner after the step's move.
    :param _StepPlan step: the step's row of the plan.
    :param _StepValues values: where the step moved.
    :return: ``state`` with the round's best and the jump rule's best updated.
    """
    phase = step.phase
    balancing = phase == _BALANCING
    candidate_accept = state.accept_total / settings.test_steps
    candidate_jump = state.jump_total / settings.test_steps
    value = jnp.where(balancing, values.entry_beta, values.search_alpha)
    score = jnp.where(
        balancing, -candidate_accept, jnp.abs(candidate_accept - settings.target_accept_prob)
    )
    better = jnp.where(
        phase == _SEARCH_ALPHA_MIN, score <= state.best_score, score < state.best_score
    )
    take = step.last & ((step.candidate == 0) | better)
    return state._replace(
        best_batch=_where(take, state.batch, state.best_batch),
        best_score=jnp.where(take, score, state.best_score),
        best_value=jnp.where(take, value, state.best_value),
        best_accept=jnp.where(take, candidate_accept, state.best_accept),
        # The jump rule's alpha_max: the tried candidate with the largest expected squared jump.
        jump_best=_where(
            step.last
            & (phase == _SEARCH_ALPHA_MAX)
            & values.active
            & (candidate_jump > state.jump_best[2]),
            (values.search_alpha, candidate_accept, candidate_jump),
            state.jump_best,
        ),
    )


def _end_round(settings: TuningSettings, state: _TunerState, step, active):
    """The round is complete: move the chains to its best candidate's states, and move the
    search's bound there (stopping it once it reaches ``rho*``) or set the balancing entry.

    :param TuningSettings settings: resolved settings.
    :param _TunerState state: the tuner after :func:`_keep_best`.
    :param _StepPlan step: the step's row of the plan.
    :param active: whether the step moved the chains.
    :return: the updated ``state``.
    """
    phase = step.phase
    searching = (phase == _SEARCH_ALPHA_MIN) | (phase == _SEARCH_ALPHA_MAX)
    round_moves = step.round_last & active
    batch = _where(round_moves, state.best_batch, state.batch)
    search_moves = round_moves & searching
    bound = jnp.where(search_moves, state.best_value, state.bound)
    accept = jnp.where(search_moves, state.best_accept, state.accept)
    # The search only moves one way, so once the acceptance has reached rho* it stops:
    # noise would otherwise push it past the target with no way back (the reference
    # code's early stop).
    target = settings.target_accept_prob
    reached = jnp.where(phase == _SEARCH_ALPHA_MAX, accept >= target, accept <= target)
    done = state.done | (search_moves & reached)
    entry_done = step.round_last & (phase == _BALANCING)
    entry_beta_tuned = jnp.where(active, state.best_value, settings.beta_min)
    balancing_betas = jnp.where(
        entry_done, state.balancing.at[step.entry].set(entry_beta_tuned), state.balancing
    )
    beta_ceiling = jnp.where(entry_done, entry_beta_tuned, state.beta_ceiling)
    return state._replace(
        batch=batch,
        bound=bound,
        accept=accept,
        done=done,
        balancing=balancing_betas,
        beta_ceiling=beta_ceiling,
    )


def _end_search(settings: TuningSettings, state: _TunerState, step):
    """A search is complete: record ``alpha_min`` (then start the ``alpha_max`` search where
    it ended) or ``alpha_max`` (by ``alpha_max_rule``).

    :param TuningSettings settings: resolved settings.
    :param _TunerState state: the tuner after :func:`_end_round`.
    :param _StepPlan step: the step's row of the plan.
    :return: the updated ``state``.
    """
    phase = step.phase
    min_found = step.phase_last & (phase == _SEARCH_ALPHA_MIN)
    max_found = step.phase_last & (phase == _SEARCH_ALPHA_MAX)
    alpha_min = jnp.where(min_found, state.bound, state.alpha_min)
    if settings.alpha_max_rule == "jump":
        found, found_accept = state.jump_best[0], state.jump_best[1]
    else:
        found, found_accept = state.bound, state.accept
    return state._replace(
        alpha_min=alpha_min,
        accept_at_min=jnp.where(min_found, state.accept, state.accept_at_min),
        # Where rho* is reached only at tiny steps (a near-deterministic conditional: no move
        # is likely), the downward search can end below alpha_min; the cycle is then constant.
        alpha_max=jnp.where(max_found, jnp.maximum(found, alpha_min), state.alpha_max),
        accept_at_max=jnp.where(max_found, found_accept, state.accept_at_max),
        # The alpha_max search starts where the alpha_min search ended.
        bound=jnp.where(min_found, settings.alpha_ceil, state.bound),
        accept=jnp.where(min_found, 0.0, state.accept),
        done=jnp.where(min_found, False, state.done),
    )


def _tuner_step(setup: _TunerSetup, state: _TunerState, inputs):
    """One step of the tuner's loop. Every phase runs in this one loop of single MH steps, so
    that the ACS step is compiled once, not once a phase.

    :param _TunerSetup setup: the loop's constants.
    :param _TunerState state: the tuner before the step.
    :param inputs: ``(key, step, burnin_alpha, burnin_beta)``: the step's key, its row of the
        plan and the burn-in's ``(alpha, beta)`` there.
    :return: ``(state, None)``, for :func:`jax.lax.scan`.
    """
    key, step, burnin_alpha, burnin_beta = inputs
    values = _step_values(setup, state, step, burnin_alpha, burnin_beta)
    round_start = _where(step.round_first, state.batch, state.round_start)
    source = _where(step.first, round_start, state.batch)
    batch, accept_prob, jump = jax.lax.cond(
        values.active,
        setup.move,
        setup.hold,
        key,
        source,
        values.alpha,
        values.beta,
        step.phase != _FREE_BURNIN,
    )
    state = state._replace(
        batch=batch,
        round_start=round_start,
        accept_total=jnp.where(step.first, 0.0, state.accept_total) + accept_prob,
        jump_total=jnp.where(step.first, 0.0, state.jump_total) + jump,
    )
    state = _keep_best(setup.settings, state, step, values)
    state = _end_round(setup.settings, state, step, values.active)
    state = _end_search(setup.settings, state, step)
    return state._replace(num_steps=state.num_steps + values.active.astype(jnp.int32)), None


def _initial_tuner_state(settings: TuningSettings, states: ChainState, dtype) -> _TunerState:
    """The tuner before its first step: the ``alpha_min`` search at ``alpha_floor``.

    :param TuningSettings settings: resolved settings.
    :param ChainState states: the batch of chains.
    :param dtype: the float dtype of the schedule.
    :return: :class:`_TunerState`.
    """
    zero = jnp.zeros((), dtype)
    return _TunerState(
        batch=states,
        round_start=states,
        best_batch=states,
        accept_total=zero,
        jump_total=zero,
        best_score=zero,
        best_value=zero,
        best_accept=zero,
        bound=jnp.asarray(settings.alpha_floor, dtype),
        accept=zero,
        done=jnp.zeros((), bool),
        jump_best=(jnp.asarray(settings.alpha_ceil, dtype), zero, jnp.full((), -1.0, dtype)),
        alpha_min=jnp.asarray(settings.alpha_floor, dtype),
        accept_at_min=zero,
        alpha_max=jnp.asarray(settings.alpha_ceil, dtype),
        accept_at_max=zero,
        beta_ceiling=jnp.asarray(settings.beta_max, dtype),
        balancing=jnp.zeros((max(int(settings.steps_per_cycle) - 2, 0),), dtype),
        num_steps=jnp.zeros((), jnp.int32),
    )


def _tuning_result(settings: TuningSettings, final: _TunerState, dtype) -> TuningResult:
    """The frozen schedule and what the tuner found, from its final state.

    :param TuningSettings settings: resolved settings.
    :param _TunerState final: the tuner after its last step.
    :param dtype: the float dtype of the schedule.
    :return: :class:`TuningResult`.
    """
    balancing = jnp.concatenate(
        [
            jnp.full((1,), settings.beta_max, dtype),
            final.balancing,
            jnp.full((1,), settings.beta_min, dtype),
        ]
    )
    s = int(settings.steps_per_cycle)
    return TuningResult(
        CyclicalSchedule(cyclical_step_sizes(final.alpha_max, final.alpha_min, s), balancing),
        final.alpha_max,
        final.alpha_min,
        final.accept_at_max,
        final.accept_at_min,
        final.num_steps,
    )


def tune_schedule(
    rng_key,
    states: ChainState,
    evaluate_fn: Callable,
    variables: dict,
    settings: TuningSettings | None = None,
) -> tuple[TuningResult, ChainState]:
    """Tune the cyclical schedule on a batch of chains (the paper's Alg. 2: Alg. 3, 4 twice, 5).

    1. InitBurnin (Alg. 3): ``num_burnin`` proposals at ``(alpha_ceil, beta_max)`` accepted
       without MH, then whole cycles of the naive cosine schedule with MH.
    2. EstimateAlpha (Alg. 4, multiplicative form, as in its pseudo-code) for ``alpha_min`` from
       ``alpha_floor`` upward at ``beta_min``, then for ``alpha_max`` from ``alpha_ceil``
       downward at ``beta_max`` (acceptance is non-monotone in alpha, so the search starts from
       above). Each round tries ``t`` candidates from the same states, each for ``test_steps``
       MH steps, and keeps the one whose mean acceptance probability is closest to ``rho*``
       (probabilities, not 0/1 accepts). With ``alpha_max_rule="jump"`` (the default
       for ordinal variables, :func:`default_alpha_max_rule`) the downward search runs the same
       way, but ``alpha_max`` is the candidate it tried with the largest expected squared jump
       ``E[A D]`` (:class:`~numpyro_extras.discrete.ACSInfo`), not the last one.
    3. The step sizes of the corrected eq. 7.
    4. EstimateBalSched (Alg. 5): ``beta_0 = beta_max``; for ``k = 1..s-2`` the
       ``beta`` in ``linspace(beta_min, beta_{k-1}, t)`` with the highest mean acceptance at
       ``alpha_k`` (so the schedule is non-increasing, eq. 8); entries clipped to ``alpha_min``
       and the last one get ``beta_min``.

    :param rng_key: PRNG key.
    :param ChainState states: a batch of chains (leading axis), e.g. from ``jax.vmap(init)``.
    :param evaluate_fn: ``indices -> (U, differences)`` for ONE chain.
    :param dict variables: name -> :class:`~numpyro_extras.discrete.DiscreteVariable`.
    :param TuningSettings settings: the tuner's constants (``None``: the paper's defaults, with
        ``alpha_ceil``, ``beta_max`` and ``alpha_max_rule`` chosen by the variables,
        :func:`resolve_settings`).
    :return: ``(TuningResult, final_states)``; the tuner takes :func:`tuning_cost` steps.

    **Example:**

    .. code-block:: python

        states = jax.vmap(lambda i: init(i, evaluate))(initial_indices)   # 32 chains
        result, states = tune_schedule(key, states, evaluate, variables)
        result.schedule.step_sizes, result.schedule.balancing
    """
    settings = resolve_settings(settings, variables)
    dtype = jnp.result_type(float)
    setup = _TunerSetup(
        settings,
        jnp.linspace(0.0, 1.0, int(settings.num_alpha_candidates), dtype=dtype),
        jnp.linspace(0.0, 1.0, int(settings.num_beta_candidates), dtype=dtype),
        partial(_batch_step, evaluate_fn, variables),
        partial(_hold, dtype),
    )
    plan, burnin_alphas, burnin_betas = _loop_inputs(settings, dtype)
    final, _ = jax.lax.scan(
        partial(_tuner_step, setup),
        _initial_tuner_state(settings, states, dtype),
        (
            jax.random.split(rng_key, plan.phase.shape[0]),
            jax.tree.map(jnp.asarray, plan),
            burnin_alphas,
            burnin_betas,
        ),
    )
    return _tuning_result(settings, final, dtype), final.batch
