"""What every sampler family reads from a finished MCMC run: the posterior draws' ESS and R-hat,
the thresholds behind the families' warnings, and the ArviZ export the families extend."""

from __future__ import annotations

import warnings

import jax
import numpy as np

from numpyro_extras.results import arviz_adapter
from numpyro_extras.shell.validation import check_mcmc

__all__ = [
    "finished_kernel",
    "posterior_convergence",
    "inference_data",
    "run_report",
    "divergence_problem",
    "convergence_problems",
    "MIN_ROUND_TRIPS",
    "MIN_POSTERIOR_ESS",
    "MAX_DIVERGENT_FRACTION",
    "MAX_RHAT",
]

# A chain that makes fewer round trips between the ends of its temperature range than this may
# not have carried the posterior between modes.
MIN_ROUND_TRIPS = 2
MAX_DIVERGENT_FRACTION = 0.01
MAX_RHAT = 1.05
# Posterior draws with a smaller bulk ESS than this in some coordinate cannot carry that
# coordinate's posterior mean to a tenth of a posterior standard deviation.
MIN_POSTERIOR_ESS = 100.0
# A printed report gives each chain its own column up to this many chains.
MAX_CHAIN_COLUMNS = 8


def finished_kernel(mcmc, kernel_types, names, ran=None):
    """The kernel of a finished run, checked to be of the family that reads it.

    :param mcmc: a :class:`~numpyro.infer.MCMC`.
    :param kernel_types: the kernel class, or a tuple of classes, the caller reads.
    :param str names: how the error names them, e.g. ``"nx.ReplicaExchange"``.
    :param ran: ``kernel -> bool``, whether the kernel has what a run leaves (default: only that
        the MCMC has a last state).
    :return: ``mcmc.sampler``.
    :raises TypeError: if the run used another kernel.
    :raises ValueError: if the MCMC has not been run yet.

    **Example:**

    .. code-block:: python

        kernel = finished_kernel(mcmc, nx.ReplicaExchange, "nx.ReplicaExchange")
    """
    kernel = check_mcmc(mcmc, finished=False).sampler
    if not isinstance(kernel, kernel_types):
        raise TypeError(f"Expected an MCMC run with {names}, got {type(kernel).__name__}.")
    if mcmc.last_state is None or (ran is not None and not ran(kernel)):
        raise ValueError("Run the MCMC first: `mcmc.run(rng_key, ...)`.")
    return kernel


def posterior_convergence(mcmc):
    """Smallest bulk ESS and largest R-hat of a run's posterior draws over every coordinate.

    :param mcmc: a finished :class:`~numpyro.infer.MCMC` run.
    :return: ``(ess, rhat)`` as floats; NaN where they cannot be computed (fewer than 4 draws,
        one chain for R-hat, no varying coordinate).
    """
    samples = mcmc.get_samples(group_by_chain=True)
    leaves = [np.asarray(leaf, dtype=np.float64) for leaf in jax.tree.leaves(samples)]
    columns = [leaf.reshape(leaf.shape[:2] + (-1,)) for leaf in leaves if leaf.ndim >= 2]
    if not columns:
        return float("nan"), float("nan")
    draws = np.concatenate(columns, axis=-1)
    draws = draws[..., np.std(draws, axis=(0, 1)) > 0]
    if draws.shape[1] < 4 or draws.shape[-1] == 0:
        return float("nan"), float("nan")
    ess = min(arviz_adapter.ess(draws[..., i]) for i in range(draws.shape[-1]))
    if draws.shape[0] < 2:
        return ess, float("nan")
    rhat = np.nanmax([_rhat(draws[..., i]) for i in range(draws.shape[-1])])
    return ess, float(rhat)


def divergence_problem(diverging, moves="transitions", max_fraction=MAX_DIVERGENT_FRACTION):
    """The sentence reporting a run's divergent moves, or ``None`` when they are at most
    ``max_fraction`` of its moves.

    :param diverging: the run's ``diverging`` extra field, any shape.
    :param str moves: what diverged, e.g. ``"moves of the posterior replica"``.
    :param float max_fraction: the largest fraction of divergent moves that is not reported.
    :return: one sentence, or ``None``.

    **Example:**

    .. code-block:: python

        divergence_problem(mcmc.get_extra_fields()["diverging"])
    """
    diverging = np.asarray(diverging, dtype=bool)
    fraction = float(diverging.mean()) if diverging.size else 0.0
    if not fraction > max_fraction:
        return None
    return (
        f"{int(diverging.sum())} divergent {moves} ({fraction:.1%}): the sampler cannot follow "
        "the posterior's geometry (a funnel?); reparameterise"
    )


