"""TensorFlow's checkpoint reading API without TensorFlow: the names and behaviour of
tf.train.load_checkpoint, list_variables, load_variable and latest_checkpoint (and
tf.compat.v1.train.NewCheckpointReader), so that a script that reads checkpoints with them
runs after changing its import:

    from tfckpt import train           # was: import tensorflow as tf; ... tf.train
    reader = train.load_checkpoint("train/")      # a directory: its latest checkpoint
    shapes = reader.get_variable_to_shape_map()   # {name: [dims]}
    dtypes = reader.get_variable_to_dtype_map()   # {name: DType}, printed as tf.float32
    kernel = reader.get_tensor("dense/kernel")    # numpy array

Also get_checkpoint_state (a CheckpointState with TensorFlow's fields), checkpoints_iterator
and wait_for_new_checkpoint, and the reader's debug_string(). tests/tf_oracle_test.py compares
every one of them with what TensorFlow 2.21 answers, on TensorFlow's own checkpoints.

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
import time as _time

import numpy as _np

import tfckpt as _tfckpt
from tfckpt import _core

__all__ = ["load_checkpoint", "list_variables", "load_variable", "latest_checkpoint", "get_checkpoint_state",
           "checkpoints_iterator", "wait_for_new_checkpoint", "NewCheckpointReader", "CheckpointReader",
           "CheckpointState", "DType", "NotFoundError"]

NotFoundError = _tfckpt.NotFoundError


# TensorFlow's DataType enum: name -> (value, DataType_Name), as types.proto numbers them.
_DATATYPES = {
    "float32": (1, "DT_FLOAT"), "float64": (2, "DT_DOUBLE"), "int32": (3, "DT_INT32"), "uint8": (4, "DT_UINT8"),
    "int16": (5, "DT_INT16"), "int8": (6, "DT_INT8"), "string": (7, "DT_STRING"), "complex64": (8, "DT_COMPLEX64"),
    "int64": (9, "DT_INT64"), "bool": (10, "DT_BOOL"), "qint8": (11, "DT_QINT8"), "quint8": (12, "DT_QUINT8"),
    "qint32": (13, "DT_QINT32"), "bfloat16": (14, "DT_BFLOAT16"), "qint16": (15, "DT_QINT16"),
    "quint16": (16, "DT_QUINT16"), "uint16": (17, "DT_UINT16"), "complex128": (18, "DT_COMPLEX128"),
    "float16": (19, "DT_HALF"), "resource": (20, "DT_RESOURCE"), "variant": (21, "DT_VARIANT"),
    "uint32": (22, "DT_UINT32"), "uint64": (23, "DT_UINT64"), "float8_e5m2": (24, "DT_FLOAT8_E5M2"),
    "float8_e4m3fn": (25, "DT_FLOAT8_E4M3FN"), "float8_e4m3fnuz": (26, "DT_FLOAT8_E4M3FNUZ"),
    "float8_e4m3b11fnuz": (27, "DT_FLOAT8_E4M3B11FNUZ"), "float8_e5m2fnuz": (28, "DT_FLOAT8_E5M2FNUZ"),
    "int4": (29, "DT_INT4"), "uint4": (30, "DT_UINT4"), "int2": (31, "DT_INT2"), "uint2": (32, "DT_UINT2"),
    "float4_e2m1fn": (33, "DT_FLOAT4_E2M1FN"),
}
_BY_ENUM = {v: k for k, (v, _) in _DATATYPES.items()}
_ALIASES = {"half": "float16", "float": "float32", "double": "float64"}  # (tf.as_dtype's other names)


def _dtype_name(other):
    """The TensorFlow dtype name `other` stands for, as tf.as_dtype reads it (a DType, a name
    or alias, a DataType number, a numpy dtype or type, an object with `as_datatype_enum` such
    as tf.float32), or None."""
    if isinstance(other, DType):
        return other._name
    if isinstance(other, str):
        return _ALIASES.get(other, other)
    if isinstance(other, bool):
        return None
    if isinstance(other, int):
        return _BY_ENUM.get(other)
    enum = getattr(other, "as_datatype_enum", None)
    if isinstance(enum, int):
        return _BY_ENUM.get(enum)
    if isinstance(other, (type, _np.dtype)):
        try:
            dt = _np.dtype(other)
        except TypeError:
            return None
        if dt.kind in "OSU":  # object, bytes, str: TensorFlow's string
            return "string"
        return dt.name if dt.name in _DATATYPES else None
    return None


class DType:
    """A dtype as TensorFlow names it: `name` ("float32", "bfloat16", ...), printed as
    tf.float32 (repr) and <dtype: 'float32'> (str); equal to what TensorFlow's tf.float32 is
    equal to: another DType, the name or tf.as_dtype's alias ("half", "float", "double"), the
    DataType number, numpy's type or dtype (np.float32, np.dtype("float32"), ml_dtypes'
    bfloat16; np.object_ and bytes for string), and TensorFlow's own DType (tf.float32 ==
    this one too); `as_numpy_dtype` the numpy type (None where numpy has none),
    `as_datatype_enum` the DataType number."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    @property
    def name(self):
        return self._name

    @property
    def as_datatype_enum(self):
        return _DATATYPES.get(self._name, (None,))[0]

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
        name = _dtype_name(other)
        if name is None:
            return NotImplemented if not isinstance(other, (type, _np.dtype)) else False
        return name == self._name

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self):
        # (The name's hash: tf.as_dtype finds this DType in its table of names, so that
        # tf.float32 == DType("float32") too.)
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
        # A V2 bundle's index holds the header under the empty key, which TensorFlow's
        # has_tensor("") finds; a V1 file (or safetensors) has no such entry.
        self._bundle = bool(_core.glob(_os.fsencode(path + ".index"), {}))
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
        if name == "":
            return self._bundle  # (TensorFlow: the index's header entry)
        return isinstance(name, str) and name in self._ckpt

    def debug_string(self):
        """TensorFlow's CheckpointReader.debug_string(): bytes, a line "KEY (DT_...) [dims]"
        per entry. A V2 bundle lists its index entries in key order: a whole tensor under its
        name, a sliced one as its slices, each under the key its index stores it under
        (TensorFlow's binary EncodeTensorNameSlice, extents as stored) with the slice's shape. A V1 file lists each tensor once, ", N slices" added when it has more
        than one; TensorFlow's order there is its hash map's, this one is by name."""
        rows = []
        for name in self._ckpt._all_names():  # (every entry, the object graph too)
            info = self._ckpt.info(name)
            dt = _DATATYPES.get(info.dtype, (None, "DT_INVALID"))[1].encode()
            raw = name.encode("utf-8", "surrogateescape")
            if self._bundle and info.partitioned:
                # (each slice under the table key it is stored under: TF prints its index's
                # keys, whose extents may be explicit or "-" for a whole dimension: DTensor)
                core = self._ckpt._open()
                stored = core.describe(name.encode("utf-8", "surrogateescape"))["slices"]
                for sl, d in zip(info.slices, stored):
                    key = d.get("key") or _slice_key(raw, sl.start, sl.shape)
                    rows.append((key, dt, sl.shape))
                continue
            tail = b", %d slices" % len(info.slices) if not self._bundle and info.partitioned and len(info.slices) > 1 else b""
            rows.append((raw, dt, info.shape, tail))
        rows = [r if len(r) == 4 else r + (b"",) for r in rows]
        rows.sort(key=lambda r: r[0])
        return b"".join(key + b" (" + dt + b") [" + b",".join(b"%d" % d for d in shape) + b"]" + tail + b"\n"
                        for key, dt, shape, tail in rows)

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


