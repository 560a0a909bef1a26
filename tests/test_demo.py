"""The demo (``numpyro-extras demo``): a small run recovers the bimodal target; the CLI parses."""

import inspect

import jax.numpy as jnp
import matplotlib.image
import numpy as np
import pytest

from numpyro_extras import GaussianBase, cli, demo


def test_small_demo_recovers_log_z_and_mode_weights(tmp_path, capsys):
    output = tmp_path / "demo.png"
    # A rough hand-made base (log zeta half a nat off) instead of fit_base, whose compilation
    # would add ~15 s. Compilation, not sampling, dominates the run time, so the draws are
    # plentiful: with 8 x 3000 tempered draws the mode weights scatter by about 0.02 around the
    # truth, well inside the 0.1 tolerance.
    rough_base = GaussianBase(jnp.zeros(1), 8.0 * jnp.eye(1), jnp.asarray(1.5))
    result = demo.run_demo(
        output=output,
        seed=0,
        num_samples=3000,
        num_warmup=300,
        num_chains=8,
        log_scale=2.0,
        base=rough_base,
    )

    image = matplotlib.image.imread(output)
    assert output.stat().st_size > 20_000
    assert image.shape[0] > 200 and image.shape[1] > 600
    assert np.std(image[..., :3]) > 0.05  # not a blank canvas

    assert result["true_log_z"] == 2.0
    assert result["log_z_stderr"] < 0.3
    assert abs(result["log_z"] - 2.0) < 4 * result["log_z_stderr"]
    assert result["log_z_error_in_stderr"] == pytest.approx(
        (result["log_z"] - 2.0) / result["log_z_stderr"]
    )
    assert result["ct_mode_weights"] == pytest.approx([0.6, 0.4], abs=0.1)
    assert sum(result["nuts_mode_weights"]) == pytest.approx(1.0)
    assert len(result["round_trips"]) == 8 and min(result["round_trips"]) > 0
    assert result["output"] == str(output)

    printed = capsys.readouterr().out
    assert f"{result['log_z']:.3f} +- {result['log_z_stderr']:.3f}" in printed
    assert "round trips" in printed and "Time:" in printed
    # Captured output is not a terminal, so no progress bar is drawn into it.
    assert "it/s" not in printed


def test_cli_help_lists_the_demo_options(capsys):
    for arguments in (["--help"], ["demo", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(arguments)
        assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    for option in ("demo", "--output", "--seed", "--num-samples", "--num-warmup", "--num-chains"):
        assert option in printed


def test_cli_requires_a_command():
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    assert exit_info.value.code == 2


def test_cli_passes_its_options_to_run_demo(monkeypatch):
    calls = []
    monkeypatch.setattr(demo, "run_demo", lambda **kwargs: calls.append(kwargs))

    status = cli.main(["demo", "--output", "out.png", "--seed", "3", "--num-samples", "50"])

    assert status == 0
    assert calls == [
        {
            "output": "out.png",
            "seed": 3,
            "num_samples": 50,
            "num_warmup": 1000,
            "num_chains": 8,
            "log_scale": 2.0,
        }
    ]


def test_cli_defaults_match_run_demo():
    parsed = vars(cli.build_parser().parse_args(["demo"]))
    defaults = inspect.signature(demo.run_demo).parameters
    for name in ("output", "seed", "num_samples", "num_warmup", "num_chains", "log_scale"):
        assert parsed[name] == defaults[name].default, name
