"""``nx.ais`` and ``nx.ReplicaExchange`` across several JAX processes (``jax.distributed``).

Each process owns some devices; ``jax.distributed.initialize`` joins them into one set of
global devices (``jax.devices()``), and a run given ``devices=jax.device_count()`` splits its
particles or rungs over all of them: every process runs the same program on its own share and
XLA's collectives join the shares (CPU collectives through gloo here; NCCL on GPUs).

On one machine, two processes of one CPU device each, checked against one process with two
host devices (the same split, so the same numbers)::

    python examples/distributed.py --processes 2

On a cluster, the same script on every host (``I`` from 0 to ``N - 1``; the coordinator is
process 0's host and a free port)::

    python examples/distributed.py --coordinator HOST:PORT --processes N --process-id I

Every process prints the same results; process 0 prints them as the last line, in JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys


def regression_data():
    """A small Poisson regression's data, the same in every process."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = np.linspace(-1.0, 1.0, 20)
    y = rng.poisson(np.exp(0.5 + 0.8 * x)).astype(float)
    return x, y


def runs(devices):
    """``nx.ais`` and ``nx.ReplicaExchange`` on the regression, split over ``devices``: their
    log Z and stderr, and the posterior means of replica exchange's draws."""
    import jax
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC

    import numpyro_extras as nx

    def model(x, y):
        a = numpyro.sample("a", dist.Normal(0.0, 2.0))
        b = numpyro.sample("b", dist.Normal(0.0, 2.0))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Poisson(jax.numpy.exp(a + b * x)), obs=y)

    x, y = regression_data()
    evidence = nx.ais(
        jax.random.PRNGKey(0),
        model,
        (x, y),
        num_particles=256,
        num_temperatures=50,
        progress_bar=False,
        devices=devices,
    )
    mcmc = MCMC(
        nx.ReplicaExchange(model, devices=devices),
        num_warmup=100,
        num_samples=200,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(1), x, y)
    exchange = nx.log_marginal_likelihood(mcmc)
    draws = {site: np.asarray(values) for site, values in mcmc.get_samples().items()}
    return {
        "ais_log_z": float(evidence.log_z),
        "ais_stderr": float(evidence.stderr),
        "exchange_log_z": float(exchange.log_z),
        "exchange_stderr": float(exchange.stderr),
        "a_mean": float(draws["a"].mean(dtype=np.float64)),
        "b_mean": float(draws["b"].mean(dtype=np.float64)),
        # Equal digests: the same draws to the last bit.
        "draws_digest": hashlib.sha256(draws["a"].tobytes() + draws["b"].tobytes()).hexdigest(),
    }


def worker(coordinator, num_processes, process_id):
    """One process of the run: join the others, run, print the results."""
    import jax

    # CPU devices talk through gloo; GPUs use NCCL whatever this says.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes, process_id)
    results = runs(jax.device_count())
    results["devices"] = jax.device_count()
    results["processes"] = jax.process_count()
    print(json.dumps(results), flush=True)


def single_process(num_devices):
    """The same runs in one process with ``num_devices`` host devices."""
    import numpyro

    numpyro.set_host_device_count(num_devices)
    results = runs(num_devices)
    results["devices"] = num_devices
    results["processes"] = 1
    print(json.dumps(results), flush=True)


def free_port():
    """A TCP port nothing listens on, for the coordinator."""
    with socket.socket() as listener:
        listener.bind(("localhost", 0))
        return listener.getsockname()[1]


def launch(num_processes, timeout=600):
    """Start ``num_processes`` workers on this machine and one process with as many host
    devices; return both results (each the last JSON line its process 0 printed)."""
    coordinator = f"localhost:{free_port()}"
    # XLA's default settings, with one CPU device per worker, whatever this process was given
    # (the comparison holds for the same compiled programs).
    environment = {**os.environ, "XLA_FLAGS": ""}
    script = os.path.abspath(__file__)
    workers = [
        subprocess.Popen(
            [sys.executable, script, "--coordinator", coordinator]
            + ["--processes", str(num_processes), "--process-id", str(process_id)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for process_id in range(num_processes)
    ]
    outputs = [process.communicate(timeout=timeout) for process in workers]
    for process, (_, errors) in zip(workers, outputs, strict=True):
        if process.returncode:
            raise RuntimeError(f"a worker failed:\n{errors[-3000:]}")
    distributed = json.loads(outputs[0][0].strip().splitlines()[-1])
    single = subprocess.run(
        [sys.executable, script, "--single", str(num_processes)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )
    if single.returncode:
        raise RuntimeError(f"the single process failed:\n{single.stderr[-3000:]}")
    return distributed, json.loads(single.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2, help="number of processes")
    parser.add_argument("--coordinator", help="HOST:PORT of process 0 (a worker's run)")
    parser.add_argument("--process-id", type=int, help="this process's index (a worker's run)")
    parser.add_argument("--single", type=int, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.single:
        single_process(arguments.single)
    elif arguments.coordinator is not None:
        worker(arguments.coordinator, arguments.processes, arguments.process_id)
    else:
        distributed, single = launch(arguments.processes)
        for name in distributed:
            print(f"{name:>16}: {distributed[name]!r:>24} (one process: {single[name]!r})")
        same = all(distributed[k] == single[k] for k in distributed if k != "processes")
        print("same numbers as one process" if same else "NOT the same numbers as one process")
        print(json.dumps({"distributed": distributed, "single": single, "same": same}))
        sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
