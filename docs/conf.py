"""Sphinx configuration: the API reference from the docstrings, the Markdown method pages and
the notebooks, which are stored with their outputs and rendered without being run."""

import importlib
import re
import sys
from pathlib import Path

from sphinx.util import logging

# Document the checkout being built, even where an installed copy of the package lives elsewhere.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpyro_extras  # noqa: E402

project = "numpyro-extras"
author = "numpyro-extras contributors"
copyright = "numpyro-extras contributors"
release = numpyro_extras.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]

# CI executes the notebooks separately (pytest --nbmake); the site shows the stored outputs, so
# a docs build costs seconds, not the minutes of sampling the notebooks do.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "colon_fence"]
# Method pages link to each other's sections ("benchmarks.md#...").
myst_heading_anchors = 4

# Every cross-reference must name something that exists: a typo or a renamed function fails the
# build. References to objects without a page of their own (private helpers, other packages, for
# which the build fetches no inventories: CI's docs job needs no network) are shown as code.
nitpicky = True
# Type hints that JAX and NumPyro spell by private paths or bare aliases.
nitpick_ignore = [("py:class", "jax.jaxlib._jax.Array"), ("py:class", "ArrayLike")]

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "description"
autosummary_generate = False

html_theme = "furo"
html_title = f"numpyro-extras {release}"

_API_DIRECTIVE = re.compile(r"^\.\. auto(?:class|function|exception)::\s+numpyro_extras\.(\w+)\s*$")


def _check_api_coverage(app):
    """Warn (an error under ``-W``) when the API pages and ``numpyro_extras.__all__`` disagree,
    so a name added to the package cannot go undocumented."""
    documented = []
    for page in sorted(Path(app.srcdir, "api").glob("*.rst")):
        for line in page.read_text().splitlines():
            match = _API_DIRECTIVE.match(line)
            if match:
                documented.append(match.group(1))
    logger = logging.getLogger(__name__)
    public = set(numpyro_extras.__all__)
    for name in sorted(public - set(documented)):
        logger.warning("numpyro_extras.%s is public but not on any page under docs/api/", name)
    for name in sorted(set(documented) - public):
        logger.warning("docs/api/ documents numpyro_extras.%s, which is not in __all__", name)
    for name in sorted({n for n in documented if documented.count(n) > 1}):
        logger.warning("docs/api/ documents numpyro_extras.%s more than once", name)


_PACKAGE = "numpyro_extras"
_ALIASES = {"np": "numpy", "jnp": "jax.numpy"}


def _importable(dotted):
    head, _, rest = dotted.partition(".")
    parts = [*_ALIASES.get(head, head).split("."), *filter(None, rest.split("."))]
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _existing_python_object(app, env, node, contnode):
    """Resolve a Python reference without a page to plain code when the object exists; leave it
    missing (a nitpicky warning) when it names nothing."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module:
        candidates.append(f"{module}.{target}")
        if cls:
            candidates.append(f"{module}.{cls}.{target}")
    # A docstring shown under ``numpyro_extras.X`` names its own module's helpers unqualified.
    candidates += [f"{name}.{target}" for name in list(sys.modules) if name.startswith(_PACKAGE)]
    return contnode if any(_importable(c) for c in candidates) else None


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
    """A NamedTuple's fields are described by its ``:param:`` list; the generated "Alias for
    field number N" entries would repeat each one without saying anything."""
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def setup(app):
    app.connect("builder-inited", _check_api_coverage)
    app.connect("autodoc-skip-member", _skip_namedtuple_fields)
    app.connect("missing-reference", _existing_python_object)
