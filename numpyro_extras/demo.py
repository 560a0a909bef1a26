"""The package's main demo: joint continuous tempering against plain NUTS on a two-mode target.

The target is :func:`numpyro_extras.targets.bimodal_model`, the 1-D mixture
``0.6 N(-8, 1) + 0.4 N(8, 2^2)`` scaled so that ``log Z`` is known exactly. Its modes are so far
apart that NUTS chains stay in the mode they start in; continuous tempering moves through the base
density (inverse temperature ``beta = 0``) to cross between them, recovers the mode weights and
estimates ``log Z`` with a standard error. Run it with ``numpyro-extras demo``.
"""

from __future__ import annotations

import sys
import time

import jax
import numpy as np
from numpyro.infer import MCMC, NUTS

from numpyro_extras.shell.plotting import agg_figure, require_matplotlib
from numpyro_extras.targets import (
    BIMODAL_LOCS,
    BIMODAL_SCALES,
    BIMODAL_WEIGHTS,
    bimodal_model,
)
from numpyro_extras.tempering import (
    JointContinuousTempering,
    fit_base,
    log_marginal_likelihood,
    posterior_samples,
    tempered_samples,
    tempering_diagnostics,
)

__all__ = ["run_demo", "bimodal_density"]

# Draws per chain shown in the trace panel, and at most this many points in the scatter panel.
TRACE_DRAWS = 500
SCATTER_POINTS = 8000

TARGET_NAME = " + ".join(
    f"{weight} N({loc:g}, {scale:g}^2)"
    for weight, loc, scale in zip(BIMODAL_WEIGHTS, BIMODAL_LOCS, BIMODAL_SCALES, strict=True)
)


def bimodal_density(x):
    """The normalised density of the bimodal target ``0.6 N(-8, 1) + 0.4 N(8, 2^2)`` at ``x``.

    :param x: points, any shape.
    :return: numpy array of densities with the shape of ``x``.
    """
    x = np.asarray(x, dtype=np.float64)[..., None]
    weights, locs, scales = (
        np.asarray(values) for values in (BIMODAL_WEIGHTS, BIMODAL_LOCS, BIMODAL_SCALES)
    )
    component_densities = np.exp(-0.5 * ((x - locs) / scales) ** 2) / (scales * np.sqrt(2 * np.pi))
    return component_densities @ weights


