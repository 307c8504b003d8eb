"""Crafted hostile checkpoints for tests/hostile_test.py (issue 37).

Independent of tfckpt's own code: pure Python, standard library only. Everything is encoded
here by hand from docs/FORMAT.md:

* protobuf wire format (varints, negative int64 as 10-byte two's complement, raw bytes
  fields so that a "string" can hold bytes that are not UTF-8, fields in any order, fields
  truncated or over-long on purpose);
* the leveldb table (§a): uncompressed blocks with restart points, block trailers with the
  masked CRC-32C (table-driven CRC-32C below), an empty meta-index, the index block, the
  48-byte footer with the magic — each piece overridable to make it lie;
* BundleHeaderProto / BundleEntryProto / TensorShapeProto / TensorSliceProto (§b) and slice
  keys in OrderedCode (§d.2);
* V1 SavedTensorSlices tables (§h), safetensors files (§j), .npz archives of .npy members
  (zipfile), `checkpoint` state files (§g) and `--policy file:SHARDS.json` files.

`cases(root_dir)` writes every case under root_dir (one directory per case) and returns the
list of Case objects. Run as a script (`hostile_inputs.py DIR`) it writes them and lists them.

Each case is one small crafted index (or file) plus, where the format needs one, a small data
file (64 bytes, or just what the case needs)."""

import json
import os
import struct
import sys
import zipfile
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------
# CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven; masking (§a.7).

# Slicing-by-8 tables: _CRC[0] is the classic byte table; _CRC[k][i] is the CRC register
# after byte i followed by k zero bytes, so that 8 bytes are folded in per step.
_CRC = [[0] * 256 for _ in range(8)]
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC[0][_i] = _c
for _i in range(256):
    _c = _CRC[0][_i]
    for _k in range(1, 8):
        _c = _CRC[0][_c & 0xFF] ^ (_c >> 8)
        _CRC[_k][_i] = _c


def crc32c(data, crc=0):
    """CRC-32C of `data`, extending `crc` (the CRC of what came before)."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _CRC
    crc ^= 0xFFFFFFFF
    n8 = len(data) & ~7
    if n8:
        for lo, hi in struct.iter_unpack("<II", memoryview(data)[:n8]):
            lo ^= crc
            crc = (t7[lo & 0xFF] ^ t6[(lo >> 8) & 0xFF] ^ t5[(lo >> 16) & 0xFF] ^ t4[lo >> 24] ^
                   t3[hi & 0xFF] ^ t2[(hi >> 8) & 0xFF] ^ t1[(hi >> 16) & 0xFF] ^ t0[hi >> 24])
    for b in memoryview(data)[n8:]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def mask(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283 and crc32c(b"") == 0
assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283
assert mask(0) == 0xA282EAD8
assert mask(crc32c(b"\x00\x00\x00\x3f")) == 0x1F273806

# ---------------------------------------------------------------------------------------
# Protobuf wire format.

U64 = (1 << 64) - 1


def varint(v):
    """Base-128 varint of v; a negative v as its 64-bit two's complement (10 bytes)."""
    if 0 <= v < 0x80:
        return _SMALL[v]
    v &= U64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


_SMALL = [bytes([i]) for i in range(0x80)]


def tag(num, wire):
    return varint((num << 3) | wire)


def f_varint(num, v):
    return tag(num, 0) + varint(v)


def f_bytes(num, data):
    return tag(num, 2) + varint(len(data)) + data


def f_fixed32(num, v):
    return tag(num, 5) + struct.pack("<I", v & 0xFFFFFFFF)


def f_fixed64(num, v):
    return tag(num, 1) + struct.pack("<Q", v & U64)


# Messages of proto/tfckpt/*.proto.

def shape_proto(dims, names=None, unknown_rank=False):
    """TensorShapeProto: field 2 Dim {1 size, 2 name (raw bytes)}, 3 unknown_rank."""
    out = b""
    for i, d in enumerate(dims):
        dim = f_varint(1, d) if d else b""
        if names and names[i] is not None:
            dim += f_bytes(2, names[i])
        out += f_bytes(2, dim)
    if unknown_rank:
        out += f_varint(3, 1)
    return out


def extent_proto(start, length):
    """TensorSliceProto.Extent; length None = the whole dimension (no field 2)."""
    out = f_varint(1, start) if start else b""
    if length is not None:
        out += f_varint(2, length)
    return out


def slice_proto(extents):
    """TensorSliceProto: repeated Extent (field 1)."""
    return b"".join(f_bytes(1, extent_proto(s, l)) for s, l in extents)


def version_proto(producer=1, min_consumer=0):
    out = f_varint(1, producer) if producer else b""
    if min_consumer:
        out += f_varint(2, min_consumer)
    return out


def header_proto(num_shards=1, endianness=0, producer=1):
    """BundleHeaderProto {1 num_shards, 2 endianness, 3 version}."""
    out = f_varint(1, num_shards) if num_shards else b""
    if endianness:
        out += f_varint(2, endianness)
    return out + f_bytes(3, version_proto(producer))


