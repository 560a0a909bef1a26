"""NumPyro kernels for discrete latents: the Automatic Cyclical Sampler and DMALA.

:class:`ACS` moves every discrete latent site of a model jointly with the locally balanced
proposal of the ACS paper (eq. 5) and the exact MH test (eq. 6), at the ``(alpha, beta)``
of a cyclical schedule (eq. 7-8) that it tunes itself before warm-up (Alg. 2-5). With an
``inner_kernel`` (HMC or NUTS) it alternates with it on the continuous sites, Gibbs style.
:class:`DMALA` is the fixed-step special case (``beta = 0.5``).
"""

from __future__ import annotations

from functools import partial

import jax
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.util import not_jax_tracer

from numpyro_extras.discrete.chain import acs_chain, as_site_dict
from numpyro_extras.discrete.proposal import (
    DiscreteVariable,
    decode,
)
from numpyro_extras.discrete.schedule import CyclicalSchedule, check_schedule
from numpyro_extras.discrete.target import (
    GRAD_MODES,
    DiscreteTarget,
    model_target,
    potential_target,
)
from numpyro_extras.discrete.tuning import TuningSettings
from numpyro_extras.shell.kernel import (
    ExtrasKernel,
    conditioning_values,
    hmc_settings,
)
from numpyro_extras.shell.validation import check_count, check_real

__all__ = ["ACS", "DMALA"]


