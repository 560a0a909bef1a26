"""Training the VAE proposal along an annealing path: ``nx.fit_vae_proposal``.

The target is tempered, ``p~(x)^beta`` on the model's flat unconstrained space (eq. 4; the
Jacobians of the constraining transforms are tempered too, and ``beta = 1`` is exact). The
driver follows Algorithms 3-5 of Ichikawa et al.:

1. ``J`` models are trained on draws of NUTS at ``beta_0`` (the local sampler of the first rung),
   whose chains start from the draws of a replica exchange to ``p~^beta_0`` (with a reference
   fitted to a first exchange's draws) so that they begin in every mode it reaches;
2. each round, every model searches its next ``beta`` (Algorithm 4, vectorised: one batch of
   proposals and shared uniforms scores every candidate ``beta_final, beta_final - eps, ...``
   at once, and the largest whose acceptance rate lies in ``[AR_min, AR_max]`` is taken; with
   none, ``beta`` stays and the model is retrained, which repairs under-learning);
3. the models run VAE-SLMC side by side at their new ``beta`` with the previous parameters,
   exchanging states between neighbours (Algorithm 6, eq. 5), so a model that collapsed onto
   some modes is fed draws of the others;
4. each model is retrained, warm-started, on its own chain's thinned draws (Algorithm 3), until
   its loss on held-out draws stops falling (at most ``epochs`` epochs).

The round repeats until every model (or the first, ``stop="first"``) reaches ``beta_final``;
the proposal returned is the model whose proposals find the most mass at ``beta_final`` (the
largest importance-sampling estimate of ``log Z``).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from numpyro_extras.exchange import ReplicaExchange
from numpyro_extras.model.base_fit import numpy_rng
from numpyro_extras.model.bases import GaussianBase
from numpyro_extras.model.potential import flat_target, site_shapes
from numpyro_extras.shell.clustering import spread_draws
from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.pilot import dispersed_starts, nuts_draws
from numpyro_extras.shell.progress import scan_in_chunks
from numpyro_extras.shell.validation import (
    check_count,
    check_model,
    check_real,
    check_rng_key,
    check_setting_names,
)
from numpyro_extras.slmc.chains import (
    build_kernel,
    check_acceptance,
    draw_proposal,
    exchange_source,
    new_point,
    refresh_latent,
    shared_uniform_rates,
)
from numpyro_extras.slmc.vae import (
    PAPER_DECODER_SIZES,
    PAPER_ENCODER_SIZES,
    VAEConfig,
    VAEProposal,
    init_proposal,
    latent_information,
    train_vae,
)

__all__ = [
    "AnnealingStalledWarning",
    "AnnealingSettings",
    "AnnealingRung",
    "AnnealingHistory",
    "fit_vae_proposal",
    "check_fit_kwargs",
    "candidate_betas",
    "select_beta",
]


class AnnealingStalledWarning(UserWarning):
    """:func:`fit_vae_proposal`'s annealing made no progress in more than ``max_retrains``
    consecutive rounds: no model's acceptance at a higher ``beta`` reached ``ar_min``. The
    annealing stops there and the model that finds most of the target's mass at ``beta_final``
    is returned (``proposal.history`` shows where each model stopped), so that
    :class:`~numpyro_extras.VAESLMC` still samples exactly, as fast as that model fits the
    target allows.

    **Example:**

    .. code-block:: python

        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            proposal = nx.fit_vae_proposal(jax.random.PRNGKey(0), model, (x, y))
        if any(w.category is nx.AnnealingStalledWarning for w in caught):
            proposal.history.betas(proposal.history.chosen_model)[-1]  # where it stopped
    """


# Below this acceptance rate a chain is thinned by at most 1 / MIN_THINNING_RATE.
MIN_THINNING_RATE = 0.01
# Radius of the uniform starts of the first rung's NUTS chains (as numpyro's init_to_uniform).
INITIAL_RADIUS = 2.0
# NUTS steps (warm-up and draws each) of the short run that places the starts' reference.
REFERENCE_STEPS = 200
# Fewer round trips than this between the reference and p~^beta_0 and the starts' exchange may
# not have carried states between the modes at all.
MIN_START_ROUND_TRIPS = 2
# A first exchange whose every chain made this many round trips carried states between the
# modes it reaches many times over: a second, from a reference refitted to its draws, is not run.
ENOUGH_ROUND_TRIPS = 20
# The second exchange's reference is this many times as wide as the first exchange's draws
# (its covariance is this squared times theirs).
REFIT_INFLATION = 1.5
# Training points of the paper's runs (Table 7): per rung, and from the first rung's NUTS.
PAPER_TRAINING_SIZE = 15_000
PAPER_INITIAL_SIZE = 40_000
# The paper's recipe holds from this dimension on; below it the data and networks shrink with D.
PAPER_MIN_DIMENSION = 20
# Below PAPER_MIN_DIMENSION: three hidden layers each way (App. F.3 has six), each capped at
# max(32, 16 D): the last training runs every point through every layer for every epoch, and
# a few coordinates' modes need far less depth than the paper's 20- to 100-dimensional mixtures.
SMALL_ENCODER_SIZES = (64, 64, 32)
SMALL_DECODER_SIZES = (32, 64, 64)
# A model whose encoder is this close to the latent prior on its data, in nats of KL averaged
# over the points, has collapsed: its latents are unused.
COLLAPSED_INFORMATION = 0.05
# Standard errors from 0 of the mean gradient of log p over the final draws beyond which they
# are not draws of the target (about normal when they are; hundreds when stuck elsewhere).
MEAN_SCORE_LIMIT = 8.0
# The same bound for the first rung's draws, looser: they are correlated NUTS draws of the
# flattest, heaviest-tailed target of the path, for which the independent-draw standard error
# is too small (a support that depends on another site's value comes near MEAN_SCORE_LIMIT
# there); a funnel, whose tempered mass NUTS cannot follow, reads far beyond either.
FIRST_RUNG_SCORE_LIMIT = 20.0
# A first-rung NUTS run in which more than this share of the transitions reach the maximum tree
# depth cannot follow the scales of p~^beta_0 (a tempered funnel's mass sits at scales of
# e^100), and its draws seed no annealing.
MAX_DEPTH_SHARE = 0.5
# A collapsed model that accepts this often at beta_0 fits the tempered target as one Gaussian
# already: its latents have no modes to place.
GAUSSIAN_FIT_RATE = 0.5
# A collapsed model is trained afresh at most this many times, each from a new initialisation,
# until one accepts more often than the collapsed model.
SEPARATING_ATTEMPTS = 3


class AnnealingSettings(NamedTuple):
    """The settings of the annealing (Table 7, Gaussian-mixture rows) and of the VAE (Table 8).

    :param float beta_0: the first rung's inverse temperature.
    :param float beta_final: where the annealing ends (1: the posterior).
    :param float ar_min: the smallest acceptance rate a new rung may have; ``None``: 0.1 for
        one model (AA-VAE-SLMC), 0.2 for several (AA-VAE-ESLMC).
    :param float ar_max: the largest (1: never binds, as in the paper's runs).
    :param float beta_step: ``eps``, the spacing of the candidate betas.
    :param float constant_step: ``None`` for the adaptive beta search; else constant annealing
        (the paper's CA, Fig. 4a): every round climbs this much, whatever the acceptance rate.
    :param int num_check_steps: ``T_check``, steps of each check chain of the beta search.
    :param int num_check_chains: check chains per model, started from its training data.
    :param int epochs: the most training epochs per rung (Table 7's 150).
    :param int initial_epochs: the most training epochs on the first rung's NUTS draws.
    :param int patience: stop a training early when the held-out loss has not fallen by the
        relative ``tolerance`` for this many epochs (``None``: always train every epoch, as in
        the paper).
    :param float tolerance: the relative fall of the held-out loss that counts as progress.
    :param float validation_fraction: the share of each training set held out to judge it.
    :param bool full_final_training: the last training (at ``beta_final``, the proposal the
        sampler uses) runs all ``epochs`` on all its points, without early stopping.
    :param int training_size: ``n(D_k)``, training points per model and rung; ``None``: the
        paper's 15,000 from ``D = 20`` on, ``750 D`` (at least 5,000) below: set-up in
        proportion to the model.
    :param int initial_size: training points per model from NUTS at ``beta_0``; ``None``: the
        paper's 40,000 from ``D = 20`` on, as many as a later rung's data run records below
        (``training_size`` rounded up to whole records of the data chains), so that one
        compiled training serves every rung.
    :param int num_data_chains: parallel VAE-SLMC chains per model that make the training data.
    :param float burn_in_fraction: share of each data chain discarded as burn-in.
    :param int max_retrains: consecutive rounds in which no model climbs before giving up.
    :param int batch_size: Adam batch size.
    :param float learning_rate: Adam learning rate.
    :param int initial_chains: NUTS chains of the first rung.
    :param int initial_warmup: their warm-up steps.
    :param int initial_exchange_scans: scans (and as many warm-up scans) of each chain of the
        two replica exchanges that start the first rung's NUTS chains (0: uniform starts in
        ``[-2, 2]^D``, as NumPyro's ``init_to_uniform``). NUTS chains stay in the mode they
        start in: at ``beta_0 = 0.1`` the barrier between two modes of a mixture in D = 100
        is still ten nats. The first exchange runs from a broad Gaussian, ``initial_spread``
        times the spread of a short NUTS run, to ``p~^beta_0``, so its states travel between
        the modes within that reach; the second runs from a Gaussian fitted to the first's
        draws (a variational reference, Surjanovic et al. 2022), which spans the modes found,
        so its states cross between them many times; the NUTS chains start from its draws.
    :param int initial_exchange_chains: independent (vectorised) chains of each exchange; the
        NUTS chains start one per cell of a k-means partition of the second's draws.
    :param float initial_spread: that Gaussian's standard deviations over the short run's.
    :param bool exchange: swap states between the models' chains (eq. 5).
    :param str stop: ``"all"`` (every model reaches ``beta_final``) or ``"first"``.
    :param float beta_vae: the KL weight of eq. 2 (Table 8: 1/120 for Gaussian mixtures).
    :param int latent_dim: ``M`` (``None``: ``D``, as in the paper).
    :param tuple encoder_sizes: the encoder's hidden widths; ``None``: App. F.3's from
        ``D = 20`` on, below it three layers ``(64, 64, 32)``, each capped at ``max(32, 16 D)``.
    :param tuple decoder_sizes: the decoder's hidden widths (``None``: likewise).
    :param float decoder_scale: the extended proposal's decoder noise in standardised units
        (``None``: 1 when learned, else ``sqrt(beta_vae / 2)``).
    :param bool learn_decoder_scale: learn the decoder noise per coordinate with the network
        (``None``: learned for the exact acceptance, eq. 2's fixed ``beta_vae / 2`` for the
        isometric one, whose eq. 3 assumes it). A learned noise takes on the spread within a
        mode, so that the latents only have to place the modes: the exact acceptance then no
        longer falls with the dimension the way it does with eq. 2's small fixed noise.
    :param bool whiten: standardise each rung's data by the Cholesky factor of its covariance
        rather than per coordinate. It lets a learned decoder noise fit a correlated unimodal
        target alone (the proposal becomes a Gaussian fitted to the draws), but on separated
        modes the network may then leave its latents unused and propose one broad Gaussian.
        ``None`` (the default) standardises per coordinate unless the first beta search finds
        every model's acceptance rate at ``beta_0`` below ``ar_min``: then whitened models are
        trained on the same draws and kept if their acceptance rate there is higher (a
        strongly correlated target, which per-coordinate standardisation leaves to the
        network).

    **Example:**

    .. code-block:: python

        settings = nx.AnnealingSettings()
        settings.epochs, settings.beta_0  # 150 and 0.1, Table 7
        settings.checked(1, dimension=10).training_size  # 7500: in proportion to D below 20
        # every field is a keyword of nx.fit_vae_proposal and of nx.VAESLMC's fit_kwargs
    """

    beta_0: float = 0.1
    beta_final: float = 1.0
    ar_min: float | None = None
    ar_max: float = 1.0
    beta_step: float = 0.01
    constant_step: float | None = None
    num_check_steps: int = 2000
    num_check_chains: int = 10
    epochs: int = 150
    initial_epochs: int = 300
    patience: int | None = 10
    tolerance: float = 1e-3
    validation_fraction: float = 0.1
    full_final_training: bool = True
    training_size: int | None = None
    initial_size: int | None = None
    num_data_chains: int = 100
    burn_in_fraction: float = 0.1
    max_retrains: int = 5
    batch_size: int = 512
    learning_rate: float = 1e-3
    initial_chains: int = 32
    initial_warmup: int = 500
    initial_exchange_scans: int = 500
    initial_exchange_chains: int = 2
    initial_spread: float = 5.0
    exchange: bool = True
    stop: str = "all"
    beta_vae: float = 1.0 / 120.0
    latent_dim: int | None = None
    encoder_sizes: tuple | None = None
    decoder_sizes: tuple | None = None
    decoder_scale: float | None = None
    learn_decoder_scale: bool | None = None
    whiten: bool | None = None

    def checked(self, num_models, dimension) -> AnnealingSettings:
        """The settings validated, with ``ar_min`` filled in for ``num_models`` models and the
        data sizes and network widths left ``None`` for a target of ``dimension``."""
        dimension = check_count("dimension", dimension)
        # The paper's recipe (Tables 7 and 8) was set for mixtures in 20 to 100 dimensions; below
        # that its 40,000 points and six 256-wide layers cost minutes where the modes need far
        # less.
        widest = max(32, 16 * dimension)
        paper_sized = dimension >= PAPER_MIN_DIMENSION
        encoder_sizes = PAPER_ENCODER_SIZES if paper_sized else SMALL_ENCODER_SIZES
        decoder_sizes = PAPER_DECODER_SIZES if paper_sized else SMALL_DECODER_SIZES
        defaults = {
            "training_size": PAPER_TRAINING_SIZE if paper_sized else max(5000, 750 * dimension),
            "initial_size": PAPER_INITIAL_SIZE if paper_sized else None,
            "encoder_sizes": tuple(min(width, widest) for width in encoder_sizes),
            "decoder_sizes": tuple(min(width, widest) for width in decoder_sizes),
        }
        self = self._replace(
            **{name: value for name, value in defaults.items() if getattr(self, name) is None}
        )
        if self.initial_size is None:
            # As many points as each later rung's data run records, so that one compiled
            # training serves every rung.
            records = math.ceil(
                self.training_size / check_count("num_data_chains", self.num_data_chains)
            )
            self = self._replace(initial_size=records * self.num_data_chains)
        for name in (
            "num_check_steps",
            "num_check_chains",
            "epochs",
            "training_size",
            "initial_size",
            "num_data_chains",
            "batch_size",
            "initial_chains",
            "initial_exchange_chains",
        ):
            check_count(name, getattr(self, name))
        for name in ("initial_epochs", "max_retrains", "initial_warmup", "initial_exchange_scans"):
            check_count(name, getattr(self, name), minimum=0)
        if self.patience is not None:
            check_count("patience", self.patience)
        check_real("tolerance", self.tolerance, "a number >= 0", low=0.0, open_low=False)
        check_real(
            "validation_fraction",
            self.validation_fraction,
            "a number in (0, 1)",
            low=0.0,
            high=1.0,
        )
        beta_0 = check_real("beta_0", self.beta_0, "a positive number", low=0.0)
        beta_final = check_real("beta_final", self.beta_final, "a positive number", low=0.0)
        if beta_0 > beta_final:
            raise ValueError(f"beta_0 ({beta_0}) must not exceed beta_final ({beta_final}).")
        ar_min = self.ar_min if self.ar_min is not None else (0.1 if num_models == 1 else 0.2)
        ar_min = check_real(
            "ar_min", ar_min, "a number in [0, 1)", low=0.0, high=1.0, open_low=False
        )
        ar_max = check_real(
            "ar_max", self.ar_max, "a number in (0, 1]", low=0, high=1, open_high=False
        )
        if ar_min > ar_max:
            raise ValueError(f"ar_min ({ar_min}) must not exceed ar_max ({ar_max}).")
        check_real("beta_step", self.beta_step, "a positive number", low=0.0)
        if self.constant_step is not None:
            check_real("constant_step", self.constant_step, "a positive number", low=0.0)
        check_real("learning_rate", self.learning_rate, "a positive number", low=0.0)
        check_real("initial_spread", self.initial_spread, "a positive number", low=0.0)
        check_real(
            "burn_in_fraction",
            self.burn_in_fraction,
            "a number in [0, 1)",
            low=0,
            high=1,
            open_low=False,
        )
        if self.stop not in ("all", "first"):
            raise ValueError(f"stop must be 'all' or 'first', got {self.stop!r}.")
        return self._replace(ar_min=ar_min, beta_0=beta_0, beta_final=beta_final)


class AnnealingRung(NamedTuple):
    """One model's step of one annealing round.

    :param int round: the round (0: the first rung, trained on NUTS draws).
    :param int model: which model.
    :param float beta: the rung it sampled and trained at.
    :param float accept_rate: the mean acceptance probability of the beta search at ``beta``
        (NaN for round 0).
    :param bool retrained: no candidate passed, so ``beta`` stayed (under-learning repaired by
        retraining).
    :param float loss: the training's final loss (held out, with early stopping).
    :param float swap_rate: the mean exchange acceptance probability of the round's data run.
    :param int epochs: the epochs the training ran (fewer than the setting when it stopped
        early; -1 when unknown, in files saved before it was recorded).
    :param float seconds: the round's wall time, shared by its models: the beta search, the
        data run and the training (round 0: the first rung's draws and the first training;
        NaN when unknown, in files saved before it was recorded).
    """

    round: int
    model: int
    beta: float
    accept_rate: float
    retrained: bool
    loss: float
    swap_rate: float
    epochs: int = -1
    seconds: float = math.nan


class AnnealingHistory(NamedTuple):
    """What the annealing did (hashable, so it can ride in a proposal's static data).

    :param tuple rungs: every :class:`AnnealingRung`.
    :param int num_models: models annealed side by side.
    :param tuple final_accept_rates: each model's mean acceptance probability at ``beta_final``
        after its last training, from check chains started at every model's draws (NaN for a
        model that did not get there).
    :param tuple final_log_z: each model's estimate of ``log Z`` at ``beta_final`` from the
        check's proposals (NaN for a model that did not get there).
    :param int chosen_model: the model returned: the largest ``final_log_z``.
    :param float ar_min: the acceptance floor used.
    :param int density_evaluations: target-density evaluations the training spent (a gradient
        evaluation of the first rung's NUTS counts as one; -1 when unknown, in files saved
        before it was recorded).
    :param tuple problems: what the training found wrong with the first rung's draws or the
        proposal's final draws, one sentence each (warned at training, and listed again by
        every ``log Z`` of a run with the proposal).

    **Example:**

    .. code-block:: python

        proposal.history.chosen_model, proposal.history.final_accept_rates
    """

    rungs: tuple
    num_models: int
    final_accept_rates: tuple
    final_log_z: tuple
    chosen_model: int
    ar_min: float
    density_evaluations: int = -1
    problems: tuple = ()

    def betas(self, model=0) -> list[float]:
        """The beta path of ``model``, one entry per round."""
        return [rung.beta for rung in self.rungs if rung.model == model]

    @property
    def num_retrains(self) -> int:
        return sum(rung.retrained for rung in self.rungs)


def candidate_betas(beta_0, beta_final, step):
    """The grid of Algorithm 4 (as the paper ran it): ``beta_final, beta_final - eps, ...``
    down to ``beta_0``, plus ``beta_0``; a model at ``beta`` considers the entries above it.

    :return: descending array.
    """
    count = int(math.floor((beta_final - beta_0) / step + 1e-9)) + 1
    # Rounded so that the grid's entries read as the decimals they stand for (0.3, not
    # 0.29999999999999993).
    grid = np.round(beta_final - step * np.arange(count), 12)
    grid = grid[grid > beta_0 + 1e-12]
    return np.concatenate([grid, [beta_0]])


def select_beta(grid, rates, beta, ar_min, ar_max):
    """The largest candidate above ``beta`` whose acceptance rate lies in ``[ar_min, ar_max]``,
    or ``beta`` when none does (retrain at the same beta).

    :param grid: candidate betas (any order).
    :param rates: their acceptance rates.
    :param float beta: the current beta.
    :return: the new beta (a float).
    """
    grid, rates = np.asarray(grid), np.asarray(rates)
    passing = (grid > beta) & (rates >= ar_min) & (rates <= ar_max)
    return float(np.max(grid[passing])) if passing.any() else float(beta)


@partial(quick_jit, static_argnums=2)
def _take_rows(rng_key, data, count):
    """``count`` rows of ``data`` ``(N, D)``, drawn without replacement when there are enough."""
    replace = count > data.shape[0]
    return data[jax.random.choice(rng_key, data.shape[0], (count,), replace=replace)]


def _exchange_draws(rng_key, tempered_potential_fn, reference, starts, settings, progress_bar):
    """The ``p~^beta_0`` draws ``(chains, scans, D)`` of ``initial_exchange_chains`` vectorised
    replica-exchange chains from ``reference``, the evaluations made (warm-up included), and
    the fewest round trips a chain made."""
    scans = settings.initial_exchange_scans
    chains = settings.initial_exchange_chains
    kernel = ReplicaExchange(potential_fn=tempered_potential_fn, reference=reference)
    states = kernel.init(
        jax.random.split(rng_key, chains),
        scans,
        jnp.resize(starts, (chains, starts.shape[-1])),
        (),
        {},
    )

    def transition(states, _):
        states = kernel.sample(states, (), {})
        return states, (states.z, states.inner_state.num_steps)

    # The kernel's own steps in one compiled scan at LLVM's first optimisation level, rather
    # than NumPyro's MCMC loop, which XLA compiles at its default level: several seconds
    # longer, for a run this short.
    states, (positions, num_steps) = scan_in_chunks(
        transition,
        states,
        2 * scans,
        description="first rung's replica exchange",
        progress_bar=progress_bar,
        optimize=1,
    )
    round_trips = int(np.min(np.asarray(states.num_round_trips)))
    return np.swapaxes(positions[scans:], 0, 1), int(np.sum(num_steps)), round_trips


def _exchange_starts(keys, tempered_potential_fn, reference_draws, starts, settings, progress_bar):
    """``len(starts)`` states of ``p~^beta_0`` spread over its modes, and the evaluations made.

    The ``reference_draws`` ``(chains, samples, D)`` of a short NUTS run from ``starts`` place a
    Gaussian reference, ``initial_spread`` times as wide; replica exchange
    (``nx.ReplicaExchange``, non-reversible, Syed et al. 2022) from it to ``p~^beta_0`` moves
    states between the modes the reference reaches. A Gaussian with the covariance of those
    draws, widened ``REFIT_INFLATION`` times, is the reference of a second exchange (the
    variational reference of Surjanovic et al. 2022): it spans the modes found, so that the
    tempered path no longer favours the first mode and states cross between the modes many
    times. Where every chain of the first exchange made ``ENOUGH_ROUND_TRIPS`` round trips
    already, its own draws serve and the second is not run. Of the last exchange's ``beta_0``
    draws, ``len(starts)`` spread over the modes they visited are returned (``spread_draws``:
    one per cell of a k-means partition), so that a mode the exchange visited, however
    briefly, gets a chain. A ``UserWarning`` says when a chain of the last exchange made fewer
    than ``MIN_START_ROUND_TRIPS`` round trips between the two ends. ``keys`` are the three
    keys of the two exchanges and the spreading.
    """
    first_key, second_key, spread_key = keys
    draws = reference_draws.reshape(-1, starts.shape[-1])
    local_variance = np.maximum(np.var(draws, 0), 1e-6)
    spread = settings.initial_spread * np.sqrt(local_variance)
    reference = GaussianBase(jnp.asarray(np.mean(draws, 0)), jnp.diag(jnp.asarray(spread)), 0.0)
    found, evaluations, round_trips = _exchange_draws(
        first_key, tempered_potential_fn, reference, starts, settings, progress_bar
    )
    beta_0_draws = found
    if round_trips < ENOUGH_ROUND_TRIPS:
        last_found = found[:, -1]
        found = found.reshape(-1, found.shape[-1])
        # The local variance keeps the refitted covariance full rank when there are fewer draws
        # than dimensions.
        covariance = REFIT_INFLATION**2 * np.cov(found, rowvar=False) + np.diag(local_variance)
        reference = GaussianBase(
            jnp.asarray(np.mean(found, 0)), jnp.asarray(np.linalg.cholesky(covariance)), 0.0
        )
        beta_0_draws, second_evaluations, round_trips = _exchange_draws(
            second_key, tempered_potential_fn, reference, last_found, settings, progress_bar
        )
        evaluations += second_evaluations
    scans = settings.initial_exchange_scans
    if round_trips < MIN_START_ROUND_TRIPS:
        warnings.warn(
            f"A chain of the replica exchange that starts the first rung's NUTS chains made "
            f"{round_trips} round trips between its reference and p~^beta_0 in {scans} "
            "scans, so its draws may not reach every mode, and the annealing never learns a "
            "mode its first rung misses. Raise initial_exchange_scans.",
            stacklevel=4,
        )
    # The exchange's chains cross between the modes only some tens of times, so a mode's share
    # of their draws can be several times smaller than its mass, and draws picked evenly over
    # time can miss it; the annealing never learns a mode its first rung lacks.
    beta_0_draws = beta_0_draws.reshape(-1, starts.shape[-1])
    picks = spread_draws(beta_0_draws, starts.shape[0], numpy_rng(spread_key))
    return jnp.asarray(beta_0_draws[picks], starts.dtype), evaluations


def initial_draws(rng_key, flat_model, settings, num_models, progress_bar):
    """Per model, ``initial_size`` NUTS draws at ``beta_0``, shape ``(J, N, D)``: each model gets
    its own chains (round-robin) when there are at least as many chains as models; the density
    evaluations of the run (warm-up and the starts' replica exchange included); and the problems
    found (:func:`_deep_tree_problems`), after which the draws of the NUTS run that found them
    are returned and no more is run."""
    beta_0 = settings.beta_0
    potential_fn = flat_model.potential_fn
    tempered_potential_fn = lambda x: beta_0 * potential_fn(x)  # noqa: E731
    chains = settings.initial_chains
    start_key, exchange_key, run_key, pick_key = jax.random.split(rng_key, 4)
    starts = dispersed_starts(
        start_key, potential_fn, flat_model.initial_position, chains, INITIAL_RADIUS
    )
    evaluations = 0
    run = None
    if settings.initial_exchange_scans:
        reference_key, *exchange_keys = jax.random.split(exchange_key, 4)
        run = nuts_draws(
            reference_key,
            tempered_potential_fn,
            starts,
            num_warmup=REFERENCE_STEPS,
            num_samples=REFERENCE_STEPS,
            progress_bar=False,
        )
        evaluations = run.gradient_evaluations
        if run.max_depth_share <= MAX_DEPTH_SHARE:
            starts, exchange_evaluations = _exchange_starts(
                exchange_keys, tempered_potential_fn, run.draws, starts, settings, progress_bar
            )
            evaluations += exchange_evaluations
            run = None
    if run is None:
        run = nuts_draws(
            run_key,
            tempered_potential_fn,
            starts,
            num_warmup=settings.initial_warmup,
            num_samples=math.ceil(num_models * settings.initial_size / chains),
            progress_bar=progress_bar,
            description="first rung's NUTS chains",
        )
        evaluations += run.gradient_evaluations
    draws = run.draws
    keys = jax.random.split(pick_key, num_models)
    per_model = []
    for model in range(num_models):
        own = draws[model::num_models] if draws.shape[0] >= num_models else draws
        own = own.reshape(-1, flat_model.dimension)
        per_model.append(_take_rows(keys[model], jnp.asarray(own), settings.initial_size))
    return jnp.stack(per_model), evaluations, _deep_tree_problems(run, settings)


class _Machinery(NamedTuple):
    """The compiled pieces of one annealing run (jitted once per run)."""

    train: object
    train_initial: object
    train_final: object
    train_fixed_noise: object
    search: object
    run: object


def _trainings(settings: AnnealingSettings):
    """``train(epochs, patience, fixed_noise) -> trained(keys, proposals, data)``: the models'
    trainings, vmapped over the models, from one compiled program."""

    def train_one(rng_key, proposal, data, epochs, patience, fixed_noise):
        return train_vae(
            rng_key,
            proposal,
            data,
            epochs=epochs,
            batch_size=settings.batch_size,
            learning_rate=settings.learning_rate,
            patience=patience,
            tolerance=settings.tolerance,
            validation_fraction=settings.validation_fraction,
            max_epochs=max(settings.epochs, settings.initial_epochs or 0),
            fixed_noise=fixed_noise,
        )

    # The length of a training, its stopping rule and its noise are data of one compiled
    # training, so that each size of data compiles once.
    compiled_train = quick_jit(jax.vmap(train_one, in_axes=(0, 0, 0, None, None, None)), optimize=1)

    def train(epochs, patience=settings.patience, fixed_noise=False):
        def trained(keys, proposals, data):
            return compiled_train(
                keys, proposals, data, epochs, 0 if patience is None else patience, fixed_noise
            )

        return trained

    return train


def _beta_search(log_density_fn, settings: AnnealingSettings, acceptance):
    """``search_one(rng_key, proposal, starts, grid) -> (rates, log_z)``: one model's acceptance
    rates on the candidate betas ``grid`` (Algorithm 4, from shared proposals and uniforms) and
    its proposals' estimate of ``log Z`` at ``grid[0]``."""
    chains, steps = settings.num_check_chains, settings.num_check_steps

    def search_one(rng_key, proposal, starts, grid):
        _, latent_key, proposal_key, uniform_key = jax.random.split(rng_key, 4)
        start_points = jax.vmap(
            lambda x, key: refresh_latent(
                key,
                new_point(proposal, acceptance, log_density_fn, x, jnp.zeros(proposal.latent_dim)),
                proposal,
                acceptance,
            )
        )(starts, jax.random.split(latent_key, chains))
        keys = jax.random.split(proposal_key, chains * steps)
        proposed = jax.lax.map(
            lambda key: draw_proposal(key, proposal, acceptance, log_density_fn),
            keys,
            batch_size=1024,
        )
        parts = (
            proposed.log_density.reshape(chains, steps),
            proposed.correction.reshape(chains, steps),
        )
        uniforms = jax.random.uniform(uniform_key, (chains, steps), proposed.log_density.dtype)
        probs, _ = shared_uniform_rates(
            parts, (start_points.log_density, start_points.correction), grid, uniforms
        )
        # log of the mean importance weight at grid[0] (beta_final): the proposals' estimate of
        # log Z there. A model that misses modes misses their mass, so this is low for it.
        log_weights = proposed.log_weight(grid[0])
        log_z = jax.scipy.special.logsumexp(log_weights) - jnp.log(log_weights.size)
        return probs, log_z

    return search_one


def _data_chains(log_density_fn, settings: AnnealingSettings, acceptance):
    """``run(rng_key, proposals, betas, starts, burn, thin)``: the models' data chains with
    exchanges, thinned (Algorithm 6)."""
    num_records = math.ceil(settings.training_size / settings.num_data_chains)

    def run(rng_key, proposals, betas, starts, burn, thin):
        """The models' VAE-SLMC chains at ``betas`` with exchanges (Algorithm 6) from
        ``starts`` ``(J, chains, D)``; ``(J, n, D)`` thinned draws per model and each model's
        mean acceptance and swap probabilities."""
        num_models = betas.shape[0]
        chains = settings.num_data_chains
        _, run_key = jax.random.split(rng_key)
        zeros = jnp.zeros((num_models, chains, proposals.latent_dim), starts.dtype)
        points = jax.vmap(
            lambda proposal, xs, latents: jax.vmap(
                lambda x, latent: new_point(proposal, acceptance, log_density_fn, x, latent)
            )(xs, latents)
        )(proposals, starts, zeros)

        def move(points, key):
            move_key, swap_key = jax.random.split(key)
            keys = jax.random.split(move_key, (num_models, chains))
            points, info = jax.vmap(
                lambda keys_j, points_j, proposal, beta: jax.vmap(
                    lambda k, p: build_kernel(proposal, log_density_fn, acceptance=acceptance)(
                        k, p, beta
                    )
                )(keys_j, points_j)
            )(keys, points, proposals, betas)
            accept_prob = info.accept_prob
            if num_models > 1 and settings.exchange:
                source, swap_prob = jax.vmap(
                    lambda k, log_density: exchange_source(k, betas, log_density),
                    in_axes=(0, 1),
                    out_axes=(1, 0),
                )(jax.random.split(swap_key, chains), points.log_density)
                points = jax.tree.map(
                    lambda leaf: jnp.take_along_axis(
                        leaf, source.reshape(source.shape + (1,) * (leaf.ndim - 2)), 0
                    ),
                    points,
                )
            else:
                swap_prob = jnp.zeros((chains,), accept_prob.dtype)
            return points, (accept_prob, swap_prob)

        def steps(points, key, count):
            def body(i, carry):
                points, accept_sum, swap_sum = carry
                points, (accept_prob, swap_prob) = move(points, jax.random.fold_in(key, i))
                return points, accept_sum + accept_prob.mean(1), swap_sum + swap_prob.mean()

            zero = jnp.zeros((num_models,), starts.dtype)
            return jax.lax.fori_loop(0, count, body, (points, zero, jnp.zeros((), starts.dtype)))

        burn_key, record_key = jax.random.split(run_key)
        points, _, _ = steps(points, burn_key, burn)

        def record(carry, key):
            points, accept_sum, swap_sum = carry
            points, accept_add, swap_add = steps(points, key, thin)
            return (points, accept_sum + accept_add, swap_sum + swap_add), points.position

        zero = jnp.zeros((num_models,), starts.dtype)
        (_, accept_sum, swap_sum), positions = jax.lax.scan(
            record,
            (points, zero, jnp.zeros((), starts.dtype)),
            jax.random.split(record_key, num_records),
        )
        total = num_records * thin
        draws = jnp.moveaxis(positions, 1, 0).reshape(num_models, -1, positions.shape[-1])
        return draws, accept_sum / total, swap_sum / total

    return run


def _machinery(log_density_fn, settings: AnnealingSettings, acceptance):
    """Jit the vmapped-over-models training, beta search and data run."""
    train = _trainings(settings)
    return _Machinery(
        train=train(settings.epochs),
        train_initial=train(settings.initial_epochs) if settings.initial_epochs else None,
        # The model trained at beta_final proposes every draw of the sampler: it gets every
        # epoch, since the last few per cent of its loss still raise the acceptance rate.
        train_final=train(
            settings.epochs, None if settings.full_final_training else settings.patience
        ),
        train_fixed_noise=train(settings.initial_epochs or settings.epochs, fixed_noise=True),
        # Training, search and data runs take seconds each: LLVM's optimisation pays there, at
        # its first level, which runs the networks as fast as the default and compiles sooner.
        search=_search_from_rows(
            _beta_search(log_density_fn, settings, acceptance), settings.num_check_chains
        ),
        run=_run_from_rows(
            quick_jit(_data_chains(log_density_fn, settings, acceptance), optimize=1),
            settings.num_data_chains,
        ),
    )


def _run_from_rows(compiled_run, num_chains):
    """``run(rng_key, proposals, betas, data, burn, thin)``: the data chains of
    ``compiled_run``, each model's started from ``num_chains`` rows of its data, drawn apart
    from the compiled run (with the first of the two keys the run splits its key into), so that
    one compiled run serves every size of data."""

    @partial(quick_jit, static_argnums=2)
    def starts_of(rng_key, data, count):
        start_key, _ = jax.random.split(rng_key)
        keys = jax.random.split(start_key, data.shape[0])
        return jax.vmap(lambda key, rows: _take_rows(key, rows, count))(keys, data)

    def run(rng_key, proposals, betas, data, burn, thin):
        starts = starts_of(rng_key, data, num_chains)
        return compiled_run(rng_key, proposals, betas, starts, burn, thin)

    return run


def _search_from_rows(search_one, num_chains):
    """``search(keys, proposals, data, grid)``: each model's check chains started from
    ``num_chains`` rows of its data, drawn apart from the compiled search (with the first of the
    four keys ``search_one`` splits its key into), so that one compiled search serves every
    size of data."""
    starts_of = quick_jit(
        jax.vmap(lambda key, rows: _take_rows(jax.random.split(key, 4)[0], rows, num_chains))
    )
    compiled = quick_jit(jax.vmap(search_one, in_axes=(0, 0, 0, None)), optimize=1)

    def search(keys, proposals, data, grid):
        return compiled(keys, proposals, starts_of(keys, data), grid)

    return search


def check_fit_kwargs(fit_kwargs, owner=None):
    """Check keyword arguments of :func:`fit_vae_proposal` by name before any work: its
    annealing settings (what ``**settings`` takes) or, for a kernel's ``fit_kwargs``, those and
    the keywords the kernel does not set itself. Their values are checked where the target's
    dimension is known.

    :param dict fit_kwargs: the keyword arguments.
    :param str owner: how the error names where they came from, e.g.
        ``"VAESLMC(fit_kwargs=...)"``; ``None`` for ``fit_vae_proposal``'s own settings.
    :return: ``fit_kwargs``, unchanged.
    :raises TypeError: for an unknown name.

    **Example:**

    .. code-block:: python

        check_fit_kwargs({"epochs": 20}, "VAESLMC(fit_kwargs=...)")
    """
    check_setting_names(
        fit_kwargs,
        fit_vae_proposal,
        AnnealingSettings._fields,
        owner,
        set_by_kernel=(
            "potential_fn",
            "initial_position",
            "num_models",
            "acceptance",
            "flat_model",
        ),
    )
    return fit_kwargs


def fit_vae_proposal(
    rng_key,
    model=None,
    model_args=(),
    model_kwargs=None,
    *,
    potential_fn=None,
    initial_position=None,
    num_models=1,
    acceptance="exact",
    initial_data=None,
    progress_bar=True,
    flat_model=None,
    **settings,
) -> VAEProposal:
    """Train a VAE proposal for ``model`` by parallel adaptive annealing (Algorithms 3-6).

    :param rng_key: key.
    :param model: a NumPyro model with continuous latent sites.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param potential_fn: alternatively, ``-log p~`` on flat 1-D points (with
        ``initial_position``).
    :param initial_position: a flat point where ``potential_fn`` is finite.
    :param int num_models: models annealed side by side, exchanging states (the paper found two
        enough to repair a model that collapsed onto some modes).
    :param str acceptance: ``"exact"`` or ``"isometric"``, the acceptance of the annealing's
        own chains (the beta search and the training data).
    :param initial_data: optional flat draws at ``beta_0``, ``(N, D)`` or per model
        ``(J, N, D)``, used instead of the first rung's NUTS run.
    :param bool progress_bar: show progress bars.
    :param FlatModel flat_model: the model's flat potential
        (:func:`~numpyro_extras.flatten_model` of these arguments) when the caller has built it
        already, as :class:`~numpyro_extras.VAESLMC` has; ``None`` builds it.
    :param settings: any field of :class:`AnnealingSettings` (``beta_0``, ``ar_min``,
        ``epochs``, ``beta_vae``, ``encoder_sizes``, ...).
    :return: the :class:`~numpyro_extras.slmc.vae.VAEProposal` of the model whose proposals
        give the largest estimate of ``log Z`` at ``beta_final``; its ``history`` is an
        :class:`AnnealingHistory`.
    :warns AnnealingStalledWarning: when no model climbs for ``max_retrains`` consecutive
        rounds; the annealing then stops, and the model returned is chosen at ``beta_final``
        among all of them.
    :warns UserWarning: when the first rung's draws are not draws of ``p~^beta_0`` (the mean
        gradient of its log density over them far from 0, as on a funnel, whose tempered mass
        moves to scales NUTS cannot follow): no annealing is run, and the proposal is the
        first rung's model; or when the final draws are not the target's.

    **Example:**

    .. code-block:: python

        proposal = nx.fit_vae_proposal(
            jax.random.PRNGKey(0), model, (x, y),
            # small settings for a first try; the defaults are the paper's (nx.AnnealingSettings)
            encoder_sizes=(32, 32), decoder_sizes=(32, 32), epochs=20, initial_epochs=60,
            training_size=1000, initial_size=1000, initial_warmup=200, num_data_chains=20,
            num_check_chains=5, num_check_steps=200, batch_size=256, beta_step=0.05)
        nx.plot_annealing(proposal)
        kernel = nx.VAESLMC(model, proposal=proposal)
    """
    check_rng_key(rng_key)
    if model is not None:
        check_model(model)
    num_models = check_count("num_models", num_models)
    check_acceptance(acceptance)
    check_fit_kwargs(settings)
    settings = AnnealingSettings(**settings)
    init_key, data_key, loop_key, whiten_key = jax.random.split(rng_key, 4)
    if flat_model is None:
        flat_model = flat_target(
            init_key, model, model_args, model_kwargs, potential_fn, initial_position, "VAE-SLMC"
        )
    settings = settings.checked(num_models, flat_model.dimension)
    log_density_fn = lambda x: -flat_model.potential_fn(x)  # noqa: E731
    dimension = flat_model.dimension
    config = _vae_config(dimension, settings, acceptance)
    sites = site_shapes(flat_model)
    round_start = time.perf_counter()
    if initial_data is None:
        data, evaluations, problems = initial_draws(
            data_key, flat_model, settings, num_models, progress_bar
        )
    else:
        data, evaluations, problems = _checked_data(initial_data, num_models, dimension), 0, []
    problems = problems or _first_rung_problems(log_density_fn, data, settings)
    # Each check chain evaluates its start and one proposal per step.
    evaluations_per_search = num_models * settings.num_check_chains * (settings.num_check_steps + 1)
    data = data.astype(flat_model.initial_position.dtype)
    machinery = _machinery(log_density_fn, settings, acceptance)
    proposals = _new_models(init_key, config, sites, num_models, data.dtype)
    betas = np.full(num_models, settings.beta_0)
    rungs = []
    train_key, loop_key = jax.random.split(loop_key)
    train_fn = machinery.train_initial or machinery.train
    proposals, losses = train_fn(jax.random.split(train_key, num_models), proposals, data)
    rungs += _round_rungs(
        0,
        betas,
        np.full(num_models, math.nan),
        np.zeros(num_models, bool),
        losses,
        math.nan,
        round_start,
    )
    grid = candidate_betas(settings.beta_0, settings.beta_final, settings.beta_step)
    grid_array = jnp.asarray(grid, data.dtype)
    if not problems:
        proposals, data, betas, loop_key, round_rungs, round_evaluations = _annealing_rounds(
            loop_key,
            whiten_key,
            machinery,
            proposals,
            data,
            betas,
            grid,
            settings,
            evaluations_per_search,
            progress_bar,
        )
        rungs += round_rungs
        evaluations += round_evaluations
    final_rates, final_log_z, proposals, final_searches = _final_check(
        loop_key,
        jax.random.fold_in(whiten_key, 0),
        machinery,
        proposals,
        data,
        betas,
        grid_array,
        settings,
    )
    evaluations += final_searches * evaluations_per_search
    chosen = int(np.nanargmax(final_log_z))
    problems += _final_problems(
        log_density_fn, data[chosen], final_rates[chosen], _finished(betas, settings), settings
    )
    history = AnnealingHistory(
        rungs=tuple(rungs),
        num_models=num_models,
        final_accept_rates=tuple(float(rate) for rate in final_rates),
        final_log_z=tuple(float(value) for value in final_log_z),
        chosen_model=chosen,
        ar_min=float(settings.ar_min),
        density_evaluations=evaluations,
        problems=tuple(problems),
    )
    proposal = jax.tree.map(lambda leaf: leaf[chosen], proposals)
    return proposal.replace(history=history)


def _vae_config(dimension, settings: AnnealingSettings, acceptance) -> VAEConfig:
    """The network of every model: the settings' sizes, a learned decoder noise for the exact
    acceptance unless set, and a check that the acceptance can use it."""
    config = VAEConfig(
        dimension=dimension,
        latent_dim=settings.latent_dim or dimension,
        encoder_sizes=settings.encoder_sizes,
        decoder_sizes=settings.decoder_sizes,
        beta_vae=settings.beta_vae,
        decoder_scale=settings.decoder_scale,
        learn_decoder_scale=(
            acceptance == "exact"
            if settings.learn_decoder_scale is None
            else settings.learn_decoder_scale
        ),
        whiten=bool(settings.whiten),
    )
    check_acceptance(acceptance, config)
    return config


def _annealing_rounds(
    loop_key,
    whiten_key,
    machinery,
    proposals,
    data,
    betas,
    grid,
    settings: AnnealingSettings,
    evaluations_per_search,
    progress_bar,
):
    """The annealing's rounds (Algorithms 4-6), from the first rung's models to
    ``beta_final`` or until no model climbs for ``max_retrains`` rounds in a row: per round,
    each model's next beta from the vectorised search, its data chains there (with exchanges)
    and its training on them.

    :return: ``(proposals, data, betas, loop_key, rungs, evaluations)``: the models, their
        last data and betas, the loop's key after the rounds, the rounds' rungs and their
        density evaluations.
    """
    num_models = len(betas)
    stalled = 0
    round_index = 0
    rungs = []
    evaluations = 0
    span = settings.beta_final - settings.beta_0
    with tqdm(
        total=1.0,
        desc="VAE-SLMC annealing",
        disable=not progress_bar,
        leave=False,
        bar_format="{l_bar}{bar}| beta {postfix}",
    ) as bar:
        while not _finished(betas, settings):
            round_index += 1
            round_start = time.perf_counter()
            search_key, run_key, train_key, loop_key = jax.random.split(loop_key, 4)
            proposals, rates, searches = _searched_models(
                search_key,
                whiten_key,
                round_index,
                machinery,
                proposals,
                data,
                betas,
                grid,
                settings,
            )
            evaluations += searches * evaluations_per_search
            new_betas = _next_betas(grid, rates, betas, settings)
            climbed = new_betas > betas
            finished = betas >= settings.beta_final
            stalled = 0 if climbed.any() else stalled + 1
            if stalled > settings.max_retrains:
                _warn_stalled(stalled, betas, settings)
                break
            chosen_rates = rates[np.arange(num_models), _grid_columns(grid, new_betas)]
            data, swap_rate, run_evaluations = _data_run(
                run_key, machinery, proposals, new_betas, chosen_rates, data, settings
            )
            evaluations += run_evaluations
            train_fn = machinery.train_final if _finished(new_betas, settings) else machinery.train
            proposals, losses = train_fn(jax.random.split(train_key, num_models), proposals, data)
            rungs += _round_rungs(
                round_index,
                new_betas,
                chosen_rates,
                ~(climbed | finished),
                losses,
                float(swap_rate),
                round_start,
            )
            betas = new_betas
            bar.n = float((betas.max() - settings.beta_0) / span) if span > 0 else 1.0
            bar.set_postfix_str(
                " ".join(f"{beta:.2f}" for beta in betas)
                + f", acceptance {' '.join(f'{rate:.2f}' for rate in chosen_rates)}"
            )
            bar.refresh()
    return proposals, data, betas, loop_key, rungs, evaluations


def _searched_models(
    search_key, whiten_key, round_index, machinery, proposals, data, betas, grid, settings
):
    """A round's beta search (Algorithm 4's candidates ``grid``, all at once), after which a
    collapsed model is retrained (:func:`_separated_if_collapsed`) and, in the first round of
    ``whiten=None``, whitened models are tried (:func:`_whitened_if_better`). Their keys are
    folded from ``whiten_key``, which leaves every run without a collapse as it is.

    :return: ``(proposals, rates, searches)``: the models, their acceptance rates on the grid
        ``(J, len(grid))``, and the beta searches run.
    """
    num_models = len(betas)
    grid_array = jnp.asarray(grid, data.dtype)
    rates, _ = machinery.search(
        jax.random.split(search_key, num_models), proposals, data, grid_array
    )
    rates = np.asarray(rates)
    proposals, rates, repairs = _separated_if_collapsed(
        jax.random.fold_in(whiten_key, round_index),
        machinery,
        proposals,
        rates,
        _grid_columns(grid, betas),
        data,
        grid_array,
        settings,
    )
    searches = 1 + repairs
    if round_index == 1 and settings.whiten is None:
        proposals, rates, whitenings = _whitened_if_better(
            whiten_key, machinery, proposals, rates, data, grid_array, settings
        )
        searches += whitenings
    return proposals, rates, searches


def _next_betas(grid, rates, betas, settings: AnnealingSettings):
    """Each model's next rung: Algorithm 4's search over ``grid`` with its ``rates``, or
    ``constant_step`` above its beta."""
    if settings.constant_step is None:
        return np.array(
            [
                select_beta(grid, rates[j], betas[j], settings.ar_min, settings.ar_max)
                for j in range(len(betas))
            ]
        )
    return np.round(np.minimum(betas + settings.constant_step, settings.beta_final), 12)


def _warn_stalled(stalled, betas, settings: AnnealingSettings):
    warnings.warn(
        f"VAE-SLMC annealing made no progress in {stalled} consecutive rounds: no "
        f"model's acceptance rate above beta = {betas.min():.3g} reached "
        f"ar_min = {settings.ar_min} after retraining. It stops there, and the "
        f"model trained at beta = {betas.max():.3g} proposes at beta = "
        f"{settings.beta_final}: the sampler stays exact (every proposal is "
        "accepted or rejected against the target) but mixes only as well as that "
        "model fits the target. On a target with strongly correlated coordinates, "
        "whiten=True (per-coordinate standardisation leaves the correlations to the "
        "network); else train longer (epochs), use a larger network or more data "
        "(training_size), lower ar_min, or raise max_retrains.",
        AnnealingStalledWarning,
        stacklevel=3,
    )


def _data_run(run_key, machinery, proposals, new_betas, chosen_rates, data, settings):
    """The training data of the new rungs (Algorithm 6): the models' chains thinned by the
    inverse of the lowest acceptance rate, after a burn-in of ``burn_in_fraction``.

    :return: ``(data, swap_rate, evaluations)``.
    """
    thin = int(math.ceil(1.0 / max(float(chosen_rates.min()), MIN_THINNING_RATE)))
    records = math.ceil(settings.training_size / settings.num_data_chains)
    fraction = settings.burn_in_fraction
    burn = int(math.ceil(fraction / (1.0 - fraction) * records * thin))
    data, _, swap_rate = machinery.run(
        run_key, proposals, jnp.asarray(new_betas, data.dtype), data, burn, thin
    )
    evaluations = len(new_betas) * settings.num_data_chains * (1 + burn + records * thin)
    return data, swap_rate, evaluations


def _final_check(rng_key, repair_key, machinery, proposals, data, betas, grid, settings):
    """Every model's acceptance rate and ``log Z`` estimate at ``beta_final``, after a repair of
    collapsed models (:func:`_separated_if_collapsed`) where the annealing reached it.

    Every model is checked from states of every model's chain, and the model returned is the
    one whose proposals find the most mass (the largest estimate of ``log Z`` at
    ``beta_final``): a model that collapsed onto some modes can have the best acceptance rate,
    from its own states, yet misses the other modes' mass. The whole grid is passed again (its
    first entry is ``beta_final``), so nothing is compiled anew. The last rung's training starts
    from a model that may have collapsed where one Gaussian still fitted; only this search
    shows it. A stalled annealing offers every model at ``beta_final``.

    :return: ``(final_rates, final_log_z, proposals, searches)``: NaN for a model that is not
        offered, the models (repaired or not), and the beta searches run.
    """
    num_models, rows, dimension = data.shape
    pool_key, check_key = jax.random.split(rng_key)
    pooled = data.reshape(-1, dimension)
    pooled = jnp.stack(
        [_take_rows(key, pooled, rows) for key in jax.random.split(pool_key, num_models)]
    )
    final_rates, final_log_z = machinery.search(
        jax.random.split(check_key, num_models), proposals, pooled, grid
    )
    searches = 1
    stalled_out = not _finished(betas, settings)
    if not stalled_out:
        unfinished_pass = np.where(betas >= settings.beta_final, np.asarray(final_rates)[:, 0], 1.0)
        repaired, _, repairs = _separated_if_collapsed(
            repair_key,
            machinery,
            proposals,
            unfinished_pass[:, None],
            np.zeros(num_models, int),
            pooled,
            grid,
            settings,
        )
        searches += repairs
        if repaired is not proposals:
            proposals = repaired
            final_rates, final_log_z = machinery.search(
                jax.random.split(jax.random.fold_in(check_key, 1), num_models),
                proposals,
                pooled,
                grid,
            )
            searches += 1
    offered = np.full(num_models, True) if stalled_out else betas >= settings.beta_final
    final_rates = np.where(offered, np.asarray(final_rates)[:, 0], np.nan)
    final_log_z = np.where(offered, np.asarray(final_log_z), np.nan)
    return final_rates, final_log_z, proposals, searches


def _first_rung_problems(log_density_fn, data, settings):
    """Warn, and return the problem to record, when the first rung's ``data`` ``(J, N, D)`` are
    not draws of ``p~^beta_0`` (:func:`_largest_mean_score` beyond ``FIRST_RUNG_SCORE_LIMIT``):
    no annealing from them reaches the posterior, so none is run."""
    beta_0 = settings.beta_0
    score, coordinate = _largest_mean_score(
        lambda x: beta_0 * log_density_fn(x), data.reshape(-1, data.shape[-1])
    )
    if score <= FIRST_RUNG_SCORE_LIMIT:
        return []
    return _untempered_start_problem(
        stacklevel=4,
        evidence=f"the first rung's draws are not draws of the tempered target p~^beta_0 "
        f"(beta_0 = {beta_0}): the mean gradient of its log density over them is {score:.0f} "
        f"standard errors from 0 in coordinate {coordinate} (0 for draws from it)",
    )


def _deep_tree_problems(run, settings):
    """Warn, and return the problem to record, when more than ``MAX_DEPTH_SHARE`` of the
    transitions of the NUTS ``run`` (:class:`~numpyro_extras.shell.pilot.PilotDraws`) at ``beta_0``
    reached NUTS's maximum tree depth: its draws are not draws of ``p~^beta_0``, so no annealing
    is run from them."""
    if run.max_depth_share <= MAX_DEPTH_SHARE:
        return []
    return _untempered_start_problem(
        stacklevel=5,
        evidence=f"NUTS cannot sample the tempered target p~^beta_0 (beta_0 = {settings.beta_0}): "
        f"{run.max_depth_share:.0%} of its transitions reached the maximum tree depth, so its "
        "step size is too small for the scales of the target's mass",
    )


def _untempered_start_problem(evidence, stacklevel):
    """Warn (``stacklevel`` frames up: the caller of :func:`fit_vae_proposal`) that the
    annealing cannot start at ``beta_0``, for the reason ``evidence`` gives, and return the
    problem to record."""
    problem = (
        f"{evidence}. Tempering moved the target's mass where NUTS cannot follow it (a "
        "hierarchical model's mass moves to huge scales), and no annealing from these draws "
        "reaches the posterior, so none was run: the proposal is trained on these draws only, "
        "and the sampler's draws and its log Z will be wrong. Use nx.ReplicaExchange or NUTS "
        "for this model"
    )
    warnings.warn(problem[0].upper() + problem[1:] + ".", stacklevel=stacklevel)
    return [problem]


def _final_problems(log_density_fn, draws, final_rate, finished, settings):
    """Warn, and return the problems to record, when the chosen model's final ``draws`` are not
    the target's (:func:`_largest_mean_score`; only where the annealing reached
    ``beta_final``) or it accepts less than ``ar_min`` there."""
    score, coordinate = _largest_mean_score(log_density_fn, draws) if finished else (0.0, 0)
    problems = []
    if score > MEAN_SCORE_LIMIT:
        problems.append(
            f"the trained VAE proposal's draws at beta = {settings.beta_final} are not where "
            f"the target's mass is: the mean gradient of its log density over them is "
            f"{score:.0f} standard errors from 0 in coordinate {coordinate} (0 for draws from "
            "the target). The annealing's chains stayed where its proposals reach, a region "
            "the target barely weighs (tempering can move a hierarchical model's mass to huge "
            "scales, away from the posterior), so the sampler's draws and its log Z will be "
            "wrong. Use nx.ReplicaExchange or NUTS for this model"
        )
        warnings.warn(problems[-1][0].upper() + problems[-1][1:] + ".", stacklevel=3)
    if final_rate < settings.ar_min:
        warnings.warn(
            f"The trained VAE proposal's acceptance rate at beta = {settings.beta_final} is "
            f"{final_rate:.3f}, below ar_min = {settings.ar_min}: the sampler stays "
            "exact but will mix slowly. Train longer or with more data.",
            stacklevel=3,
        )
    return problems


def _largest_mean_score(log_density_fn, draws):
    """``(z, i)``: the largest ``|mean of d log p / dx_i|`` over ``draws`` ``(N, D)`` in standard
    errors of that mean, and its coordinate. For draws from ``p`` the mean gradient of its log
    density is 0 (integration by parts, where ``p`` vanishes at the boundary), so ``z`` is about
    normal; draws stuck in a region ``p`` barely weighs have the gradient pointing the same way
    at every one of them. Draws whose gradient is not finite are left out."""
    gradients = np.asarray(quick_jit(jax.vmap(jax.grad(log_density_fn)))(draws), np.float64)
    gradients = gradients[np.all(np.isfinite(gradients), axis=1)]
    if gradients.shape[0] < 2:
        return 0.0, 0
    stderr = gradients.std(0, ddof=1) / math.sqrt(gradients.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.where(stderr > 0, np.abs(gradients.mean(0)) / stderr, 0.0)
    coordinate = int(np.argmax(scores))
    return float(scores[coordinate]), coordinate


def _separated_if_collapsed(rng_key, machinery, proposals, rates, columns, data, grid, settings):
    """On every beta search, with a learned decoder noise: when a model's latents carry no
    information about the rung's ``data`` (:func:`~numpyro_extras.slmc.vae.latent_information`
    below ``COLLAPSED_INFORMATION``) and it accepts less than ``GAUSSIAN_FIT_RATE`` at its
    current beta (``rates[j, columns[j]]``), train models afresh on ``training_size`` of those
    points, first with eq. 2's fixed small noise, which can only reconstruct through the
    latents, then with the learned noise from there, and keep them if their best rate at the
    current beta is higher. The learned noise can collapse such a model again: up to
    ``SEPARATING_ATTEMPTS`` initialisations are tried until one is kept.

    A learned noise profiles the reconstruction error out of the loss, and a network can then
    settle where the noise spans every mode at once and the latents are unused (posterior
    collapse): on separated modes in few dimensions its proposal is one broad Gaussian, whose
    acceptance falls as the annealing narrows the modes. At a small beta the modes may still
    overlap, so that one Gaussian fits and the collapse shows only at a later rung.

    :return: ``(proposals, rates, searches)``: the models kept, their search rates, and the
        extra beta searches run (0 to ``SEPARATING_ATTEMPTS``).
    """
    config = proposals.config
    if not config.learn_decoder_scale:
        return proposals, rates, 0
    current_rates = rates[np.arange(rates.shape[0]), columns]
    fits_poorly = current_rates < GAUSSIAN_FIT_RATE
    if not fits_poorly.any():
        return proposals, rates, 0
    information = np.asarray(_latent_informations(proposals, data))
    if not np.any((information < COLLAPSED_INFORMATION) & fits_poorly):
        return proposals, rates, 0
    num_models = rates.shape[0]
    subset_key, rng_key = jax.random.split(rng_key)
    subset = jax.vmap(lambda key, rows: _take_rows(key, rows, settings.training_size))(
        jax.random.split(subset_key, num_models), data
    )
    for attempt in range(SEPARATING_ATTEMPTS):
        init_key, fixed_key, train_key, search_key = jax.random.split(
            jax.random.fold_in(rng_key, attempt), 4
        )
        fresh = _new_models(init_key, config, proposals.sites, num_models, subset.dtype)
        fixed, _ = machinery.train_fixed_noise(
            jax.random.split(fixed_key, num_models), fresh, subset
        )
        separated = proposals.replace(
            params={
                **proposals.params,
                "encoder": fixed.params["encoder"],
                "decoder": fixed.params["decoder"],
            }
        )
        separated, _ = machinery.train(jax.random.split(train_key, num_models), separated, subset)
        proposals, rates, _ = _kept_if_better(
            search_key, machinery, separated, proposals, rates, data, grid, columns
        )
        if proposals is separated:
            break
    return proposals, rates, attempt + 1


# Compiled: op by op, the encoder's first evaluation compiles every layer's operations apart.
_latent_informations = quick_jit(jax.vmap(latent_information))


def _whitened_if_better(rng_key, machinery, proposals, rates, data, grid, settings):
    """On the first beta search of ``whiten=None``: when every model's acceptance rate at
    ``beta_0`` (the grid's last entry) is below ``ar_min``, train whitened models afresh on the
    first rung's ``data`` and keep them if their best rate at ``beta_0`` is higher.

    Per-coordinate standardisation leaves a strong correlation between coordinates to the
    network, whose proposals then miss the target's narrow directions (almost every proposal
    rejected); the whitened data have unit covariance, which a learned decoder noise fits alone.

    :return: ``(proposals, rates, searches)``: the models kept, their search rates, and the
        extra beta searches run (0 or 1).
    """
    if np.any(rates[:, -1] >= settings.ar_min):
        return proposals, rates, 0
    init_key, train_key, search_key = jax.random.split(rng_key, 3)
    config = dataclasses.replace(proposals.config, whiten=True)
    whitened = _fresh_models(init_key, train_key, machinery, config, proposals.sites, data)
    return _kept_if_better(search_key, machinery, whitened, proposals, rates, data, grid)


def _fresh_models(init_key, train_key, machinery, config, sites, data):
    """One model per row of ``data`` ``(J, N, D)``, initialised with ``config`` and trained on
    it as the first rung's models are."""
    num_models = data.shape[0]
    models = _new_models(init_key, config, sites, num_models, data.dtype)
    train_fn = machinery.train_initial or machinery.train
    models, _ = train_fn(jax.random.split(train_key, num_models), models, data)
    return models


def _new_models(init_key, config, sites, num_models, dtype):
    """``num_models`` untrained proposals of ``config``, stacked, with leaves of ``dtype``,
    initialised in one compiled call (flax's initialisation op by op compiles every layer's
    operations apart), compiled once per configuration."""
    return _initialised_models(init_key, config, sites, num_models, jnp.dtype(dtype))


@partial(quick_jit, static_argnums=(1, 2, 3, 4))
def _initialised_models(init_key, config, sites, num_models, dtype):
    models = jax.vmap(lambda key: init_proposal(key, config, sites=sites))(
        jax.random.split(init_key, num_models)
    )
    return jax.tree.map(lambda leaf: leaf.astype(dtype), models)


def _kept_if_better(search_key, machinery, candidates, proposals, rates, data, grid, columns=-1):
    """``(models, rates, 1)``: the ``candidates`` with their search rates when their best rate at
    the models' current betas (the grid's ``columns``; by default its last entry, ``beta_0``)
    beats the ``proposals``' ``rates``, else those."""
    candidate_rates, _ = machinery.search(
        jax.random.split(search_key, data.shape[0]), candidates, data, grid
    )
    candidate_rates = np.asarray(candidate_rates)
    models = np.arange(rates.shape[0])
    if candidate_rates[models, columns].max() > rates[models, columns].max():
        return candidates, candidate_rates, 1
    return proposals, rates, 1


def _grid_columns(grid, betas):
    """The index in ``grid`` of each model's current beta."""
    return np.argmin(np.abs(np.asarray(grid)[None, :] - np.asarray(betas)[:, None]), axis=1)


def _round_rungs(round_index, betas, accept_rates, retrained, losses, swap_rate, round_start):
    """One :class:`AnnealingRung` per model for a round that started at ``round_start``
    (``time.perf_counter``); reading the losses waits for the training to finish."""
    trainings = [_final_loss_and_epochs(model_losses) for model_losses in losses]
    seconds = time.perf_counter() - round_start
    return [
        AnnealingRung(
            round_index,
            j,
            float(betas[j]),
            float(accept_rates[j]),
            bool(retrained[j]),
            **trainings[j],
            swap_rate=swap_rate,
            seconds=seconds,
        )
        for j in range(len(trainings))
    ]


def _final_loss_and_epochs(losses):
    """The last recorded loss of a training and the epochs it ran (the losses are NaN after an
    early stop)."""
    losses = np.asarray(losses)
    epochs = int(np.sum(np.isfinite(losses)))
    return {"loss": float(losses[epochs - 1]) if epochs else math.nan, "epochs": epochs}


def _finished(betas, settings):
    reached = betas >= settings.beta_final
    return bool(reached.all() if settings.stop == "all" else reached.any())


def _checked_data(initial_data, num_models, dimension):
    data = jnp.asarray(initial_data)
    if data.ndim == 2:
        data = jnp.broadcast_to(data, (num_models,) + data.shape)
    if data.ndim != 3 or data.shape[0] != num_models or data.shape[-1] != dimension:
        raise ValueError(
            f"initial_data must have shape (N, {dimension}) or ({num_models}, N, {dimension}), "
            f"got {tuple(jnp.shape(initial_data))}."
        )
    if not bool(jnp.all(jnp.isfinite(data))):
        raise ValueError("initial_data has non-finite values.")
    return data
