"""How the cost of ``nx.ais`` grows with its particles, that of ``nx.ReplicaExchange`` with its
replicas, that of ``nx.batched_ais`` with its data sets, and that of a kernel's chains, on one and
on several devices.

Each point is one fresh Python process with ``numpyro.set_host_device_count(D)`` (the device
count is fixed before JAX starts) that runs the workload twice with its lanes split over ``D``
devices (``devices=D``): the first call (compilation included) and the second (the same program
again, so the run alone). It records both wall times and the process's peak resident memory.
The model is a logistic regression (6 features and an intercept, 200 synthetic labels), or for
``datasets`` a small linear regression per data set.

- ``particles``: ``nx.ais`` from the prior (``base="prior"``), 200 temperatures, ``N``
  particles.
- ``replicas``: ``MCMC(nx.ReplicaExchange(model, num_replicas=R, reference="prior"),
  num_warmup=200, num_samples=500, num_chains=4, chain_method="vectorized")``, one ladder of
  ``R`` rungs from the prior (its other settings the defaults); the second call is a second
  ``mcmc.run`` of the same ``MCMC``.
- ``datasets``: ``nx.batched_ais`` over ``S`` data sets of a linear regression (slope,
  intercept and noise scale, 20 points each), its defaults (a Gaussian VI fit per data set),
  200 particles and 100 temperatures. On one device the point also times ``nx.ais`` with the
  same settings on three of the data sets after a first call (its compilation and base fit
  cached), the loop a user would otherwise write, for the speed-up column.
- ``chains``: ``MCMC(nx.JointContinuousTempering(model), num_warmup=500, num_samples=1000,
  num_chains=C)``, its defaults, with ``chain_method="vectorized"`` on one device and
  ``"parallel"`` (a chain per device, NumPyro's ``pmap``) on several; a point with more chains
  than devices is left out, as NumPyro would draw its chains one after the other.

On CPU, ``D`` host devices share the machine's cores: the speed-up of ``D`` devices is bounded
by the cores, and the same script on a machine with ``D`` GPUs (``--devices`` counting
``jax.devices()``; no host-device flag is set when ``--gpu`` is given) gives the curves there.

Usage::

    python benchmarks/scaling_benchmark.py                     # particles, every default point
    python benchmarks/scaling_benchmark.py --workload replicas  # replicas 8, 16, 32
    python benchmarks/scaling_benchmark.py --workload datasets  # data sets 100, 300, 1000
    python benchmarks/scaling_benchmark.py --workload chains    # chains 2, 4, 16
    python benchmarks/scaling_benchmark.py --sizes 4000 16000 --devices 1 2
    python benchmarks/render_page.py                           # the tables into docs/benchmarks.md

Results go to ``benchmarks/results/scaling.json`` (particles),
``benchmarks/results/scaling_replicas.json``, ``benchmarks/results/scaling_datasets.json`` and
``benchmarks/results/scaling_chains.json`` with the run's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = {
    "particles": HERE / "results" / "scaling.json",
    "replicas": HERE / "results" / "scaling_replicas.json",
    "datasets": HERE / "results" / "scaling_datasets.json",
    "chains": HERE / "results" / "scaling_chains.json",
}
DEFAULT_SIZES = {
    "particles": [2000, 8000, 32000],
    "replicas": [8, 16, 32],
    "datasets": [100, 300, 1000],
    "chains": [2, 4, 16],
}
TEMPERATURES = 200

SET_UP = """
import json, resource, sys, time
num_devices, size, gpu = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "gpu"
import numpyro
if not gpu:
    numpyro.set_host_device_count(num_devices)
numpyro.enable_x64()
import jax, jax.numpy as jnp, numpyro.distributions as dist
from numpyro.infer import MCMC
import numpyro_extras as nx

def model(features, labels):
    coefficients = numpyro.sample("coefficients", dist.Normal(0.0, 1.0).expand([6]).to_event(1))
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 2.0))
    with numpyro.plate("data", labels.shape[0]):
        numpyro.sample("labels", dist.Bernoulli(logits=features @ coefficients + intercept),
                       obs=labels)

features = jax.random.normal(jax.random.PRNGKey(1), (200, 6))
labels = (features @ jnp.linspace(-1.0, 1.0, 6) + 0.3 > 0).astype(jnp.float64)
seconds = []
extra = {}
"""

RUNS = {
    "particles": """
for seed in (0, 1):
    start = time.perf_counter()
    evidence = nx.ais(jax.random.PRNGKey(seed), model, (features, labels),
                      num_particles=size, num_temperatures=TEMPERATURES, base="prior",
                      devices=num_devices, progress_bar=False)
    seconds.append(time.perf_counter() - start)
""".replace("TEMPERATURES", str(TEMPERATURES)),
    "replicas": """
kernel = nx.ReplicaExchange(model, num_replicas=size, reference="prior", devices=num_devices)
mcmc = MCMC(kernel, num_warmup=200, num_samples=500, num_chains=4, chain_method="vectorized",
            progress_bar=False)
for seed in (0, 1):
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), features, labels)
    seconds.append(time.perf_counter() - start)
evidence = nx.log_marginal_likelihood(mcmc)
""",
    "datasets": """
def line(x, y):
    slope = numpyro.sample("slope", dist.Normal(0.0, 2.0))
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 2.0))
    scale = numpyro.sample("scale", dist.HalfNormal(1.0))
    with numpyro.plate("points", x.shape[-1]):
        numpyro.sample("y", dist.Normal(intercept + slope * x, scale), obs=y)

