"""Bridge sampling: ``log Z`` from the posterior draws of any finished run."""

from numpyro_extras.bridge.estimator import bridge_evidence
from numpyro_extras.bridge.runs import bridge_sampling

__all__ = ["bridge_evidence", "bridge_sampling"]
