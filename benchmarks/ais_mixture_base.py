"""nx.ais on Boltzmann-machine relaxations: the default base against fit_base's mixture base.

One Gaussian (``base="auto"``) covers one mode of these multimodal targets; the Gaussian mixture
that :func:`numpyro_extras.fit_base` returns by default puts a component on each mode it finds.
Both runs use 1000 particles and 500 temperatures and the same key; the exact ``log Z`` comes
from enumerating the machine's states.

Usage::

    python benchmarks/ais_mixture_base.py --seeds 0 1 2 \
        --output benchmarks/results/ais_mixture_base.md
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpyro

numpyro.enable_x64()

import jax  # noqa: E402
from common import environment_lines, publish_report  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras import targets  # noqa: E402

NUM_PARTICLES, NUM_TEMPERATURES = 1000, 500


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-units", type=int, default=16)
    parser.add_argument("--output", help="also write the Markdown report to this file")
    args = parser.parse_args(argv)
    argv_used = sys.argv[1:] if argv is None else list(argv)
    run_began = time.perf_counter()
    rows = [
        "| seed | base | log Z error | stderr | warned | s (fit + run) |",
        "|---|---|---|---|---|---|",
    ]
    for seed in args.seeds:
        relaxation = targets.make_boltzmann_relaxation(seed, args.num_units)
        model, model_args = targets.boltzmann_relaxation_model, (relaxation,)
        key = jax.random.PRNGKey(seed)
        for name in ("auto", "fit_base mixture"):
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                base = (
                    "auto"
                    if name == "auto"
                    else nx.fit_base(key, model, model_args, progress_bar=False)
                )
                evidence = nx.ais(
                    key,
                    model,
                    model_args,
                    num_particles=NUM_PARTICLES,
                    num_temperatures=NUM_TEMPERATURES,
                    base=base,
                    progress_bar=False,
                )
            seconds = time.perf_counter() - start
            warned = any(issubclass(w.category, UserWarning) for w in caught)
            rows.append(
                f"| {seed} | {name} | {evidence.log_z - relaxation.log_z:+.3f} "
                f"| {evidence.stderr:.3f} | {'yes' if warned else 'no'} | {seconds:.0f} |"
            )
            print(rows[-1], flush=True)
    environment = environment_lines(
        "ais_mixture_base.py", argv_used, time.perf_counter() - run_began
    )
    heading = "## log Z error against exact enumeration"
    report = "\n".join(["## Environment", "", *environment, "", heading, "", *rows, ""])
    publish_report(report, args.output)


if __name__ == "__main__":
    main()