def entry_proto(dtype, dims, shard_id=0, offset=0, size=0, crc=0, slices=(), dim_names=None):
    """BundleEntryProto, fields in numeric order as TF writes them (zeros omitted, shape
    always present); `slices` a list of extent lists."""
    out = f_varint(1, dtype) if dtype else b""
    out += f_bytes(2, shape_proto(dims, dim_names))
    if shard_id:
        out += f_varint(3, shard_id)
    if offset:
        out += f_varint(4, offset)
    if size:
        out += f_varint(5, size)
    if crc:
        out += f_fixed32(6, crc)
    for s in slices:
        out += f_bytes(7, slice_proto(s))
    return out


# DataType values (§b.6).
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_STRING, DT_INT64 = 1, 2, 3, 4, 7, 9
DT_RESOURCE, DT_VARIANT = 20, 21

# ---------------------------------------------------------------------------------------
# OrderedCode slice keys (§d.2).


def num_increasing(v):
    n = (v.bit_length() + 7) // 8
    return bytes([n]) + (v.to_bytes(n, "big") if n else b"")


def string_increasing(s):
    """WriteString: 00 -> 00 FF, FF -> FF 00, then the terminator 00 01."""
    out = bytearray()
    for b in s:
        if b == 0:
            out += b"\x00\xff"
        elif b == 0xFF:
            out += b"\xff\x00"
        else:
            out.append(b)
    return bytes(out) + b"\x00\x01"


def signed_increasing(v):
    x = v if v >= 0 else ~v
    n = x.bit_length() // 7 + 1
    word = (v % (1 << (8 * n))) ^ (((1 << n) - 1) << (8 * n - n))
    return word.to_bytes(n, "big")


for _v, _want in ((0, "80"), (-1, "7f"), (64, "c040"), (-65, "3fbf"), (8192, "e02000"),
                  ((1 << 63) - 1, "ffc07fffffffffffffff"), (-(1 << 63), "003f8000000000000000")):
    assert signed_increasing(_v).hex() == _want, (_v, signed_increasing(_v).hex())


def slice_key(name, extents):
    """EncodeTensorNameSlice: extents (start, length); length None = whole (0, -1)."""
    out = b"\x00" + string_increasing(name) + num_increasing(len(extents))
    for s, l in extents:
        out += signed_increasing(0 if l is None else s) + signed_increasing(-1 if l is None else l)
    return out


assert slice_key(b"weights", [(0, 5), (0, None)]).hex() == "00" "77656967687473" "0001" "0102" "8085" "807f"

# ---------------------------------------------------------------------------------------
# leveldb table (§a).

MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)


def block(entries, restart_interval=16):
    """Block contents: prefix-compressed entries, restart array, restart count."""
    out = bytearray()
    restarts = []
    prev = b""
    for i, (k, v) in enumerate(entries):
        if i % restart_interval == 0:
            restarts.append(len(out))
            shared = 0
        else:
            shared = 0
            while shared < min(len(prev), len(k)) and prev[shared] == k[shared]:
                shared += 1
        out += varint(shared) + varint(len(k) - shared) + varint(len(v)) + k[shared:] + v
        prev = k
    if not restarts:
        restarts = [0]
    for r in restarts:
        out += struct.pack("<I", r)
    out += struct.pack("<I", len(restarts))
    return bytes(out)


def trailer(contents, block_type=0):
    return bytes([block_type]) + struct.pack("<I", mask(crc32c(contents + bytes([block_type]))))


def handle(offset, size):
    return varint(offset) + varint(size)


def footer(meta_handle, index_handle):
    h = meta_handle + index_handle
    return h + b"\x00" * (40 - len(h)) + MAGIC


def table(blocks, index_values=None, raw_data_blocks=None, index_handle_override=None, meta_handle_override=None,
          block_type=0, index_entries_override=None):
    """A whole table file. `blocks`: a list of lists of (key, value), one data block each,
    written in the given order (no sorting, duplicates kept). The index block maps the last
    key of each block to its handle. Overrides, for lies: `raw_data_blocks` (contents
    used as given instead of `blocks`' encoding, same count), `index_values` (i -> the
    value stored for block i instead of its true handle), `index_entries_override`
    (the index block's entries as given), `index_handle_override` /
    `meta_handle_override` (the footer's handles, as bytes), `block_type` (of the data
    blocks)."""
    out = bytearray()
    index = []
    for i, entries in enumerate(blocks):
        contents = raw_data_blocks[i] if raw_data_blocks else block(entries)
        h = handle(len(out), len(contents))
        out += contents + trailer(contents, block_type)
        last = entries[-1][0] if entries else b""
        index.append((last, index_values(i, h) if index_values else h))
    meta = block([])
    meta_h = handle(len(out), len(meta))
    out += meta + trailer(meta)
    idx = block(index_entries_override if index_entries_override is not None else index, restart_interval=1)
    idx_h = handle(len(out), len(idx))
    out += idx + trailer(idx)
    out += footer(meta_handle_override if meta_handle_override is not None else meta_h,
                  index_handle_override if index_handle_override is not None else idx_h)
    return bytes(out)


