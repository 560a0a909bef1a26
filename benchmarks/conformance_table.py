"""What each kernel is for: every public kernel at its defaults on every model of the
conformance zoo (``tests/conformance/zoo.py``), with the suite's checks, as one table.

The conformance suite (``tests/conformance/``) runs a share of these pairs within CI's time;
this script runs all of them, each kernel on every model of a kind it takes and a refusal on
the others, with the suite's run sizes (2 chains x (300 + 600) draws, vectorized; the discrete
kernels 4 chains x (500 + 5000) steps, thinned by 5) and its checks: the posterior's moments and
mode weights within 4 Monte Carlo standard errors of the exact answer (with a standard error
small enough to catch a broken sampler), and ``log Z`` within 4 stderr (stderr at most 0.15)
where the kernel gives one and the model has an exact value.

Each cell is one of: ``right`` (every check passes, nothing warned), ``right, warned``,
``imprecise`` (every estimate within 4 of its standard errors of the exact value, but some
standard error too wide for the check to tell a broken sampler at the suite's run length),
``wrong, warned`` (a check fails and the run warned: never confidently wrong), ``WRONG,
SILENT`` (a check fails and nothing warned: a bug), ``refused`` (the kernel refuses the model
with an error that names the kernel that serves it) or ``error`` (anything else raised), with
the run's seconds (the pairs run one after another in one process, each after
``jax.clear_caches()``, so a cell's seconds are its own compilation and run).

Usage::

    python benchmarks/conformance_table.py --output table.md
    python benchmarks/conformance_table.py --kernels ACS DMALA --models ising_chain mixed
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpyro

numpyro.set_host_device_count(2)
numpyro.enable_x64()

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
sys.path[:0] = [os.path.join(TESTS, "conformance"), TESTS]

import jax  # noqa: E402
import numpy as np  # noqa: E402
from conformance_runs import (  # noqa: E402
    ESTIMATING,
    KERNELS,
    MAX_ABS_Z,
    MAX_LOG_Z_STDERR,
    check_failures,
    kernel_fields,
    make_mcmc,
    package_warnings,
)
from zoo import CONTINUOUS, DISCRETE, MIXED, ZOO  # noqa: E402

import numpyro_extras as nx  # noqa: E402

# The kinds of model each kernel takes; on the others it must refuse.
SCOPE = {
    "JointContinuousTempering": (CONTINUOUS,),
    "GibbsContinuousTempering": (CONTINUOUS,),
    "ReplicaExchange": (CONTINUOUS,),
    "ReplicaExchange(ACS)": (DISCRETE, MIXED),
    "ACS": (DISCRETE,),
    "ACS(NUTS)": (MIXED,),
    "DMALA": (DISCRETE,),
    "AiSampler": (CONTINUOUS,),
    "VAESLMC": (CONTINUOUS,),
}
# nx.ACS with NUTS moving the continuous sites, the kernel its refusal of a mixed model names.
KERNELS = {**KERNELS, "ACS(NUTS)": lambda model: nx.ACS(model, inner_kernel=numpyro.infer.NUTS)}


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_cell(kernel_name, model_name):
    """One pair's outcome: ``(cell, seconds, details)``."""
    zoo_model = ZOO[model_name]
    jax.clear_caches()
    start = time.perf_counter()
    in_scope = zoo_model.kind in SCOPE[kernel_name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if kernel_name == "ACS(NUTS)":
                sizes = dict(num_warmup=300, num_samples=600, num_chains=2)
                mcmc = numpyro.infer.MCMC(
                    KERNELS[kernel_name](zoo_model.model),
                    chain_method="vectorized",
                    progress_bar=False,
                    **sizes,
                )
            else:
                mcmc = make_mcmc(kernel_name, model_name)
            mcmc.run(
                jax.random.PRNGKey(0), *zoo_model.args, extra_fields=kernel_fields(kernel_name)
            )
            jax.block_until_ready(mcmc.get_samples())
        except ValueError as error:
            seconds = time.perf_counter() - start
            if not in_scope:
                return "refused", seconds, str(error).splitlines()[0][:160]
            return "error", seconds, f"ValueError: {error}"[:200]
        except Exception as error:  # noqa: BLE001 - the table reports whatever a kernel raises
            return "error", time.perf_counter() - start, f"{type(error).__name__}: {error}"[:200]
        failures = check_failures(zoo_model.checks, mcmc.get_samples(group_by_chain=True))
        if kernel_name in ESTIMATING and zoo_model.log_z is not None:
            evidence = nx.log_marginal_likelihood(mcmc)
            error = evidence.log_z - zoo_model.log_z
            if abs(error) > max(MAX_ABS_Z * evidence.stderr, 1e-8):
                failures.append(f"log Z {evidence.log_z:.3f} +- {evidence.stderr:.3f}")
            elif evidence.stderr > MAX_LOG_Z_STDERR:
                failures.append(f"log Z: stderr above {MAX_LOG_Z_STDERR} ({evidence.stderr:.3f})")
    seconds = time.perf_counter() - start
    warned = package_warnings(caught)
    if not in_scope:
        return "ran out of scope", seconds, "no refusal"
    # A run whose estimates are all within their errors but whose errors are too wide for the
    # check to tell is imprecise at the suite's size, not wrong.
    imprecise = failures and all("stderr above" in failure for failure in failures)
    if imprecise:
        cell = "imprecise, warned" if warned else "imprecise"
    elif failures:
        cell = "wrong, warned" if warned else "WRONG, SILENT"
    else:
        cell = "right, warned" if warned else "right"
    details = "; ".join(
        failures + [w.split(":")[0] + ": " + w.split(":", 1)[1][:90] for w in warned]
    )
    return cell, seconds, details


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", default=list(SCOPE), choices=list(SCOPE))
    parser.add_argument("--models", nargs="+", default=list(ZOO), choices=list(ZOO))
    parser.add_argument("--output", default=None, help="also write the table here")
    args = parser.parse_args()
    cells, notes = {}, []
    for kernel_name in args.kernels:
        for model_name in args.models:
            log(f"{kernel_name} on {model_name}")
            cell, seconds, details = run_cell(kernel_name, model_name)
            cells[kernel_name, model_name] = f"{cell} ({seconds:.0f} s)"
            log(f"  {cell}, {seconds:.1f} s {details}")
            if details and cell != "right":
                notes.append(f"- {kernel_name} on {model_name}: {details}")
    lines = [
        "| kernel | " + " | ".join(args.models) + " |",
        "|---|" + "---|" * len(args.models),
    ]
    for kernel_name in args.kernels:
        row = [cells[kernel_name, model_name] for model_name in args.models]
        lines.append(f"| {kernel_name} | " + " | ".join(row) + " |")
    report = "\n".join(lines + ["", *notes, ""])
    environment = (
        f"Python {sys.version.split()[0]}, jax {jax.__version__}, numpyro {numpyro.__version__}, "
        f"{os.cpu_count()} CPU cores"
    )
    report += f"\n{environment}\n"
    print(report)
    if args.output:
        with open(args.output, "w") as handle:
            handle.write(report)
    return 0 if not any("SILENT" in cell or "error" in cell for cell in cells.values()) else 1


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    sys.exit(main())
