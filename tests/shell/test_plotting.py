"""Matplotlib is optional: every drawing function names the ``[plot]`` extra when it is missing."""

import sys

import pytest

import numpyro_extras as nx
from numpyro_extras import cli, demo
from numpyro_extras.shell.plotting import agg_figure, pyplot, require_matplotlib

PLOT_FUNCTIONS = (
    nx.plot_ai_sampler,
    nx.plot_annealing,
    nx.plot_compare,
    nx.plot_exchange,
    nx.plot_tempering,
)


@pytest.fixture
def without_matplotlib(monkeypatch):
    # A None entry in sys.modules makes the import raise ImportError, as if not installed.
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.setitem(sys.modules, name, None)
    for name in ("matplotlib", "matplotlib.pyplot", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)


@pytest.mark.parametrize("plot_function", PLOT_FUNCTIONS, ids=lambda fn: fn.__name__)
def test_each_plot_function_names_the_plot_extra_without_matplotlib(
    without_matplotlib, plot_function
):
    with pytest.raises(
        ImportError, match=rf"{plot_function.__name__} draws with matplotlib.*\[plot\]"
    ):
        plot_function(None)


def test_the_demo_stops_before_sampling_without_matplotlib(without_matplotlib, capsys):
    with pytest.raises(ImportError, match=r"numpyro-extras demo draws with matplotlib.*\[plot\]"):
        demo.run_demo(output="never_written.png")
    assert capsys.readouterr().out == ""
    for helper in (pyplot, require_matplotlib, agg_figure):
        with pytest.raises(ImportError, match="caller draws with matplotlib"):
            helper("caller")


def test_the_demo_without_a_figure_needs_no_matplotlib(without_matplotlib, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(demo, "run_demo", lambda **kwargs: calls.append(kwargs))
    assert cli.main(["demo", "--no-plot", "--num-samples", "10"]) == 0
    assert calls[0]["output"] is None and calls[0]["num_samples"] == 10


def test_agg_figure_draws_off_pyplot(tmp_path):
    import matplotlib.pyplot as plt

    figures_before = plt.get_fignums()
    figure = agg_figure("test", figsize=(2, 2))
    figure.subplots().plot([0, 1], [1, 0])
    figure.savefig(tmp_path / "line.png")
    assert (tmp_path / "line.png").stat().st_size > 0
    assert plt.get_fignums() == figures_before
