"""log Z from a tempering run: the standard error is calibrated."""

import numpy as np

import numpyro_extras as nx


def test_stderr_is_calibrated(bimodal_run, bimodal_log_z):
    """20 independent 4-chain estimates: about 95% within 2 stderr of the truth, and the spread
    of the estimates matches the reported stderr."""
    fields = bimodal_run.get_extra_fields(group_by_chain=True)
    deltas, log_zetas = np.asarray(fields["delta"]), np.asarray(fields["log_zeta"])[:, 0]
    estimates = [
        nx.tempering_log_normalizer(deltas[group : group + 4], log_zetas[group : group + 4])
        for group in range(0, 80, 4)
    ]
    log_z = np.array([estimate.log_z for estimate in estimates])
    stderr = np.array([estimate.stderr for estimate in estimates])
    covered = np.abs(log_z - bimodal_log_z) < 2 * stderr
    assert covered.sum() >= 16, (log_z, stderr)
    spread_ratio = np.std(log_z, ddof=1) / np.sqrt(np.mean(stderr**2))
    assert 0.6 < spread_ratio < 1.6, spread_ratio
    pooled = nx.log_marginal_likelihood(bimodal_run)
    assert pooled.stderr < 0.03 and abs(pooled.log_z - bimodal_log_z) < 4 * pooled.stderr


def test_a_chain_that_drifts_within_its_run_widens_the_error(bimodal_run, bimodal_log_z):
    """One chain of four spends its second half on draws of lower ``Delta`` (as a chain held in
    one part of the posterior would): its error is not in its MCSE, but its two halves differ,
    and the error bar covers the offset it causes."""
    fields = bimodal_run.get_extra_fields(group_by_chain=True)
    deltas, log_zetas = np.asarray(fields["delta"]), np.asarray(fields["log_zeta"])[:, 0]
    z_scores = []
    for group in range(0, 40, 4):
        drifted = deltas[group : group + 4].copy()
        donor = deltas[group + 40]
        drifted[0, 500:] = np.resize(donor[donor < np.median(donor)], 500)
        estimate = nx.tempering_log_normalizer(drifted, log_zetas[group : group + 4])
        z_scores.append((estimate.log_z - bimodal_log_z) / estimate.stderr)
    # with the chains' agreement alone, two of the ten groups were off by 2.8 and 3.5 stderr
    assert np.max(np.abs(z_scores)) < 2, z_scores
