"""TensorFlow checkpoints in Python without TensorFlow.

    import tfckpt
    with tfckpt.open("train/model.ckpt-1000") as ckpt:
        for t in ckpt.tensors():
            print(t.name, t.dtype, t.shape)
        kernel = ckpt["dense/kernel"]                         # numpy array, CRC-checked
        rows = ckpt.get_slice("embedding")[[3, 17, 42]]       # reads only those rows
    state = tfckpt.load("model.ckpt-1000", drop_optimizer=True)   # dict of numpy arrays
    state = tfckpt.load("model.ckpt-1000", framework="pt")        # dict of torch tensors
    params = tfckpt.load("model.ckpt-1000", nested=True)          # nested dicts (JAX, Flax)

A CKPT is anything the `tfckpt` command line takes: a prefix, its .index file, a directory
with a `checkpoint` state file, a SavedModel directory, a V1 file, or safetensors.
`tfckpt.train` offers TensorFlow's own reading API (tf.train.load_checkpoint, ...).

Arrays are the caller's own (writable, aligned, independent of the files); mmap=True
gives copy-on-write mappings of the files instead (writable, like numpy.memmap(mode="c");
see Checkpoint).

Errors raise tfckpt.Error: NotFoundError (also a FileNotFoundError) for paths that do not
exist, PermissionDeniedError (also a PermissionError) for refused access, UsageError (also a
ValueError) for refused requests, CorruptInputError (also a ValueError) for damaged or
unreadable input,
CheckFailedError for failed checks; ArgumentTypeError (also a TypeError) names the
parameter given a value of the wrong type; DTypeError (also a TypeError) names a tensor the
requested framework cannot hold. Bad indices raise IndexError like numpy; a tensor that is
not there raises KeyError (ckpt[name], get_tensor, read, get_slice, info, load(include=)).
"""

import builtins as _builtins
import errno as _errno
import inspect as _pyinspect
import json as _json
import operator as _operator
import os as _os
import re as _re
import tempfile as _tempfile
import warnings as _warnings
from dataclasses import dataclass as _dataclass

import numpy as _np

from . import _core
from . import _options

_io_open = _builtins.open  # (tfckpt.open shadows it below)

__version__ = _core.__version__

__all__ = ["open", "load", "inspect", "validate", "reshard", "merge", "convert", "Checkpoint", "TensorInfo", "SliceInfo",
           "TensorSlice", "ShardableTensor", "TensorStandIn", "Error", "UsageError", "CorruptInputError",
           "CheckFailedError", "NotFoundError",
           "PermissionDeniedError", "ArgumentTypeError", "DTypeError", "train", "__version__"]


class Error(Exception):
    """A tfckpt failure: `check_id` (the stable id of `man tfckpt-validate`, or ""), the
    `file`, `key` (tensor name) and byte `offset` where it was found (None when unknown)."""

    def __init__(self, message, check_id="", file=None, key=None, offset=None):
        super().__init__(message)
        self.message = message
        self.check_id = check_id
        self.file = file
        self.key = key
        self.offset = offset
        self.report = None  # the command's --json document, for errors of the commands

    def __str__(self):
        return self.message


class UsageError(Error, ValueError):
    """A request tfckpt refuses (bad option, output over an input, ...): exit code 2."""


class CorruptInputError(Error, ValueError):
    """Unreadable or damaged input, or an I/O failure: exit code 3. Also a ValueError (as
    safetensors and numpy.load raise for damaged input)."""


class CheckFailedError(Error):
    """A check failed (validation, verification of an output): exit code 1."""


class NotFoundError(CorruptInputError, FileNotFoundError):
    """A path (file, checkpoint, object) that does not exist; also a FileNotFoundError
    (errno ENOENT, `filename` the path)."""

    def __init__(self, message, check_id="not-found", file=None, key=None, offset=None):
        super().__init__(message, check_id, file, key, offset)
        self.errno, self.strerror, self.filename = _errno.ENOENT, message, file


class PermissionDeniedError(CorruptInputError, PermissionError):
    """Access refused (a file's permissions, an object store's HTTP 401/403); also a
    PermissionError (errno EACCES, `filename` the path)."""

    def __init__(self, message, check_id="", file=None, key=None, offset=None):
        super().__init__(message, check_id, file, key, offset)
        self.errno, self.strerror, self.filename = _errno.EACCES, message, file


class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong type; the message names the public parameter."""

    def __init__(self, message):
        super().__init__(message, "usage")


class DTypeError(Error, TypeError):
    """A tensor whose dtype the requested framework cannot hold (strings and variants in
    torch, float8 without raw=True, ...); the message names the tensor."""

    def __init__(self, message, key=None):
        super().__init__(message, "usage", None, key)


# absl::StatusCode values that are the caller's fault.
_USAGE_CODES = {3, 6}  # INVALID_ARGUMENT, ALREADY_EXISTS
_NOT_FOUND, _PERMISSION_DENIED, _UNAUTHENTICATED = 5, 7, 16


def _text(raw):
    return raw.decode("utf-8", "replace")


def _error_for_status(code, check_id, message, file, key, offset):
    """The exception for a library error (called by _core): the fields of the command
    line's --json error document."""
    cls = (UsageError if code in _USAGE_CODES else NotFoundError if code == _NOT_FOUND
           else PermissionDeniedError if code in (_PERMISSION_DENIED, _UNAUTHENTICATED) else CorruptInputError)
    return cls(_text(message), check_id, _name(file) if file else None, _name(key) if key else None,
               None if offset < 0 else offset)


def _closed():
    return UsageError("I/O operation on a closed checkpoint", "usage")


def _name(raw):
    """A stored name (bytes, not always UTF-8) as str; _stored() turns it back."""
    return raw.decode("utf-8", "surrogateescape")


def _stored(name):
    return name.encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------------------
# Arguments: each checked, a wrong type named by its public parameter.

def _flag(where, name, value):
    if not isinstance(value, (bool, _np.bool_)):
        raise ArgumentTypeError(f"{where}(): {name} must be True or False, not {type(value).__name__}")
    return bool(value)


def _path(where, name, value):
    """A path as the bytes the file system has (names need not be UTF-8)."""
    if not isinstance(value, (str, bytes)) and not hasattr(value, "__fspath__"):
        raise ArgumentTypeError(f"{where}(): {name} must be a path (str, bytes or os.PathLike), "
                                f"not {type(value).__name__}")
    out = _os.fsencode(value)
    if not out:
        raise UsageError(f"{where}(): {name} is an empty path", "usage")
    return out


def _texts(where, name, value):
    """None, a str or a list/tuple of str, as a list of str."""
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise ArgumentTypeError(f"{where}(): {name} must be a str or a list of str, not {type(value).__name__}")
    return list(values)


