#!/usr/bin/env python3
"""Checks that a run which loaded a 16-bit (fp16/bf16) checkpoint in fp32 took the checkpoint's
fp32 master weights rather than its 16-bit model weights.

PARAMS is the run's canonical fp32 parameters (trident-train --save-canonical) written right
after loading (nothing trained). CHECKPOINT is one iter_NNNNNNN folder, of any layout. This
script reads the checkpoint with its own code, not trident's reader (the format is
csrc/ckpt/sharded_checkpoint.h's; the shard rules csrc/model/param_spec.h's):
  - the masters: the pieces "<name>|master|<first local index>" of every optim_dp*.safetensors,
    which must cover each TP slice exactly once, put back into canonical tensors;
  - the 16-bit weights of every model.safetensors, likewise.
It then requires, for every parameter:
  - PARAMS equal to the masters bit for bit (the word embedding's vocabulary padding aside);
  - the 16-bit weights equal to the masters rounded to nearest even (so they are the copy the
    run must not take);
and, over all elements, PARAMS different from the 16-bit weights in most of them, so that the
first check tells the two sources apart.
Usage: check_masters.py PARAMS CHECKPOINT TAG
"""
import glob
import os
import struct
import sys
from array import array

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from ckpt_tools_check import read_st  # noqa: E402  (the tests' one safetensors reader)


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} and the __metadata__ (ckpt_tools_check's reader)."""
    tensors, meta = read_st(path)
    return {name: (dtype, shape, raw) for name, (dtype, shape, _, raw) in tensors.items()}, meta


def f32_bits(raw):
    """Raw little-endian fp32 bytes as uint32 bit patterns (compared exactly, -0 and NaN too)."""
    bits = array("I")
    bits.frombytes(raw)
    if sys.byteorder != "little":
        bits.byteswap()
    return bits


def f32_from_bits(bits):
    return struct.unpack(f"<{len(bits)}f", struct.pack(f"<{len(bits)}I", *bits))


def widen16(dtype, raw):
    """16-bit values as fp32 bit patterns."""
    n = len(raw) // 2
    if dtype == "BF16":
        return array("I", (h << 16 for h in struct.unpack(f"<{n}H", raw)))
    assert dtype == "F16", dtype
    return array("I", struct.unpack(f"<{n}I", struct.pack(f"<{n}f", *struct.unpack(f"<{n}e", raw))))


def round16(dtype, bits):
    """fp32 bit patterns rounded to nearest even in `dtype`, widened back to fp32 bits."""
    if dtype == "BF16":
        return array("I", (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16 for b in bits))
    values = f32_from_bits(bits)
    return widen16("F16", struct.pack(f"<{len(values)}e", *values))


def shard_rule(name):
    if name == "wte" or name.endswith(("mlp.fc.weight", "mlp.fc.bias")):
        return "rows"
    if name.endswith(("attn.qkv.weight", "attn.qkv.bias")):
        return "qkv"
    if name.endswith(("attn.proj.weight", "mlp.proj.weight")):
        return "cols"
    return "replicated"


def unshard(name, slices, local_shape, tp):
    """Canonical flat tensor (list of fp32 bit patterns) from TP slices [tp_rank] of local_shape."""
    rule = shard_rule(name)
    if rule == "replicated":
        return list(slices[0])
    rows = local_shape[0]
    row_len = local_shape[1] if len(local_shape) == 2 else 1
    if rule == "rows":
        return [x for r in range(tp) for x in slices[r]]
    if rule == "cols":
        full_cols = row_len * tp
        out = [0] * (rows * full_cols)
        for r in range(tp):
            for i in range(rows):
                out[i * full_cols + r * row_len:i * full_cols + (r + 1) * row_len] = \
                    slices[r][i * row_len:(i + 1) * row_len]
        return out
    # qkv: each slice's rows are [its Q heads, its K heads, its V heads]
    local_c = rows // 3
    full_c = local_c * tp
    out = [0] * (3 * full_c * row_len)
    for r in range(tp):
        for which in range(3):
            src = slices[r][which * local_c * row_len:(which + 1) * local_c * row_len]
            at = (which * full_c + r * local_c) * row_len
            out[at:at + len(src)] = src
    return out


def read_checkpoint(folder):
    """{name: (masters, 16-bit weights, 16-bit dtype)}: canonical flat lists of fp32 bit patterns."""
    local, dtype16 = {}, {}  # name -> local shape, dtype of its 16-bit weights
    model = {}               # (name, tp_rank) -> {pp_rank: widened 16-bit weights}
    pieces = {}              # (name, tp_rank) -> {pp_rank: [(first, bits)]}
    tp = None
    for rank_dir in sorted(glob.glob(os.path.join(folder, "mp_rank_*"))):
        tensors, meta = read_safetensors(os.path.join(rank_dir, "model.safetensors"))
        tp, tp_rank, pp_rank = int(meta["tp"]), int(meta["tp_rank"]), int(meta["pp_rank"])
        for name, (dtype, shape, raw) in tensors.items():
            assert dtype in ("F16", "BF16"), f"{rank_dir}: {name} is {dtype}: not a 16-bit checkpoint"
            local[name], dtype16[name] = shape, dtype
            model.setdefault((name, tp_rank), {})[pp_rank] = list(widen16(dtype, raw))
        for optim in sorted(glob.glob(os.path.join(rank_dir, "optim_dp*.safetensors"))):
            for key, (dtype, _, raw) in read_safetensors(optim)[0].items():
                name, state, first = key.split("|")
                if state == "master":
                    assert dtype == "F32", f"{optim}: {key} is {dtype}"
                    pieces.setdefault((name, tp_rank), {}).setdefault(pp_rank, []).append((int(first), f32_bits(raw)))
    assert tp is not None, f"{folder}: no rank folders"
    out = {}
    for name, shape in local.items():
        numel = 1
        for d in shape:
            numel *= d
        masters, weights = [], []
        for tp_rank in range(tp):
            # Each stage holding the parameter (wte: the first and the last) has its masters,
            # which must cover the slice exactly once and agree with the other stage's.
            copies = []
            for pp_rank, held in sorted(pieces.get((name, tp_rank), {}).items()):
                flat, count = [0] * numel, [0] * numel
                for first, bits in held:
                    flat[first:first + len(bits)] = bits
                    count[first:first + len(bits)] = [c + 1 for c in count[first:first + len(bits)]]
                assert all(c == 1 for c in count), \
                    f"{folder}: the master pieces of {name} (tp {tp_rank}, pp {pp_rank}) do not cover it once"
                copies.append(flat)
            assert copies, f"{folder}: no masters of {name} (tp rank {tp_rank})"
            assert all(c == copies[0] for c in copies), f"{folder}: the stages' masters of {name} differ"
            copies16 = list(model[(name, tp_rank)].values())
            assert all(c == copies16[0] for c in copies16), f"{folder}: the stages' weights of {name} differ"
            masters.append(copies[0])
            weights.append(copies16[0])
        out[name] = (unshard(name, masters, shape, tp), unshard(name, weights, shape, tp), dtype16[name])
    return out


def main():
    params_path, folder, tag = sys.argv[1], sys.argv[2], sys.argv[3]
    params, _ = read_safetensors(params_path)
    ckpt = read_checkpoint(folder)
    if sorted(params) != sorted(ckpt):
        print(f"FAIL {tag}: parameter names differ: {sorted(set(params) ^ set(ckpt))}")
        return 1
    total = differ16 = 0
    for name, (dtype, shape, raw) in params.items():
        assert dtype == "F32", f"{params_path}: {name} is {dtype}"
        run = f32_bits(raw)
        masters, weights16, dtype16 = ckpt[name]
        masters, weights16 = masters[:len(run)], weights16[:len(run)]  # wte: without the vocabulary padding
        if len(masters) != len(run):
            print(f"FAIL {tag}: {name} has {len(run)} elements, its masters {len(masters)}")
            return 1
        if list(run) != masters:
            bad = sum(a != b for a, b in zip(run, masters))
            print(f"FAIL {tag}: {name}: {bad} of {len(run)} elements differ from the checkpoint's fp32 masters")
            return 1
        if list(round16(dtype16, masters)) != weights16:
            print(f"FAIL {tag}: {name}: the checkpoint's {dtype16} weights are not its masters rounded")
            return 1
        total += len(run)
        differ16 += sum(a != b for a, b in zip(run, weights16))
    print(f"{tag}: {len(params)} parameters ({total} elements) equal the checkpoint's fp32 masters bit for bit;"
          f" {differ16} elements differ from its 16-bit weights")
    if not differ16 > total // 2:
        print(f"FAIL {tag}: the masters differ from the 16-bit weights in only {differ16} of {total} elements:"
              " the check cannot tell them apart")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
