"""NumPyro kernels for discrete latents: the Automatic Cyclical Sampler and DMALA.

:class:`ACS` moves every discrete latent site of a model jointly with the locally balanced
proposal of the ACS paper (eq. 5) and the exact MH test (eq. 6), at the ``(alpha, beta)``
of a cyclical schedule (eq. 7-8) that it tunes itself before warm-up (Alg. 2-5). With an
``inner_kernel`` (HMC or NUTS) it alternates with it on the continuous sites, Gibbs style.
:class:`DMALA` is the fixed-step special case (``beta = 0.5``).
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.gibbs import with_conditioning
from numpyro.infer.hmc import hmc
from numpyro.util import not_jax_tracer

from numpyro_extras.compilation import quick_jit
from numpyro_extras.compiled_chain import BuildTag
from numpyro_extras.discrete.proposal import (
    KINDS,
    ChainState,
    DiscreteVariable,
    decode,
    init_chain,
    local_differences_fn,
    scheduled_steps,
)
from numpyro_extras.discrete.schedule import CyclicalSchedule, check_schedule
from numpyro_extras.discrete.tuning import (
    TuningResult,
    TuningSettings,
    fixed_tuning,
    resolve_settings,
    tune_schedule,
    untuned_schedule,
)
from numpyro_extras.kernel import (
    ExtrasKernel,
    conditioning_values,
    hmc_settings,
    without_conditioning,
)
from numpyro_extras.metropolis import running_accept_mean
from numpyro_extras.potential import discrete_latent_model
from numpyro_extras.validation import check_count, check_real

__all__ = ["ACS", "ACSState", "DMALA", "DiscreteTarget", "GRAD_MODES"]

# How the proposal gets the change of U per coordinate:
#   auto      gradients for Bernoulli and one-hot sites when the model can be differentiated in
#             them (checked once by tracing) and the first-order differences match the exact
#             ones at a few prior draws up to an offset common to every move; exact differences
#             otherwise and for Categorical
#   gradient  gradients for Bernoulli and one-hot sites (an error if the model cannot be
#             differentiated in them); Categorical sites still use exact differences
#   exact     exact differences everywhere: d (K - 1) extra evaluations of the model per step
GRAD_MODES = ("auto", "gradient", "exact")
# What tracing a model with float values for a discrete site raises when the model reads the
# value as an integer (an index, a count, a Python int). Any other error is the model's own and
# propagates; one of these raised whatever the dtype is raised again by the exact differences.
NOT_DIFFERENTIABLE_ERRORS = (TypeError, ValueError, IndexError)


class ACSState(NamedTuple):
    """State of an ACS / DMALA chain.

    :param z: the sample field: dict of the discrete sites' values as the model samples them
        (ints for Bernoulli and Categorical, one-hot vectors for one-hot sites) and, with an
        inner kernel, the continuous sites' unconstrained values; for a ``potential_fn``, the
        variables' values.
    :param chain: the discrete core state (indices, cached ``U`` and differences).
    :param tuning: the frozen schedule and what the tuner found (``alpha_max``, ``alpha_min``,
        its acceptance at both ends; NaN acceptances for a schedule given by the user).
    :param iteration: transitions so far, warm-up included.
    :param alpha: the step size of the last transition.
    :param beta: its balancing exponent.
    :param accept_prob: its MH acceptance probability.
    :param mean_accept_prob: running mean of ``accept_prob``, restarted when warm-up ends.
    :param inner_state: the inner kernel's HMC state on the flat continuous sites (``None``
        without an inner kernel).
    :param build: the :class:`~numpyro_extras.compiled_chain.BuildTag` of the kernel build.
    :param rng_key: random key.

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.ACS(nx.rbm_model), num_warmup=200, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), nx.random_rbm(jax.random.PRNGKey(1), 10, 20))
        mcmc.last_state.tuning, mcmc.last_state.mean_accept_prob
    """

    z: Any
    chain: ChainState
    tuning: TuningResult
    iteration: jax.Array
    alpha: jax.Array
    beta: jax.Array
    accept_prob: jax.Array
    mean_accept_prob: jax.Array
    inner_state: Any
    build: BuildTag
    rng_key: jax.Array

    @property
    def potential_energy(self):
        """``-log p`` of the model (or the potential) at ``z``, as NumPyro's HMC states carry
        it, so that ``extra_fields=("potential_energy",)`` reads it. With an inner kernel the
        continuous sites moved last, and its state holds the joint potential at the draw."""
        if self.inner_state is not None:
            return self.inner_state.potential_energy
        return -self.chain.log_density


class DiscreteTarget(NamedTuple):
    """What the kernel needs of a model or a potential, built once per set of model arguments
    (:meth:`ACS.discrete_target`)."""

    variables: dict
    log_density_fn: Any  # (x, values) -> U at the model arguments it was prepared for
    log_density_for: Any  # (model_args, model_kwargs) -> log_density_fn for other arguments
    sample_initial_fn: Any  # (key, n) -> (x (n, dim), indices dict (n, ...))
    site_values_fn: Any  # indices -> values in the model's / user's representation
    continuous_unravel_fn: Any  # flat x -> dict of unconstrained continuous values
    constrain_fn: Any  # z -> constrained values
    dimension: int
    continuous_sites: tuple = ()
    model_arguments: tuple = ((), {})  # the (model_args, model_kwargs) it was prepared for
    conditioned: bool = False  # a block of NumPyro's Gibbs, conditioned on other sites
    split: Any = None  # the model's prior/likelihood split (SplitModel; None for a potential)


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
        self._inner = (
            None
            if inner_kernel is None
            else hmc_settings(inner_kernel, owner_model=model, **inner_kwargs)
        )
        if inner_kernel is None and inner_kwargs:
            raise ValueError(f"Unknown arguments {sorted(inner_kwargs)} (no inner kernel).")
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
        if num_tuning_chains is None:
            # Beside continuous sites the tuner's estimates come from one conditional, often
            # with a flat acceptance curve at beta_max, where 8 copies let noise end the
            # alpha_max search early (at a far too large step).
            num_tuning_chains = 8 if inner_kernel is None else 32
        if int(num_tuning_chains) < 1:
            raise ValueError(f"num_tuning_chains must be >= 1, got {num_tuning_chains}.")
        self._num_tuning_chains = int(num_tuning_chains)
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
        if self._discrete_steps is not None:
            return self._discrete_steps
        if not mixed:
            return 1
        schedule = self._schedule
        return self._settings.steps_per_cycle if schedule is None else len(schedule.step_sizes)

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
            return _as_dict
        return self.postprocess_fn(model_args, model_kwargs)

    # --- building the target ----------------------------------------------------------------------

    def _prepare_target(self, model_args, model_kwargs):
        if self._model is None:
            self._target = self._potential_target()
        else:
            self._target = self._model_target(model_args, model_kwargs)

    def _forget_target(self):
        self._target = None

    def _potential_target(self):
        single = isinstance(self._variables, DiscreteVariable)
        variables = {"x": self._variables} if single else dict(self._variables)
        for name, variable in variables.items():
            if variable.kind not in KINDS:
                raise ValueError(f"Variable {name!r}: kind must be one of {KINDS}.")
            if variable.kind == "binary" and variable.num_values != 2:
                raise ValueError(f"Variable {name!r} is binary but has {variable.num_values}.")
            if variable.kind == "categorical" or self._grad_mode == "exact":
                variables[name] = variable._replace(gradient=False)
        potential_fn = self._potential_fn

        def log_density_fn(x, values):
            return -potential_fn(values["x"] if single else values)

        def log_density_for(model_args, model_kwargs):
            return log_density_fn

        def sample_initial_fn(key, num):
            keys = jax.random.split(key, len(variables))
            indices = {
                name: jax.random.randint(k, (num,) + tuple(v.shape), 0, v.num_values)
                for (name, v), k in zip(variables.items(), keys, strict=True)
            }
            return jnp.zeros((num, 0)), indices

        def site_values_fn(indices):
            values = {}
            for name, variable in variables.items():
                if variable.kind == "one_hot":
                    values[name] = jax.nn.one_hot(indices[name], variable.num_values)
                else:
                    values[name] = indices[name]
            return values["x"] if single else values

        return DiscreteTarget(
            variables,
            log_density_fn,
            log_density_for,
            sample_initial_fn,
            site_values_fn,
            lambda x: {},
            lambda z: z,
            0,
        )

    def _model_target(self, model_args, model_kwargs):
        latent = discrete_latent_model(
            jax.random.PRNGKey(0), self._model, model_args, model_kwargs, kernel_name="ACS"
        )
        split = latent.split
        if split.continuous_sites and self._inner is None:
            raise ValueError(
                f"The model has continuous latent sites {list(split.continuous_sites)}; ACS "
                "moves discrete sites only. Pass inner_kernel=NUTS (or HMC) to sample them too."
            )
        if not split.continuous_sites and self._inner is not None:
            raise ValueError(
                "inner_kernel moves continuous latent sites, but the model has none (its latent "
                "sites are all discrete): use nx.ACS(model) without inner_kernel."
            )
        layouts = {layout.name: layout for layout in latent.layouts}
        variables = {}
        x_prototype = jnp.zeros(split.dimension)
        for name, layout in layouts.items():
            use_gradient = layout.kind != "categorical" and self._grad_mode != "exact"
            if use_gradient and self._grad_mode == "auto":
                use_gradient = _first_order_is_faithful(latent, layout)
            elif use_gradient and not self._differentiable(latent, layouts, name, x_prototype):
                raise ValueError(
                    f"grad_mode='gradient', but the model cannot be differentiated in the "
                    f"discrete site {name!r} (it probably indexes with its value); use "
                    "grad_mode='auto' or 'exact'."
                )
            dtype = None if use_gradient else layout.dtype
            variables[name] = DiscreteVariable(
                layout.shape, layout.num_values, layout.kind, use_gradient, dtype
            )

        def site_values_fn(indices):
            values = {}
            for name, layout in layouts.items():
                if layout.kind == "one_hot":
                    values[name] = jax.nn.one_hot(
                        indices[name], layout.num_values, dtype=layout.dtype
                    )
                else:
                    values[name] = indices[name].astype(layout.dtype)
            return values

        def sample_initial_fn(key, num):
            x, discrete = split.sample_prior_fn(key, num)
            return x, jax.vmap(partial(decode, variables))(discrete)

        continuous = split.continuous_sites

        def constrain_fn(z):
            x = ravel_pytree({name: z[name] for name in continuous})[0]
            return latent.constrain_fn(x, {name: z[name] for name in layouts})

        return DiscreteTarget(
            variables,
            latent.log_density_fn,
            latent.log_density_for,
            sample_initial_fn,
            site_values_fn,
            split.unravel_fn,
            constrain_fn,
            split.dimension,
            continuous,
            (model_args, without_conditioning(model_kwargs)),
            bool(conditioning_values(model_kwargs)),
            split,
        )

    @staticmethod
    def _differentiable(latent, layouts, name, x):
        """Whether the model's log density can be traced and differentiated with float values
        for the site ``name`` (the others at their sampled dtype)."""
        values = {}
        for other, layout in layouts.items():
            if layout.kind == "one_hot":
                values[other] = jnp.zeros(layout.shape + (layout.num_values,), layout.dtype)
            else:
                values[other] = jnp.zeros(layout.shape, layout.dtype)
        layout = layouts[name]
        float_value = jnp.zeros(jnp.shape(values[name]), jnp.result_type(float))

        def log_density_in(value):
            return latent.log_density_fn(x, {**values, name: value})

        try:
            jax.eval_shape(jax.grad(log_density_in), float_value)
        except NOT_DIFFERENTIABLE_ERRORS:
            return False
        return layout.kind in ("binary", "one_hot")

    # --- the chain ------------------------------------------------------------------------------

    def _build(self, num_warmup, tag):
        target = self._target
        variables = target.variables
        schedule = self._schedule
        settings = self._settings
        num_copies = 1 if schedule is not None else self._num_tuning_chains
        inner = self._inner
        discrete_steps = self.moves_per_transition(inner is not None or target.conditioned)
        # The discrete conditional, and so the schedule the tuner finds, can depend strongly on
        # the continuous sites: with an inner kernel they first leave their prior draw.
        num_sweeps = self._num_tuning_sweeps if inner is not None and schedule is None else 0

        def evaluate_at(x, log_density_fn):
            return local_differences_fn(lambda values: log_density_fn(x, values), variables)

        def z_of(indices, x):
            return {**target.continuous_unravel_fn(x), **_as_dict(target.site_values_fn(indices))}

        def z_for_potential(indices):
            return target.site_values_fn(indices)

        if inner is not None:
            algo, hmc_settings = inner

            def potential_fn_gen(values, model_args, model_kwargs):
                log_density_fn = target.log_density_for(model_args, model_kwargs)
                return lambda x: -log_density_fn(x, values)

            hmc_init, hmc_sample = hmc(potential_fn_gen=potential_fn_gen, algo=algo)

        def model_values(indices):
            """Discrete values for the inner kernel's potential, as the model samples them."""
            return _as_dict(target.site_values_fn(indices))

        def discrete_moves(key, chain, schedule, first_position, evaluate):
            """``discrete_steps`` ACS moves at consecutive positions of the cyclical schedule
            (eq. 7-8)."""
            keys = jax.random.split(key, discrete_steps)
            return scheduled_steps(keys, chain, schedule, first_position, evaluate, variables)

        def sweep(keys, chain, inner_state, schedule, first_position, model_args, model_kwargs):
            """Discrete moves given the continuous sites, then one inner kernel move of the
            continuous sites given the discrete ones."""
            step_key, inner_key = keys
            x = inner_state.z
            evaluate = evaluate_at(x, target.log_density_for(model_args, model_kwargs))
            # The continuous sites moved since the cached U was computed.
            chain = init_chain(evaluate, chain.indices)
            chain, moves = discrete_moves(step_key, chain, schedule, first_position, evaluate)
            inner_args = (model_values(chain.indices), model_args, model_kwargs)
            potential, gradient = jax.value_and_grad(potential_fn_gen(*inner_args))(x)
            inner_state = inner_state._replace(
                potential_energy=potential, z_grad=gradient, rng_key=inner_key
            )
            return chain, hmc_sample(inner_state, model_args=inner_args), moves

        def move_continuous_first(key, x, indices, model_args, model_kwargs):
            """``num_sweeps`` sweeps at the untuned cycle of the tuner's burn-in (Alg. 3), the
            inner kernel adapting over them: the continuous sites (and the discrete ones with
            them) go from the prior draw to where the posterior puts them."""
            naive = untuned_schedule(resolve_settings(settings, variables))
            init_key, key = jax.random.split(key)
            inner_state = hmc_init(
                x,
                num_sweeps,
                model_args=(model_values(indices), model_args, model_kwargs),
                rng_key=init_key,
                **hmc_settings,
            )
            chain = init_chain(
                evaluate_at(x, target.log_density_for(model_args, model_kwargs)), indices
            )

            def one_sweep(carry, inputs):
                keys, sweep_index = inputs
                chain, inner_state = carry
                chain, inner_state, _ = sweep(
                    keys,
                    chain,
                    inner_state,
                    naive,
                    sweep_index * discrete_steps,
                    model_args,
                    model_kwargs,
                )
                return (chain, inner_state), None

            (chain, inner_state), _ = jax.lax.scan(
                one_sweep,
                (chain, inner_state),
                (jax.random.split(key, (num_sweeps, 2)), jnp.arange(num_sweeps)),
            )
            return inner_state.z, chain.indices

        def init_one(rng_key, initial_indices, initial_x, conditioning):
            # In a Gibbs block the tuner and the cached U use this chain's conditioning values.
            model_args, model_kwargs = target.model_arguments
            if conditioning:
                model_kwargs = with_conditioning(model_kwargs, conditioning)
            log_density_fn = target.log_density_for(model_args, model_kwargs)
            draw_key, tune_key, inner_key, rng_key = jax.random.split(rng_key, 4)
            x, indices = target.sample_initial_fn(draw_key, num_copies)
            if initial_indices is not None:
                indices = {
                    name: index.at[0].set(initial_indices[name]) for name, index in indices.items()
                }
            x0 = x[0] if initial_x is None else initial_x
            if num_sweeps:
                sweep_key, tune_key = jax.random.split(tune_key)
                first = jax.tree.map(lambda index: index[0], indices)
                x0, first = move_continuous_first(sweep_key, x0, first, model_args, model_kwargs)
                # Every copy the tuner averages over starts where the sweeps ended.
                indices = jax.tree.map(
                    lambda index, moved: jnp.broadcast_to(moved, index.shape), indices, first
                )
            evaluate = evaluate_at(x0, log_density_fn)
            copies = jax.vmap(partial(init_chain, evaluate))(indices)
            if schedule is None:
                tuning, copies = tune_schedule(tune_key, copies, evaluate, variables, settings)
            else:
                tuning = fixed_tuning(schedule)
            chain = jax.tree.map(lambda leaf: leaf[0], copies)
            inner_state = None
            if inner is not None:
                inner_state = hmc_init(
                    x0,
                    num_warmup,
                    model_args=(model_values(chain.indices), model_args, model_kwargs),
                    rng_key=inner_key,
                    **hmc_settings,
                )
            zero = jnp.zeros(())
            return ACSState(
                z_of(chain.indices, x0)
                if self._model is not None
                else z_for_potential(chain.indices),
                chain,
                tuning,
                jnp.zeros((), jnp.int32),
                tuning.schedule.step_sizes[0],
                tuning.schedule.balancing[0],
                zero,
                zero,
                inner_state,
                tag,
                rng_key,
            )

        def continuous_position(state):
            return jnp.zeros(target.dimension) if inner is None else state.inner_state.z

        def step_one(state: ACSState, model_args, model_kwargs):
            rng_key, step_key, inner_key = jax.random.split(state.rng_key, 3)
            schedule = state.tuning.schedule
            first_position = state.iteration * discrete_steps
            if inner is None:
                x = continuous_position(state)
                evaluate = evaluate_at(x, target.log_density_for(model_args, model_kwargs))
                inner_state = None
                chain, moves = discrete_moves(
                    step_key, state.chain, schedule, first_position, evaluate
                )
            else:
                chain, inner_state, moves = sweep(
                    (step_key, inner_key),
                    state.chain,
                    state.inner_state,
                    schedule,
                    first_position,
                    model_args,
                    model_kwargs,
                )
                x = inner_state.z
            alpha, beta, accept_prob = moves
            iteration = state.iteration + 1
            mean_accept_prob = running_accept_mean(
                state.mean_accept_prob, accept_prob, iteration, num_warmup
            )
            z = (
                z_of(chain.indices, x)
                if self._model is not None
                else z_for_potential(chain.indices)
            )
            return ACSState(
                z,
                chain,
                state.tuning,
                iteration,
                alpha,
                beta,
                accept_prob,
                mean_accept_prob,
                inner_state,
                state.build,
                rng_key,
            )

        def refresh_one(state: ACSState, model_args, model_kwargs):
            evaluate = evaluate_at(
                continuous_position(state), target.log_density_for(model_args, model_kwargs)
            )
            return state._replace(chain=init_chain(evaluate, state.chain.indices))

        return init_one, step_one, refresh_one

    def _initial_values(self, init_params, batched):
        """``init_params`` (site values; continuous ones unconstrained) -> (indices, x)."""
        if init_params is None:
            return None, None
        target = self._target
        single = self._model is None and isinstance(self._variables, DiscreteVariable)
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

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs):
        indices, x = self._initial_values(init_params, batched)
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


