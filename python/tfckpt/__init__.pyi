# Type stubs of the tfckpt package (see its docstrings: help(tfckpt)). tests/python_test.py
# compares them with the runtime: every public name, every signature (names, kinds, defaults).
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Mapping, Optional, Sequence, Union

import numpy as np

from . import train as train

__version__: str

_Path = Union[str, bytes, os.PathLike]
_Patterns = Union[None, str, Sequence[str]]
_DType = Union[str, np.dtype, type, Any]  # a dtype name, a numpy dtype or type, a torch dtype
_Cast = Union[None, str, Sequence[str], Mapping[_DType, _DType]]
_Framework = Literal["np", "numpy", "pt", "torch"]
_Array = Any  # numpy.ndarray, or torch.Tensor with framework="pt"

class Error(Exception):
    message: str
    check_id: str
    file: Optional[str]
    key: Optional[str]
    offset: Optional[int]
    report: Any
    def __init__(self, message: str, check_id: str = "", file: Optional[str] = None, key: Optional[str] = None,
                 offset: Optional[int] = None) -> None: ...

class UsageError(Error, ValueError): ...
class CorruptInputError(Error, ValueError): ...
class CheckFailedError(Error): ...
class NotFoundError(CorruptInputError, FileNotFoundError):
    def __init__(self, message: str, check_id: str = "not-found", file: Optional[str] = None,
                 key: Optional[str] = None, offset: Optional[int] = None) -> None: ...
class PermissionDeniedError(CorruptInputError, PermissionError):
    def __init__(self, message: str, check_id: str = "", file: Optional[str] = None, key: Optional[str] = None,
                 offset: Optional[int] = None) -> None: ...
class ArgumentTypeError(Error, TypeError):
    def __init__(self, message: str) -> None: ...
class DTypeError(Error, TypeError):
    def __init__(self, message: str, key: Optional[str] = None) -> None: ...

@dataclass(frozen=True)
class SliceInfo:
    spec: str
    start: tuple[int, ...]
    shape: tuple[int, ...]
    data_file: Optional[str]

@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    bytes: int
    partitioned: bool
    slices: tuple[SliceInfo, ...]

class TensorSlice:
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def ndim(self) -> int: ...
    def get_shape(self) -> list[int]: ...
    def get_dtype(self) -> str: ...
    def __len__(self) -> int: ...
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray: ...
    def __getitem__(self, key: Any) -> _Array: ...

@dataclass(frozen=True)
class TensorStandIn:
    shape: tuple[int, ...]
    dtype: str
    device: str = ""
    full_shape: Optional[tuple[int, ...]] = None
    offset: Optional[tuple[int, ...]] = None
    @property
    def slice_spec(self) -> str: ...
    def __getitem__(self, key: Any) -> "TensorStandIn": ...

@dataclass(frozen=True)
class ShardableTensor:
    _tensor_save_spec: Any
    tensor: TensorStandIn
    dtype: str
    device: str
    name: str
    shape: tuple[int, ...]
    slice_spec: str
    checkpoint_key: str
    trackable: Any

# A shard as a sharding callback returns it: {checkpoint_key: {slice_spec: tensor}}.
_Shard = Mapping[str, Mapping[str, Any]]
_ShardingCallback = Callable[[list[ShardableTensor]], Sequence[_Shard]]

class Checkpoint:
    def __enter__(self) -> "Checkpoint": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def close(self) -> None: ...
    def tensors(self) -> list[TensorInfo]: ...
    def keys(self) -> list[str]: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[str]: ...
    def __contains__(self, name: object) -> bool: ...
    def info(self, name: str) -> TensorInfo: ...
    def read(self, name: str, *, raw: bool = False, verify: bool = True) -> _Array: ...
    def __getitem__(self, name: str) -> _Array: ...
    def get_tensor(self, name: str) -> _Array: ...
    def metadata(self) -> Optional[dict[str, str]]: ...
    def get_slice(self, name: str, *, raw: bool = False, verify: bool = True) -> TensorSlice: ...
    def object_graph(self) -> Optional[dict[str, dict[str, str]]]: ...

