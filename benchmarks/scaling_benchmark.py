"""How the cost of ``nx.ais`` grows with its particles, on one and on several devices.

Each point is one fresh Python process with ``numpyro.set_host_device_count(D)`` (the device
count is fixed before JAX starts) that runs ``nx.ais`` on a logistic regression (6 features and
an intercept, 200 synthetic labels, ``base="prior"``, 200 temperatures) twice with the particles
split over ``D`` devices (``devices=D``): the first call (compilation included) and the second
(the same program again, so the annealing alone). It records both wall times and the process's
peak resident memory. On CPU, ``D`` host devices share the machine's cores: the speed-up of
``D`` devices is bounded by the cores, and the same script on a machine with ``D`` GPUs
(``--devices`` counting ``jax.devices()``; no host-device flag is set when ``--gpu`` is given)
gives the curves there.

Usage::

    python benchmarks/scaling_benchmark.py                     # every default point
    python benchmarks/scaling_benchmark.py --particles 4000 16000 --devices 1 2
    python benchmarks/render_page.py                           # the table into docs/benchmarks.md

Results go to ``benchmarks/results/scaling.json`` with the run's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "scaling.json"
TEMPERATURES = 200

WORKER = """
import json, resource, sys, time
num_devices, num_particles, gpu = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "gpu"
import numpyro
if not gpu:
    numpyro.set_host_device_count(num_devices)
numpyro.enable_x64()
import jax, jax.numpy as jnp, numpyro.distributions as dist
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
for seed in (0, 1):
    start = time.perf_counter()
    evidence = nx.ais(jax.random.PRNGKey(seed), model, (features, labels),
                      num_particles=num_particles, num_temperatures=TEMPERATURES, base="prior",
                      devices=num_devices, progress_bar=False)
    seconds.append(time.perf_counter() - start)
print(json.dumps({"devices": num_devices, "particles": num_particles, "first": seconds[0],
                  "second": seconds[1], "log_z": float(evidence.log_z),
                  "stderr": float(evidence.stderr),
                  "peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""".replace("TEMPERATURES", str(TEMPERATURES))


def run_point(num_devices, num_particles, gpu=False):
    """One point in a fresh process: ``dict`` with both calls' seconds and the peak memory."""
    completed = subprocess.run(
        [sys.executable, "-c", WORKER, str(num_devices), str(num_particles), "gpu" if gpu else ""],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def scaling_table(records):
    """Markdown: per particle count, each device count's seconds and memory, and the second
    call's seconds per thousand particles."""
    from common import markdown_table

    baseline = {
        record["particles"]: record["second"] for record in records if record["devices"] == 1
    }
    rows = [
        [
            str(record["particles"]),
            str(record["devices"]),
            f"{record['first']:.1f}",
            f"{record['second']:.2f}",
            f"{1000 * record['second'] / record['particles']:.3f}",
            f"{baseline[record['particles']] / record['second']:.2f}"
            if record["particles"] in baseline
            else "-",
            f"{record['peak_memory_mb']:.0f}",
            f"{record['log_z']:.3f} ± {record['stderr']:.3f}",
        ]
        for record in sorted(records, key=lambda r: (r["particles"], r["devices"]))
    ]
    header = [
        "particles",
        "devices",
        "first call (s)",
        "second call (s)",
        "second call s / 1000 particles",
        "speed-up over 1 device",
        "peak memory (MB)",
        "log Z",
    ]
    return markdown_table(header, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--particles", nargs="+", type=int, default=[2000, 8000, 32000])
    parser.add_argument("--devices", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--gpu", action="store_true", help="count jax.devices(), no host flag")
    arguments = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import log, run_environment

    started = time.perf_counter()
    records = []
    for num_particles in arguments.particles:
        for num_devices in arguments.devices:
            log(f"{num_particles} particles on {num_devices} device(s)")
            records.append(run_point(num_devices, num_particles, arguments.gpu))
            log(f"  {records[-1]}")
    environment = run_environment(
        "scaling_benchmark.py",
        sys.argv[1:] if argv is None else argv,
        time.perf_counter() - started,
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"environment": environment, "records": records}, indent=1))
    print(scaling_table(records))
    print(f"\nwritten to {os.path.relpath(RESULTS)}")


if __name__ == "__main__":
    main()
