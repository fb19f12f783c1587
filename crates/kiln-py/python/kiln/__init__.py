"""kiln for Python: run ExecuTorch programs on NumPy arrays, and read, verify and write the
artifacts of on-device ML compilers.

>>> import kiln, numpy as np
>>> program = kiln.load("model.pte")
>>> program.methods
['forward']
>>> [logits] = program.run([np.zeros((1, 3, 224, 224), np.float32)])

Everything here is the Rust library the ``kiln`` command is made of; the wheel installs that
command too. Errors are :class:`KilnError` subclasses carrying kiln's messages.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _kiln, params
from ._kiln import (
    ExecutionError,
    FileError,
    InputError,
    InvalidFileError,
    KilnError,
    MemoryLimitError,
    NotSupportedError,
    Tokenizer,
)

__version__: str = _kiln.__version__

__all__ = [
    "Chat",
    "Reply",
    "load",
    "verify",
    "inspect",
    "Program",
    "ValueSpec",
    "Generation",
    "Tokenizer",
    "params",
    "KilnError",
    "FileError",
    "InvalidFileError",
    "NotSupportedError",
    "InputError",
    "ExecutionError",
    "MemoryLimitError",
]

PathLike = Union[str, "os.PathLike[str]"]

# kiln's dtype names that NumPy has, and the NumPy type of each.
_NUMPY = {
    name: np.dtype(name)
    for name in (
        "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool",
        "uint16", "uint32", "uint64",
    )
}
# Storage-only types, returned as their raw integers (NumPy has no such type).
_RAW = {
    "qint8": np.int8,
    "quint8": np.uint8,
    "qint32": np.int32,
    "quint4x2": np.uint8,
    "quint2x4": np.uint8,
    "bits16": np.uint16,
    "float8_e5m2": np.uint8,
    "float8_e4m3fn": np.uint8,
    "float8_e5m2fnuz": np.uint8,
    "float8_e4m3fnuz": np.uint8,
}


class ValueSpec(NamedTuple):
    """A declared input or output of a method."""

    kind: str
    """``tensor``, ``int``, ``double``, ``bool``, ``string``, ``none`` or a list kind."""
    dtype: Optional[str]
    """kiln's dtype name (``float32``, ``int64``, ...) for a tensor, else ``None``."""
    shape: Optional[tuple]
    """The declared shape (the upper bounds of a dynamic tensor), for a tensor."""
    dynamic: bool
    """Whether the tensor takes any shape of the same rank with at most as many elements."""


@dataclass(frozen=True)
class Generation:
    """What :meth:`Program.generate` produced."""

    prompt_tokens: list
    """The prompt's token ids."""
    tokens: list
    """The new token ids only."""
    text: Optional[str]
    """The new tokens decoded, when a tokenizer was given."""
    stop: str
    """Why generation stopped: ``max_new_tokens``, ``eos`` or ``max_context_len``."""
    prefill_ms: float
    """The prefill call plus sampling the first token, in milliseconds."""
    decode_tokens_per_s: float
    """New tokens after the first per second of the decode loop."""


def load(
    path: PathLike,
    *,
    data: Optional[PathLike] = None,
    threads: Optional[int] = None,
    max_memory: Optional[int] = None,
    compile: bool = True,
) -> "Program":
    """Loads an ExecuTorch program (``.pte``): maps the file and verifies all of it.

    ``data`` names external constants (a ``.ptd``, or an ``.irpa`` keyed by the tensors'
    names). ``threads`` is how many threads large kernels split over (default: one per core
    this process may run on, the big ones on a CPU with big and little cores). ``max_memory``
    caps the bytes one loaded method may take (default: the smaller of 8 GiB and half the
    machine's memory). ``compile=False`` runs every
    instruction as written, without the compile stage (for bisecting a difference).

    Methods are loaded on their first :meth:`Program.run` and kept, so later runs only copy
    inputs in and outputs out.
    """
    if threads is not None and not (isinstance(threads, int) and 1 <= threads <= 256):
        raise InputError(f"threads must be a whole number from 1 to 256, not {threads!r}")
    if max_memory is not None and not (isinstance(max_memory, int) and max_memory > 0):
        raise InputError(f"max_memory must be a positive number of bytes, not {max_memory!r}")
    native = _kiln.Program(
        os.fspath(path),
        None if data is None else os.fspath(data),
        threads,
        max_memory,
        compile,
    )
    return Program(native, os.fspath(path))


