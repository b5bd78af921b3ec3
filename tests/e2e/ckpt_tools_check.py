#!/usr/bin/env python3
"""Independent checks for trident-convert and trident-eval, with no trident code and no third-
party packages: its own safetensors reader/writer (8-byte little-endian header length, JSON
header, raw little-endian data), Megatron .bin/.idx writer and a plain-Python GPT-2 forward.

  hf-check HFDIR LAYERS HIDDEN HEADS VOCAB POSITIONS
      config.json fields and model.safetensors names, shapes and dtypes of a GPT2LMHeadModel
  hf-to-canonical HFDIR OUT
      HF tensors -> trident canonical names/layouts (Conv1D weights transposed), F32 file
  ckpt-check ITERDIR TP PP OPTIM LAYERS
      metadata.json (layout, file sizes) and every rank file's tensor names and shapes
  make-data PREFIX VOCABFILE VOCAB SEED DOCS...
      a Megatron MMIDIDX dataset (uint16) of documents with the given lengths, random tokens
      in [5, VOCAB), and a BERT vocab file of VOCAB lines
  reference-loss HFDIR PREFIX T MAXTOKENS
      mean next-token loss over the prefix read in order as windows of T + 1 tokens starting
      every T tokens (the first MAXTOKENS tokens; 0: all), computed from the HF folder
"""
import json
import math
import operator
import os
import random
import struct
import sys
from array import array


