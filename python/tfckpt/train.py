"""TensorFlow's checkpoint reading API without TensorFlow: the names and behaviour of
tf.train.load_checkpoint, list_variables, load_variable and latest_checkpoint (and
tf.compat.v1.train.NewCheckpointReader), so that a script that reads checkpoints with them
runs after changing its import:

    from tfckpt import train           # was: import tensorflow as tf; ... tf.train
    reader = train.load_checkpoint("train/")      # a directory: its latest checkpoint
    shapes = reader.get_variable_to_shape_map()   # {name: [dims]}
    dtypes = reader.get_variable_to_dtype_map()   # {name: DType}, printed as tf.float32
    kernel = reader.get_tensor("dense/kernel")    # numpy array

As in TensorFlow: a directory is resolved through its `checkpoint` state file
(latest_checkpoint; ValueError when it has none), anything else is a checkpoint prefix;
partitioned variables are listed and read under their full names (pieces assembled); the
listing includes every stored tensor, _CHECKPOINTABLE_OBJECT_GRAPH too; get_tensor returns
a numpy array (a 0-d tensor as a numpy scalar, a string as bytes), and a missing tensor
or checkpoint raises NotFoundError. tfckpt also reads what tfckpt.open reads (safetensors,
SavedModel directories named by their variables prefix). bfloat16 tensors read as
ml_dtypes.bfloat16 where ml_dtypes is installed (as TensorFlow returns them), else as
float32.
"""

import os as _os
import re as _re

import numpy as _np

import tfckpt as _tfckpt
from tfckpt import _core

__all__ = ["load_checkpoint", "list_variables", "load_variable", "latest_checkpoint", "NewCheckpointReader",
           "CheckpointReader", "DType", "NotFoundError"]

NotFoundError = _tfckpt.NotFoundError


class DType:
    """A dtype as TensorFlow names it: `name` ("float32", "bfloat16", ...), printed as
    tf.float32 (repr) and <dtype: 'float32'> (str), equal to another DType or to its name;
    `as_numpy_dtype` the numpy type (None where numpy has none)."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    @property
    def name(self):
        return self._name

    @property
    def as_numpy_dtype(self):
        if self._name == "bfloat16":
            try:
                import ml_dtypes
                return ml_dtypes.bfloat16
            except ImportError:
                return None
        if self._name == "string":
            return object
        try:
            return _np.dtype(self._name).type
        except TypeError:
            return None

    @property
    def is_floating(self):
        return self._name.startswith(("float", "bfloat", "half", "double"))

    def __repr__(self):
        return f"tf.{self._name}"

    def __str__(self):
        return f"<dtype: {self._name!r}>"

    def __eq__(self, other):
        if isinstance(other, DType):
            return other._name == self._name
        if isinstance(other, str):
            return other == self._name
        return NotImplemented

    def __hash__(self):
        return hash(self._name)


def _as_path(value, where):
    if isinstance(value, bytes):
        return _os.fsdecode(value)
    if hasattr(value, "__fspath__"):
        return _os.fspath(value)
    if not isinstance(value, str):
        raise _tfckpt.ArgumentTypeError(f"{where}(): expected a path (str, bytes or os.PathLike), "
                                        f"not {type(value).__name__}")
    return value


class CheckpointReader:
    """TensorFlow's CheckpointReader: get_variable_to_shape_map(),
    get_variable_to_dtype_map(), has_tensor(name), get_tensor(name)."""

    def __init__(self, filepattern):
        path = _as_path(filepattern, "CheckpointReader")
        try:
            self._ckpt = _tfckpt.open(path)
        except NotFoundError as e:
            raise NotFoundError(f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files for "
                                f"{path} ({e.message})", e.check_id, e.file) from None
        self._shapes = None
        self._dtypes = None

    def _listing(self):
        if self._shapes is None:
            shapes, dtypes = {}, {}
            for raw, dtype, shape in self._ckpt._open().listing():
                name = raw.decode("utf-8", "surrogateescape")
                shapes[name] = list(shape)
                dtypes[name] = DType(dtype)
            self._shapes, self._dtypes = shapes, dtypes
        return self._shapes, self._dtypes

    def get_variable_to_shape_map(self):
        """{name: shape as a list of ints} for every stored tensor."""
        return dict(self._listing()[0])

    def get_variable_to_dtype_map(self):
        """{name: DType} for every stored tensor."""
        return dict(self._listing()[1])

    def has_tensor(self, tensor_str):
        """Whether a tensor of that name is stored (str or bytes)."""
        name = tensor_str.decode("utf-8", "surrogateescape") if isinstance(tensor_str, bytes) else tensor_str
        return isinstance(name, str) and name in self._ckpt

    def get_tensor(self, tensor_str):
        """The tensor's value as numpy: an array, or for a 0-d tensor a numpy scalar (bytes
        for a string). NotFoundError when no tensor has that name."""
        name = tensor_str.decode("utf-8", "surrogateescape") if isinstance(tensor_str, bytes) else tensor_str
        if not isinstance(name, str):
            raise _tfckpt.ArgumentTypeError(f"get_tensor(): tensor_str must be a str, not {type(name).__name__}")
        if name not in self._ckpt:
            raise NotFoundError(f"Key {name} not found in checkpoint", "not-found", None, name)
        dtype = self._ckpt.info(name).dtype
        if dtype == "bfloat16":
            bits = self._ckpt.read(name, raw=True)
            try:
                import ml_dtypes
                value = bits.view(ml_dtypes.bfloat16)
            except ImportError:
                value = self._ckpt.read(name)
        else:
            value = self._ckpt.read(name)
        return value[()] if value.ndim == 0 else value


def NewCheckpointReader(filepattern):  # noqa: N802 (TensorFlow's name)
    """tf.compat.v1.train.NewCheckpointReader: a CheckpointReader for a checkpoint prefix."""
    return CheckpointReader(filepattern)


def _unescape(text):
    """A protobuf text-format string's escapes (\\n, \\", \\\\, octal, \\x) -> bytes."""
    out, i = bytearray(), 0
    raw = text.encode("utf-8", "surrogateescape")
    while i < len(raw):
        c = raw[i]
        if c != 0x5C or i + 1 >= len(raw):
            out.append(c)
            i += 1
            continue
        n = chr(raw[i + 1])
        simple = {"n": 10, "t": 9, "r": 13, "a": 7, "b": 8, "f": 12, "v": 11, "\\": 92, "'": 39, '"': 34, "?": 63}
        if n in simple:
            out.append(simple[n])
            i += 2
        elif n in "01234567":
            m = _re.match(rb"[0-7]{1,3}", raw[i + 1:])
            out.append(int(m.group(0), 8) & 0xFF)
            i += 1 + len(m.group(0))
        elif n in "xX":
            m = _re.match(rb"[0-9a-fA-F]{1,2}", raw[i + 2:])
            if not m:
                out.append(c)
                i += 1
                continue
            out.append(int(m.group(0), 16))
            i += 2 + len(m.group(0))
        else:
            out.append(c)
            i += 1
    return bytes(out)