def verify(path: PathLike, *, strict: bool = False) -> str:
    """Verifies any file kiln reads, as ``kiln verify`` does, and returns its kind (``pte``,
    ``irpa``, ...). Raises :class:`InvalidFileError` naming what is wrong, or
    :class:`FileError` when the file cannot be read or its kind is not recognised."""
    kind, error = _kiln.verify(os.fspath(path), strict)
    if error is None and kind is not None:
        return kind
    message = f"{os.fspath(path)}: {error}"
    raise (FileError if kind is None else InvalidFileError)(message)


def inspect(path: PathLike) -> dict:
    """The summary of any file kiln reads: the document ``kiln inspect --json`` prints."""
    return json.loads(_kiln.inspect(os.fspath(path)))


class Program:
    """A loaded ExecuTorch program. Make one with :func:`load`.

    Safe to share between threads, and runs from several threads go on at once: each run
    takes an execution state of its method (its own memory; the compiled steps and packed
    weights are loaded once and shared), with Python's lock released while it runs.
    """

    def __init__(self, native: Any, path: str) -> None:
        self._native = native
        self._path = path
        self._signatures: dict = {}
        self._default: Optional[str] = None

    @property
    def path(self) -> str:
        """The file the program was loaded from."""
        return self._path

    @property
    def methods(self) -> list:
        """The method names, in file order."""
        return self._native.methods

    def __repr__(self) -> str:
        return f"<kiln.Program {self._path!r} methods={self.methods!r}>"

    def _method(self, method: Optional[str]) -> str:
        """``method``, or the default: ``forward``, else the program's only method."""
        if method is not None:
            return method
        if self._default is None:
            names = self.methods
            if "forward" in names:
                self._default = "forward"
            elif len(names) == 1:
                self._default = names[0]
            else:
                raise InputError(
                    f"{self._path}: no method \"forward\"; choose one with method=: "
                    f"{', '.join(names)}"
                )
        return self._default

    def signature(self, method: Optional[str] = None) -> tuple:
        """The declared ``(inputs, outputs)`` of ``method``, each a list of :class:`ValueSpec`.
        ``method`` defaults to ``forward``, or the program's only method."""
        method = self._method(method)
        spec = self._signatures.get(method)
        if spec is None:
            inputs, outputs = self._native.signature(method)
            spec = (
                [ValueSpec(k, d, None if s is None else tuple(s), y) for k, d, s, y in inputs],
                [ValueSpec(k, d, None if s is None else tuple(s), y) for k, d, s, y in outputs],
            )
            self._signatures[method] = spec
        return spec

    def run(self, inputs: Union[Sequence[Any], np.ndarray] = (), method: Optional[str] = None) -> list:
        """Runs ``method`` (default ``forward``, or the program's only method) on ``inputs``,
        one per declared input in order, and returns its outputs.

        Tensor inputs are NumPy arrays (or anything ``numpy.asarray`` takes) of the declared
        dtype; a C-contiguous array is read in place, without a copy. A float64 array given for
        a float32 input is cast, with a warning; other dtype mismatches raise
        :class:`InputError`. Int, float and bool inputs are Python (or NumPy) scalars.

        A bfloat16 input takes a float array (rounded to bfloat16) or a uint16 array of the bits.

        Tensor outputs come back as NumPy arrays of their own, copied out of the method's
        memory (bfloat16 as float32, exactly; quantized storage types as their raw integers);
        other outputs as Python ``int``, ``float``, ``bool``, ``str`` or ``None``, as
        ExecuTorch's runtime returns them.
        """
        method = self._method(method)
        specs, _ = self.signature(method)
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(specs):
            raise InputError(f"method {method}: expected {len(specs)} inputs, got {len(inputs)}")
        args = [_argument(i, x, spec) for i, (x, spec) in enumerate(zip(inputs, specs))]
        return [_value(out) for out in self._native.run(method, args)]

    def memory(self, method: Optional[str] = None) -> dict:
        """What ``method`` (default ``forward``, or the program's only method) holds in memory
        once loaded, in bytes, loading it if no run has yet (as ``kiln inspect --memory``
        predicts it): ``packed_weights`` (shared by every execution state), ``activations``
        (one execution state's), ``constants_made`` (copies made at load),
        ``mapped_in_place`` (the file's pages that runs read in place), their ``total``;
        ``gathered_tables`` (embedding tables read in place, resident only where runs read
        them, not in the total); and
        this process's resident set and its peak so far, ``resident`` and ``peak`` (None where
        the OS does not say)."""
        return self._native.memory(self._method(method))

    def load_times(self, method: Optional[str] = None) -> dict:
        """How long loading ``method`` (default ``forward``, or the program's only method)
        took, in milliseconds by stage, loading it if no run has yet: the program's ``map``,
        ``verify`` and ``decode``, the method's ``compile`` and ``pack`` (its weights), and
        their ``total``."""
        return self._native.load_times(self._method(method))

    def inspect(self) -> dict:
        """The program's summary: the document ``kiln inspect --json`` prints for its file."""
        return inspect(self._path)

    def generate(
        self,
        prompt: Union[str, Sequence[int]],
        *,
        tokenizer: Union[None, Tokenizer, PathLike] = None,
        max_new_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_p: float = 0.9,
        seed: Optional[int] = None,
        eos: Optional[Iterable[int]] = None,
        on_token: Optional[Callable[[int], Any]] = None,
    ) -> Generation:
        """Generates text with a language model exported by ExecuTorch's LLM exporter (with a
        KV cache), the way ExecuTorch's runner and ``kiln generate`` do: one prefill call over
        the prompt, then one ``forward`` per new token. Each call starts from an empty cache.

        ``prompt`` is token ids, or a string encoded with ``tokenizer`` (a :class:`Tokenizer`
        or the path of a ``tokenizer.json``; with one, the new tokens are also decoded into
        :attr:`Generation.text`). Generation stops after ``max_new_tokens``, at an end token
        (``eos``, default the program's ``get_eos_ids``) or when the context is full.
        Without ``temperature`` (or at 0) it is greedy; otherwise it samples with nucleus
        ``top_p`` from a generator seeded with ``seed`` (default 0). ``on_token`` is called
        with each new token id as soon as it is sampled.
        """
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer(os.fspath(tokenizer))
        if isinstance(prompt, str):
            if tokenizer is None:
                raise InputError("a text prompt needs a tokenizer (tokenizer=)")
            prompt_tokens = tokenizer.encode(prompt)
        else:
            prompt_tokens = [int(t) for t in prompt]
        if max_new_tokens is not None and max_new_tokens < 0:
            raise InputError(f"max_new_tokens {max_new_tokens} must be 0 or more")
        tokens, stop, prefill_ms, rate = self._native.generate(
            prompt_tokens,
            max_new_tokens,
            temperature,
            top_p,
            0 if seed is None else seed,
            None if eos is None else [int(t) for t in eos],
            on_token,
        )
        text = tokenizer.decode(tokens) if tokenizer is not None else None
        return Generation(prompt_tokens, tokens, text, stop, prefill_ms, rate)

    def chat(
        self,
        tokenizer: Union[Tokenizer, PathLike],
        *,
        chat_template: Optional[PathLike] = None,
        system: Optional[str] = None,
    ) -> "Chat":
        """A conversation with the program's language model whose KV cache persists from turn
        to turn: each :meth:`Chat.say` feeds only the tokens the cache does not hold. The chat
        template is the Jinja file ``chat_template``, else the ``chat_template`` of the
        ``tokenizer_config.json`` beside ``tokenizer`` (when it is a path), else the messages'
        texts joined as they are. ``system`` opens the conversation."""
        config = None
        if not isinstance(tokenizer, Tokenizer):
            beside = os.path.join(os.path.dirname(os.fspath(tokenizer)), "tokenizer_config.json")
            if os.path.exists(beside):
                with open(beside, encoding="utf-8") as f:
                    config = f.read()
            tokenizer = Tokenizer(os.fspath(tokenizer))
        template = None
        if chat_template is not None:
            with open(os.fspath(chat_template), encoding="utf-8") as f:
                template = f.read()
        return Chat(_kiln.Chat(self._native, tokenizer, template, config, system))


