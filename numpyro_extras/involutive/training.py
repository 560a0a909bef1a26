"""Adversarial training of the Ai-sampler's involution from samples alone (the paper's
Algorithm 1, section 5).

The discriminator ``d`` plays the log acceptance ratio: it minimises ``E_p[r(D) log r(D)]``
with the Barker test ``r(D) = sigmoid(d)``, while the flow maximises the acceptance it predicts,
``E_p[r(D)]`` (eq. 23). Neither loss evaluates the target density; the data are extended states
``(x, v)``, ``x`` from the current sampler's draws and ``v ~ N(0, I)``. The first epochs train on
pilot NUTS draws from dispersed starts (or the user's draws), the later ones on fresh draws of
the kernel itself, run with the exact Metropolis-Hastings acceptance (the bootstrap).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

from numpyro_extras.involutive.chains import build_kernel
from numpyro_extras.involutive.chains import init as chain_init
from numpyro_extras.involutive.networks import (
    InvolutionConfig,
    InvolutiveProposal,
    discriminator_logit,
    discriminator_module,
    init_proposal,
    standardized_involution,
)
from numpyro_extras.model.bases import MixtureBase
from numpyro_extras.model.potential import flat_target, site_shapes
from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.pilot import dispersed_nuts_draws
from numpyro_extras.shell.progress import run_chunks
from numpyro_extras.shell.validation import (
    check_count,
    check_model,
    check_real,
    check_rng_key,
    check_setting_names,
)

__all__ = [
    "TrainingSettings",
    "TrainingHistory",
    "train_ai_sampler",
    "check_train_kwargs",
    "seed_mixture",
    "seed_fit",
    "declined_epochs",
    "LOW_ACCEPTANCE",
    "DECLINE_PATIENCE",
]

# Below this bootstrap acceptance the learned kernel barely moves: training has failed.
LOW_ACCEPTANCE = 0.05
# The swap start is chosen when it accepts at least this often on the seed draws: then the seed
# draws' Gaussian fit is close to the target. On separated modes it accepts far less and the
# adversarial updates do not move it, while the paper's start learns to jump between them.
SWAP_ACCEPTANCE = 0.5
# Adversarial updates past the best flow can spoil it for good (the discriminator wins and the
# flow's acceptance falls back towards zero). The best flow is kept whatever follows, so once the
# acceptance has stayed below DECLINE_FRACTION of the best for DECLINE_PATIENCE epochs in a row,
# after reaching at least DECLINE_MIN_BEST, training stops. A flow still improving, however
# slowly, is never stopped this way.
DECLINE_PATIENCE = 5
DECLINE_FRACTION = 0.5
DECLINE_MIN_BEST = 0.1
# The check after training: chains of the trained kernel from the seed chains' last states.
MIXING_CHECK_STEPS = 1000
MAX_MIXING_RHAT = 1.1
# When the learned map fails that check, this share of the steps proposes independently of
# the state, from a Gaussian mixture over the modes the seed chains found (or from the seed
# draws' widened Gaussian fit, when they found one), which reaches every mode it spans; the
# learned map keeps the rest.
FALLBACK_SWAP_PROBABILITY = 0.75
# Where the seed chains found one region, this share of the steps proposes from a Gaussian fit
# of the seed draws, widened 1 + sqrt(SEED_FIT_WIDENING / D) times in D dimensions, even when
# the learned map passes that check: the map moves locally, and a tail it reaches only in rare
# excursions leaves a run of a few hundred draws per chain off, with a standard error too
# small, which neither the check's R-hat nor its ESS shows. A proposal wider than the
# posterior reaches its tails (a narrower one strands the chains there); the widening shrinks
# with the dimension, as an independence proposal's acceptance falls with D (w - 1)^2.
SINGLE_REGION_SWAP_PROBABILITY = 0.25
SEED_FIT_WIDENING = 2.0
# Two seed chains sit in one mode when a chain's mean lies within this many standard deviations
# (Mahalanobis, under the group's draws) of the group's mean.
SAME_MODE_DISTANCE = 3.0
# The mixture's components are this many times as wide as their modes' draws: an independence
# proposal narrower than the target in its tails is stuck there.
MIXTURE_WIDENING = 1.2


class TrainingSettings(NamedTuple):
    """The settings of :func:`train_ai_sampler` (the reference code's 2-D recipe where the paper
    gives one).

    :param int epochs: training epochs in all.
    :param int seed_epochs: of which the first train on the seed draws (pilot NUTS or
        ``init_samples``); the rest on the kernel's own draws. Default (``None``): 5 from the
        swap start, 10 from the paper's (at most ``epochs``).
    :param float learning_rate: Adam's learning rate, for both networks.
    :param int kernel_steps: flow updates per minibatch.
    :param int discriminator_steps: discriminator updates per minibatch.
    :param int batch_size: the most extended states per minibatch (an epoch's data are split
        into as few minibatches of one size as hold them).
    :param int num_chains: bootstrap chains.
    :param int burn_in: bootstrap transitions per epoch before the kept ones.
    :param int num_kept: kept bootstrap transitions per chain and epoch.
    :param int seed_chains: pilot NUTS chains, from dispersed starts.
    :param int seed_warmup: their warm-up transitions.
    :param int seed_samples: their kept draws per chain.
    :param float seed_radius: half-width of the box their starts are drawn in (unconstrained).
    :param int patience: training stops once this many bootstrap epochs in a row after the seed
        epochs have not beaten the best bootstrap acceptance of those epochs (0: never stops
        early). The untrained flow's acceptance is not the mark to beat: from the paper's
        random start the first trained epochs often accept less than it, and then rise. Default
        (``None``): 5 from the swap start; 0 from the paper's, whose flow learns to jump between
        modes while its acceptance has stopped rising.
    :param float start_acceptance: training ends before any update when the untrained flow
        accepts at least this often, on the seed draws (the test that chooses the swap start)
        or in its first bootstrap epoch: the swap start on a near-Gaussian posterior, which
        adversarial updates only lower (1: always train).
    """

    epochs: int = 50
    seed_epochs: int | None = None
    learning_rate: float = 1e-4
    kernel_steps: int = 3
    discriminator_steps: int = 1
    batch_size: int = 4096
    num_chains: int = 50
    burn_in: int = 100
    num_kept: int = 100
    seed_chains: int = 16
    seed_warmup: int = 300
    seed_samples: int = 300
    seed_radius: float = 2.0
    patience: int | None = None
    start_acceptance: float = SWAP_ACCEPTANCE

    def validated(self) -> TrainingSettings:
        counts = {
            name: check_count(name, getattr(self, name))
            for name in self._fields
            if name
            not in ("seed_epochs", "learning_rate", "seed_radius", "patience", "start_acceptance")
        }
        seed_epochs = (
            None
            if self.seed_epochs is None
            else check_count("seed_epochs", self.seed_epochs, minimum=0)
        )
        if seed_epochs is not None and seed_epochs > counts["epochs"]:
            raise ValueError(
                f"seed_epochs ({seed_epochs}) cannot exceed epochs ({counts['epochs']})."
            )
        return self._replace(
            **counts,
            seed_epochs=seed_epochs,
            patience=None
            if self.patience is None
            else check_count("patience", self.patience, minimum=0),
            start_acceptance=check_real(
                "start_acceptance",
                self.start_acceptance,
                "a number in [0, 1]",
                low=0.0,
                high=1.0,
                open_low=False,
                open_high=False,
            ),
            learning_rate=check_real(
                "learning_rate", self.learning_rate, "a positive number", low=0.0
            ),
            seed_radius=check_real("seed_radius", self.seed_radius, "a positive number", low=0.0),
        )

    def for_start(self, swap) -> TrainingSettings:
        """The settings with the defaults of ``seed_epochs`` and ``patience`` for the start
        chosen (the swap, or the paper's random flow)."""
        seed_epochs, patience = (5, 5) if swap else (10, 0)
        return self._replace(
            seed_epochs=min(seed_epochs, self.epochs)
            if self.seed_epochs is None
            else self.seed_epochs,
            patience=patience if self.patience is None else self.patience,
        )


class TrainingHistory(NamedTuple):
    """What training did, per epoch (JSON-friendly tuples).

    :param accept_rates: mean acceptance of the bootstrap chains at the start of each epoch (NaN
        for the seed epochs after the first); when the swap start was accepted on the seed
        draws and no epoch ran, its acceptance there.
    :param kernel_losses: mean ``-E[r(D)]`` of the flow's updates.
    :param discriminator_losses: mean ``E[r(D) log r(D)]`` of the discriminator's updates.
    :param seed_gradient_evaluations: gradient evaluations of the pilot NUTS run (0 when
        ``init_samples`` were given).
    :param seconds: wall time of the training, the pilot run included.
    :param str stopped: why training ended: ``"epochs"`` (every epoch ran), ``"plateau"``
        (``patience`` bootstrap epochs without a better acceptance), ``"declined"`` (the
        acceptance fell below half its best for ``DECLINE_PATIENCE`` epochs in a row; see
        :func:`declined_epochs`) or ``"start accepted"`` (the untrained flow accepted at least
        ``start_acceptance``; no update was made).
    """

    accept_rates: tuple
    kernel_losses: tuple
    discriminator_losses: tuple
    seed_gradient_evaluations: int
    seconds: float
    stopped: str = "epochs"


def _batch_shape(num_points, batch_size):
    """``(batches, size)``: as few minibatches of at most ``batch_size`` as hold ``num_points``,
    all of one size."""
    num_batches = -(-num_points // batch_size)
    return num_batches, -(-num_points // num_batches)


def _extended_batches(rng_key, positions, num_batches, batch_size):
    """Shuffled minibatches ``(num_batches, batch_size, 2n)`` of extended states ``(u, v)``,
    ``v ~ N(0, I)``: at stationarity ``(x, v) ~ p(x) N(0, I)``, the distribution the losses
    average over."""
    order_key, fill_key, momentum_key = jax.random.split(rng_key, 3)
    num_points = positions.shape[0]
    # Every point is used once per epoch; the batches are filled up with random other points.
    order = jnp.concatenate(
        [
            jax.random.permutation(order_key, num_points),
            jax.random.choice(fill_key, num_points, (num_batches * batch_size - num_points,)),
        ]
    )
    states = jnp.concatenate(
        [positions[order], jax.random.normal(momentum_key, (len(order), positions.shape[1]))], -1
    )
    return states.reshape(num_batches, batch_size, -1).astype(jnp.float32)


def _trainer(config: InvolutionConfig, settings: TrainingSettings):
    """``(init, train)``: the optimiser states, and one pass of minibatch updates over the
    batches of :func:`_extended_batches`."""
    optimizer = optax.adam(settings.learning_rate)

    def kernel_loss(flow_params, discriminator_params, batch):
        image = standardized_involution(config, flow_params, batch)
        logit = discriminator_logit(config, discriminator_params, batch, image)
        return -jnp.mean(jax.nn.sigmoid(logit))

    def discriminator_loss(discriminator_params, flow_params, batch):
        image = jax.lax.stop_gradient(standardized_involution(config, flow_params, batch))
        logit = discriminator_logit(config, discriminator_params, batch, image)
        return jnp.mean(jax.nn.sigmoid(logit) * jax.nn.log_sigmoid(logit))

    def repeated(loss_fn, count):
        loss_and_grad = jax.value_and_grad(loss_fn)

        def update(params, opt_state, other, batch):
            def one(carry, _):
                params, opt_state = carry
                loss, grads = loss_and_grad(params, other, batch)
                updates, opt_state = optimizer.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), loss

            (params, opt_state), losses = jax.lax.scan(one, (params, opt_state), None, count)
            return params, opt_state, jnp.mean(losses)

        return update

    update_kernel = repeated(kernel_loss, settings.kernel_steps)
    update_discriminator = repeated(discriminator_loss, settings.discriminator_steps)

    def init(flow_params, discriminator_params):
        return optimizer.init(flow_params), optimizer.init(discriminator_params)

    def train(networks, batches):
        def batch_step(networks, batch):
            flow, discriminator, flow_opt, discriminator_opt = networks
            flow, flow_opt, flow_loss = update_kernel(flow, flow_opt, discriminator, batch)
            discriminator, discriminator_opt, discriminator_loss_value = update_discriminator(
                discriminator, discriminator_opt, flow, batch
            )
            return (flow, discriminator, flow_opt, discriminator_opt), (
                flow_loss,
                discriminator_loss_value,
            )

        networks, (flow_losses, discriminator_losses) = jax.lax.scan(batch_step, networks, batches)
        return networks, (jnp.mean(flow_losses), jnp.mean(discriminator_losses))

    return init, train


def _bootstrap(proposal: InvolutiveProposal, potential_fn, settings: TrainingSettings):
    """``run(flow_params, positions, rng_key, swap_probability=None) -> (positions, kept,
    accept_rate)``: the bootstrap chains, each ``burn_in + num_kept`` exact transitions of the
    current kernel; ``kept`` is ``(num_kept, chains, D)``. With a ``mixture`` on ``proposal``,
    ``swap_probability`` of the steps propose from it (see
    :func:`~numpyro_extras.involutive.chains.build_kernel`)."""

    def run(flow_params, positions, rng_key, swap_probability=None):
        kernel = jax.vmap(
            build_kernel(proposal.replace(params=flow_params), potential_fn, swap_probability)
        )
        states = jax.vmap(lambda x: chain_init(x, potential_fn))(positions)
        num_chains = positions.shape[0]

        def transition(states, key):
            states, info = kernel(jax.random.split(key, num_chains), states)
            return states, (states.position, info.accept_prob)

        # One scan over the burn-in and the kept transitions: the kernel is traced and compiled
        # once, not once per loop.
        burn_in_key, kept_key = jax.random.split(rng_key)
        keys = jnp.concatenate(
            [
                jax.random.split(burn_in_key, settings.burn_in),
                jax.random.split(kept_key, settings.num_kept),
            ]
        )
        states, (positions, accept_probs) = jax.lax.scan(transition, states, keys)
        kept = positions[settings.burn_in :]
        return states.position, kept, jnp.mean(accept_probs[settings.burn_in :])

    return run


def check_train_kwargs(train_kwargs, owner=None):
    """Check keyword arguments of :func:`train_ai_sampler` by name and value before any work:
    its training settings (what ``**settings`` takes) or, for a kernel's ``train_kwargs``, those
    and the network's sizes and other keywords the kernel does not set itself.

    :param dict train_kwargs: the keyword arguments.
    :param str owner: how the error names where they came from, e.g.
        ``"AiSampler(train_kwargs=...)"``; ``None`` for ``train_ai_sampler``'s own settings.
    :return: ``train_kwargs``, unchanged.
    :raises TypeError: for an unknown name or a value of the wrong kind.
    :raises ValueError: for a value out of range.

    **Example:**

    .. code-block:: python

        check_train_kwargs({"epochs": 20, "hidden": 64}, "AiSampler(train_kwargs=...)")
    """
    check_setting_names(
        train_kwargs,
        train_ai_sampler,
        TrainingSettings._fields,
        owner,
        set_by_kernel=("potential_fn", "initial_position"),
    )
    settings = {
        name: train_kwargs[name] for name in TrainingSettings._fields if name in train_kwargs
    }
    try:
        TrainingSettings(**settings).validated()
        for name in ("num_layers", "hidden", "discriminator_hidden"):
            if name in train_kwargs:
                check_count(name, train_kwargs[name])
    except (TypeError, ValueError) as error:
        if owner is None:
            raise
        raise type(error)(f"{owner}: {error}") from None
    return train_kwargs


def train_ai_sampler(
    rng_key,
    model=None,
    model_args=(),
    model_kwargs=None,
    *,
    potential_fn=None,
    initial_position=None,
    init_samples=None,
    num_layers=5,
    hidden=32,
    discriminator_hidden=128,
    swap=None,
    swap_probability=None,
    whiten=True,
    progress_bar=True,
    flat_model=None,
    **settings,
) -> InvolutiveProposal:
    """Train the Ai-sampler's involution on a model (the paper's Algorithm 1).

    Seed draws (``seed_chains`` NUTS chains from dispersed starts on the unconstrained space, or
    ``init_samples``, for example replica-exchange draws) standardise the position and choose
    the untrained flow (``swap``). Unless it already accepts ``start_acceptance`` of its
    proposals, ``seed_epochs`` epochs train on the seed draws, then up to
    ``epochs - seed_epochs`` bootstrap epochs on fresh draws of the current kernel (exact
    Metropolis-Hastings), each a pass of Adam updates of the flow and the discriminator
    (eq. 23). The flow whose bootstrap accepted most is returned, frozen; the discriminator is
    dropped. A mixing check of chains from the NUTS seed chains' last states then chooses
    whether a share of the steps propose from a Gaussian mixture over the modes those found
    (:func:`seed_mixture`), or from their widened Gaussian fit (:func:`seed_fit`), instead.

    The losses never evaluate the target, so a mode that no seed draw visits cannot be learned:
    seed widely (more ``seed_chains``, a larger ``seed_radius``, or ``init_samples`` from a
    sampler that crosses between modes). Training warns when the kernel's bootstrap acceptance
    stays below 5% (it then barely moves), and when the mixing check still fails with the
    swap mixed in: the kernel then does not move between the modes the seed chains found, and
    a run's mode weights are off even where its own chains agree.

    :param rng_key: random key.
    :param model: a NumPyro model with continuous latent sites.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param potential_fn: alternatively, ``U(x)`` on flat 1-D points (with ``initial_position``).
    :param initial_position: a flat point where ``potential_fn`` is finite.
    :param init_samples: seed draws instead of the pilot NUTS run: a dict of the model's latent
        site values (as ``mcmc.get_samples()`` returns them) or flat unconstrained points
        ``(N, D)``.
    :param int num_layers: Henon layers ``K``.
    :param int hidden: width of each layer's ``V``.
    :param int discriminator_hidden: width of the discriminator's hidden layers.
    :param swap: start from the swap of the standardised position and the momentum (``True``,
        see :class:`~numpyro_extras.involutive.networks.InvolutionConfig`) or from the paper's
        random flow (``False``). By default the swap when it accepts at least half of its
        proposals from the seed draws, which it does on near-Gaussian posteriors.
    :param float swap_probability: the share of the sampler's steps that propose with the plain
        swap instead of the learned map (see
        :class:`~numpyro_extras.involutive.networks.InvolutionConfig`), skipping the choice of
        the mixing check (its check still warns). By default chosen by the mixing check: 0,
        0.75 with the seed modes' mixture or the plain swap, or 0.25 with the seed draws'
        widened Gaussian fit where the seed chains found one region.
    :param bool whiten: standardise with the Cholesky factor of the seed draws' covariance
        (``False``: their per-coordinate standard deviations).
    :param bool progress_bar: show the pilot run's and the training's progress.
    :param FlatModel flat_model: the model's flat potential
        (:func:`~numpyro_extras.flatten_model` of these arguments) when the caller has built it
        already, as :class:`~numpyro_extras.AiSampler` has; ``None`` builds it.
    :param settings: fields of :class:`TrainingSettings` (``epochs``, ``seed_epochs``,
        ``learning_rate``, ...).
    :return: :class:`~numpyro_extras.involutive.networks.InvolutiveProposal`, its
        ``history`` a :class:`TrainingHistory`.

    **Example:**

    .. code-block:: python

        params = nx.train_ai_sampler(jax.random.PRNGKey(0), model, (x, y), epochs=5)
        kernel = nx.AiSampler(model, params=params)
    """
    check_rng_key(rng_key)
    if model is not None:
        check_model(model)
    start = time.perf_counter()
    check_train_kwargs(settings)
    settings = TrainingSettings(**settings).validated()
    model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
    flat_key, seed_key, init_key, rng_key = jax.random.split(rng_key, 4)
    if flat_model is None:
        flat_model = flat_target(
            flat_key, model, model_args, model_kwargs, potential_fn, initial_position, "AiSampler"
        )
    # Compiled once here, the potential is not traced op by op wherever it runs outside a jit
    # (the pilot's checks of its starts and NUTS's set-up).
    potential_fn = quick_jit(flat_model.potential_fn)
    pilot, seed = _seed_draws(
        seed_key, flat_model, potential_fn, init_samples, settings, progress_bar
    )
    loc, scale = _standardization(seed, whiten)
    swap, start_rate = _chosen_start(init_key, swap, seed, loc, scale, potential_fn)
    settings = settings.for_start(swap)
    config = InvolutionConfig(flat_model.dimension, num_layers, hidden, discriminator_hidden, swap)
    seed_draws = None if pilot is None else pilot.draws.astype(flat_model.initial_position.dtype)
    fallback = None
    if seed_draws is not None and swap_probability is None:
        fallback = _fallback_for(seed_draws)
    proposal, training = _training_programs(
        init_key,
        config,
        settings,
        site_shapes(flat_model),
        potential_fn,
        seed,
        (loc, scale),
        None if fallback is None else fallback.mixture,
    )
    run = _run_epochs(rng_key, training, settings, start_rate, progress_bar)
    seed_evaluations = 0 if pilot is None else pilot.gradient_evaluations
    history = _history(run, start_rate, seed_evaluations, time.perf_counter() - start)
    proposal = proposal.replace(params=_best_flow(run), starts=run.positions, history=history)
    return _checked_proposal(
        proposal,
        seed_draws,
        potential_fn,
        rng_key,
        settings,
        swap_probability,
        fallback,
        training.bootstrap,
    )


def _seed_draws(rng_key, flat_model, potential_fn, init_samples, settings, progress_bar):
    """The seed draws: those of ``seed_chains`` pilot NUTS chains from dispersed starts, or
    ``init_samples``.

    :param rng_key: the pilot run's key.
    :param flat_model: the target, from :func:`~numpyro_extras.model.potential.flat_target`.
    :param potential_fn: its compiled potential.
    :param init_samples: the user's seed draws, or ``None`` for the pilot run.
    :param TrainingSettings settings: the pilot's settings (``seed_chains``, ...).
    :param bool progress_bar: show the pilot run's progress.
    :return: ``(pilot, seed)``: the pilot run (``None`` with ``init_samples``) and the seed
        draws as flat points ``(N, D)`` of the target's dtype.
    """
    dimension = flat_model.dimension
    dtype = flat_model.initial_position.dtype
    if init_samples is not None:
        return None, _flat_samples(init_samples, flat_model, dimension, dtype)
    pilot = dispersed_nuts_draws(
        rng_key,
        potential_fn,
        flat_model.initial_position,
        num_chains=settings.seed_chains,
        num_warmup=settings.seed_warmup,
        num_samples=settings.seed_samples,
        radius=settings.seed_radius,
        progress_bar=progress_bar,
    )
    return pilot, jnp.asarray(pilot.draws.reshape(-1, dimension), dtype)


def _chosen_start(rng_key, swap, seed, loc, scale, potential_fn):
    """The flow's start: ``swap`` as given, or by default the swap of position and momentum
    when it accepts at least ``SWAP_ACCEPTANCE`` of its proposals from the seed draws.

    :param rng_key: the networks' initialisation key; the test runs on a key folded from it.
    :param swap: the user's choice, or ``None``.
    :param seed: the seed draws ``(N, D)``, with their standardisation ``loc`` and ``scale``.
    :param potential_fn: the target's potential.
    :return: ``(swap, start_rate)``: the start, and the swap's acceptance on the seed draws
        (NaN when ``swap`` was given).
    """
    if swap is not None:
        return swap, math.nan
    # fold_in leaves the other keys, and so the training, as they are without the test.
    start_rate = _swap_acceptance(jax.random.fold_in(rng_key, 1), seed, loc, scale, potential_fn)
    return start_rate >= SWAP_ACCEPTANCE, start_rate


class _Training(NamedTuple):
    """The state a training starts from and the compiled programs its epochs run.

    :param networks: ``(flow, discriminator, flow optimiser, discriminator optimiser)``.
    :param positions: the bootstrap chains' starts, seed draws ``(num_chains, D)``.
    :param seed_standardized: the seed draws in standardised coordinates, shuffled and topped
        up to fill the seed epochs' batches.
    :param seed_shape: ``(batches, size)`` of a seed epoch's minibatches.
    :param kept_shape: the same for a bootstrap epoch.
    :param train: ``(networks, batches) -> (networks, losses)``, one pass of updates.
    :param batches: :func:`_extended_batches`, compiled.
    :param bootstrap: ``(flow_params, positions, rng_key, swap_probability) -> (positions,
        standardized, accept_rate, kept)``, the bootstrap chains and their draws, standardised
        too (``swap_probability`` 0: the learned map alone).
    """

    networks: tuple
    positions: jax.Array
    seed_standardized: jax.Array
    seed_shape: tuple
    kept_shape: tuple
    train: Callable
    batches: Callable
    bootstrap: Callable


def _training_programs(
    init_key, config, settings, sites, potential_fn, seed, standardization, mixture
):
    """The untrained proposal and networks, the bootstrap chains' starts and the compiled
    programs of the training's epochs.

    :param init_key: the networks' initialisation key.
    :param InvolutionConfig config: the flow's configuration, for the start chosen.
    :param TrainingSettings settings: the settings, for the start chosen.
    :param sites: the model's site shapes, kept on the proposal.
    :param potential_fn: the target's potential.
    :param seed: the seed draws ``(N, D)``.
    :param standardization: their ``(loc, scale)``.
    :param mixture: the independence proposal the mixing check may mix in, or ``None``: the
        bootstrap's program then runs that kernel too (at a ``swap_probability`` above 0).
    :return: ``(proposal, training)``: the untrained proposal and a :class:`_Training`.
    """
    loc, scale = standardization
    dimension = config.dimension
    init_optimizers, train = _trainer(config, settings)
    seed_shape, kept_shape, seed_rows = _batch_shapes(seed.shape[0], settings)

    @quick_jit
    def initial_networks(init_key, loc, scale, seed):
        flow_key, discriminator_key, chains_key = jax.random.split(init_key, 3)
        proposal = init_proposal(flow_key, config, loc, scale, sites=sites)
        zeros = jnp.zeros((2 * dimension,), jnp.float32)
        discriminator_params = discriminator_module(config).init(discriminator_key, zeros, zeros)[
            "params"
        ]
        networks = (
            proposal.params,
            discriminator_params,
            *init_optimizers(proposal.params, discriminator_params),
        )
        positions = seed[jax.random.choice(chains_key, seed.shape[0], (settings.num_chains,))]
        order = jax.random.permutation(jax.random.fold_in(chains_key, 1), seed.shape[0])
        seed_standardized = proposal.standardize(seed[jnp.resize(order, seed_rows)])
        return proposal, networks, seed_standardized, positions

    proposal, networks, seed_standardized, positions = initial_networks(init_key, loc, scale, seed)
    run_bootstrap = _bootstrap(proposal.replace(mixture=mixture), potential_fn, settings)

    @functools.partial(quick_jit, optimize=1)
    def bootstrap(flow_params, positions, rng_key, swap_probability):
        positions, kept, accept_rate = run_bootstrap(
            flow_params, positions, rng_key, swap_probability
        )
        standardized = proposal.standardize(kept.reshape(-1, dimension))
        return positions, standardized, accept_rate, kept

    # The updates and the flow's chains run for seconds: LLVM's optimisation pays there, and its
    # first level runs them as fast as XLA's default and compiles sooner.
    return proposal, _Training(
        networks,
        positions,
        seed_standardized,
        seed_shape,
        kept_shape,
        quick_jit(train, optimize=1),
        quick_jit(_extended_batches, static_argnums=(2, 3)),
        bootstrap,
    )


def _batch_shapes(num_seed, settings):
    """The minibatch shapes ``(batches, size)`` of a seed epoch and of a bootstrap epoch, and
    how many seed draws a seed epoch's batches hold.

    The batches are made apart from the updates, and of one shape for the seed draws and the
    bootstrap draws when they need as many, so that one compiled update serves every epoch;
    fewer seed draws than bootstrap draws are then topped up with repeats of some of them, so
    that one compiled batching serves too.

    :param int num_seed: the number of seed draws.
    :param TrainingSettings settings: the settings (``num_chains``, ``num_kept``,
        ``batch_size``).
    :return: ``(seed_shape, kept_shape, seed_rows)``.
    """
    num_kept_points = settings.num_chains * settings.num_kept
    seed_shape = _batch_shape(num_seed, settings.batch_size)
    kept_shape = _batch_shape(num_kept_points, settings.batch_size)
    seed_rows = num_seed
    if seed_shape[0] == kept_shape[0]:
        seed_shape = kept_shape = (kept_shape[0], max(seed_shape[1], kept_shape[1]))
        seed_rows = max(seed_rows, num_kept_points)
    return seed_shape, kept_shape, seed_rows


class _EpochsRun(NamedTuple):
    """What the training's epochs leave: the last ``networks``, the bootstrap chains' last
    ``positions``, per epoch ``outputs`` ``(acceptance, flow loss, discriminator loss)``, the
    flow whose bootstrap accepted most (``best_params``, ``best_rate``) and why training ended
    (``stopped``, as :class:`TrainingHistory` gives it)."""

    networks: tuple
    positions: jax.Array
    outputs: list
    best_params: object
    best_rate: float
    stopped: str


def _run_epochs(rng_key, training, settings, start_rate, progress_bar):
    """Run the training's epochs: ``seed_epochs`` on the seed draws, then bootstrap epochs,
    each on ``num_chains x num_kept`` fresh draws of the current kernel (exact
    Metropolis-Hastings, chains continuing from epoch to epoch from seed draws). An epoch
    shuffles its data into minibatches; per minibatch ``kernel_steps`` Adam updates of the
    flow, then ``discriminator_steps`` of the discriminator.

    When the untrained flow accepts at least ``start_acceptance``, on the seed draws
    (``start_rate``) or in the first bootstrap epoch, training ends before any update. It ends
    early when ``patience`` bootstrap epochs in a row bring no better acceptance than the best
    of them so far, or when the acceptance has fallen below half its best, at least 0.1, for
    ``DECLINE_PATIENCE`` epochs in a row (:func:`declined_epochs`).

    :param rng_key: the epochs' key, split once per epoch.
    :param _Training training: the networks and chains to start from, and the programs.
    :param TrainingSettings settings: the settings, for the start chosen.
    :param float start_rate: the swap start's acceptance on the seed draws (NaN when untested).
    :param bool progress_bar: show the epochs' progress.
    :return: :class:`_EpochsRun`.
    """
    train, batches, bootstrap = training.train, training.batches, training.bootstrap
    seed_standardized = training.seed_standardized
    # The flow kept is the one whose bootstrap accepted most (the reference code's checkpoint
    # choice): adversarial updates do not raise the acceptance monotonically, and the flow of the
    # last update has never been run.
    best = {"params": training.networks[0], "rate": -math.inf}
    progress = {"trained_rate": -math.inf, "stalled": 0, "declined": 0, "stopped": "epochs"}
    # The swap test has measured the start's acceptance at the seed draws: the stationary
    # acceptance that a first bootstrap epoch would estimate.
    if start_rate >= settings.start_acceptance:
        best["rate"] = start_rate
        progress["stopped"] = "start accepted"

    def run_epoch(carry, epoch):
        networks, positions, key = carry
        epoch_key, key = jax.random.split(key)
        bootstrap_key, train_key = jax.random.split(epoch_key)
        seed_epoch = epoch < settings.seed_epochs
        # The first epoch also runs the untrained flow, so that a good start (the swap) is a
        # candidate even when the seed epochs spoil it.
        if seed_epoch and epoch > 0:
            data = batches(train_key, seed_standardized, *training.seed_shape)
            networks, losses = train(networks, data)
            return (networks, positions, key), (np.nan, *losses)
        positions, kept, accept_rate, _ = bootstrap(networks[0], positions, bootstrap_key, 0.0)
        rate = float(accept_rate)
        if rate > best["rate"]:
            best.update(params=networks[0], rate=rate)
        progress["declined"] = declined_epochs(progress["declined"], rate, best["rate"])
        if epoch == 0 and rate >= settings.start_acceptance:
            progress["stopped"] = "start accepted"
            return (networks, positions, key), (accept_rate, np.nan, np.nan)
        if not seed_epoch:
            if rate > progress["trained_rate"]:
                progress.update(trained_rate=rate, stalled=0)
            else:
                progress["stalled"] += 1
        if seed_epoch:
            data = batches(train_key, seed_standardized, *training.seed_shape)
        else:
            data = batches(train_key, kept, *training.kept_shape)
        networks, losses = train(networks, data)
        return (networks, positions, key), (accept_rate, *losses)

    def epochs():
        for epoch in range(settings.epochs):
            if settings.patience and progress["stalled"] >= settings.patience:
                progress["stopped"] = "plateau"
            if progress["declined"] >= DECLINE_PATIENCE:
                progress["stopped"] = "declined"
            if progress["stopped"] != "epochs":
                return
            yield epoch, 1

    (networks, positions, _), outputs = run_chunks(
        run_epoch,
        (training.networks, training.positions, rng_key),
        epochs(),
        total=settings.epochs,
        description="training the Ai-sampler",
        progress_bar=progress_bar,
        postfix=lambda output: {"acceptance": f"{float(output[0]):.2f}"},
    )
    return _EpochsRun(
        networks, positions, outputs, best["params"], best["rate"], progress["stopped"]
    )


def _history(run, start_rate, seed_evaluations, seconds):
    """The :class:`TrainingHistory` of a training.

    :param _EpochsRun run: the epochs run; with none, the history holds ``start_rate``.
    :param float start_rate: the swap start's acceptance on the seed draws.
    :param int seed_evaluations: the pilot run's gradient evaluations.
    :param float seconds: the training's wall time.
    :return: :class:`TrainingHistory`.
    """
    columns = tuple(zip(*run.outputs, strict=True)) or ((start_rate,), (np.nan,), (np.nan,))
    accept_rates, kernel_losses, discriminator_losses = (
        tuple(float(value) for value in column) for column in columns
    )
    return TrainingHistory(
        accept_rates,
        kernel_losses,
        discriminator_losses,
        seed_evaluations,
        seconds,
        run.stopped,
    )


def _best_flow(run):
    """The flow parameters to keep: those whose bootstrap accepted most, or the last ones when
    no bootstrap ran; warns, at the caller of :func:`train_ai_sampler`, when the best accepts
    less than ``LOW_ACCEPTANCE``.

    :param _EpochsRun run: the epochs run.
    :return: the flow's parameters.
    """
    if not math.isfinite(run.best_rate):
        return run.networks[0]
    if run.best_rate < LOW_ACCEPTANCE:
        warnings.warn(
            f"The trained Ai-sampler accepts {run.best_rate:.1%} of its proposals in its best "
            "bootstrap epoch: it will barely move. Train longer (epochs), seed it with draws "
            "closer to the posterior (init_samples), or use another kernel.",
            stacklevel=3,
        )
    return run.best_params


def _checked_proposal(
    proposal, seed_draws, potential_fn, rng_key, settings, swap_probability, fallback, bootstrap
):
    """The trained proposal with the user's ``swap_probability``, after the mixing check from
    the pilot chains' last states (:func:`_mixing_checked`), which may mix in ``fallback``
    where ``swap_probability`` is not given, and warns at the caller of
    :func:`train_ai_sampler`. With ``init_samples`` (no pilot draws) there is no check.

    :param InvolutiveProposal proposal: the trained proposal.
    :param seed_draws: the pilot NUTS chains' draws ``(chains, draws, D)``, or ``None``.
    :param potential_fn: the target's potential.
    :param rng_key: the epochs' key; the check runs on a key folded from it.
    :param TrainingSettings settings: the training's settings.
    :param swap_probability: the user's share of plain swaps, or ``None``.
    :param _Fallback fallback: the independence proposal the check may mix in, or ``None``.
    :param bootstrap: the training's compiled bootstrap (:class:`_Training`), which runs the
        kernel with ``fallback`` mixed in too.
    :return: :class:`~numpyro_extras.involutive.networks.InvolutiveProposal`.
    """
    # The bootstrap's program runs the learned map itself, for at least as many chains as the
    # check starts.
    kernel_draws = None
    if settings.num_chains >= settings.seed_chains:
        kernel_draws = functools.partial(_bootstrap_check_draws, bootstrap, settings)
    if swap_probability is not None:
        proposal = _with_swap_probability(proposal, swap_probability)
        kernel_draws = None
    if seed_draws is None:
        return proposal
    return _mixing_checked(
        proposal,
        potential_fn,
        seed_draws,
        jax.random.fold_in(rng_key, 1),
        settings,
        fallback=fallback,
        kernel_draws=kernel_draws,
        stacklevel=4,
    )


def _bootstrap_check_draws(bootstrap, settings, flow_params, starts, rng_key, swap_probability):
    """The mixing check's draws, ``(len(starts), MIXING_CHECK_STEPS, D)``, from the bootstrap's
    compiled chains: ``num_chains`` chains from ``starts`` (tiled) run blocks of ``burn_in``
    steps, then ``num_kept`` kept ones, and the chains started at ``starts`` themselves are
    returned.

    :param bootstrap: the training's compiled bootstrap (:class:`_Training`).
    :param TrainingSettings settings: the training's settings.
    :param flow_params: the learned map's parameters.
    :param starts: the check chains' starts ``(chains, D)``.
    :param rng_key: the check's key, split once per block.
    :param float swap_probability: the share of steps proposing from the bootstrap's mixture
        (0: the learned map alone).
    :return: the draws, as NumPy float64.
    """
    positions = jnp.resize(starts, (settings.num_chains, starts.shape[1]))
    blocks = []
    for block_key in jax.random.split(rng_key, -(-MIXING_CHECK_STEPS // settings.num_kept)):
        positions, _, _, kept = bootstrap(flow_params, positions, block_key, swap_probability)
        blocks.append(np.asarray(kept[:, : len(starts)], dtype=np.float64))
    return np.swapaxes(np.concatenate(blocks)[:MIXING_CHECK_STEPS], 0, 1)


def declined_epochs(count: int, rate: float, best_rate: float) -> int:
    """The number of bootstrap epochs in a row whose acceptance lies below ``DECLINE_FRACTION``
    of the best so far, once the best has reached ``DECLINE_MIN_BEST``; training stops when it
    reaches ``DECLINE_PATIENCE``.

    :param int count: the count before this epoch.
    :param float rate: this epoch's bootstrap acceptance.
    :param float best_rate: the best acceptance so far, this epoch's included.
    :return: the count after this epoch (0 when this epoch did not fall so low).

    **Example:**

    .. doctest::

        >>> from numpyro_extras.involutive.training import declined_epochs
        >>> declined_epochs(2, 0.1, 0.3), declined_epochs(2, 0.2, 0.3)
        (3, 0)
    """
    fallen = best_rate >= DECLINE_MIN_BEST and rate < DECLINE_FRACTION * best_rate
    return count + 1 if fallen else 0


def seed_mixture(draws) -> MixtureBase | None:
    """A Gaussian mixture with one component per mode the seed chains found.

    The chains are grouped greedily: a chain joins the first group whose draws put its mean
    within ``SAME_MODE_DISTANCE`` standard deviations (Mahalanobis) of theirs, else starts a
    group. Each group gives a component with its draws' mean and their covariance widened
    ``MIXTURE_WIDENING`` times; the weights are equal, since how many chains found a mode says
    where they started, not how much mass it holds.

    :param draws: the seed chains' draws, ``(chains, draws, D)``.
    :return: :class:`~numpyro_extras.MixtureBase`, or ``None`` when every chain found the same
        mode.

    **Example:**

    .. code-block:: python

        mixture = seed_mixture(pilot.draws)  # pilot = dispersed_nuts_draws(...)
    """
    draws = np.asarray(draws, dtype=np.float64)
    dimension = draws.shape[-1]
    groups = []
    for chain, chain_draws in enumerate(draws):
        chain_mean = chain_draws.mean(0)
        for group in groups:
            mean, covariance = _mean_and_covariance(draws[group].reshape(-1, dimension))
            offset = chain_mean - mean
            if offset @ np.linalg.solve(covariance, offset) < SAME_MODE_DISTANCE**2:
                group.append(chain)
                break
        else:
            groups.append([chain])
    if len(groups) < 2:
        return None
    moments = [_mean_and_covariance(draws[group].reshape(-1, dimension)) for group in groups]
    locs = np.stack([mean for mean, _ in moments])
    trils = np.stack([MIXTURE_WIDENING * np.linalg.cholesky(cov) for _, cov in moments])
    log_weights = np.full(len(groups), -math.log(len(groups)))
    return MixtureBase(
        jnp.asarray(locs), jnp.asarray(trils), jnp.asarray(log_weights), jnp.zeros(())
    )


def seed_fit(draws) -> MixtureBase:
    """One Gaussian with the mean of all the seed chains' draws and their covariance, its scale
    widened ``1 + sqrt(SEED_FIT_WIDENING / D)`` times in ``D`` dimensions: the independence
    proposal mixed into the kernel of a posterior whose seed chains found one region.

    :param draws: the seed chains' draws, ``(chains, draws, D)``.
    :return: :class:`~numpyro_extras.MixtureBase` of one component.

    **Example:**

    .. code-block:: python

        fit = seed_fit(pilot.draws)
    """
    draws = np.asarray(draws, dtype=np.float64)
    mean, covariance = _mean_and_covariance(draws.reshape(-1, draws.shape[-1]))
    widening = 1.0 + math.sqrt(SEED_FIT_WIDENING / draws.shape[-1])
    return MixtureBase(
        jnp.asarray(mean[None]),
        jnp.asarray(widening * np.linalg.cholesky(covariance)[None]),
        jnp.zeros(1),
        jnp.zeros(()),
    )


def _mean_and_covariance(points):
    """The mean and covariance of ``points`` ``(N, D)``, with a small ridge so that a chain
    that barely moved still gives an invertible covariance."""
    mean = points.mean(0)
    covariance = np.atleast_2d(np.cov(points, rowvar=False))
    ridge = 1e-6 * max(float(np.trace(covariance)) / covariance.shape[0], 1e-12)
    return mean, covariance + ridge * np.eye(covariance.shape[0])


def _check_draws(proposal, potential_fn, starts, rng_key, settings):
    """Draws ``(chains, MIXING_CHECK_STEPS, D)`` of ``proposal``'s kernel from ``starts``."""
    check_settings = settings._replace(burn_in=0, num_kept=MIXING_CHECK_STEPS)
    run = quick_jit(_bootstrap(proposal, potential_fn, check_settings), optimize=1)
    _, kept, _ = run(proposal.params, starts, rng_key)
    return np.swapaxes(np.asarray(kept, dtype=np.float64), 0, 1)


def _mixing_rhat(draws):
    """The largest split R-hat over coordinates (NaN when a chain never moved)."""
    return float(np.max(split_gelman_rubin(draws)))


def _mode_weight_ess(draws, mixture):
    """The smallest ESS (NumPyro's, over the chains) of the indicators of the modes: the
    mixture's components, a draw belonging to the one nearest in density. It bounds how well a
    run's mode weights are known: chains that switch often but visit some modes in the wrong
    proportions (an involution pairing some modes only) have a small one."""
    log_densities = quick_jit(jax.vmap(jax.vmap(mixture.component_log_densities)))(
        jnp.asarray(draws, mixture.component_locs.dtype)
    )
    labels = np.argmax(np.asarray(log_densities), axis=-1)
    num_modes = log_densities.shape[-1]
    indicators = (labels[..., None] == np.arange(num_modes)).astype(np.float64)
    ess = np.asarray(effective_sample_size(indicators))
    # A mode that no draw of any chain leaves or enters has no variance and no ESS.
    return float(np.min(np.nan_to_num(ess, nan=0.0)))


class _Fallback(NamedTuple):
    """The independence proposal the mixing check may mix into the learned kernel: a Gaussian
    per mode the seed chains found (``several_modes``, :func:`seed_mixture`), or their widened
    Gaussian fit (:func:`seed_fit`)."""

    mixture: MixtureBase
    several_modes: bool


def _fallback_for(seed_draws) -> _Fallback:
    """The :class:`_Fallback` of the seed chains' draws ``(chains, draws, D)``, in their dtype."""
    modes = seed_mixture(seed_draws)
    mixture = modes if modes is not None else seed_fit(seed_draws)
    mixture = jax.tree.map(lambda leaf: leaf.astype(seed_draws.dtype), mixture)
    return _Fallback(mixture, modes is not None)


def _mixing_checked(
    proposal,
    potential_fn,
    seed_draws,
    rng_key,
    settings,
    fallback=None,
    kernel_draws=None,
    stacklevel=3,
):
    """``proposal``, or it with independence proposals mixed in, after the mixing check: chains
    of the kernel started at the NUTS seed chains' last states (each in the region, or mode, its
    seed chain found) run ``MIXING_CHECK_STEPS`` steps.

    Where the seed chains found several modes, ``FALLBACK_SWAP_PROBABILITY`` of the steps may
    propose from the mixture of those modes (:func:`seed_mixture`); the kernel kept is the one
    whose check chains agree (split R-hat at most ``MAX_MIXING_RHAT``) and know the modes'
    weights best (the larger ESS of the mode indicators). Where they found one,
    ``SINGLE_REGION_SWAP_PROBABILITY`` of the steps propose from the seed draws' widened
    Gaussian fit (:func:`seed_fit`); when the learned map's chains disagree there,
    ``FALLBACK_SWAP_PROBABILITY`` of them, if that kernel's chains disagree less.
    When the chains of the kernel kept still disagree, warn: the mode weights of a run would be
    off even where every chain agrees with the others.

    :param seed_draws: the seed chains' draws ``(chains, draws, D)``.
    :param _Fallback fallback: the independence proposal to consider mixing in (``None``: only
        check and warn).
    :param kernel_draws: ``(flow_params, starts, rng_key, swap_probability) -> draws`` of
        ``proposal``'s kernel with ``swap_probability`` of its steps from ``fallback``, as
        :func:`_check_draws` gives them, from a program already compiled (the training's
        bootstrap chains); ``None`` compiles one per kernel checked.
    :param int stacklevel: the warning's, counted from this function (3: its caller's caller).
    """
    starts = jnp.asarray(seed_draws[:, -1, :])

    def check_draws(candidate, swap_probability):
        if kernel_draws is None:
            return _check_draws(candidate, potential_fn, starts, rng_key, settings)
        return kernel_draws(candidate.params, starts, rng_key, swap_probability)

    draws = check_draws(proposal, 0.0)
    rhat = _mixing_rhat(draws)
    if fallback is not None:
        mixture = fallback.mixture
        agree = rhat <= MAX_MIXING_RHAT
        if not fallback.several_modes and agree:
            # Chains that agree under the map still agree with a quarter of their steps
            # proposed independently of the state: no check of that kernel is needed.
            proposal = _with_swap_probability(
                proposal.replace(mixture=mixture), SINGLE_REGION_SWAP_PROBABILITY
            )
        else:
            mixed = _with_swap_probability(
                proposal.replace(mixture=mixture), FALLBACK_SWAP_PROBABILITY
            )
            mixed_draws = check_draws(mixed, FALLBACK_SWAP_PROBABILITY)
            mixed_rhat = _mixing_rhat(mixed_draws)
            if agree and mixed_rhat <= MAX_MIXING_RHAT:
                better = _mode_weight_ess(mixed_draws, mixture) > _mode_weight_ess(draws, mixture)
            else:
                better = mixed_rhat < rhat or not math.isfinite(rhat)
            if better:
                proposal, rhat = mixed, mixed_rhat
    if not rhat <= MAX_MIXING_RHAT:
        warnings.warn(
            f"The trained Ai-sampler does not move between the regions its {starts.shape[0]} "
            f"NUTS seed chains found: chains started at their last states still disagree after "
            f"{MIXING_CHECK_STEPS} steps (R-hat {rhat:.2f} > {MAX_MIXING_RHAT}), with "
            "independence proposals from a fit of the seed draws mixed in, so the mode weights "
            "of its runs will be off, even where their chains agree. Train longer (epochs), or "
            "use a kernel that crosses between modes (nx.ReplicaExchange).",
            stacklevel=stacklevel,
        )
    return proposal


def _with_swap_probability(proposal, swap_probability):
    config = dataclasses.replace(proposal.config, swap_probability=swap_probability)
    return proposal.replace(config=config)


def _flat_samples(init_samples, flat_model, dimension, dtype):
    """``init_samples`` as flat unconstrained points ``(N, D)``."""
    if isinstance(init_samples, dict):
        if not flat_model.latent_sites:
            raise ValueError("init_samples as site values need a model; give flat points.")
        missing = [name for name in flat_model.latent_sites if name not in init_samples]
        if missing:
            raise ValueError(f"init_samples lack the latent sites {missing}.")
        points = jax.vmap(flat_model.ravel_fn)(
            {name: jnp.asarray(init_samples[name]) for name in flat_model.latent_sites}
        )
    else:
        points = jnp.asarray(init_samples)
    if points.ndim != 2 or points.shape[1] != dimension:
        raise ValueError(
            f"init_samples must be {dimension}-dimensional flat points (N, {dimension}), got "
            f"shape {tuple(points.shape)}."
        )
    points = points[jnp.all(jnp.isfinite(points), axis=1)]
    if points.shape[0] < 2:
        raise ValueError("init_samples need at least two finite points.")
    return points.astype(dtype)


def _standardization(seed, whiten):
    """``(loc, scale)`` from the seed draws: their mean, and the Cholesky factor of their
    covariance (``whiten``) or their standard deviations.

    A coordinate that never moves in the seed keeps unit scale rather than dividing by zero. The
    covariance falls back to its diagonal when it is not positive definite (fewer seed draws than
    dimensions, or perfectly correlated coordinates).
    """
    loc, std, cholesky = _seed_moments(seed)
    if not whiten or seed.shape[0] <= seed.shape[1]:
        return loc, std
    if not bool(jnp.all(jnp.isfinite(cholesky))) or float(jnp.min(jnp.diag(cholesky))) <= 1e-3:
        return loc, std
    return loc, std[:, None] * cholesky


@quick_jit
def _seed_moments(seed):
    """The seed draws' mean, standard deviations (unit where a coordinate never moves) and the
    Cholesky factor of their correlation matrix, in one compiled call."""
    loc = jnp.mean(seed, 0)
    std = jnp.std(seed, 0)
    std = jnp.where(std > 0, std, 1.0)
    centred = (seed - loc) / std
    correlation = centred.T @ centred / seed.shape[0]
    return loc, std, jnp.linalg.cholesky(correlation)


def _swap_acceptance(rng_key, seed, loc, scale, potential_fn, max_points=1000):
    """The mean Metropolis-Hastings acceptance of the swap start ``x' = loc + scale v``,
    ``v' = scale^-1 (x - loc)`` from (up to ``max_points``) seed draws ``x`` with fresh
    ``v ~ N(0, I)``: the acceptance of an independence proposal from the Gaussian fit."""

    @quick_jit
    def acceptance(rng_key, seed, loc, scale):
        subset_key, momentum_key = jax.random.split(rng_key)
        if seed.shape[0] > max_points:
            seed = seed[jax.random.choice(subset_key, seed.shape[0], (max_points,), replace=False)]
        template = init_proposal(
            jax.random.PRNGKey(0),
            InvolutionConfig(seed.shape[1], num_layers=1, hidden=1),
            loc,
            scale,
        )
        momentum = jax.random.normal(momentum_key, seed.shape, seed.dtype)
        proposed = template.unstandardize(momentum)
        energy = jax.vmap(potential_fn)
        log_ratio = (
            energy(seed)
            - energy(proposed)
            + 0.5 * jnp.sum(momentum**2, -1)
            - 0.5 * jnp.sum(template.standardize(seed) ** 2, -1)
        )
        log_ratio = jnp.where(jnp.isfinite(log_ratio), log_ratio, -jnp.inf)
        return jnp.mean(jnp.exp(jnp.minimum(log_ratio, 0.0)))

    return float(acceptance(rng_key, seed, loc, scale))
