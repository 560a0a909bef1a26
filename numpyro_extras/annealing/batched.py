"""Annealed importance sampling of one model over many data sets in one vmapped, sharded run.

:func:`batched_ais` gives each data set the annealing of :func:`~numpyro_extras.ais`: the model's
view is built inside the compiled program from that data set's arguments, so one compilation
serves every data set, and the data sets run side by side (``jax.vmap``), in blocks that move a
progress bar and bound the memory, each block split over devices when asked.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_extras.annealing.driver import small_ess_problem
from numpyro_extras.annealing.model_annealing import (
    MISSED_MASS_CAUSE,
    PRIOR_DRAWS_PER_PARTICLE,
    anneal_split,
    cached,
    check_ais_settings,
    check_has_latent_sites,
    gaussian_base_parameters,
)
from numpyro_extras.model.base_fit import fit_gaussian
from numpyro_extras.model.bases import GaussianBase
from numpyro_extras.model.potential import check_proper_prior, split_model
from numpyro_extras.results.evidence import Evidence, evidence_from_log_weights
from numpyro_extras.results.prior_check import check_against_prior, prior_log_likelihoods_fn
from numpyro_extras.shell.devices import check_devices, gathered, leading_axis_sharding
from numpyro_extras.shell.kernel import arguments_fingerprint
from numpyro_extras.shell.progress import run_chunks
from numpyro_extras.shell.validation import (
    check_count,
    check_model,
    check_model_arguments,
    check_rng_key,
)

__all__ = ["batched_ais"]

# Prior draws whose coordinate-wise median starts each data set's Gaussian fit.
NUM_START_DRAWS = 16
# Data sets per device in a compiled block. The same number whatever the devices, so that every
# device runs the same program (XLA's rounding depends on the batch it vectorizes); eight keep a
# small model's particles enough lanes, and a progress bar moving.
DEFAULT_BATCH_SIZE = 8


def _batched_leaves(model_args, in_axes):
    """The model's positional arguments as leaves, with the data-set axis of each leaf moved to
    the front (``None`` for a leaf that every data set shares).

    :return: ``(leaves, treedef, batched, num_data_sets)``.
    """
    if in_axes is None or (isinstance(in_axes, int) and not isinstance(in_axes, bool)):
        per_argument = (in_axes,) * len(model_args)
    elif isinstance(in_axes, (tuple, list)) and len(in_axes) == len(model_args):
        per_argument = tuple(in_axes)
    else:
        raise ValueError(
            "in_axes must be an int, None, or a tuple with one entry (an int or None) per "
            f"positional argument of the model ({len(model_args)} here); got {in_axes!r}."
        )
    leaves, axes, sizes = [], [], {}
    for position, (argument, axis) in enumerate(zip(model_args, per_argument, strict=True)):
        if axis is not None and (not isinstance(axis, int) or isinstance(axis, bool)):
            raise TypeError(f"in_axes[{position}] must be an int or None, got {axis!r}.")
        for leaf in jax.tree.leaves(argument):
            if axis is None:
                leaves.append(leaf)
                axes.append(False)
                continue
            array = np.asarray(leaf)
            if not -array.ndim <= axis < array.ndim:
                raise ValueError(
                    f"model_args[{position}] has shape {array.shape}, with no axis {axis} to "
                    "hold its data sets (in_axes)."
                )
            leaves.append(np.moveaxis(array, axis, 0))
            axes.append(True)
            sizes.setdefault(array.shape[axis], []).append(position)
    if not sizes:
        raise ValueError(
            "batched_ais needs at least one argument with a data-set axis (in_axes), the axis "
            "along which the data sets are stacked; for one data set use nx.ais."
        )
    if len(sizes) > 1:
        described = "; ".join(
            f"{size} in model_args{sorted(set(positions))}" for size, positions in sizes.items()
        )
        raise ValueError(f"The batched arguments disagree on the number of data sets: {described}.")
    (num_data_sets,) = sizes
    treedef = jax.tree.structure(tuple(model_args))
    return leaves, treedef, tuple(axes), num_data_sets


def _data_set_function(model, model_kwargs, treedef, batched, shared_leaves, use_gaussian, checked):
    """``(batched_leaves, key) -> (log_weights, prior_log_likelihoods, fit_failed)`` for one
    data set, pure JAX (vmapped over the data sets of a block). The shared arguments are
    constants of the program: a Python number among them may set a shape."""
    num_particles = checked["num_particles"]
    inner = dict(checked, progress_bar=False, devices=None)

    def arguments(batched_leaves):
        batched_leaves, shared = iter(batched_leaves), iter(shared_leaves)
        leaves = [next(batched_leaves) if is_batched else next(shared) for is_batched in batched]
        return jax.tree.unflatten(treedef, leaves)

    def one_data_set(batched_leaves, rng_key):
        split = split_model(jax.random.PRNGKey(0), model, arguments(batched_leaves), model_kwargs)
        fit_key, init_key, anneal_key, check_key = jax.random.split(rng_key, 4)
        if not use_gaussian:
            positions = split.sample_prior_fn(init_key, num_particles)
            result = anneal_split(anneal_key, split, None, None, positions, None, inner)
            return result.log_weights, None, jnp.zeros((), bool)
        start_key, fit_key = jax.random.split(fit_key)
        prior_draws = split.sample_prior_fn(start_key, NUM_START_DRAWS)[0]
        loc, scale_tril, loss = fit_gaussian(
            lambda x: -split.scaled_log_density_fn(x, {}, 1.0, 1.0),
            jnp.median(prior_draws, axis=0),
            fit_key,
        )
        fit_failed = ~(
            jnp.all(jnp.isfinite(loc))
            & jnp.all(jnp.isfinite(scale_tril))
            & jnp.all(jnp.diagonal(scale_tril) > 0)
            & jnp.isfinite(loss)
        )
        # A diverged fit leaves its data set a Gaussian with the prior draws' moments: a worse
        # path, but still an exact start for the annealing, and the problem is reported.
        prior_scale = jnp.std(prior_draws, axis=0) + jnp.finfo(loc.dtype).eps
        loc = jnp.where(fit_failed, jnp.mean(prior_draws, axis=0), loc)
        scale_tril = jnp.where(fit_failed, jnp.diag(prior_scale), scale_tril)
        positions = GaussianBase(loc, scale_tril, 0.0).sample(init_key, (num_particles,)), {}
        parameters = gaussian_base_parameters(loc, scale_tril)
        result = anneal_split(anneal_key, split, None, parameters, positions, None, inner)
        prior_log_likelihoods = prior_log_likelihoods_fn(split)(
            check_key, PRIOR_DRAWS_PER_PARTICLE * num_particles
        )
        return result.log_weights, prior_log_likelihoods, fit_failed

    return one_data_set


def _compiled_block(
    model, model_kwargs, treedef, batched, shared_leaves, use_gaussian, checked, devices
):
    """The jitted, vmapped run of a block of data sets, built once per model, keyword and
    shared arguments, argument structure, settings and devices (:func:`cached`). Over several
    devices each runs the vmapped function on its own data sets (``jax.shard_map``), the same
    program as one device's, with nothing to communicate."""
    kwargs_key = arguments_fingerprint(tuple(shared_leaves), model_kwargs)
    settings_key = tuple(
        (name, value.tobytes() if isinstance(value, np.ndarray) else value)
        for name, value in sorted(checked.items())
    )

    def build():
        run = jax.vmap(
            _data_set_function(
                model, model_kwargs, treedef, batched, shared_leaves, use_gaussian, checked
            )
        )
        if devices is not None:
            sharding = leading_axis_sharding(devices, "data sets")
            # Each data set's run is local to its device; the varying-axis checks of
            # shard_map would reject the scans that carry per-device values.
            run = jax.shard_map(
                run,
                mesh=sharding.mesh,
                in_specs=sharding.spec,
                out_specs=sharding.spec,
                check_vma=False,
            )
        return jax.jit(run)

    key = None
    if kwargs_key is not None:
        key = ("batched", model, kwargs_key, treedef, batched, use_gaussian, settings_key, devices)
    return cached(key, build)


