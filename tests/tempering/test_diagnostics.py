"""How a tempering run mixed: the diagnostics and the kernel's progress-bar summary."""

import jax
import numpy as np

import numpyro_extras as nx


def test_diagnostics(bimodal_run):
    diagnostics = nx.tempering_diagnostics(bimodal_run)
    assert diagnostics["fraction_near_base"].shape == (80,)
    assert np.all(diagnostics["round_trips"] >= 1)
    assert diagnostics["base_moment_check"].passed
    # the running counts in the state agree with the recomputed fractions
    mixing = bimodal_run.last_state.mixing
    np.testing.assert_allclose(
        np.asarray(mixing.num_near_base) / 1000, diagnostics["fraction_near_base"]
    )
    text = bimodal_run.sampler.get_diagnostics_str(
        jax.tree.map(lambda leaf: leaf[0], bimodal_run.last_state)
    )
    assert "beta=" in text and "round trips=" in text