xs = jax.random.normal(jax.random.PRNGKey(2), (size, 20))
slopes = jax.random.normal(jax.random.PRNGKey(3), (size, 1))
ys = 0.5 + slopes * xs + 0.3 * jax.random.normal(jax.random.PRNGKey(4), xs.shape)
settings = dict(num_particles=200, num_temperatures=100, progress_bar=False)
for seed in (0, 1):
    start = time.perf_counter()
    evidences = nx.batched_ais(jax.random.PRNGKey(seed), line, (xs, ys), devices=num_devices,
                               **settings)
    seconds.append(time.perf_counter() - start)
evidence = evidences[0]
extra["flagged"] = sum(bool(e.problems) for e in evidences)
if num_devices == 1:
    import warnings
    warnings.simplefilter("ignore")
    nx.ais(jax.random.PRNGKey(0), line, (xs[0], ys[0]), **settings)
    start = time.perf_counter()
    for index in range(1, 4):
        nx.ais(jax.random.PRNGKey(0), line, (xs[index], ys[index]), **settings)
    extra["loop_seconds_per_data_set"] = (time.perf_counter() - start) / 3
""",
    "chains": """
chain_method = "vectorized" if num_devices == 1 else "parallel"
mcmc = MCMC(nx.JointContinuousTempering(model), num_warmup=500, num_samples=1000,
            num_chains=size, chain_method=chain_method, progress_bar=False)
for seed in (0, 1):
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), features, labels)
    seconds.append(time.perf_counter() - start)
evidence = nx.log_marginal_likelihood(mcmc)
extra["chain_method"] = chain_method
""",
}

REPORT = """
print(json.dumps({"devices": num_devices, "size": size, "first": seconds[0],
                  "second": seconds[1], "log_z": float(evidence.log_z),
                  "stderr": float(evidence.stderr),
                  "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  **extra}))
"""


def run_point(workload, num_devices, size, gpu=False):
    """One point in a fresh process: ``dict`` with both calls' seconds and the peak memory."""
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            SET_UP + RUNS[workload] + REPORT,
            str(num_devices),
            str(size),
            "gpu" if gpu else "",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def scaling_table(records, workload="particles"):
    """Markdown: per size (particles, replicas or data sets), each device count's seconds and
    memory, the second call's seconds per unit of work, and for data sets the speed-up over a
    loop of ``nx.ais`` and the data sets flagged."""
    from common import markdown_table

    unit = {"particles": 1000, "replicas": 1, "datasets": 1, "chains": 1}[workload]
    unit_name = {
        "particles": "1000 particles",
        "replicas": "replica",
        "datasets": "data set",
        "chains": "chain",
    }[workload]
    baseline = {record["size"]: record["second"] for record in records if record["devices"] == 1}
    loop = {
        record["size"]: record["loop_seconds_per_data_set"]
        for record in records
        if "loop_seconds_per_data_set" in record
    }
    rows = []
    for record in sorted(records, key=lambda r: (r["size"], r["devices"])):
        row = [
            str(record["size"]),
            f"{record['devices']} ({record['chain_method']})"
            if "chain_method" in record
            else str(record["devices"]),
            f"{record['first']:.1f}",
            f"{record['second']:.2f}",
            f"{unit * record['second'] / record['size']:.3f}",
            f"{baseline[record['size']] / record['second']:.2f}"
            if record["size"] in baseline
            else "-",
            f"{record['peak_memory_mb']:.0f}",
            f"{record['log_z']:.3f} ± {record['stderr']:.3f}",
        ]
        if workload == "datasets":
            per_data_set = record["second"] / record["size"]
            row[-1:-1] = [
                f"{loop[record['size']] / per_data_set:.0f}" if record["size"] in loop else "-",
                str(record["flagged"]),
            ]
        rows.append(row)
    header = [
        {"datasets": "data sets"}.get(workload, workload),
        "devices",
        "first call (s)",
        "second call (s)",
        f"second call s / {unit_name}",
        "speed-up over 1 device",
        "peak memory (MB)",
        "log Z" if workload != "datasets" else "log Z of the first data set",
    ]
    if workload == "datasets":
        header[-1:-1] = ["speed-up over a loop of nx.ais", "data sets flagged"]
    return markdown_table(header, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(RUNS), default="particles")
    parser.add_argument(
        "--sizes", nargs="+", type=int, help="particles, replicas or data sets per point"
    )
    parser.add_argument("--devices", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--gpu", action="store_true", help="count jax.devices(), no host flag")
    arguments = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from common import log, run_environment

    workload = arguments.workload
    started = time.perf_counter()
    records = []
    for size in arguments.sizes or DEFAULT_SIZES[workload]:
        for num_devices in arguments.devices:
            if workload == "chains" and 1 < num_devices < size:
                continue  # NumPyro draws more chains than devices one after the other
            log(f"{size} {workload} on {num_devices} device(s)")
            records.append(run_point(workload, num_devices, size, arguments.gpu))
            log(f"  {records[-1]}")
    environment = run_environment(
        "scaling_benchmark.py",
        sys.argv[1:] if argv is None else argv,
        time.perf_counter() - started,
    )
    results = RESULTS[workload]
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"environment": environment, "records": records}, indent=1))
    print(scaling_table(records, workload))
    print(f"\nwritten to {os.path.relpath(results)}")


if __name__ == "__main__":
    main()
