import numpy as np
import pytest

from numpyro_extras.shell.clustering import kmeans_plus_plus, spread_draws


def three_clusters(rng, sizes=(2985, 1000, 15), dimension=20):
    """Clusters at 0, 6 and -6 (every coordinate), sd 1: in 20-D their draws are 27 apart
    between clusters and 6 within one. The third holds 0.4% of the draws."""
    centres = (0.0, 6.0, -6.0)
    draws = np.concatenate(
        [rng.normal(c, 1.0, (n, dimension)) for c, n in zip(centres, sizes, strict=True)]
    )
    labels = np.repeat(np.arange(3), sizes)
    return draws, labels


@pytest.mark.parametrize("seed", range(10))
def test_every_separated_cluster_gets_a_row_however_small(seed):
    rng = np.random.default_rng(seed)
    draws, labels = three_clusters(rng)
    picks = spread_draws(draws, 16, rng)
    counts = np.bincount(labels[picks], minlength=3)
    assert picks.shape == (16,) and len(set(picks.tolist())) == 16
    assert counts.min() >= 1
    # The cells otherwise follow the mass: the largest cluster gets the most rows.
    assert counts[0] == counts.max()


def test_evenly_spaced_picks_would_miss_the_small_cluster():
    """The case the k-means cells are for: the small cluster's draws come in one short stretch
    of the run, between two evenly spaced picks."""
    rng = np.random.default_rng(0)
    draws, labels = three_clusters(rng)
    order = np.concatenate([np.arange(15) + 3985, np.arange(3985)])
    run = np.concatenate([draws[order[15:][:100]], draws[order[:15]], draws[order[15:][100:]]])
    run_labels = labels[np.concatenate([order[15:][:100], order[:15], order[15:][100:]])]
    even = np.linspace(0, len(run) - 1, 16).round().astype(int)
    assert not np.any(run_labels[even] == 2)
    assert np.any(run_labels[spread_draws(run, 16, rng)] == 2)


def test_more_rows_than_draws_repeats_them_in_turn():
    draws = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(
        spread_draws(draws, 7, np.random.default_rng(0)), [0, 1, 2, 0, 1, 2, 0]
    )


def test_identical_draws_give_valid_rows():
    draws = np.ones((50, 3))
    picks = spread_draws(draws, 5, np.random.default_rng(0))
    assert picks.shape == (5,) and np.all((picks >= 0) & (picks < 50))
    assert kmeans_plus_plus(draws, 5, np.random.default_rng(0)).shape == (5,)


def test_a_coordinate_of_large_scale_does_not_decide_the_cells():
    """Distances are taken after standardising each coordinate: a noise coordinate a thousand
    times wider than the gap between the clusters would otherwise split them along itself."""
    rng = np.random.default_rng(2)
    draws, labels = three_clusters(rng, sizes=(400, 400, 20))
    draws = np.concatenate([draws, rng.normal(0.0, 1e4, (len(draws), 1))], axis=1)
    for seed in range(5):
        counts = np.bincount(
            labels[spread_draws(draws, 6, np.random.default_rng(seed))], minlength=3
        )
        assert counts.min() >= 1
