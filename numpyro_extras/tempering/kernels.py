"""Joint and Gibbs continuous tempering as NumPyro kernels (Graham & Storkey, "Continuously
tempered HMC").

Thin :class:`~numpyro_extras.kernel.ExtrasKernel` classes over the functional core of
:mod:`numpyro_extras.tempering.chains`: they read the model, fit the base
(:func:`~numpyro_extras.fit_base`) and start the chains. ``mcmc.get_samples()`` are the target
replica's exact posterior draws; the tempered chain is in the extra fields, from which
:mod:`numpyro_extras.tempering.evidence` computes ``log Z``.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from numpyro.infer import HMC, NUTS
from numpyro.infer.initialization import init_to_uniform
from numpyro.util import not_jax_tracer

from numpyro_extras.bases import GaussianBase, validate_base
from numpyro_extras.compilation import split_each_key, split_key
from numpyro_extras.kernel import (
    ExtrasKernel,
    fixed_target_functions,
    hmc_settings,
)
from numpyro_extras.numpyro_adapter import calling_mcmc_progress_bar
from numpyro_extras.potential import (
    FlatModel,
    check_finite_potential,
    flat_model_from_potential,
    flatten_model,
)
from numpyro_extras.tempering.base_fit import (
    check_fit_base_settings,
    fit_base_for_kernel,
)
from numpyro_extras.tempering.chains import gibbs_tempering, joint_tempering, moves_per_draw_step
from numpyro_extras.validation import check_count, check_flag, check_init_strategy, check_real

__all__ = [
    "AUTO_MOVES_PER_DRAW",
    "MIN_MODES_FOR_MORE_MOVES",
    "GibbsContinuousTempering",
    "JointContinuousTempering",
]

# Transitions per kept draw when the base fit was still finding modes and had found many: the
# chain then crosses between the modes only through beta near 0, and the accuracy of the mode
# weights is set by the number of those round trips, not by the number of draws kept. A fit of
# a unimodal hierarchical model can also end its search with a few components on the tails of
# one mode; many modes are the sign of a multimodal posterior.
AUTO_MOVES_PER_DRAW = 8
MIN_MODES_FOR_MORE_MOVES = 8


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

    def _shell_functions(self, init_fn, step_fn, num_warmup):
        """The shell's ``(init_one, step_one)`` from a family core, with this run's moves per
        draw."""
        step_fn = moves_per_draw_step(step_fn, self.moves_per_draw)
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
        flat_model = self._flat_model
        init_fn, step_fn = joint_tempering(
            flat_model.potential_fn,
            self._base,
            flat_model.unravel_fn,
            algo=self._algo,
            beta_scale=self._beta_scale,
            initial_beta_logit=self._initial_beta_logit,
            adapt_log_zeta=self._adapt_log_zeta,
            base_proposals=self._base_proposals,
            replica_moves=self._replica_moves,
            tag=tag,
        )
        return self._shell_functions(init_fn, step_fn, num_warmup)


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
        flat_model = self._flat_model
        init_fn, step_fn = gibbs_tempering(
            flat_model.potential_fn,
            self._base,
            flat_model.unravel_fn,
            algo=self._algo,
            adapt_log_zeta=self._adapt_log_zeta,
            base_proposals=self._base_proposals,
            replica_moves=self._replica_moves,
            tag=tag,
        )
        return self._shell_functions(init_fn, step_fn, num_warmup)


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
