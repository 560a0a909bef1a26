"""Joint and Gibbs continuous tempering as NumPyro kernels (Graham & Storkey, "Continuously
tempered HMC").

Thin :class:`~numpyro_extras.shell.kernel.ExtrasKernel` classes over the functional core of
:mod:`numpyro_extras.tempering.chains`: they read the model, fit the base
(:func:`~numpyro_extras.fit_base`) and start the chains. ``mcmc.get_samples()`` are the target
replica's exact posterior draws; the tempered chain is in the extra fields, from which
:mod:`numpyro_extras.tempering.evidence` computes ``log Z``. The chain's NumPyro side (its key,
the build tag, the site values and the moves per kept draw) is :class:`TemperingState`, around
the core's state, stepped by :func:`tempering_chain`.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from numpyro.infer import HMC, NUTS
from numpyro.infer.hmc import HMCState
from numpyro.infer.initialization import init_to_uniform
from numpyro.util import not_jax_tracer

from numpyro_extras.model.base_fit import check_fit_base_settings
from numpyro_extras.model.bases import GaussianBase, validate_base
from numpyro_extras.model.potential import (
    FlatModel,
    check_finite_potential,
    flat_model_from_potential,
    flatten_model,
)
from numpyro_extras.shell.compilation import split_each_key, split_key
from numpyro_extras.shell.compiled_chain import BuildTag
from numpyro_extras.shell.kernel import (
    ExtrasKernel,
    field_lookup,
    fixed_target_functions,
    hmc_settings,
)
from numpyro_extras.shell.numpyro_adapter import calling_mcmc_progress_bar
from numpyro_extras.shell.validation import check_count, check_flag, check_init_strategy, check_real
from numpyro_extras.tempering.base_fit import fit_base_for_kernel
from numpyro_extras.tempering.chains import (
    GIBBS_KEYS,
    INIT_KEYS,
    JOINT_KEYS,
    PointEvaluation,
    TemperatureMixing,
    TemperingChainState,
    build_gibbs_kernel,
    build_joint_kernel,
    gibbs_init,
    joint_init,
)

__all__ = [
    "AUTO_MOVES_PER_DRAW",
    "MIN_MODES_FOR_MORE_MOVES",
    "TEMPERING_FIELDS",
    "GibbsContinuousTempering",
    "JointContinuousTempering",
    "TemperingState",
    "tempering_chain",
]

# Transitions per kept draw when the base fit was still finding modes and had found many: the
# chain then crosses between the modes only through beta near 0, and the accuracy of the mode
# weights is set by the number of those round trips, not by the number of draws kept. A fit of
# a unimodal hierarchical model can also end its search with a few components on the tails of
# one mode; many modes are the sign of a multimodal posterior.
AUTO_MOVES_PER_DRAW = 8
MIN_MODES_FOR_MORE_MOVES = 8


class TemperingState(NamedTuple):
    """State of a continuous tempering chain under NumPyro's ``MCMC``: the core's
    :class:`~numpyro_extras.tempering.chains.TemperingChainState` (``tempered``, ``replica``,
    ``beta``, ``log_zeta``, ``iteration``, ``inner_state``, ``replica_inner_state``, ``mixing``;
    also ``core``) and what the kernel keeps beside it: the unravelled draws, the last
    transition's swap and base acceptance, the build tag and the chain's key.

    :param z: the target replica ``y``, an exact posterior draw: a dict of unconstrained site
        values for a model, or the flat position for a ``potential_fn``. This is the
        ``sample_field``, so ``mcmc.get_samples()`` is the posterior.
    :param tempered_z: the tempered chain's position ``x``, in the same form as ``z``.
    :param beta: the tempered chain's inverse temperature in [0, 1].
    :param delta: ``Delta(x) = phi(x) + log zeta - psi(x)`` at ``tempered_z``.
    :param log_zeta: this chain's ``log zeta``: adapted during warm-up (if enabled), then fixed.
    :param potential_energy: ``phi(y)``, the potential of the posterior draw ``z``.
    :param swap_accept_prob: acceptance probability of this transition's swap of ``x`` and ``y``.
    :param base_accept_prob: acceptance probability of this transition's proposal of a new ``x``
        drawn from the base (0 when the kernel makes none).
    :param replica: the :class:`~numpyro_extras.tempering.chains.PointEvaluation` at ``y``.
    :param tempered: the :class:`~numpyro_extras.tempering.chains.PointEvaluation` at ``x``.
    :param iteration: number of transitions so far, warm-up included.
    :param inner_state: the NumPyro HMC/NUTS state the kernel moves with (on the extended space
        ``(x, u)`` for joint tempering, on ``x`` for Gibbs tempering).
    :param replica_inner_state: the NumPyro HMC/NUTS state of the replica's own move on the
        target (``None`` when the kernel makes none).
    :param mixing: :class:`~numpyro_extras.tempering.chains.TemperatureMixing` counts.
    :param build: the :class:`~numpyro_extras.shell.compiled_chain.BuildTag` of the kernel build.
    :param rng_key: the chain's key.

    **Example:**

    .. code-block:: python

        mcmc.last_state.beta, mcmc.last_state.log_zeta  # mcmc: a finished tempering run
    """

    z: Any
    tempered_z: Any
    beta: jax.Array
    delta: jax.Array
    log_zeta: jax.Array
    potential_energy: jax.Array
    swap_accept_prob: jax.Array
    base_accept_prob: jax.Array
    replica: PointEvaluation
    tempered: PointEvaluation
    iteration: jax.Array
    inner_state: HMCState
    replica_inner_state: HMCState | None
    mixing: TemperatureMixing
    build: BuildTag
    rng_key: jax.Array

    @property
    def core(self) -> TemperingChainState:
        """The core's state: what :func:`~numpyro_extras.tempering.chains.build_joint_kernel`'s
        and :func:`~numpyro_extras.tempering.chains.build_gibbs_kernel`'s kernels move."""
        return TemperingChainState(
            self.tempered,
            self.replica,
            self.beta,
            self.log_zeta,
            self.iteration,
            self.inner_state,
            self.replica_inner_state,
            self.mixing,
        )

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
    def energy(self):
        return self.inner_state.energy

    @property
    def adapt_state(self):
        return self.inner_state.adapt_state

    @property
    def step_size(self):
        return self.inner_state.adapt_state.step_size

    @property
    def replica_accept_prob(self):
        """Acceptance probability of the replica's own HMC/NUTS move (0 when there is none)."""
        if self.replica_inner_state is None:
            return jnp.zeros_like(self.beta)
        return self.replica_inner_state.accept_prob

    @property
    def replica_diverging(self):
        """Whether the replica's own HMC/NUTS move diverged."""
        if self.replica_inner_state is None:
            return jnp.zeros(jnp.shape(self.beta), bool)
        return self.replica_inner_state.diverging

    @property
    def replica_num_steps(self):
        """Leapfrog steps of the replica's own HMC/NUTS move (0 when there is none); a
        transition evaluates ``phi`` and its gradient ``num_steps + replica_num_steps + 2``
        times (at the moved ``x`` and at a draw from the base beside the moves; one fewer
        without base proposals)."""
        if self.replica_inner_state is None:
            return jnp.zeros(jnp.shape(self.beta), jnp.asarray(self.num_steps).dtype)
        return self.replica_inner_state.num_steps

    __getattr__, __getitem__ = field_lookup(
        "A continuous tempering state", lambda: TEMPERING_FIELDS
    )


