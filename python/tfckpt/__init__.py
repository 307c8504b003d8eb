"""TensorFlow checkpoints in Python without TensorFlow.

    import tfckpt
    with tfckpt.open("train/model.ckpt-1000") as ckpt:
        for t in ckpt.tensors():
            print(t.name, t.dtype, t.shape)
        kernel = ckpt["dense/kernel"]                         # numpy array, CRC-checked
        rows = ckpt.get_slice("embedding")[1000:1010, :]      # reads only those rows
    state = tfckpt.load("model.ckpt-1000", drop_optimizer=True)   # dict of numpy arrays

A CKPT is anything the `tfckpt` command line takes: a prefix, its .index file, a directory
with a `checkpoint` state file, a SavedModel directory, a V1 file, or safetensors.
Errors raise tfckpt.Error (CorruptInputError for damaged or unreadable input, UsageError
for refused requests); bad arguments raise TypeError, IndexError or ValueError like numpy.
"""

import json as _json
import operator as _operator
import os as _os
import warnings as _warnings
from dataclasses import dataclass as _dataclass

import numpy as _np

from . import _core

__all__ = ["open", "load", "inspect", "validate", "reshard", "merge", "convert", "Checkpoint", "TensorInfo", "SliceInfo",
           "Error", "UsageError", "CorruptInputError", "CheckFailedError"]


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


class UsageError(Error, ValueError):
    """A request tfckpt refuses (bad option, output over an input, ...): exit code 2."""


class CorruptInputError(Error):
    """Unreadable, missing or damaged input, or an I/O failure: exit code 3."""


class CheckFailedError(Error):
    """A check failed (validation, verification of an output): exit code 1."""


# absl::StatusCode values that are the caller's fault.
_USAGE_CODES = {3, 6}  # INVALID_ARGUMENT, ALREADY_EXISTS


def _text(raw):
    return raw.decode("utf-8", "replace")


def _error_for_status(code, check_id, message, file, key, offset):
    """The exception for a library error (called by _core): the fields of the command
    line's --json error document."""
    cls = UsageError if code in _USAGE_CODES else CorruptInputError
    return cls(_text(message), check_id, _name(file) if file else None, _name(key) if key else None,
               None if offset < 0 else offset)


def _name(raw):
    """A stored name (bytes, not always UTF-8) as str; _stored() turns it back."""
    return raw.decode("utf-8", "surrogateescape")


def _stored(name):
    return name.encode("utf-8", "surrogateescape")


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