@dataclass(frozen=True)
class Reply:
    """What :meth:`Chat.say` produced."""

    text: str
    """The reply's text (its end token left out)."""
    tokens: list
    """The reply's token ids."""
    stop: str
    """Why the reply ended: ``max_new_tokens``, ``eos`` or ``max_context_len``."""
    fed_tokens: int
    """Tokens of this turn fed to the model (the rest of the history was in the cache)."""
    position: int
    """Positions of the context in use after the turn."""
    prefill_ms: float
    """The turn's prefill call plus sampling the first token, in milliseconds."""
    decode_tokens_per_s: float
    """New tokens after the first per second of the decode loop."""


class Chat:
    """A conversation with a language model that keeps its KV cache (see
    :meth:`Program.chat`). Not for several threads at once: one turn runs at a time."""

    def __init__(self, native: Any):
        self._native = native

    def say(
        self,
        text: str,
        *,
        max_new_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_p: float = 0.9,
        top_k: Optional[int] = None,
        seed: Optional[int] = None,
        eos: Optional[Iterable[int]] = None,
        on_token: Optional[Callable[[int], Any]] = None,
    ) -> Reply:
        """The user says ``text``; returns the model's reply. Sampling as
        :meth:`Program.generate` (``top_k`` keeps the k most likely tokens first); ``eos``
        defaults to the program's end tokens and the template's ``eos_token``. When the
        history and ``text`` do not fit the context, raises :class:`InputError` and changes
        nothing: :meth:`restart` and say it again, or stop."""
        if max_new_tokens is not None and max_new_tokens < 0:
            raise InputError(f"max_new_tokens {max_new_tokens} must be 0 or more")
        if top_k is not None and top_k < 0:
            raise InputError(f"top_k {top_k} must be 0 or more")
        return Reply(*self._native.say(
            text,
            max_new_tokens,
            temperature,
            top_p,
            top_k,
            0 if seed is None else seed,
            None if eos is None else [int(t) for t in eos],
            on_token,
        ))

    def restart(self) -> None:
        """Forgets every message but the system one, and the cache."""
        self._native.restart()

    @property
    def messages(self) -> list:
        """The messages so far, as ``(role, content)`` pairs."""
        return self._native.messages()

    @property
    def position(self) -> int:
        """Positions of the context in use."""
        return self._native.position

    @property
    def max_context_len(self) -> int:
        """Positions the context holds."""
        return self._native.max_context_len


