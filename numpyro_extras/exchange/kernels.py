"""Replica exchange (non-reversible parallel tempering) as a NumPyro kernel.

A thin :class:`~numpyro_extras.shell.kernel.ExtrasKernel` over the functional core of
:mod:`numpyro_extras.exchange.core` and its shell in :mod:`numpyro_extras.exchange.chains`: it
reads the model into a tempered path (:mod:`numpyro_extras.exchange.target`), chooses the rungs'
move, plans the replicas and starts and runs them (:mod:`numpyro_extras.exchange.replicas`,
:mod:`numpyro_extras.exchange.pilot`). ``mcmc.get_samples()`` are
the ``beta = 1`` replica's draws: the posterior.
"""

from __future__ import annotations

import functools

import numpy as np
from numpyro.infer import HMC, NUTS
from numpyro.infer.initialization import init_to_uniform

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
    potential_flops,
    replica_count_setting,
    requested_plan,
)
from numpyro_extras.exchange.replicas import (
    check_given_starts,
    check_tuned_starts,
    initial_positions,
    plan_replicas,
    replica_scan,
)
from numpyro_extras.exchange.target import (
    EMPTY_TARGET,
    discrete_inner_kernel,
    intends_stabilized,
    read_exchange_target,
    target_settings,
)
from numpyro_extras.model.potential import FlatModel
from numpyro_extras.shell.devices import check_devices, leading_axis_sharding
from numpyro_extras.shell.kernel import ExtrasKernel, fixed_target_functions, hmc_settings

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


def chosen_move(path, auto_move, num_replicas, algo, settings, inner_kwargs):
    """The move of the rungs and whether the potential is cheap, measured only where the choice
    of ``inner_kernel="auto"`` or ``num_replicas="auto"`` needs it.

    :param path: the target's :class:`~numpyro_extras.exchange.path.TemperedPath`.
    :param bool auto_move: whether the move is still to be chosen from the potential's cost.
    :param num_replicas: the kernel's count, an integer or ``"auto"``.
    :param algo: the move as given (``"NUTS"``, ``"HMC"``, or ``None`` for ACS/DMALA moves).
    :param dict settings: its settings.
    :param dict inner_kwargs: the kernel's settings of the inner kernel.
    :return: ``(algo, settings, cheap)``; ``cheap`` is ``None`` where nothing needed it, else
        whether one evaluation of a rung's potential costs at most
        ``PILOT_FREE_POTENTIAL_FLOPS`` floating-point operations.

    **Example:**

    .. code-block:: python

        algo, settings, cheap = chosen_move(target.path, True, "auto", "NUTS", {}, {})
    """
    if not (auto_move or num_replicas == "auto"):
        return algo, settings, None
    cheap = potential_flops(path) <= PILOT_FREE_POTENTIAL_FLOPS
    if auto_move:
        algo, settings = auto_move_settings(cheap, inner_kwargs)
    return algo, settings, cheap


