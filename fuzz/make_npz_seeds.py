#!/usr/bin/env python3
"""Writes the hand-made seeds of fuzz_npz into DIR (default fuzz/seeds/npz, where they are
committed): small .npz archives with the zip and .npy forms a real archive may take and
the damage the reader must refuse. The zip bytes are laid out here field by field (PKWARE
APPNOTE 6.3.10), not by Python's zipfile, which cannot be made to write a zip64 directory
for small members or a data descriptor on a seekable file. Standard library only.

Usage: python3 fuzz/make_npz_seeds.py [DIR]"""

import os
import struct
import sys
import zlib


def npy(descr, shape, data, fortran=False, version=1):
    """A .npy member: magic, version, header length, the dict padded to 64 bytes, data."""
    dims = f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(str(d) for d in shape) + ")"
    head = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {dims}, }}"
    prefix = 10 if version == 1 else 12
    pad = (64 - (prefix + len(head) + 1) % 64) % 64
    head = (head + " " * pad + "\n").encode()
    size = struct.pack("<H", len(head)) if version == 1 else struct.pack("<I", len(head))
    return b"\x93NUMPY" + bytes([version, 0]) + size + head + data


class Archive:
    """Members laid out one after the other, then the central directory and end records."""

    def __init__(self):
        self.body = b""
        self.entries = []  # central directory entries

    def add(self, name, data, deflate=False, zip64=False, descriptor=False, crc=None):
        name = name.encode()
        stored = zlib.compress(data)[2:-4] if deflate else data  # raw deflate
        crc = zlib.crc32(data) if crc is None else crc
        method = 8 if deflate else 0
        flags = 0x08 if descriptor else 0
        offset = len(self.body)
        extra = b""
        local_sizes = (len(stored), len(data))
        if zip64:
            extra = struct.pack("<HHQQ", 1, 16, len(data), len(stored))
            local_sizes = (0xFFFFFFFF, 0xFFFFFFFF)
        if descriptor:
            local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, flags, method, 0, 0x21, 0,
                                0 if not zip64 else 0xFFFFFFFF, 0 if not zip64 else 0xFFFFFFFF, len(name), len(extra))
        else:
            local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, flags, method, 0, 0x21, crc,
                                local_sizes[0], local_sizes[1], len(name), len(extra))
        self.body += local + name + extra + stored
        if descriptor:
            if zip64:
                self.body += struct.pack("<IIQQ", 0x08074B50, crc, len(stored), len(data))
            else:
                self.body += struct.pack("<IIII", 0x08074B50, crc, len(stored), len(data))
        if zip64:
            cextra = struct.pack("<HHQQQ", 1, 24, len(data), len(stored), offset)
            sizes = (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
        else:
            cextra = b""
            sizes = (len(stored), len(data), offset)
        self.entries.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 45 if zip64 else 20, flags,
                                        method, 0, 0x21, crc, sizes[0], sizes[1], len(name), len(cextra), 0, 0, 0,
                                        0o100644 << 16, sizes[2]) + name + cextra)

    def bytes(self, zip64_end=False, comment=b""):
        directory = b"".join(self.entries)
        at = len(self.body)
        out = self.body + directory
        n, size, offset = len(self.entries), len(directory), at
        if zip64_end:
            end64_at = len(out)
            out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, size, offset)
            out += struct.pack("<IIQI", 0x07064B50, 0, end64_at, 1)
            n, size, offset = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, size, offset, len(comment)) + comment
        return out


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


def seeds():
    kernel = npy("<f4", (2, 3), f32(0, 1, 2, 3, 4, 5))
    bias = npy("<i8", (3,), struct.pack("<3q", -1, 0, 7))

    def plain(**kw):
        a = Archive()
        a.add("dense/kernel.npy", kernel, **kw)
        a.add("dense/bias.npy", bias, **kw)
        return a

    yield "stored", plain().bytes()  # as NumPy's savez and our writer lay it out
    yield "deflated", plain(deflate=True).bytes()  # savez_compressed: read through libzip
    yield "zip64", plain(zip64=True).bytes(zip64_end=True)
    yield "data_descriptor", plain(descriptor=True).bytes()
    yield "zip64_data_descriptor", plain(zip64=True, descriptor=True).bytes(zip64_end=True)
    yield "comment", plain().bytes(comment=b"made by hand")
    a = Archive()
    a.add("README.txt", b"not an array\n")
    a.add("x.npy", kernel)
    yield "member_not_npy", a.bytes()
    a = Archive()
    a.add("kinds/f2.npy", npy("<f2", (2,), struct.pack("<2e", 1.5, -2)))
    a.add("kinds/c8.npy", npy("<c8", (1,), f32(1, -1)))
    a.add("kinds/b1.npy", npy("|b1", (3,), b"\x01\x00\x01"))
    a.add("kinds/u2.npy", npy("<u2", (2,), struct.pack("<2H", 1, 65535)))
    a.add("kinds/scalar.npy", npy("<f8", (), struct.pack("<d", 3.25)))
    a.add("kinds/strings.npy", npy("|S4", (3,), b"ab\0\0abcdx\0\0\0"))
    a.add("kinds/empty.npy", npy("<f4", (0, 4), b""))
    a.add("kinds/fortran.npy", npy("<f4", (3, 2), f32(0, 3, 1, 4, 2, 5), fortran=True))
    a.add("kinds/v2.npy", npy("<i4", (2,), struct.pack("<2i", 5, 6), version=2))
    a.add("kinds/big_endian.npy", npy(">f4", (1,), struct.pack(">f", 1)))
    a.add("kinds/short.npy", npy("<f4", (4,), f32(1, 2)))
    yield "kinds", a.bytes()
    yield "bad_crc", (lambda a: (a.add("x.npy", kernel, crc=0x12345678), a.bytes())[1])(Archive())
    yield "empty", Archive().bytes()
    whole = plain().bytes()
    directory_at = len(plain().body)
    end = whole[-22:]
    # The directory cut short, the end record as it was (its size and offset now past the
    # end), and the directory cut with the end record right after it.
    yield "truncated_directory", whole[:directory_at + 30] + end
    yield "directory_without_end", whole[:-22]
    yield "truncated_member", whole[:len(kernel) // 2]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "npz")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