# ---------------------------------------------------------------------------------------
# Cases.

@dataclass
class Case:
    name: str
    ckpt: str               # the CKPT argument
    fmt: str                # v2, v1, safetensors, npz, state, policy
    key: str                # the tensor key read (--tensor, Python reads)
    desc: str
    benign: bool = False    # a well-formed checkpoint after all: success (exit 0) is fine too
    policy: str = ""        # for fmt "policy": the SHARDS.json path (ckpt is a good checkpoint)
    dtype: int = 1          # the DataType of the tensor KEY claims (DT_FLOAT unless said)
    tags: list = field(default_factory=list)


DATA64 = bytes(range(64))
G = 1 << 30
I64_MAX = (1 << 63) - 1


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _crc_of(data, offset, size):
    """The masked CRC of data[offset:offset+size] when that range exists, else 0."""
    if 0 <= offset and 0 <= size and offset + size <= len(data):
        return mask(crc32c(data[offset:offset + size]))
    return 0


class _Writer:
    def __init__(self, root):
        self.root = root
        self.cases = []
        self.next_dtype = DT_FLOAT  # (set by v2_entry / v1 for the case they add)

    def _dir(self, name):
        d = os.path.join(self.root, name)
        os.makedirs(d, exist_ok=True)
        return d

    def add(self, name, ckpt, fmt, desc, key="v", **kw):
        kw.setdefault("dtype", self.next_dtype)
        self.next_dtype = DT_FLOAT
        self.cases.append(Case(name, ckpt, fmt, key, desc, **kw))

    # V2 bundles --------------------------------------------------------------------------
    def v2(self, name, desc, entries=None, header=None, data=DATA64, key="v", num_data_files=1, table_bytes=None,
           blocks=None, benign=False, **table_kw):
        """A bundle `model` in its own directory: the index holds the header under "" (unless
        `header` is False) and `entries` [(key bytes, value bytes)] as given; data file(s) of
        `data`."""
        d = self._dir(name)
        prefix = os.path.join(d, "model")
        if table_bytes is None:
            if blocks is None:
                rows = [] if header is False else [(b"", header_proto() if header is None else header)]
                blocks = [rows + list(entries)]
            table_bytes = table(blocks, **table_kw)
        _write(prefix + ".index", table_bytes)
        for s in range(num_data_files):
            _write(prefix + ".data-%05d-of-%05d" % (s, num_data_files), data)
        self.add(name, prefix, "v2", desc, key=key, benign=benign)

    def v2_entry(self, name, desc, dtype, dims, offset=0, size=0, crc=None, data=DATA64, **kw):
        """One tensor "v" described by a single entry (CRC right when the range exists)."""
        extra = {k: kw.pop(k) for k in ("shard_id", "slices", "dim_names") if k in kw}
        if crc is None:
            crc = _crc_of(data, offset, size)
        value = entry_proto(dtype, dims, offset=offset, size=size, crc=crc, **extra)
        self.next_dtype = dtype
        self.v2(name, desc, [(b"v", value)], data=data, **kw)

    # V1 --------------------------------------------------------------------------------
    def v1(self, name, desc, metas, slices, filename="model", key="v", listed_copies=1):
        """A V1 file: the table of contents lists `metas` (name, dtype, dims, [extents...]),
        each slice `listed_copies` times; `slices` are (name, extents, TensorProto bytes)
        stored under their slice keys."""
        d = self._dir(name)
        toc = b""
        for tname, dtype, dims, slist in metas:
            m = f_bytes(1, tname) + f_bytes(2, shape_proto(dims)) + f_varint(3, dtype) + \
                b"".join(f_bytes(4, slice_proto(s)) for s in slist) * listed_copies
            toc += f_bytes(1, m)
        toc += f_bytes(2, version_proto(1))
        rows = [(b"", f_bytes(1, toc))]
        data_rows = []
        for tname, extents, tensor in slices:
            saved = f_bytes(1, tname) + f_bytes(2, slice_proto(extents)) + f_bytes(3, tensor)
            data_rows.append((slice_key(tname, extents), f_bytes(2, saved)))
        rows += sorted(data_rows)
        path = os.path.join(d, filename)
        _write(path, table([rows]))
        self.next_dtype = metas[0][1]
        self.add(name, path, "v1", desc, key=key)


def tensor_proto(dtype, body):
    return f_varint(1, dtype) + body


def string_payload(lengths, strings=b""):
    """A DT_STRING payload (§c.4) with the given varint lengths, their masked CRC, then
    `strings`; returns (payload, entry crc)."""
    out = b"".join(varint(n) for n in lengths)
    c = 0
    for n in lengths:
        c = crc32c(struct.pack("<I", n) if n <= 0xFFFFFFFF else struct.pack("<Q", n), c)
    lcrc = struct.pack("<I", mask(c))
    c = crc32c(lcrc, c)
    c = crc32c(strings, c)
    return out + lcrc + strings, mask(c)