def _python_replacement(rule):
    """A rename rule "REGEX=REPLACEMENT" whose REPLACEMENT may refer to groups as Python's
    re.sub does (\\1, \\g<1>; \\\\ for a backslash) or as the command line does ($1, $&,
    $$), in the command line's form ($N; a backslash is literal there)."""
    i = 0
    while i < len(rule):  # the first '=' not escaped by a backslash, as the library splits
        if rule[i] == "\\":
            i += 2
            continue
        if rule[i] == "=":
            break
        i += 1
    else:
        return rule
    pattern, replacement = rule[:i], rule[i + 1:]
    out, j = [], 0
    while j < len(replacement):
        c = replacement[j]
        if c == "\\" and j + 1 < len(replacement):
            n = replacement[j + 1]
            if n.isdigit():
                out.append("$" + n)
                j += 2
                continue
            m = _re.match(r"g<(\d)>", replacement[j + 1:])
            if m:
                out.append("$" + m.group(1))
                j += 2 + len(m.group(0)) - 1
                continue
            if n == "g":
                raise UsageError(f"rename {rule!r}: only numbered groups \\1 .. \\9 (or $1 .. $9) can be referred to",
                                 "usage")
            if n == "\\":
                out.append("\\")
                j += 2
                continue
        out.append(c)
        j += 1
    return pattern + "=" + "".join(out)


def _renames(where, value):
    return [_python_replacement(r) for r in _texts(where, "rename", value)]


# ---------------------------------------------------------------------------------------
# dtypes and frameworks.

def _dtype_key(value):
    """A dtype named by a str (TF's or numpy's name: "float64", "double", "f8"), a numpy
    dtype or type, or a torch dtype, as tfckpt's name; None when it names none."""
    if isinstance(value, str):
        name = _core.dtype_name(value)
        if name is not None:
            return name
    text = str(value)
    if text.startswith("torch."):
        return _core.dtype_name(text[len("torch."):])
    try:
        return _core.dtype_name(_np.dtype(value).name)
    except TypeError:
        return None


def _torch():
    try:
        import torch
    except ImportError:
        raise UsageError("framework='pt' needs torch (apt-get install python3-torch, or pip install torch)",
                         "usage") from None
    return torch


def _framework(where, framework):
    """None/"np"/"numpy" -> "np"; "pt"/"torch" -> "pt" (as safetensors' safe_open takes it)."""
    if framework is None or framework in ("np", "numpy"):
        return "np"
    if framework in ("pt", "torch"):
        _torch()
        return "pt"
    if not isinstance(framework, str):
        raise ArgumentTypeError(f"{where}(): framework must be a str, not {type(framework).__name__}")
    raise UsageError(f"{where}(): framework={framework!r}: 'np' (numpy) or 'pt' (torch); for JAX and Flax, "
                     "numpy arrays (nested=True gives the tree they expect)", "usage")


def _casts(where, cast, framework):
    """cast as {stored dtype name: target}: a dict (keys and values dtype names, numpy
    dtypes or types, torch dtypes), "FROM=TO", or a list of "FROM=TO". Unknown dtypes are a
    UsageError (a ValueError)."""
    if cast is None:
        return {}
    if isinstance(cast, dict):
        items = list(cast.items())
    elif isinstance(cast, str) or (isinstance(cast, (list, tuple)) and all(isinstance(x, str) for x in cast)):
        items = []
        for item in [cast] if isinstance(cast, str) else cast:
            src, sep, dst = item.partition("=")
            if not sep or not src or not dst:
                raise UsageError(f"cast: {item!r} is not FROM=TO (e.g. float32=float16)", "usage")
            items.append((src, dst))
    else:
        raise ArgumentTypeError(f"{where}(): cast must be a dict, a str FROM=TO or a list of them, "
                                f"not {type(cast).__name__}")
    out = {}
    for src, dst in items:
        key = _dtype_key(src)
        if key is None:
            raise UsageError(f"cast: unknown dtype {src!r} (FROM is a stored dtype: float32, float64, bfloat16, ...)",
                             "usage")
        out[key] = _cast_target(src, dst, framework)
    return out


def _cast_target(src, dst, framework):
    if framework == "pt":
        torch = _torch()
        if isinstance(dst, torch.dtype):
            return dst
        name = _dtype_key(dst)
        target = getattr(torch, name, None) if name else None
        if not isinstance(target, torch.dtype):
            raise UsageError(f"cast: {src!r}: torch has no dtype {dst!r}", "usage")
        return target
    ml = _ml_dtype(dst)
    if ml is not None:
        return ml
    try:
        target = _np.dtype(dst)
    except TypeError:
        hint = (" (bfloat16: pip install ml_dtypes, or tfckpt[jax]; framework='pt'; or raw=True for its bits)"
                if _dtype_key(dst) in _ML_DTYPES else "")
        raise UsageError(f"cast: {src!r}: numpy has no dtype {dst!r}{hint}", "usage") from None
    if target.kind not in "biufc":
        raise UsageError(f"cast: {src!r}: {dst!r} is not a numeric dtype", "usage")
    return target


# The dtypes numpy has only through ml_dtypes (JAX's): tfckpt's name -> ml_dtypes' name.
_ML_DTYPES = {"bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
              "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e4m3b11fnuz": "float8_e4m3b11fnuz",
              "float8_e5m2fnuz": "float8_e5m2fnuz"}


def _ml_dtype(value):
    """ml_dtypes' numpy dtype for a cast target naming one of _ML_DTYPES (its name, or the
    ml_dtypes type itself), when ml_dtypes is installed; else None."""
    if isinstance(value, str):
        name = _ML_DTYPES.get(_dtype_key(value) or value)
    else:
        name = _ML_DTYPES.get(getattr(value, "__name__", ""))
        if name is not None and getattr(value, "__module__", "").split(".")[0] != "ml_dtypes":
            name = None
    if name is None:
        return None
    try:
        import ml_dtypes
    except ImportError:
        return None
    return _np.dtype(getattr(ml_dtypes, name))