def _string_increasing(raw):
    """OrderedCode's WriteString: 00 -> 00 FF, FF -> FF 00, then 00 01."""
    return bytes(_escape_ordered(raw)) + b"\x00\x01"


def _escape_ordered(raw):
    for b in raw:
        if b == 0:
            yield 0
            yield 0xFF
        elif b == 0xFF:
            yield 0xFF
            yield 0
        else:
            yield b


def _num_increasing(v):
    n = (v.bit_length() + 7) // 8
    return bytes([n]) + (v.to_bytes(n, "big") if n else b"")


def _signed_increasing(v):
    x = v if v >= 0 else ~v
    n = x.bit_length() // 7 + 1
    return ((v % (1 << (8 * n))) ^ (((1 << n) - 1) << (8 * n - n))).to_bytes(n, "big")


def _slice_key(raw, start, shape):
    """EncodeTensorNameSlice of name `raw` and the slice (start, length) per dimension."""
    out = b"\x00" + _string_increasing(raw) + _num_increasing(len(shape))
    for s, n in zip(start, shape):
        out += _signed_increasing(s) + _signed_increasing(n)
    return out


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
# One field of a CheckpointState text proto per match: NAME: "string" | 'string' | number,
# after blanks and # comments, with an optional ; or , after it; or the end of the text.
# (Each quoted string as "unrolled loops", [^"\\]*(?:\\.[^"\\]*)*: a run of plain characters
# is one step of the regex engine, not one backtracking frame per character, so a path of
# megabytes costs no more memory than its text.)
_BLANK = r"(?:[ \t\r\n\f\v]|#[^\n]*)*"
_FIELD = _re.compile(
    _BLANK + r"(?:([A-Za-z_][A-Za-z0-9_]*)" + _BLANK + ":" + _BLANK +
    r"""(?:"([^"\\\n]*(?:\\.[^"\\\n]*)*)"|'([^'\\\n]*(?:\\.[^'\\\n]*)*)'|"""
    r"([-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|"
    r"[nN][aA][nN])[fF]?(?![A-Za-z0-9_.])))" + _BLANK + r"[;,]?|\Z)")