def _evidence(log_weights, prior_log_likelihoods, fit_failed, num_particles, use_gaussian):
    """One data set's :class:`~numpyro_extras.Evidence`, with its problems recorded (not
    warned of one by one)."""
    problems = []
    if fit_failed:
        problems.append(
            "its Gaussian VI fit diverged, so it was annealed from a Gaussian with the prior "
            "draws' moments (a longer path); check the model on this data set with nx.ais"
        )
    try:
        evidence = evidence_from_log_weights(log_weights)
    except ValueError as error:
        problems.append(f"{str(error)[:-1]}; no estimate of log Z")
        return Evidence(-math.inf, math.inf, log_weights, 0.0, None, tuple(problems))
    start = "a fitted Gaussian" if use_gaussian else "the prior"
    problem = small_ess_problem(
        evidence,
        num_particles,
        f"on the path from {start} such weights bias the estimate low",
        "use more temperatures or particles",
    )
    if problem is not None:
        problems.append(problem)
    if prior_log_likelihoods is not None:
        evidence, problem = check_against_prior(
            evidence,
            prior_log_likelihoods,
            estimate_name="the annealing's",
            cause=MISSED_MASS_CAUSE,
        )
        if problem is not None:
            problems.append(problem)
    return evidence._replace(problems=tuple(problems))