class ACS(ExtrasKernel):
    """The Automatic Cyclical Sampler for discrete latents (Pynadath et al. 2024).

    Every transition proposes new values for ALL discrete coordinates at once from the
    coordinate-wise locally balanced proposal of the paper's eq. 5,
    ``Q^i(v | theta) ∝ exp(beta Delta_i(v) - D(v, theta_i) / (2 alpha))``, where ``Delta_i(v)``
    approximates ``U(theta with theta_i <- v) - U(theta)`` (``U`` = the model's log density,
    the negative of NumPyro's potential energy), and accepts them with the exact MH probability
    of eq. 6, so every transition leaves the posterior invariant. ``(alpha, beta)`` follow a
    cyclical schedule of ``s`` steps: a large step with ``beta`` near 1 opens each cycle (jumps
    between modes), then the step shrinks along the cosine of eq. 7 to ``alpha_min`` with
    ``beta = 0.5`` (local moves).

    **Tuning.** Unless ``schedule`` is given, ``init`` runs the paper's tuner (Alg. 2-5;
    :func:`~numpyro_extras.discrete.tune_schedule`) on ``num_tuning_chains`` copies per chain
    (acceptance is averaged over them, as in the paper's batched chains): burn-in, then
    ``alpha_min`` with acceptance ``target_accept_prob``, ``alpha_max`` by the same search
    from above (for ordinal variables the step with the largest expected squared jump instead,
    with ``beta_max = 0.5``: :func:`~numpyro_extras.discrete.resolve_settings`), then ``beta``
    per step of the cycle (eq. 8). The schedule is then frozen: warm-up and kept draws run with it
    (a frozen schedule keeps every transition invariant; an adapting one would not). The tuner
    costs ``num_tuning_chains x tuning.num_steps`` evaluations per chain, at most
    ``num_tuning_chains x tuning_cost(settings)`` (8 x about 770 by default; its searches stop
    once they reach the target, so it is often half that: small against a run).
    ``mcmc.last_state.tuning`` holds the schedule, ``alpha_max``, ``alpha_min``, the tuner's
    acceptance at both ends and ``num_steps``, per chain.

    **Gradients.** Bernoulli values are passed to the model as floats ``{0., 1.}`` and one-hot
    values as float vectors, so a model that uses them arithmetically (``z * a + (1 - z) * b``,
    ``onehot @ means``) is differentiable and one gradient gives all differences (one
    evaluation per step). Categorical sites (integer classes, which ``log_prob`` and models
    index with) get exact differences, ``d (K - 1)`` model evaluations per step, vectorised:
    fine for small sites, costly for large ones; write them with
    :class:`~numpyro_extras.discrete.OneHotCategorical` to get gradients. ``grad_mode`` sets the
    rule (:data:`GRAD_MODES`); with ``"auto"`` a Bernoulli or one-hot site gets exact
    differences when the model cannot be differentiated in it (tracing fails, e.g. it indexes
    with the value) or when, at a few prior draws, the first-order differences are off by more
    than half a nat (median) beyond an error common to every move (which only shifts ``alpha``):
    a value read through ``jnp.where`` or a comparison (zero gradient), or very non-linearly (a
    spike-and-slab scale). Energies linear in each coordinate (Ising, Boltzmann machines) keep
    the gradient, for which it is exact, and so do Gaussian likelihoods of such values (a
    common offset).

    **Continuous sites.** With ``inner_kernel`` (``NUTS``/``HMC``, class or instance), each
    transition is one cycle of the schedule's ACS moves of the discrete sites given the
    continuous ones (``discrete_steps``), then one inner kernel move of the continuous sites
    given the discrete ones (adapted during warm-up). Before tuning, ``init`` runs
    ``num_tuning_sweeps`` such transitions at the untuned cycle of the tuner's burn-in, so that the
    tuner runs where the continuous sites have moved to, not at their prior draw, and averages over
    32 copies by default (the discrete conditional given one continuous value often has an
    acceptance curve flat enough for 8 copies' noise to stop the ``alpha_max`` search early).
    As a block of NumPyro's :class:`~numpyro.infer.gibbs.Gibbs` (the
    continuous sites in another block) a transition is also one cycle, and the tuner runs at
    the initial values of the other blocks' sites.

    :param model: a NumPyro model with Bernoulli, Categorical or one-hot categorical latents.
    :param potential_fn: alternatively, ``values -> -log density`` (NumPyro's potential
        convention) of a pure-JAX target over ``variables``.
    :param variables: with ``potential_fn``: a :class:`~numpyro_extras.discrete.DiscreteVariable`
        (``potential_fn`` then receives one array) or a dict of them (it receives a dict).
    :param inner_kernel: ``NUTS`` or ``HMC`` (class or instance) for the continuous sites.
    :param schedule: ``(step_sizes, balancing)`` arrays of one cycle; skips the tuner.
    :param int steps_per_cycle: ``s`` (paper 20).
    :param float target_accept_prob: ``rho*`` of the tuner (paper 0.5).
    :param float beta_max: balancing exponent of the first step of a cycle; ``None``:
        :func:`~numpyro_extras.discrete.default_beta_max` (the paper's 0.95, 0.5 for ordinal
        variables).
    :param float beta_min: balancing exponent of the last steps (0.5).
    :param float alpha_ceil: start of the ``alpha_max`` search; ``None``:
        :func:`~numpyro_extras.discrete.default_alpha_ceil` (the paper's 5, more for ordinal
        variables).
    :param float alpha_floor: start of the ``alpha_min`` search (paper 0.05).
    :param dict tuning_settings: any other :class:`~numpyro_extras.discrete.TuningSettings`
        field (``budget``, ``zeta``, ``test_steps``, ...).
    :param int num_tuning_chains: copies per chain the tuner averages over (more copies: less
        noisy acceptance estimates, at ``tuning_cost`` evaluations each); ``None``: 8, or 32 with
        an inner kernel.
    :param int num_tuning_sweeps: with an inner kernel, transitions (a cycle of discrete moves
        and an inner kernel move, adapted over them) that ``init`` runs before tuning, from the
        prior draw; their draws are discarded.
    :param str grad_mode: see :data:`GRAD_MODES`.
    :param int discrete_steps: ACS moves of the discrete sites per transition, at consecutive
        positions of the schedule. ``None``: one whole cycle (``steps_per_cycle``) when the model
        also has continuous sites (an inner kernel, or a block of NumPyro's ``Gibbs``), so that
        every move of the continuous sites is matched by large and small discrete moves; else 1.
    :param inner_kwargs: settings of an inner kernel class (``step_size``, ``dense_mass``, ...).

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.ACS(nx.rbm_model), num_warmup=200, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), machine)
        mcmc.last_state.tuning.schedule  # the tuned (alpha_k, beta_k)


        def mixture_model(data):
            # a discrete label per point beside a continuous mean: ACS moves z, NUTS moves mu
            mu = numpyro.sample("mu", dist.Normal(0.0, 3.0))
            with numpyro.plate("data", len(data)):
                z = numpyro.sample("z", dist.Bernoulli(0.5))
                numpyro.sample("obs", dist.Normal((2.0 * z - 1.0) * mu, 1.0), obs=data)


        mcmc = MCMC(nx.ACS(mixture_model, inner_kernel=NUTS), num_warmup=200, num_samples=500)
        mcmc.run(jax.random.PRNGKey(0), jnp.array([-2.1, 1.8, 2.3, -1.9]))
    """

    sample_field = "z"

    def __init__(
        self,
        model=None,
        *,
        potential_fn=None,
        variables=None,
        inner_kernel=None,
        schedule=None,
        steps_per_cycle=20,
        target_accept_prob=0.5,
        beta_max=None,
        beta_min=0.5,
        alpha_ceil=None,
        alpha_floor=0.05,
        tuning_settings=None,
        num_tuning_chains=None,
        grad_mode="auto",
        discrete_steps=None,
        num_tuning_sweeps=50,
        **inner_kwargs,
    ):
        super().__init__(model, potential_fn)
        if potential_fn is not None:
            if variables is None:
                raise ValueError("With `potential_fn`, `variables` (DiscreteVariable) is needed.")
            if inner_kernel is not None:
                raise ValueError("`inner_kernel` needs a model with continuous sites.")
        elif variables is not None:
            raise ValueError("`variables` goes with `potential_fn`; a model has its own sites.")
        if grad_mode not in GRAD_MODES:
            raise ValueError(f"grad_mode must be one of {GRAD_MODES}, got {grad_mode!r}.")
        self._variables = variables
        self._grad_mode = grad_mode
        self._inner = _inner_settings(inner_kernel, model, inner_kwargs)
        self._schedule = None if schedule is None else check_schedule(schedule)
        self._settings = TuningSettings(
            steps_per_cycle=check_count("steps_per_cycle", steps_per_cycle),
            target_accept_prob=check_real(
                "target_accept_prob", target_accept_prob, "a probability in (0, 1)", low=0, high=1
            ),
            beta_max=None if beta_max is None else check_real("beta_max", beta_max),
            beta_min=check_real("beta_min", beta_min),
            alpha_ceil=None if alpha_ceil is None else check_real("alpha_ceil", alpha_ceil),
            alpha_floor=check_real("alpha_floor", alpha_floor),
            **(tuning_settings or {}),
        )
        if self._schedule is None:
            self._settings.validate()
        self._num_tuning_chains = _num_tuning_chains(num_tuning_chains, inner_kernel is not None)
        self._discrete_steps = (
            None if discrete_steps is None else check_count("discrete_steps", discrete_steps)
        )
        self._num_tuning_sweeps = int(num_tuning_sweeps)
        if self._num_tuning_sweeps < 0:
            raise ValueError(f"num_tuning_sweeps must be >= 0, got {num_tuning_sweeps}.")
        self._target: DiscreteTarget | None = None

    @property
    def variables(self) -> dict | None:
        """The discrete variables the kernel moves (known after ``init``)."""
        return None if self._target is None else self._target.variables

    @property
    def schedule(self) -> CyclicalSchedule | None:
        """The fixed cyclical schedule given by the user (``None``: tuned at ``init``)."""
        return self._schedule

    @property
    def tuning_settings(self) -> TuningSettings:
        """The tuner's constants."""
        return self._settings

    @property
    def num_tuning_chains(self) -> int:
        """Copies per chain the tuner averages over."""
        return self._num_tuning_chains

    @property
    def discrete_steps(self) -> int | None:
        """ACS moves per transition as given (``None``: the default)."""
        return self._discrete_steps

    def moves_per_transition(self, mixed: bool) -> int:
        """ACS moves of the discrete sites per transition: ``discrete_steps`` if given, else one
        whole cycle of the schedule beside continuous sites (``mixed``: moved by an inner
        kernel, or by another block of a Gibbs kernel), from the large exploring steps to the
        small refining ones, and one step alone.

        :param bool mixed: whether continuous sites move between the discrete moves.
        :return: the number of moves.
        """
        return _moves_per_transition(self._discrete_steps, self._schedule, self._settings, mixed)

    @property
    def has_inner_kernel(self) -> bool:
        """Whether an HMC/NUTS move of continuous sites was asked for."""
        return self._inner is not None

    @property
    def inner_settings(self) -> tuple[str, dict] | None:
        """``(algo, settings)`` of the HMC/NUTS move of continuous sites (``None`` without)."""
        return self._inner

    @property
    def num_tuning_sweeps(self) -> int:
        """Sweeps ``init`` runs before tuning, with an inner kernel."""
        return self._num_tuning_sweeps

    def discrete_target(self, model_args=(), model_kwargs=None) -> DiscreteTarget:
        """The model (or potential) read into the sampler's terms for these arguments: the
        discrete variables with the way each gets its differences (``grad_mode``), the model's
        log density and prior/likelihood split, prior draws and the maps back to site values.
        Built once per set of model arguments and shared with ``init``, so that a kernel built
        on this one (replica exchange over ACS moves) reads the model the same way.

        :param tuple model_args: positional arguments of the model.
        :param dict model_kwargs: keyword arguments of the model.
        :return: :class:`DiscreteTarget`.

        **Example:**

        .. code-block:: python

            target = nx.ACS(model).discrete_target((data,))
            target.variables, target.split.log_likelihood_fn
        """
        self._prepare(model_args, model_kwargs or {})
        return self._target

    @property
    def default_fields(self):
        # As NUTS collects diverging: the acceptance probability is the move's own diagnostic.
        return ("z", "accept_prob")

    def get_diagnostics_str(self, state):
        return (
            f"acc. prob={float(state.mean_accept_prob):.2f} "
            f"alpha={float(state.alpha):.3g} beta={float(state.beta):.2f}"
        )

    def _constrain_fn(self):
        return None if self._target is None else self._target.constrain_fn

    def get_constrain_fn(self, model_args, model_kwargs):
        if self._target is not None and not self._target.continuous_sites:
            # Discrete values are already constrained: no replay of the model per Gibbs sweep.
            return as_site_dict
        return self.postprocess_fn(model_args, model_kwargs)

    # --- building the target ----------------------------------------------------------------------

    def _prepare_target(self, model_args, model_kwargs):
        if self._model is None:
            self._target = potential_target(self._potential_fn, self._variables, self._grad_mode)
        else:
            self._target = model_target(
                self._model, model_args, model_kwargs, self._grad_mode, self._inner is not None
            )

    def _forget_target(self):
        self._target = None

    # --- the chain ------------------------------------------------------------------------------

    def _build(self, num_warmup, tag):
        return _chain_functions(self, self._target, num_warmup, tag)

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs):
        single = self._model is None and isinstance(self._variables, DiscreteVariable)
        indices, x = _initial_values(self._target, init_params, batched, single)
        return rng_key, indices, x, conditioning_values(model_kwargs)

    def _check_initial_state(self, state):
        log_density = state.chain.log_density
        if not not_jax_tracer(log_density):
            return
        bad = np.flatnonzero(~np.isfinite(np.reshape(np.asarray(log_density), -1)))
        if bad.size:
            raise ValueError(
                f"The log density is not finite at the starting point of chain {int(bad[0])} "
                "(after tuning). Check the model's support and data, or give init_params."
            )