_MAX_PATH_BYTES = 4096  # PATH_MAX; as the command line (open.h: kMaxCheckpointPathBytes)
# (Each quoted string as "unrolled loops", [^"\\]*(?:\\.[^"\\]*)*: a run of plain characters
# is one step of the regex engine, not one backtracking frame per character, so a path of
# megabytes costs no more memory than its text.)
_MODEL_PATH = _re.compile(r'^\s*model_checkpoint_path\s*:\s*(?:"([^"\\]*(?:\\.[^"\\]*)*)"|\'([^\'\\]*(?:\\.[^\'\\]*)*)\')', _re.M)


def _join(directory, path):
    if _os.path.isabs(path) or "://" in path:
        return path
    if "://" in directory:
        return directory.rstrip("/") + "/" + path
    return _os.path.join(directory, path)


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix of the newest checkpoint in `checkpoint_dir`, as its state file (named
    `latest_filename`, default "checkpoint") names it (a relative path joined to the
    directory), when its files exist (PREFIX.index, or the V1 file or pattern PREFIX);
    None when there is no state file, it cannot be parsed, or the files are gone."""
    directory = _as_path(checkpoint_dir, "latest_checkpoint")
    name = "checkpoint" if latest_filename is None else _as_path(latest_filename, "latest_checkpoint")
    raw = _core.read_small_file(_os.fsencode(_join(directory, name)), {})
    if raw is None:
        return None
    text = raw.decode("utf-8", "surrogateescape")
    found = _MODEL_PATH.findall(text)
    if not found:
        return None
    quoted = found[-1][0] or found[-1][1]  # (the last one wins, as when a text proto is merged)
    if not quoted or len(quoted) > _MAX_PATH_BYTES:  # (no file system or store has such a path)
        return None
    prefix = _join(directory, _os.fsdecode(_unescape(quoted)))
    for candidate in (prefix + ".index", prefix):
        if _core.glob(_os.fsencode(candidate), {}):
            return prefix
    return None


def _checkpoint_filename(ckpt_dir_or_file):
    path = _as_path(ckpt_dir_or_file, "load_checkpoint")
    if _is_directory(path):
        return latest_checkpoint(path)
    return path


def _is_directory(path):
    return bool(_core.is_directory(_os.fsencode(path), {}))


def load_checkpoint(ckpt_dir_or_file):
    """tf.train.load_checkpoint: a CheckpointReader for the checkpoint a directory's state
    file names (its latest), or for a checkpoint prefix. ValueError when a directory has
    no checkpoint; NotFoundError when the prefix names none."""
    filename = _checkpoint_filename(ckpt_dir_or_file)
    if filename is None:
        raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given directory {ckpt_dir_or_file}")
    return CheckpointReader(filename)


def load_variable(ckpt_dir_or_file, name):
    """tf.train.load_variable: the value of tensor `name` (a trailing ":0" ignored)."""
    if isinstance(name, str) and name.endswith(":0"):
        name = name[:-2]
    return load_checkpoint(ckpt_dir_or_file).get_tensor(name)


def list_variables(ckpt_dir_or_file):
    """tf.train.list_variables: [(name, shape as a list)] of every stored tensor, sorted by
    name."""
    shapes = load_checkpoint(ckpt_dir_or_file).get_variable_to_shape_map()
    return [(name, shapes[name]) for name in sorted(shapes)]
