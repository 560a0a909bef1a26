"""Saving and loading trained networks with flax serialization (msgpack), never pickle.

A file is one msgpack map: a JSON header (a format tag, the network's configuration, the model's
site names and unconstrained shapes, what training did) and the arrays as a flax state dict.
Loading rebuilds an array template from the header and restores the saved arrays into it, so a
file whose arrays do not fit its header is refused with a clear error.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

__all__ = [
    "save_arrays",
    "read_header",
    "header_field",
    "saved_config",
    "saved_sites",
    "saved_record",
    "restore_arrays",
]


def save_arrays(path, header: dict, arrays):
    """Write ``header`` (JSON-serialisable) and the pytree ``arrays`` to ``path``.

    :param path: file path (``str`` or ``Path``).
    :param dict header: must hold ``"format"``.
    :param arrays: a pytree of arrays.
    """
    arrays = jax.tree.map(jax.device_get, arrays)
    payload = {"header": json.dumps(header), "arrays": serialization.to_state_dict(arrays)}
    Path(path).write_bytes(serialization.msgpack_serialize(payload))


def read_header(path, expected_format, saved_by):
    """Read a file written by :func:`save_arrays` and check its format tag.

    :param path: file path.
    :param str expected_format: the format tag this version reads.
    :param str saved_by: the function that writes such files, for the error message.
    :return: ``(header, payload)``; pass ``payload`` to :func:`restore_arrays`.
    :raises ValueError: when the file is not such a file or has another format.
    """
    try:
        payload = serialization.msgpack_restore(Path(path).read_bytes())
        header = json.loads(payload["header"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a file saved by {saved_by}.") from error
    if header.get("format") != expected_format:
        raise ValueError(
            f"{path} has format {header.get('format')!r}; this version reads {expected_format!r}."
        )
    return header, payload


def header_field(path, header, key, saved_by):
    """``header[key]``, or a ``ValueError`` that names the missing field.

    :param path: the file, for the message.
    :param dict header: from :func:`read_header`.
    :param str key: the field.
    :param str saved_by: the function that writes such files, for the message.
    """
    if key not in header:
        raise ValueError(
            f"{path}: its header has no {key!r} field, which every file saved by {saved_by} "
            "has; the file is damaged or was not written by it."
        )
    return header[key]


def saved_config(path, config_class, fields, defaults=None):
    """The dataclass ``config_class`` built from a header's saved ``fields``.

    :param path: the file, for the message.
    :param config_class: a dataclass (the network's configuration).
    :param dict fields: the saved fields.
    :param dict defaults: values for fields that files of an older version lack.
    :return: ``config_class(**defaults, **fields)``.
    :raises ValueError: naming the unknown or missing fields, or the field a value does not fit.
    """
    if not isinstance(fields, dict):
        raise ValueError(f"{path}: its saved configuration is not a map of fields.")
    names = {field.name for field in dataclasses.fields(config_class)}
    required = {
        field.name
        for field in dataclasses.fields(config_class)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    }
    fields = {**(defaults or {}), **fields}
    unknown, missing = sorted(set(fields) - names), sorted(required - set(fields))
    if unknown or missing:
        raise ValueError(
            f"{path}: its saved {config_class.__name__} has unknown fields {unknown} and lacks "
            f"{missing}; it was written by another version or damaged."
        )
    try:
        return config_class(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{path}: its saved {config_class.__name__} is not valid: {error}"
        ) from error


def saved_sites(path, sites, dimension):
    """The saved ``((name, shape), ...)`` of the model's latent sites, checked against the
    network's ``dimension``: their unconstrained sizes must add up to it (no sites: a network
    trained on a potential).

    :raises ValueError: for a malformed entry or sizes that do not add up.
    """
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise ValueError(f"{path}: its saved dimension {dimension!r} is not a positive count.")
    try:
        sites = tuple((str(name), tuple(int(size) for size in shape)) for name, shape in sites)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: its saved sites are not (name, shape) pairs.") from error
    total = sum(math.prod(shape) for _, shape in sites)
    if sites and total != dimension:
        raise ValueError(
            f"{path}: its saved sites {dict(sites)} hold {total} unconstrained values, but its "
            f"network has dimension {dimension}; the header contradicts the arrays."
        )
    return sites


def saved_record(path, what, build):
    """``build()``, which makes a record (a training history, say) from a header's fields, or a
    ``ValueError`` that names ``what`` when the fields do not make one.

    :param path: the file, for the message.
    :param str what: the record, for the message (``"annealing history"``).
    :param build: a function of no arguments.
    """
    try:
        return build()
    except (TypeError, KeyError, ValueError, AttributeError) as error:
        raise ValueError(
            f"{path}: its saved {what} is not valid ({error}); the file was written by another "
            "version or damaged."
        ) from error


def restore_arrays(path, template, payload):
    """The saved arrays restored into ``template`` (a pytree of arrays of the right shapes).

    :raises ValueError: when the saved arrays do not match the template's structure or shapes,
        or hold NaN or ``+inf`` (``-inf`` is kept: a log weight of zero mass).
    """
    try:
        arrays = serialization.from_state_dict(template, payload["arrays"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: the saved arrays do not match its configuration.") from error
    for (key_path, expected), actual in zip(
        jax.tree_util.tree_leaves_with_path(template), jax.tree.leaves(arrays), strict=True
    ):
        if jnp.shape(expected) != jnp.shape(actual):
            raise ValueError(
                f"{path}: array {jax.tree_util.keystr(key_path)} has shape {jnp.shape(actual)}, "
                f"its configuration needs {jnp.shape(expected)}."
            )
        values = np.asarray(actual)
        if np.issubdtype(values.dtype, np.floating) and (
            np.isnan(values).any() or np.isposinf(values).any()
        ):
            raise ValueError(
                f"{path}: array {jax.tree_util.keystr(key_path)} holds NaN or inf values; the "
                "file is damaged or was saved from a training that failed."
            )
    return jax.tree.map(jnp.asarray, arrays)