# numpy can hold these, torch cannot (torch 1.x has no unsigned types but uint8).
_TORCH_FLOAT8 = {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


def _to_torch(array, name, dtype):
    """A numpy array read for tensor `name` of stored `dtype` as a torch.Tensor sharing its
    memory (bfloat16 and float8 read as their bits, then viewed as torch's type)."""
    torch = _torch()
    if isinstance(array, (bytes, _np.bytes_)) or (isinstance(array, _np.ndarray) and array.dtype == object):
        raise DTypeError(f"tensor {name!r} has dtype {dtype}, which torch cannot hold "
                         "(read it with framework='np', or leave it out: exclude=)", name)
    array = _np.asarray(array)
    if dtype == "bfloat16" and array.dtype == _np.uint16:
        return torch.from_numpy(array.view(_np.int16)).view(torch.bfloat16)
    if dtype in _TORCH_FLOAT8 and array.dtype == _np.uint8 and hasattr(torch, _TORCH_FLOAT8[dtype]):
        return torch.from_numpy(array).view(getattr(torch, _TORCH_FLOAT8[dtype]))
    try:
        return torch.from_numpy(array)
    except TypeError:
        raise DTypeError(f"tensor {name!r} has dtype {array.dtype}, which this torch cannot hold "
                         f"(cast={{'{array.dtype}': 'int64'}} converts it)", name) from None


@_dataclass(frozen=True)
class SliceInfo:
    """One stored piece of a tensor: its slice string as stored, where it starts, its shape,
    and the file that holds its bytes."""
    spec: str
    start: tuple
    shape: tuple
    data_file: str


@_dataclass(frozen=True)
class TensorInfo:
    """A logical tensor (partitioned tensors once, under their name)."""
    name: str
    dtype: str
    shape: tuple
    bytes: int
    partitioned: bool
    slices: tuple


def _tensor_info(d):
    slices = tuple(SliceInfo(s["spec"], tuple(s["start"]), tuple(s["shape"]),
                             None if s["data_file"] is None else _name(s["data_file"])) for s in d["slices"])
    return TensorInfo(_name(d["name"]), d["dtype"], tuple(d["shape"]), d["bytes"], d["partitioned"], slices)


# ---------------------------------------------------------------------------------------
# Indexing.

def _is_int_array(k):
    if isinstance(k, (list, tuple)):
        return True
    return isinstance(k, _np.ndarray) and k.ndim > 0 and k.dtype.kind in "biu"


def _box(key, shape):
    """numpy basic indexing of `shape` by `key` -> (start, box shape, picks, keep_0d):
    the box is the smallest region holding every selected element; `picks` then selects
    them out of the box read (steps, negative ones too, integer axes dropped, None/newaxis
    axes added); keep_0d: a selection with `...` gives a 0-d array where numpy gives one."""
    if not isinstance(key, tuple):
        key = (key,)
    ellipses = sum(k is Ellipsis for k in key)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    real = [k for k in key if k is not None and k is not Ellipsis]
    if len(real) > len(shape):
        raise IndexError(f"too many indices for tensor: tensor is {len(shape)}-dimensional, "
                         f"but {len(real)} were indexed")
    if ellipses:
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - len(real)) + key[i + 1:]
    else:
        key = key + (slice(None),) * (len(shape) - len(real))
    start, box, picks = [], [], []
    axis = 0
    for k in key:
        if k is None:
            picks.append(None)
            continue
        n = shape[axis]
        if isinstance(k, slice):
            b, e, step = k.indices(n)
            count = len(range(b, e, step))
            low = b if step > 0 else b + (count - 1) * step
            start.append(low if count else 0)
            box.append((count - 1) * abs(step) + 1 if count else 0)
            picks.append(slice(None, None, step))
        else:
            if isinstance(k, (bool, _np.bool_)) or not hasattr(k, "__index__"):
                raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
                                 "integer arrays on the first axis are valid indices, not "
                                 f"{type(k).__name__}")
            i = _operator.index(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            start.append(i % n)
            box.append(1)
            picks.append(0)
        axis += 1
    return start, box, tuple(picks), ellipses > 0


class TensorSlice:
    """`ckpt.get_slice(name)[...]`: reads only the bytes the selection needs, numpy's
    indexing: integers, slices (negative steps too), `...`, None, and on the first axis an
    integer array or list (an embedding's rows by id, reading only those rows) or a boolean
    mask. Every stored piece the selection reads whole has its CRC checked (a CRC covers a
    whole piece: parts of pieces cannot be checked). get_shape(), get_dtype(), len() and
    numpy.asarray() work as on safetensors' slices. Results are arrays of their own (torch
    tensors with framework="pt")."""

    def __init__(self, ckpt, info, raw, verify):
        self._ckpt, self._info, self._raw, self._verify = ckpt, info, raw, verify

    @property
    def shape(self):
        return self._info.shape

    @property
    def dtype(self):
        return self._info.dtype

    @property
    def ndim(self):
        return len(self._info.shape)

    def get_shape(self):
        """The tensor's shape, as a list (safetensors' get_slice(...).get_shape())."""
        return list(self._info.shape)

    def get_dtype(self):
        """The tensor's dtype name ("float32", "bfloat16", ...)."""
        return self._info.dtype

    def __len__(self):
        if not self._info.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._info.shape[0]

    def __array__(self, dtype=None, copy=None):
        array = self._numpy(...)
        array = _np.asarray(array)
        return array if dtype is None else array.astype(dtype, copy=False)

    def __repr__(self):
        return f"<tfckpt.TensorSlice {self._info.name!r} {self._info.dtype} {list(self._info.shape)}>"

    # A step that skips at least this many bytes between the elements it selects is read
    # element by element along its axis instead of as one box; rows by id closer than this
    # are read as one box.
    _SPARSE_STEP_BYTES = 1 << 20
    _ROW_GAP_BYTES = 64 << 10

    def _itemsize(self):
        elements = 1
        for n in self._info.shape:
            elements *= n
        return self._info.bytes // elements if elements else 0

    def _raw_read(self):
        # torch has bfloat16 (and recent torch float8): read their bits, viewed later.
        return self._raw or (self._ckpt._framework == "pt" and self._info.dtype in ("bfloat16", *_TORCH_FLOAT8))

    def _read(self, start, box, steps):
        """The box [start, start + box) with positive `steps` (one per axis) applied: one
        read, or, along the first axis whose step skips much, one read per selected index."""
        core, name = self._ckpt._open(), _stored(self._info.name)
        inner = self._itemsize()
        for axis in range(len(box) - 1, -1, -1):
            if steps[axis] > 1 and (steps[axis] - 1) * inner >= self._SPARSE_STEP_BYTES and box[axis] > 1:
                parts = []
                for j in range(0, box[axis], steps[axis]):
                    sub_start, sub_box, sub_steps = list(start), list(box), list(steps)
                    sub_start[axis], sub_box[axis], sub_steps[axis] = start[axis] + j, 1, 1
                    parts.append(self._read(sub_start, sub_box, sub_steps))
                return _np.concatenate(parts, axis=axis)
            inner *= box[axis]
        array = core.read(name, start, box, self._raw_read(), self._verify)
        return array[tuple(slice(None, None, s) for s in steps)] if any(s > 1 for s in steps) else array

    def _rows(self, ids, start, box, steps):
        """The rows `ids` (ints, any shape) of the box [:, start[1:] + box[1:]]: the distinct
        rows read in runs (rows closer than _ROW_GAP_BYTES read as one box), then placed."""
        n = self._info.shape[0]
        ids = _np.asarray(ids)
        if ids.dtype == bool or ids.dtype == _np.bool_:
            if ids.ndim != 1 or len(ids) != n:
                raise IndexError(f"boolean index of shape {ids.shape} does not match the first axis ({n})")
            ids = _np.flatnonzero(ids)
        elif ids.size == 0:
            ids = ids.astype(_np.int64)
        elif ids.dtype.kind not in "iu":
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        flat = ids.reshape(-1).astype(_np.int64)
        if flat.size and (flat.min() < -n or flat.max() >= n):
            bad = flat[(flat < -n) | (flat >= n)][0]
            raise IndexError(f"index {bad} is out of bounds for axis 0 with size {n}")
        flat = flat % n if n else flat
        unique, where = _np.unique(flat, return_inverse=True)
        row_bytes = self._itemsize()
        for b in box[1:]:
            row_bytes *= b
        gap = max(1, self._ROW_GAP_BYTES // max(1, row_bytes))
        parts, offsets, at, i = [], _np.empty(len(unique), dtype=_np.int64), 0, 0
        while i < len(unique):
            j = i
            while j + 1 < len(unique) and unique[j + 1] - unique[j] <= gap:
                j += 1
            lo, hi = int(unique[i]), int(unique[j]) + 1
            parts.append(self._read([lo] + list(start[1:]), [hi - lo] + list(box[1:]), [1] + list(steps[1:])))
            offsets[i:j + 1] = at + (unique[i:j + 1] - lo)
            at += hi - lo
            i = j + 1
        if parts:
            block = _np.concatenate(parts, axis=0)
        else:
            block = self._read([0] + list(start[1:]), [0] + list(box[1:]), [1] + list(steps[1:]))
        out = block[offsets[where]] if len(unique) else block
        return out.reshape(ids.shape + out.shape[1:])

    def _numpy(self, key):
        self._ckpt._open()
        shape = self._info.shape
        first = key[0] if isinstance(key, tuple) and key else key
        if shape and _is_int_array(first):
            rest = key[1:] if isinstance(key, tuple) else ()
            if any(_is_int_array(k) for k in rest):
                raise IndexError("integer arrays index the first axis only")
            start, box, picks, keep_0d = _box((slice(None),) + tuple(rest), shape)
            steps = [abs(p.step) if isinstance(p, slice) else 1 for p in picks if p is not None]
            array = self._rows(first, start, box, steps)
            ids_ndim = _np.ndim(first) if not (_np.asarray(first).dtype == bool) else 1
            tail = tuple(slice(None, None, -1) if isinstance(p, slice) and p.step < 0 else
                         slice(None) if isinstance(p, slice) else p for p in picks[1:])
            return array[(slice(None),) * ids_ndim + tail] if tail else array
        start, box, picks, keep_0d = _box(key, shape)
        steps = [abs(p.step) if isinstance(p, slice) else 1 for p in picks if p is not None]
        array = self._read(start, box, steps)
        # Negative steps, integer axes and new axes, as numpy (the steps are applied already).
        picks = tuple(slice(None, None, -1) if isinstance(p, slice) and p.step < 0 else
                      slice(None) if isinstance(p, slice) else p for p in picks)
        array = array[picks] if picks else array
        if isinstance(array, _np.ndarray) and array.ndim == 0 and not keep_0d:
            return array[()]  # numpy gives a scalar for a single element
        if not isinstance(array, _np.ndarray) and keep_0d:
            return _np.array(array, dtype=object if isinstance(array, bytes) else None)
        return array

    def __getitem__(self, key):
        array = self._numpy(key)
        if self._ckpt._framework == "pt":
            if isinstance(array, _np.ndarray) and not array.flags.c_contiguous:
                array = _np.ascontiguousarray(array)
            return _to_torch(array if isinstance(array, _np.ndarray) else _np.asarray(array), self._info.name,
                             self._info.dtype)
        if isinstance(array, _np.ndarray) and not array.flags.writeable:
            array = array.copy()  # (the caller's own, like the rest)
        return array


class Checkpoint:
    """An opened checkpoint (tfckpt.open()): a context manager; `in`, len(), iteration over
    names, ckpt[name] for a whole tensor, get_slice(name)[...] for part of one.

    Arrays are the caller's own: writable, aligned, and nothing done to the files later
    changes them. With mmap=True, whole tensors stored as numpy holds them are private
    copy-on-write mappings of the files instead (MAP_PRIVATE, as numpy.memmap(mode="c")
    maps; the others are copies), each kept while its array lives: writable (numpy's
    writes, torch's through framework="pt"), a write copying the pages it touches into
    this process, never into the file, the handle or the other arrays. Like any mapping,
    pages not yet written change if the file is rewritten in place, and touching an array
    after its file was truncated kills the process with SIGBUS; reads through the handle
    after a truncation raise CorruptInputError instead. Values are CRC-checked when read
    either way.

    After close() every call raises the same UsageError (a ValueError)."""

    def __init__(self, core, framework="np", mmap=False):
        self._core = core
        self._framework = framework
        self._mmap = mmap
        # Names and TensorInfo are made on first use: a checkpoint may hold hundreds of
        # thousands of tensors, and opening it should cost what the index does.
        self._names = None
        self._infos = {}

    def __enter__(self):
        self._open()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Drops this handle; every later call raises UsageError. (With mmap=True, arrays
        keep their parts of the data files mapped.)"""
        self._core = None
        self._names = None
        self._infos = {}

    def _open(self):
        if self._core is None:
            raise _closed()
        return self._core

    def _all_names(self):
        core = self._open()
        if self._names is None:
            self._names = [_name(raw) for raw in core.names()]
        return self._names

    def tensors(self):
        """Every logical tensor as TensorInfo, in name order."""
        return [self.info(name) for name in self._all_names()]

    def keys(self):
        """The name of every tensor load() returns, in name order: the object graph
        (_CHECKPOINTABLE_OBJECT_GRAPH, TF2's description of the objects, not a model
        tensor) is left out as load() leaves it out, so that `for k in f.keys():
        f.get_tensor(k)` reads the state dict, with framework="pt" too (safetensors'
        safe_open habit). tensors() lists it; ckpt["_CHECKPOINTABLE_OBJECT_GRAPH"] reads it
        (numpy only: a string)."""
        return [n for n in self._all_names() if n != _OBJECT_GRAPH]

    def __len__(self):
        """The number of keys()."""
        return len(self._open()) - (_stored(_OBJECT_GRAPH) in self._core)

    def __iter__(self):
        """Iterates over keys()."""
        return iter(self.keys())

    def get_tensor(self, name):
        """The whole tensor `name` (KeyError when absent): ckpt[name], by the name
        safetensors' safe_open uses."""
        return self.read(name)

    def metadata(self):
        """The file's metadata as safetensors' safe_open gives it: the "__metadata__"
        {str: str} of a local safetensors file (None when it has none); None for the
        other formats (TensorFlow checkpoints have no such metadata)."""
        core = self._open()
        names = core.names()
        if not names:
            return None
        slices = core.describe(names[0])["slices"]
        data_file = slices[0]["data_file"] if slices else None
        if not data_file or not data_file.endswith(b".safetensors") or b"://" in data_file:
            return None
        try:
            with _io_open(data_file, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                header = _json.loads(f.read(n)) if 2 <= n <= (100 << 20) else {}
        except (OSError, ValueError):
            return None
        meta = header.get("__metadata__") if isinstance(header, dict) else None
        return dict(meta) if isinstance(meta, dict) else None

    def __contains__(self, name):
        core = self._open()
        return isinstance(name, str) and _stored(name) in core

    def info(self, name):
        """The TensorInfo of one tensor (KeyError when absent)."""
        core = self._open()
        info = self._infos.get(name)
        if info is None:
            if not isinstance(name, str):
                raise ArgumentTypeError(f"tensor names are str, not {type(name).__name__}")
            if _stored(name) not in core:
                raise KeyError(name)
            info = self._infos[name] = _tensor_info(core.describe(_stored(name)))
        return info

    def read(self, name, *, raw=False, verify=True):
        """The whole logical tensor `name` (partitions assembled): a numpy array, or a
        torch.Tensor with framework="pt". Stored CRCs are checked unless verify=False.
        bfloat16 reads as float32 with numpy unless raw=True (its uint16 bits: view them as
        ml_dtypes.bfloat16 or jnp.bfloat16), as torch.bfloat16 with torch; strings as an
        object array of bytes (torch refuses them, naming the tensor)."""
        raw = _flag("read", "raw", raw)
        verify = _flag("read", "verify", verify)
        info = self.info(name)
        pt = self._framework == "pt"
        as_bits = raw or (pt and info.dtype in ("bfloat16", *_TORCH_FLOAT8))
        if pt and info.dtype in ("string", "variant"):
            raise DTypeError(f"tensor {name!r} has dtype {info.dtype}, which torch cannot hold "
                             "(read it with framework='np', or leave it out: exclude=)", name)
        try:
            array = self._open().read(_stored(name), [0] * len(info.shape), list(info.shape), as_bits, verify,
                                      self._mmap)
        except TypeError as e:
            raise DTypeError(str(e), name) from None
        return _to_torch(array, name, info.dtype) if pt else array

    def __getitem__(self, name):
        return self.read(name)

    def get_slice(self, name, *, raw=False, verify=True):
        """A view whose [...] reads only the selected part of tensor `name` (see
        TensorSlice); the pieces it reads whole are CRC-checked unless verify=False."""
        raw = _flag("get_slice", "raw", raw)
        verify = _flag("get_slice", "verify", verify)
        info = self.info(name)
        return TensorSlice(self, info, raw, verify)

    def object_graph(self):
        """The TF2 object graph: {object path: {attribute name: checkpoint key}}, plus
        slot variables as VAR/.OPTIMIZER_SLOT/OPTIMIZER/SLOT paths; None for TF1
        checkpoints. Each key is the name the tensor is stored under (an attribute saved
        under its key plus a suffix, as a dataset iterator's ITERATOR is saved as
        ITERATOR_STATE, is given that name)."""
        core = self._open()
        nodes = core.object_graph()
        if nodes is None:
            return None
        names = None
        out = {}
        for n in nodes:
            if n["attributes"]:
                attrs = {}
                for a in n["attributes"]:
                    key = _name(a["checkpoint_key"])
                    if _stored(key) not in core:
                        if names is None:
                            names = self._all_names()
                        stored = [k for k in names if k.startswith(key) and "/" not in k[len(key):]]
                        if len(stored) == 1:
                            key = stored[0]
                    attrs[_name(a["name"])] = key
                out[_name(n["path"])] = attrs
        return out


_STORE_KINDS = {"endpoint_url": "text", "profile": "text", "region": "text", "no_sign_request": "flag"}


def _store(where, endpoint_url, profile, region, no_sign_request):
    """The object store options (man tfckpt, OBJECT STORES) as _core takes them."""
    return _request(where, dict(endpoint_url=endpoint_url, profile=profile, region=region,
                                no_sign_request=no_sign_request), _STORE_KINDS)


def open(ckpt, *, framework="np", mmap=False, endpoint_url=None, profile=None, region=None,  # noqa: A001
         no_sign_request=False):
    """Opens a checkpoint: any CKPT the command line takes (a path: str, bytes or
    os.PathLike; s3:// and gs:// URLs too). framework="pt" reads torch.Tensors (as
    safetensors' safe_open takes it); mmap=True gives copy-on-write mappings of the files
    (writable, like numpy.memmap(mode="c"); see Checkpoint). The object store options are those of the
    command line (--endpoint-url, --profile, --region, --no-sign-request); the environment
    and the AWS/Google configuration are read at each open. Returns a Checkpoint."""
    spec = _path("open", "ckpt", ckpt)
    framework = _framework("open", framework)
    mmap = _flag("open", "mmap", mmap)
    store = _store("open", endpoint_url, profile, region, no_sign_request)
    try:
        core = _core.open(spec, store)
    except NotFoundError as e:
        _name_the_path(e, spec)
        raise
    return Checkpoint(core, framework, mmap)


def _name_the_path(error, path):
    """Gives a NotFoundError that names no file the path asked for (`filename`, as
    FileNotFoundError has it)."""
    if error.file is None:
        error.file = error.filename = _name(path)


_ATTRIBUTE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _nest(flat):
    """{"a/b/c": v} -> {"a": {"b": {"c": v}}}, TF2's /.ATTRIBUTES/VARIABLE_VALUE dropped."""
    tree, origin = {}, {}
    for name, value in flat.items():
        path = name[:-len(_ATTRIBUTE_SUFFIX)] if name.endswith(_ATTRIBUTE_SUFFIX) else name
        parts = path.split("/")
        node, prefix = tree, ""
        for part in parts[:-1]:
            prefix = f"{prefix}/{part}" if prefix else part
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UsageError(f"load(nested=True): {origin[prefix]!r} is a tensor and also a prefix of {name!r}; "
                                 "leave one out (drop_optimizer=True for optimizer slots, exclude=) or rename= it",
                                 "usage")
            node = child
        if parts[-1] in node:
            other = origin.get(path) or next(k for k in flat if k.startswith(path + "/"))
            raise UsageError(f"load(nested=True): {name!r} is a tensor and also a prefix of {other!r}; leave one "
                             "out (drop_optimizer=True for optimizer slots, exclude=) or rename= it", "usage")
        node[parts[-1]] = value
        origin[path] = name
    return tree


def load(ckpt, include=None, exclude=None, rename=None, cast=None, drop_optimizer=False, verify=True, raw=False, *,
         framework="np", nested=False, mmap=False, endpoint_url=None, profile=None, region=None,
         no_sign_request=False):
    """Every tensor of `ckpt` as {name: numpy array} (torch.Tensors with framework="pt"),
    the shape `load_state_dict` or a JAX pytree wants; the arrays are the caller's own
    (writable; mmap=True: copy-on-write mappings of the files, see Checkpoint). The selection
    works as in `tfckpt merge`/`convert`: `include`/`exclude` are regular expressions (RE2
    syntax, or lists of them) searched in names; `rename` is "REGEX=REPLACEMENT" (or a
    list, applied in order; $1 or \\1 refers to a group); `drop_optimizer` leaves out
    optimizer slots and state like `merge --drop-optimizer`. `cast` converts by dtype:
    {"float64": "float32"} (keys and values: dtype names as TF or numpy spell them, numpy
    dtypes, torch dtypes), or "FROM=TO" strings as `convert --cast` takes them; FROM is the
    stored dtype (bfloat16 too) or the dtype as read; unknown dtypes are a UsageError.
    bfloat16 reads as float32 with numpy, unless asked to stay bfloat16:
    cast={"bfloat16": "bfloat16"} gives ml_dtypes.bfloat16 arrays (JAX's type; ml_dtypes
    comes with `pip install tfckpt[jax]`), bit for bit, and likewise the float8 types;
    raw=True gives the uint16 bits. With torch, bfloat16 is torch.bfloat16.
    `nested=True` returns nested dicts by name path ("a/b/c" ->
    d["a"]["b"]["c"], TF2's /.ATTRIBUTES/VARIABLE_VALUE dropped), as jax.tree_util and
    Flax expect. Tensors numpy cannot hold (variants such as a saved iterator's state;
    float8 without raw) are left out with a warning, as `convert` leaves them out; with
    torch, string tensors are refused (DTypeError naming the tensor: exclude= them). The
    object graph is not included; string tensors are object arrays of bytes. An `include`
    that matches no tensor raises KeyError (naming it), as ckpt[name] does."""
    includes = [_stored(v) for v in _texts("load", "include", include)]
    excludes = [_stored(v) for v in _texts("load", "exclude", exclude)]
    renames = [_stored(v) for v in _renames("load", rename)]
    drop_optimizer = _flag("load", "drop_optimizer", drop_optimizer)
    verify = _flag("load", "verify", verify)
    raw = _flag("load", "raw", raw)
    nested = _flag("load", "nested", nested)
    framework = _framework("load", framework)
    mmap = _flag("load", "mmap", mmap)
    casts = _casts("load", cast, framework)
    out, skipped = {}, []
    with open(ckpt, framework="np", mmap=mmap, endpoint_url=endpoint_url, profile=profile, region=region,
              no_sign_request=no_sign_request) as c:
        core = c._open()
        pt = framework == "pt"
        for pattern in includes:  # (an include that matches no tensor names a missing one)
            if not core.select([pattern], [], [], False):
                raise KeyError(_name(pattern))
        for stored, new in core.select(includes, excludes, renames, drop_optimizer):
            name, new = _name(stored), _name(new)
            if new in out:
                raise UsageError(f"rename: two tensors both become {new!r}", "usage")
            info = c.info(name)
            if pt and info.dtype == "string":
                raise DTypeError(f"tensor {name!r} has dtype string, which torch cannot hold "
                                 "(leave it out: exclude=, or load it with framework='np')", name)
            to = casts.get(info.dtype)
            # Kept in its own type through ml_dtypes (cast={"bfloat16": "bfloat16"}): its bits, viewed.
            same = (not pt and isinstance(to, _np.dtype) and info.dtype in _ML_DTYPES
                    and to.name == _ML_DTYPES[info.dtype])
            try:
                array = c.read(name, verify=verify,
                               raw=raw or same or (pt and info.dtype in ("bfloat16", *_TORCH_FLOAT8)))
            except DTypeError:  # a dtype numpy has no type for
                skipped.append(f"{name} ({info.dtype})")
                continue
            if same:
                out[new] = array.view(to)
                continue
            as_read = info.dtype if pt and info.dtype in ("bfloat16", *_TORCH_FLOAT8) else _dtype_key(array.dtype)
            to = casts.get(info.dtype, casts.get(as_read))
            if pt:
                tensor = _to_torch(array, name, info.dtype)
                out[new] = tensor if to is None else tensor.to(to)
            else:
                out[new] = array if to is None else array.astype(to)
    if skipped:
        _warnings.warn(f"tfckpt.load left out {len(skipped)} tensor(s) {'torch' if framework == 'pt' else 'numpy'} "
                       f"cannot hold: {', '.join(skipped[:5])}" + (" ..." if len(skipped) > 5 else ""), stacklevel=2)
    return _nest(out) if nested else out


def _request(command, params, kinds):
    """The request of `command` from its keyword arguments, each checked against its kind
    (an ArgumentTypeError names the parameter); None and False leave an option out."""
    out = {}
    for name, value in params.items():
        kind = kinds[name]
        if value is None:
            continue
        if kind == "path":
            out[name] = _path(command, name, value)
        elif kind == "paths":
            values = [value] if isinstance(value, (str, bytes)) or hasattr(value, "__fspath__") else value
            if not isinstance(values, (list, tuple)):
                raise ArgumentTypeError(f"{command}(): {name} must be a path or a list of paths, "
                                        f"not {type(value).__name__}")
            out[name] = [_path(command, name, v) for v in values]
        elif kind == "text":
            if not isinstance(value, str):
                raise ArgumentTypeError(f"{command}(): {name} must be a str, not {type(value).__name__}")
            out[name] = _stored(value)
        elif kind == "texts":
            out[name] = [_stored(v) for v in _texts(command, name, value)]
        elif kind == "renames":
            out[name] = [_stored(v) for v in _renames(command, value)]
        elif kind == "flag":
            if _flag(command, name, value):
                out[name] = True
        elif kind == "int":
            # (Its range is the command line's, checked by the library: option table.)
            if isinstance(value, bool) or not isinstance(value, (int, _np.integer)):
                raise ArgumentTypeError(f"{command}(): {name} must be an int, not {type(value).__name__}")
            out[name] = int(value)
        elif kind == "duration":
            if isinstance(value, bool) or not isinstance(value, (int, _np.integer, str)):
                raise ArgumentTypeError(f"{command}(): {name} must be seconds (int) or a str such as \"2h\", "
                                        f"not {type(value).__name__}")
            out[name] = _stored(str(int(value)) if not isinstance(value, str) else value)
        elif kind == "optional-choice":
            if not isinstance(value, (bool, str)):
                raise ArgumentTypeError(f"{command}(): {name} must be True or a str, not {type(value).__name__}")
            if value is not False:
                out[name] = True if value is True else _stored(value)
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float, _np.integer, _np.floating)):
                raise ArgumentTypeError(f"{command}(): {name} must be a number, not {type(value).__name__}")
            out[name] = float(value)
    return out


def _command(command, request):
    """Runs `command` in the library (Ctrl-C stops it: it leaves nothing behind, and
    KeyboardInterrupt is raised); its report, the document `tfckpt COMMAND --json` prints."""
    document, failure, late = _core.command(command, request)
    doc = _json.loads(_text(document)) if document else None
    if late:
        _warnings.warn(f"tfckpt.{command}: interrupted after the output began to be published: the call was "
                       "finished instead (its output is complete)", stacklevel=3)
        raise KeyboardInterrupt
    if failure is None:
        return doc
    code, check_id, message, file, key, offset = failure
    if code == _NOT_FOUND and not file:
        file = request.get("ckpt") or request.get("src") or (request.get("ckpts") or [b""])[0]
    if check_id in _CHECK_FAILURES or (command == "validate" and isinstance(doc, dict) and doc.get("errors")):
        error = CheckFailedError(_text(message), check_id, _name(file) if file else None, _name(key) if key else None,
                                 None if offset < 0 else offset)
    else:
        error = _error_for_status(code, check_id, message, file, key, offset)
    error.report = doc
    raise error


# Check ids of failures that are a check failing (exit status 1), not an input or a request.
_CHECK_FAILURES = {"output.mismatch", "merge.parallel-differs", "merge.replica-differs"}


def _command_function(command, prepare=None, more_doc=""):
    """The function of `command`, its keywords, their checks and its docstring from the option
    table (src/options/table.py, generated into _options.py): the long options of
    `man tfckpt-COMMAND` with '-' as '_', except --json (it returns that document) and
    --quiet (it prints nothing). `prepare(arguments)` may change the arguments first, or
    return (True, result) to answer itself."""
    summary, params = _options.COMMANDS[command]
    kinds = {p["keyword"]: p["kind"] for p in params}
    P = _pyinspect.Parameter
    signature = _pyinspect.Signature([
        P(p["keyword"], P.POSITIONAL_OR_KEYWORD if p["positional"] else P.KEYWORD_ONLY,
          default=P.empty if p["required"] else (False if p["kind"] == "flag" else None)) for p in params])

    def function(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise ArgumentTypeError(f"{command}(): {e}") from None
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if prepare is not None:
            answered = prepare(arguments)
            if answered is not None:
                return answered[1]
        return _command(command, _request(command, arguments, kinds))

    function.__name__ = function.__qualname__ = command
    function.__module__ = __name__
    function.__signature__ = signature
    lines = [summary, "", f"Keywords (the long options of man tfckpt-{command}, '-' as '_'):"]
    lines += [f"  {p['keyword']}: {p['help']}" for p in params]
    function.__doc__ = "\n".join(lines) + "\n\nReturns the document `--json` prints." + more_doc
    return function


def _prepare_reshard(arguments):
    policy, task = arguments["policy"], arguments["task"]
    if isinstance(task, (int, _np.integer)) and not isinstance(task, bool):
        arguments["task"] = str(int(task))
    if callable(policy):
        if arguments["execute"] is not None or arguments["finalize"] is not None:
            raise UsageError("reshard(): a sharding callback as policy plans a reshard; execute= and finalize= run "
                             "a plan already made", "usage")
        options = {k: v for k, v in arguments.items() if k not in ("policy", "execute", "finalize")}
        return True, _reshard_by_callback(policy, options)
    return None


_RESHARD_CALLBACK_DOC = """

`policy` may also be your own sharding callback, as TensorFlow's
tf.train.experimental.ShardingCallback: any callable (a class with `description` and
`__call__`). As TF's MultiDeviceSaver does, it is called once per task (input data
file) with that task's pieces, as `partition` cuts them, as ShardableTensor objects,
and returns a list of shards, each {checkpoint_key: {slice_spec: tensor}}; shard N is
data file N. `tensor` is the piece's TensorStandIn (or anything with .shape and
.dtype); index it (t[0:4]) to cut the tensor anew, under that part's `slice_spec`, as
MaxShardSizePolicy does. The shards are checked by every rule of TF's validate_shards,
a violation a UsageError in TF's words (description, key, slice, original and new
values): they are resharded as `policy="file:SHARDS.json"` (man tfckpt-reshard)."""


def _prepare_convert(arguments):
    cast, size = arguments["cast"], arguments["max_file_size"]
    if isinstance(cast, dict):
        arguments["cast"] = [f"{_dtype_key(k) or k}={_dtype_key(v) or v}" for k, v in cast.items()]
    if isinstance(size, (int, _np.integer)) and not isinstance(size, bool):
        arguments["max_file_size"] = str(int(size))
    return None


inspect = _command_function("inspect")
validate = _command_function("validate")
reshard = _command_function("reshard", _prepare_reshard, _RESHARD_CALLBACK_DOC)


# ---------------------------------------------------------------------------------------
# The user's own sharding callback (reshard(policy=callable)): TensorFlow's ShardableTensor
# and ShardingCallback (tensorflow/python/checkpoint/sharding/sharding_util.py), offline.

class _DTypeName(str):
    """A dtype as TensorFlow names it ("float32"), with `.name` as a tf.DType has it."""

    @property
    def name(self):
        return str(self)


def _spec(full_shape, offset, shape):
    """TF's slice spec (Variable.SaveSliceInfo.spec, stripped): "10 3 0,4:0,3"; "" whole."""
    if tuple(offset) == (0,) * len(shape) and tuple(shape) == tuple(full_shape):
        return ""
    return (" ".join("%d" % d for d in full_shape) + " " +
            ":".join("%d,%d" % (o, s) for o, s in zip(offset, shape))).strip()


@_dataclass(frozen=True)
class TensorStandIn:
    """What a sharding callback's ShardableTensor.tensor is (tfckpt moves bytes, it holds
    no tensors): the `shape`, `dtype` and `device` of a piece at `offset` in a tensor of
    `full_shape`. Index it with slices (t[0:4], t[:, 2:]) for a part of the piece, as
    MaxShardSizePolicy cuts one with array_ops.slice (which keeps every axis); the part's
    `slice_spec` is the key to put it under. dataclasses.replace(t, dtype=..., device=...)
    gives another; numpy arrays and torch tensors may stand in as well."""
    shape: tuple
    dtype: str
    device: str = ""
    full_shape: tuple = None  # None: `shape` (the piece is the whole tensor)
    offset: tuple = None      # None: zeros

    def __post_init__(self):
        shape = tuple(int(d) for d in self.shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", _DTypeName(getattr(self.dtype, "name", self.dtype)))
        full, offset = self.full_shape, self.offset
        object.__setattr__(self, "full_shape", shape if full is None else tuple(int(d) for d in full))
        object.__setattr__(self, "offset", (0,) * len(shape) if offset is None else tuple(int(o) for o in offset))

    @property
    def slice_spec(self):
        """TF's slice spec of this piece in its tensor ("10 3 0,4:0,3"; "" whole)."""
        return _spec(self.full_shape, self.offset, self.shape)

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        if len(keys) > len(self.shape):
            raise IndexError(f"too many indices: the tensor is {len(self.shape)}-dimensional, {len(keys)} were given")
        offset, shape = list(self.offset), list(self.shape)
        for axis, k in enumerate(keys):
            if not isinstance(k, slice) or k.step not in (None, 1):
                raise IndexError("a piece is cut with slices of step 1 (t[3:4], not t[3]), as array_ops.slice keeps "
                                 "every axis")
            begin, end, _ = k.indices(shape[axis])
            offset[axis] += begin
            shape[axis] = max(0, end - begin)
        return TensorStandIn(tuple(shape), self.dtype, self.device, self.full_shape, tuple(offset))


@_dataclass(frozen=True)
class ShardableTensor:
    """What a sharding callback receives, one per piece, with the fields of TensorFlow's
    tf.train.experimental.ShardableTensor: `checkpoint_key`, `slice_spec` (TF's form,
    "10 3 0,4:0,3", or "" for a whole tensor), `shape` (of the piece), `dtype` (TF's name,
    with .name), `device` ("/job:worker/task:K", K the input data file the piece is in, as
    --policy by-task treats it), `name` (the key), `tensor` (a TensorStandIn); no
    trackable or save spec (None)."""
    _tensor_save_spec: object
    tensor: TensorStandIn
    dtype: str
    device: str
    name: str
    shape: tuple
    slice_spec: str
    checkpoint_key: str
    trackable: object


def _extents(spec, shape):
    """(offset, shape) of a piece from its spec as --dry-run --json prints it ("0,5:-")."""
    if not spec:
        return (0,) * len(shape), tuple(shape)
    offset, size = [], []
    for axis, part in enumerate(spec.split(":")):
        if part == "-":
            offset.append(0)
            size.append(shape[axis])
        else:
            start, length = part.split(",")
            offset.append(int(start))
            size.append(int(length))
    return tuple(offset), tuple(size)


_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _shardable_tensors(plan):
    """The ShardableTensors of a --dry-run --json plan made with policy "by-task", by task:
    {task: [ShardableTensor]} in the order TF hands them to a policy (the object graph
    last), each piece on the task the plan gives it."""
    by_task, graph = {}, []
    for t in plan["tensors"]:
        full = tuple(t["shape"])
        for piece in t["new"]:
            task = piece["task"]
            offset, shape = _extents(piece["spec"], full)
            device = f"/job:worker/task:{task}"
            dtype = _DTypeName(t["dtype"])
            stand_in = TensorStandIn(shape, dtype, device, full, offset)
            spec = "" if shape == full else " ".join("%d" % d for d in full) + " " + piece["spec"]
            s = ShardableTensor(None, stand_in, dtype, device, t["name"], shape, spec, t["name"], None)
            (graph if t["name"] == _OBJECT_GRAPH else by_task.setdefault(task, [])).append((task, s))
    for task, s in graph:
        by_task.setdefault(task, []).append((task, s))
    return {task: [s for _, s in pieces] for task, pieces in sorted(by_task.items())}


def _callback_description(callback):
    description = getattr(callback, "description", None)
    if description is None:
        description = getattr(callback, "__name__", None) or type(callback).__name__
    return str(description)


def _shard_entry(where, key, spec, tensor):
    """One entry of SHARDS.json (man tfckpt-reshard, file:) from what a callback returned."""
    if not isinstance(key, str) or not isinstance(spec, str):
        raise UsageError(f"{where}: checkpoint keys and slice specs are str, not {type(key).__name__} and "
                         f"{type(spec).__name__} ({key!r}: {{{spec!r}: ...}})", "usage")
    entry = {"key": key, "slice": spec}
    shape, dtype = getattr(tensor, "shape", None), getattr(tensor, "dtype", None)
    if shape is None or dtype is None:
        raise UsageError(f"{where}: {key!r} slice {spec!r}: the tensor is a {type(tensor).__name__}, which has no "
                         "shape and dtype (return the ShardableTensor's .tensor, or a part of it: tensor[a:b])",
                         "usage")
    try:
        entry["shape"] = [int(d) for d in shape]
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {key!r} slice {spec!r}: shape {shape!r} is not a list of ints", "usage") from None
    name = _dtype_key(dtype)
    if name is None and isinstance(getattr(dtype, "name", None), str):
        name = _dtype_key(dtype.name)
    if name is None:
        raise UsageError(f"{where}: {key!r} slice {spec!r}: dtype {dtype!r} names no dtype", "usage")
    entry["dtype"] = name
    device = getattr(tensor, "device", None)
    if hasattr(device, "to_string"):  # a tf.DeviceSpec
        device = device.to_string()
    if isinstance(device, str) and device.startswith("/"):  # not numpy's "cpu"
        entry["device"] = device
    return entry


def _reshard_by_callback(callback, options):
    """reshard(policy=callback): the pieces of a dry run, the callback once per task, its
    shards resharded as policy="file:SHARDS.json" (checked there by validate_shards)."""
    description = _callback_description(callback)
    probe = {k: v for k, v in options.items() if k not in ("dry_run", "force", "no_verify", "plan", "task")}
    plan = reshard(**probe, policy="by-task", dry_run=True)
    where = f"sharding callback {description!r}"
    shards = []
    for tensors in _shardable_tensors(plan).values():
        got = callback(tensors)
        if isinstance(got, (str, bytes, dict)) or not hasattr(got, "__iter__"):
            raise UsageError(f"{where} returned a {type(got).__name__}, not a list of shards "
                             "[{checkpoint_key: {slice_spec: tensor}}, ...]", "usage")
        for shard in got:
            if not hasattr(shard, "items"):
                raise UsageError(f"{where} returned a shard that is a {type(shard).__name__}, not a dict "
                                 "{checkpoint_key: {slice_spec: tensor}}", "usage")
            entries = []
            for key, slices in shard.items():
                if not hasattr(slices, "items"):
                    raise UsageError(f"{where}: {key!r} maps to a {type(slices).__name__}, not a dict "
                                     "{slice_spec: tensor}", "usage")
                entries.extend(_shard_entry(where, key, spec, tensor) for spec, tensor in slices.items())
            shards.append(entries)
    fd, path = _tempfile.mkstemp(prefix="tfckpt-shards-", suffix=".json")
    try:
        with _os.fdopen(fd, "w") as f:
            _json.dump({"description": description, "shards": shards}, f)
        return reshard(**options, policy="file:" + path)
    finally:
        _os.unlink(path)


merge = _command_function("merge")
convert = _command_function("convert", _prepare_convert,
                            "\n\ncast may also be a dict {FROM: TO} of dtypes; max_file_size an int of bytes.")


from . import train  # noqa: E402 (tfckpt.train uses the above)