TEMPERING_FIELDS = TemperingState._fields[:8] + (
    "iteration",
    "diverging",
    "accept_prob",
    "mean_accept_prob",
    "num_steps",
    "energy",
    "step_size",
    "adapt_state.step_size",
    "adapt_state.inverse_mass_matrix",
    "replica_accept_prob",
    "replica_diverging",
    "replica_num_steps",
    "mixing.num_round_trips",
)


def _tempering_state(core: TemperingChainState, accept_probs, unravel_fn, tag, rng_key):
    """The shell's state from the core's, with the transition's ``(swap_accept_prob,
    base_accept_prob)``."""
    swap_accept_prob, base_accept_prob = accept_probs
    return TemperingState(
        z=unravel_fn(core.replica.position),
        tempered_z=unravel_fn(core.tempered.position),
        beta=core.beta,
        delta=core.delta,
        log_zeta=core.log_zeta,
        potential_energy=core.replica.target_potential,
        swap_accept_prob=swap_accept_prob,
        base_accept_prob=base_accept_prob,
        replica=core.replica,
        tempered=core.tempered,
        iteration=core.iteration,
        inner_state=core.inner_state,
        replica_inner_state=core.replica_inner_state,
        mixing=core.mixing,
        build=tag,
        rng_key=rng_key,
    )


