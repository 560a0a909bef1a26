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

import numpy as np
from numpyro.infer import NUTS
from numpyro.util import find_stack_level

from numpyro_extras.bases import validate_base
from numpyro_extras.compilation import quick_jit
from numpyro_extras.discrete.kernels import ACS
from numpyro_extras.discrete.target import DiscreteTarget
from numpyro_extras.exchange.path import TemperedPath, prior_path, reference_path
from numpyro_extras.exchange.pilot import check_replica_memory
from numpyro_extras.numpyro_adapter import calling_mcmc_progress_bar
from numpyro_extras.potential import (
    FlatModel,
    continuous_latent_sites,
    flat_model_from_potential,
    flatten_model,
    split_model,
)
from numpyro_extras.tempering.base_fit import fit_base_for_kernel

__all__ = [
    "EMPTY_TARGET",
    "ExchangeTarget",
    "checked_prior_path",
    "prior_for_reference",
    "discrete_exchange_target",
    "fit_reference",
    "model_exchange_target",
    "potential_exchange_target",
]


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


EMPTY_TARGET = ExchangeTarget()


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
        key, model, model_args, model_kwargs, reference, dimension
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


def prior_for_reference(key, model, model_args, model_kwargs, reference, dimension):
    """The model's prior path where ``reference`` needs it (``"prior"``, ``"stabilized"`` and
    ``"auto"``), with ``"auto"`` resolved: ``"stabilized"``, or ``"fit"`` where the prior is
    improper.

    :param key: the key of the model's split and of the prior path's check.
    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param reference: the kernel's reference setting.
    :param int dimension: the model's unconstrained dimensions.
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
            key, lambda: split_model(key, model, model_args, model_kwargs), asked, dimension
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