class DMALA(ACS):
    """Discrete Metropolis-adjusted Langevin (Zhang et al. 2022): ACS at one fixed step size.

    The proposal of ACS paper eq. 5 with ``beta = 0.5`` and a constant ``alpha``, MH-corrected,
    no tuning; the baseline ACS is compared with. Same arguments and state as :class:`ACS`.
    Categorical and one-hot sites use the Hamming distance (the ACS reference code's
    convention): their ``alpha`` is twice the DMALA paper's for the same proposal.

    :param model: a NumPyro model with discrete latents (or use ``potential_fn``).
    :param float step_size: ``alpha`` (DMALA paper RBM setting: 0.2).

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.DMALA(nx.rbm_model, step_size=0.2), num_warmup=100, num_samples=5000)
    """

    def __init__(self, model=None, step_size=0.2, **kwargs):
        if "schedule" in kwargs:
            raise ValueError("DMALA has a fixed step size; use ACS for a schedule.")
        step_size = check_real("step_size", step_size, "a positive finite number", low=0.0)
        super().__init__(model, schedule=([step_size], [0.5]), **kwargs)


def _inner_settings(inner_kernel, model, inner_kwargs: dict):
    """The settings of the inner HMC/NUTS move of the continuous sites
    (:func:`~numpyro_extras.shell.kernel.hmc_settings`).

    :param inner_kernel: ``NUTS`` or ``HMC`` (class or instance), or ``None``.
    :param model: the model the kernel is built on.
    :param dict inner_kwargs: settings of an inner kernel class.
    :return: ``(algo, settings)``, or ``None`` without an inner kernel.
    :raises ValueError: for settings given without an inner kernel.
    """
    if inner_kernel is None:
        if inner_kwargs:
            raise ValueError(f"Unknown arguments {sorted(inner_kwargs)} (no inner kernel).")
        return None
    return hmc_settings(inner_kernel, owner_model=model, **inner_kwargs)


