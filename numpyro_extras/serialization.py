"""Saving and loading trained networks with flax serialization (msgpack), never pickle.

A file is one msgpack map: a JSON header (a format tag, the network's configuration, the model's
site names and unconstrained shapes, what training did) and the arrays as a flax state dict.
Loading rebuilds an array template from the header and restores the saved arrays into it, so a
file whose arrays do not fit its header is refused with a clear error.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import serialization

__all__ = ["save_arrays", "read_header", "restore_arrays"]


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


def restore_arrays(path, template, payload):
    """The saved arrays restored into ``template`` (a pytree of arrays of the right shapes).

    :raises ValueError: when the saved arrays do not match the template's structure or shapes.
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
    return jax.tree.map(jnp.asarray, arrays)