def _good_bundle(w, name):
    """A well-formed bundle: float32 "v" [4] at offset 0 of a 64-byte data file."""
    w.v2_entry(name, "well-formed float32 [4]", DT_FLOAT, [4], offset=0, size=16, benign=True)
    case = w.cases.pop()
    return case.ckpt


def _v2_cases(w):
    e = w.v2_entry
    # The rows.
    e("row_offset_2e62_size_2e62", "float32 [4], offset 2^62, size 2^62 (issue row 1)", DT_FLOAT, [4],
      offset=1 << 62, size=1 << 62)
    e("row_string_134217728_size16", "string [134217728], size 16 (issue rows 2-3)", DT_STRING, [134217728],
      size=16)
    e("row_string_2e40_size16", "string [2^40], size 16 (issue row 4)", DT_STRING, [1 << 40], size=16)
    # TensorFlow's public proofs of concept, rebuilt from their descriptions.
    e("tfpoc_negative_dim", "TF PoC: float32 [-5] (CHECK_GE(size, 0) in BuildV2VarMaps)", DT_FLOAT, [-5], size=16)
    e("tfpoc_huge_string_shape", "TF PoC: tiny index, DT_STRING [2^31, 2^31] (NULL deref in TF)", DT_STRING,
      [1 << 31, 1 << 31], size=8)
    # Dimensions.
    e("dim_int64_min", "float32 [-2^63]", DT_FLOAT, [-(1 << 63)], size=16)
    e("dim_negative_second", "float32 [4, -1]", DT_FLOAT, [4, -1], size=16)
    e("dim_huge_uint8", "uint8 [2^62], size 2^62 (size matches; far past the file)", DT_UINT8, [1 << 62],
      size=1 << 62)
    e("dim_product_2e64", "float32 [2^32, 2^32] (element count overflows int64)", DT_FLOAT, [1 << 32, 1 << 32],
      size=16)
    e("dim_product_2e63", "uint8 [2^31, 2^32] (element count exactly 2^63)", DT_UINT8, [1 << 31, 1 << 32], size=16)
    e("dim_bytes_overflow", "float32 [2^62] (count fits, count x 4 overflows)", DT_FLOAT, [1 << 62], size=16)
    e("dim_product_zero_times_huge", "float32 [0, 2^62, 2^62] (zero elements, huge later dims)", DT_FLOAT,
      [0, 1 << 62, 1 << 62], size=0, benign=True)
    e("rank_1000", "float32 with 1000 dimensions of 1 (TF's limit is 254)", DT_FLOAT, [1] * 1000, size=4)
    e("rank_100000", "float32 with 100000 dimensions of 1", DT_FLOAT, [1] * 100000, size=4)
    w.v2("unknown_rank", "TensorShapeProto.unknown_rank set",
         [(b"v", f_varint(1, DT_FLOAT) + f_bytes(2, f_varint(3, 1)) + f_varint(5, 4))])
    # Size against dtype x shape.
    e("size_smaller", "float32 [4], size 12", DT_FLOAT, [4], size=12)
    e("size_larger", "float32 [4], size 20", DT_FLOAT, [4], size=20)
    e("size_huge_for_small_shape", "float32 [4], size 2^40", DT_FLOAT, [4], size=1 << 40)
    # Offset and size.
    e("range_past_file", "float32 [4], offset 56, size 16 (64-byte file)", DT_FLOAT, [4], offset=56, size=16)
    e("range_far_past_file", "float32 [4], offset 2^40, size 16", DT_FLOAT, [4], offset=1 << 40, size=16)
    e("range_overflow_2e63", "float32 [4], offset 2^63 - 4, size 16 (offset + size > 2^63)", DT_FLOAT, [4],
      offset=I64_MAX - 3, size=16)
    e("range_overflow_huge", "uint8 [2^62 + 2^61], offset 2^62, size 2^62 + 2^61", DT_UINT8, [(1 << 62) + (1 << 61)],
      offset=1 << 62, size=(1 << 62) + (1 << 61))
    e("offset_negative", "float32 [4], offset -16, size 16", DT_FLOAT, [4], offset=-16, size=16)
    e("size_negative", "float32 [4], size -16", DT_FLOAT, [4], size=-16)
    e("string_size_negative", "string [1], size -1", DT_STRING, [1], size=-1)
    # Shards.
    w.v2("num_shards_int32_max", "header num_shards 2^31 - 1",
         [(b"v", entry_proto(DT_FLOAT, [4], size=16, crc=_crc_of(DATA64, 0, 16)))], header=header_proto((1 << 31) - 1))
    w.v2("num_shards_huge_varint", "header num_shards written as the varint 2^40 (int32 field)",
         [(b"v", entry_proto(DT_FLOAT, [4], size=16, crc=_crc_of(DATA64, 0, 16)))],
         header=f_varint(1, 1 << 40) + f_bytes(3, version_proto()))
    w.v2("num_shards_negative", "header num_shards -1",
         [(b"v", entry_proto(DT_FLOAT, [4], size=16, crc=_crc_of(DATA64, 0, 16)))], header=header_proto(-1))
    w.v2("num_shards_2e20", "header num_shards 2^20 (the allowed maximum), entry in shard 2^20 - 1 (absent)",
         [(b"v", entry_proto(DT_FLOAT, [4], shard_id=(1 << 20) - 1, size=16))], header=header_proto(1 << 20))
    e("shard_id_negative", "entry shard_id -1", DT_FLOAT, [4], size=16, shard_id=-1)
    e("shard_id_past_num_shards", "entry shard_id 1 of num_shards 1", DT_FLOAT, [4], size=16, shard_id=1)
    e("shard_id_int32_max", "entry shard_id 2^31 - 1", DT_FLOAT, [4], size=16, shard_id=(1 << 31) - 1)
    # Slices.
    for name, desc, ext, sdims in (
            ("slice_extent_overflow", "float32 [4] sliced at start 2^62 length 2^62", (1 << 62, 1 << 62), [1 << 62]),
            ("slice_past_dim", "float32 [4] sliced at start 2 length 4 (past the dimension)", (2, 4), [4]),
            ("slice_negative_start", "float32 [4] sliced at start -1 length 2", (-1, 2), [2]),
            ("slice_int64_max", "float32 [4] sliced at start 2^63-1 length 2^63-1", (I64_MAX, I64_MAX), [1])):
        meta = entry_proto(DT_FLOAT, [4], slices=[[ext]])
        piece = entry_proto(DT_FLOAT, sdims, size=16, crc=_crc_of(DATA64, 0, 16))
        w.v2(name, desc, [(slice_key(b"v", [ext]), piece), (b"v", meta)])
    # A partitioned tensor listing 10^6 slices, with one slice entry (4 bytes per listed slice).
    one = [(0, 1)]
    meta = f_varint(1, DT_FLOAT) + f_bytes(2, shape_proto([4])) + f_bytes(7, slice_proto(one)) * 1000000
    piece = entry_proto(DT_FLOAT, [1], size=4, crc=_crc_of(DATA64, 0, 4))
    w.v2("slices_listed_1e6", "float32 [4] whose metadata entry lists 10^6 slices; one slice entry",
         [(slice_key(b"v", one), piece), (b"v", meta)])
    # A slice entry claiming a huge shape under a huge-extent metadata entry in 2 dimensions.
    ext2 = [(0, 1 << 40), (0, 1 << 40)]
    w.v2("slice_box_2e80", "float32 [2^40, 2^40] in one slice [0,2^40]x[0,2^40] of 16 bytes",
         [(slice_key(b"v", ext2), entry_proto(DT_FLOAT, [1 << 40, 1 << 40], size=16)),
          (b"v", entry_proto(DT_FLOAT, [1 << 40, 1 << 40], slices=[ext2]))])
    # Dtypes.
    e("dtype_unknown_99", "dtype 99", 99, [4], size=16)
    e("dtype_invalid_0", "dtype 0 (DT_INVALID)", 0, [4], size=16)
    e("dtype_negative", "dtype -1", -1, [4], size=16)
    e("dtype_ref_101", "dtype 101 (DT_FLOAT_REF)", 101, [4], size=16)
    e("dtype_resource", "DT_RESOURCE [4], size 16", DT_RESOURCE, [4], size=16)
    e("dtype_variant", "DT_VARIANT [4], size 16 of garbage", DT_VARIANT, [4], size=16)
    e("dtype_variant_2e40", "DT_VARIANT [2^40], size 16", DT_VARIANT, [1 << 40], size=16)
    # Keys.
    good = entry_proto(DT_FLOAT, [4], size=16, crc=_crc_of(DATA64, 0, 16))
    w.v2("keys_duplicate", "the key \"v\" twice", [(b"v", good), (b"v", good)])
    w.v2("keys_unsorted", "keys \"w\" then \"v\"", [(b"w", good), (b"v", good)])
    w.v2("header_missing", "no header entry under \"\"", [(b"v", good)], header=False)
    w.v2("header_not_first", "header entry stored after \"v\"", [(b"v", good), (b"", header_proto())])
    # Varints.
    w.v2("varint_truncated", "entry value ends inside a varint (size field 28 80)",
         [(b"v", f_varint(1, DT_FLOAT) + f_bytes(2, shape_proto([4])) + b"\x28\x80")])
    w.v2("varint_11_bytes", "entry size as an 11-byte varint",
         [(b"v", f_varint(1, DT_FLOAT) + f_bytes(2, shape_proto([4])) + b"\x28" + b"\xff" * 10 + b"\x01")])
    w.v2("varint_length_huge", "entry shape field whose length varint claims 2^62 bytes",
         [(b"v", f_varint(1, DT_FLOAT) + b"\x12" + varint(1 << 62) + shape_proto([4]))])
    # Strings.
    payload, pcrc = string_payload([1 << 60, 1 << 60], b"abcdefgh")
    data = payload + b"\x00" * (64 - len(payload))
    e("string_lengths_2e60", "string [2]: valid length CRC, lengths claim 2^60 bytes each", DT_STRING, [2],
      size=len(payload), crc=pcrc, data=data)
    payload, pcrc = string_payload([(1 << 32) + 5, 3], b"abc")
    data = payload + b"\x00" * (64 - len(payload))
    e("string_length_past_size", "string [2]: lengths 2^32+5 and 3 in a 3-byte body", DT_STRING, [2],
      size=len(payload), crc=pcrc, data=data)
    payload, pcrc = string_payload([1] * 40, b"x" * 40)
    e("string_count_large_bytes_small", "string [2^27]: 40 valid strings then nothing", DT_STRING, [1 << 27],
      size=len(payload), crc=pcrc, data=payload)
    # A dimension name that is not UTF-8 (a well-formed tensor otherwise).
    e("dim_name_not_utf8", "float32 [4] whose Dim.name is b'\\xff\\xfe' (otherwise well-formed)", DT_FLOAT, [4],
      size=16, dim_names=[b"\xff\xfe"], benign=True)
    # Table structure.
    rows = [(b"", header_proto()), (b"v", good)]
    w.v2("block_handle_huge", "index entry: data block handle (0, 2^62)", blocks=[rows],
         index_values=lambda i, h: handle(0, 1 << 62))
    w.v2("block_handle_offset_huge", "index entry: data block handle (2^62, 16)", blocks=[rows],
         index_values=lambda i, h: handle(1 << 62, 16))
    w.v2("footer_past_file", "footer: index handle (2^40, 64)", blocks=[rows],
         index_handle_override=handle(1 << 40, 64))
    w.v2("footer_index_size_huge", "footer: index handle (0, 2^63 - 1)", blocks=[rows],
         index_handle_override=handle(0, I64_MAX))
    w.v2("footer_varint_11_bytes", "footer: 11-byte varint in the meta-index handle", blocks=[rows],
         meta_handle_override=b"\xff" * 10 + b"\x01" + b"\x00")
    bad = bytearray(block(rows))
    bad[-4:] = struct.pack("<I", 0xFFFFFFFF)
    w.v2("restarts_count_huge", "data block whose restart count is 2^32 - 1", blocks=[rows],
         raw_data_blocks=[bytes(bad)])
    raw = varint(0) + varint(1 << 31) + varint(4) + b"v" + struct.pack("<II", 0, 1)
    w.v2("block_key_length_huge", "data block entry claiming a 2^31-byte key", blocks=[rows], raw_data_blocks=[raw])
    snappy = varint(0xFFFFFFFF) + b"\x00" * 8
    w.v2("snappy_length_huge", "Snappy data block declaring 2^32 - 1 decompressed bytes", blocks=[rows],
         raw_data_blocks=[snappy], block_type=1)
    w.v2("index_many_blocks", "10000 data blocks of one entry each, keys repeating \"v\"",
         blocks=[[(b"", header_proto())]] + [[(b"v", good)] for _ in range(10000)])
    w.v2("truncated_index_48_bytes", "an index of only a footer pointing at nothing",
         table_bytes=footer(handle(0, 0), handle(0, 0)))


