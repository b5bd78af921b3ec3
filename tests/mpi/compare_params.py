#!/usr/bin/env python3
"""Compares two safetensors files of canonical fp32 parameters, with its own reader of the
format (8-byte little-endian header length, JSON header, raw little-endian data): same
names and shapes, and every element within a relative tolerance of its tensor's scale:
max |a - b| / max(max |a|, 0.02) <= tol. Usage: compare_params.py A B TOL TAG

Why a floor of 0.02 (the init std): the attention key bias has an identically zero
gradient (softmax is invariant to adding one constant to a row of scores), so its values
are float rounding noise that Adam amplifies to about lr per step, and any change in the
order of a float sum changes them completely; measured against the scale the model's
weights live at, they agree as well as every other parameter does."""
import json
import struct
import sys
from array import array


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", f"{path}: {name} is {info['dtype']}, expected F32"
        b, e = info["data_offsets"]
        values = array("f")
        values.frombytes(data[b:e])
        if sys.byteorder != "little":
            values.byteswap()
        out[name] = (tuple(info["shape"]), values)
    return out


def main():
    a_path, b_path, tol, tag = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    a, b = read(a_path), read(b_path)
    if sorted(a) != sorted(b):
        print(f"FAIL {tag}: parameter names differ: {sorted(set(a) ^ set(b))}")
        return 1
    worst, worst_name = 0.0, ""
    for name in a:
        (sa, va), (sb, vb) = a[name], b[name]
        if sa != sb:
            print(f"FAIL {tag}: {name} shape {sa} vs {sb}")
            return 1
        scale = max(max((abs(x) for x in va), default=0.0), 0.02)
        diff = max((abs(x - y) for x, y in zip(va, vb)), default=0.0) / scale
        if diff != diff or diff > worst:  # NaN counts as worst
            worst, worst_name = diff, name
    print(f"{tag}: {len(a)} parameters, max relative parameter difference {worst:.2e} ({worst_name})")
    if not worst <= tol:
        print(f"FAIL {tag}: parameters differ beyond {tol}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
