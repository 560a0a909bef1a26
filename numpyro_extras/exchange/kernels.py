"""Replica exchange (non-reversible parallel tempering) as a NumPyro kernel.

A thin :class:`~numpyro_extras.kernel.ExtrasKernel` over the functional core of
:mod:`numpyro_extras.exchange.chains`: it reads the model into a tempered path
(:mod:`numpyro_extras.exchange.path`), starts the replicas and runs them. ``mcmc.get_samples()``
are the ``beta = 1`` replica's draws: the posterior.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer import HMC, NUTS
from numpyro.infer.initialization import init_to_uniform
from numpyro.util import find_stack_level, not_jax_tracer

from numpyro_extras.bases import GaussianBase, MixtureBase, validate_base
from numpyro_extras.compilation import quick_jit
from numpyro_extras.discrete.kernels import ACS
from numpyro_extras.discrete.proposal import decode
from numpyro_extras.discrete.target import DiscreteTarget
from numpyro_extras.exchange.chains import (
    batched_scan_step,
    exchange_scan,
    hmc_moves,
    legged_hmc_moves,
    scan_step,
    swap_rates,
)
from numpyro_extras.exchange.discrete_moves import acs_moves, mixed_moves
from numpyro_extras.exchange.ladder import (
    MAX_AUTO_REPLICAS,
    MAX_REPLICA_VALUES,
    MIN_AUTO_LEG_REPLICAS,
    MIN_AUTO_REPLICAS,
    communication_barrier,
    equalized_ladder,
    replicas_for_barrier,
)
from numpyro_extras.exchange.path import (
    MixedPosition,
    TemperedPath,
    prior_path,
    reference_path,
)
from numpyro_extras.exchange.stabilized import stabilized_exchange
from numpyro_extras.kernel import (
    ExtrasKernel,
    fixed_target_functions,
    hmc_settings,
)
from numpyro_extras.numpyro_adapter import calling_mcmc_progress_bar
from numpyro_extras.potential import (
    FlatModel,
    check_finite_potential,
    continuous_latent_sites,
    evaluation_flops,
    flat_model_from_potential,
    flatten_model,
    split_model,
)
from numpyro_extras.progress import run_chunks
from numpyro_extras.tempering.base_fit import (
    check_fit_base_settings,
    fit_base_for_kernel,
)
from numpyro_extras.validation import check_count, check_init_strategy

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
# The pilot's ladder: long enough that a barrier of several units is still measured on gaps whose
# swaps are often accepted (a gap that rejects nearly always understates its share of Lambda),
# short enough that its scans cost little beside the run.
PILOT_REPLICAS = 16
# Rounds of 8, ..., 128 scans tune the pilot's ladder; the scans after them measure its rates.
PILOT_TUNING_SCANS = 256
PILOT_SCANS = 128
# The pilot runs in compiled chunks of this many scans, between which its progress bar moves.
PILOT_CHUNK = 32
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


class ReplicaPilot(NamedTuple):
    """What the pilot run of ``num_replicas="auto"`` measured.

    :param barrier: the global communication barrier ``Lambda`` of the path.
    :param num_replicas: the count chosen from it (``replicas_for_barrier``).
    :param betas: the pilot's tuned ladder, ``(PILOT_REPLICAS,)`` (fewer under the memory bound).
    :param swap_accept_rate: its mean swap acceptance per gap.
    :param starting_betas: the run's starting ladder: the pilot's equalised for the chosen
        count.
    """

    barrier: float
    num_replicas: int
    betas: np.ndarray
    swap_accept_rate: np.ndarray
    starting_betas: np.ndarray


def replica_count_setting(num_replicas):
    """``num_replicas`` checked: ``"auto"`` or an ``int`` of at least 2.

    :raises TypeError: for another string, a float or a flag.
    :raises ValueError: for an integer below 2.
    """
    if isinstance(num_replicas, str) and num_replicas == "auto":
        return num_replicas
    try:
        return check_count("num_replicas", num_replicas, minimum=2)
    except TypeError:
        raise TypeError(
            f"num_replicas must be 'auto' or an integer >= 2, got {num_replicas!r}."
        ) from None


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
    et al., NeurIPS 2022), so that the ladder is short and states jump between the modes the
    fit found at ``beta = 0``; or, by default for continuous sites, both, as two ladders joined
    at the posterior (``reference="stabilized"``, their section 4), so that a mode the fit
    missed still enters through the prior leg and the two legs' estimates of ``log Z`` check
    each other.
    Every scan moves every replica but the reference one with ``inner_kernel`` on its own
    tempered target (vectorized, each adapting its own step size and mass matrix in warm-up),
    renews the ``beta = 0`` replica with an exact reference draw, and offers swaps between
    neighbours, the even gaps on even scans and the odd gaps on odd scans (Syed et al.,
    Algorithm 1). During warm-up the ladder is re-tuned after rounds of doubling length so that
    every gap has the same swap rejection rate (their Algorithm 4), then frozen.

    ``mcmc.get_samples()`` are the ``beta = 1`` replica's draws, exact posterior draws that
    cross between modes whenever a state travels down the ladder and back;
    :func:`numpyro_extras.log_marginal_likelihood` gives the stepping-stone estimate of
    ``log Z`` from the extra field ``log_likelihood`` (``l`` at every rung);
    :func:`numpyro_extras.exchange_diagnostics` the swap rates, round trips and the
    communication barrier.

    **Discrete models.** With ``inner_kernel=nx.ACS`` (or ``nx.DMALA``) a model whose latent
    sites are all Bernoulli, Categorical or one-hot categorical is tempered on its prior path:
    replica ``i`` targets ``log p0(theta) + beta_i l(theta)``, the sample sites' prior times the
    rest of the model (observed sites and ``numpyro.factor`` terms, so an energy model written
    with ``factor`` is tempered in its energy) raised to ``beta_i``, and the ``beta = 0`` replica
    is renewed by exact prior draws. Every other rung makes ``discrete_steps`` ACS moves per
    scan (one by default; :mod:`numpyro_extras.exchange.discrete_moves`; ACS paper eq. 5-6)
    with the model read as ``nx.ACS`` reads it (``grad_mode``). ACS's cyclical schedule is tuned
    at ``init`` on four rungs spread over the ladder, from the first above the reference one to
    the posterior one (the ACS tuner, Alg. 2-5, at each one's starting ``beta``,
    ``num_tuning_chains`` copies each: about ``4 x num_tuning_chains x 770`` evaluations of the
    prior part and of ``l`` per chain); every other rung, and every rung again as the ladder
    moves in warm-up, reads its schedule at its ``beta`` by interpolation between the tuned
    ones, and it is frozen with the ladder for sampling. A
    DMALA step size, or ACS's ``schedule=``, is used on every rung. Settings of ``nx.ACS``
    (``steps_per_cycle``, ``grad_mode``, ``discrete_steps``, ...) go as keyword arguments, or
    pass an instance.

    **Mixed models.** With an ACS/DMALA inner kernel, a model with continuous latent sites
    beside the discrete ones is tempered on the same prior path, on the points ``(x, theta)``,
    and every rung but the reference one makes a Gibbs sweep per scan, as ``nx.ACS(model,
    inner_kernel=NUTS)`` does untempered: ``discrete_steps`` ACS moves of ``theta`` given ``x``
    (one whole cycle by default), then one HMC/NUTS move of ``x`` given ``theta``, both on the
    rung's tempered density (:func:`~numpyro_extras.exchange.discrete_moves.mixed_moves`).
    Before its schedule is tuned each rung makes ``num_tuning_sweeps`` sweeps from its prior
    draw; the HMC/NUTS move adapts per rung during warm-up. ``inner_kernel=nx.ACS`` (the class)
    moves the continuous sites with NUTS at its defaults; ``inner_kernel=nx.ACS(model,
    inner_kernel=HMC, num_steps=10, ...)`` chooses the move and its settings as for ``nx.ACS``.

    :param model: a NumPyro model with continuous latent sites (or, with an ACS/DMALA inner
        kernel, discrete ones, or both).
    :param potential_fn: alternatively, ``-log`` of the unnormalised target on flat 1-D
        positions; then ``reference`` must be a :class:`~numpyro_extras.GaussianBase` or
        :class:`~numpyro_extras.MixtureBase`.
    :param inner_kernel: the move of every replica: ``"auto"`` (the default) is
        ``numpyro.infer.NUTS`` with trees of depth at most ``CHEAP_POTENTIAL_MAX_TREE_DEPTH``
        (7) where one evaluation of a rung's potential costs at most
        ``PILOT_FREE_POTENTIAL_FLOPS`` floating-point operations, and ``numpyro.infer.HMC``
        with ``DEAR_POTENTIAL_NUM_STEPS`` leapfrog steps where it costs more (the rungs move in
        lockstep, so NUTS moves wait for the deepest tree of any rung; trajectories of one
        length leave no rung idle), each rung adapting its step size and mass matrix; a
        ``num_steps`` or ``trajectory_length`` setting makes it HMC, ``max_tree_depth`` NUTS.
        Or ``numpyro.infer.NUTS`` or ``numpyro.infer.HMC`` for continuous sites, ``nx.ACS``
        or ``nx.DMALA`` for discrete ones (and, beside them, continuous ones with the ACS
        instance's ``inner_kernel``, NUTS by default; the class, or an instance whose settings
        are used).
    :param num_replicas: replicas per chain: ``"auto"`` (the default) measures the path's
        communication barrier ``Lambda`` at the first ``init`` for a set of model arguments, by
        a pilot run of this kernel's own core (``PILOT_REPLICAS`` rungs, ``PILOT_TUNING_SCANS``
        scans tuning the ladder and ``PILOT_SCANS`` measuring its swap rates, one chain, seeded
        by ``fit_base_seed``), and uses ``ceil(2 Lambda)`` replicas, at least 16 (8 per leg of
        ``reference="stabilized"``, both legs measured in one pilot run) and at most 64 or the
        memory bound (:func:`~numpyro_extras.exchange.ladder.replicas_for_barrier`), starting
        from the pilot's ladder resized to that count. Where one evaluation of a rung's
        potential (the model's density and a fitted reference's) costs at most
        ``PILOT_FREE_POTENTIAL_FLOPS`` floating-point operations (XLA's count), the extra rungs
        cost less than the pilot: ``"auto"`` then runs the floor's count (16, or 8 per leg)
        without a pilot, from the initial ladder (tuned in warm-up). Or an integer of at
        least 2, used as given. :func:`~numpyro_extras.exchange_diagnostics` reports the
        run's barrier and warns when its chains make too few round trips.
    :param reference: ``"auto"`` (the default): ``"stabilized"`` for a model with continuous
        latent sites and a proper prior, ``"fit"`` if the prior is improper, ``"prior"`` if
        the variational fit fails (with a warning) and for ACS/DMALA moves.
        ``"prior"`` (the model's prior, which must be proper; no
        fit, but a longer ladder when the posterior is far from the prior), ``"fit"`` (a
        Gaussian mixture with a component on each mode that :func:`~numpyro_extras.fit_base`
        finds by variational inference, fitted on the first ``init``; a mode it misses is
        suppressed at every ``beta < 1``), ``"stabilized"`` (both: a leg from the fitted
        mixture and a leg from the prior, joined at the posterior, each with ``num_replicas``
        rungs, or its own count for ``"auto"``; ``log Z`` combines the legs' stepping stones
        and warns when they disagree), or a :class:`~numpyro_extras.GaussianBase` /
        :class:`~numpyro_extras.MixtureBase` on the flat unconstrained space.
    :param base: a :class:`~numpyro_extras.GaussianBase` or
        :class:`~numpyro_extras.MixtureBase` on the flat unconstrained space used as the fitted
        leg's reference of ``"auto"``, ``"fit"`` or ``"stabilized"`` instead of fitting one, so
        that one :func:`~numpyro_extras.fit_base` serves several kernels (the prior leg of
        ``"stabilized"`` still covers what it misses).
    :param init_strategy: NumPyro init strategy for the fallback start of a replica whose
        reference draw is not in the target's support.
    :param dict fit_base_kwargs: keyword arguments of :func:`~numpyro_extras.fit_base` for
        ``reference="fit"`` or ``"stabilized"``, checked (names and values) when the kernel is
        built.
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
        auto = self._requested_replicas == "auto"
        self._num_replicas = None if auto else self._requested_replicas
        self._pilot: ReplicaPilot | None = None
        # The starting ladder of the run: the pilot's, resized; the initial ladder otherwise.
        self._starting_betas = None
        self._values_per_replica = None
        # "auto": NUTS or fixed-length HMC, chosen from the potential's cost at each init.
        self._auto_move = isinstance(inner_kernel, str) and inner_kernel == "auto"
        if self._auto_move:
            inner_kernel = HMC if any(name in inner_kwargs for name in _HMC_ONLY_SETTINGS) else NUTS
            self._auto_move = not any(
                name in inner_kwargs for name in _HMC_ONLY_SETTINGS + _NUTS_ONLY_SETTINGS
            )
        self._inner_kwargs = inner_kwargs
        self._acs = discrete_inner_kernel(model, inner_kernel, inner_kwargs)
        from_class = self._acs is not None and isinstance(inner_kernel, type)
        # Rebuilt with NUTS for the continuous sites if the model turns out to have some.
        self._acs_class = inner_kernel if from_class else None
        self._acs_kwargs = dict(inner_kwargs) if from_class else {}
        if self._acs is not None and not (
            isinstance(reference, str) and reference in ("prior", "auto")
        ):
            raise ValueError(
                "With ACS/DMALA moves the path starts from the prior of the discrete sites: "
                f"reference must be 'prior', got {reference!r}."
            )
        if isinstance(reference, (GaussianBase, MixtureBase)):
            self._reference = validate_base(reference)
        elif isinstance(reference, str) and reference in REFERENCES:
            self._reference = reference
        else:
            raise ValueError(
                "reference must be 'auto', 'prior', 'fit', 'stabilized', a GaussianBase or a "
                f"MixtureBase, got {reference!r}."
            )
        self._given_base = None
        if base is not None:
            if not (isinstance(reference, str) and reference in ("auto", "fit", "stabilized")):
                raise ValueError(
                    "`base` is the fitted leg's reference: pass it with reference='auto', 'fit' "
                    f"or 'stabilized', got reference={reference!r}."
                )
            if self._acs is not None:
                raise ValueError(
                    "With ACS/DMALA moves the path starts from the prior of the discrete sites: "
                    "a `base` has no place in it."
                )
            self._given_base = validate_base(base)
        # The reference the path of the last init starts from ("auto" resolved).
        self._path_reference = None
        if potential_fn is not None and self._given_base is not None and reference != "stabilized":
            self._reference, self._given_base = self._given_base, None
        elif potential_fn is not None and isinstance(reference, str):
            raise ValueError(
                "With `potential_fn`, `reference` must be a GaussianBase or MixtureBase on the "
                "same flat space: a potential has no prior, and fitting one needs a model."
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
        self._flat_model: FlatModel | None = None
        # The model's prior/likelihood split, for the prior path (or the prior leg).
        self._split = None
        self._discrete_target: DiscreteTarget | None = None
        self._path: TemperedPath | None = None
        # For reference="stabilized": the prior leg's path, pilot, count and starting ladder.
        self._prior_leg_path: TemperedPath | None = None
        self._prior_leg_pilot: ReplicaPilot | None = None
        self._num_prior_replicas = None if auto else self._requested_replicas
        self._prior_starting_betas = None
        self._fitted_reference = None
        self._reference_fit_problems = ()

    @property
    def num_replicas(self) -> int | None:
        """Replicas per chain: as given, or for ``"auto"`` the count the pilot of the last
        ``init`` chose (``None`` before)."""
        return self._num_replicas

    @property
    def inner_algo(self) -> str | None:
        """The HMC-family move of the rungs, ``"NUTS"`` or ``"HMC"`` (for ``inner_kernel="auto"``
        the one the last ``init`` chose), or ``None`` for ACS/DMALA moves."""
        return self._algo

    @property
    def num_prior_replicas(self) -> int | None:
        """For ``reference="stabilized"``, the prior leg's replicas per chain (``num_replicas``
        is then the fitted leg's); ``None`` otherwise, or before the pilot of ``"auto"``."""
        return self._num_prior_replicas if self.stabilized else None

    @property
    def stabilized(self) -> bool:
        """Whether the replicas run on two legs joined at the posterior (``reference=
        "stabilized"``, or ``"auto"`` on a model with continuous sites and a proper prior whose
        fit succeeded): the reference of the last ``init``, or before it the one intended."""
        if self._path_reference is not None:
            return isinstance(self._path_reference, str) and self._path_reference == "stabilized"
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
        return self._prior_leg_pilot

    @property
    def prior_leg_path(self) -> TemperedPath | None:
        """For ``reference="stabilized"``: the prior leg's path (the fitted leg's is
        :attr:`path`)."""
        return self._prior_leg_path

    @property
    def pilot(self) -> ReplicaPilot | None:
        """What the pilot of ``num_replicas="auto"`` measured at the last ``init`` (its barrier,
        count and ladder); ``None`` before, for a given count, or where the potential was cheap
        enough to run without a pilot."""
        return self._pilot

    @property
    def pilot_barrier(self) -> float | None:
        """The communication barrier the pilot measured (``None`` without a pilot)."""
        return None if self._pilot is None else self._pilot.barrier

    @property
    def path(self) -> TemperedPath | None:
        """The tempered path of the last ``init`` (``None`` before)."""
        return self._path

    @property
    def reference(self):
        """``"prior"``, or the base density the path starts from (fitted on the first ``init``
        for ``reference="fit"`` and ``"stabilized"``)."""
        reference = self._reference if self._path_reference is None else self._path_reference
        if isinstance(reference, str) and reference in ("fit", "stabilized"):
            return self._fitted_reference
        return reference

    @property
    def flat_model(self) -> FlatModel | None:
        """The flat potential of a model with continuous latent sites (``None`` before ``init``
        and for ACS/DMALA moves)."""
        return self._flat_model

    @property
    def acs_kernel(self) -> ACS | None:
        """The ACS/DMALA kernel whose settings and model plumbing the replicas' moves use
        (``None`` for HMC/NUTS moves)."""
        return self._acs

    @property
    def discrete_target(self) -> DiscreteTarget | None:
        """The model as the ACS/DMALA moves read it (``None`` before ``init`` and for HMC/NUTS
        moves)."""
        return self._discrete_target

    @property
    def latent_sites(self) -> tuple[str, ...]:
        """The names of the latent sites the replicas move (empty before ``init``)."""
        target = self._discrete_target
        if target is not None:
            return (*target.continuous_sites, *target.variables)
        return () if self._flat_model is None else self._flat_model.latent_sites

    @property
    def reference_fit_problems(self) -> tuple[str, ...]:
        """What the fit of ``reference="fit"`` warned about its coverage of the posterior's modes
        (empty if nothing, or for another reference). A mode the reference misses is reached
        only by the moves near ``beta = 1``, so its mass can be missed with a small error bar:
        the run's diagnostics repeat these warnings (for ``reference="stabilized"`` only when
        its two legs' ``log Z`` disagree: its prior leg reaches what the fit missed)."""
        return self._reference_fit_problems

    @property
    def default_fields(self):
        fields = ("z", "log_likelihood", "swap_accept_prob", "diverging")
        # Read by MCMC before init: "auto" collects the prior leg's fields, which a run that
        # falls back to one ladder leaves empty.
        if self._intends_stabilized:
            fields += ("prior_log_likelihood", "prior_swap_accept_prob")
        return fields

    def _constrain_fn(self):
        if self._discrete_target is not None:
            return self._discrete_target.constrain_fn
        return None if self._flat_model is None else self._flat_model.constrain_fn

    def _forget_target(self):
        self._flat_model = self._path = self._fitted_reference = self._prior_leg_path = None
        self._split = None
        self._path_reference = None
        self._discrete_target = None
        self._forget_count()
        self._reference_fit_problems = ()
        if self._acs is not None:
            # The copy's ACS must read the wrapped model, not share the original's plumbing.
            self._acs = discrete_inner_kernel(self._model, self._acs, {})

    def _prepare_discrete(self, key, model_args, model_kwargs):
        """The ACS plumbing and the prior path on the discrete sites' values (and the flat
        continuous ones, for a mixed model)."""
        continuous = continuous_latent_sites(self._model, model_args, model_kwargs)
        if continuous and not self._acs.has_inner_kernel and self._acs_class is not None:
            # As nx.ACS(model, inner_kernel=NUTS): the class's settings, NUTS at its defaults.
            self._acs = self._acs_class(self._model, inner_kernel=NUTS, **self._acs_kwargs)
        if not continuous and self._acs.has_inner_kernel:
            raise ValueError(
                "The ACS/DMALA inner kernel has an inner_kernel for continuous sites, but the "
                "model has none: pass nx.ACS without inner_kernel."
            )
        target = self._acs.discrete_target(model_args, model_kwargs)
        values = sum(variable.size * variable.num_values for variable in target.variables.values())
        values += target.dimension
        self._check_memory(
            values, f"{values} discrete values (sites x values) and unconstrained dimensions"
        )
        self._discrete_target = target
        self._path = self._prior_path(key, lambda: target.split)

    def _forget_count(self):
        if self._requested_replicas == "auto":
            self._num_replicas = self._num_prior_replicas = None
        self._pilot = self._starting_betas = self._values_per_replica = None
        self._prior_leg_pilot = self._prior_starting_betas = None

    def _check_memory(self, values, description):
        """Raise if the replicas of one chain would hold more than ``MAX_REPLICA_VALUES``
        values (for ``"auto"``: if not even two would fit)."""
        self._values_per_replica = values
        count = self._requested_replicas
        if self.stabilized:
            values *= 2  # a replica of each leg per rung count
        if count == "auto":
            if 2 * values > MAX_REPLICA_VALUES:
                raise ValueError(
                    f"Two replicas of a model with {description} exceed the memory bound of "
                    f"{MAX_REPLICA_VALUES} values per chain."
                )
            return
        if values * count > MAX_REPLICA_VALUES:
            raise ValueError(
                f"{count} replicas of a model with {description} exceed the memory bound of "
                f"{MAX_REPLICA_VALUES} values per chain; use fewer replicas."
            )

    def _prepare_target(self, model_args, model_kwargs):
        """Build the flat potential and the tempered path for these model arguments, and for
        ``num_replicas="auto"`` choose the count by a pilot run on that path."""
        self._forget_count()
        self._prepare_path(model_args, model_kwargs)
        choose_move = self._auto_move and self._acs is None
        if not (choose_move or self._requested_replicas == "auto"):
            return
        cheap = self._potential_flops() <= PILOT_FREE_POTENTIAL_FLOPS
        if choose_move:
            self._algo, self._hmc_settings = (
                hmc_settings(
                    NUTS, max_tree_depth=CHEAP_POTENTIAL_MAX_TREE_DEPTH, **self._inner_kwargs
                )
                if cheap
                else hmc_settings(HMC, num_steps=DEAR_POTENTIAL_NUM_STEPS, **self._inner_kwargs)
            )
        if self._requested_replicas != "auto":
            return
        if cheap:
            legs = 2 if self.stabilized else 1
            self._num_replicas = replicas_for_barrier(
                0.0,
                self._values_per_replica * legs,
                minimum=MIN_AUTO_LEG_REPLICAS if self.stabilized else MIN_AUTO_REPLICAS,
            )
            self._num_prior_replicas = self._num_replicas if self.stabilized else None
            return
        self._run_pilot()

    def _potential_flops(self) -> float:
        """Floating-point operations of one evaluation of a rung's potential on the prepared
        path, the model's density and the reference's (traced and lowered at the reference's
        draw shape, not compiled)."""
        path = self._path
        position = jax.eval_shape(path.sample_reference_fn, jax.random.PRNGKey(0))
        return evaluation_flops(path.potential_fn(1.0), position)

    def _run_pilot(self):
        """Measure the communication barrier of the path (of each leg, for a stabilised
        reference, in one run of both) with a short run of the core on ``PILOT_REPLICAS`` rungs
        per leg, and set the count and starting ladder from it."""
        values = self._values_per_replica * (2 if self.stabilized else 1)
        pilot_count = min(PILOT_REPLICAS, MAX_AUTO_REPLICAS, MAX_REPLICA_VALUES // values)
        # Its own stream, apart from the fit's: the same for every chain method and key.
        position_key, run_key = jax.random.split(
            jax.random.fold_in(jax.random.PRNGKey(self._fit_base_seed), 1)
        )
        scan, settings = self._scan(pilot_count, pilot_count)
        description = "replica exchange" + (" (both legs)" if self.stabilized else "")
        positions = quick_jit(
            lambda key: self._initial_positions(key, None, pilot_count, pilot_count)
        )(position_key)
        state = quick_jit(functools.partial(scan.init, num_warmup=PILOT_TUNING_SCANS, **settings))(
            positions, run_key
        )
        step = scan_step(scan.parts(PILOT_TUNING_SCANS))

        @quick_jit
        def run_chunk(state, _):
            return jax.lax.fori_loop(0, PILOT_CHUNK, lambda _, state: step(state), state), None

        num_scans = PILOT_TUNING_SCANS + PILOT_SCANS
        state, _ = run_chunks(
            run_chunk,
            state,
            [(None, PILOT_CHUNK)] * (num_scans // PILOT_CHUNK),
            total=num_scans,
            description=f"{description}: pilot scans",
            progress_bar=calling_mcmc_progress_bar(),
        )
        if not self.stabilized:
            self._pilot = self._pilot_result(state, values, MIN_AUTO_REPLICAS)
            self._num_replicas = self._pilot.num_replicas
            self._starting_betas = self._pilot.starting_betas
            return
        self._pilot = self._pilot_result(state.fit_leg, values, MIN_AUTO_LEG_REPLICAS)
        self._num_replicas = self._pilot.num_replicas
        self._starting_betas = self._pilot.starting_betas
        self._prior_leg_pilot = self._pilot_result(state.prior_leg, values, MIN_AUTO_LEG_REPLICAS)
        count = self._prior_leg_pilot.num_replicas
        if (count - self._num_replicas) % 2:
            # The joined line alternates even and odd gaps only if both legs have counts of the
            # same parity.
            count = count + 1 if count < MAX_AUTO_REPLICAS else count - 1
        self._num_prior_replicas = count
        pilot = self._prior_leg_pilot
        self._prior_starting_betas = np.asarray(
            equalized_ladder(pilot.betas, pilot.swap_accept_rate, count)
        )

    @staticmethod
    def _pilot_result(state, values, minimum) -> ReplicaPilot:
        """What a pilot's final state of one ladder measured, and the count chosen from it."""
        betas, accept_rates = swap_rates(state)
        barrier = float(communication_barrier(accept_rates)[-1])
        count = replicas_for_barrier(barrier, values, minimum=minimum)
        return ReplicaPilot(
            barrier,
            count,
            np.asarray(betas),
            np.asarray(accept_rates),
            np.asarray(equalized_ladder(betas, accept_rates, count)),
        )

    def _prepare_path(self, model_args, model_kwargs):
        """Build the flat potential and the tempered path for these model arguments."""
        key = jax.random.PRNGKey(self._fit_base_seed)
        if self._acs is not None:
            self._path_reference = "prior"
            self._prepare_discrete(key, model_args, model_kwargs)
            return
        if self._model is None:
            base = self._path_reference = self._reference
            self._flat_model = flat_model_from_potential(self._potential_fn, base.loc)
            self._check_memory(
                self._flat_model.dimension, f"a potential of dimension {self._flat_model.dimension}"
            )
            self._path = reference_path(self._potential_fn, base)
            return
        self._flat_model = flatten_model(
            key,
            self._model,
            model_args,
            model_kwargs,
            init_strategy=self._init_strategy,
            kernel_name=f"{type(self).__name__} with HMC/NUTS moves",
            discrete_advice=(
                "For a model with discrete latent sites (alone or beside continuous ones), pass "
                "inner_kernel=nx.ACS (or nx.DMALA)."
            ),
        )
        dimension = self._flat_model.dimension
        reference = self._reference
        prior = None
        if isinstance(reference, str) and reference in ("prior", "stabilized", "auto"):

            def split_fn():
                self._split = split_model(key, self._model, model_args, model_kwargs)
                return self._split

            try:
                prior = self._prior_path(key, split_fn)
            except ValueError:
                if reference != "auto":
                    raise
                # An improper prior has no prior leg: the fitted reference alone.
                reference = "fit"
            else:
                reference = "stabilized" if reference == "auto" else reference
        if reference in ("fit", "stabilized"):
            try:
                base = self._fit_reference(model_args, model_kwargs, reference == "stabilized")
            except RuntimeError as error:
                if self._reference != "auto" or prior is None:
                    raise
                warnings.warn(
                    f"The variational fit of the reference failed ({error}); the replicas run "
                    "from the prior (reference='prior').",
                    stacklevel=find_stack_level(),
                )
                reference = "prior"
        self._path_reference = reference
        self._check_memory(dimension, f"{dimension} unconstrained dimensions")
        if reference == "prior":
            self._path = prior
            return
        if not isinstance(reference, str):
            base = validate_base(reference, dimension)
        self._path = reference_path(self._flat_model.potential_fn, base)
        if reference == "stabilized":
            self._prior_leg_path = prior

    def _fit_reference(self, model_args, model_kwargs, stabilized):
        """The Gaussian mixture of :func:`~numpyro_extras.fit_base` for these model arguments
        (or the ``base`` given to the kernel); its coverage problems are kept for the run's
        diagnostics."""
        if self._given_base is not None:
            self._fitted_reference = validate_base(self._given_base, self._flat_model.dimension)
            self._reference_fit_problems = ()
            return self._fitted_reference
        # The flat model just built is handed down, so that the fit does not trace and compile
        # the model's initialisation again.
        fit_kwargs = {
            "progress_bar": calling_mcmc_progress_bar(),
            "flat_model": self._flat_model,
            **self._fit_base_kwargs,
        }
        self._fitted_reference, self._reference_fit_problems, _ = fit_base_for_kernel(
            self._model,
            model_args,
            model_kwargs,
            self._fit_base_seed,
            fit_kwargs,
            coverage_checked_by_run=stabilized,
        )
        return self._fitted_reference

    def _prior_path(self, key, split_fn):
        """The prior path of the model's split (``split_fn()``), checked at a prior draw."""
        # Name the reference the user asked for: a stabilised run needs the prior for its prior leg.
        asked = (
            "reference='stabilized' (its prior leg)"
            if isinstance(self._reference, str) and self._reference == "stabilized"
            else "reference='prior'"
        )
        try:
            split = split_fn()
            path = prior_path(split)
            # One compiled program: run op by op, each operation of the prior compiles apart.
            log_prior_at_draw = quick_jit(
                lambda key: path.reference_potential_fn(path.sample_reference_fn(key))
            )(key)
        except NotImplementedError as error:
            raise ValueError(
                f"{asked} needs exact draws from the model's prior, but a latent site "
                "cannot be sampled (an improper prior such as ImproperUniform has no beta = 0 "
                "replica). Use reference='fit' (a fitted Gaussian mixture; the default "
                "reference='auto' picks it) or pass a GaussianBase."
            ) from error
        if self._flat_model is not None and split.dimension != self._flat_model.dimension:
            raise ValueError(
                f"The model's prior/likelihood split has {split.dimension} unconstrained "
                f"dimensions but its potential {self._flat_model.dimension}."
            )
        if not np.isfinite(float(log_prior_at_draw)):
            raise ValueError(
                f"The prior's log density is not finite at a prior draw; {asked} needs "
                "a proper prior. Use reference='fit' or pass a GaussianBase."
            )
        return path

    @property
    def _mixed(self) -> bool:
        target = self._discrete_target
        return target is not None and bool(target.continuous_sites)

    def _build(self, num_warmup, tag):
        scan, settings = self._scan(
            self._num_replicas,
            self._num_prior_replicas,
            tag,
            self._starting_betas,
            self._prior_starting_betas,
        )
        init_one, step_one = fixed_target_functions(
            scan.init,
            lambda state, num_warmup: scan_step(scan.parts(num_warmup))(state),
            num_warmup,
            settings,
        )
        step_batch = batched_scan_step(scan.parts(num_warmup))
        return init_one, step_one, None, lambda states, *model_inputs: step_batch(states)

    def _scan(self, num_replicas, num_prior_replicas=None, tag=None, betas=None, prior_betas=None):
        """``(scan, settings)``: the :class:`~numpyro_extras.exchange.chains.ExchangeScan` of
        the core with ``num_replicas`` rungs on the prepared path (and ``num_prior_replicas``
        on the prior leg of a stabilised reference), starting from ``betas`` and
        ``prior_betas`` (default the initial ladder), and the settings of its ``init``."""
        settings = self._hmc_settings
        if self.stabilized:
            scan = stabilized_exchange(
                legged_hmc_moves(self._split, self._fitted_reference, self._algo),
                self._flat_model.unravel_fn,
                num_fit_replicas=num_replicas,
                num_prior_replicas=num_prior_replicas,
                tag=tag,
                fit_betas=betas,
                prior_betas=prior_betas,
            )
            return scan, settings
        if self._acs is not None:
            target = self._discrete_target
            acs = self._acs
            acs_settings = {
                "schedule": acs.schedule,
                "settings": acs.tuning_settings,
                "num_tuning_chains": acs.num_tuning_chains,
                "discrete_steps": acs.moves_per_transition(self._mixed),
            }
            if self._mixed:
                algo, settings = acs.inner_settings
                moves = mixed_moves(
                    self._path,
                    target.variables,
                    algo,
                    num_tuning_sweeps=acs.num_tuning_sweeps,
                    **acs_settings,
                )

                def unravel_fn(position):
                    return {
                        **target.continuous_unravel_fn(position.continuous),
                        **target.site_values_fn(position.discrete),
                    }

            else:
                moves = acs_moves(self._path, target.variables, **acs_settings)
                unravel_fn = target.site_values_fn
        else:
            moves = hmc_moves(self._path, self._algo)
            unravel_fn = self._flat_model.unravel_fn
        scan = exchange_scan(moves, unravel_fn, num_replicas=num_replicas, tag=tag, betas=betas)
        return scan, settings

    def _discrete_positions(self, rng_key, init_params, num_replicas):
        """One chain's starting states, index arrays with leading axis ``N`` (with the flat
        continuous positions, ``(N, D)``, for a mixed model): ``init_params`` for every rung if
        given (continuous sites unconstrained), else prior draws."""
        target = self._discrete_target
        if init_params is None:
            x, indices = target.sample_initial_fn(rng_key, num_replicas)
            return MixedPosition(x, indices) if self._mixed else indices
        missing = [
            name
            for name in (*target.variables, *target.continuous_sites)
            if name not in init_params
        ]
        if missing:
            raise ValueError(f"init_params lack the latent sites {missing}.")
        position = decode(target.variables, init_params)
        if self._mixed:
            continuous = {name: init_params[name] for name in target.continuous_sites}
            x = ravel_pytree(continuous)[0]
            if x.shape[-1] != target.dimension:
                raise ValueError(
                    f"init_params have {x.shape[-1]} unconstrained dimensions, the model "
                    f"{target.dimension}."
                )
            position = MixedPosition(x, position)
        return jax.tree.map(
            lambda leaf: jnp.broadcast_to(leaf, (num_replicas,) + leaf.shape), position
        )

    def _initial_positions(self, rng_key, init_params, num_replicas=None, num_prior_replicas=None):
        """One chain's starting points, ``(N, D)`` for the kernel's ``N`` rungs (the fitted
        leg's then the prior leg's, for a stabilised reference; other counts if given):
        ``init_params`` for every rung if given, else reference draws, each replaced by the
        model's initial point where the rung's tempered density is not finite there."""
        num_replicas = self._num_replicas if num_replicas is None else num_replicas
        if self._discrete_target is not None:
            return self._discrete_positions(rng_key, init_params, num_replicas)
        if not self.stabilized:
            return self._leg_positions(rng_key, init_params, num_replicas, self._path)
        if num_prior_replicas is None:
            num_prior_replicas = self._num_prior_replicas
        fit_key, prior_key = jax.random.split(rng_key)
        return jnp.concatenate(
            [
                self._leg_positions(fit_key, init_params, num_replicas, self._path),
                self._leg_positions(
                    prior_key, init_params, num_prior_replicas, self._prior_leg_path
                ),
            ]
        )

    def _leg_positions(self, rng_key, init_params, num_replicas, path):
        """Starting points of ``num_replicas`` rungs of ``path`` (see
        :meth:`_initial_positions`)."""
        if self._discrete_target is not None:
            return self._discrete_positions(rng_key, init_params, num_replicas)
        fallback = self._flat_model.initial_position
        if init_params is not None:
            position = jnp.asarray(
                init_params if self._model is None else ravel_pytree(init_params)[0]
            )
            # Its own length, so that a wrong one reaches the dimension check with a clear error.
            return jnp.broadcast_to(position, (num_replicas,) + position.shape[-1:])
        keys = jax.random.split(rng_key, num_replicas)
        draws = jax.vmap(path.sample_reference_fn)(keys).astype(fallback.dtype)
        betas = jnp.linspace(0.0, 1.0, num_replicas, dtype=fallback.dtype)

        def finite_at(position, beta):
            value, gradient = jax.value_and_grad(path.potential_fn(beta))(position)
            return jnp.isfinite(value) & jnp.all(jnp.isfinite(gradient))

        finite = jax.vmap(finite_at)(draws, betas)
        return jnp.where(finite[:, None], draws, fallback)

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs):
        discrete = self._discrete_target is not None
        positions, chain_keys = self._starting_positions(
            rng_key,
            init_params,
            batched,
            self._initial_positions,
            None if discrete else self._flat_model.dimension,
        )
        if discrete:
            # Checked after init, where every rung has its tuned starting state.
            return positions, chain_keys
        # Drawn starts are finite already: a draw whose tempered density or gradient is not
        # finite is replaced by the model's initial point. Only given ones need the check.
        if init_params is not None and not_jax_tracer(positions):
            rungs = self._num_replicas + (self._num_prior_replicas if self.stabilized else 0)
            starts = np.reshape(np.asarray(positions), (-1, rungs, positions.shape[-1]))
            # The posterior rung: the last of the (fitted) leg that comes first.
            check_finite_potential(
                self._path.potential_fn(1.0), starts[:, self._num_replicas - 1], "the start"
            )
        return positions, chain_keys

    def _check_initial_state(self, state):
        if self._discrete_target is None or not not_jax_tracer(state.log_likelihood):
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
            if self._acs is not None and not self._mixed
            else f"{int(state.num_steps)} steps of size {float(state.step_size):.2e}. "
        )
        return (
            f"{moves}acc. prob={float(state.mean_accept_prob):.2f} swap rate={swap_rate:.2f} "
            f"round trips={int(statistics.num_round_trips)}"
        )
