"""The Ai-sampler as a NumPyro kernel: ``nx.AiSampler``.

A thin :class:`~numpyro_extras.shell.kernel.ExtrasKernel` over the functional core of
:mod:`numpyro_extras.involutive.chains`: it reads the model, trains the involution once per set
of model arguments (:func:`~numpyro_extras.involutive.training.train_ai_sampler`) or checks a
given one, and steps with it frozen. The chain's NumPyro side (its key, the build tag, the site
values and the running acceptance) is :class:`AiState`, around the core's state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.gibbs import with_conditioning
from numpyro.infer.initialization import init_to_uniform
from numpyro.util import not_jax_tracer

from numpyro_extras.involutive.chains import InvolutiveState, build_kernel
from numpyro_extras.involutive.chains import init as core_init
from numpyro_extras.involutive.networks import InvolutiveProposal
from numpyro_extras.involutive.training import check_train_kwargs, train_ai_sampler
from numpyro_extras.model.potential import (
    FlatModel,
    check_trained_for,
    flat_model_from_potential,
    flat_potential_for,
    flatten_model,
)
from numpyro_extras.shell.compiled_chain import BuildTag
from numpyro_extras.shell.kernel import (
    ExtrasKernel,
    arguments_fingerprint,
    conditioning_values,
    field_lookup,
)
from numpyro_extras.shell.metropolis import running_accept_mean
from numpyro_extras.shell.numpyro_adapter import calling_mcmc_progress_bar
from numpyro_extras.shell.validation import check_init_strategy

__all__ = ["AiSampler", "AiState", "ai_init", "ai_step", "check_params_match"]


class AiState(NamedTuple):
    """The state of one Ai-sampler chain under NumPyro's ``MCMC``: the core's
    :class:`~numpyro_extras.involutive.chains.InvolutiveState` (``position``,
    ``potential_energy``) and what the kernel keeps beside it.

    :param z: the current draw (dict of unconstrained site values for a model, the flat position
        for a ``potential_fn``): the ``sample_field``.
    :param position: the flat unconstrained position.
    :param potential_energy: ``U(position)``.
    :param accept_prob: the last transition's acceptance probability.
    :param mean_accept_prob: the running mean of ``accept_prob`` (restarted after warm-up).
    :param i: transitions so far.
    :param build: the :class:`~numpyro_extras.shell.compiled_chain.BuildTag` of the kernel build.
    :param rng_key: the chain's key.

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.AiSampler(model, params=params), num_warmup=200, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        mcmc.last_state.mean_accept_prob  # the sampling phase's acceptance
    """

    z: Any
    position: jax.Array
    potential_energy: jax.Array
    accept_prob: jax.Array
    mean_accept_prob: jax.Array
    i: jax.Array
    build: Any
    rng_key: jax.Array

    __getattr__, __getitem__ = field_lookup("An Ai-sampler state", lambda: AiState._fields[:6])


def _identity(position):
    return position


def ai_init(
    position, potential_fn: Callable, rng_key, tag: BuildTag | None = None, unravel_fn=_identity
) -> AiState:
    """The state of a chain at ``position``: the core's
    :func:`~numpyro_extras.involutive.chains.init` with the chain's key and build tag.

    :param position: flat unconstrained start.
    :param potential_fn: ``x -> U(x)``.
    :param rng_key: the chain's key.
    :param tag: the kernel build's tag.
    :param unravel_fn: flat ``x`` -> the sample field (site values, or ``x`` itself).
    :return: :class:`AiState`.

    **Example:**

    .. code-block:: python

        state = ai_init(jnp.zeros(2), potential_fn, jax.random.PRNGKey(0))
    """
    core = core_init(position, potential_fn)
    zero = jnp.zeros((), jnp.result_type(core.potential_energy))
    return AiState(
        unravel_fn(position),
        core.position,
        core.potential_energy,
        zero,
        zero,
        jnp.zeros((), jnp.int32),
        tag,
        rng_key,
    )


def ai_step(
    state: AiState,
    proposal: InvolutiveProposal,
    potential_fn: Callable,
    num_warmup=0,
    unravel_fn=_identity,
) -> AiState:
    """One transition of the core's
    :func:`~numpyro_extras.involutive.chains.build_kernel` on the chain's own key, with the
    running acceptance and the sample field updated.

    :param AiState state: the current state.
    :param InvolutiveProposal proposal: the frozen proposal ``M``.
    :param potential_fn: ``x -> U(x)`` (the model's potential for this step's arguments).
    :param int num_warmup: warm-up length (``mean_accept_prob`` restarts after it).
    :param unravel_fn: flat ``x`` -> the sample field.
    :return: the next :class:`AiState`.

    **Example:**

    .. code-block:: python

        state = ai_step(state, proposal, potential_fn)
    """
    rng_key, step_key = jax.random.split(state.rng_key)
    core, info = build_kernel(proposal, potential_fn)(
        step_key, InvolutiveState(state.position, state.potential_energy)
    )
    iteration = state.i + 1
    return AiState(
        unravel_fn(core.position),
        core.position,
        core.potential_energy,
        info.accept_prob,
        running_accept_mean(state.mean_accept_prob, info.accept_prob, iteration, num_warmup),
        iteration,
        state.build,
        rng_key,
    )


def check_params_match(params: InvolutiveProposal, flat_model: FlatModel, has_model=True):
    """Raise a clear error when ``params`` were not trained for ``flat_model``: other latent
    sites, other unconstrained shapes or another dimension.

    :param InvolutiveProposal params: the trained involution.
    :param FlatModel flat_model: the model's flat potential.
    :param bool has_model: whether the kernel reads a model (then the sites must agree).
    """
    check_trained_for(
        params.sites,
        params.dimension,
        flat_model,
        has_model,
        "The involution",
        "nx.train_ai_sampler",
    )


class AiSampler(ExtrasKernel):
    """The Ai-sampler (Egorov, Valperga and Gavves, "Ai-Sampler: Adversarial Learning of Markov
    kernels with involutive maps"): Metropolis-Hastings with a learned involutive proposal.

    Each step draws ``v ~ N(0, I)``, maps ``(x, v)`` to ``M(x, v)`` with ``M = g^-1 o R o g``
    (eq. 6; ``g`` a flow of Henon layers, ``R`` the momentum flip) and accepts with probability
    ``min(1, exp(H(x, v) - H(M(x, v))))``. ``M`` is an involution with unit Jacobian for any
    parameters, so the chain leaves the posterior exactly invariant whatever the training did;
    a step evaluates the potential once and needs no gradient, and a well trained ``M`` jumps
    between modes.

    **Training.** Without ``params`` the first ``init`` trains the involution with
    :func:`~numpyro_extras.train_ai_sampler` (pilot NUTS chains from dispersed starts, then
    bootstrap epochs on the kernel's own draws; fixed seed ``fit_seed``; the calling ``MCMC``'s
    progress bar), once per set of model arguments and for every chain method. Warm-up is then
    burn-in only: nothing adapts, so the kernel is exact from the first step.

    As a block of :class:`numpyro.infer.Gibbs` the kernel stays exact: it evaluates the block's
    conditional at every step, with the involution trained on the conditional at ``init``.

    :param model: a NumPyro model with continuous latent sites.
    :param potential_fn: alternatively, ``U(x)`` on flat 1-D points (needs ``params``).
    :param InvolutiveProposal params: a trained involution
        (:func:`~numpyro_extras.train_ai_sampler`, :func:`~numpyro_extras.load_involution`);
        checked against the model's sites and shapes.
    :param dict train_kwargs: keyword arguments of :func:`~numpyro_extras.train_ai_sampler`
        (``epochs``, ``init_samples``, ``num_layers``, ...).
    :param int fit_seed: seed of the training.
    :param init_strategy: NumPyro init strategy for the chains' starting points.

    **Example:**

    .. code-block:: python

        kernel = nx.AiSampler(model, train_kwargs=dict(epochs=5))  # trains in init, then frozen
        mcmc = MCMC(kernel, num_warmup=200, num_samples=1000, num_chains=2)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        kernel.params.history.accept_rates  # the training's bootstrap acceptance
    """

    def __init__(
        self,
        model=None,
        potential_fn=None,
        *,
        params=None,
        train_kwargs=None,
        fit_seed=0,
        init_strategy=init_to_uniform,
    ):
        super().__init__(model, potential_fn)
        if potential_fn is not None and params is None:
            raise ValueError(
                "With `potential_fn`, give `params=` (train them with nx.train_ai_sampler(key, "
                "potential_fn=..., initial_position=...)): a kernel cannot train from a "
                "potential without a starting point."
            )
        if params is not None and not isinstance(params, InvolutiveProposal):
            raise TypeError(
                f"params must be an InvolutiveProposal (from nx.train_ai_sampler or "
                f"nx.load_involution), got {type(params).__name__}."
            )
        self._user_params = params
        self._params = params
        self._train_kwargs = check_train_kwargs(
            dict(train_kwargs or {}), "AiSampler(train_kwargs=...)"
        )
        self._fit_seed = fit_seed
        self._init_strategy = check_init_strategy(init_strategy)
        self._flat_model: FlatModel | None = None
        self._prepared_arguments = ((), {})

    @property
    def params(self) -> InvolutiveProposal | None:
        """The involution in use (trained at the first ``init`` when none was given)."""
        return self._params

    @property
    def flat_model(self) -> FlatModel | None:
        return self._flat_model

    @property
    def default_fields(self):
        return ("z", "accept_prob")

    def _constrain_fn(self):
        return None if self._flat_model is None else self._flat_model.constrain_fn

    def _forget_target(self):
        self._flat_model = None
        self._params = self._user_params

    def _prepare_target(self, model_args, model_kwargs):
        key = jax.random.PRNGKey(self._fit_seed)
        if self._model is None:
            self._flat_model = flat_model_from_potential(self._potential_fn, self._user_params.loc)
        else:
            self._flat_model = flatten_model(
                key,
                self._model,
                model_args,
                model_kwargs,
                init_strategy=self._init_strategy,
                kernel_name="AiSampler",
            )
        self._prepared_arguments = (model_args, model_kwargs)
        if self._user_params is None:
            train_kwargs = {"progress_bar": calling_mcmc_progress_bar(), **self._train_kwargs}
            self._params = train_ai_sampler(
                key,
                self._model,
                model_args,
                model_kwargs,
                flat_model=self._flat_model,
                **train_kwargs,
            )
        else:
            check_params_match(self._user_params, self._flat_model, self._model is not None)
            self._params = self._user_params
        dtype = self._flat_model.initial_position.dtype
        mixture = self._params.mixture
        self._params = self._params.replace(
            loc=jnp.asarray(self._params.loc, dtype),
            scale=jnp.asarray(self._params.scale, dtype),
            starts=jnp.asarray(self._params.starts, dtype),
            mixture=None
            if mixture is None
            else jax.tree.map(lambda leaf: jnp.asarray(leaf, dtype), mixture),
        )

    def _potential_for(self):
        """``(model_args, model_kwargs) -> U``: the model's potential for a step's arguments
        (a Gibbs block's conditioning values change at every step)."""
        potential_fn = self._flat_model.potential_fn
        if self._model is None:
            return lambda model_args, model_kwargs: potential_fn
        model_potential_for = flat_potential_for(self._model, self._flat_model.unravel_fn)
        prepared = arguments_fingerprint(*self._prepared_arguments)

        def potential_for(model_args, model_kwargs):
            # The flat model's potential, recorded once, serves the arguments it was built for;
            # a Gibbs block's new conditioning values and traced arguments run the model.
            fingerprint = arguments_fingerprint(model_args, model_kwargs)
            if fingerprint is not None and fingerprint == prepared:
                return potential_fn
            return model_potential_for(model_args, model_kwargs)

        return potential_for

    def _build(self, num_warmup, tag):
        params = self._params
        potential_for = self._potential_for()
        unravel_fn = self._flat_model.unravel_fn
        model_args, model_kwargs = self._prepared_arguments

        def init_one(position, rng_key, conditioning):
            kwargs = with_conditioning(model_kwargs, conditioning) if conditioning else model_kwargs
            potential_fn = potential_for(model_args, kwargs)
            return ai_init(position, potential_fn, rng_key, tag, unravel_fn)

        def step_one(state, model_args, model_kwargs):
            potential_fn = potential_for(model_args, model_kwargs)
            return ai_step(state, params, potential_fn, num_warmup, unravel_fn)

        def refresh_one(state, model_args, model_kwargs):
            potential_energy = potential_for(model_args, model_kwargs)(state.position)
            return state._replace(potential_energy=potential_energy)

        return init_one, step_one, refresh_one

    def _initial_position(self, rng_key, init_params):
        """One chain's start: ``init_params`` if given, else one of the involution's ``starts``
        (where its training chains ended: the map is learned there), or the model's reference
        point where the density is not finite there."""
        fallback = self._flat_model.initial_position
        if init_params is None:
            starts = self._params.starts
            draw = starts[jax.random.randint(rng_key, (), 0, starts.shape[0])]
            draw = draw.astype(fallback.dtype)
            finite = jnp.isfinite(self._flat_model.potential_fn(draw))
            return jnp.where(finite, draw, fallback)
        position = init_params if self._model is None else ravel_pytree(init_params)[0]
        return jnp.asarray(position, fallback.dtype)

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs):
        positions, chain_keys = self._starting_positions(
            rng_key, init_params, batched, self._initial_position, self._flat_model.dimension
        )
        conditioning = conditioning_values(model_kwargs)
        if batched and conditioning:
            conditioning = jax.tree.map(
                lambda value: jnp.broadcast_to(value, (positions.shape[0],) + jnp.shape(value)),
                conditioning,
            )
        return positions, chain_keys, conditioning

    def _check_initial_state(self, state):
        potential_energy = state.potential_energy
        if not not_jax_tracer(potential_energy):
            return
        bad = np.flatnonzero(~np.isfinite(np.reshape(np.asarray(potential_energy), -1)))
        if bad.size:
            raise ValueError(
                f"The potential energy is not finite at the starting point of chain "
                f"{int(bad[0])}. Check the model's support and data, or give init_params."
            )

    def get_diagnostics_str(self, state):
        return f"acc. prob={float(state.mean_accept_prob):.2f}"
