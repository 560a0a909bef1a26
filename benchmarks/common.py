"""What every benchmark script shares: progress lines, the environment block of a report, the
repository commit, and formatting.

The scripts print a Markdown report; its environment block says what ran where, so a table in
docs/benchmarks.md can be traced to the command and commit that made it.
"""

from __future__ import annotations

import datetime
import functools
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time
from typing import NamedTuple

import arviz
import jax
import numpy as np
import numpyro

import numpyro_extras as nx
from numpyro_extras.model.potential import flatten_model

_STARTED = time.perf_counter()


@functools.cache
def _radon_log_z():
    from numpyro_extras.targets import load_radon, radon_log_marginal_likelihood

    return radon_log_marginal_likelihood(**load_radon())


def __getattr__(name):
    # The radon regression's exact log Z (RADON_LOG_Z), by the quadrature of
    # numpyro_extras/targets/radon_evidence.py, computed when a script first reads it.
    if name == "RADON_LOG_Z":
        return _radon_log_z()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def readme_ais(seed, model, model_args=(), model_kwargs=None):
    """``nx.ais`` as the README calls it (1000 particles x 200 temperatures, every other
    setting at its default), keyed by ``PRNGKey(seed)``, without a progress bar."""
    return nx.ais(
        jax.random.PRNGKey(seed),
        model,
        model_args,
        model_kwargs,
        num_particles=1000,
        num_temperatures=200,
        progress_bar=False,
    )


# Gradient evaluations of a continuous tempering transition beside its two moves' leapfrog
# steps (``num_steps`` and ``replica_num_steps``): phi at the moved x and at a draw from the base.
TEMPERING_EVALUATIONS_BESIDE_MOVES = 2


def log(message):
    """A progress line on stderr (stdout holds only the Markdown report), with the seconds since
    the script started."""
    print(f"[{elapsed_seconds():7.1f} s] {message}", file=sys.stderr, flush=True)


def elapsed_seconds():
    """Seconds since the script started (since this module was imported)."""
    return time.perf_counter() - _STARTED


_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
#: JAX tracing and compilation seconds per label of :class:`compile_clock`.
COMPILE_SECONDS: dict[str, float] = {}
_compile_label = ["other (base fits, estimators, set-up)"]


def _record_compile_time(event, duration, **_):
    if event in _COMPILE_EVENTS:
        label = _compile_label[-1]
        COMPILE_SECONDS[label] = COMPILE_SECONDS.get(label, 0.0) + duration


jax.monitoring.register_event_duration_secs_listener(_record_compile_time)


class compile_clock:
    """Attribute the JAX tracing and compilation time spent inside the block to ``label``
    (summed in :data:`COMPILE_SECONDS`)."""

    def __init__(self, label):
        self.label = label

    def __enter__(self):
        _compile_label.append(self.label)

    def __exit__(self, *exc_info):
        _compile_label.pop()


def compile_table():
    """:data:`COMPILE_SECONDS` as a Markdown table, largest first."""
    lines = ["| Runs | Tracing + compilation (s) |", "|---|---|"]
    for label, seconds in sorted(COMPILE_SECONDS.items(), key=lambda item: -item[1]):
        lines.append(f"| {label} | {seconds:.0f} |")
    return "\n".join(lines)


def verdict(met):
    """A target's verdict cell: ``met`` or a bold ``not met``."""
    return "met" if met else "**not met**"


def _git(*arguments):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    command = ["git", "-C", root, *arguments]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def package_commit():
    """The repository's commit (with ``+changes`` when the tree is dirty), or ``"unknown"``."""
    try:
        commit = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def run_environment(script, arguments, elapsed):
    """What a stored result records of the run that made it, for the docs page to print beside
    its table (``benchmarks/render_page.py``): the command, the commit, the machine, the
    versions and the wall time; no date (git dates the commit).

    :param str script: the script's file name.
    :param arguments: the command-line arguments it ran with.
    :param float elapsed: seconds the run took.
    :return: a JSON-serialisable dict.
    """
    return {
        "command": " ".join(["python", f"benchmarks/{script}", *arguments]),
        "commit": package_commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "versions": f"Python {platform.python_version()}, "
        + ", ".join(f"{module.__name__} {module.__version__}" for module in (jax, numpyro, arviz)),
        "minutes": round(elapsed / 60, 1),
    }