_STRING_FIELDS = ("model_checkpoint_path", "all_model_checkpoint_paths")
_DOUBLE_FIELDS = ("all_model_checkpoint_timestamps", "last_preserved_timestamp")


class CheckpointState:
    """TensorFlow's CheckpointState (tf.train.get_checkpoint_state): model_checkpoint_path,
    all_model_checkpoint_paths (oldest first), all_model_checkpoint_timestamps (seconds since
    the Epoch, one a path when written by tf.train.CheckpointManager),
    last_preserved_timestamp (0.0 when absent)."""

    __slots__ = ("model_checkpoint_path", "all_model_checkpoint_paths", "all_model_checkpoint_timestamps",
                 "last_preserved_timestamp")

    def __init__(self, model_checkpoint_path="", all_model_checkpoint_paths=(), all_model_checkpoint_timestamps=(),
                 last_preserved_timestamp=0.0):
        self.model_checkpoint_path = model_checkpoint_path
        self.all_model_checkpoint_paths = list(all_model_checkpoint_paths)
        self.all_model_checkpoint_timestamps = list(all_model_checkpoint_timestamps)
        self.last_preserved_timestamp = last_preserved_timestamp

    def __eq__(self, other):
        if not isinstance(other, CheckpointState):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.__slots__)

    __hash__ = None

    def __repr__(self):
        def q(p):
            return '"' + p.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        lines = [f"model_checkpoint_path: {q(self.model_checkpoint_path)}"] if self.model_checkpoint_path else []
        lines += [f"all_model_checkpoint_paths: {q(p)}" for p in self.all_model_checkpoint_paths]
        lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in self.all_model_checkpoint_timestamps]
        if self.last_preserved_timestamp:
            lines.append(f"last_preserved_timestamp: {self.last_preserved_timestamp!r}")
        return "".join(line + "\n" for line in lines)


def _parse_state(text):
    """The CheckpointState a text proto holds, or None where TensorFlow's text_format.Merge
    raises ParseError (an unknown field, a value of the wrong kind, anything but fields; a
    singular field given twice keeps the last value, as Merge does). Not read: the list
    syntax of repeated fields (`all_model_checkpoint_paths: ["a", "b"]`) and adjacent
    strings ("a" "b"), which TensorFlow never writes."""
    st = CheckpointState()
    pos, end = 0, len(text)
    while True:
        m = _FIELD.match(text, pos)
        if m is None:
            return None
        if m.group(1) is None:  # (the end)
            return st
        pos = m.end()
        field, dq, sq, num = m.groups()
        if field in _STRING_FIELDS and num is None:
            value = _os.fsdecode(_unescape(dq if dq is not None else sq))
            if field == "model_checkpoint_path":
                st.model_checkpoint_path = value
            else:
                st.all_model_checkpoint_paths.append(value)
        elif field in _DOUBLE_FIELDS and num is not None:
            value = float(num.rstrip("fF"))
            if field == "last_preserved_timestamp":
                st.last_preserved_timestamp = value
            else:
                st.all_model_checkpoint_timestamps.append(value)
        else:
            return None
        if pos >= end:
            return st