def _plot(output, ct_draws, nuts_draws, tempered_x, beta, title):
    """Write the three-panel figure: densities, (x, beta) of the tempered draws, beta traces."""
    figure = agg_figure("numpyro-extras demo", figsize=(14, 4))
    density_axis, scatter_axis, trace_axis = figure.subplots(1, 3)
    grid = np.linspace(-14.0, 16.0, 600)
    bins = np.linspace(-14.0, 16.0, 91)
    density_axis.plot(grid, bimodal_density(grid), color="black", lw=1.5, label="target")
    # Outlined histograms stay readable where the two samplers overlap.
    for draws, label, color in (
        (ct_draws, "joint CT (posterior draws)", "tab:blue"),
        (nuts_draws, "NUTS", "tab:red"),
    ):
        density_axis.hist(
            draws, bins=bins, density=True, histtype="step", lw=1.3, color=color, label=label
        )
    density_axis.set(xlabel="x", ylabel="density", title="Target and samplers' histograms")
    density_axis.legend(fontsize="small")

    # A thinned cloud: tens of thousands of points would hide the density of the scatter.
    thinning = max(1, tempered_x.size // SCATTER_POINTS)
    scatter_axis.scatter(
        tempered_x.ravel()[::thinning],
        beta.ravel()[::thinning],
        s=2,
        alpha=0.25,
        color="tab:blue",
        rasterized=True,
    )
    scatter_axis.set(
        xlabel="x",
        ylabel="inverse temperature beta",
        ylim=(-0.02, 1.02),
        title="Tempered draws (x, beta): modes join at low beta",
    )

    # One lane per chain: overlaid traces of many chains are unreadable. The first draws suffice
    # to show the excursions between the base (beta = 0) and the target (beta = 1).
    num_shown = min(beta.shape[1], TRACE_DRAWS)
    for chain, chain_beta in enumerate(beta):
        trace_axis.plot(chain + 0.85 * chain_beta[:num_shown], lw=0.6)
    trace_axis.set(
        xlabel="draw",
        ylabel="chain (lane: beta from 0 to 1)",
        yticks=np.arange(len(beta)),
        title=f"beta trace of each chain (first {num_shown} draws)",
    )

    figure.suptitle(title, fontsize="medium")
    figure.tight_layout()
    figure.savefig(output, dpi=90)


def _mode_weights(draws):
    """``[fraction x < 0, fraction x >= 0]`` as floats, like ``targets.bimodal_mode_weights``."""
    negative_fraction = float(np.mean(np.asarray(draws) < 0))
    return [negative_fraction, 1.0 - negative_fraction]


def _format_pair(pair):
    return f"{pair[0]:.3f} / {pair[1]:.3f}"


def _format_list(values, pattern="{:.2f}"):
    return "  ".join(pattern.format(value) for value in values)


def _report_results(report, results, base_log_zeta, num_chains):
    """Print the demo's numbers (``results`` as :func:`run_demo` returns them) with ``report``."""
    report("\nlog Z (log marginal likelihood)")
    report(f"  true                      {results['true_log_z']:.3f}")
    report(
        f"  joint CT                  {results['log_z']:.3f} +- {results['log_z_stderr']:.3f}"
        f"   (error {results['log_z_error_in_stderr']:+.2f} stderr; base guess log zeta "
        f"{base_log_zeta:.3f})"
    )
    report("\nMode weights (fraction x < 0 / x >= 0)")
    report(f"  true                      {_format_pair(results['true_mode_weights'])}")
    report(f"  joint CT (get_samples)    {_format_pair(results['ct_mode_weights'])}")
    report(f"  joint CT (weighted)       {_format_pair(results['ct_weighted_mode_weights'])}")
    report(
        f"  NUTS                      {_format_pair(results['nuts_mode_weights'])}   "
        f"({results['nuts_chains_visiting_both_modes']} of {num_chains} chains visited both "
        "modes)"
    )
    report("\nInverse-temperature mixing of joint CT, per chain")
    report(f"  fraction beta < 0.1       {_format_list(results['fraction_near_base'])}")
    report(f"  fraction beta > 0.9       {_format_list(results['fraction_near_target'])}")
    report(f"  round trips (0 -> 1 -> 0) {_format_list(results['round_trips'], '{:d}')}")
    passed = "passed" if results["base_moment_check_passed"] else "FAILED"
    report(f"  base-moment check (eq. 22) {passed}")


def run_demo(
    output="continuous_tempering_demo.png",
    seed=0,
    num_samples=3000,
    num_warmup=1000,
    num_chains=8,
    log_scale=2.0,
    base=None,
    fit_base_kwargs=None,
    progress_bar=None,
    verbose=True,
) -> dict:
    """Run joint continuous tempering and NUTS on the bimodal target, print a report, plot it.

    Both samplers run ``num_chains`` chains with ``chain_method="vectorized"`` (one device is
    enough). The tempering base density is fitted first with :func:`~numpyro_extras.fit_base`
    unless ``base`` is given (the kernel would fit it itself; doing it here times it separately).

    :param output: path of the PNG to write (it needs matplotlib, the ``[plot]`` extra);
        ``None`` writes no figure.
    :param int seed: seed of the base fit, both MCMC runs and the resampling.
    :param int num_samples: kept draws per chain, for each sampler.
    :param int num_warmup: warm-up draws per chain, for each sampler.
    :param int num_chains: chains per sampler.
    :param float log_scale: the target's exact ``log Z``.
    :param GaussianBase base: a tempering base density to use; ``None`` fits one.
    :param dict fit_base_kwargs: keyword arguments for :func:`~numpyro_extras.fit_base` (unused
        when ``base`` is given).
    :param bool progress_bar: show NumPyro's progress bars; ``None`` shows them only when stdout
        is a terminal (bars are noise in logs and captured output).
    :param bool verbose: print the report.
    :return: dict of the printed numbers: ``true_log_z``, ``log_z``, ``log_z_stderr``,
        ``log_z_error_in_stderr``, ``true_mode_weights``, ``ct_mode_weights`` (of
        ``mcmc.get_samples()``), ``ct_weighted_mode_weights`` (of the weighted tempered draws),
        ``nuts_mode_weights`` (each ``[fraction x < 0, fraction x >= 0]``),
        ``nuts_chains_visiting_both_modes``, ``fraction_near_base``, ``fraction_near_target``,
        ``round_trips`` (lists over chains), ``base_moment_check_passed``, ``base_fit_seconds``,
        ``ct_seconds``, ``nuts_seconds``, ``total_seconds`` and ``output``.
    """
    if output is not None:
        require_matplotlib("numpyro-extras demo")
    start = time.perf_counter()
    if progress_bar is None:
        progress_bar = sys.stdout.isatty()
    report = print if verbose else (lambda *args, **kwargs: None)
    model_kwargs = {"log_scale": log_scale}
    base_key, ct_key, nuts_key, resample_key = jax.random.split(jax.random.PRNGKey(seed), 4)
    sizes = dict(num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains)

    report(
        f"Target: {TARGET_NAME} scaled so that log Z = {log_scale:g}; "
        f"{num_chains} chains x ({num_warmup} warm-up + {num_samples}) draws per sampler."
    )
    if base is None:
        base_settings = {"progress_bar": progress_bar, **(fit_base_kwargs or {})}
        base = fit_base(base_key, bimodal_model, model_kwargs=model_kwargs, **base_settings)
    base_fit_seconds = time.perf_counter() - start

    ct_start = time.perf_counter()
    ct_mcmc = MCMC(
        JointContinuousTempering(bimodal_model, base=base),
        chain_method="vectorized",
        progress_bar=progress_bar,
        **sizes,
    )
    ct_mcmc.run(ct_key, **model_kwargs)
    evidence = log_marginal_likelihood(ct_mcmc)
    diagnostics = tempering_diagnostics(ct_mcmc)
    # The kernel's samples are posterior draws; the tempered chain's weighted draws (eq. 21)
    # estimate the same mode weights from every temperature.
    ct_draws = np.asarray(ct_mcmc.get_samples()["x"])
    ct_mode_weights = _mode_weights(ct_draws)
    weighted_mode_weights = _mode_weights(np.asarray(posterior_samples(ct_mcmc, resample_key)["x"]))
    ct_seconds = time.perf_counter() - ct_start

    nuts_start = time.perf_counter()
    nuts_mcmc = MCMC(
        NUTS(bimodal_model), chain_method="vectorized", progress_bar=progress_bar, **sizes
    )
    nuts_mcmc.run(nuts_key, **model_kwargs)
    nuts_x = np.asarray(nuts_mcmc.get_samples(group_by_chain=True)["x"])
    nuts_mode_weights = _mode_weights(nuts_x)
    nuts_chains_visiting_both_modes = int(
        np.sum((nuts_x < 0).any(axis=1) & (nuts_x >= 0).any(axis=1))
    )
    nuts_seconds = time.perf_counter() - nuts_start

    check = diagnostics["base_moment_check"]
    results = {
        "true_log_z": float(log_scale),
        "log_z": float(evidence.log_z),
        "log_z_stderr": float(evidence.stderr),
        "log_z_error_in_stderr": float((evidence.log_z - log_scale) / evidence.stderr),
        "true_mode_weights": list(BIMODAL_WEIGHTS),
        "ct_mode_weights": ct_mode_weights,
        "ct_weighted_mode_weights": weighted_mode_weights,
        "nuts_mode_weights": nuts_mode_weights,
        "nuts_chains_visiting_both_modes": nuts_chains_visiting_both_modes,
        "fraction_near_base": diagnostics["fraction_near_base"].tolist(),
        "fraction_near_target": diagnostics["fraction_near_target"].tolist(),
        "round_trips": diagnostics["round_trips"].tolist(),
        "base_moment_check_passed": bool(check.passed),
    }
    _report_results(report, results, float(base.log_zeta), num_chains)

    if output is not None:
        beta = np.asarray(ct_mcmc.get_extra_fields(group_by_chain=True)["beta"])
        tempered_x = np.asarray(tempered_samples(ct_mcmc, group_by_chain=True)["x"])
        _plot(
            output,
            ct_draws,
            nuts_x.ravel(),
            tempered_x,
            beta,
            title=(
                f"Continuous tempering vs NUTS: log Z = {evidence.log_z:.2f} +- "
                f"{evidence.stderr:.2f} (true {log_scale:g}); mode weights CT "
                f"{_format_pair(ct_mode_weights)}, NUTS {_format_pair(nuts_mode_weights)}"
            ),
        )
    total_seconds = time.perf_counter() - start
    report(
        f"\nTime: base fit {base_fit_seconds:.1f} s, joint CT {ct_seconds:.1f} s, "
        f"NUTS {nuts_seconds:.1f} s, total {total_seconds:.1f} s"
    )
    if output is not None:
        report(f"Wrote {output}")
    return {
        **results,
        "base_fit_seconds": base_fit_seconds,
        "ct_seconds": ct_seconds,
        "nuts_seconds": nuts_seconds,
        "total_seconds": total_seconds,
        "output": None if output is None else str(output),
    }