def environment_lines(script, arguments, elapsed, settings=None, *, compile_time=False):
    """The environment block of a report, as Markdown list lines.

    :param str script: the script's file name.
    :param arguments: the command-line arguments it ran with.
    :param float elapsed: seconds the run took.
    :param settings: anything else worth recording (printed as is).
    :param bool compile_time: also say how much of the wall time was JAX tracing and compilation
        (:data:`COMPILE_SECONDS`).
    """
    versions = ", ".join(
        f"{module.__name__} {module.__version__}" for module in (jax, numpyro, nx, np, arviz)
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"- Command: `{' '.join(['python', f'benchmarks/{script}', *arguments])}`",
        f"- Date: {datetime.datetime.now().isoformat(timespec='minutes')}",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPU cores, {platform.platform()}, "
        f"Python {platform.python_version()}; load average at the end {load:.1f}",
        f"- Versions: {versions} (repository commit {package_commit()})",
        f"- Total wall time: {elapsed / 60:.1f} min"
        + (
            f", of which {sum(COMPILE_SECONDS.values()) / 60:.1f} min JAX tracing and compilation"
            if compile_time
            else ""
        ),
    ]
    if settings is not None:
        lines.append(f"- Settings: {settings}")
    return lines


def fmt(value, digits=3):
    """A number for a table: ``-`` for NaN, else ``digits`` significant digits."""
    if value is None or not np.isfinite(value):
        return "-"
    return f"{value:.{digits}g}"


def markdown_table(header, rows):
    """A Markdown table from a header and rows of already formatted cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def in_fresh_process(function, *arguments):
    """``function(*arguments)`` in a new Python process, its result returned here.

    A first call's wall time is what a user waits for in a new session: run in this process
    after another kernel, it would find the model's operations already compiled. ``function``
    must be defined at the top level of an importable module (or the script) and its result
    must pickle.
    """
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, arguments)


def read_runs(path):
    """The runs saved by :func:`save_run` in a JSON-lines file, one dict per run."""
    with open(path) as stream:
        return [json.loads(line) for line in stream if line.strip()]


def save_run(path, run):
    """Append one run's results (a JSON-serialisable dict) to a JSON-lines file, so that a long
    benchmark can be resumed or its tables rebuilt in a fresh process."""
    with open(path, "a") as stream:
        stream.write(json.dumps(run) + "\n")


def publish_report(report, output=None):
    """Print a Markdown report on stdout and, if ``output`` is given, also write it there."""
    print(report)
    if output:
        with open(output, "w") as stream:
            stream.write(report)


# flowMC's normalising flow + MALA bundle as the learned-proposal anchor: 20 chains, 20 training
# and 10 production loops of 100 local and 100 global steps, 20 flow epochs per loop.
FLOWMC = dict(
    n_chains=20,
    n_local_steps=100,
    n_global_steps=100,
    n_training_loops=20,
    n_production_loops=10,
    n_epochs=20,
)


class FlowMCRun(NamedTuple):
    """A flowMC run: production draws ``(chains, draws, dimension)`` on the model's flat
    unconstrained space, target-density evaluations, wall seconds (training and production in
    one run) and the global (flow) proposals' acceptance rate."""

    draws: np.ndarray
    evaluations: int
    seconds: float
    global_accept_rate: float


def run_flowmc(model, model_args, seed, settings=FLOWMC):
    """flowMC 0.6's ``RQSpline_MALA_Bundle`` on a NumPyro model's flat potential, from the
    starts of NumPyro's ``init_to_uniform``; ``None`` when flowMC is not installed
    (``pip install -e ".[bench]"``)."""
    try:
        from flowMC.resource_strategy_bundle.RQSpline_MALA import RQSpline_MALA_Bundle
        from flowMC.Sampler import Sampler
    except ImportError:
        return None
    start = time.perf_counter()
    flat = flatten_model(jax.random.PRNGKey(seed), model, model_args, {}, kernel_name="flowMC")
    bundle_key, sampler_key, start_key = jax.random.split(jax.random.PRNGKey(seed), 3)
    bundle = RQSpline_MALA_Bundle(
        bundle_key,
        n_dims=flat.dimension,
        logpdf=lambda x, data: -flat.potential_fn(x),
        **settings,
    )
    sampler = Sampler(
        n_dim=flat.dimension,
        n_chains=settings["n_chains"],
        rng_key=sampler_key,
        resource_strategy_bundles=bundle,
        checkpoint_interval=0,
    )
    starts = jax.random.uniform(
        start_key, (settings["n_chains"], flat.dimension), minval=-2, maxval=2
    )
    sampler.sample(starts, {})
    draws = np.asarray(sampler.resources["positions_production"].data)
    # flowMC fills its buffers with -inf until a step writes them.
    draws = draws[:, np.all(np.isfinite(draws), axis=(0, 2))]
    loops = settings["n_training_loops"] + settings["n_production_loops"]
    steps = settings["n_local_steps"] + settings["n_global_steps"]
    accepted = np.asarray(sampler.resources["global_accs_production"].data)
    return FlowMCRun(
        draws=draws,
        evaluations=settings["n_chains"] * loops * steps,
        seconds=time.perf_counter() - start,
        global_accept_rate=float(np.mean(accepted[np.isfinite(accepted)])),
    )
