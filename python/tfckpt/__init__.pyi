# Type stubs of the tfckpt package (see its docstrings: help(tfckpt)).
import os
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

_Path = Union[str, bytes, os.PathLike]
_Patterns = Union[None, str, Sequence[str]]

class Error(Exception):
    message: str
    check_id: str
    file: Optional[str]
    key: Optional[str]
    offset: Optional[int]
    def __init__(self, message: str, check_id: str = ..., file: Optional[str] = ..., key: Optional[str] = ...,
                 offset: Optional[int] = ...) -> None: ...

class UsageError(Error, ValueError): ...
class CorruptInputError(Error): ...
class CheckFailedError(Error):
    report: Any

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
    def __getitem__(self, key: Any) -> np.ndarray: ...

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
    def read(self, name: str, *, raw: bool = ..., verify: bool = ...) -> np.ndarray: ...
    def __getitem__(self, name: str) -> np.ndarray: ...
    def get_slice(self, name: str, *, raw: bool = ...) -> TensorSlice: ...
    def object_graph(self) -> Optional[dict[str, dict[str, str]]]: ...

def open(ckpt: _Path) -> Checkpoint: ...
def load(ckpt: _Path, include: _Patterns = ..., exclude: _Patterns = ..., rename: _Patterns = ...,
         cast: Optional[Mapping[str, str]] = ..., drop_optimizer: bool = ..., verify: bool = ...) -> dict[str, np.ndarray]: ...
def inspect(ckpt: _Path, *, filter: Optional[str] = ..., tensor: Union[None, str, Sequence[str]] = ...,
            all_values: bool = ..., stats: bool = ..., tree: bool = ..., index_only: bool = ...,
            connections: Optional[int] = ...) -> dict[str, Any]: ...
def validate(ckpt: _Path, *, against: Optional[_Path] = ..., strict: bool = ..., quick: bool = ...,
             abort_uploads: bool = ..., tolerance: Optional[float] = ..., report: bool = ..., jobs: Optional[int] = ...,
             connections: Optional[int] = ...) -> dict[str, Any]: ...
def reshard(ckpt: Optional[_Path] = ..., output: Optional[_Path] = ..., *,
            partition: Union[None, str, Sequence[str]] = ..., policy: Optional[str] = ..., dry_run: bool = ...,
            force: bool = ..., no_verify: bool = ..., bytes_per_string: Optional[int] = ...,
            plan: Optional[_Path] = ..., execute: Optional[_Path] = ..., task: Union[None, int, str] = ...,
            finalize: Optional[_Path] = ..., jobs: Optional[int] = ..., connections: Optional[int] = ...) -> dict[str, Any]: ...
def merge(ckpts: Union[_Path, Sequence[_Path]], output: Optional[_Path] = ..., *, recover: bool = ...,
          allow_missing: bool = ..., move: bool = ..., force: bool = ..., no_verify: bool = ...,
          on_conflict: Optional[str] = ..., include: _Patterns = ..., exclude: _Patterns = ..., rename: _Patterns = ...,
          drop_optimizer: bool = ..., average: bool = ..., collapse_parallel: Union[None, bool, str] = ...,
          expand_parallel: Optional[int] = ..., collapse_replicas: bool = ..., no_check: bool = ...,
          dry_run: bool = ..., jobs: Optional[int] = ..., connections: Optional[int] = ...) -> dict[str, Any]: ...
def convert(src: _Path, output: _Path, *, to: Optional[str] = ..., cast: Union[None, str, Sequence[str], Mapping[str, str]] = ...,
            include: _Patterns = ..., exclude: _Patterns = ..., rename: _Patterns = ...,
            max_file_size: Union[None, int, str] = ..., partition: Union[None, str, Sequence[str]] = ...,
            strict: bool = ..., force: bool = ..., no_verify: bool = ..., jobs: Optional[int] = ...,
            connections: Optional[int] = ...) -> dict[str, Any]: ...
