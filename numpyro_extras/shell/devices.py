"""Splitting a run's independent lanes (AIS particles, replica-exchange rungs) over devices.

JAX places arrays on a one-axis :class:`~jax.sharding.Mesh` and partitions the compiled program
that runs on them (SPMD): each device computes its share of the lanes, and XLA inserts the
collectives where lanes meet (the weights' reduction of AIS, the swaps of replica exchange).
On a CPU, ``numpyro.set_host_device_count(n)`` before JAX starts makes ``n`` devices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = [
    "check_devices",
    "leading_axis_sharding",
    "constrain_leading_axis",
    "readable_on_every_process",
    "gathered",
    "split_invariant_sum",
]


def check_devices(devices, num_items: int | None = None, what: str = "particles") -> tuple | None:
    """The devices to split a run over, checked: ``None`` (JAX's default device), a number
    ``n`` (the first ``n`` of ``jax.devices()``) or a sequence of ``jax.Device``.

    :param devices: ``None``, an int or a sequence of devices.
    :param int num_items: the number of lanes to split, which must then be a multiple of the
        number of devices (``None``: any number; a compiled program pads an uneven split).
    :param str what: what the lanes are, for the error message.
    :return: a tuple of devices, or ``None``.
    :raises TypeError: for anything else.
    :raises ValueError: for more devices than JAX has, or lanes that do not split evenly.

    **Example:**

    .. code-block:: python

        check_devices(2, 1000)  # the first two of jax.devices()
    """
    if devices is None:
        return None
    available = jax.devices()
    if isinstance(devices, int) and not isinstance(devices, bool):
        if not 1 <= devices <= len(available):
            raise ValueError(
                f"devices={devices}, but JAX has {len(available)} device(s) here "
                "(numpyro.set_host_device_count(n) before JAX starts makes n CPU devices)."
            )
        devices = available[:devices]
    try:
        devices = tuple(devices)
    except TypeError:
        devices = None
    if not devices or not all(isinstance(device, jax.Device) for device in devices):
        raise TypeError(
            "devices must be None, a number of devices, or a sequence of jax.Device "
            "(e.g. jax.devices()[:4])."
        )
    if num_items is not None and num_items % len(devices):
        raise ValueError(
            f"{num_items} {what} cannot be split evenly over {len(devices)} devices: "
            "use a multiple of the number of devices."
        )
    return devices


def leading_axis_sharding(devices, axis_name: str) -> NamedSharding:
    """The sharding that splits an array's leading axis over ``devices`` (a one-axis mesh
    named ``axis_name``).

    :param devices: a sequence of ``jax.Device`` (from :func:`check_devices`).
    :param str axis_name: the mesh axis's name (``"particles"``, ``"replicas"``).
    :return: ``jax.sharding.NamedSharding``.

    **Example:**

    .. code-block:: python

        sharding = leading_axis_sharding(jax.devices()[:2], "replicas")
    """
    return NamedSharding(Mesh(np.array(list(devices)), (axis_name,)), PartitionSpec(axis_name))


def constrain_leading_axis(tree, sharding: NamedSharding | None):
    """Inside a traced function: every leaf of ``tree`` split along its leading axis as
    ``sharding`` says (:func:`jax.lax.with_sharding_constraint`), so that the program's work
    on those lanes is partitioned over the devices; ``None`` leaves ``tree`` as it is.

    :param tree: a pytree of arrays with a common leading (lane) axis, of any length (XLA pads
        a split that is not even).
    :param sharding: from :func:`leading_axis_sharding`, or ``None``.
    :return: the pytree.
    :raises ValueError: inside a program that already maps over devices (``jax.pmap``, as
        NumPyro's ``chain_method="parallel"`` runs chains, or ``shard_map``).

    **Example:**

    .. code-block:: python

        lanes = constrain_leading_axis(lanes, leading_axis_sharding(jax.devices(), "rungs"))
        moved = jax.vmap(explore)(lanes)
    """
    if sharding is None:
        return tree
    mapped_axes = jax.sharding.get_abstract_mesh().manual_axes
    if mapped_axes:
        raise ValueError(
            "A run's lanes cannot be split over devices inside a program that already maps "
            f"over devices (axes {list(mapped_axes)}): NumPyro's chain_method='parallel' puts "
            "each chain on a device of its own. Use chain_method='vectorized' (every chain's "
            "lanes split over the devices) or 'sequential', or leave devices unset."
        )
    return jax.tree.map(lambda leaf: jax.lax.with_sharding_constraint(leaf, sharding), tree)


def split_invariant_sum(values) -> jax.Array:
    """The sum of ``values`` over their leading (lane) axis, added in one fixed pairwise order
    whichever devices hold which lanes.

    ``jnp.sum`` over lanes split across devices adds each device's share, then the shares: the
    order, and so the rounding, changes with the split. Here the lanes are padded with zeros to
    a power of two and neighbours are added level by level; every addition is elementwise, so
    its rounding is the same under any partitioning of the program. A run whose lanes adapt to
    each other (an annealing step size tuned from every particle's acceptance) then gives the
    same numbers for any split.

    :param values: an array with the lanes on its leading axis (at least one lane).
    :return: the sum, of shape ``values.shape[1:]``.

    **Example:**

    .. code-block:: python

        mean_acceptance = split_invariant_sum(acceptance) / acceptance.shape[0]
    """
    values = jnp.asarray(values)
    count = values.shape[0]
    size = 1 << (count - 1).bit_length()
    if size > count:
        padding = jnp.zeros((size - count,) + values.shape[1:], values.dtype)
        values = jnp.concatenate([values, padding])
    while values.shape[0] > 1:
        pairs = values.reshape((values.shape[0] // 2, 2) + values.shape[1:])
        values = pairs[:, 0] + pairs[:, 1]
    return values[0]


def readable_on_every_process(tree, sharding: NamedSharding | None):
    """Inside a traced function: when ``sharding`` spans the devices of several processes
    (``jax.distributed``), every leaf of ``tree`` replicated on all of them, so that each
    process can read the run's state and what NumPyro's ``MCMC`` collects from it; otherwise
    ``tree`` as it is (one process reads every device).

    :param tree: a pytree of arrays.
    :param sharding: from :func:`leading_axis_sharding`, or ``None``.
    :return: the pytree.

    **Example:**

    .. code-block:: python

        state = readable_on_every_process(complete(state, moved), lane_sharding)
    """
    if sharding is None or sharding.is_fully_addressable:
        return tree
    replicated = NamedSharding(sharding.mesh, PartitionSpec())
    return jax.tree.map(lambda leaf: jax.lax.with_sharding_constraint(leaf, replicated), tree)


def gathered(tree):
    """``tree`` with every leaf that lives partly on other processes' devices (a run split over
    the devices of several ``jax.distributed`` processes) gathered whole onto this process as a
    NumPy array, so that it can be read here; other leaves are returned as they are. The
    leaves are gathered by one program: every new program of several processes costs a
    compilation and a rendezvous.

    :param tree: a pytree of arrays.
    :return: the pytree.

    **Example:**

    .. code-block:: python

        log_weights = gathered(result.log_weights)  # every particle's, on every process
    """
    leaves, treedef = jax.tree.flatten(tree)
    split = [
        index
        for index, leaf in enumerate(leaves)
        # A traced run (inside jit or vmap) has nothing to read yet.
        if isinstance(leaf, jax.Array)
        and not isinstance(leaf, jax.core.Tracer)
        and not leaf.is_fully_addressable
    ]
    if not split:
        return tree
    meshes = {getattr(leaves[index].sharding, "mesh", None) for index in split}
    if len(meshes) != 1 or None in meshes:
        copies = [multihost_utils.process_allgather(leaves[index], tiled=True) for index in split]
    else:
        replicated = NamedSharding(meshes.pop(), PartitionSpec())
        copies = jax.jit(lambda *parts: parts, out_shardings=replicated)(
            *(leaves[index] for index in split)
        )
    for index, copy in zip(split, copies, strict=True):
        leaves[index] = np.asarray(copy)
    return jax.tree.unflatten(treedef, leaves)
