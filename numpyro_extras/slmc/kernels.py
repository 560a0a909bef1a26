"""VAE self-learning Monte Carlo as a NumPyro kernel: ``nx.VAESLMC``.

A thin :class:`~numpyro_extras.shell.kernel.ExtrasKernel` over the functional core of
:mod:`numpyro_extras.slmc.chains`: it reads the model, trains the proposal once per set of model
arguments (:func:`~numpyro_extras.slmc.annealing.fit_vae_proposal`) or checks a given one, and
starts the chains at draws of the proposal.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.initialization import init_to_uniform
from numpyro.util import not_jax_tracer

from numpyro_extras.model.potential import (
    FlatModel,
    check_finite_potential,
    check_trained_for,
    flat_model_from_potential,
    flatten_model,
)
from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.compiled_chain import BuildTag
from numpyro_extras.shell.kernel import (
    ExtrasKernel,
    field_lookup,
    fixed_target_functions,
)
from numpyro_extras.shell.metropolis import independence_acceptance_rate, running_accept_mean
from numpyro_extras.shell.numpyro_adapter import calling_mcmc_progress_bar
from numpyro_extras.shell.validation import check_count, check_init_strategy
from numpyro_extras.slmc.annealing import check_fit_kwargs, fit_vae_proposal
from numpyro_extras.slmc.chains import (
    ChainPoint,
    build_kernel,
    check_acceptance,
    check_latents,
    draw_proposal,
)
from numpyro_extras.slmc.chains import init as core_init
from numpyro_extras.slmc.vae import VAEProposal, isometry_factors, sample_extended

__all__ = [
    "ISOMETRY_TOLERANCE",
    "IsometryWarning",
    "SLMCState",
    "SLMC_FIELDS",
    "VAESLMC",
    "check_proposal_matches",
    "vae_slmc",
]

# The paper's isometric factors lie within 0.974 and 1.025 (its Table 2); beyond 5% eq. 3 is
# not to be trusted.
ISOMETRY_TOLERANCE = 0.05
# A given proposal's expected acceptance rate is estimated from this many of its draws at init,
# and below LOW_ACCEPTANCE_RATE the chains would hardly move: a proposal trained for another
# model or other data, or a network that never fitted the target.
ACCEPTANCE_CHECK_DRAWS = 1000
LOW_ACCEPTANCE_RATE = 0.01


class SLMCState(NamedTuple):
    """State of one VAE-SLMC chain under NumPyro's ``MCMC``: the core's
    :class:`~numpyro_extras.slmc.chains.ChainPoint` and what the kernel keeps beside it.

    :param z: the current draw (dict of unconstrained site values for a model, the flat position
        for a ``potential_fn``): the ``sample_field``.
    :param point: the :class:`~numpyro_extras.slmc.chains.ChainPoint` (flat position, latent,
        cached log weight parts).
    :param potential_energy: ``-log p~(x)``.
    :param proposal_log_weight: this step's proposal's log importance weight ``log W`` at
        ``beta = 1`` (``log p~(x') + log r(z' | x') - log q(x', z')`` with one latent): the mean
        of its exponential over proposals estimates ``Z``.
    :param accept_prob: this step's acceptance probability.
    :param accepted: whether the proposal was accepted.
    :param mean_accept_prob: running mean of ``accept_prob`` (restarted after warm-up).
    :param iteration: steps so far, warm-up included.
    :param build: the :class:`~numpyro_extras.shell.compiled_chain.BuildTag` of the kernel build.
    :param rng_key: random key.

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.VAESLMC(model, proposal=proposal), num_warmup=200, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        mcmc.last_state.mean_accept_prob
    """

    z: Any
    point: ChainPoint
    potential_energy: jax.Array
    proposal_log_weight: jax.Array
    accept_prob: jax.Array
    accepted: jax.Array
    mean_accept_prob: jax.Array
    iteration: jax.Array
    build: BuildTag
    rng_key: jax.Array

    @property
    def position(self):
        return self.point.position

    @property
    def latent(self):
        return self.point.latent

    __getattr__, __getitem__ = field_lookup("A VAE-SLMC state", lambda: SLMC_FIELDS)


SLMC_FIELDS = SLMCState._fields[:8] + ("position", "latent")


def vae_slmc(
    proposal: VAEProposal,
    log_density_fn: Callable,
    unravel_fn: Callable,
    *,
    acceptance="exact",
    num_latents=1,
    tag: BuildTag | None = None,
):
    """``(init, step)`` of one VAE-SLMC chain on ``p~`` (``beta = 1``) with a frozen proposal:
    the core's :func:`~numpyro_extras.slmc.chains.init` and
    :func:`~numpyro_extras.slmc.chains.build_kernel` on the chain's own key, with the running
    acceptance, the proposal's importance weight and the sample field kept beside them.

    Warm-up is burn-in only: the proposal does not adapt, so every step is a move of the same
    kernel and every proposal is an independent draw of ``q``.

    :param VAEProposal proposal: the trained proposal.
    :param log_density_fn: ``x -> log p~(x)`` on flat unconstrained points.
    :param unravel_fn: flat ``x`` -> the sample field (site values, or ``x`` itself).
    :param str acceptance: ``"exact"`` (extended space) or ``"isometric"`` (eq. 6 with eq. 3).
    :param int num_latents: latents per state of the exact acceptance (``K``; 1 for the plain
        extended space).
    :param tag: the build tag the states carry.
    :return: ``init(position, rng_key, num_warmup=0)`` (``num_warmup`` unused: there is nothing
        to adapt) and ``step(state, num_warmup)``.

    **Example:**

    .. code-block:: python

        init_fn, step_fn = vae_slmc(proposal, lambda x: -potential_fn(x), lambda x: x)
        state = init_fn(x0, key)
        state = step_fn(state, 0)
    """
    kernel = build_kernel(proposal, log_density_fn, acceptance=acceptance)

    def init(position, rng_key, num_warmup=0):
        state_key, latent_key = jax.random.split(rng_key)
        point = core_init(
            position,
            log_density_fn,
            proposal,
            latent_key,
            acceptance=acceptance,
            num_latents=num_latents,
        )
        zero = jnp.zeros((), position.dtype)
        return SLMCState(
            z=unravel_fn(position),
            point=point,
            potential_energy=-point.log_density,
            proposal_log_weight=zero,
            accept_prob=zero,
            accepted=jnp.zeros((), bool),
            mean_accept_prob=zero,
            iteration=jnp.zeros((), jnp.int32),
            build=tag,
            rng_key=state_key,
        )

    def step(state: SLMCState, num_warmup):
        rng_key, move_key = jax.random.split(state.rng_key)
        point, info = kernel(move_key, state.point)
        iteration = state.iteration + 1
        dtype = state.accept_prob.dtype
        accept_prob = info.accept_prob.astype(dtype)
        return SLMCState(
            z=unravel_fn(point.position),
            point=point,
            potential_energy=-point.log_density,
            proposal_log_weight=info.proposal.log_weight(1.0).astype(dtype),
            accept_prob=accept_prob,
            accepted=info.is_accepted,
            mean_accept_prob=running_accept_mean(
                state.mean_accept_prob, accept_prob, iteration, num_warmup
            ),
            iteration=iteration,
            build=state.build,
            rng_key=rng_key,
        )

    return init, step


class IsometryWarning(UserWarning):
    """The VAE is not isometric enough for the paper's acceptance (eq. 3) to be exact.

    **Example:**

    .. code-block:: python

        import warnings

        # the isometric acceptance needs a VAE trained for it (eq. 2's fixed decoder noise)
        isometric_proposal = nx.fit_vae_proposal(
            jax.random.PRNGKey(0), model, (x, y), acceptance="isometric", progress_bar=False,
            encoder_sizes=(32, 32), decoder_sizes=(32, 32), epochs=20, initial_epochs=60,
            training_size=1000, initial_size=1000, initial_warmup=200, num_data_chains=20,
            num_check_chains=5, num_check_steps=200, batch_size=256, beta_step=0.05)
        kernel = nx.VAESLMC(model, proposal=isometric_proposal, acceptance="isometric")
        mcmc = MCMC(kernel, num_warmup=200, num_samples=1000)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", nx.IsometryWarning)  # stop rather than go on
                mcmc.run(jax.random.PRNGKey(0), x, y)
        except nx.IsometryWarning as warning:
            print(warning)  # then sample with acceptance="exact"
    """


def check_proposal_matches(proposal: VAEProposal, flat_model: FlatModel, has_model=True):
    """Raise a clear ``ValueError`` when ``proposal`` was not trained for ``flat_model``: other
    latent sites, other unconstrained shapes or another dimension.

    :param VAEProposal proposal: the proposal.
    :param FlatModel flat_model: the model's flat potential.
    :param bool has_model: whether the kernel reads a model (then the sites must agree).
    """
    if not isinstance(proposal, VAEProposal):
        raise TypeError(f"proposal must be a VAEProposal, got {type(proposal).__name__}.")
    check_trained_for(
        proposal.sites,
        proposal.dimension,
        flat_model,
        has_model,
        "The VAE proposal",
        "nx.fit_vae_proposal",
    )


# Latents per state of the exact acceptance by default: averaging q / r over a few latents
# raises the acceptance and the importance ESS of the proposals for a few more network
# evaluations per step, and no more evaluations of the model.
DEFAULT_NUM_LATENTS = 4


class VAESLMC(ExtrasKernel):
    """VAE self-learning Monte Carlo (Ichikawa, Nakagawa, Masayuki and Umeda, "Toward unlimited
    self-learning MCMC with parallel adaptive annealing"): an independence sampler whose
    proposal is a VAE trained on the target along an annealing path, so that the chain can jump
    between modes at every accepted step.

    **Exact acceptance** (``acceptance="exact"``, the default). The chain runs on ``(x, z)`` with
    target ``p(x) r(z | x)``, ``r`` the encoder; every step refreshes ``z ~ r(. | x)`` and
    proposes ``z' ~ N(0, I)``, ``x' ~ N(Dec(z'), s^2 I)`` independently of the state, accepted by
    Metropolis-Hastings on the extended space. The ``x``-marginal is exactly the posterior for
    any network; a poor network only lowers the acceptance rate. With ``num_latents = K > 1``
    (4 by default) the state carries ``K`` latents, ``r(. | x)``-refreshed, the proposal adds
    ``K - 1`` encoder draws at ``x'``, and the weight averages ``q(x, z_k) / r(z_k | x)`` over
    them (an importance-weighted extended target, still exact): a higher acceptance for ``K``
    encoder and decoder evaluations per step, and no more evaluations of the model.

    **Isometric acceptance** (``acceptance="isometric"``): the paper's eq. 6 with ``x' = Dec(z')``
    and the density ``Gamma`` of eq. 3, exact only for an isometric VAE. The isometric factors of
    eq. 16 are computed at ``init`` (:attr:`isometry_factors`) and an :class:`IsometryWarning` is
    raised when any is off by more than 5%. Eq. 3 assumes eq. 2's fixed decoder noise, so the
    network is trained with it (the exact acceptance's default network learns its noise per
    coordinate instead), and a given proposal with a learned noise is refused.

    **log Z.** Proposals are independent draws of ``q``, so their importance weights
    ``p~(x') r(z' | x') / q(x', z')`` (the extra field ``proposal_log_weight``) average to ``Z``:
    :func:`numpyro_extras.log_marginal_likelihood` returns it with its standard error.

    **Training.** Without ``proposal`` the first ``init`` trains one with
    :func:`~numpyro_extras.fit_vae_proposal` (fixed seed ``fit_seed``, the calling ``MCMC``'s
    progress bar), once per set of model arguments and for every chain method; warm-up is then
    burn-in only (the proposal is frozen).

    :param model: a NumPyro model with continuous latent sites.
    :param potential_fn: alternatively, ``-log p~`` on flat 1-D points (needs ``proposal``).
    :param VAEProposal proposal: a trained proposal (:func:`~numpyro_extras.fit_vae_proposal`,
        :func:`~numpyro_extras.load_proposal`); checked against the model's sites and shapes,
        and its acceptance rate on the target estimated from 1000 of its draws
        (:attr:`expected_accept_rate`, optimistic): below 0.01 a warning says the chains will
        hardly move.
    :param str acceptance: ``"exact"`` or ``"isometric"``.
    :param int num_latents: latents per state of the exact acceptance (``K``); ``None`` for 4
        (exact) or 1 (isometric).
    :param int num_models: models annealed side by side when training (exchange repairs mode
        collapse).
    :param dict fit_kwargs: other keyword arguments of :func:`~numpyro_extras.fit_vae_proposal`
        (settings of :class:`~numpyro_extras.slmc.annealing.AnnealingSettings`).
    :param int fit_seed: seed of the training.
    :param init_strategy: NumPyro init strategy for the model's reference point (the fallback
        start of a chain whose proposal draw has no finite density).
    :param int isometry_samples: draws of the isometry diagnostic (isometric acceptance).

    **Example:**

    .. code-block:: python

        # without proposal=, init trains one by nx.fit_vae_proposal (settings in fit_kwargs=)
        kernel = nx.VAESLMC(model, proposal=proposal)
        mcmc = MCMC(kernel, num_warmup=200, num_samples=1000, num_chains=2)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        nx.log_marginal_likelihood(mcmc)  # from the proposals' importance weights
        kernel.proposal.history  # the annealing path
    """

    gibbs_block_error = (
        "its proposal is trained for one fixed target, and the conditional a Gibbs block "
        "samples changes at every step."
    )

    def __init__(
        self,
        model=None,
        potential_fn=None,
        *,
        proposal=None,
        acceptance="exact",
        num_latents=None,
        num_models=1,
        fit_kwargs=None,
        fit_seed=0,
        init_strategy=init_to_uniform,
        isometry_samples=10_000,
    ):
        super().__init__(model, potential_fn)
        if potential_fn is not None and proposal is None:
            raise ValueError(
                "With `potential_fn`, give `proposal=` (train one with nx.fit_vae_proposal("
                "key, potential_fn=..., initial_position=...)): a kernel cannot train from a "
                "potential without a starting point."
            )
        if proposal is not None and not isinstance(proposal, VAEProposal):
            raise TypeError(f"proposal must be a VAEProposal, got {type(proposal).__name__}.")
        check_acceptance(acceptance, None if proposal is None else proposal.config)
        self._user_proposal = proposal
        self._proposal = proposal
        self._acceptance = acceptance
        if num_latents is None:
            num_latents = DEFAULT_NUM_LATENTS if acceptance == "exact" else 1
        check_latents(num_latents, acceptance)
        self._num_latents = num_latents
        self._num_models = check_count("num_models", num_models)
        self._fit_kwargs = check_fit_kwargs(dict(fit_kwargs or {}), "VAESLMC(fit_kwargs=...)")
        self._fit_seed = fit_seed
        self._init_strategy = check_init_strategy(init_strategy)
        self._isometry_samples = check_count("isometry_samples", isometry_samples)
        self._isometry_factors = None
        self._expected_accept_rate = None
        self._flat_model: FlatModel | None = None

    @property
    def proposal(self) -> VAEProposal | None:
        """The proposal in use (trained at the first ``init`` when none was given)."""
        return self._proposal

    @property
    def acceptance(self) -> str:
        return self._acceptance

    @property
    def flat_model(self) -> FlatModel | None:
        return self._flat_model

    @property
    def isometry_factors(self):
        """The isometric factors of eq. 16 (isometric acceptance, after ``init``), else ``None``."""
        return self._isometry_factors

    @property
    def expected_accept_rate(self):
        """For a given ``proposal``, its acceptance rate on this target estimated at ``init``
        from its importance weights
        (:func:`~numpyro_extras.shell.metropolis.independence_acceptance_rate`); ``None`` for a
        proposal trained by the kernel (its ``proposal.history.final_accept_rates`` say the
        same)."""
        return self._expected_accept_rate

    @property
    def default_fields(self):
        return ("z", "proposal_log_weight", "accept_prob")

    def _constrain_fn(self):
        return None if self._flat_model is None else self._flat_model.constrain_fn

    def _forget_target(self):
        self._flat_model = None
        self._proposal = self._user_proposal
        self._isometry_factors = None
        self._expected_accept_rate = None

    def _prepare_target(self, model_args, model_kwargs):
        key = jax.random.PRNGKey(self._fit_seed)
        if self._model is None:
            self._flat_model = flat_model_from_potential(
                self._potential_fn, self._user_proposal.loc
            )
        else:
            self._flat_model = flatten_model(
                key,
                self._model,
                model_args,
                model_kwargs,
                init_strategy=self._init_strategy,
                kernel_name="VAESLMC",
            )
        if self._user_proposal is None:
            fit_kwargs = {"progress_bar": calling_mcmc_progress_bar(), **self._fit_kwargs}
            self._proposal = fit_vae_proposal(
                key,
                self._model,
                model_args,
                model_kwargs,
                num_models=self._num_models,
                acceptance=self._acceptance,
                flat_model=self._flat_model,
                **fit_kwargs,
            )
        else:
            check_proposal_matches(self._user_proposal, self._flat_model, self._model is not None)
            self._proposal = self._user_proposal
        dtype = self._flat_model.initial_position.dtype
        self._proposal = jax.tree.map(lambda leaf: jnp.asarray(leaf, dtype), self._proposal)
        if self._acceptance == "isometric":
            self._check_isometry(key)
        if self._user_proposal is not None:
            self._check_expected_acceptance(key)

    def _check_expected_acceptance(self, key):
        potential_fn = self._flat_model.potential_fn
        num_latents = self._num_latents if self._num_latents > 1 else None
        proposal, acceptance = self._proposal, self._acceptance

        @quick_jit
        def expected_rate(keys):
            proposed = jax.vmap(
                lambda k: draw_proposal(
                    k, proposal, acceptance, lambda x: -potential_fn(x), num_latents
                )
            )(keys)
            return independence_acceptance_rate(proposed.log_weight(1.0))

        rate = float(expected_rate(jax.random.split(key, ACCEPTANCE_CHECK_DRAWS)))
        self._expected_accept_rate = rate
        if rate < LOW_ACCEPTANCE_RATE:
            warnings.warn(
                f"The VAE proposal's expected acceptance rate on this target is {rate:.2g} "
                f"(from the importance weights of {ACCEPTANCE_CHECK_DRAWS} of its draws): the "
                "chains stay exact but will hardly move, and their draws will be few and "
                "correlated. Was the proposal trained for this model and these data? Retrain "
                "it (nx.fit_vae_proposal), with whiten=True on a target with strongly "
                "correlated coordinates.",
                stacklevel=6,
            )

    def _check_isometry(self, key):
        factors = np.asarray(isometry_factors(key, self._proposal, self._isometry_samples))
        self._isometry_factors = factors
        worst = int(np.argmax(np.abs(factors - 1.0)))
        if abs(factors[worst] - 1.0) > ISOMETRY_TOLERANCE:
            warnings.warn(
                f"The VAE is not isometric: latent dimension {worst} has isometric factor "
                f"{factors[worst]:.3f} (eq. 16; within {ISOMETRY_TOLERANCE:.0%} of 1 is needed), "
                "so the isometric acceptance (eq. 3) does not leave the posterior invariant. "
                "Use acceptance='exact'.",
                IsometryWarning,
                stacklevel=6,
            )

    def _build(self, num_warmup, tag):
        potential_fn = self._flat_model.potential_fn
        init_fn, step_fn = vae_slmc(
            self._proposal,
            lambda x: -potential_fn(x),
            self._flat_model.unravel_fn,
            acceptance=self._acceptance,
            num_latents=self._num_latents,
            tag=tag,
        )
        return fixed_target_functions(init_fn, step_fn, num_warmup, {})

    def _initial_position(self, rng_key, init_params):
        """One chain's start: ``init_params`` if given, else a draw of the proposal (the
        model's reference point where the density is not finite there)."""
        fallback = self._flat_model.initial_position
        if init_params is not None:
            position = init_params if self._model is None else ravel_pytree(init_params)[0]
            return jnp.asarray(position, fallback.dtype)
        draw = sample_extended(rng_key, self._proposal)[0].astype(fallback.dtype)
        finite = jnp.isfinite(self._flat_model.potential_fn(draw))
        return jnp.where(finite, draw, fallback)

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs):
        positions, chain_keys = self._starting_positions(
            rng_key, init_params, batched, self._initial_position, self._flat_model.dimension
        )
        if not_jax_tracer(positions):
            flat = np.reshape(np.asarray(positions), (-1, positions.shape[-1]))
            check_finite_potential(self._flat_model.potential_fn, flat, "the start")
        return positions, chain_keys

    def get_diagnostics_str(self, state):
        return f"acc. prob={float(state.mean_accept_prob):.2f}"