# Prior draws at which grad_mode="auto" compares first-order and exact differences, and the
# median error (in nats) of the first-order ones, beyond a common offset, above which a site gets
# exact differences.
NUM_CHECK_POINTS = 4
FIRST_ORDER_TOLERANCE = 0.5


def _moved_values(layout, index):
    """Every coordinate moved to another value: the complement of a binary state, the next class
    of a one-hot one."""
    return (index + 1) % layout.num_values


def _first_order_is_faithful(latent, layout) -> bool:
    """Whether the model can be differentiated in one binary or one-hot discrete site and the
    gradient's first-order differences of ``U`` (ACS paper eq. 4) are close to the exact ones at a
    few prior draws, up to an error common to every move.

    Such a common error ``delta`` shifts every logit of eq. 5 by ``beta delta`` per changed
    coordinate, exactly as the distance term ``D / (2 alpha)`` does (``D = 1`` per flip or class
    change): the proposal is the exact-difference one at another ``alpha``, which the tuner sets.
    It arises wherever ``U`` is quadratic in each coordinate with the same curvature everywhere,
    e.g. a likelihood ``N(y | mu (2 z - 1), sigma)``, off by ``2 mu^2 / sigma^2`` per flip. So the
    offset is the median error over the moves at each continuous value, taken at the drawn
    discrete state and at every coordinate moved (an error that depends on a coordinate's own
    value, as through a comparison, differs between the two), and the rest is what must be small.

    The remainder is zero for a log density linear or uniformly quadratic in each coordinate
    (Ising and Boltzmann energies, Gaussian likelihoods of such values), and large where the model
    reads the value through a comparison (``jnp.where(z == 1, ...)`` has a zero gradient) or very
    non-linearly (a spike-and-slab scale ``spike + z (slab - spike)``): there the proposal would
    almost never suggest the moves the target favours.
    """
    if layout.kind not in ("binary", "one_hot"):
        return False
    name = layout.name
    first_order = DiscreteVariable(layout.shape, layout.num_values, layout.kind, True, None)
    exact = DiscreteVariable(layout.shape, layout.num_values, layout.kind, False, layout.dtype)

    def errors_at(x, discrete):
        def log_density(values):
            return latent.log_density_fn(x, {**discrete, **values})

        def signed_errors(index):
            approximate = local_differences_fn(log_density, {name: first_order})(index)[1][name]
            exact_differences = local_differences_fn(log_density, {name: exact})(index)[1][name]
            moves = jnp.isfinite(exact_differences) & (exact_differences != 0.0)
            return jnp.where(moves, approximate - exact_differences, jnp.nan)

        index = decode({name: exact}, discrete)[name]
        errors = jnp.stack(
            [signed_errors({name: index}), signed_errors({name: _moved_values(layout, index)})]
        )
        return jnp.abs(errors - jnp.nanmedian(errors))

    def errors_from(key):
        return jax.vmap(errors_at)(*latent.split.sample_prior_fn(key, NUM_CHECK_POINTS))

    # Drawing the points and comparing in one compiled call: run op by op, the prior draws alone
    # would compile every sampling operation of the model separately.
    try:
        errors = quick_jit(errors_from)(jax.random.PRNGKey(0))
    except NOT_DIFFERENTIABLE_ERRORS:
        return False
    if not not_jax_tracer(errors):
        # Conditioning values traced by pmap (a Gibbs block under chain_method="parallel"):
        # nothing to compare, keep the gradient.
        return True
    errors = np.asarray(errors)
    errors = errors[np.isfinite(errors)]
    return errors.size == 0 or float(np.median(errors)) <= FIRST_ORDER_TOLERANCE


def _as_dict(values, name="x"):
    return values if isinstance(values, dict) else {name: values}


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