def _v1_cases(w):
    floats = f_bytes(5, struct.pack("<4f", 1, 2, 3, 4))
    w.v1("v1_dim_huge", "V1 float [2^62], whole slice, 4 values", [(b"v", DT_FLOAT, [1 << 62], [[(0, None)]])],
         [(b"v", [(0, None)], tensor_proto(DT_FLOAT, floats))])
    w.v1("v1_dim_negative", "V1 float [-5]", [(b"v", DT_FLOAT, [-5], [[(0, None)]])],
         [(b"v", [(0, None)], tensor_proto(DT_FLOAT, floats))])
    w.v1("v1_dim_product_overflow", "V1 float [2^32, 2^32]", [(b"v", DT_FLOAT, [1 << 32, 1 << 32],
                                                               [[(0, None), (0, None)]])],
         [(b"v", [(0, None), (0, None)], tensor_proto(DT_FLOAT, floats))])
    w.v1("v1_rank_1000", "V1 float with 1000 dimensions of 1", [(b"v", DT_FLOAT, [1] * 1000, [[(0, None)] * 1000])],
         [(b"v", [(0, None)] * 1000, tensor_proto(DT_FLOAT, f_bytes(5, struct.pack("<f", 1))))])
    w.v1("v1_slice_extent_overflow", "V1 float [4] sliced at start 2^62 length 2^62",
         [(b"v", DT_FLOAT, [4], [[(1 << 62, 1 << 62)]])],
         [(b"v", [(1 << 62, 1 << 62)], tensor_proto(DT_FLOAT, floats))])
    w.v1("v1_slice_past_dim", "V1 float [4] sliced at start 2 length 4",
         [(b"v", DT_FLOAT, [4], [[(2, 4)]])], [(b"v", [(2, 4)], tensor_proto(DT_FLOAT, floats))])
    w.v1("v1_repeated_claim_2e40", "V1 float [4] whose packed float_val claims 2^40 bytes",
         [(b"v", DT_FLOAT, [4], [[(0, None)]])],
         [(b"v", [(0, None)], tensor_proto(DT_FLOAT, b"\x2a" + varint(1 << 40) + struct.pack("<4f", 1, 2, 3, 4)))])
    w.v1("v1_string_huge_shape", "V1 string [2^40] with 2 string_val",
         [(b"v", DT_STRING, [1 << 40], [[(0, None)]])],
         [(b"v", [(0, None)], tensor_proto(DT_STRING, f_bytes(8, b"a") + f_bytes(8, b"b")))])
    w.v1("v1_float_huge_shape_few_values", "V1 float [2^40] with 4 float_val",
         [(b"v", DT_FLOAT, [1 << 40], [[(0, None)]])], [(b"v", [(0, None)], tensor_proto(DT_FLOAT, floats))])
    w.v1("v1_int64_many_values", "V1 int64 [4] with 10^6 packed int64_val (1 byte each)",
         [(b"v", DT_INT64, [4], [[(0, None)]])],
         [(b"v", [(0, None)], tensor_proto(DT_INT64, f_bytes(10, b"\x01" * 1000000)))])
    w.v1("v1_tensor_content_claim", "V1 float [4] whose tensor_content length claims 2^60 bytes",
         [(b"v", DT_FLOAT, [4], [[(0, None)]])],
         [(b"v", [(0, None)], tensor_proto(DT_FLOAT, b"\x22" + varint(1 << 60) + b"\x00" * 16))])
    w.v1("v1_dtype_unknown", "V1 tensor of dtype 99", [(b"v", 99, [4], [[(0, None)]])],
         [(b"v", [(0, None)], tensor_proto(99, floats))])
    w.v1("v1_slices_listed_1e6", "V1 float [4] whose table of contents lists the slice 0,1 10^6 times, "
         "stores it once", [(b"v", DT_FLOAT, [4], [[(0, 1)]])],
         [(b"v", [(0, 1)], tensor_proto(DT_FLOAT, f_bytes(5, struct.pack("<f", 1))))], listed_copies=1000000)
    # One file of a set claiming 99999 siblings.
    d = w._dir("v1_shard_count_huge")
    src = [c for c in w.cases if c.name == "v1_dim_huge"][0].ckpt
    with open(src, "rb") as f:
        blob = f.read()
    path = os.path.join(d, "model-00000-of-99999")
    _write(path, blob)
    w.add("v1_shard_count_huge", path, "v1", "V1 file named -00000-of-99999 (99998 siblings missing)")


