#!/usr/bin/env python3
"""Compares two safetensors files of canonical fp32 parameters, with its own reader of the
format (8-byte little-endian header length, JSON header, raw little-endian data): same
names and shapes, and every element within a relative tolerance of its tensor's scale:
max |a - b| / max(max |a|, 0.02) <= tol (0.02: the init std, the scale weights live at;
biases start at 0). Usage: compare_params.py A B TOL TAG

One exception: the attention key bias (the middle third of each attn.qkv.bias) has an
identically zero gradient, since softmax is invariant to adding one constant to a row of
scores. Its values are float rounding noise that Adam amplifies, and any change in the
order of a float sum changes them completely. With a tolerance above 0 (runs under
different layouts, fp32) it is checked for what it must be instead: at the noise level
(|value| <= 1e-4) in both files. With tolerance 0 every element must be equal.
"""
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
    worst, worst_name, key_bias = 0.0, "", 0.0
    for name in a:
        (sa, va), (sb, vb) = a[name], b[name]
        if sa != sb:
            print(f"FAIL {tag}: {name} shape {sa} vs {sb}")
            return 1
        pairs = list(zip(va, vb))
        if name.endswith("attn.qkv.bias") and tol > 0:  # tolerance 0: everything exactly
            c = len(pairs) // 3
            key_bias = max([key_bias] + [max(abs(x), abs(y)) for x, y in pairs[c:2 * c]])
            pairs = pairs[:c] + pairs[2 * c:]
        scale = max(max((abs(x) for x, _ in pairs), default=0.0), 0.02)
        diff = max((abs(x - y) for x, y in pairs), default=0.0) / scale
        if diff != diff or diff > worst:  # NaN counts as worst
            worst, worst_name = diff, name
    if not key_bias <= 1e-4:
        print(f"FAIL {tag}: an attention key bias left the noise level ({key_bias:.2e})")
        return 1
    print(f"{tag}: {len(a)} parameters, max relative parameter difference {worst:.2e} ({worst_name});"
          f" key biases at noise level {key_bias:.1e}")
    if not worst <= tol:
        print(f"FAIL {tag}: parameters differ beyond {tol}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
