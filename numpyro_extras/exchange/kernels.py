"""Replica exchange (non-reversible parallel tempering) as a NumPyro kernel.

A thin :class:`~numpyro_extras.kernel.ExtrasKernel` over the functional core of
:mod:`numpyro_extras.exchange.chains`: it reads the model into a tempered path
(:mod:`numpyro_extras.exchange.path`), starts the replicas and runs them. ``mcmc.get_samples()``
are the ``beta = 1`` replica's draws: the posterior.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer import NUTS
from numpyro.infer.initialization import init_to_uniform
from numpyro.util import not_jax_tracer

from numpyro_extras.bases import GaussianBase, MixtureBase, validate_base
from numpyro_extras.exchange.chains import replica_exchange
from numpyro_extras.exchange.path import TemperedPath, prior_path, reference_path
from numpyro_extras.kernel import (
    ExtrasKernel,
    calling_mcmc_progress_bar,
    fixed_target_functions,
    hmc_settings,
)
from numpyro_extras.potential import (
    FlatModel,
    check_finite_potential,
    flat_model_from_potential,
    flatten_model,
    split_model,
)
from numpyro_extras.tempering.base_fit import fit_base, fit_base_for_kernel
from numpyro_extras.validation import check_count

__all__ = ["ReplicaExchange", "DEFAULT_NUM_REPLICAS", "MAX_REPLICA_VALUES"]

DEFAULT_NUM_REPLICAS = 16
# Replicas x unconstrained dimensions of one chain, a bound on the state's size (positions,
# gradients and a mass matrix per replica).
MAX_REPLICA_VALUES = 2_000_000


class ReplicaExchange(ExtrasKernel):
    """Non-reversible parallel tempering (Syed, Bouchard-Cote, Deligiannidis and Doucet, JRSSB
    2022) for any NumPyro model with continuous latent sites.

    Each chain runs ``num_replicas`` copies of the model at inverse temperatures
    ``0 = beta_0 < ... < beta_{N-1} = 1`` of the path ``log r(x) + beta l(x)`` from a reference
    ``r`` to the posterior (:mod:`numpyro_extras.exchange.path`): by default a Gaussian mixture
    fitted to the posterior's modes (the variational reference of Surjanovic et al., NeurIPS
    2022), so that the ladder is short and states jump between the modes the fit found at
    ``beta = 0``, while modes it missed are still reached by the moves and swaps above it.
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

    :param model: a NumPyro model with continuous latent sites.
    :param potential_fn: alternatively, ``-log`` of the unnormalised target on flat 1-D
        positions; then ``reference`` must be a :class:`~numpyro_extras.GaussianBase` or
        :class:`~numpyro_extras.MixtureBase`.
    :param inner_kernel: ``numpyro.infer.NUTS`` or ``numpyro.infer.HMC`` (the class, or an
        instance whose settings are used), the move of every replica.
    :param int num_replicas: replicas per chain (at least 2); about twice the communication
        barrier that :func:`~numpyro_extras.exchange_diagnostics` reports is enough.
    :param reference: ``"fit"`` (a Gaussian mixture with a component on each mode that
        :func:`~numpyro_extras.fit_base` finds by variational inference, fitted on the first
        ``init``), ``"prior"`` (the model's prior, which must be proper; no fit, but a longer
        ladder when the posterior is far from the prior), or a
        :class:`~numpyro_extras.GaussianBase` / :class:`~numpyro_extras.MixtureBase` on the flat
        unconstrained space.
    :param init_strategy: NumPyro init strategy for the fallback start of a replica whose
        reference draw is not in the target's support.
    :param dict fit_base_kwargs: keyword arguments of :func:`~numpyro_extras.fit_base` for
        ``reference="fit"``.
    :param int fit_base_seed: seed of the fit, the same for every chain method.
    :param inner_kwargs: settings of the HMC/NUTS move (``step_size``, ``dense_mass``,
        ``target_accept_prob``, ``max_tree_depth``, ``num_steps``, ...).

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.ReplicaExchange(model), num_warmup=1000, num_samples=2000, num_chains=4)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        mcmc.print_summary()                   # the posterior, every mode with its mass
        nx.log_marginal_likelihood(mcmc)       # stepping stone over the ladder
        nx.exchange_diagnostics(mcmc)          # swap rates, round trips, barrier
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
        inner_kernel=NUTS,
        num_replicas=DEFAULT_NUM_REPLICAS,
        reference="prior",
        init_strategy=init_to_uniform,
        fit_base_kwargs=None,
        fit_base_seed=0,
        **inner_kwargs,
    ):
        super().__init__(model, potential_fn)
        self._num_replicas = check_count("num_replicas", num_replicas, minimum=2)
        if isinstance(reference, (GaussianBase, MixtureBase)):
            self._reference = validate_base(reference)
        elif isinstance(reference, str) and reference in ("prior", "fit"):
            self._reference = reference
        else:
            raise ValueError(
                "reference must be 'prior', 'fit', a GaussianBase or a MixtureBase, got "
                f"{reference!r}."
            )
        if potential_fn is not None and isinstance(reference, str):
            raise ValueError(
                "With `potential_fn`, `reference` must be a GaussianBase or MixtureBase on the "
                "same flat space: a potential has no prior, and fitting one needs a model."
            )
        self._algo, self._hmc_settings = hmc_settings(inner_kernel, **inner_kwargs)
        self._init_strategy = init_strategy
        self._fit_base_kwargs = dict(fit_base_kwargs or {})
        self._fit_base_seed = fit_base_seed
        self._flat_model: FlatModel | None = None
        self._path: TemperedPath | None = None
        self._fitted_reference = None
        self._reference_fit_problems = ()

    @property
    def num_replicas(self) -> int:
        return self._num_replicas

    @property
    def path(self) -> TemperedPath | None:
        """The tempered path of the last ``init`` (``None`` before)."""
        return self._path

    @property
    def reference(self):
        """``"prior"``, or the base density the path starts from (fitted on the first ``init``
        for ``reference="fit"``)."""
        if self._reference == "fit":
            return self._fitted_reference
        return self._reference

    @property
    def flat_model(self) -> FlatModel | None:
        return self._flat_model

    @property
    def reference_fit_problems(self) -> tuple[str, ...]:
        """What the fit of ``reference="fit"`` warned about its coverage of the posterior's modes
        (empty if nothing, or for another reference). A mode the reference misses is reached
        only by the moves near ``beta = 1``, so its mass can be missed with a small error bar:
        the run's diagnostics repeat these warnings."""
        return self._reference_fit_problems

    @property
    def default_fields(self):
        return ("z", "log_likelihood", "swap_accept_prob", "diverging")

    def _constrain_fn(self):
        return None if self._flat_model is None else self._flat_model.constrain_fn

    def _forget_target(self):
        self._flat_model = self._path = self._fitted_reference = None
        self._reference_fit_problems = ()

    def _prepare_target(self, model_args, model_kwargs):
        """Build the flat potential and the tempered path for these model arguments."""
        dimension_limit = MAX_REPLICA_VALUES // self._num_replicas
        if self._model is None:
            base = self._reference
            self._flat_model = flat_model_from_potential(self._potential_fn, base.loc)
            self._path = reference_path(self._potential_fn, base)
            return
        key = jax.random.PRNGKey(self._fit_base_seed)
        self._flat_model = flatten_model(
            key,
            self._model,
            model_args,
            model_kwargs,
            init_strategy=self._init_strategy,
            kernel_name=type(self).__name__,
        )
        dimension = self._flat_model.dimension
        if dimension > dimension_limit:
            raise ValueError(
                f"{self._num_replicas} replicas of a model with {dimension} unconstrained "
                f"dimensions exceed the memory bound of {MAX_REPLICA_VALUES} values per chain; "
                "use fewer replicas."
            )
        if self._reference == "prior":
            self._path = self._prior_path(key, model_args, model_kwargs)
            return
        if self._reference == "fit":
            fit_kwargs = {"progress_bar": calling_mcmc_progress_bar(), **self._fit_base_kwargs}
            self._fitted_reference, self._reference_fit_problems = fit_base_for_kernel(
                fit_base, self._model, model_args, model_kwargs, self._fit_base_seed, fit_kwargs
            )
            base = self._fitted_reference
        else:
            base = validate_base(self._reference, dimension)
        self._path = reference_path(self._flat_model.potential_fn, base)

    def _prior_path(self, key, model_args, model_kwargs):
        try:
            split = split_model(key, self._model, model_args, model_kwargs)
            path = prior_path(split)
            draw = path.sample_reference_fn(key)
        except NotImplementedError as error:
            raise ValueError(
                "reference='prior' needs exact draws from the model's prior, but a latent site "
                "cannot be sampled (an improper prior such as ImproperUniform has no beta = 0 "
                "replica). Use reference='fit' (a fitted Gaussian mixture) or pass a "
                "GaussianBase."
            ) from error
        if split.dimension != self._flat_model.dimension:
            raise ValueError(
                f"The model's prior/likelihood split has {split.dimension} unconstrained "
                f"dimensions but its potential {self._flat_model.dimension}."
            )
        if not np.isfinite(float(path.reference_potential_fn(draw))):
            raise ValueError(
                "The prior's log density is not finite at a prior draw; reference='prior' needs "
                "a proper prior. Use reference='fit' or pass a GaussianBase."
            )
        return path

    def _build(self, num_warmup, tag):
        init_fn, step_fn = replica_exchange(
            self._path,
            self._flat_model.unravel_fn,
            num_replicas=self._num_replicas,
            algo=self._algo,
            tag=tag,
        )

        return fixed_target_functions(init_fn, step_fn, num_warmup, self._hmc_settings)

    def _initial_positions(self, rng_key, init_params):
        """One chain's starting points, ``(N, D)``: ``init_params`` for every rung if given, else
        reference draws, each replaced by the model's initial point where the rung's tempered
        density is not finite there."""
        fallback = self._flat_model.initial_position
        if init_params is not None:
            position = init_params if self._model is None else ravel_pytree(init_params)[0]
            return jnp.broadcast_to(jnp.asarray(position), (self._num_replicas, fallback.shape[0]))
        keys = jax.random.split(rng_key, self._num_replicas)
        draws = jax.vmap(self._path.sample_reference_fn)(keys).astype(fallback.dtype)
        betas = jnp.linspace(0.0, 1.0, self._num_replicas, dtype=fallback.dtype)

        def finite_at(position, beta):
            value, gradient = jax.value_and_grad(self._path.potential_fn(beta))(position)
            return jnp.isfinite(value) & jnp.all(jnp.isfinite(gradient))

        finite = jax.vmap(finite_at)(draws, betas)
        return jnp.where(finite[:, None], draws, fallback)

    def _init_inputs(self, rng_key, init_params, batched, model_kwargs):
        if batched:
            keys = jax.vmap(jax.random.split)(rng_key)
            positions = jax.jit(jax.vmap(self._initial_positions))(keys[:, 1], init_params)
            chain_keys = keys[:, 0]
        else:
            chain_key, draw_key = jax.random.split(rng_key)
            positions = self._initial_positions(draw_key, init_params)
            chain_keys = chain_key
        if positions.shape[-1] != self._flat_model.dimension:
            raise ValueError(
                f"init_params have {positions.shape[-1]} unconstrained dimensions, the model "
                f"{self._flat_model.dimension}."
            )
        if not_jax_tracer(positions):
            top = np.reshape(np.asarray(positions), (-1, self._num_replicas, positions.shape[-1]))
            for chain, position in enumerate(top[:, -1]):
                check_finite_potential(
                    self._path.potential_fn(1.0),
                    jnp.asarray(position),
                    f"the start of chain {chain}",
                )
        return positions, chain_keys

    def get_diagnostics_str(self, state):
        statistics = state.statistics
        scans = max(int(statistics.num_scans), 1)
        swap_rate = float(np.mean(np.asarray(statistics.accept_sum))) / scans
        return (
            f"{int(state.num_steps)} steps of size {float(state.step_size):.2e}. "
            f"acc. prob={float(state.mean_accept_prob):.2f} swap rate={swap_rate:.2f} "
            f"round trips={int(statistics.num_round_trips)}"
        )