def _num_tuning_chains(num_tuning_chains, has_inner_kernel: bool) -> int:
    """The copies per chain the tuner averages over: 8, or 32 with an inner kernel, unless given.

    Beside continuous sites the tuner's estimates come from one conditional, often with a flat
    acceptance curve at ``beta_max``, where 8 copies let noise end the ``alpha_max`` search
    early (at a far too large step).

    :param int num_tuning_chains: as given to :class:`ACS`; ``None``: the default.
    :param bool has_inner_kernel: whether an inner kernel moves continuous sites.
    :return: int.
    :raises ValueError: for fewer than one copy.
    """
    if num_tuning_chains is None:
        num_tuning_chains = 32 if has_inner_kernel else 8
    if int(num_tuning_chains) < 1:
        raise ValueError(f"num_tuning_chains must be >= 1, got {num_tuning_chains}.")
    return int(num_tuning_chains)


def _moves_per_transition(discrete_steps, schedule, settings, mixed: bool) -> int:
    """ACS moves of the discrete sites per transition (:meth:`ACS.moves_per_transition`).

    :param int discrete_steps: the moves asked for, or ``None`` for the default.
    :param CyclicalSchedule schedule: the fixed schedule, or ``None`` (tuned).
    :param TuningSettings settings: the tuner's constants (their ``steps_per_cycle``).
    :param bool mixed: whether continuous sites move between the discrete moves.
    :return: ``discrete_steps`` if given, else the length of a cycle when ``mixed``, else 1.
    """
    if discrete_steps is not None:
        return discrete_steps
    if not mixed:
        return 1
    return settings.steps_per_cycle if schedule is None else len(schedule.step_sizes)