class ReplicaExchange(ExtrasKernel):
    """Non-reversible parallel tempering (Syed, Bouchard-Cote, Deligiannidis and Doucet, JRSSB
    2022) for any NumPyro model with continuous latent sites, discrete ones, or both.

    Each chain runs ``num_replicas`` copies of the model at inverse temperatures
    ``0 = beta_0 < ... < beta_{N-1} = 1`` of the path ``log r(x) + beta l(x)`` (their eq. 2)
    from a reference ``r`` (the prior, a Gaussian mixture fitted to the posterior, or both as two
    legs joined at the posterior) to the posterior. A scan moves every replica but the reference
    one with ``inner_kernel`` on its own tempered target, renews the ``beta = 0`` replica with an
    exact reference draw, and offers swaps between neighbours, the even gaps on even scans and
    the odd gaps on odd ones, each accepted with probability ``min(1, exp((beta_{i+1} - beta_i)
    (l(x_i) - l(x_{i+1}))))`` (their Algorithm 1 and eq. 3); in warm-up the ladder is re-tuned to
    equal swap rejection rates, then frozen. The functional core is
    :mod:`numpyro_extras.exchange.core`; the options are described in ``docs/replica_exchange.md``.

    :param model: a NumPyro model with continuous latent sites (or, with an ACS/DMALA inner
        kernel, discrete ones, or both).
    :param potential_fn: alternatively, ``-log`` of the unnormalised target on flat 1-D
        positions; then ``reference`` must be a :class:`~numpyro_extras.GaussianBase` or
        :class:`~numpyro_extras.MixtureBase`.
    :param inner_kernel: ``"auto"`` (NUTS with shallow trees where the potential is cheap, else
        fixed-length HMC), ``NUTS`` / ``HMC``, or ``nx.ACS`` / ``nx.DMALA`` for discrete sites:
        the class, or an instance whose settings are used.
    :param num_replicas: replicas per chain (per leg of ``"stabilized"``): an integer of at
        least 2, or ``"auto"``: the count and starting ladder of a pilot run measuring the
        communication barrier (the floor's count where the potential is cheap).
    :param reference: ``"auto"`` (``"stabilized"`` where it can be), ``"prior"``, ``"fit"`` (a
        Gaussian mixture fitted with :func:`~numpyro_extras.fit_base`), ``"stabilized"`` (a fitted
        leg and a prior leg, Surjanovic et al., NeurIPS 2022, section 4), or a
        :class:`~numpyro_extras.GaussianBase` / :class:`~numpyro_extras.MixtureBase`.
    :param base: a base used as the fitted leg's reference instead of fitting one.
    :param init_strategy: NumPyro init strategy for the fallback start of a replica whose
        reference draw is not in the target's support.
    :param dict fit_base_kwargs: keyword arguments of :func:`~numpyro_extras.fit_base`.
    :param int fit_base_seed: seed of the fit and of the pilot run.
    :param devices: split the rungs' moves over these devices: a number ``n`` (the first ``n``
        of ``jax.devices()``) or a sequence of ``jax.Device``; each scan moves every device's
        share of the rungs (of every chain, with ``chain_method="vectorized"``) there, and the
        swaps gather them. The draws are those of one device. ``None``: JAX's default device.
    :param inner_kwargs: settings of the inner kernel (``step_size``, ``dense_mass``,
        ``max_tree_depth``, ``num_steps``, ... or ``nx.ACS``'s).
    :return: a NumPyro kernel; ``mcmc.get_samples()`` are the ``beta = 1`` replica's draws,
        :func:`numpyro_extras.log_marginal_likelihood` gives the stepping-stone estimate of
        ``log Z`` and :func:`numpyro_extras.exchange_diagnostics` the swap rates, round trips and
        barrier.

    **Example:**

    .. code-block:: python

        kernel = nx.ReplicaExchange(model, num_replicas=8)
        mcmc = MCMC(kernel, num_warmup=300, num_samples=1000, num_chains=2)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        nx.log_marginal_likelihood(mcmc)  # stepping stone over the ladder
        nx.exchange_diagnostics(mcmc)  # swap rates, round trips, barrier
        mcmc = MCMC(nx.ReplicaExchange(nx.ising_model, inner_kernel=nx.ACS), num_warmup=200,
                    num_samples=500)
        mcmc.run(jax.random.PRNGKey(0), 4, coupling=0.6)
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
        devices=None,
        **inner_kwargs,
    ):
        super().__init__(model, potential_fn)
        devices = check_devices(devices)
        self._lane_sharding = None if devices is None else leading_axis_sharding(devices, "rungs")
        self._requested_replicas = replica_count_setting(num_replicas)
        # "auto": NUTS or fixed-length HMC, chosen from the potential's cost at each init.
        inner_kernel, self._auto_move = resolved_inner_kernel(inner_kernel, inner_kwargs)
        self._inner_kwargs = inner_kwargs
        self._acs, self._settings = target_settings(
            model,
            potential_fn,
            inner_kernel,
            inner_kwargs,
            reference=reference,
            base=base,
            init_strategy=init_strategy,
            fit_base_kwargs=fit_base_kwargs,
            fit_base_seed=fit_base_seed,
            kernel_name=type(self).__name__,
        )
        self._algo, self._hmc_settings = (
            (None, {})
            if self._acs is not None
            else hmc_settings(inner_kernel, owner_model=model, **inner_kwargs)
        )
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
        return intends_stabilized(self._settings.reference, self._model, self._acs is not None)

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
        reference = self._settings.reference if reference is None else reference
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
        return self._target.latent_sites

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
        return self._target.constrain_fn

    def _forget_target(self):
        self._target = EMPTY_TARGET
        self._plan = requested_plan(self._requested_replicas)
        if self._acs is not None:
            # The copy's ACS must read the wrapped model, not share the original's plumbing.
            self._acs = discrete_inner_kernel(self._model, self._acs, {})

    def _prepare_target(self, model_args, model_kwargs):
        """Read the model into its tempered path(s) for these model arguments, choose the move
        of ``inner_kernel="auto"`` from the potential's cost, and plan the replicas. The kernel's
        state changes only once all of it succeeded, so that a failed ``init`` leaves the last
        target whole."""
        count = self._requested_replicas
        acs, target = read_exchange_target(
            self._model,
            self._potential_fn,
            model_args,
            model_kwargs,
            self._acs,
            count,
            self._settings,
        )
        auto_move = self._auto_move and acs is None
        algo, settings, cheap = chosen_move(
            target.path, auto_move, count, self._algo, self._hmc_settings, self._inner_kwargs
        )
        plan = plan_replicas(
            target, acs, algo, settings, count, cheap, self._settings.fit_base_seed
        )
        self._acs, self._target, self._plan = acs, target, plan
        self._algo, self._hmc_settings = algo, settings

    def _build(self, num_warmup, tag):
        moves = (self._target, self._acs, self._algo, self._hmc_settings)
        scan, settings = replica_scan(*moves, self._plan, tag)
        lane_sharding = self._lane_sharding
        init_one, step_one = fixed_target_functions(
            scan.init,
            lambda state, num_warmup: scan_step(scan.parts(num_warmup), lane_sharding)(state),
            num_warmup,
            settings,
        )
        step_batch = batched_scan_step(scan.parts(num_warmup), lane_sharding)
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
        check_tuned_starts(state, self._target)

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
