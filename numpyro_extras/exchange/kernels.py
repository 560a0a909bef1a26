"""Replica exchange (non-reversible parallel tempering) as a NumPyro kernel.

A thin :class:`~numpyro_extras.kernel.ExtrasKernel` over the functional core of
:mod:`numpyro_extras.exchange.chains`: it reads the model into a tempered path
(:mod:`numpyro_extras.exchange.target`), plans the replicas (:mod:`numpyro_extras.exchange.pilot`),
starts them and runs them (:mod:`numpyro_extras.exchange.replicas`). ``mcmc.get_samples()`` are
the ``beta = 1`` replica's draws: the posterior.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from numpyro.infer import HMC, NUTS
from numpyro.infer.initialization import init_to_uniform
from numpyro.util import not_jax_tracer

from numpyro_extras.bases import GaussianBase, MixtureBase, validate_base
from numpyro_extras.discrete.kernels import ACS
from numpyro_extras.discrete.target import DiscreteTarget
from numpyro_extras.exchange.chains import batched_scan_step, scan_step
from numpyro_extras.exchange.ladder import MAX_REPLICA_VALUES
from numpyro_extras.exchange.path import TemperedPath
from numpyro_extras.exchange.pilot import (
    PILOT_REPLICAS,
    PILOT_SCANS,
    PILOT_TUNING_SCANS,
    ReplicaPilot,
    floor_plan,
    potential_flops,
    replica_count_setting,
    requested_plan,
    run_pilot,
)
from numpyro_extras.exchange.replicas import check_given_starts, initial_positions, replica_scan
from numpyro_extras.exchange.target import (
    EMPTY_TARGET,
    discrete_exchange_target,
    model_exchange_target,
    potential_exchange_target,
)
from numpyro_extras.kernel import ExtrasKernel, fixed_target_functions, hmc_settings
from numpyro_extras.potential import FlatModel
from numpyro_extras.tempering.base_fit import check_fit_base_settings
from numpyro_extras.validation import check_init_strategy

__all__ = [
    "ReplicaExchange",
    "ReplicaPilot",
    "DEFAULT_NUM_REPLICAS",
    "MAX_REPLICA_VALUES",
    "PILOT_REPLICAS",
    "PILOT_TUNING_SCANS",
    "PILOT_SCANS",
    "PILOT_FREE_POTENTIAL_FLOPS",
    "DEFAULT_INNER_KERNEL",
    "CHEAP_POTENTIAL_MAX_TREE_DEPTH",
    "DEAR_POTENTIAL_NUM_STEPS",
]

DEFAULT_NUM_REPLICAS = "auto"
REFERENCES = ("auto", "prior", "fit", "stabilized")
DEFAULT_REFERENCE = "auto"
# At most this many floating-point operations per evaluation of a rung's potential, "auto"
# runs the floor's count without a pilot: the pilot's compilation costs more than the rungs it
# could add, which only a barrier above half the floor calls for, and a run's cost grows with
# its rungs where NUTS trees are deep. The run's diagnostics still measure the barrier and warn
# when the chains make too few round trips.
PILOT_FREE_POTENTIAL_FLOPS = 10_000
DEFAULT_INNER_KERNEL = "auto"
# Past PILOT_FREE_POTENTIAL_FLOPS, "auto" moves the rungs by HMC with this many leapfrog steps
# (step size and mass matrix adapted per rung): the rungs of a vectorised scan move in
# lockstep, so a scan of NUTS moves lasts as long as the deepest tree of any rung while the
# others idle, and where gradients are dear that idling is most of the scan. Equal-length
# trajectories leave no lane idle.
DEAR_POTENTIAL_NUM_STEPS = 16
# Below PILOT_FREE_POTENTIAL_FLOPS, "auto" moves the rungs by NUTS with trees of at most this
# depth (127 leapfrog steps): a scan still waits for the deepest tree of any rung, and where
# the posterior's scale changes (a funnel's neck) one rung's tree of NumPyro's default depth 10
# holds every other rung for up to 1023 steps.
CHEAP_POTENTIAL_MAX_TREE_DEPTH = 7
# Settings that name the move: with them, "auto" is that move whatever the potential costs.
_HMC_ONLY_SETTINGS = ("num_steps", "trajectory_length")
_NUTS_ONLY_SETTINGS = ("max_tree_depth",)


def resolved_inner_kernel(inner_kernel, inner_kwargs):
    """``inner_kernel`` with ``"auto"`` resolved to the move its settings name (NUTS if none).

    :param inner_kernel: the kernel's ``inner_kernel``.
    :param dict inner_kwargs: its settings.
    :return: ``(inner_kernel, auto_move)``: ``auto_move`` is whether the move is still to be
        chosen from the potential's cost (``"auto"`` and no setting that names the move).
    """
    if not (isinstance(inner_kernel, str) and inner_kernel == "auto"):
        return inner_kernel, False
    inner_kernel = HMC if any(name in inner_kwargs for name in _HMC_ONLY_SETTINGS) else NUTS
    auto_move = not any(name in inner_kwargs for name in _HMC_ONLY_SETTINGS + _NUTS_ONLY_SETTINGS)
    return inner_kernel, auto_move


def auto_move_settings(cheap, inner_kwargs):
    """``(algo, settings)`` of the move of ``inner_kernel="auto"``: NUTS with trees of depth at
    most ``CHEAP_POTENTIAL_MAX_TREE_DEPTH`` on a ``cheap`` potential, else HMC with
    ``DEAR_POTENTIAL_NUM_STEPS`` leapfrog steps."""
    if cheap:
        return hmc_settings(NUTS, max_tree_depth=CHEAP_POTENTIAL_MAX_TREE_DEPTH, **inner_kwargs)
    return hmc_settings(HMC, num_steps=DEAR_POTENTIAL_NUM_STEPS, **inner_kwargs)


def reference_settings(reference, base, potential_fn, discrete):
    """``reference`` and ``base`` checked against each other and the kernel's target.

    :param reference: ``"auto"``, ``"prior"``, ``"fit"``, ``"stabilized"``, or a base.
    :param base: a base for the fitted leg, or ``None``.
    :param potential_fn: the kernel's ``potential_fn`` (``None`` for a model).
    :param bool discrete: whether the moves are ACS/DMALA moves.
    :return: ``(reference, given_base)``, bases validated; with a ``potential_fn`` the given
        base is the reference.
    :raises ValueError: for a reference or base the target cannot take.
    """
    if discrete and not (isinstance(reference, str) and reference in ("prior", "auto")):
        raise ValueError(
            "With ACS/DMALA moves the path starts from the prior of the discrete sites: "
            f"reference must be 'prior', got {reference!r}."
        )
    if isinstance(reference, (GaussianBase, MixtureBase)):
        checked = validate_base(reference)
    elif isinstance(reference, str) and reference in REFERENCES:
        checked = reference
    else:
        raise ValueError(
            "reference must be 'auto', 'prior', 'fit', 'stabilized', a GaussianBase or a "
            f"MixtureBase, got {reference!r}."
        )
    given_base = None
    if base is not None:
        if not (isinstance(reference, str) and reference in ("auto", "fit", "stabilized")):
            raise ValueError(
                "`base` is the fitted leg's reference: pass it with reference='auto', 'fit' "
                f"or 'stabilized', got reference={reference!r}."
            )
        if discrete:
            raise ValueError(
                "With ACS/DMALA moves the path starts from the prior of the discrete sites: "
                "a `base` has no place in it."
            )
        given_base = validate_base(base)
    if potential_fn is not None and given_base is not None and reference != "stabilized":
        return given_base, None
    if potential_fn is not None and isinstance(reference, str):
        raise ValueError(
            "With `potential_fn`, `reference` must be a GaussianBase or MixtureBase on the "
            "same flat space: a potential has no prior, and fitting one needs a model."
        )
    return checked, given_base


def discrete_inner_kernel(model, inner_kernel, inner_kwargs) -> ACS | None:
    """The ACS/DMALA kernel whose settings and model plumbing the replicas' moves use, or
    ``None`` for an HMC/NUTS inner kernel.

    :param model: the model of the replica-exchange kernel (``None`` for a ``potential_fn``).
    :param inner_kernel: ``nx.ACS``/``nx.DMALA`` (class or instance), ``NUTS``/``HMC``.
    :param dict inner_kwargs: settings for an inner kernel class.
    :return: an :class:`~numpyro_extras.ACS` on ``model``, or ``None``.
    :raises ValueError: for a kernel that cannot take a tempered potential, or ACS without a
        model.
    """
    is_class = isinstance(inner_kernel, type)
    if isinstance(inner_kernel, ACS) or (is_class and issubclass(inner_kernel, ACS)):
        if model is None:
            raise ValueError(
                "ACS/DMALA moves temper a model's discrete sites: give a model, not a potential_fn."
            )
        if is_class:
            kernel = inner_kernel(model, **inner_kwargs)
        else:
            if inner_kwargs:
                raise ValueError(
                    "Give the settings of an inner kernel instance to the instance itself, got "
                    f"{sorted(inner_kwargs)}."
                )
            if inner_kernel.model is None:
                raise ValueError("An ACS/DMALA inner kernel must be built on a model.")
            kernel = inner_kernel.wrap_model(lambda _: model)
        return kernel
    if isinstance(inner_kernel, HMC) or (is_class and issubclass(inner_kernel, HMC)):
        return None
    name = getattr(inner_kernel, "__name__", type(inner_kernel).__name__)
    raise ValueError(
        f"inner_kernel {name} cannot take a tempered potential: every replica moves on its own "
        "tempered density log p0 + beta l with beta passed as data, which "
        "numpyro.infer.NUTS / HMC (continuous sites) and nx.ACS / nx.DMALA (discrete sites) do. "
        "Pass one of those, the class or an instance."
    )


class ReplicaExchange(ExtrasKernel):
    """Non-reversible parallel tempering (Syed, Bouchard-Cote, Deligiannidis and Doucet, JRSSB
    2022) for any NumPyro model with continuous latent sites, discrete ones, or both.

    Each chain runs ``num_replicas`` copies of the model at inverse temperatures
    ``0 = beta_0 < ... < beta_{N-1} = 1`` of the path ``log r(x) + beta l(x)`` from a reference
    ``r`` to the posterior (:mod:`numpyro_extras.exchange.path`): the model's prior; or a
    Gaussian mixture fitted to the posterior's modes (the variational reference of Surjanovic
    et al., NeurIPS 2022), so that the ladder is short; or, by default for continuous sites,
    both, as two ladders joined at the posterior (``reference="stabilized"``, their section 4),
    so that a mode the fit missed still enters through the prior leg and the two legs'
    estimates of ``log Z`` check each other. Every scan moves every replica but the reference
    one with ``inner_kernel`` on its own tempered target (each adapting its own step size and
    mass matrix in warm-up), renews the ``beta = 0`` replica with an exact reference draw, and
    offers swaps between neighbours, the even gaps on even scans and the odd gaps on odd scans
    (Syed et al., Algorithm 1). In warm-up the ladder is re-tuned after rounds of doubling
    length so that every gap has the same swap rejection rate (their Algorithm 4), then frozen.
    ``mcmc.get_samples()`` are the ``beta = 1`` replica's draws;
    :func:`numpyro_extras.log_marginal_likelihood` gives the stepping-stone estimate of
    ``log Z`` from the extra field ``log_likelihood`` (``l`` at every rung);
    :func:`numpyro_extras.exchange_diagnostics` the swap rates, round trips and barrier.

    With ``inner_kernel=nx.ACS`` (or ``nx.DMALA``) a model with Bernoulli, Categorical or
    one-hot categorical latent sites, alone or beside continuous ones, is tempered on its prior
    path (observed sites and ``numpyro.factor`` terms raised to ``beta``). Every rung but the
    reference one makes ``discrete_steps`` ACS moves per scan (ACS paper eq. 5-6), on a mixed
    model then one HMC/NUTS move of the continuous sites (a Gibbs sweep, as ``nx.ACS(model,
    inner_kernel=NUTS)`` makes untempered); ACS's cyclical schedule is tuned at ``init`` on four
    rungs (the ACS tuner, Alg. 2-5) and interpolated in ``beta`` for the others
    (:mod:`numpyro_extras.exchange.discrete_moves`).

    :param model: a NumPyro model with continuous latent sites (or, with an ACS/DMALA inner
        kernel, discrete ones, or both).
    :param potential_fn: alternatively, ``-log`` of the unnormalised target on flat 1-D
        positions; then ``reference`` must be a :class:`~numpyro_extras.GaussianBase` or
        :class:`~numpyro_extras.MixtureBase`.
    :param inner_kernel: ``"auto"`` (the default): ``numpyro.infer.NUTS`` with trees of depth at
        most ``CHEAP_POTENTIAL_MAX_TREE_DEPTH`` where one evaluation of a rung's potential costs
        at most ``PILOT_FREE_POTENTIAL_FLOPS`` floating-point operations, else
        ``numpyro.infer.HMC`` with ``DEAR_POTENTIAL_NUM_STEPS`` leapfrog steps (the rungs move
        in lockstep); a ``num_steps`` or ``trajectory_length`` setting makes it HMC,
        ``max_tree_depth`` NUTS. Or ``NUTS`` / ``HMC``, or ``nx.ACS`` / ``nx.DMALA`` for
        discrete sites (continuous ones beside them move with the ACS instance's
        ``inner_kernel``, NUTS by default): the class, or an instance whose settings are used.
    :param num_replicas: replicas per chain (per leg of ``"stabilized"``): an integer of at
        least 2, or ``"auto"`` (the default): ``ceil(2 Lambda)`` for the communication barrier
        ``Lambda`` a pilot run of this kernel's core measures at ``init`` (seeded by
        ``fit_base_seed``), at least 16 (8 per leg) and at most 64 or the memory bound, starting
        from the pilot's ladder; where the potential costs at most
        ``PILOT_FREE_POTENTIAL_FLOPS``, the floor's count without a pilot
        (:mod:`numpyro_extras.exchange.pilot`).
    :param reference: ``"auto"`` (the default): ``"stabilized"`` for a model with continuous
        latent sites and a proper prior, ``"fit"`` if the prior is improper, ``"prior"`` if
        the variational fit fails (with a warning) and for ACS/DMALA moves. ``"prior"`` (the
        model's prior, which must be proper), ``"fit"`` (a Gaussian mixture with a component on
        each mode :func:`~numpyro_extras.fit_base` finds, fitted on the first ``init``; a mode
        it misses is suppressed at every ``beta < 1``), ``"stabilized"`` (a fitted leg and a
        prior leg joined at the posterior; ``log Z`` combines the legs' stepping stones and
        warns when they disagree), or a :class:`~numpyro_extras.GaussianBase` /
        :class:`~numpyro_extras.MixtureBase` on the flat unconstrained space.
    :param base: a base on the flat unconstrained space used as the fitted leg's reference of
        ``"auto"``, ``"fit"`` or ``"stabilized"`` instead of fitting one.
    :param init_strategy: NumPyro init strategy for the fallback start of a replica whose
        reference draw is not in the target's support.
    :param dict fit_base_kwargs: keyword arguments of :func:`~numpyro_extras.fit_base`,
        checked when the kernel is built.
    :param int fit_base_seed: seed of the fit and of the pilot run, the same for every chain
        method.
    :param inner_kwargs: settings of the HMC/NUTS move (``step_size``, ``dense_mass``,
        ``target_accept_prob``, ``max_tree_depth``, ``num_steps``, ...) or of ``nx.ACS`` /
        ``nx.DMALA`` (``steps_per_cycle``, ``num_tuning_chains``, ``step_size``, ...).

    **Example:**

    .. code-block:: python

        kernel = nx.ReplicaExchange(model, num_replicas=8)  # default: from a pilot run
        mcmc = MCMC(kernel, num_warmup=300, num_samples=1000, num_chains=2)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        mcmc.print_summary()  # the posterior, every mode with its mass
        nx.log_marginal_likelihood(mcmc)  # stepping stone over the ladder
        nx.exchange_diagnostics(mcmc)  # swap rates, round trips, barrier
        # a model whose latent sites are all discrete (here an Ising lattice written with factor)
        mcmc = MCMC(nx.ReplicaExchange(nx.ising_model, inner_kernel=nx.ACS), num_warmup=200,
                    num_samples=500, num_chains=2)
        mcmc.run(jax.random.PRNGKey(0), 4, coupling=0.6)
        nx.log_marginal_likelihood(mcmc)  # nx.ising_lattice(4, 0.6).log_partition()
    """

    gibbs_block_error = (
        "its ladder is tuned to one fixed target, and the conditional a Gibbs block samples "
        "changes at every step."
    )

    def __init__(
        self,
        model=None,
        potential_fn=None,
        *,
        inner_kernel=DEFAULT_INNER_KERNEL,
        num_replicas=DEFAULT_NUM_REPLICAS,
        reference=DEFAULT_REFERENCE,
        base=None,
        init_strategy=init_to_uniform,
        fit_base_kwargs=None,
        fit_base_seed=0,
        **inner_kwargs,
    ):
        super().__init__(model, potential_fn)
        self._requested_replicas = replica_count_setting(num_replicas)
        # "auto": NUTS or fixed-length HMC, chosen from the potential's cost at each init.
        inner_kernel, self._auto_move = resolved_inner_kernel(inner_kernel, inner_kwargs)
        self._inner_kwargs = inner_kwargs
        self._acs = discrete_inner_kernel(model, inner_kernel, inner_kwargs)
        from_class = self._acs is not None and isinstance(inner_kernel, type)
        # Rebuilt with NUTS for the continuous sites if the model turns out to have some.
        self._acs_class = inner_kernel if from_class else None
        self._acs_kwargs = dict(inner_kwargs) if from_class else {}
        self._reference, self._given_base = reference_settings(
            reference, base, potential_fn, self._acs is not None
        )
        self._algo, self._hmc_settings = (
            (None, {})
            if self._acs is not None
            else hmc_settings(inner_kernel, owner_model=model, **inner_kwargs)
        )
        self._init_strategy = check_init_strategy(init_strategy)
        self._fit_base_kwargs = check_fit_base_settings(
            f"{type(self).__name__}(fit_base_kwargs=...)", **dict(fit_base_kwargs or {})
        )
        self._fit_base_seed = fit_base_seed
        # What the last init read from the model, and the replicas planned on it.
        self._target = EMPTY_TARGET
        self._plan = requested_plan(self._requested_replicas)

    @property
    def num_replicas(self) -> int | None:
        """Replicas per chain: as given, or for ``"auto"`` the count the pilot of the last
        ``init`` chose (``None`` before)."""
        return self._plan.num_replicas

    @property
    def inner_algo(self) -> str | None:
        """The HMC-family move of the rungs, ``"NUTS"`` or ``"HMC"`` (for ``inner_kernel="auto"``
        the one the last ``init`` chose), or ``None`` for ACS/DMALA moves."""
        return self._algo

    @property
    def num_prior_replicas(self) -> int | None:
        """For ``reference="stabilized"``, the prior leg's replicas per chain (``num_replicas``
        is then the fitted leg's); ``None`` otherwise, or before the pilot of ``"auto"``."""
        return self._plan.num_prior_replicas if self.stabilized else None

    @property
    def stabilized(self) -> bool:
        """Whether the replicas run on two legs joined at the posterior (``reference=
        "stabilized"``, or ``"auto"`` on a model with continuous sites and a proper prior whose
        fit succeeded): the reference of the last ``init``, or before it the one intended."""
        if self._target.reference is not None:
            return self._target.stabilized
        return self._intends_stabilized

    @property
    def _intends_stabilized(self) -> bool:
        requested = self._reference
        if not isinstance(requested, str):
            return False
        return requested == "stabilized" or (
            requested == "auto" and self._model is not None and self._acs is None
        )

    @property
    def prior_leg_pilot(self) -> ReplicaPilot | None:
        """For ``reference="stabilized"`` with ``num_replicas="auto"``: what the prior leg's
        pilot measured (the fitted leg's is :attr:`pilot`)."""
        return self._plan.prior_leg_pilot

    @property
    def prior_leg_path(self) -> TemperedPath | None:
        """For ``reference="stabilized"``: the prior leg's path (the fitted leg's is
        :attr:`path`)."""
        return self._target.prior_leg_path

    @property
    def pilot(self) -> ReplicaPilot | None:
        """What the pilot of ``num_replicas="auto"`` measured at the last ``init`` (its barrier,
        count and ladder); ``None`` before, for a given count, or where the potential was cheap
        enough to run without a pilot."""
        return self._plan.pilot

    @property
    def pilot_barrier(self) -> float | None:
        """The communication barrier the pilot measured (``None`` without a pilot)."""
        return None if self._plan.pilot is None else self._plan.pilot.barrier

    @property
    def path(self) -> TemperedPath | None:
        """The tempered path of the last ``init`` (``None`` before)."""
        return self._target.path

    @property
    def reference(self):
        """``"prior"``, or the base density the path starts from (fitted on the first ``init``
        for ``reference="fit"`` and ``"stabilized"``)."""
        reference = self._target.reference
        reference = self._reference if reference is None else reference
        if isinstance(reference, str) and reference in ("fit", "stabilized"):
            return self._target.fitted_reference
        return reference

    @property
    def flat_model(self) -> FlatModel | None:
        """The flat potential of a model with continuous latent sites (``None`` before ``init``
        and for ACS/DMALA moves)."""
        return self._target.flat_model

    @property
    def acs_kernel(self) -> ACS | None:
        """The ACS/DMALA kernel whose settings and model plumbing the replicas' moves use
        (``None`` for HMC/NUTS moves)."""
        return self._acs

    @property
    def discrete_target(self) -> DiscreteTarget | None:
        """The model as the ACS/DMALA moves read it (``None`` before ``init`` and for HMC/NUTS
        moves)."""
        return self._target.discrete_target

    @property
    def latent_sites(self) -> tuple[str, ...]:
        """The names of the latent sites the replicas move (empty before ``init``)."""
        target = self._target.discrete_target
        if target is not None:
            return (*target.continuous_sites, *target.variables)
        flat_model = self._target.flat_model
        return () if flat_model is None else flat_model.latent_sites

    @property
    def reference_fit_problems(self) -> tuple[str, ...]:
        """What the fit of ``reference="fit"`` warned about its coverage of the posterior's modes
        (empty if nothing, or for another reference). A mode the reference misses is reached
        only by the moves near ``beta = 1``, so its mass can be missed with a small error bar:
        the run's diagnostics repeat these warnings (for ``reference="stabilized"`` only when
        its two legs' ``log Z`` disagree: its prior leg reaches what the fit missed)."""
        return self._target.fit_problems

    @property
    def default_fields(self):
        fields = ("z", "log_likelihood", "swap_accept_prob", "diverging")
        # Read by MCMC before init: "auto" collects the prior leg's fields, which a run that
        # falls back to one ladder leaves empty.
        if self._intends_stabilized:
            fields += ("prior_log_likelihood", "prior_swap_accept_prob")
        return fields

    def _constrain_fn(self):
        target = self._target
        if target.discrete_target is not None:
            return target.discrete_target.constrain_fn
        return None if target.flat_model is None else target.flat_model.constrain_fn

    def _forget_target(self):
        self._target = EMPTY_TARGET
        self._plan = requested_plan(self._requested_replicas)
        if self._acs is not None:
            # The copy's ACS must read the wrapped model, not share the original's plumbing.
            self._acs = discrete_inner_kernel(self._model, self._acs, {})

    def _prepare_target(self, model_args, model_kwargs):
        """Read the model into its tempered path(s) for these model arguments, choose the move
        of ``inner_kernel="auto"`` from the potential's cost, and for ``num_replicas="auto"``
        the count (by a pilot run on that path where the potential is costly). The kernel's
        state changes only once all of it succeeded, so that a failed ``init`` leaves the last
        target whole."""
        count = self._requested_replicas
        key = jax.random.PRNGKey(self._fit_base_seed)
        acs = self._acs
        if acs is not None:
            acs, target = discrete_exchange_target(
                key,
                acs,
                self._acs_class,
                self._acs_kwargs,
                self._model,
                model_args,
                model_kwargs,
                count,
            )
        elif self._model is None:
            target = potential_exchange_target(self._potential_fn, self._reference, count)
        else:
            target = model_exchange_target(
                key,
                self._model,
                model_args,
                model_kwargs,
                reference=self._reference,
                given_base=self._given_base,
                num_replicas=count,
                init_strategy=self._init_strategy,
                fit_base_kwargs=self._fit_base_kwargs,
                fit_base_seed=self._fit_base_seed,
                kernel_name=f"{type(self).__name__} with HMC/NUTS moves",
            )
        algo, settings = self._algo, self._hmc_settings
        plan = requested_plan(count)
        choose_move = self._auto_move and acs is None
        if choose_move or count == "auto":
            cheap = potential_flops(target.path) <= PILOT_FREE_POTENTIAL_FLOPS
            if choose_move:
                algo, settings = auto_move_settings(cheap, self._inner_kwargs)
            if count == "auto" and cheap:
                plan = floor_plan(target.values_per_replica, target.stabilized)
            elif count == "auto":
                plan = run_pilot(
                    lambda rungs: replica_scan(target, acs, algo, settings, requested_plan(rungs)),
                    lambda key, rungs: initial_positions(key, None, target, rungs, rungs),
                    self._fit_base_seed,
                    target.values_per_replica,
                    target.stabilized,
                )
        self._acs, self._target, self._plan = acs, target, plan
        self._algo, self._hmc_settings = algo, settings

    def _build(self, num_warmup, tag):
        moves = (self._target, self._acs, self._algo, self._hmc_settings)
        scan, settings = replica_scan(*moves, self._plan, tag)
        init_one, step_one = fixed_target_functions(
            scan.init,
            lambda state, num_warmup: scan_step(scan.parts(num_warmup))(state),
            num_warmup,
            settings,
        )
        step_batch = batched_scan_step(scan.parts(num_warmup))
        return init_one, step_one, None, lambda states, *model_inputs: step_batch(states)

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs):
        target, plan = self._target, self._plan
        discrete = target.discrete_target is not None
        draw = functools.partial(
            initial_positions,
            target=target,
            num_replicas=plan.num_replicas,
            num_prior_replicas=plan.num_prior_replicas,
        )
        dimension = None if discrete else target.flat_model.dimension
        positions, chain_keys = self._starting_positions(
            rng_key, init_params, batched, draw, dimension
        )
        # Discrete starts are checked after init, where every rung has its tuned starting state.
        if not discrete and init_params is not None:
            check_given_starts(positions, target, plan.num_replicas, plan.num_prior_replicas)
        return positions, chain_keys

    def _check_initial_state(self, state):
        if self._target.discrete_target is None or not not_jax_tracer(state.log_likelihood):
            return
        finite = np.asarray(state.replicas.finite)
        if not finite.all():
            raise ValueError(
                "The tempered log density is not finite at the starting state of a replica "
                "(after tuning); check the model's support and data, or give init_params."
            )

    def get_diagnostics_str(self, state):
        statistics = state.statistics
        scans = max(int(statistics.num_scans), 1)
        swap_rate = float(np.mean(np.asarray(statistics.accept_sum))) / scans
        moves = (
            ""
            if self._acs is not None and not self._target.mixed
            else f"{int(state.num_steps)} steps of size {float(state.step_size):.2e}. "
        )
        return (
            f"{moves}acc. prob={float(state.mean_accept_prob):.2f} swap rate={swap_rate:.2f} "
            f"round trips={int(statistics.num_round_trips)}"
        )
