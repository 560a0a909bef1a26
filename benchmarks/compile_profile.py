"""Where a kernel's first call spends its compilation: every XLA compilation of one first call,
grouped by the package's (or NumPyro's) call site that asked for it.

One pair of ``latency_benchmark.py`` (its models and kernels, its settings:
``MCMC(kernel(model), num_warmup=1000, num_samples=2000, num_chains=4,
chain_method="vectorized")``, float64), in this process, with JAX's compile log on. The report
lists the call sites by compilation seconds (with the number of programs each compiled), then
the first call's wall time, the total compilation seconds and the number of programs. ``ais``
and ``fit_base`` run as ``latency_benchmark.py`` runs them.

Usage::

    python benchmarks/compile_profile.py VAESLMC two_mode_regression
    python benchmarks/compile_profile.py fit_base mixture_means --sites 10
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import time
import traceback

COMPILE_MESSAGE = re.compile(r"Finished XLA compilation of (.+) in ([0-9.e-]+) ?s")
# Frames that name who asked for a compilation: the package's and NumPyro's inference code.
CALLER_PATHS = ("numpyro_extras", os.path.join("numpyro", "infer"))


class CompileLog(logging.Handler):
    """Collects ``(seconds, call site)`` of every XLA compilation JAX logs."""

    def __init__(self, depth):
        super().__init__(logging.DEBUG)
        self.depth = depth
        self.records = []

    def emit(self, record):
        match = COMPILE_MESSAGE.search(record.getMessage())
        if match is None:
            return
        frames = [
            frame
            for frame in traceback.extract_stack()
            if any(path in frame.filename for path in CALLER_PATHS)
        ]
        site = " <- ".join(
            f"{os.path.basename(frame.filename)}:{frame.lineno} {frame.name}"
            for frame in reversed(frames[-self.depth :])
        )
        self.records.append((float(match.group(2)), site or "(outside the package)"))


def first_call(kernel_name, model_name):
    """Run the pair's first call; its wall seconds."""
    from latency_benchmark import model_and_data, user_call

    model, args = model_and_data(model_name)
    call = user_call(kernel_name, model, args)
    start = time.perf_counter()
    call(0)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kernel", help="a kernel of latency_benchmark.py, 'ais' or 'fit_base'")
    parser.add_argument("model", help="a model of latency_benchmark.py")
    parser.add_argument("--sites", type=int, default=20, help="call sites to list")
    parser.add_argument("--depth", type=int, default=3, help="frames per call site")
    arguments = parser.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    log = CompileLog(arguments.depth)
    for name in ("jax._src.interpreters.pxla", "jax._src.dispatch", "jax._src.compiler"):
        logger = logging.getLogger(name)
        logger.addHandler(log)
        logger.setLevel(logging.DEBUG)
    # The log goes to the handler alone, not to stderr.
    logging.getLogger("jax").propagate = False
    jax.config.update("jax_log_compiles", True)
    wall = first_call(arguments.kernel, arguments.model)

    seconds = collections.defaultdict(float)
    programs = collections.Counter()
    for spent, site in log.records:
        seconds[site] += spent
        programs[site] += 1
    print(f"| compile (s) | programs | call site ({arguments.kernel} on {arguments.model}) |")
    print("|---|---|---|")
    for site, spent in sorted(seconds.items(), key=lambda item: -item[1])[: arguments.sites]:
        print(f"| {spent:.2f} | {programs[site]} | {site} |")
    total = sum(seconds.values())
    print(
        f"\nfirst call {wall:.1f} s, of which XLA compilation {total:.1f} s in "
        f"{sum(programs.values())} programs"
    )


if __name__ == "__main__":
    main()