def batched_ais(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    in_axes=0,
    num_particles: int,
    num_temperatures: int,
    schedule="sigmoid",
    base: str = "auto",
    step_size: float | None = None,
    num_leapfrog_steps: int = 5,
    num_mcmc_steps: int = 1,
    target_accept: float = 0.75,
    adaptation_rate: float = 1.0,
    adapt_mass: bool = True,
    num_pilot_steps: int = 10,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress_bar: bool = True,
    devices=None,
) -> list[Evidence]:
    """Estimate ``log Z`` of one NumPyro model on each of many data sets, in one run.

    The data sets are stacked along an axis of the model's positional arguments (``in_axes``,
    as in ``jax.vmap``); data sets of different sizes are padded to one and masked
    (``numpyro.handlers.mask`` with the mask an argument). Each data set gets the annealing
    of :func:`~numpyro_extras.ais` (Neal 2001; mAIS paper eq. 5 and 10-16) with its own base:
    with ``base="auto"`` a full-rank Gaussian VI fit to that data set's posterior (the first fit of
    :func:`~numpyro_extras.fit_base`, one start at the median of prior draws, no mixture
    search), then the geometric path from it, and the check of the estimate against importance
    sampling from the prior that :func:`~numpyro_extras.ais` makes; with ``base="prior"``, the
    path ``log p(x) + beta log p(y | x)`` from prior draws. One compiled program runs a block
    of data sets side by side, ``batch_size`` on each device; the blocks run one after the
    other under a progress bar and bound the memory to one block's particles (the last block
    filled up with copies of the last data set). Every data set has its own key
    (``jax.random.fold_in(rng_key, index)``) and each device runs the same program on its
    ``batch_size`` data sets, so a data set's estimate does not depend on the other data sets
    of the run, nor on the split over ``devices``: every split over two or more devices gives
    the same numbers, and one device the same to the last bits of rounding (XLA compiles a
    program for several devices in its own way).

    **Problems per data set.** Each :class:`~numpyro_extras.Evidence` lists in ``problems``
    what its checks found (a final ESS below 5% of the particles, importance sampling from the
    prior above the annealing's estimate, a diverged fit, no finite weight), as
    :func:`~numpyro_extras.ais` would warn of it; ``batched_ais`` warns once, naming the data
    sets with problems.

    Models with discrete latent sites, summed-out sites, a base of one's own, a user transition
    or a reverse run are served by :func:`~numpyro_extras.ais`, one data set at a time.

    :param rng_key: PRNG key.
    :param model: a NumPyro model with continuous latent sites; it is traced with each data
        set's arguments as JAX arrays, so it may not branch in Python on their values.
    :param tuple model_args: the model's positional arguments, the data sets stacked along the
        ``in_axes`` axis of the batched ones.
    :param dict model_kwargs: keyword arguments, the same for every data set.
    :param in_axes: the data-set axis of each positional argument: an int (every argument),
        ``None`` (shared) or a tuple with an int or ``None`` per argument.
    :param int num_particles: particles per data set.
    :param int num_temperatures: annealing steps, at least 2 (ignored for an array schedule).
    :param schedule: as for :func:`~numpyro_extras.ais`.
    :param str base: ``"auto"`` (a Gaussian VI fit per data set) or ``"prior"``.
    :param step_size: as for :func:`~numpyro_extras.ais`, and the next five settings too.
    :param int num_leapfrog_steps: leapfrog steps per HMC move.
    :param int num_mcmc_steps: HMC moves per temperature.
    :param float target_accept: target mean acceptance of the step-size adaptation.
    :param float adaptation_rate: gain of the log step-size update per temperature.
    :param bool adapt_mass: the particles' variance as the diagonal inverse mass matrix.
    :param int num_pilot_steps: pilot HMC moves at the first temperature.
    :param int batch_size: data sets per device in a compiled block; memory grows with it.
        Keep it when comparing runs: another batch rounds the arithmetic in another way.
    :param bool progress_bar: show the blocks' progress.
    :param devices: split each block's data sets over these devices (a number, or a sequence of
        ``jax.Device``): one program (``jax.shard_map``), each device annealing its share.
    :return: a list of :class:`~numpyro_extras.Evidence`, one per data set, in order.
    :raises TypeError: for a setting of the wrong type, naming it.
    :raises ValueError: for arguments that disagree on the number of data sets, no batched
        argument, a base other than ``"auto"`` or ``"prior"``, a model with no latent site or
        with discrete latent sites, or a setting out of range.
    :warns UserWarning: once, when some data sets' estimates have problems.

    **Example:**

    .. code-block:: python

        def line(x, y):
            slope = numpyro.sample("slope", dist.Normal(0.0, 1.0))
            with numpyro.plate("points", x.shape[-1]):
                numpyro.sample("y", dist.Normal(slope * x, 0.5), obs=y)

        # 50 data sets of 20 points, one per row
        xs = jnp.linspace(-1.0, 1.0, 20) * jnp.ones((50, 1))
        ys = 0.8 * xs + 0.5 * jax.random.normal(rng_key, xs.shape)
        evidences = nx.batched_ais(rng_key, line, (xs, ys), num_particles=100,
                                   num_temperatures=50)
        log_z = np.array([evidence.log_z for evidence in evidences])
    """
    check_rng_key(rng_key)
    check_model(model)
    if not isinstance(base, str) or base not in ("auto", "prior"):
        raise ValueError(
            f"batched_ais: base must be 'auto' or 'prior', got {base!r}; a base of your own "
            "fits one data set: use nx.ais for it."
        )
    checked = check_ais_settings(
        num_particles=num_particles,
        num_temperatures=num_temperatures,
        schedule=schedule,
        base=base,
        step_size=step_size,
        num_leapfrog_steps=num_leapfrog_steps,
        num_mcmc_steps=num_mcmc_steps,
        target_accept=target_accept,
        adaptation_rate=adaptation_rate,
        adapt_mass=adapt_mass,
        num_pilot_steps=num_pilot_steps,
        progress_bar=progress_bar,
    )
    model_args, model_kwargs = check_model_arguments(model_args, model_kwargs)
    leaves, treedef, batched, num_data_sets = _batched_leaves(model_args, in_axes)
    first = jax.tree.unflatten(
        treedef,
        [leaf[0] if is_batched else leaf for leaf, is_batched in zip(leaves, batched, strict=True)],
    )
    check_proper_prior(model, first, model_kwargs, "nx.batched_ais")
    split = split_model(jax.random.PRNGKey(0), model, first, model_kwargs)
    check_has_latent_sites(split)
    if split.discrete_sites or split.marginalized_sites:
        raise ValueError(
            "nx.batched_ais anneals continuous latent sites; this model has discrete latent "
            f"sites {list(split.discrete_sites)}: use nx.ais on each data set (with "
            "marginalize= to sum them out)."
        )
    use_gaussian = base == "auto" and split.dimension > 0

    batched_leaves = [leaf for leaf, is_batched in zip(leaves, batched, strict=True) if is_batched]
    shared_leaves = [
        leaf for leaf, is_batched in zip(leaves, batched, strict=True) if not is_batched
    ]
    devices = check_devices(devices)
    run_block = _compiled_block(
        model, model_kwargs, treedef, batched, shared_leaves, use_gaussian, checked, devices
    )
    outputs = _run_blocks(
        run_block,
        batched_leaves,
        jax.vmap(jax.random.fold_in, (None, 0))(rng_key, jnp.arange(num_data_sets)),
        check_count("batch_size", batch_size),
        devices,
        checked["progress_bar"],
    )
    log_weights, prior_log_likelihoods, fit_failed = (
        None if parts[0] is None else np.concatenate([np.asarray(part) for part in parts])
        for parts in zip(*outputs, strict=True)
    )  # the rows past num_data_sets are the last block's copies, never read
    evidences = [
        _evidence(
            log_weights[index],
            None if prior_log_likelihoods is None else prior_log_likelihoods[index],
            bool(fit_failed[index]),
            checked["num_particles"],
            use_gaussian,
        )
        for index in range(num_data_sets)
    ]
    _warn_of_problems(evidences)
    return evidences


