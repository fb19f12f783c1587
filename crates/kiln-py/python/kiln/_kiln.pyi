"""Type stubs of the extension module ``kiln._kiln`` (the Rust half of the package)."""

from typing import Any, Callable, Optional

import numpy as np
import numpy.typing as npt

__version__: str

class KilnError(Exception): ...
class FileError(KilnError): ...
class InvalidFileError(KilnError): ...
class NotSupportedError(KilnError): ...
class InputError(KilnError): ...
class ExecutionError(KilnError): ...
class MemoryLimitError(KilnError): ...

# A tensor crossing the boundary: kiln's dtype name, the shape and its bytes.
_Tensor = tuple[str, tuple[int, ...], npt.NDArray[np.uint8]]
# A declared value: kind, dtype, shape, dynamic.
_Spec = tuple[str, Optional[str], Optional[list[int]], bool]

class Program:
    def __init__(
        self,
        path: str,
        data: Optional[str] = None,
        threads: Optional[int] = None,
        max_memory: Optional[int] = None,
        compile: bool = True,
    ) -> None: ...
    @property
    def methods(self) -> list[str]: ...
    def signature(self, method: str) -> tuple[list[_Spec], list[_Spec]]: ...
    def run(self, method: str, inputs: list[Any]) -> list[Any]: ...
    def memory(self, method: str) -> dict[str, Optional[int]]: ...
    def load_times(self, method: str) -> dict[str, float]: ...
    def generate(
        self,
        prompt: list[int],
        max_new_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_p: float = 0.9,
        seed: int = 0,
        eos: Optional[list[int]] = None,
        on_token: Optional[Callable[[int], Any]] = None,
    ) -> tuple[list[int], str, float, float]: ...

class Tokenizer:
    """A Hugging Face tokenizer loaded from a ``tokenizer.json``."""

    def __init__(self, path: str) -> None: ...
    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, without special tokens added."""
    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens skipped."""

class Chat:
    """A conversation with a program's language model that keeps its KV cache."""

    def __init__(
        self,
        program: Program,
        tokenizer: Tokenizer,
        chat_template: Optional[str] = None,
        tokenizer_config: Optional[str] = None,
        system: Optional[str] = None,
    ) -> None: ...
    def say(
        self,
        text: str,
        max_new_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        top_p: float = 0.9,
        top_k: Optional[int] = None,
        seed: int = 0,
        eos: Optional[list[int]] = None,
        on_token: Optional[Callable[[int], Any]] = None,
    ) -> tuple[str, list[int], str, int, int, float, float]:
        """(text, tokens, stop, fed_tokens, position, prefill_ms, decode_tokens_per_s)"""
    def restart(self) -> None: ...
    def messages(self) -> list[tuple[str, str]]: ...
    @property
    def position(self) -> int: ...
    @property
    def max_context_len(self) -> int: ...

def cli(argv: list[str]) -> int: ...
def inspect(path: str) -> str: ...
def verify(path: str, strict: bool = False) -> tuple[Optional[str], Optional[str]]: ...
def default_memory_limit() -> int: ...
def params_load(
    path: str, max_bytes: int
) -> list[tuple[str, Optional[str], Optional[list[int]], npt.NDArray[np.uint8]]]: ...
def params_save(
    path: str,
    entries: list[tuple[str, str, list[int], npt.NDArray[np.uint8]]],
    metadata: list[tuple[str, str]],
) -> None: ...