def tempering_chain(core_init, kernel, unravel_fn, num_keys, *, moves_per_draw=1, tag=None):
    """``(init, step)`` of one continuous tempering chain under NumPyro's ``MCMC``: the core's
    init and kernel (paper eqs. 14-17) on the chain's own key, with the site values, the build
    tag and the moves per kept draw kept beside them.

    The chain's key is handed to the core whole: the core leaves one of the keys it splits it in
    unused (``INIT_KEYS``, ``JOINT_KEYS``, ``GIBBS_KEYS`` of
    :mod:`numpyro_extras.tempering.chains`), and the chain carries that one on.

    After warm-up, ``step`` makes ``moves_per_draw`` transitions per kept draw (one per draw
    during warm-up, so that the warm-up schedules keep their length). Each transition leaves the
    joint target invariant, so keeping every ``k``-th state is exact. When the chain crosses
    between modes only through ``beta`` near 0, the accuracy of the mode weights is set by the
    round trips between the ends of ``beta``, and ``k`` transitions per draw make ``k`` times as
    many per draw kept. ``diverging`` of the kept state says whether any of its transitions
    diverged.

    :param core_init: ``(position, rng_key, num_warmup, **hmc_settings) ->``
        :class:`~numpyro_extras.tempering.chains.TemperingChainState`, a core init with its
        target and settings bound.
    :param kernel: the core's ``kernel(rng_key, state) -> (state, info)``.
    :param unravel_fn: flat ``x`` -> the sample field (site values, or ``x`` itself).
    :param int num_keys: how many keys ``kernel`` splits its key in.
    :param int moves_per_draw: transitions per kept draw after warm-up.
    :param tag: the build tag the states carry.
    :return: ``init(position, rng_key, num_warmup, **hmc_settings)`` and
        ``step(state, num_warmup)``, both for one chain, on :class:`TemperingState`.

    **Example:**

    .. code-block:: python

        from numpyro_extras.tempering import chains

        def core_init(position, rng_key, num_warmup, **settings):
            return chains.gibbs_init(position, potential_fn, base, rng_key,
                                     num_warmup=num_warmup, **settings)

        kernel = chains.build_gibbs_kernel(potential_fn, base, num_warmup=500, num_steps=20)
        init, step = tempering_chain(core_init, kernel, lambda x: x, chains.GIBBS_KEYS)
        state = step(init(x0, jax.random.PRNGKey(0), 500, num_steps=20), 500)
    """

    def init(position, rng_key, num_warmup, **hmc_settings):
        core = core_init(position, rng_key, num_warmup, **hmc_settings)
        accept_probs = (jnp.ones((), position.dtype), jnp.zeros((), position.dtype))
        state_key = jax.random.split(rng_key, INIT_KEYS)[-1]
        return _tempering_state(core, accept_probs, unravel_fn, tag, state_key)

    def transition(state: TemperingState):
        next_key = jax.random.split(state.rng_key, num_keys)[0]
        core, info = kernel(state.rng_key, state.core)
        accept_probs = (info.swap_accept_prob, info.base_accept_prob)
        return _tempering_state(core, accept_probs, unravel_fn, state.build, next_key)

    if moves_per_draw == 1:
        return init, lambda state, num_warmup: transition(state)

    def step(state: TemperingState, num_warmup):
        count = jnp.where(state.iteration < num_warmup, 1, moves_per_draw)

        def move(_, carry):
            state, diverged = carry
            state = transition(state)
            return state, diverged | state.inner_state.diverging

        diverged = jnp.zeros_like(state.inner_state.diverging)
        state, diverged = jax.lax.fori_loop(0, count, move, (state, diverged))
        return state._replace(inner_state=state.inner_state._replace(diverging=diverged))

    return init, step