def _join(directory, path):
    if _os.path.isabs(path) or "://" in path:
        return path
    if "://" in directory:
        return directory.rstrip("/") + "/" + path
    return _os.path.join(directory, path)


def get_checkpoint_state(checkpoint_dir, latest_filename=None):
    """tf.train.get_checkpoint_state: the CheckpointState of `checkpoint_dir`'s state file
    (named `latest_filename`, default "checkpoint"), its relative paths joined to the
    directory; None when there is no state file or it does not parse; ValueError when it
    parses but names no model_checkpoint_path."""
    directory = _as_path(checkpoint_dir, "get_checkpoint_state")
    name = "checkpoint" if latest_filename is None else _as_path(latest_filename, "get_checkpoint_state")
    raw = _core.read_small_file(_os.fsencode(_join(directory, name)), {})
    if raw is None:
        return None
    st = _parse_state(raw.decode("utf-8", "surrogateescape"))
    if st is None:
        return None
    if not st.model_checkpoint_path:
        raise ValueError("Invalid checkpoint state loaded from " + directory)
    st.model_checkpoint_path = _join(directory, st.model_checkpoint_path)
    st.all_model_checkpoint_paths = [_join(directory, p) for p in st.all_model_checkpoint_paths]
    return st


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """tf.train.latest_checkpoint: the prefix of the newest checkpoint in `checkpoint_dir`,
    get_checkpoint_state's model_checkpoint_path, when its files exist (PREFIX.index, or the
    V1 file or pattern PREFIX); None when there is no state file, it cannot be parsed, or the
    files are gone; ValueError when the state file names no model_checkpoint_path."""
    st = get_checkpoint_state(_as_path(checkpoint_dir, "latest_checkpoint"),
                              None if latest_filename is None else _as_path(latest_filename, "latest_checkpoint"))
    if st is None:
        return None
    prefix = st.model_checkpoint_path
    if len(_os.fsencode(prefix)) > 2 * _MAX_PATH_BYTES:  # (no file system or store has such a path)
        return None
    for candidate in (prefix + ".index", prefix):
        if _core.glob(_os.fsencode(candidate), {}):
            return prefix
    return None


def wait_for_new_checkpoint(checkpoint_dir, last_checkpoint=None, seconds_to_sleep=1, timeout=None):
    """tf.train's wait_for_new_checkpoint: polls latest_checkpoint every `seconds_to_sleep`
    until it names a checkpoint other than `last_checkpoint`, and returns it; None when
    `timeout` seconds (None: no bound) would pass first."""
    stop_time = _time.time() + timeout if timeout is not None else None
    while True:
        path = latest_checkpoint(checkpoint_dir)
        if path is not None and path != last_checkpoint:
            return path
        if stop_time is not None and _time.time() + seconds_to_sleep > stop_time:
            return None
        _time.sleep(seconds_to_sleep)


def checkpoints_iterator(checkpoint_dir, min_interval_secs=0, timeout=None, timeout_fn=None):
    """tf.train.checkpoints_iterator: yields each new latest checkpoint of `checkpoint_dir` as
    it appears (at most one per `min_interval_secs`). When `timeout` seconds pass without a
    new one it stops, unless `timeout_fn` is given and returns False (then it waits again).
    With timeout=0 it yields the current latest checkpoint, if any, and stops."""
    checkpoint_path = None
    while True:
        new = wait_for_new_checkpoint(checkpoint_dir, checkpoint_path, timeout=timeout)
        if new:
            start = _time.time()
            checkpoint_path = new
            yield checkpoint_path
            wait = start + min_interval_secs - _time.time()
            if wait > 0:
                _time.sleep(wait)
        elif timeout_fn is None:
            return
        if timeout_fn is not None and timeout_fn():
            return


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
