"""A model (or a potential) read into the tempered path(s) a replica-exchange chain runs on.

Once per set of model arguments the kernel reads its model into an :class:`ExchangeTarget`: the
flat potential (or, for ACS/DMALA moves, the discrete target), the reference the path starts
from (the prior; a Gaussian mixture fitted to the posterior, Surjanovic et al., NeurIPS 2022;
or both, as two legs joined at the posterior) and the tempered path of each leg
(:mod:`numpyro_extras.exchange.path`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np
from numpyro.infer import HMC, NUTS
from numpyro.util import find_stack_level

from numpyro_extras.discrete.kernels import ACS
from numpyro_extras.discrete.target import DiscreteTarget
from numpyro_extras.exchange.path import TemperedPath, prior_path, reference_path
from numpyro_extras.exchange.pilot import check_replica_memory
from numpyro_extras.model.base_fit import check_fit_base_settings
from numpyro_extras.model.bases import GaussianBase, MixtureBase, validate_base
from numpyro_extras.model.potential import (
    FlatModel,
    continuous_latent_sites,
    flat_model_from_potential,
    flatten_model,
    split_model,
)
from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.numpyro_adapter import calling_mcmc_progress_bar
from numpyro_extras.shell.validation import check_init_strategy
from numpyro_extras.tempering.base_fit import fit_base_for_kernel

__all__ = [
    "EMPTY_TARGET",
    "ExchangeTarget",
    "TargetSettings",
    "target_settings",
    "read_exchange_target",
    "intends_stabilized",
    "reference_settings",
    "discrete_inner_kernel",
    "checked_prior_path",
    "prior_for_reference",
    "discrete_exchange_target",
    "fit_reference",
    "model_exchange_target",
    "potential_exchange_target",
]

REFERENCES = ("auto", "prior", "fit", "stabilized")


class ExchangeTarget(NamedTuple):
    """What a replica-exchange kernel read from its model (or potential) for one set of model
    arguments.

    :data:`EMPTY_TARGET`, with every field ``None`` (or empty), is what a kernel has read before
    its first ``init``.

    :param path: the tempered path (the fitted leg's, for a stabilised reference).
    :param reference: what the path starts from, ``"auto"`` resolved: ``"prior"``, ``"fit"``,
        ``"stabilized"``, or a given base.
    :param int values_per_replica: the values one replica holds (unconstrained dimensions, and
        discrete values for ACS/DMALA moves).
    :param flat_model: the flat potential of continuous latent sites (``None`` for ACS/DMALA
        moves).
    :param discrete_target: the model as ACS/DMALA moves read it (``None`` for HMC/NUTS moves).
    :param split: the model's prior/likelihood split, for the prior leg (``None`` without one).
    :param prior_leg_path: the prior leg's path, for a stabilised reference.
    :param fitted_reference: the base of ``"fit"`` or ``"stabilized"`` (``None`` otherwise).
    :param fit_problems: what the fit warned about its coverage of the posterior's modes.
    :param bool from_potential: read from a ``potential_fn`` (positions are flat arrays, not
        site dicts).
    """

    path: TemperedPath | None = None
    reference: object = None
    values_per_replica: int | None = None
    flat_model: FlatModel | None = None
    discrete_target: DiscreteTarget | None = None
    split: object = None
    prior_leg_path: TemperedPath | None = None
    fitted_reference: object = None
    fit_problems: tuple[str, ...] = ()
    from_potential: bool = False

    @property
    def stabilized(self) -> bool:
        """Whether the replicas run on two legs joined at the posterior."""
        return isinstance(self.reference, str) and self.reference == "stabilized"

    @property
    def mixed(self) -> bool:
        """Whether ACS/DMALA moves meet continuous latent sites beside the discrete ones."""
        target = self.discrete_target
        return target is not None and bool(target.continuous_sites)

    @property
    def latent_sites(self) -> tuple[str, ...]:
        """The names of the latent sites the replicas move (empty before ``init``)."""
        target = self.discrete_target
        if target is not None:
            return (*target.continuous_sites, *target.variables)
        return () if self.flat_model is None else self.flat_model.latent_sites

    @property
    def constrain_fn(self):
        """The replicas' sample field -> the model's site values (``None`` before ``init``)."""
        if self.discrete_target is not None:
            return self.discrete_target.constrain_fn
        return None if self.flat_model is None else self.flat_model.constrain_fn


EMPTY_TARGET = ExchangeTarget()


class TargetSettings(NamedTuple):
    """How a replica-exchange kernel reads its model, fixed when the kernel is built
    (:func:`target_settings`).

    :param reference: ``"auto"``, ``"prior"``, ``"fit"``, ``"stabilized"``, or a validated base.
    :param given_base: a validated base for the fitted leg, or ``None``.
    :param init_strategy: NumPyro init strategy of the fallback start.
    :param dict fit_base_kwargs: settings of :func:`~numpyro_extras.fit_base`, checked.
    :param int fit_base_seed: seed of the fit and of the pilot run.
    :param acs_class: the ACS/DMALA class the moves were built from, to rebuild them with NUTS
        for continuous sites (``None`` for an instance, or HMC/NUTS moves).
    :param dict acs_kwargs: that class's settings.
    :param str kernel_name: the kernel's name, for messages.
    """

    reference: object
    given_base: object
    init_strategy: Callable
    fit_base_kwargs: dict
    fit_base_seed: int
    acs_class: type | None
    acs_kwargs: dict
    kernel_name: str


def target_settings(
    model,
    potential_fn,
    inner_kernel,
    inner_kwargs,
    *,
    reference,
    base,
    init_strategy,
    fit_base_kwargs,
    fit_base_seed,
    kernel_name,
) -> tuple[ACS | None, TargetSettings]:
    """A replica-exchange kernel's arguments checked against each other: its ACS/DMALA moves,
    if any, and how it will read its model.

    :param model: the kernel's model (``None`` for a ``potential_fn``).
    :param potential_fn: the kernel's ``potential_fn``.
    :param inner_kernel: its inner kernel, ``"auto"`` resolved.
    :param dict inner_kwargs: that kernel's settings.
    :param reference: the kernel's ``reference``.
    :param base: its ``base``.
    :param init_strategy: its ``init_strategy``.
    :param dict fit_base_kwargs: its ``fit_base_kwargs`` (or ``None``).
    :param int fit_base_seed: its ``fit_base_seed``.
    :param str kernel_name: its name, for messages.
    :return: ``(acs, settings)``: the ACS/DMALA kernel of the moves (``None`` for HMC/NUTS) and
        the :class:`TargetSettings`.
    :raises ValueError: for settings the target cannot take (see :func:`reference_settings`,
        :func:`discrete_inner_kernel`).

    **Example:**

    .. code-block:: python

        acs, settings = target_settings(
            model, None, NUTS, {}, reference="auto", base=None, init_strategy=init_to_uniform,
            fit_base_kwargs=None, fit_base_seed=0, kernel_name="ReplicaExchange",
        )
    """
    acs = discrete_inner_kernel(model, inner_kernel, inner_kwargs)
    from_class = acs is not None and isinstance(inner_kernel, type)
    reference, given_base = reference_settings(reference, base, potential_fn, acs is not None)
    settings = TargetSettings(
        reference,
        given_base,
        check_init_strategy(init_strategy),
        check_fit_base_settings(
            f"{kernel_name}(fit_base_kwargs=...)", **dict(fit_base_kwargs or {})
        ),
        fit_base_seed,
        inner_kernel if from_class else None,
        dict(inner_kwargs) if from_class else {},
        kernel_name,
    )
    return acs, settings


def intends_stabilized(reference, model, discrete) -> bool:
    """Whether a kernel's replicas are meant to run on two legs joined at the posterior, before
    its first ``init`` (where ``"auto"`` may still fall back to one ladder).

    :param reference: the kernel's checked ``reference``.
    :param model: its model (``None`` for a ``potential_fn``).
    :param bool discrete: whether the moves are ACS/DMALA moves.
    :return: bool.

    **Example:**

    .. code-block:: python

        intends_stabilized("auto", model, discrete=False)  # True: the default on a model
    """
    if not isinstance(reference, str):
        return False
    return reference == "stabilized" or (reference == "auto" and model is not None and not discrete)


def read_exchange_target(
    model, potential_fn, model_args, model_kwargs, acs, num_replicas, settings: TargetSettings
) -> tuple[ACS | None, ExchangeTarget]:
    """Read a kernel's model (or potential) into its tempered path(s) for these model arguments:
    :func:`discrete_exchange_target` for ACS/DMALA moves, :func:`potential_exchange_target` for a
    ``potential_fn``, else :func:`model_exchange_target`.

    :param model: the kernel's model (``None`` for a ``potential_fn``).
    :param potential_fn: the kernel's ``potential_fn``.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param acs: the kernel's ACS/DMALA kernel, or ``None``.
    :param num_replicas: the requested count, or ``"auto"``.
    :param TargetSettings settings: how to read it.
    :return: ``(acs, target)``: the ACS kernel the moves use (rebuilt with NUTS for the
        continuous sites of a mixed model) and the :class:`ExchangeTarget`.

    **Example:**

    .. code-block:: python

        acs, target = read_exchange_target(model, None, (x, y), {}, None, "auto", settings)
    """
    key = jax.random.PRNGKey(settings.fit_base_seed)
    if acs is not None:
        return discrete_exchange_target(
            key,
            acs,
            settings.acs_class,
            settings.acs_kwargs,
            model,
            model_args,
            model_kwargs,
            num_replicas,
        )
    if model is None:
        return None, potential_exchange_target(potential_fn, settings.reference, num_replicas)
    return None, model_exchange_target(
        key,
        model,
        model_args,
        model_kwargs,
        reference=settings.reference,
        given_base=settings.given_base,
        num_replicas=num_replicas,
        init_strategy=settings.init_strategy,
        fit_base_kwargs=settings.fit_base_kwargs,
        fit_base_seed=settings.fit_base_seed,
        kernel_name=f"{settings.kernel_name} with HMC/NUTS moves",
    )


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


def potential_exchange_target(potential_fn, base, num_replicas) -> ExchangeTarget:
    """The path from ``base`` to the target ``exp(-potential_fn)`` on flat positions.

    :param potential_fn: ``-log`` of the unnormalised target on flat 1-D positions.
    :param base: a validated :class:`~numpyro_extras.GaussianBase` or
        :class:`~numpyro_extras.MixtureBase`.
    :param num_replicas: the requested count, or ``"auto"``, for the memory check.
    :return: an :class:`ExchangeTarget`.
    """
    flat_model = flat_model_from_potential(potential_fn, base.loc)
    dimension = flat_model.dimension
    check_replica_memory(dimension, num_replicas, False, f"a potential of dimension {dimension}")
    return ExchangeTarget(
        reference_path(potential_fn, base), base, dimension, flat_model, from_potential=True
    )


def discrete_exchange_target(
    key, acs: ACS, acs_class, acs_kwargs, model, model_args, model_kwargs, num_replicas
) -> tuple[ACS, ExchangeTarget]:
    """The ACS plumbing and the prior path on the discrete sites' values (and the flat
    continuous ones, for a mixed model).

    :param key: the key of the prior path's check.
    :param acs: the kernel's ACS/DMALA kernel.
    :param acs_class: the ACS/DMALA class it was built from, to rebuild it with a NUTS move for
        continuous sites (``None`` for an instance).
    :param dict acs_kwargs: the class's settings.
    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param num_replicas: the requested count, or ``"auto"``, for the memory check.
    :return: ``(acs, target)``: the ACS kernel the moves use and the :class:`ExchangeTarget`.
    :raises ValueError: for an inner kernel of continuous sites on a model without them, a
        model past the memory bound, or an improper prior.
    """
    continuous = continuous_latent_sites(model, model_args, model_kwargs)
    if continuous and not acs.has_inner_kernel and acs_class is not None:
        # As nx.ACS(model, inner_kernel=NUTS): the class's settings, NUTS at its defaults.
        acs = acs_class(model, inner_kernel=NUTS, **acs_kwargs)
    if not continuous and acs.has_inner_kernel:
        raise ValueError(
            "The ACS/DMALA inner kernel has an inner_kernel for continuous sites, but the "
            "model has none: pass nx.ACS without inner_kernel."
        )
    target = acs.discrete_target(model_args, model_kwargs)
    values = sum(variable.size * variable.num_values for variable in target.variables.values())
    values += target.dimension
    check_replica_memory(
        values,
        num_replicas,
        False,
        f"{values} discrete values (sites x values) and unconstrained dimensions",
    )
    _, path = checked_prior_path(key, lambda: target.split, "reference='prior'")
    return acs, ExchangeTarget(path, "prior", values, discrete_target=target)


def model_exchange_target(
    key,
    model,
    model_args,
    model_kwargs,
    *,
    reference,
    given_base,
    num_replicas,
    init_strategy,
    fit_base_kwargs,
    fit_base_seed,
    kernel_name,
) -> ExchangeTarget:
    """The flat potential of a model with continuous latent sites and the tempered path(s) from
    its reference: ``"auto"`` is ``"stabilized"`` where the prior is proper, ``"fit"`` where it
    is not, and ``"prior"`` where the fit fails (with a warning).

    :param key: the key of the model's initialisation and of the prior path's check.
    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param reference: ``"auto"``, ``"prior"``, ``"fit"``, ``"stabilized"`` or a validated base.
    :param given_base: a base to use instead of fitting one, or ``None``.
    :param num_replicas: the requested count, or ``"auto"``, for the memory check.
    :param init_strategy: NumPyro init strategy of the model's initial point.
    :param dict fit_base_kwargs: checked keyword arguments of :func:`~numpyro_extras.fit_base`.
    :param int fit_base_seed: the fit's seed.
    :param str kernel_name: the kernel, for the messages of the model's reading.
    :return: an :class:`ExchangeTarget`.
    :raises ValueError: for a model the moves cannot take, past the memory bound, or whose
        prior the asked reference needs but cannot have.
    """
    flat_model = flatten_model(
        key,
        model,
        model_args,
        model_kwargs,
        init_strategy=init_strategy,
        kernel_name=kernel_name,
        discrete_advice=(
            "For a model with discrete latent sites (alone or beside continuous ones), pass "
            "inner_kernel=nx.ACS (or nx.DMALA)."
        ),
    )
    dimension = flat_model.dimension
    asked = reference
    reference, split, prior = prior_for_reference(
        key, model, model_args, model_kwargs, reference, dimension, flat_model
    )
    fitted, fit_problems = None, ()
    if reference in ("fit", "stabilized"):
        try:
            fitted, fit_problems = fit_reference(
                flat_model,
                model,
                model_args,
                model_kwargs,
                given_base=given_base,
                seed=fit_base_seed,
                fit_base_kwargs=fit_base_kwargs,
                stabilized=reference == "stabilized",
            )
        except RuntimeError as error:
            if asked != "auto" or prior is None:
                raise
            warnings.warn(
                f"The variational fit of the reference failed ({error}); the replicas run "
                "from the prior (reference='prior').",
                stacklevel=find_stack_level(),
            )
            reference = "prior"
    stabilized = isinstance(reference, str) and reference == "stabilized"
    check_replica_memory(
        dimension, num_replicas, stabilized, f"{dimension} unconstrained dimensions"
    )
    target = ExchangeTarget(
        prior,
        reference,
        dimension,
        flat_model,
        split=split,
        fitted_reference=fitted,
        fit_problems=fit_problems,
    )
    if reference == "prior":
        return target
    base = fitted if isinstance(reference, str) else validate_base(reference, dimension)
    path = reference_path(flat_model.potential_fn, base)
    return target._replace(path=path, prior_leg_path=prior if stabilized else None)


def prior_for_reference(
    key, model, model_args, model_kwargs, reference, dimension, flat_model=None
):
    """The model's prior path where ``reference`` needs it (``"prior"``, ``"stabilized"`` and
    ``"auto"``), with ``"auto"`` resolved: ``"stabilized"``, or ``"fit"`` where the prior is
    improper.

    :param key: the key of the model's split and of the prior path's check.
    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param reference: the kernel's reference setting.
    :param int dimension: the model's unconstrained dimensions.
    :param flat_model: the model's flat view, whose trace and prior draws the split shares.
    :return: ``(reference, split, path)``; ``split`` and ``path`` are ``None`` where the
        reference has no prior leg.
    :raises ValueError: where ``"prior"`` or ``"stabilized"`` cannot have the prior.
    """
    if not (isinstance(reference, str) and reference in ("prior", "stabilized", "auto")):
        return reference, None, None
    # Name the reference the user asked for: a stabilised run needs the prior for its prior leg.
    asked = (
        "reference='stabilized' (its prior leg)"
        if reference == "stabilized"
        else "reference='prior'"
    )
    try:
        split, path = checked_prior_path(
            key,
            lambda: split_model(key, model, model_args, model_kwargs, flat_model=flat_model),
            asked,
            dimension,
        )
    except ValueError:
        if reference != "auto":
            raise
        # An improper prior has no prior leg: the fitted reference alone.
        return "fit", None, None
    return ("stabilized" if reference == "auto" else reference), split, path


def fit_reference(
    flat_model, model, model_args, model_kwargs, *, given_base, seed, fit_base_kwargs, stabilized
):
    """The Gaussian mixture of :func:`~numpyro_extras.fit_base` for these model arguments (or
    ``given_base``), and the coverage problems the fit warned about.

    :param flat_model: the model's flat potential, handed down so that the fit does not trace
        and compile the model's initialisation again.
    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param given_base: a base to use instead of fitting one, or ``None``.
    :param int seed: the fit's seed.
    :param dict fit_base_kwargs: keyword arguments of :func:`~numpyro_extras.fit_base`.
    :param bool stabilized: whether the run's prior leg checks the fit's coverage (its warning
        is then kept, not passed on).
    :return: ``(base, problems)``.
    :raises RuntimeError: when the fit fails.
    """
    if given_base is not None:
        return validate_base(given_base, flat_model.dimension), ()
    fit_kwargs = {
        "progress_bar": calling_mcmc_progress_bar(),
        "flat_model": flat_model,
        **fit_base_kwargs,
    }
    fitted, problems, _ = fit_base_for_kernel(
        model, model_args, model_kwargs, seed, fit_kwargs, coverage_checked_by_run=stabilized
    )
    return fitted, problems


def checked_prior_path(key, split_fn: Callable, asked: str, dimension=None):
    """The prior path of the model's split (``split_fn()``), checked at a prior draw.

    :param key: the key of the prior draw.
    :param split_fn: ``() -> SplitModel``, the model's prior/likelihood split.
    :param str asked: the reference that needs the prior, for the messages.
    :param int dimension: the model's unconstrained dimensions to check the split against
        (``None`` skips the check).
    :return: ``(split, path)``.
    :raises ValueError: for a prior that cannot be sampled, or whose log density is not finite
        at its draw, or a split of another dimension.
    """
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
    if dimension is not None and split.dimension != dimension:
        raise ValueError(
            f"The model's prior/likelihood split has {split.dimension} unconstrained "
            f"dimensions but its potential {dimension}."
        )
    if not np.isfinite(float(log_prior_at_draw)):
        raise ValueError(
            f"The prior's log density is not finite at a prior draw; {asked} needs "
            "a proper prior. Use reference='fit' or pass a GaussianBase."
        )
    return split, path