def convergence_problems(posterior_ess, posterior_rhat):
    """The sentences reporting posterior draws too correlated or too split between chains to
    trust (:func:`posterior_convergence`'s smallest bulk ESS below :data:`MIN_POSTERIOR_ESS`,
    largest R-hat above :data:`MAX_RHAT`); NaN values report nothing.

    :param float posterior_ess: the smallest bulk ESS over the posterior's coordinates.
    :param float posterior_rhat: the largest R-hat over them.
    :return: a list of sentences, empty when the draws look converged.

    **Example:**

    .. code-block:: python

        problems += convergence_problems(*posterior_convergence(mcmc))
    """
    problems = []
    if np.isfinite(posterior_ess) and posterior_ess < MIN_POSTERIOR_ESS:
        problems.append(f"the posterior draws' effective sample size is only {posterior_ess:.0f}")
    if np.isfinite(posterior_rhat) and posterior_rhat > MAX_RHAT:
        problems.append(
            f"the chains' posterior draws disagree (R-hat {posterior_rhat:.2f} > {MAX_RHAT})"
        )
    return problems


def _rhat(draws):
    """ArviZ's rank-normalised R-hat of one coordinate, or the split R-hat where the rank one
    is undefined: a binary site with its median on a value folds to a constant tail."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rhat = arviz_adapter.rhat(draws)
        if np.isnan(rhat):
            rhat = arviz_adapter.rhat(draws, method="split")
    return rhat


def inference_data(mcmc, has_model, exclude_fields=()):
    """ArviZ ``InferenceData`` of a run's posterior draws, before a family adds its own groups.

    For a kernel built on a model it is :func:`arviz.from_numpyro` (``posterior``,
    ``log_likelihood``, ``observed_data``, the extra fields in ``sample_stats``); for a kernel
    built on a ``potential_fn``, its draws (an array as ``x``, a dict by its keys) and the extra
    fields. ``diverging`` is
    boolean either way.

    :param mcmc: a finished :class:`~numpyro.infer.MCMC` run.
    :param bool has_model: whether the kernel was built on a model.
    :param exclude_fields: extra fields left out of ``sample_stats`` (potential_fn kernels).
    :return: what the installed ArviZ's :func:`arviz.from_numpyro` returns: ``InferenceData``
        (ArviZ 0.2x) or ``xarray.DataTree`` (ArviZ 1.x).
    """
    if has_model:
        idata = arviz_adapter.from_numpyro(mcmc)
    else:
        samples = mcmc.get_samples(group_by_chain=True)
        posterior = (
            {name: np.asarray(value) for name, value in samples.items()}
            if isinstance(samples, dict)
            else {"x": np.asarray(samples)}
        )
        idata = arviz_adapter.from_draws(
            posterior,
            {
                name: np.asarray(value)
                for name, value in mcmc.get_extra_fields(group_by_chain=True).items()
                if name not in exclude_fields
            },
        )
    sample_stats = getattr(idata, "sample_stats", None)
    if sample_stats is not None and "diverging" in sample_stats:
        idata.sample_stats["diverging"] = idata.sample_stats["diverging"].astype(bool)
    return idata


def run_report(title, chain_rows, run_lines, problems):
    """A plain-text report of a run's diagnostics: one column per chain (the minimum, median and
    maximum over the chains when there are more than 8), then the run-wide figures, then every
    problem found (or that none was).

    :param str title: the first line.
    :param chain_rows: ``(label, values, number_format)`` per row, one value per chain, e.g.
        ``("round trips", [12, 9], "d")``.
    :param run_lines: ``(label, text)`` per run-wide figure.
    :param problems: the problem sentences.
    :return: the report, a ``str``.

    **Example:**

    .. code-block:: python

        print(run_report("My run", [("round trips", [12, 9], "d")], [("log Z", "1.2 +- 0.1")], ()))
    """
    num_chains = max((len(values) for _, values, _ in chain_rows), default=0)
    if num_chains > MAX_CHAIN_COLUMNS:
        headers = [f"min of {num_chains} chains", "median", "max"]
        columns = [np.nanmin, np.nanmedian, np.nanmax]
        rows = [
            (label, [summary(np.asarray(values, float)) for summary in columns], number_format)
            for label, values, number_format in chain_rows
        ]
    else:
        headers = [f"chain {chain}" for chain in range(num_chains)]
        rows = chain_rows

    def cell(value, number_format):
        value = float(value)
        if not np.isfinite(value):
            return "-"
        if number_format == "d":
            return f"{value:.0f}" if value.is_integer() else f"{value:.1f}"
        return format(value, number_format)

    cells = [[cell(value, number_format) for value in values] for _, values, number_format in rows]
    label_width = max([len(label) for label, _ in run_lines] + [len(row[0]) for row in rows] + [0])
    column_width = max(
        [len(text) for text in headers] + [len(t) for row in cells for t in row] + [0]
    )
    lines = [title]
    if rows:
        lines.append(" " * label_width + "".join(f"  {h:>{column_width}}" for h in headers))
        for (label, _, _), row in zip(rows, cells, strict=True):
            lines.append(f"{label:<{label_width}}" + "".join(f"  {t:>{column_width}}" for t in row))
    lines.extend(f"{label:<{label_width}}  {text}" for label, text in run_lines)
    if problems:
        lines.append("Problems:")
        lines.extend(f"  - {problem}" for problem in problems)
    else:
        lines.append("Problems: none found")
    return "\n".join(lines)