class _ContinuousTemperingKernel(ExtrasKernel):
    """What the joint and Gibbs kernels share: the base, init and diagnostics."""

    gibbs_block_error = (
        "its base density and log zeta are fitted to one fixed target, and the conditional a "
        "Gibbs block samples changes at every step, so log Z and the tempering path would refer "
        "to no fixed distribution."
    )

    def __init__(
        self,
        model=None,
        potential_fn=None,
        *,
        base=None,
        adapt_log_zeta=True,
        base_proposals=True,
        replica_moves=True,
        init_strategy=init_to_uniform,
        fit_base_kwargs=None,
        fit_base_seed=0,
        moves_per_draw="auto",
    ):
        super().__init__(model, potential_fn)
        if potential_fn is not None and base is None:
            raise ValueError(
                "With `potential_fn`, `base` is required: a GaussianBase on the same flat space "
                "(fitting one needs a model)."
            )
        self._base = None if base is None else validate_base(base)
        self._user_base = self._base is not None
        self._base_fit_problems = ()
        self._unfinished_search_modes = 0
        self._adapt_log_zeta = check_flag("adapt_log_zeta", adapt_log_zeta)
        self._base_proposals = check_flag("base_proposals", base_proposals)
        self._replica_moves = check_flag("replica_moves", replica_moves)
        self._init_strategy = check_init_strategy(init_strategy)
        self._fit_base_kwargs = check_fit_base_settings(
            f"{type(self).__name__}(fit_base_kwargs=...)", **dict(fit_base_kwargs or {})
        )
        self._fit_base_seed = fit_base_seed
        if moves_per_draw != "auto":
            moves_per_draw = check_count("moves_per_draw", moves_per_draw)
        self._moves_per_draw = moves_per_draw
        self._flat_model: FlatModel | None = None

    @property
    def base(self) -> GaussianBase | None:
        """The base density and initial ``log zeta`` (fitted on the first ``init`` if not
        given)."""
        return self._base

    @property
    def flat_model(self) -> FlatModel | None:
        return self._flat_model

    @property
    def base_fit_problems(self) -> tuple[str, ...]:
        """What the base fit warned about the base's coverage of the posterior (empty if
        nothing, or if the base was given)."""
        return self._base_fit_problems

    @property
    def moves_per_draw(self) -> int:
        """Tempering transitions per kept draw after warm-up. With ``moves_per_draw="auto"``:
        8 (``AUTO_MOVES_PER_DRAW``) when the kernel fitted its base and the fit's rounds ended
        while still finding modes, with 8 or more found
        (:class:`~numpyro_extras.ModeSearchWarning`), else 1 (known once the base is fitted, on
        the first ``init``)."""
        if self._moves_per_draw != "auto":
            return self._moves_per_draw
        many_modes = self._unfinished_search_modes >= MIN_MODES_FOR_MORE_MOVES
        return AUTO_MOVES_PER_DRAW if many_modes else 1

    @property
    def default_fields(self):
        return ("z", "tempered_z", "beta", "delta", "log_zeta", "swap_accept_prob", "diverging")

    def _constrain_fn(self):
        return None if self._flat_model is None else self._flat_model.constrain_fn

    def _prepare_target(self, model_args, model_kwargs):
        """Build the flat potential and the base for these model arguments."""
        if self._model is None:
            self._flat_model = flat_model_from_potential(self._potential_fn, self._base.loc)
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
            return
        # The flat model just built is handed down, so that the fit does not trace and compile
        # the model's initialisation again.
        fit_kwargs = {
            "progress_bar": calling_mcmc_progress_bar(),
            "flat_model": self._flat_model,
            **self._fit_base_kwargs,
        }
        # A base that may miss modes makes every later estimate doubtful: the diagnostics of the
        # run repeat the fit's coverage warnings.
        fitted = fit_base_for_kernel(
            self._model, model_args, model_kwargs, self._fit_base_seed, fit_kwargs
        )
        self._base, self._base_fit_problems = fitted.base, fitted.coverage_problems
        self._unfinished_search_modes = fitted.unfinished_search_modes

    def _initial_positions(self, rng_key, init_params, batched):
        """Flat starting points: ``init_params`` if given, else draws from the base, a nearly
        stationary start at ``beta`` near 0 (paper section 7.2)."""
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
        if not not_jax_tracer(positions):
            return
        positions = jnp.reshape(positions, (-1, self._flat_model.dimension))
        check_finite_potential(self._flat_model.potential_fn, positions)

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs):
        position_keys = split_each_key(rng_key) if batched else split_key(rng_key)
        chain_keys = position_keys[..., 0, :] if batched else position_keys[0]
        draw_keys = position_keys[..., 1, :] if batched else position_keys[1]
        positions = self._initial_positions(draw_keys, init_params, batched)
        if positions.shape[-1] != self._flat_model.dimension:
            raise ValueError(
                f"init_params have {positions.shape[-1]} unconstrained dimensions, the model "
                f"{self._flat_model.dimension}."
            )
        self._check_initial_positions(positions)
        return positions, chain_keys

    def _shell_functions(self, core_init, kernel, num_keys, num_warmup, tag):
        """The shell's ``(init_one, step_one)`` from a family's core init and kernel, with this
        run's moves per draw."""
        init_fn, step_fn = tempering_chain(
            core_init,
            kernel,
            self._flat_model.unravel_fn,
            num_keys,
            moves_per_draw=self.moves_per_draw,
            tag=tag,
        )
        return fixed_target_functions(init_fn, step_fn, num_warmup, self._hmc_settings)

    def get_diagnostics_str(self, state):
        mixing = state.mixing
        counted = max(int(mixing.num_draws), 1)
        moves = f"{self.moves_per_draw} moves/draw, " if self.moves_per_draw > 1 else ""
        return moves + (
            f"{int(state.num_steps)} steps of size {float(state.step_size):.2e}. "
            f"acc. prob={float(state.mean_accept_prob):.2f} beta={float(state.beta):.2f} "
            f"near 0/1: {int(mixing.num_near_base) / counted:.0%}/"
            f"{int(mixing.num_near_target) / counted:.0%} "
            f"round trips={int(mixing.num_round_trips)}"
        )


