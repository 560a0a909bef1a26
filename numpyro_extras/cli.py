"""The ``numpyro-extras`` command line: ``numpyro-extras demo`` runs the package's main demo.

The logic lives in :mod:`numpyro_extras.demo`; this module only parses arguments.
"""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``numpyro-extras`` with its subcommands.

    :return: an :class:`argparse.ArgumentParser`.
    """
    parser = argparse.ArgumentParser(
        prog="numpyro-extras",
        description="Samplers NumPyro lacks, for any NumPyro model.",
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = subcommands.add_parser(
        "demo",
        help="joint continuous tempering vs NUTS on a two-mode target with known log Z",
        description=(
            "Run joint continuous tempering and NUTS on the 1-D mixture "
            "0.6 N(-8, 1) + 0.4 N(8, 2^2) scaled to a known log Z; print log Z with its "
            "standard error, both samplers' mode weights and the temperature mixing, and write "
            "a three-panel PNG."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    demo.add_argument(
        "--output", default="continuous_tempering_demo.png", help="path of the PNG to write"
    )
    demo.add_argument(
        "--no-plot",
        action="store_true",
        help="print the report only, with no figure (matplotlib, the [plot] extra, not needed)",
    )
    demo.add_argument("--seed", type=int, default=0, help="random seed")
    demo.add_argument("--num-samples", type=int, default=3000, help="kept draws per chain")
    demo.add_argument("--num-warmup", type=int, default=1000, help="warm-up draws per chain")
    demo.add_argument("--num-chains", type=int, default=8, help="chains per sampler")
    demo.add_argument(
        "--log-scale", type=float, default=2.0, help="the target's exact log Z (log scale)"
    )
    return parser


def main(argv=None) -> int:
    """Entry point of the ``numpyro-extras`` console script.

    :param argv: the arguments (default ``sys.argv[1:]``).
    :return: the exit status, 0 on success.
    """
    arguments = build_parser().parse_args(argv)
    if arguments.command == "demo":
        # Imported here so that ``--help`` answers without loading JAX.
        from numpyro_extras.demo import run_demo

        run_demo(
            output=None if arguments.no_plot else arguments.output,
            seed=arguments.seed,
            num_samples=arguments.num_samples,
            num_warmup=arguments.num_warmup,
            num_chains=arguments.num_chains,
            log_scale=arguments.log_scale,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