def _box(key, shape):
    """numpy basic indexing of `shape` by `key` -> (start, box shape, picks, keep_0d):
    the box is the smallest region holding every selected element; `picks` then selects
    them out of the box read (steps, integer axes dropped, None/newaxis axes added);
    keep_0d: a selection with `...` gives a 0-d array where numpy gives one."""
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
            if step <= 0:
                raise ValueError("slice step must be positive (read, then reverse with numpy)")
            count = max(0, (e - b + step - 1) // step)
            start.append(b if count else 0)
            box.append((count - 1) * step + 1 if count else 0)
            picks.append(slice(None, None, step))
        else:
            if isinstance(k, (bool, _np.bool_)) or not hasattr(k, "__index__"):
                raise IndexError("only integers, slices (`:`), ellipsis (`...`) and numpy.newaxis (`None`) "
                                 f"are valid indices, not {type(k).__name__}")
            i = _operator.index(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            start.append(i % n)
            box.append(1)
            picks.append(0)
        axis += 1
    return start, box, tuple(picks), ellipses > 0


class TensorSlice:
    """`ckpt.get_slice(name)[...]`: reads only the bytes the selection needs. Pieces read
    only in part cannot have their CRC checked (a CRC covers a whole stored piece)."""

    def __init__(self, ckpt, info, raw):
        self._ckpt, self._info, self._raw = ckpt, info, raw

    @property
    def shape(self):
        return self._info.shape

    @property
    def dtype(self):
        return self._info.dtype

    # A step that skips at least this many bytes between the elements it selects is read
    # element by element along its axis instead of as one box.
    _SPARSE_STEP_BYTES = 1 << 20

    def _read(self, start, box, steps):
        """The box [start, start + box) with `steps` (one per axis) applied: one read, or,
        along the first axis whose step skips much, one read per selected index."""
        core, name = self._ckpt._open(), _stored(self._info.name)
        elements = 1
        for n in self._info.shape:
            elements *= n
        itemsize = self._info.bytes // elements if elements else 0
        inner = itemsize
        for axis in range(len(box) - 1, -1, -1):
            if steps[axis] > 1 and (steps[axis] - 1) * inner >= self._SPARSE_STEP_BYTES and box[axis] > 1:
                parts = []
                for j in range(0, box[axis], steps[axis]):
                    sub_start, sub_box, sub_steps = list(start), list(box), list(steps)
                    sub_start[axis], sub_box[axis], sub_steps[axis] = start[axis] + j, 1, 1
                    parts.append(self._read(sub_start, sub_box, sub_steps))
                return _np.concatenate(parts, axis=axis)
            inner *= box[axis]
        array = core.read(name, start, box, self._raw, False)
        return array[tuple(slice(None, None, s) for s in steps)] if any(s > 1 for s in steps) else array

    def __getitem__(self, key):
        start, box, picks, keep_0d = _box(key, self._info.shape)
        steps = [p.step if isinstance(p, slice) else 1 for p in picks if p is not None]
        array = self._read(start, box, steps)
        # Integer axes and new axes, as numpy (the steps are applied already).
        picks = tuple(slice(None) if isinstance(p, slice) else p for p in picks)
        array = array[picks] if picks else array
        if isinstance(array, _np.ndarray) and array.ndim == 0 and not keep_0d:
            return array[()]  # numpy gives a scalar for a single element
        if not isinstance(array, _np.ndarray) and keep_0d:
            return _np.array(array, dtype=object if isinstance(array, bytes) else None)
        return array


class Checkpoint:
    """An opened checkpoint. Use tfckpt.open(); a context manager; `in`, len(), iteration
    over names, ckpt[name] for a whole tensor."""

    def __init__(self, core):
        self._core = core
        # Names and TensorInfo are made on first use: a checkpoint may hold hundreds of
        # thousands of tensors, and opening it should cost what the index does.
        self._names = None
        self._infos = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Drops this handle (arrays read zero-copy keep their data file mapped)."""
        self._core = None

    def _open(self):
        if self._core is None:
            raise ValueError("I/O operation on a closed checkpoint")
        return self._core

    def _all_names(self):
        if self._names is None:
            self._names = [_name(raw) for raw in self._open().names()]
        return self._names

    def tensors(self):
        """Every logical tensor as TensorInfo, in name order."""
        return [self.info(name) for name in self._all_names()]

    def keys(self):
        return list(self._all_names())

    def __len__(self):
        return len(self._open())

    def __iter__(self):
        return iter(self._all_names())

    def __contains__(self, name):
        return isinstance(name, str) and _stored(name) in self._open()

    def info(self, name):
        """The TensorInfo of one tensor (KeyError when absent)."""
        info = self._infos.get(name)
        if info is None:
            if not isinstance(name, str):
                raise TypeError(f"tensor names are str, not {type(name).__name__}")
            core = self._open()
            if _stored(name) not in core:
                raise KeyError(name)
            info = self._infos[name] = _tensor_info(core.describe(_stored(name)))
        return info

    def read(self, name, *, raw=False, verify=True):
        """The whole logical tensor `name` as a numpy array (partitions assembled). Stored
        CRCs are checked unless verify=False. bfloat16 reads as float32 unless raw=True
        (uint16 bit patterns); strings as an object array of bytes. Read-only and backed by
        the file's mapping where the stored bytes already are the array."""
        info = self.info(name)
        return self._open().read(_stored(name), [0] * len(info.shape), list(info.shape), raw, verify)

    def __getitem__(self, name):
        return self.read(name)

    def get_slice(self, name, *, raw=False):
        """A view whose [...] reads only the selected part of tensor `name` (numpy basic
        indexing: integers, slices with positive steps, ...)."""
        info = self.info(name)
        self._open()
        return TensorSlice(self, info, raw)

    def object_graph(self):
        """The TF2 object graph: {object path: {attribute name: checkpoint key}}, plus
        slot variables as VAR/.OPTIMIZER_SLOT/OPTIMIZER/SLOT paths; None for TF1
        checkpoints."""
        nodes = self._open().object_graph()
        if nodes is None:
            return None
        out = {}
        for n in nodes:
            if n["attributes"]:
                out[_name(n["path"])] = {_name(a["name"]): _name(a["checkpoint_key"]) for a in n["attributes"]}
        return out


def open(ckpt):  # noqa: A001 (the module's verb, like io.open)
    """Opens a checkpoint: any CKPT the command line takes (a path: str, bytes or
    os.PathLike). Returns a Checkpoint."""
    return Checkpoint(_core.open(_fs(ckpt)))


def _casts(cast):
    """cast as {from: to} dtype names: a dict, "FROM=TO", or a list of "FROM=TO"."""
    if cast is None:
        return {}
    if isinstance(cast, dict):
        return dict(cast)
    out = {}
    for item in [cast] if isinstance(cast, str) else cast:
        src, sep, dst = item.partition("=")
        if not sep or not src or not dst:
            raise UsageError(f"cast: {item!r} is not FROM=TO (e.g. float32=float16)")
        out[src] = dst
    return out


def load(ckpt, include=None, exclude=None, rename=None, cast=None, drop_optimizer=False, verify=True, raw=False):
    """Every tensor of `ckpt` as {name: numpy array}, the shape `load_state_dict` or a JAX
    pytree wants. The selection works as in `tfckpt merge`/`convert`: `include`/`exclude`
    are regular expressions (RE2 syntax, or lists of them) searched in names; `rename` is
    "REGEX=REPLACEMENT" (or a list, applied in order; $1 refers to a group);
    `drop_optimizer` leaves out optimizer slots and state like `merge --drop-optimizer`.
    `cast` converts by dtype: {"float64": "float32"}, or "FROM=TO" strings as `convert
    --cast` takes them; FROM is the stored dtype (bfloat16 too), TO a numpy dtype.
    bfloat16 reads as float32 (raw=True: its uint16 bits; float8 as uint8 bits). Tensors
    numpy cannot hold (variants such as a saved iterator's state; float8 without raw) are
    left out with a warning, as `convert` leaves them out. The object graph is not
    included; string tensors are object arrays of bytes."""
    def patterns(v):
        return [] if v is None else [_stored(v)] if isinstance(v, str) else [_stored(x) for x in v]
    casts = _casts(cast)
    out, skipped = {}, []
    with open(ckpt) as c:
        core = c._open()
        for stored, new in core.select(patterns(include), patterns(exclude), patterns(rename), drop_optimizer):
            name, new = _name(stored), _name(new)
            if new in out:
                raise UsageError(f"rename: two tensors both become {new!r}")
            dtype = c.info(name).dtype
            try:
                array = c.read(name, verify=verify, raw=raw)
            except TypeError:  # a dtype numpy has no type for
                skipped.append(f"{name} ({dtype})")
                continue
            to = casts.get(dtype, casts.get(str(array.dtype)))
            if to is not None:
                try:
                    array = array.astype(_np.dtype(to))
                except TypeError:
                    raise UsageError(f"cast: numpy has no dtype {to!r}") from None
            out[new] = array
    if skipped:
        _warnings.warn(f"tfckpt.load left out {len(skipped)} tensor(s) numpy cannot hold: {', '.join(skipped[:5])}"
                       + (" ..." if len(skipped) > 5 else ""), stacklevel=2)
    return out


def _fs(p):
    """A path as the bytes the file system has (names need not be UTF-8)."""
    if not isinstance(p, (str, bytes)) and not hasattr(p, "__fspath__"):
        raise TypeError(f"expected a path, not {type(p).__name__}")
    return _os.fsencode(p)


def _request(command, params, kinds):
    """The request of `command` from its keyword arguments, each checked against its kind
    (a TypeError names the parameter); None and False leave an option out."""
    out = {}
    for name, value in params.items():
        kind = kinds[name]
        if value is None:
            continue
        if kind == "path":
            if not isinstance(value, (str, bytes)) and not hasattr(value, "__fspath__"):
                raise TypeError(f"{command}(): {name} must be a path (str, bytes or os.PathLike), "
                                f"not {type(value).__name__}")
            out[name] = _os.fsencode(value)
        elif kind == "paths":
            values = [value] if isinstance(value, (str, bytes)) or hasattr(value, "__fspath__") else value
            try:
                out[name] = [_fs(v) for v in values]
            except TypeError:
                raise TypeError(f"{command}(): {name} must be a path or a list of paths") from None
        elif kind == "text":
            if not isinstance(value, str):
                raise TypeError(f"{command}(): {name} must be a str, not {type(value).__name__}")
            out[name] = _stored(value)
        elif kind == "texts":
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
                raise TypeError(f"{command}(): {name} must be a str or a list of str")
            out[name] = [_stored(v) for v in values]
        elif kind == "flag":
            if not isinstance(value, bool):
                raise TypeError(f"{command}(): {name} must be True or False, not {type(value).__name__}")
            if value:
                out[name] = True
        elif kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{command}(): {name} must be an int, not {type(value).__name__}")
            out[name] = value
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{command}(): {name} must be a number, not {type(value).__name__}")
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
    if check_id in _CHECK_FAILURES or (command == "validate" and isinstance(doc, dict) and doc.get("errors")):
        error = CheckFailedError(_text(message), check_id, _name(file) if file else None, _name(key) if key else None,
                                 None if offset < 0 else offset)
    else:
        error = _error_for_status(code, check_id, message, file, key, offset)
    error.report = doc
    raise error


# Check ids of failures that are a check failing (exit status 1), not an input or a request.
_CHECK_FAILURES = {"output.mismatch", "merge.parallel-differs", "merge.replica-differs"}

_COMMON = {"jobs": "int", "connections": "int"}


def inspect(ckpt, *, filter=None, tensor=None, all_values=False, stats=False, tree=False, index_only=False,
            connections=None):
    """`tfckpt inspect CKPT --json`: the listing (filter="kernel"), the values of tensors
    (tensor=["global_step"]), statistics (stats=True) or the object graph (tree=True).
    Returns the document --json prints."""
    return _command("inspect", _request("inspect", dict(
        ckpt=ckpt, filter=filter, tensor=tensor, all_values=all_values, stats=stats, tree=tree, index_only=index_only,
        connections=connections), dict(ckpt="path", filter="text", tensor="texts", all_values="flag", stats="flag",
                                       tree="flag", index_only="flag", **_COMMON)))


def validate(ckpt, *, against=None, strict=False, quick=False, abort_uploads=False, tolerance=None, report=False,
             jobs=None, connections=None):
    """`tfckpt validate CKPT --json`: every check, or with against=OLD logical equality
    (tolerance=0.01 for floats, report=True for the numbers of each difference). Returns
    the report; raises CheckFailedError (with .report) when a check fails."""
    return _command("validate", _request("validate", dict(
        ckpt=ckpt, against=against, strict=strict, quick=quick, abort_uploads=abort_uploads, tolerance=tolerance,
        report=report, jobs=jobs, connections=connections), dict(
        ckpt="path", against="path", strict="flag", quick="flag", abort_uploads="flag", tolerance="number",
        report="flag", **_COMMON)))


def reshard(ckpt=None, output=None, *, partition=None, policy=None, dry_run=False, force=False, no_verify=False,
            bytes_per_string=None, plan=None, execute=None, task=None, finalize=None, jobs=None, connections=None):
    """`tfckpt reshard CKPT -o OUTPUT --json`: partition=["fixed:3"], policy="shards:4",
    dry_run=True, ...; the scale-out steps plan="plan.json", execute="plan.json" with
    task=0 (or "auto"), finalize="plan.json". Returns what --json prints."""
    if isinstance(task, int) and not isinstance(task, bool):
        task = str(task)
    return _command("reshard", _request("reshard", dict(
        ckpt=ckpt, output=output, partition=partition, policy=policy, dry_run=dry_run, force=force,
        no_verify=no_verify, bytes_per_string=bytes_per_string, plan=plan, execute=execute, task=task,
        finalize=finalize, jobs=jobs, connections=connections), dict(
        ckpt="path", output="path", partition="texts", policy="text", dry_run="flag", force="flag", no_verify="flag",
        bytes_per_string="int", plan="path", execute="path", task="text", finalize="path", **_COMMON)))


def merge(ckpts, output=None, *, recover=False, allow_missing=False, move=False, force=False, no_verify=False,
          on_conflict=None, include=None, exclude=None, rename=None, drop_optimizer=False, average=False,
          collapse_parallel=None, expand_parallel=None, collapse_replicas=False, no_check=False, dry_run=False,
          jobs=None, connections=None):
    """`tfckpt merge CKPT... -o OUTPUT --json`: drop_optimizer=True, average=True,
    recover=True (then `output` may be omitted), ... Returns what --json prints."""
    if collapse_parallel is True:
        collapse_parallel = "check"
    return _command("merge", _request("merge", dict(
        ckpts=ckpts, output=output, recover=recover, allow_missing=allow_missing, move=move, force=force,
        no_verify=no_verify, on_conflict=on_conflict, include=include, exclude=exclude, rename=rename,
        drop_optimizer=drop_optimizer, average=average, collapse_parallel=collapse_parallel,
        expand_parallel=expand_parallel, collapse_replicas=collapse_replicas, no_check=no_check, dry_run=dry_run,
        jobs=jobs, connections=connections), dict(
        ckpts="paths", output="path", recover="flag", allow_missing="flag", move="flag", force="flag",
        no_verify="flag", on_conflict="text", include="texts", exclude="texts", rename="texts", drop_optimizer="flag",
        average="flag", collapse_parallel="text", expand_parallel="int", collapse_replicas="flag", no_check="flag",
        dry_run="flag", **_COMMON)))


def convert(src, output, *, to=None, cast=None, include=None, exclude=None, rename=None, max_file_size=None,
            partition=None, strict=False, force=False, no_verify=False, jobs=None, connections=None):
    """`tfckpt convert SRC -o OUTPUT --json`: to="safetensors", cast="float32=bfloat16" (or
    {"float32": "bfloat16"}), max_file_size="5G", ... Returns what --json prints."""
    if isinstance(cast, dict):
        cast = [f"{k}={v}" for k, v in cast.items()]
    if isinstance(max_file_size, int) and not isinstance(max_file_size, bool):
        max_file_size = str(max_file_size)
    return _command("convert", _request("convert", dict(
        src=src, output=output, to=to, cast=cast, include=include, exclude=exclude, rename=rename,
        max_file_size=max_file_size, partition=partition, strict=strict, force=force, no_verify=no_verify, jobs=jobs,
        connections=connections), dict(
        src="path", output="path", to="text", cast="texts", include="texts", exclude="texts", rename="texts",
        max_file_size="text", partition="texts", strict="flag", force="flag", no_verify="flag", **_COMMON)))
