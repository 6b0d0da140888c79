#!/usr/bin/env python3
"""pack_import.py: packs a directory of .npy files (as `tbecheck export` writes) into one input
of fuzz_import (its format is in fuzz_import.c), to seed fuzz/corpus/import. Not a fuzzer.

usage: pack_import.py DIR OPTIONS_BYTE OUT
"""
import os
import struct
import sys

FILES = ["weights", "E", "D", "table_offset", "feature_table_map", "B_vbe", "indices",
         "offsets", "per_sample_weights"]


def main():
    src, opt, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    blob = bytes([opt])
    for i, name in enumerate(FILES):
        path = os.path.join(src, name + ".npy")
        if os.path.exists(path):
            data = open(path, "rb").read()
            if len(data) > 0xFFFF:
                sys.exit(f"{path}: {len(data)} bytes, more than a record holds")
            blob += struct.pack("<BH", i, len(data)) + data
    with open(out, "wb") as f:
        f.write(blob)


if __name__ == "__main__":
    main()