def _chain_functions(kernel: ACS, target: DiscreteTarget, num_warmup, tag):
    """The pure functions of one chain of ``kernel`` on ``target`` (:func:`acs_chain`), from
    the kernel's public settings: the tuner's copies and sweeps only when it tunes, the sweeps
    only with an inner kernel.

    :param ACS kernel: the kernel (its schedule, tuning settings and inner move).
    :param DiscreteTarget target: the model (or potential) read for the current arguments.
    :param int num_warmup: warm-up transitions.
    :param BuildTag tag: the kernel build's tag.
    :return: ``(init_one, step_one, refresh_one)``.
    """
    schedule, inner = kernel.schedule, kernel.inner_settings
    return acs_chain(
        target,
        kernel.tuning_settings,
        schedule=schedule,
        num_copies=1 if schedule is not None else kernel.num_tuning_chains,
        # The discrete conditional, and so the schedule the tuner finds, can depend strongly
        # on the continuous sites: with an inner kernel they first leave their prior draw.
        num_sweeps=kernel.num_tuning_sweeps if inner is not None and schedule is None else 0,
        inner=inner,
        discrete_steps=kernel.moves_per_transition(inner is not None or target.conditioned),
        num_warmup=num_warmup,
        tag=tag,
        model_sites=kernel.model is not None,
    )


def _initial_values(target: DiscreteTarget, init_params, batched: bool, single: bool):
    """``init_params`` (site values; continuous ones unconstrained) as the chain's starting
    indices and flat continuous sites.

    :param DiscreteTarget target: the model (or potential) read for the current arguments.
    :param init_params: dict of site values (a potential's single variable: its array), or
        ``None``.
    :param bool batched: whether ``init_params`` has a leading axis of chains.
    :param bool single: whether the potential has one variable, given as an array.
    :return: ``(indices, x)``; ``(None, None)`` without ``init_params``, ``x = None`` without
        continuous sites.
    """
    if init_params is None:
        return None, None
    values = {"x": init_params} if single else init_params
    missing = [name for name in target.variables if name not in values]
    if missing:
        raise ValueError(f"init_params lack the discrete sites {missing}.")
    decode_fn = partial(decode, target.variables)
    indices = jax.vmap(decode_fn)(values) if batched else decode_fn(values)
    x = None
    if target.continuous_sites:
        continuous = {name: values[name] for name in target.continuous_sites}
        ravel = lambda tree: ravel_pytree(tree)[0]  # noqa: E731
        x = jax.vmap(ravel)(continuous) if batched else ravel(continuous)
    return indices, x