def _safetensors_cases(w):
    def st(name, desc, header_len, header, data=b"\x00" * 16):
        d = w._dir(name)
        path = os.path.join(d, "model.safetensors")
        _write(path, struct.pack("<Q", header_len) + header + data)
        w.add(name, path, "safetensors", desc)

    def hdr(obj):
        return json.dumps(obj, separators=(",", ":")).encode()

    good = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
    h = hdr({"v": good})
    st("st_header_len_2e60", "safetensors header length 2^60", 1 << 60, h)
    st("st_header_len_past_file", "safetensors header length 4096 in a 60-byte file", 4096, h)
    st("st_header_len_u64_max", "safetensors header length 2^64 - 1", U64, h)
    for name, desc, t in (
            ("st_shape_2e40_squared", "shape [2^40, 2^40], offsets [0, 16]",
             {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 16]}),
            ("st_shape_product_overflow", "shape [2^62, 8] U8",
             {"dtype": "U8", "shape": [1 << 62, 8], "data_offsets": [0, 16]}),
            ("st_shape_2e64", "shape [2^64] (not an int64)",
             {"dtype": "U8", "shape": [1 << 64], "data_offsets": [0, 16]}),
            ("st_shape_negative", "shape [-4]", {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}),
            ("st_shape_float", "shape [1e300]", {"dtype": "F32", "shape": [1e300], "data_offsets": [0, 16]}),
            ("st_offsets_past_file", "U8 [2^40], offsets [0, 2^40]",
             {"dtype": "U8", "shape": [1 << 40], "data_offsets": [0, 1 << 40]}),
            ("st_offsets_inverted", "F32 [4], offsets [16, 0]", {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}),
            ("st_offsets_overflow", "U8 [16], offsets [2^64 - 8, 2^64 + 8]",
             {"dtype": "U8", "shape": [16], "data_offsets": [U64 - 7, U64 + 9]}),
            ("st_offsets_i64_wrap", "U8 [16], offsets [2^63 - 8, 2^63 + 8]",
             {"dtype": "U8", "shape": [16], "data_offsets": [I64_MAX - 7, I64_MAX + 9]}),
            ("st_dtype_unknown", "dtype \"Q7\"", {"dtype": "Q7", "shape": [4], "data_offsets": [0, 16]})):
        h = hdr({"v": t})
        st(name, "safetensors " + desc, len(h), h)
    deep = b'{"v":' + b"[" * 100000 + b"]" * 100000 + b"}"
    st("st_json_deep", "safetensors header nested 100000 arrays deep", len(deep), deep)
    # A sharded set whose index maps into a file that claims a huge header.
    d = w._dir("st_index_json")
    idx = os.path.join(d, "model.safetensors.index.json")
    _write(idx, json.dumps({"metadata": {}, "weight_map": {"v": "model-00001-of-00001.safetensors"}}).encode())
    _write(os.path.join(d, "model-00001-of-00001.safetensors"), struct.pack("<Q", 1 << 60) + b"{}")
    w.add("st_index_json", idx, "safetensors", "safetensors index naming a file whose header length is 2^60")


