"""Matplotlib for the plotting functions, which is an optional dependency.

The samplers, estimators and ArviZ conversion need no plotting library; the ``plot_*``
functions and the demo's figure need matplotlib, which ``pip install "numpyro-extras[plot]"``
installs. Asking for it here gives one error that names the extra when it is missing.
"""

from __future__ import annotations

import importlib

__all__ = ["MISSING_MATPLOTLIB", "agg_figure", "pyplot", "require_matplotlib"]

MISSING_MATPLOTLIB = (
    "{caller} draws with matplotlib, which is not installed: "
    'pip install "numpyro-extras[plot]" (or pip install matplotlib).'
)


def _matplotlib_module(name, caller):
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(MISSING_MATPLOTLIB.format(caller=caller)) from error


def require_matplotlib(caller: str) -> None:
    """Raise the ImportError that names ``caller`` and the ``[plot]`` extra unless matplotlib
    imports: a check to make before minutes of sampling whose end is a figure.

    :param str caller: the public function that draws, for the error message.

    **Example:**

    .. code-block:: python

        require_matplotlib("numpyro-extras demo")
    """
    _matplotlib_module("matplotlib", caller)


def pyplot(caller: str):
    """``matplotlib.pyplot``, or an ImportError that names ``caller`` and the ``[plot]`` extra.

    :param str caller: the public function that draws, for the error message.
    :return: the ``matplotlib.pyplot`` module.

    **Example:**

    .. code-block:: python

        plt = pyplot("plot_tempering")
        figure, axes = plt.subplots(1, 3)
    """
    return _matplotlib_module("matplotlib.pyplot", caller)


def agg_figure(caller: str, **figure_kwargs):
    """A matplotlib ``Figure`` on the Agg canvas, outside pyplot's figure manager.

    A bare figure needs no display and, unlike pyplot, leaves the caller's backend (a
    notebook's, say) alone: the way to write a PNG from a script or a command.

    :param str caller: the public function that draws, for the error message.
    :param figure_kwargs: keyword arguments of ``matplotlib.figure.Figure`` (``figsize``, ...).
    :return: the figure.

    **Example:**

    .. code-block:: python

        figure = agg_figure("run_demo", figsize=(14, 4))
        figure.savefig("demo.png")
    """
    figure_module = _matplotlib_module("matplotlib.figure", caller)
    backend = _matplotlib_module("matplotlib.backends.backend_agg", caller)
    figure = figure_module.Figure(**figure_kwargs)
    backend.FigureCanvasAgg(figure)
    return figure