def _argument(index: int, x: Any, spec: ValueSpec) -> Any:
    """One input as the native module takes it: ``(dtype, shape, uint8 view)`` for a tensor,
    a Python scalar otherwise."""
    if spec.kind != "tensor":
        if isinstance(x, np.ndarray) and x.ndim == 0:
            x = x.item()
        if spec.kind == "int" and isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            return int(x)
        if spec.kind == "double" and isinstance(x, (int, float, np.integer, np.floating)):
            return float(x)
        if spec.kind == "bool" and isinstance(x, (bool, np.bool_)):
            return bool(x)
        if spec.kind == "none" and x is None:
            return None
        raise InputError(f"input {index}: expected {spec.kind}, got {type(x).__name__}")
    if spec.dtype == "bfloat16":
        bits = _bfloat16_bits(np.asarray(x))
        return (spec.dtype, bits.shape, np.ascontiguousarray(bits).reshape(-1).view(np.uint8))
    want = _NUMPY.get(spec.dtype)
    if want is None:
        raise NotSupportedError(
            f"input {index}: the method takes a {spec.dtype} tensor, which NumPy has no type for"
        )
    if isinstance(x, np.ndarray):
        if x.dtype != want:
            if x.dtype == np.float64 and want == np.float32:
                warnings.warn(
                    f"input {index}: a float64 array given for a float32 input is cast",
                    stacklevel=3,
                )
                x = x.astype(np.float32)
            else:
                raise InputError(
                    f"input {index}: expected a {spec.dtype} array{list(spec.shape)}, "
                    f"got {x.dtype}{list(x.shape)}"
                )
    else:
        x = np.asarray(x, dtype=want)
    shape = x.shape
    if x.dtype.byteorder == ">":
        x = x.astype(x.dtype.newbyteorder("<"))
    # A view of the array's own bytes when it is C-contiguous (a copy only when it is not).
    return (spec.dtype, shape, np.ascontiguousarray(x).reshape(-1).view(np.uint8))


def _bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """The bfloat16 bits of ``x``: a uint16 array is taken as the bits themselves, anything
    else is rounded from float32 to the nearest bfloat16 (ties to even, as PyTorch rounds)."""
    if x.dtype == np.uint16:
        return x
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), rounded)


def _value(out: Any) -> Any:
    """One output of the native module as the caller gets it."""
    if not isinstance(out, tuple):
        return out
    dtype, shape, data = out
    want = _NUMPY.get(dtype)
    if want is not None:
        return data.view(want).reshape(shape)
    if dtype == "bfloat16":
        return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return data.view(_RAW.get(dtype, np.uint8)).reshape(shape)
