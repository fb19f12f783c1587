"""Parameter files as dictionaries of NumPy arrays.

>>> weights = kiln.params.load("model.irpa")        # also .safetensors, .gguf, .ptd, .pte
>>> kiln.params.save("copy.safetensors", weights)

:func:`load` reads IREE parameter archives (``.irpa``), safetensors, GGUF, ExecuTorch ``.ptd``
files and the named data of ``.pte`` programs. :func:`save` writes an ``.irpa`` (each array's
dtype and shape in IREE's ``TENSORv0:`` entry metadata, the bytes IREE's
``parameter_index_add_numpy_ndarray`` writes) or a ``.safetensors`` (the bytes the
``safetensors`` package writes).
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, Union

import numpy as np

from . import _kiln

__all__ = ["load", "save"]


def load(path: Union[str, "os.PathLike[str]"], *, max_bytes: Optional[int] = None) -> dict:
    """Every entry of the parameter file ``path`` as ``{key: array}``, in file order.

    An entry whose file records a type NumPy has (safetensors, GGUF, ``.ptd``, ``.pte``, an
    ``.irpa`` with ``TENSORv0:`` metadata) comes back with that dtype and shape; any other
    (an untyped archive entry, bfloat16, a quantized GGUF block) as its raw bytes, a flat
    ``uint8`` array. Splat entries are expanded, each at most ``max_bytes`` (default: kiln's
    default memory limit). A key repeated in the file keeps its first entry.
    """
    limit = _kiln.default_memory_limit() if max_bytes is None else max_bytes
    out: dict = {}
    for key, descr, shape, data in _kiln.params_load(os.fspath(path), limit):
        if key in out:
            continue
        out[key] = data if descr is None else data.view(np.dtype(descr)).reshape(shape)
    return out


def save(
    path: Union[str, "os.PathLike[str]"],
    tensors: Mapping[str, np.ndarray],
    *,
    metadata: Optional[Mapping[str, str]] = None,
) -> None:
    """Writes ``tensors`` to ``path``, an ``.irpa`` or a ``.safetensors`` by its extension,
    atomically (a failed write leaves nothing at ``path``). ``metadata`` is the safetensors
    header's ``__metadata__``."""
    entries = []
    for key, value in tensors.items():
        array = np.asarray(value)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        shape = array.shape
        flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        entries.append((str(key), array.dtype.str, list(shape), flat))
    meta = [(str(k), str(v)) for k, v in (metadata or {}).items()]
    _kiln.params_save(os.fspath(path), entries, meta)