def open(ckpt: _Path, *, framework: _Framework = "np", mmap: bool = False, endpoint_url: Optional[str] = None,
         profile: Optional[str] = None, region: Optional[str] = None, no_sign_request: bool = False) -> Checkpoint: ...
def load(ckpt: _Path, include: _Patterns = None, exclude: _Patterns = None, rename: _Patterns = None,
         cast: _Cast = None, drop_optimizer: bool = False, verify: bool = True, raw: bool = False, *,
         framework: _Framework = "np", nested: bool = False, mmap: bool = False, endpoint_url: Optional[str] = None,
         profile: Optional[str] = None, region: Optional[str] = None,
         no_sign_request: bool = False) -> dict[str, Any]: ...

# The command functions take the long options of `man tfckpt-COMMAND` ('-' as '_'), except
# --json (they return its document) and --quiet (they print nothing).
def inspect(ckpt: _Path, *, filter: Optional[str] = None, tensor: Union[None, str, Sequence[str]] = None,
            all_values: bool = False, stats: bool = False, tree: bool = False, index_only: bool = False,
            jobs: Optional[int] = None, connections: Optional[int] = None, endpoint_url: Optional[str] = None, profile: Optional[str] = None,
            region: Optional[str] = None, no_sign_request: bool = False) -> dict[str, Any]: ...
def validate(ckpt: _Path, *, against: Optional[_Path] = None, strict: bool = False, quick: bool = False,
             abort_uploads: bool = False, older_than: Optional[int] = None, tolerance: Optional[float] = None,
             report: bool = False,
             jobs: Optional[int] = None, connections: Optional[int] = None, endpoint_url: Optional[str] = None,
             profile: Optional[str] = None, region: Optional[str] = None,
             no_sign_request: bool = False) -> dict[str, Any]: ...
def reshard(ckpt: Optional[_Path] = None, output: Optional[_Path] = None, *,
            partition: Union[None, str, Sequence[str]] = None,
            policy: Union[None, str, _ShardingCallback] = None, dry_run: bool = False,
            force: bool = False, no_verify: bool = False, allow_any_dtype: bool = False,
            bytes_per_string: Optional[int] = None, plan: Optional[_Path] = None, execute: Optional[_Path] = None,
            task: Union[None, int, str] = None, finalize: Optional[_Path] = None,
            server_side: Literal["auto", "never", "always"] = "auto", jobs: Optional[int] = None,
            connections: Optional[int] = None, endpoint_url: Optional[str] = None, profile: Optional[str] = None,
            region: Optional[str] = None, no_sign_request: bool = False) -> dict[str, Any]: ...
def merge(ckpts: Union[_Path, Sequence[_Path]], output: Optional[_Path] = None, *, recover: bool = False,
          allow_missing: bool = False, move: bool = False, force: bool = False, no_verify: bool = False,
          on_conflict: Optional[str] = None, include: _Patterns = None, exclude: _Patterns = None,
          rename: _Patterns = None, drop_optimizer: bool = False, average: bool = False,
          collapse_parallel: Union[None, bool, str] = None, expand_parallel: Optional[int] = None,
          collapse_replicas: bool = False, no_check: bool = False, dry_run: bool = False,
          server_side: Literal["auto", "never", "always"] = "auto", jobs: Optional[int] = None,
          connections: Optional[int] = None, endpoint_url: Optional[str] = None, profile: Optional[str] = None,
          region: Optional[str] = None, no_sign_request: bool = False) -> dict[str, Any]: ...
def convert(src: _Path, output: _Path, *, to: Optional[str] = None, cast: _Cast = None, include: _Patterns = None,
            exclude: _Patterns = None, rename: _Patterns = None, max_file_size: Union[None, int, str] = None,
            partition: Union[None, str, Sequence[str]] = None, strict: bool = False, force: bool = False,
            no_verify: bool = False, server_side: Literal["auto", "never", "always"] = "auto",
            jobs: Optional[int] = None, connections: Optional[int] = None, endpoint_url: Optional[str] = None, profile: Optional[str] = None, region: Optional[str] = None,
            no_sign_request: bool = False) -> dict[str, Any]: ...