def _npy(shape, descr="<f4", data=b"\x00" * 16, header=None, version=1):
    if header is None:
        header = ("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)).encode()
        header += b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header) & 0xFFFF) + header + data
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(header) & 0xFFFFFFFF) + header + data


def _npz_cases(w):
    def npz(name, desc, members):
        d = w._dir(name)
        path = os.path.join(d, "model.npz")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            for n, b in members:
                z.writestr(n, b)
        w.add(name, path, "npz", desc)

    npz("npz_shape_2e40", ".npz member v.npy claiming shape (2^40,) float32 with 16 bytes", [("v.npy", _npy("(%d,)" % (1 << 40)))])
    big = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), " + b" " * (1 << 20) + b"}\n"
    npz("npz_header_huge", ".npz member whose .npy 2.0 header is 1 MiB of spaces", [("v.npy", _npy(None, header=big,
                                                                                                  version=2))])
    lie = b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{'descr': '<f4'"
    npz("npz_header_len_lie", ".npz member whose .npy header length claims 4 GiB", [("v.npy", lie)])


def _state_cases(w):
    d = w._dir("state_garbage")
    _write(os.path.join(d, "checkpoint"), bytes(range(256)) * 4)
    w.add("state_garbage", d, "state", "directory whose `checkpoint` state file is binary garbage, no checkpoint")
    d = w._dir("state_huge_path")
    _write(os.path.join(d, "checkpoint"), b'model_checkpoint_path: "' + b"a" * (4 << 20) + b'"\n')
    w.add("state_huge_path", d, "state", "state file naming a 4 MiB model_checkpoint_path, no checkpoint")
    d = w._dir("state_deep_nesting")
    _write(os.path.join(d, "checkpoint"), b"x {" * 100000 + b"}" * 100000 + b'\nmodel_checkpoint_path: "m"\n')
    w.add("state_deep_nesting", d, "state", "state file with an unknown field nested 100000 deep, no checkpoint")
    d = w._dir("state_many_paths")
    _write(os.path.join(d, "checkpoint"), b'model_checkpoint_path: "m"\n' +
           b'all_model_checkpoint_paths: "m"\n' * 300000)
    w.add("state_many_paths", d, "state", "state file listing 300000 paths, no checkpoint")


def _policy_cases(w):
    good = _good_bundle(w, "policy_input")
    d = w._dir("policy_input")
    p = os.path.join(d, "deep.json")
    _write(p, b"[" * 100000 + b"]" * 100000)
    w.add("policy_deep_json", good, "policy", "--policy file: JSON nested 100000 arrays deep", policy=p)
    p = os.path.join(d, "huge.json")
    entry = b'{"key":"v","slice":""}'
    _write(p, b'{"description":"huge","shards":[[' + b",".join([entry] * 300000) + b"]]}")
    w.add("policy_huge_json", good, "policy", "--policy file: 300000 copies of one shard entry (7 MB)", policy=p)
    p = os.path.join(d, "big_numbers.json")
    _write(p, b'{"description":"n","shards":[[{"key":"v","slice":"0,%d:-","shape":[%d]}]]}' % (1 << 62, 1 << 64))
    w.add("policy_huge_slice", good, "policy", "--policy file: slice 0,2^62 and shape [2^64]", policy=p)
    p = os.path.join(d, "garbage.json")
    _write(p, bytes(range(256)) * 16)
    w.add("policy_garbage", good, "policy", "--policy file: binary garbage", policy=p)


def cases(root_dir):
    """Writes every case under root_dir; returns the Case list."""
    w = _Writer(root_dir)
    _v2_cases(w)
    _v1_cases(w)
    _safetensors_cases(w)
    _npz_cases(w)
    _state_cases(w)
    _policy_cases(w)
    names = [c.name for c in w.cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return w.cases


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--json"):
        sys.exit("usage: hostile_inputs.py DIR [--json]")
    written = cases(sys.argv[1])
    if len(sys.argv) == 3:
        print(json.dumps([c.__dict__ for c in written]))
    else:
        for c in written:
            print(f"{c.name:32} {c.fmt:11} {c.ckpt}  # {c.desc}")