def read_st(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        values = None
        if info["dtype"] == "F32":
            values = array("f")
            values.frombytes(data[b:e])
        out[name] = (info["dtype"], tuple(info["shape"]), values, data[b:e])
    return out, meta


def write_st(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, (shape, values) in tensors.items():
        raw = array("f", values).tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


LAYER = [  # (HF suffix, canonical suffix, transposed, shape given C)
    ("ln_1.weight", "ln_1.weight", False, lambda C: [C]),
    ("ln_1.bias", "ln_1.bias", False, lambda C: [C]),
    ("attn.c_attn.weight", "attn.qkv.weight", True, lambda C: [C, 3 * C]),
    ("attn.c_attn.bias", "attn.qkv.bias", False, lambda C: [3 * C]),
    ("attn.c_proj.weight", "attn.proj.weight", True, lambda C: [C, C]),
    ("attn.c_proj.bias", "attn.proj.bias", False, lambda C: [C]),
    ("ln_2.weight", "ln_2.weight", False, lambda C: [C]),
    ("ln_2.bias", "ln_2.bias", False, lambda C: [C]),
    ("mlp.c_fc.weight", "mlp.fc.weight", True, lambda C: [C, 4 * C]),
    ("mlp.c_fc.bias", "mlp.fc.bias", False, lambda C: [4 * C]),
    ("mlp.c_proj.weight", "mlp.proj.weight", True, lambda C: [4 * C, C]),
    ("mlp.c_proj.bias", "mlp.proj.bias", False, lambda C: [C]),
]


def hf_expected(L, C, V, P):
    exp = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C],
           "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
    for i in range(L):
        for hf, _, _, shape in LAYER:
            exp[f"transformer.h.{i}.{hf}"] = shape(C)
    return exp


def hf_check(d, L, C, H, V, P):
    cfg = json.load(open(os.path.join(d, "config.json")))
    want = {"model_type": "gpt2", "n_layer": L, "n_embd": C, "n_head": H, "vocab_size": V, "n_positions": P,
            "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True,
            "architectures": ["GPT2LMHeadModel"]}
    for k, v in want.items():
        if cfg.get(k) != v:
            fail(f"config.json {k} = {cfg.get(k)!r}, expected {v!r}")
    if cfg.get("n_inner") not in (None, 4 * C):
        fail(f"config.json n_inner = {cfg.get('n_inner')}")
    tensors, meta = read_st(os.path.join(d, "model.safetensors"))
    if meta.get("format") != "pt":
        fail(f"model.safetensors __metadata__ {meta}, expected format pt")
    exp = hf_expected(L, C, V, P)
    if sorted(tensors) != sorted(exp):
        fail(f"tensor names differ: {sorted(set(tensors) ^ set(exp))}")
    for name, shape in exp.items():
        dt, sh, _, _ = tensors[name]
        if list(sh) != shape or dt != "F32":
            fail(f"{name}: {dt} {list(sh)}, expected F32 {shape}")
    print(f"hf-check: config.json and {len(exp)} tensors of a {L}-layer GPT2LMHeadModel as expected")


def transpose(v, rows, cols):
    return [v[r * cols + c] for c in range(cols) for r in range(rows)]


def hf_to_canonical(d, out):
    tensors, _ = read_st(os.path.join(d, "model.safetensors"))
    canon = {}
    for name, (dt, sh, v, _) in tensors.items():
        s = name[len("transformer."):]
        if s in ("wte.weight", "wpe.weight"):
            canon[s[:3]] = (sh, v)
        elif s.startswith("ln_f."):
            canon[s] = (sh, v)
        else:
            _, i, rest = s.split(".", 2)
            hf, ours, tr, _ = next(x for x in LAYER if x[0] == rest)
            if tr:
                canon[f"h.{i}.{ours}"] = ((sh[1], sh[0]), transpose(v, sh[0], sh[1]))
            else:
                canon[f"h.{i}.{ours}"] = (sh, v)
    write_st(out, canon)
    print(f"hf-to-canonical: {len(canon)} tensors -> {out}")


def ckpt_check(d, tp, pp, optim, L):
    m = json.load(open(os.path.join(d, "metadata.json")))
    if m["layout"] != {"tp": tp, "pp": pp, "dp": 1, "zero_stage": 0}:
        fail(f"layout {m['layout']}")
    C, V = m["model"]["hidden_size"], m["model"]["vocab_size"]
    div = m["model"]["make_vocab_size_divisible_by"] * tp
    Vp = (V + div - 1) // div * div
    P = m["model"]["max_position_embeddings"]
    files = {f["path"]: f for f in m["files"]}
    want_files = set()
    per = L // pp
    seen_model = set()
    for s in range(pp):
        for t in range(tp):
            rd = f"mp_rank_{t:02d}" if pp == 1 else f"mp_rank_{t:02d}_{s:03d}"
            want_files.add(rd + "/model.safetensors")
            if optim:
                want_files.add(rd + "/optim_dp0000.safetensors")
            path = os.path.join(d, rd, "model.safetensors")
            if os.path.getsize(path) != files[rd + "/model.safetensors"]["size"]:
                fail(f"{path}: size differs from metadata.json")
            tensors, meta = read_st(path)
            if meta != {"tp": str(tp), "tp_rank": str(t), "pp_rank": str(s), "dp_rank": "0"}:
                fail(f"{path}: __metadata__ {meta}")
            names = set()
            if s == 0 or s == pp - 1:
                names.add("wte")
            if s == 0:
                names.add("wpe")
            if s == pp - 1:
                names |= {"ln_f.weight", "ln_f.bias"}
            for i in range(s * per, (s + 1) * per):
                names |= {f"h.{i}.{x[1]}" for x in LAYER}
            if set(tensors) != names:
                fail(f"{path}: tensors {sorted(set(tensors) ^ names)} unexpected or missing")
            for name, (dt, sh, _, _) in tensors.items():
                if name == "wte":
                    want = [Vp // tp, C]
                elif name == "wpe":
                    want = [P, C]
                elif name.endswith("qkv.weight"):
                    want = [3 * C // tp, C]
                elif name.endswith("qkv.bias"):
                    want = [3 * C // tp]
                elif name.endswith("fc.weight"):
                    want = [4 * C // tp, C]
                elif name.endswith("fc.bias"):
                    want = [4 * C // tp]
                elif name.endswith("mlp.proj.weight"):
                    want = [C, 4 * C // tp]
                elif name.endswith("attn.proj.weight"):
                    want = [C, C // tp]
                else:
                    want = [C]
                if list(sh) != want:
                    fail(f"{path}: {name} shape {list(sh)}, expected {want}")
                seen_model.add(name)
            if optim:
                opt, _ = read_st(os.path.join(d, rd, "optim_dp0000.safetensors"))
                want = {f"{n}|{st}|0" for n in names for st in ("master", "exp_avg", "exp_avg_sq")}
                if set(opt) != want:
                    fail(f"{rd}/optim_dp0000.safetensors: pieces {sorted(set(opt) ^ want)[:4]}")
                for key, (dt, sh, _, _) in opt.items():
                    n = 1
                    for x in tensors[key.split("|")[0]][1]:
                        n *= x
                    if dt != "F32" or list(sh) != [n]:
                        fail(f"{rd}: piece {key} {dt} {list(sh)}, expected F32 [{n}]")
    if set(files) != want_files:
        fail(f"metadata.json files {sorted(set(files) ^ want_files)}")
    print(f"ckpt-check: {d}: tp {tp} x pp {pp}, {len(files)} files, {len(seen_model)} parameters"
          f"{' with optimizer state' if optim else ''}")


def make_data(prefix, vocab_file, V, seed, docs):
    rng = random.Random(seed)
    tokens, sizes = [], []
    for n in docs:
        tokens += [rng.randrange(5, V) for _ in range(n)]
        sizes.append(n)
    with open(prefix + ".bin", "wb") as f:
        f.write(array("H", tokens).tobytes())
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(sizes), len(sizes) + 1)
    idx += struct.pack(f"<{len(sizes)}i", *sizes)
    ptr, ptrs = 0, []
    for s in sizes:
        ptrs.append(ptr)
        ptr += 2 * s
    idx += struct.pack(f"<{len(sizes)}q", *ptrs)
    idx += struct.pack(f"<{len(sizes) + 1}q", *range(len(sizes) + 1))
    with open(prefix + ".idx", "wb") as f:
        f.write(idx)
    with open(vocab_file, "w") as f:
        special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        f.write("\n".join(special + [f"w{i}" for i in range(V - len(special))]) + "\n")
    print(f"make-data: {len(tokens)} tokens in {len(sizes)} documents")


def reference_loss(d, prefix, T, max_tokens):
    cfg = json.load(open(os.path.join(d, "config.json")))
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    D = C // H
    raw, _ = read_st(os.path.join(d, "model.safetensors"))
    W = {k[len("transformer."):]: (sh, list(v)) for k, (dt, sh, v, _) in raw.items()}

    def rows(name):  # [r, c] -> list of rows
        sh, v = W[name]
        return [v[i * sh[1]:(i + 1) * sh[1]] for i in range(sh[0])]

    def cols(name):  # Conv1D [in, out] -> list of output columns
        sh, v = W[name]
        return [v[j::sh[1]] for j in range(sh[1])]

    wte, wpe = rows("wte.weight"), rows("wpe.weight")
    layers = []
    for i in range(L):
        p = f"h.{i}."
        layers.append({k: (cols(p + k) if k.endswith("weight") and "ln" not in k else W[p + k][1])
                       for k in [x[0] for x in LAYER]})
    lnf_w, lnf_b = W["ln_f.weight"][1], W["ln_f.bias"][1]

    def ln(x, w, b):
        mu = sum(x) / len(x)
        var = sum((a - mu) ** 2 for a in x) / len(x)
        r = 1.0 / math.sqrt(var + 1e-5)
        return [(a - mu) * r * g + c for a, g, c in zip(x, w, b)]

    def linear(x, wcols, b):
        return [sum(map(operator.mul, x, w)) + c for w, c in zip(wcols, b)]

    def gelu(x):
        return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))

    def window_loss(tok):
        n = len(tok) - 1
        h = [[a + b for a, b in zip(wte[tok[t]], wpe[t])] for t in range(n)]
        for ly in layers:
            a = [ln(x, ly["ln_1.weight"], ly["ln_1.bias"]) for x in h]
            qkv = [linear(x, ly["attn.c_attn.weight"], ly["attn.c_attn.bias"]) for x in a]
            att = [[0.0] * C for _ in range(n)]
            for hd in range(H):
                q = [r[hd * D:(hd + 1) * D] for r in qkv]
                k = [r[C + hd * D:C + (hd + 1) * D] for r in qkv]
                v = [r[2 * C + hd * D:2 * C + (hd + 1) * D] for r in qkv]
                for t in range(n):
                    s = [sum(map(operator.mul, q[t], k[u])) / math.sqrt(D) for u in range(t + 1)]
                    mx = max(s)
                    e = [math.exp(x - mx) for x in s]
                    z = sum(e)
                    for j in range(D):
                        att[t][hd * D + j] = sum(e[u] * v[u][j] for u in range(t + 1)) / z
            proj = [linear(x, ly["attn.c_proj.weight"], ly["attn.c_proj.bias"]) for x in att]
            h = [[a + b for a, b in zip(x, y)] for x, y in zip(h, proj)]
            m = [ln(x, ly["ln_2.weight"], ly["ln_2.bias"]) for x in h]
            f = [[gelu(y) for y in linear(x, ly["mlp.c_fc.weight"], ly["mlp.c_fc.bias"])] for x in m]
            o = [linear(x, ly["mlp.c_proj.weight"], ly["mlp.c_proj.bias"]) for x in f]
            h = [[a + b for a, b in zip(x, y)] for x, y in zip(h, o)]
        total = 0.0
        for t in range(n):
            x = ln(h[t], lnf_w, lnf_b)
            logits = [sum(map(operator.mul, x, w)) for w in wte]
            mx = max(logits)
            total += mx + math.log(sum(math.exp(l - mx) for l in logits)) - logits[tok[t + 1]]
        return total, n

    data = array("H")
    with open(prefix + ".bin", "rb") as f:
        data.frombytes(f.read())
    toks = list(data)
    if max_tokens > 0:
        toks = toks[:max_tokens]
    loss_sum, count = 0.0, 0
    for start in range(0, len(toks) - 1, T):
        s, n = window_loss(toks[start:start + T + 1])
        loss_sum += s
        count += n
    print(f"reference loss {loss_sum / count:.9e} tokens {count}")


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "hf-check":
        hf_check(a[0], *map(int, a[1:6]))
    elif cmd == "hf-to-canonical":
        hf_to_canonical(a[0], a[1])
    elif cmd == "ckpt-check":
        ckpt_check(a[0], int(a[1]), int(a[2]), a[3] == "1", int(a[4]))
    elif cmd == "make-data":
        make_data(a[0], a[1], int(a[2]), int(a[3]), [int(x) for x in a[4:]])
    elif cmd == "reference-loss":
        reference_loss(a[0], a[1], int(a[2]), int(a[3]))
    else:
        fail(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
