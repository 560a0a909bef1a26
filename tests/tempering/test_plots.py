"""The plot of a tempering run."""

import matplotlib

import numpyro_extras as nx


def test_plot_tempering(bimodal_run):
    matplotlib.use("Agg")
    figure = nx.plot_tempering(bimodal_run)
    assert len(figure.axes) == 3