def _run_blocks(run_block, batched_leaves, keys, batch_size, devices, progress_bar):
    """Every data set's outputs of ``run_block``, block after block under a progress bar.

    :param run_block: from :func:`_compiled_block`.
    :param list batched_leaves: the batched arguments' leaves, data sets first.
    :param keys: one key per data set.
    :param int batch_size: data sets per device and block.
    :param devices: the checked devices, or ``None``.
    :param bool progress_bar: show the bar.
    :return: the blocks' outputs, a list of tuples, the last block's filling included.
    """
    num_data_sets = len(keys)
    block_size = (1 if devices is None else len(devices)) * batch_size
    sharding = None if devices is None else leading_axis_sharding(devices, "data sets")

    def run(_, start):
        # The last block is filled up with the last data set; its copies are dropped later.
        indices = np.minimum(np.arange(start, start + block_size), num_data_sets - 1)
        inputs = ([leaf[indices] for leaf in batched_leaves], keys[indices])
        if sharding is not None:
            inputs = jax.device_put(inputs, sharding)
        return None, gathered(run_block(*inputs))

    starts = range(0, num_data_sets, block_size)
    _, outputs = run_chunks(
        run,
        None,
        [(start, min(block_size, num_data_sets - start)) for start in starts],
        total=num_data_sets,
        description=f"batched_ais: {num_data_sets} data sets",
        progress_bar=progress_bar,
    )
    return outputs


def _warn_of_problems(evidences):
    """One warning naming the data sets whose estimates have problems, with the first one's."""
    flagged = [index for index, evidence in enumerate(evidences) if evidence.problems]
    if not flagged:
        return
    shown = ", ".join(str(index) for index in flagged[:10]) + (", ..." if len(flagged) > 10 else "")
    warnings.warn(
        f"nx.batched_ais: the estimates of {len(flagged)} of {len(evidences)} data sets have "
        f"problems (data sets {shown}; each Evidence lists its own in .problems). Data set "
        f"{flagged[0]}: {evidences[flagged[0]].problems[0]}.",
        UserWarning,
        stacklevel=3,
    )
