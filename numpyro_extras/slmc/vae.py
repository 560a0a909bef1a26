"""The VAE of self-learning Monte Carlo: a flax module, its pure apply functions, the
:class:`VAEProposal` container and the proposal densities on the model's flat unconstrained space.

The network follows Ichikawa et al., "Toward unlimited self-learning MCMC with parallel adaptive
annealing" (App. F.3): a GELU encoder with two linear heads (the mean ``mu(x)`` and
``log sigma^2(x)`` of ``r(z | x) = N(z; mu(x), diag sigma^2(x))``) and a GELU decoder with a
linear output ``Dec(z)``, trained on standardised data with the loss of eq. 2 (sum of squared
errors plus ``beta_VAE`` times the KL divergence to ``N(0, I)``).

Two proposals are built from it:

- the **extended** one, ``q(x, z) = N(z; 0, I) N(x; Dec(z), s^2 I)`` with ``s^2 = beta_VAE / 2``
  (the decoder variance that makes eq. 2 an ELBO), whose importance weight against the extended
  target ``p(x) r(z | x)`` is exact for any network;
- the **isometric** one, ``x = Dec(z)``, with the density ``Gamma(x)`` of eq. 3, exact only for a
  perfectly isometric VAE (eq. 10-12).

Densities are on the unconstrained space, so the standardisation ``x = loc + scale * u`` adds its
log-Jacobian ``-sum(log scale)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.scipy.stats import norm

from numpyro_extras.shell.validation import check_count, check_real

__all__ = [
    "VAEConfig",
    "VAEProposal",
    "Encoder",
    "Decoder",
    "gelu_trunk",
    "init_proposal",
    "encode",
    "decode",
    "standardize",
    "sample_extended",
    "sample_isometric",
    "log_prior_latent",
    "log_proposal_density",
    "log_encoder_density",
    "isometric_log_density",
    "vae_loss",
    "latent_information",
    "train_vae",
    "isometry_factors",
    "PAPER_ENCODER_SIZES",
    "PAPER_DECODER_SIZES",
    "LOG_VAR_BOUNDS",
]

# App. F.3: the same network for every experiment of the paper.
PAPER_ENCODER_SIZES = (256, 256, 128, 128, 64, 32)
PAPER_DECODER_SIZES = (32, 64, 128, 128, 256, 256)
# log sigma^2 is clipped so that a collapsed or exploding head cannot give inf or 0 variances.
LOG_VAR_BOUNDS = (-30.0, 10.0)
LOG_2PI = math.log(2 * math.pi)
# Added to the data's correlation matrix before its Cholesky factor is taken.
WHITENING_RIDGE = 1e-6


@dataclasses.dataclass(frozen=True)
class VAEConfig:
    """The architecture and loss scaling of the VAE (static: hashable, not a pytree leaf).

    :param int dimension: ``D``, the number of unconstrained dimensions of the target.
    :param int latent_dim: ``M``; the paper sets ``M = D``.
    :param tuple encoder_sizes: widths of the encoder's GELU layers (before the two heads).
    :param tuple decoder_sizes: widths of the decoder's GELU layers (before the linear output).
    :param float beta_vae: the weight of the KL term of eq. 2 (Table 8: 1/120 for the Gaussian
        mixtures), with the SSE summed over ``D`` and the KL over ``M``.
    :param float decoder_scale: ``s``, the decoder noise of the extended proposal in standardised
        units; by default ``sqrt(beta_vae / 2)``, the variance eq. 2 implies, or 1 (the data's
        scale) as the start of a learned scale.
    :param bool learn_decoder_scale: fit one decoder noise scale ``s_d`` per coordinate: the loss
        is the negative ELBO of ``N(x; Dec(z), diag s^2)`` at its maximum-likelihood ``s_d^2``,
        the mean squared reconstruction error of the batch (the calibrated decoder of Rybkin et
        al., 2021), and the trained proposal keeps that error over its training data, rather
        than eq. 2's fixed ``s^2 = beta_VAE / 2``.
    :param bool whiten: standardise the data by the Cholesky factor of its covariance rather
        than per coordinate, so that the network sees decorrelated coordinates.
    """

    dimension: int
    latent_dim: int
    encoder_sizes: tuple[int, ...] = PAPER_ENCODER_SIZES
    decoder_sizes: tuple[int, ...] = PAPER_DECODER_SIZES
    beta_vae: float = 1.0 / 120.0
    decoder_scale: float | None = None
    learn_decoder_scale: bool = False
    whiten: bool = False

    def __post_init__(self):
        check_count("dimension", self.dimension)
        check_count("latent_dim", self.latent_dim)
        for name in ("encoder_sizes", "decoder_sizes"):
            sizes = tuple(getattr(self, name))
            for size in sizes:
                check_count(f"every entry of {name}", size)
            object.__setattr__(self, name, sizes)
        check_real("beta_vae", self.beta_vae, "a positive number", low=0.0)
        scale = self.decoder_scale
        if scale is None:
            # A learned scale starts at the data's own (unit in standardised coordinates): the
            # latents then take on only what the decoder noise cannot explain.
            scale = 1.0 if self.learn_decoder_scale else math.sqrt(self.beta_vae / 2)
        object.__setattr__(
            self, "decoder_scale", check_real("decoder_scale", scale, "a positive number", low=0.0)
        )


def gelu_trunk(hidden, sizes):
    """Dense layers of the given widths, each followed by GELU (App. F.3)."""
    for size in sizes:
        hidden = nn.gelu(nn.Dense(size)(hidden))
    return hidden


class Encoder(nn.Module):
    """GELU trunk with two linear heads, ``mu(u)`` and ``log sigma^2(u)`` (clipped)."""

    sizes: tuple[int, ...]
    latent_dim: int

    @nn.compact
    def __call__(self, u):
        hidden = gelu_trunk(u, self.sizes)
        mean = nn.Dense(self.latent_dim, name="mean")(hidden)
        log_var = nn.Dense(self.latent_dim, name="log_var")(hidden)
        return mean, jnp.clip(log_var, *LOG_VAR_BOUNDS)


class Decoder(nn.Module):
    """GELU trunk with a linear output ``Dec(z)`` (a GELU output could not reach negative
    coordinates below about -0.17)."""

    sizes: tuple[int, ...]
    dimension: int

    @nn.compact
    def __call__(self, z):
        hidden = gelu_trunk(z, self.sizes)
        return nn.Dense(self.dimension, name="output")(hidden)


@struct.dataclass
class VAEProposal:
    """A trained VAE proposal: a pytree of its parameters and standardisation, with its
    configuration and the model's sites as static data.

    :param params: ``{"encoder": ..., "decoder": ...}`` flax parameters.
    :param loc: standardisation offset, shape ``(D,)``.
    :param scale: standardisation scale, shape ``(D,)`` (``x = loc + scale * u``).
    :param VAEConfig config: architecture and loss scaling.
    :param tuple sites: ``((name, unconstrained shape), ...)`` of the model it was trained on
        (empty for a ``potential_fn``).
    :param history: the :class:`~numpyro_extras.slmc.annealing.AnnealingHistory` of its
        training, or ``None``.

    **Example:**

    .. code-block:: python

        proposal.history.chosen_model, proposal.history.final_accept_rates
        kernel = nx.VAESLMC(model, proposal=proposal)
    """

    params: Any
    loc: jax.Array
    scale: jax.Array
    config: VAEConfig = struct.field(pytree_node=False)
    sites: tuple = struct.field(pytree_node=False, default=())
    history: Any = struct.field(pytree_node=False, default=None)

    @property
    def dimension(self) -> int:
        return self.config.dimension

    @property
    def latent_dim(self) -> int:
        return self.config.latent_dim


def _encoder(config: VAEConfig) -> Encoder:
    return Encoder(config.encoder_sizes, config.latent_dim)


def _decoder(config: VAEConfig) -> Decoder:
    return Decoder(config.decoder_sizes, config.dimension)


def init_proposal(rng_key, config: VAEConfig, loc=None, scale=None, sites=()) -> VAEProposal:
    """A VAE proposal with freshly initialised (untrained) parameters.

    :param rng_key: key for the initialisation.
    :param VAEConfig config: the architecture.
    :param loc: standardisation offset ``(D,)`` (zeros by default).
    :param scale: standardisation scale ``(D,)`` (ones by default).
    :param tuple sites: the model's ``((name, shape), ...)``.
    :return: :class:`VAEProposal`.

    **Example:**

    .. code-block:: python

        proposal = init_proposal(jax.random.PRNGKey(0), VAEConfig(dimension=2, latent_dim=2))
    """
    encoder_key, decoder_key = jax.random.split(rng_key)
    dimension, latent_dim = config.dimension, config.latent_dim
    params = {
        "encoder": _encoder(config).init(encoder_key, jnp.zeros((dimension,)))["params"],
        "decoder": _decoder(config).init(decoder_key, jnp.zeros((latent_dim,)))["params"],
    }
    if config.learn_decoder_scale:
        params["decoder_log_var"] = jnp.full(
            (dimension,), 2 * math.log(config.decoder_scale), jnp.float32
        )
    loc = jnp.zeros(dimension) if loc is None else jnp.asarray(loc)
    if scale is None:
        scale = jnp.eye(dimension) if config.whiten else jnp.ones(dimension)
    scale = jnp.asarray(scale)
    return VAEProposal(params, loc, scale, config, tuple(sites))


def standardize(proposal: VAEProposal, x):
    """``u = (x - loc) / scale``, the coordinates the network sees (``u = L^-1 (x - loc)`` with
    a whitening ``scale = L``, lower triangular)."""
    centred = x - proposal.loc
    if proposal.scale.ndim == 1:
        return centred / proposal.scale
    flat = jnp.reshape(centred, (-1, proposal.dimension)).T
    solved = jax.scipy.linalg.solve_triangular(proposal.scale, flat, lower=True)
    return jnp.reshape(solved.T, centred.shape)


def _unstandardize_offset(proposal: VAEProposal, u):
    """``scale * u`` (``L u`` with a whitening ``scale``)."""
    if proposal.scale.ndim == 1:
        return proposal.scale * u
    return u @ proposal.scale.T


def encode(proposal: VAEProposal, x):
    """The encoder at a flat point ``x``: ``(mu(x), log sigma^2(x))``, each ``(..., M)``."""
    return _encoder(proposal.config).apply(
        {"params": proposal.params["encoder"]}, standardize(proposal, x)
    )


def decode(proposal: VAEProposal, z):
    """The decoder mean in the flat unconstrained space: ``loc + scale * Dec(z)``."""
    u = _decoder(proposal.config).apply({"params": proposal.params["decoder"]}, z)
    return proposal.loc + _unstandardize_offset(proposal, u)


def _decoder_log_var(params, config: VAEConfig):
    """``log s_d^2`` per coordinate, learned or fixed."""
    if config.learn_decoder_scale:
        return jnp.clip(params["decoder_log_var"], *LOG_VAR_BOUNDS)
    return jnp.full((config.dimension,), 2 * math.log(config.decoder_scale))


def _log_jacobian(proposal: VAEProposal):
    scale = proposal.scale
    return -jnp.sum(jnp.log(scale if scale.ndim == 1 else jnp.diagonal(scale)))


def log_prior_latent(z):
    """``log N(z; 0, I)`` over the last axis."""
    return jnp.sum(norm.logpdf(z), -1)


def _log_normal(value, mean, log_var):
    # In the log variance the networks output: exp(-log_var) stays finite where a scale
    # exp(log_var / 2) would underflow to 0.
    return -0.5 * jnp.sum((value - mean) ** 2 * jnp.exp(-log_var) + log_var + LOG_2PI, -1)


def sample_extended(rng_key, proposal: VAEProposal, num_latents=None):
    """One draw of the extended proposal: ``z ~ N(0, I_M)``, ``x ~ N(Dec(z), s^2 I)`` in
    standardised units; with ``num_latents = K``, also ``K - 1`` latents ``z_k ~ r(. | x)`` from
    the encoder (the proposal of the importance-weighted extended target, whose density is
    symmetric in the ``K`` latents).

    :param rng_key: key.
    :param proposal: the VAE proposal.
    :param int num_latents: ``None`` for one latent of shape ``(M,)``, else ``K`` latents.
    :return: ``(x, z)`` of shapes ``(D,)`` and ``(M,)``, or ``(K, M)`` with ``num_latents``.
    """
    latent_key, noise_key, encoder_key = jax.random.split(rng_key, 3)
    config = proposal.config
    z = jax.random.normal(latent_key, (config.latent_dim,), dtype=proposal.loc.dtype)
    noise_scale = jnp.exp(0.5 * _decoder_log_var(proposal.params, config)).astype(z.dtype)
    noise = noise_scale * jax.random.normal(noise_key, (config.dimension,), z.dtype)
    x = decode(proposal, z) + _unstandardize_offset(proposal, noise)
    if num_latents is None:
        return x, z
    mean, log_var = encode(proposal, x)
    encoder_noise = jax.random.normal(encoder_key, (num_latents - 1, config.latent_dim), z.dtype)
    others = (mean + jnp.exp(0.5 * log_var) * encoder_noise).astype(z.dtype)
    return x, jnp.concatenate([z[None], others])


def sample_isometric(rng_key, proposal: VAEProposal):
    """One draw of the paper's proposal: ``x = Dec(z)``, ``z ~ N(0, I_M)`` (eq. 6, no decoder
    noise: ``Gamma`` is the density of this push-forward).

    :return: ``(x, z)``.
    """
    z = jax.random.normal(rng_key, (proposal.config.latent_dim,), dtype=proposal.loc.dtype)
    return decode(proposal, z), z


def log_proposal_density(proposal: VAEProposal, x, z):
    """``log q(x, z) = log N(z; 0, I) + log N(x; Dec(z), s^2 I)`` on the flat space (the
    standardisation's Jacobian included).

    :param x: flat point ``(D,)``.
    :param z: latent ``(M,)``.
    :return: scalar.
    """
    config = proposal.config
    u = standardize(proposal, x)
    mean = _decoder(config).apply({"params": proposal.params["decoder"]}, z)
    log_var = _decoder_log_var(proposal.params, config)
    return log_prior_latent(z) + _log_normal(u, mean, log_var) + _log_jacobian(proposal)


def log_encoder_density(proposal: VAEProposal, x, z):
    """``log r(z | x) = log N(z; mu(x), diag sigma^2(x))``, the extended target's conditional.

    :return: scalar.
    """
    mean, log_var = encode(proposal, x)
    return _log_normal(z, mean, log_var)


def isometric_log_density(proposal: VAEProposal, x):
    """``log p_theta(x)`` of eq. 12: ``log Gamma(x)`` (eq. 3,
    ``log N(mu(x); 0, I) + sum_m log sigma_m(x)``) plus ``-(M/2) log(beta_VAE / 2)`` and the
    standardisation's Jacobian: the density of ``Dec#N(0, I)`` when the VAE is isometric.

    :param x: flat point ``(D,)``.
    :return: scalar.
    """
    mean, log_var = encode(proposal, x)
    config = proposal.config
    log_gamma = log_prior_latent(mean) + 0.5 * jnp.sum(log_var, -1)
    return (
        log_gamma
        - 0.5 * config.latent_dim * math.log(config.beta_vae / 2)
        + _log_jacobian(proposal)
    )


def _mean_squared_error_log(u, reconstruction):
    """``log`` of the mean squared error per coordinate over a batch ``(B, D)``: the
    maximum-likelihood ``log s_d^2`` of the decoder noise."""
    return jnp.clip(jnp.log(jnp.mean((u - reconstruction) ** 2, 0)), *LOG_VAR_BOUNDS)


def _reconstruct(params, config: VAEConfig, u, rng_key):
    """``(Dec(mu + sigma eps), mu, log sigma^2)`` of a batch, one reparameterised draw each."""
    mean, log_var = _encoder(config).apply({"params": params["encoder"]}, u)
    noise = jax.random.normal(rng_key, mean.shape, mean.dtype)
    z = mean + jnp.exp(0.5 * log_var) * noise
    return _decoder(config).apply({"params": params["decoder"]}, z), mean, log_var


def _kl_from_prior(mean, log_var):
    """``KL(N(mean, diag exp(log_var)) || N(0, I))`` over the last axis."""
    return 0.5 * jnp.sum(mean**2 + jnp.exp(log_var) - log_var - 1.0, -1)


def latent_information(proposal: VAEProposal, x):
    """How much the latents say about the points ``x`` ``(N, D)``: the mean over them of
    ``KL(r(z | x) || N(0, I))``, in nats (the KL term of eq. 2). Near 0 the VAE has collapsed
    (Bowman et al. 2016): the encoder returns the prior wherever it is, the decoder one point,
    and the proposal is a single Gaussian of the decoder noise's width.

    **Example:**

    .. code-block:: python

        latent_information(proposal, draws)  # ~0: the latents are unused
    """
    mean, log_var = encode(proposal, x)
    return jnp.mean(_kl_from_prior(mean, log_var))


def vae_loss(params, proposal: VAEProposal, u, rng_key, fixed_noise=False):
    """The loss of eq. 2 on a batch of standardised points ``u`` ``(B, D)``: the mean over the
    batch of ``||u - Dec(mu + sigma eps)||^2 + beta_VAE KL(r(z | u) || N(0, I))``, one
    reparameterised sample per point. With a learned decoder scale, ``beta_VAE`` times the
    negative ELBO at the batch's own noise ``s_d^2`` (its mean squared error per coordinate):
    ``beta_VAE (sum_d log(s_d^2) / 2 + mean KL)`` up to a constant.

    :param fixed_noise: with a learned decoder scale, the loss of eq. 2 (its fixed noise)
        all the same (may be traced).
    :return: scalar loss.
    """
    config = proposal.config
    reconstruction, mean, log_var = _reconstruct(params, config, u, rng_key)
    kl = _kl_from_prior(mean, log_var)
    squared_error = jnp.sum((u - reconstruction) ** 2, -1)
    fixed_noise_loss = jnp.mean(squared_error + config.beta_vae * kl)
    if not config.learn_decoder_scale:
        return fixed_noise_loss
    # The negative ELBO at the batch's maximum-likelihood noise s_d^2 (its mean squared error),
    # up to a constant and scaled by beta_VAE like eq. 2. Profiling the noise out rather than
    # learning it by Adam lets it follow the decoder from the first step on.
    noise_log_var = _mean_squared_error_log(u, reconstruction)
    learned_noise_loss = config.beta_vae * (0.5 * jnp.sum(noise_log_var) + jnp.mean(kl))
    if fixed_noise is False:
        return learned_noise_loss
    return jnp.where(fixed_noise, fixed_noise_loss, learned_noise_loss)


def whitening_factor(data, scale):
    """The Cholesky factor ``L`` of the data's covariance, so that ``L^-1 (x - mean)`` has unit
    covariance; computed on the per-coordinate standardised data, with a small ridge, so that a
    near-degenerate direction stays invertible.

    :param data: points ``(N, D)``.
    :param scale: the per-coordinate standard deviations ``(D,)`` (1 where a coordinate is
        constant).
    :return: lower-triangular ``(D, D)``.
    """
    standardised = (data - jnp.mean(data, 0)) / scale
    correlation = jnp.cov(standardised, rowvar=False).reshape(scale.shape * 2)
    ridge = WHITENING_RIDGE * jnp.eye(scale.shape[0], dtype=correlation.dtype)
    return scale[:, None] * jnp.linalg.cholesky(correlation + ridge)


def _standardized(proposal: VAEProposal, data):
    """The proposal with the standardisation of ``data`` (per-dimension, or whitening with
    ``config.whiten``), and the data standardised, in single precision."""
    loc = jnp.mean(data, 0)
    scale = jnp.std(data, 0)
    # A coordinate that never moves in the data keeps unit scale rather than dividing by zero.
    scale = jnp.where(scale > 0, scale, 1.0)
    if proposal.config.whiten:
        scale = whitening_factor(data, scale)
    proposal = proposal.replace(
        loc=loc.astype(proposal.loc.dtype), scale=scale.astype(proposal.loc.dtype)
    )
    # The network's parameters are single precision (flax's default) and the training steps are
    # nearly all of the cost: train in single precision even when JAX runs in double. The
    # acceptance stays exact for any network, so the network's precision never biases a draw.
    return proposal, standardize(proposal, data).astype(jnp.float32)


def _calibrated_noise(params, config, points, rng_key, fixed_noise):
    """``params`` with the learned decoder noise set to its maximum-likelihood value over
    ``points`` (training and held-out rows alike), as after a fixed-noise training; unchanged
    when ``fixed_noise`` (traced or not) is set."""
    reconstruction, _, _ = _reconstruct(params, config, points, rng_key)
    log_var = _mean_squared_error_log(points, reconstruction).astype(
        params["decoder_log_var"].dtype
    )
    log_var = jnp.where(fixed_noise, params["decoder_log_var"], log_var)
    return {**params, "decoder_log_var": log_var}


def train_vae(
    rng_key,
    proposal: VAEProposal,
    data,
    *,
    epochs,
    batch_size,
    learning_rate,
    patience=None,
    tolerance=0.0,
    validation_fraction=0.1,
    max_epochs=None,
    fixed_noise=False,
):
    """Train the VAE on ``data`` with Adam (warm start from ``proposal.params``), after
    standardising the data per dimension, for at most ``epochs`` passes. Jittable;
    ``batch_size``, ``validation_fraction`` and ``max_epochs`` are static, while ``epochs``,
    ``patience`` and ``fixed_noise`` may be traced, so that one compiled training serves
    trainings of different lengths and stopping rules on data of one shape.

    With ``patience``, a ``validation_fraction`` of the data is held out and the loss of eq. 2 is
    evaluated on it after every epoch with the same reparameterisation noise each time (so that
    two epochs' values differ only through the parameters). Training stops when that loss has not
    fallen by a relative ``tolerance`` below its last such improvement for ``patience`` epochs,
    and the parameters of the lowest held-out loss are returned. The network is judged on points
    it was not fitted to, so a warm-started model that already fits the new rung stops after a
    few epochs, and one that would start to overfit a small training set stops there.

    :param rng_key: key for the split, shuffling and the reparameterisation noise.
    :param VAEProposal proposal: the model to start from.
    :param data: flat points ``(N, D)``.
    :param int epochs: the most passes over the (training part of the) data.
    :param int batch_size: points per Adam step (the last partial batch of an epoch is dropped).
    :param float learning_rate: Adam's learning rate.
    :param int patience: epochs without a relative improvement of ``tolerance`` before stopping;
        ``None`` (or 0) trains all ``epochs`` on all the data.
    :param float tolerance: the relative fall of the held-out loss that counts as an improvement.
    :param float validation_fraction: the share of ``data`` held out (with ``patience``).
    :param int max_epochs: the length of the returned losses, at least ``epochs`` (default
        ``epochs``, which must then be a Python int).
    :param bool fixed_noise: with a learned decoder scale, train as eq. 2 does with its fixed
        small noise (the squared reconstruction error plus ``beta_VAE`` KL), which only the
        latents can lower, and leave the learned noise as it was.
    :return: ``(proposal, losses)``: the trained proposal with the data's standardisation, and
        one loss per epoch, ``(max_epochs,)``: the held-out loss with ``patience``, else the
        mean training loss of the epoch; NaN after the epoch training stopped at.

    **Example:**

    .. code-block:: python

        proposal, losses = train_vae(key, proposal, draws, epochs=150, batch_size=512,
                                     learning_rate=1e-3, patience=10, tolerance=1e-3)
        epochs_run = int(jnp.sum(jnp.isfinite(losses)))
    """
    if max_epochs is None:
        max_epochs = int(epochs)
    patience = 0 if patience is None else patience
    early_stopping = jnp.asarray(patience) > 0
    learned_noise = proposal.config.learn_decoder_scale
    proposal, points = _standardized(proposal, data)
    split_key, noise_key, rng_key = jax.random.split(rng_key, 3)
    num_points = points.shape[0]
    num_held_out = min(max(1, int(validation_fraction * num_points)), num_points - 1)
    u = points[jax.random.permutation(split_key, num_points)]
    held_out = u[:num_held_out]
    # The held-out rows lead; without early stopping they are trained on too.
    first_row = jnp.where(early_stopping, num_held_out, 0)
    batch_size = min(batch_size, num_points - num_held_out)
    num_batches = (num_points - first_row) // batch_size
    optimizer = optax.adam(learning_rate)

    def loss(params, batch, key):
        return vae_loss(params, proposal, batch, key, fixed_noise)

    loss_and_grad = jax.value_and_grad(loss)

    def epoch(params, opt_state, key):
        order_key, noise_key = jax.random.split(key)
        # The rows trained on, shuffled, ahead of the held-out ones.
        priority = jax.random.uniform(order_key, (num_points,))
        order = jnp.argsort(jnp.where(jnp.arange(num_points) < first_row, 2.0, priority))
        keys = jax.random.split(noise_key, num_points // batch_size)

        def adam_step(index, carry):
            params, opt_state, total = carry
            rows = jax.lax.dynamic_slice(order, (index * batch_size,), (batch_size,))
            value, grads = loss_and_grad(params, u[rows], keys[index])
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (
                optax.apply_updates(params, updates),
                opt_state,
                total + value.astype(total.dtype),
            )

        params, opt_state, total = jax.lax.fori_loop(
            0, num_batches, adam_step, (params, opt_state, jnp.zeros((), jnp.float32))
        )
        return params, opt_state, total / num_batches

    epoch_keys = jax.random.split(rng_key, max_epochs)

    def keep_going(carry):
        index, wait = carry[0], carry[5]
        return (index < epochs) & ~(early_stopping & (wait >= patience))

    def train_epoch(carry):
        index, params, opt_state, best_params, best_loss, wait, anchor, losses = carry
        params, opt_state, training_loss = epoch(params, opt_state, epoch_keys[index])
        held_out_loss = loss(params, held_out, noise_key).astype(jnp.float32)
        better = held_out_loss < best_loss
        best_params = jax.tree.map(
            lambda new, old: jnp.where(better, new, old), params, best_params
        )
        improved = held_out_loss < anchor - tolerance * jnp.abs(anchor)
        return (
            index + 1,
            params,
            opt_state,
            best_params,
            jnp.minimum(held_out_loss, best_loss),
            jnp.where(improved, 0, wait + 1),
            jnp.where(improved, held_out_loss, anchor),
            losses.at[index].set(jnp.where(early_stopping, held_out_loss, training_loss)),
        )

    params = proposal.params
    # The largest float rather than inf, so that the first relative threshold is not inf - inf.
    largest = jnp.array(jnp.finfo(jnp.float32).max, jnp.float32)
    carry = (
        0,
        params,
        optimizer.init(params),
        params,
        largest,
        0,
        largest,
        jnp.full((max_epochs,), jnp.nan, jnp.float32),
    )
    carry = jax.lax.while_loop(keep_going, train_epoch, carry)
    # Early stopping keeps the parameters of the lowest held-out loss; else the last ones.
    kept = jax.tree.map(
        lambda best, last: jnp.where(early_stopping, best, last), carry[3], carry[1]
    )
    if learned_noise:
        kept = _calibrated_noise(kept, proposal.config, points, noise_key, fixed_noise)
    return proposal.replace(params=kept), carry[7]


def isometry_factors(rng_key, proposal: VAEProposal, num_samples=10_000):
    """The isometric factor of every latent dimension (eq. 16):
    ``Iso_m = E_x[sqrt(2 sigma_m^2(x) / beta_VAE) ||d Dec / d z_m (mu(x))||]`` over
    ``x = Dec(z)``, ``z ~ N(0, I)``, in standardised units. The derivative is exact (forward mode)
    where the paper takes a finite difference with step 0.001. Eq. 3 holds when every factor is
    near 1 (the paper's Table 2: 0.974 to 1.025).

    :param rng_key: key for the latent draws.
    :param VAEProposal proposal: the trained proposal.
    :param int num_samples: draws to average over (the paper uses 100,000).
    :return: array ``(M,)``.

    **Example:**

    .. code-block:: python

        factors = nx.isometry_factors(jax.random.PRNGKey(0), proposal)
        bool(jnp.all(jnp.abs(factors - 1) < 0.05))  # eq. 3 holds
    """
    config = proposal.config
    decoder = _decoder(config)
    decoder_params = {"params": proposal.params["decoder"]}
    encoder = _encoder(config)
    encoder_params = {"params": proposal.params["encoder"]}

    def factor(z):
        u = decoder.apply(decoder_params, z)
        mean, log_var = encoder.apply(encoder_params, u)
        jacobian = jax.jacfwd(lambda latent: decoder.apply(decoder_params, latent))(mean)
        column_norms = jnp.sqrt(jnp.sum(jacobian**2, 0))
        return jnp.sqrt(2 * jnp.exp(log_var) / config.beta_vae) * column_norms

    draws = jax.random.normal(rng_key, (num_samples, config.latent_dim), proposal.loc.dtype)
    return jnp.mean(jax.lax.map(factor, draws, batch_size=1024), 0)