class JointContinuousTempering(_ContinuousTemperingKernel):
    """Joint continuous tempering: NUTS (or HMC) on the extended space ``(x, u)``.

    The inverse temperature is ``beta = sigmoid(u / beta_scale)`` and the extended potential is
    paper eq. 14 (:func:`extended_potential`); the warm-up adapts step size and mass matrix,
    ``u`` included, and ``log zeta`` (so that the chain reaches both ends of ``beta``). Chains
    start with ``x`` drawn from the base and ``u = -10 * beta_scale`` (``beta`` about 4.5e-5).

    ``mcmc.get_samples()`` are exact posterior draws (the kernel's target replica); the tempered
    chain is in the extra fields ``tempered_z``, ``beta``, ``delta`` and ``log_zeta``, from which
    :func:`numpyro_extras.log_marginal_likelihood` computes ``log Z`` (eq. 20).

    Under ``chain_method="vectorized"``, chains at different temperatures build NUTS trees of
    different lengths and wait for the longest one every transition; ``"parallel"``,
    ``"sequential"`` or a fixed-length ``inner_kernel=HMC`` avoid that loss.

    :param model: a NumPyro model with continuous latent sites.
    :param potential_fn: alternatively, ``phi`` on flat 1-D positions (then ``base`` is required).
    :param GaussianBase base: base density and initial ``log zeta``; ``None`` fits one with
        :func:`~numpyro_extras.fit_base` on the first ``init`` (once per set of model arguments).
    :param inner_kernel: ``numpyro.infer.NUTS`` or ``numpyro.infer.HMC``, the move on ``(x, u)``:
        the class (settings as keywords) or an instance built on ``model`` (its settings).
    :param float beta_scale: the scale ``s`` of ``beta = sigmoid(u / s)``.
    :param float initial_beta_logit: starting ``u / s``.
    :param bool adapt_log_zeta: adapt ``log zeta`` during warm-up (per chain).
    :param bool base_proposals: after each HMC move, propose a new tempered ``x`` drawn from the
        base (:func:`propose_from_base`, one more gradient evaluation per transition); this is
        what carries the chain between modes at small ``beta``.
    :param bool replica_moves: beside each tempered move, move the target replica (the draws
        of ``mcmc.get_samples()``) with its own ``inner_kernel`` transition on the posterior, with
        its own warm-up: about twice the gradient evaluations of a transition, for posterior
        draws that mix like the inner kernel's between the swaps that carry them across modes.
    :param init_strategy: NumPyro init strategy (only used to build the model's flat view).
    :param dict fit_base_kwargs: keyword arguments for :func:`~numpyro_extras.fit_base`,
        checked (names and values) when the kernel is built.
    :param int fit_base_seed: seed of the base fit, the same for every chain method.
    :param moves_per_draw: tempering transitions per kept draw after warm-up (every one exact;
        the sampling phase takes that many times longer). ``"auto"``: 8 when the kernel fits
        its base and the fit's rounds end while still finding modes, with 8 or more found,
        else 1.
    :param inner_kwargs: settings of the HMC/NUTS move (``step_size``, ``dense_mass``,
        ``target_accept_prob``, ``max_tree_depth``, ``num_steps``, ...).

    **Example:**

    .. code-block:: python

        kernel = nx.JointContinuousTempering(model)
        mcmc = MCMC(kernel, num_warmup=300, num_samples=1000, num_chains=2)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        mcmc.print_summary()  # the posterior
        nx.log_marginal_likelihood(mcmc)  # log p(y) with its standard error
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
        adapt_log_zeta=True,
        base_proposals=True,
        replica_moves=True,
        init_strategy=init_to_uniform,
        fit_base_kwargs=None,
        fit_base_seed=0,
        moves_per_draw="auto",
        **inner_kwargs,
    ):
        super().__init__(
            model,
            potential_fn,
            base=base,
            adapt_log_zeta=adapt_log_zeta,
            base_proposals=base_proposals,
            replica_moves=replica_moves,
            init_strategy=init_strategy,
            fit_base_kwargs=fit_base_kwargs,
            fit_base_seed=fit_base_seed,
            moves_per_draw=moves_per_draw,
        )
        self._beta_scale = check_real("beta_scale", beta_scale, "a positive number", low=0.0)
        self._initial_beta_logit = check_real("initial_beta_logit", initial_beta_logit)
        self._algo, self._hmc_settings = hmc_settings(
            inner_kernel, owner_model=model, **inner_kwargs
        )

    def _build(self, num_warmup, tag):
        potential_fn, base = self._flat_model.potential_fn, self._base
        shared = {"algo": self._algo, "beta_scale": self._beta_scale}
        shared["replica_moves"] = self._replica_moves

        def core_init(position, rng_key, num_warmup, **settings):
            return joint_init(
                position,
                potential_fn,
                base,
                rng_key,
                num_warmup=num_warmup,
                initial_beta_logit=self._initial_beta_logit,
                **shared,
                **settings,
            )

        kernel = build_joint_kernel(
            potential_fn,
            base,
            num_warmup=num_warmup,
            adapt_log_zeta=self._adapt_log_zeta,
            base_proposals=self._base_proposals,
            **shared,
            **self._hmc_settings,
        )
        return self._shell_functions(core_init, kernel, JOINT_KEYS, num_warmup, tag)


class GibbsContinuousTempering(_ContinuousTemperingKernel):
    """Gibbs continuous tempering: an HMC (or NUTS) move on ``x`` given ``beta``, then ``beta | x``.

    The ``x``-move leaves ``exp(-beta phi - (1 - beta) psi)`` invariant; ``beta`` is then drawn
    exactly from the exponential with rate ``Delta(x)`` truncated to [0, 1] (paper eq. 17),
    numerically stable for any ``|Delta|``. Warm-up adapts the step size, a diagonal mass matrix
    and ``log zeta``. Chains start with ``x`` from the base and ``beta = 0``.

    ``mcmc.get_samples()`` are exact posterior draws (the kernel's target replica); the tempered
    chain is in the extra fields ``tempered_z``, ``beta``, ``delta`` and ``log_zeta``.

    :param model: a NumPyro model with continuous latent sites.
    :param potential_fn: alternatively, ``phi`` on flat 1-D positions (then ``base`` is required).
    :param GaussianBase base: base density and initial ``log zeta``; ``None`` fits one with
        :func:`~numpyro_extras.fit_base` on the first ``init``.
    :param inner_kernel: ``HMC`` (fixed number of leapfrog steps) or ``NUTS``: the class, or
        an instance built on ``model`` (its settings replace those below).
    :param int num_steps: leapfrog steps of an HMC move (paper: 20).
    :param float step_size: initial step size.
    :param bool adapt_step_size: adapt the step size in warm-up (dual averaging).
    :param bool adapt_mass_matrix: adapt the mass matrix in warm-up.
    :param bool dense_mass: dense instead of diagonal mass matrix.
    :param float target_accept_prob: target acceptance of the step-size adaptation.
    :param int max_tree_depth: NUTS tree depth.
    :param bool adapt_log_zeta: adapt ``log zeta`` during warm-up (per chain).
    :param bool base_proposals: after each HMC move, propose a new tempered ``x`` drawn from the
        base (:func:`propose_from_base`, one more gradient evaluation per transition); this is
        what carries the chain between modes at small ``beta``.
    :param bool replica_moves: beside each tempered move, move the target replica (the draws
        of ``mcmc.get_samples()``) with its own ``inner_kernel`` transition on the posterior, with
        its own warm-up: about twice the gradient evaluations of a transition, for posterior
        draws that mix like the inner kernel's between the swaps that carry them across modes.
    :param init_strategy: NumPyro init strategy (only used to build the model's flat view).
    :param dict fit_base_kwargs: keyword arguments for :func:`~numpyro_extras.fit_base`,
        checked (names and values) when the kernel is built.
    :param int fit_base_seed: seed of the base fit, the same for every chain method.
    :param moves_per_draw: tempering transitions per kept draw after warm-up (every one exact;
        the sampling phase takes that many times longer). ``"auto"``: 8 when the kernel fits
        its base and the fit's rounds end while still finding modes, with 8 or more found,
        else 1.

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.GibbsContinuousTempering(model), num_warmup=300, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), x, y)
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
        adapt_log_zeta=True,
        base_proposals=True,
        replica_moves=True,
        init_strategy=init_to_uniform,
        fit_base_kwargs=None,
        fit_base_seed=0,
        moves_per_draw="auto",
    ):
        super().__init__(
            model,
            potential_fn,
            base=base,
            adapt_log_zeta=adapt_log_zeta,
            base_proposals=base_proposals,
            replica_moves=replica_moves,
            init_strategy=init_strategy,
            fit_base_kwargs=fit_base_kwargs,
            fit_base_seed=fit_base_seed,
            moves_per_draw=moves_per_draw,
        )
        self._algo, self._hmc_settings = hmc_settings(
            inner_kernel,
            owner_model=model,
            owner_defaults=_GIBBS_MOVE_DEFAULTS,
            step_size=step_size,
            adapt_step_size=adapt_step_size,
            adapt_mass_matrix=adapt_mass_matrix,
            dense_mass=dense_mass,
            target_accept_prob=target_accept_prob,
            # NUTS takes no num_steps; an instance keeps its own (only a changed one is an error).
            num_steps=num_steps if inner_kernel is HMC or isinstance(inner_kernel, HMC) else None,
            max_tree_depth=max_tree_depth,
        )

    def _build(self, num_warmup, tag):
        potential_fn, base = self._flat_model.potential_fn, self._base
        shared = {"algo": self._algo, "replica_moves": self._replica_moves}

        def core_init(position, rng_key, num_warmup, **settings):
            return gibbs_init(
                position, potential_fn, base, rng_key, num_warmup=num_warmup, **shared, **settings
            )

        kernel = build_gibbs_kernel(
            potential_fn,
            base,
            num_warmup=num_warmup,
            adapt_log_zeta=self._adapt_log_zeta,
            base_proposals=self._base_proposals,
            **shared,
            **self._hmc_settings,
        )
        return self._shell_functions(core_init, kernel, GIBBS_KEYS, num_warmup, tag)


# The HMC settings in GibbsContinuousTempering's signature, at their defaults: with an inner
# kernel instance they give way to the instance's own.
_GIBBS_MOVE_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(GibbsContinuousTempering.__init__).parameters.items()
    if name
    in (
        "num_steps",
        "step_size",
        "adapt_step_size",
        "adapt_mass_matrix",
        "dense_mass",
        "target_accept_prob",
        "max_tree_depth",
    )
}
