#!/usr/bin/env python3
"""GPT-2 written directly in PyTorch: the independent reference for trident's loss curve.

  pytorch_gpt2.py init OUT_DIR --layers L --hidden C --heads H --positions P [--seed S]
                  [--activation gelu_new|gelu]
      writes a freshly initialised GPT-2 as a Hugging Face folder (config.json,
      model.safetensors), which trident-convert --from hf imports, so both sides start from
      the same bits. --activation: the config's activation_function, GPT-2's tanh GELU
      (gelu_new, the default) or the exact erf one (gelu, Megatron's --no-bias-gelu-fusion);
      train and generate compute the one the folder's config names.
  pytorch_gpt2.py train HF_DIR DATA_PREFIX INDEX_MAP --iters N --global-batch G
                  --seq-length S --lr LR --min-lr MIN --warmup-iters W --weight-decay WD
                  --clip-grad CLIP [--eod-mask-loss --micro-batch M [--per-token-loss]]
                  [--reset-position-ids] [--reset-attention-mask] [--decay-iters D]
                  [--decoupled-lr LR --decoupled-min-lr MIN]
      trains that model on the samples trident trains on and prints one line per iteration:
      "<iteration> <lm loss> <grad norm>". The switches are Megatron's (the documents of a
      sample end after each <|endoftext|>). --decay-iters: the first N iterations of a
      D-iteration schedule. --decoupled-lr: Megatron-core's own peak and final rate for the
      word embedding (the input layer and the tied output layer) on the same schedule.
  pytorch_gpt2.py generate HF_DIR VOCAB_JSON --tokens N
      greedy decoding from <|endoftext|> of a Hugging Face folder (trident-convert --to hf
      writes one): N tokens, end-of-text included, printed as one JSON string of the
      decoded text (GPT-2's byte-level decoding).

What "trained the same way" means here, each piece written from its public definition and
none of it from trident: pre-LayerNorm GPT-2 (eps 1e-5, tanh GELU, causal softmax attention
scaled by 1/sqrt(head dim), tied input/output embedding; the erf GELU where the config says
gelu); the mean token cross-entropy of the
global batch; gradients clipped to a global L2 norm (Megatron's and torch's coefficient,
max / (norm + 1e-6)); torch.optim.AdamW (betas 0.9/0.999, eps 1e-8) with weight decay on the
2-D weights and embeddings only, as Megatron groups them; Megatron's learning rate, linear
warm-up then cosine to the minimum, counted in samples, the rate of iteration k taken at
(k - 1) x G samples. The samples are Megatron's GPTDataset ones, assembled from trident's
cached index maps (doc_idx, sample_idx, shuffle_idx) and the .bin/.idx files by the
__getitem__ rule: sample i is shuffle_idx[i]'s seq_length + 1 tokens, which may run across
documents; iteration k reads samples [(k - 1) G, k G).

Only numpy and torch; everything in float32.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

VOCAB = 50257  # GPT-2's BPE vocabulary


# ---- files -------------------------------------------------------------------------------

def write_safetensors(path, tensors):
    """safetensors: u64 header length, JSON header, raw little-endian data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", (name, h["dtype"])
        a, b = h["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(body[a:b], dtype="<f4").reshape(h["shape"]).copy())
    return out


class IndexedDataset:
    """Megatron's MMapIndexedDataset (.idx header, sizes, byte pointers; .bin tokens)."""

    DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
              8: np.uint16}

    def __init__(self, prefix):
        with open(prefix + ".idx", "rb") as f:
            assert f.read(9) == b"MMIDIDX\x00\x00", prefix + ".idx: bad magic"
            version, = struct.unpack("<Q", f.read(8))
            assert version == 1
            code, = struct.unpack("<B", f.read(1))
            count, = struct.unpack("<Q", f.read(8))
            struct.unpack("<Q", f.read(8))  # documents
            self.sizes = np.frombuffer(f.read(4 * count), dtype="<i4")
            self.pointers = np.frombuffer(f.read(8 * count), dtype="<i8")
        self.dtype = np.dtype(self.DTYPES[code]).newbyteorder("<")
        self.bin = np.memmap(prefix + ".bin", dtype=np.uint8, mode="r")

    def doc(self, i):
        start = int(self.pointers[i])
        return np.frombuffer(self.bin[start:start + int(self.sizes[i]) * self.dtype.itemsize], dtype=self.dtype)


class IndexMaps:
    """trident's cache of the split's maps (csrc/data/array_cache.h): magic TRIDARRS, u64
    format version, key hash, scalar count S, array count A; u64 scalars [S] (epochs,
    separate-last-epoch); A x u64 (element bytes, length); the arrays, each padded to 8
    bytes: int32 doc_idx, int64 sample_idx [2 (samples + 1)], int64 shuffle_idx [samples]."""

    def __init__(self, path):
        raw = np.fromfile(path, dtype=np.uint8)
        assert raw[:8].tobytes() == b"TRIDARRS", path + ": not a trident array cache"
        _version, _hash, nscalars, narrays = (int(v) for v in np.frombuffer(raw[8:40].tobytes(), dtype="<u8"))
        assert (nscalars, narrays) == (2, 3), path + ": not a trident index map"
        pos = 40 + 8 * nscalars
        shapes = np.frombuffer(raw[pos:pos + 16 * narrays].tobytes(), dtype="<u8").reshape(narrays, 2)
        pos += 16 * narrays
        arrays = []
        for (width, length), dtype in zip(shapes, ("<i4", "<i8", "<i8")):
            nbytes = int(width) * int(length)
            arrays.append(np.frombuffer(raw[pos:pos + nbytes].tobytes(), dtype=dtype))
            pos += (nbytes + 7) // 8 * 8
        self.doc_idx, sample_idx, self.shuffle_idx = arrays
        self.sample_idx = sample_idx.reshape(-1, 2)

    def sample(self, data, i, seq_length):
        j = int(self.shuffle_idx[i])
        (first, off_f), (last, off_l) = self.sample_idx[j], self.sample_idx[j + 1]
        if first == last:
            tokens = data.doc(self.doc_idx[first])[off_f:off_l + 1]
        else:
            parts = [data.doc(self.doc_idx[first])[off_f:]]
            parts += [data.doc(self.doc_idx[d]) for d in range(first + 1, last)]
            parts.append(data.doc(self.doc_idx[last])[:off_l + 1])
            tokens = np.concatenate(parts)
        assert len(tokens) == seq_length + 1, (i, len(tokens))
        return tokens.astype(np.int64)


# ---- the model ---------------------------------------------------------------------------

def param_shapes(layers, hidden, positions):
    c = hidden
    shapes = {"transformer.wte.weight": (VOCAB, c), "transformer.wpe.weight": (positions, c)}
    for i in range(layers):
        h = f"transformer.h.{i}."
        shapes.update({
            h + "ln_1.weight": (c,), h + "ln_1.bias": (c,),
            h + "attn.c_attn.weight": (c, 3 * c), h + "attn.c_attn.bias": (3 * c,),
            h + "attn.c_proj.weight": (c, c), h + "attn.c_proj.bias": (c,),
            h + "ln_2.weight": (c,), h + "ln_2.bias": (c,),
            h + "mlp.c_fc.weight": (c, 4 * c), h + "mlp.c_fc.bias": (4 * c,),
            h + "mlp.c_proj.weight": (4 * c, c), h + "mlp.c_proj.bias": (c,),
        })
    shapes["transformer.ln_f.weight"] = (c,)
    shapes["transformer.ln_f.bias"] = (c,)
    return shapes


def init_params(layers, hidden, positions, seed, std=0.15):
    """GPT-2's initialisation scheme with a larger std (GPT-2 uses 0.02; 0.15 puts GELU and
    LayerNorm away from their linear region, where a wrong formula shows): N(0, std) weights,
    N(0, std / sqrt(2 L)) for the two residual projections, LayerNorm gains near 1, biases
    near 0 (a little noise on both, so that a mix-up between them shows)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in param_shapes(layers, hidden, positions).items():
        if name.endswith("c_proj.weight"):
            t = torch.randn(shape, generator=g) * (std / math.sqrt(2 * layers))
        elif len(shape) == 2:
            t = torch.randn(shape, generator=g) * std
        elif "ln_" in name and name.endswith(".weight"):
            t = 1 + 0.1 * torch.randn(shape, generator=g)
        else:
            t = 0.01 * torch.randn(shape, generator=g)
        out[name] = t
    return out


class GPT2(torch.nn.Module):
    def __init__(self, tensors, layers, heads, activation):
        super().__init__()
        # Hugging Face's names: gelu_new is GPT-2's tanh approximation, gelu the exact erf form.
        self.approximate = {"gelu_new": "tanh", "gelu": "none"}[activation]
        self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(v.clone()) for k, v in tensors.items()})
        self.layers, self.heads = layers, heads

    def w(self, name):
        return self.p["transformer__" + name.replace(".", "__")]

    def forward(self, idx, allowed=None, position_ids=None):
        """allowed: [b, 1, t, t] True where a query may attend (causal when None);
        position_ids: [b, t] (0..t-1 when None)."""
        b, t = idx.shape
        c = self.w("wte.weight").shape[1]
        d = c // self.heads
        x = self.w("wte.weight")[idx] + self.w("wpe.weight")[torch.arange(t) if position_ids is None else position_ids]
        causal = torch.ones(t, t, dtype=torch.bool).tril() if allowed is None else allowed
        for i in range(self.layers):
            w = lambda n: self.w(f"h.{i}.{n}")
            h = F.layer_norm(x, (c,), w("ln_1.weight"), w("ln_1.bias"), 1e-5)
            q, k, v = (h @ w("attn.c_attn.weight") + w("attn.c_attn.bias")).split(c, dim=-1)
            q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            x = x + y @ w("attn.c_proj.weight") + w("attn.c_proj.bias")
            h = F.layer_norm(x, (c,), w("ln_2.weight"), w("ln_2.bias"), 1e-5)
            h = F.gelu(h @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"), approximate=self.approximate)
            x = x + h @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
        x = F.layer_norm(x, (c,), self.w("ln_f.weight"), self.w("ln_f.bias"), 1e-5)
        return x @ self.w("wte.weight").t()


def ltor_masks_and_position_ids(data, reset_position_ids, reset_attention_mask):
    """Megatron's get_ltor_masks_and_position_ids with <|endoftext|> as its eod token: a causal
    mask with, for --reset-attention-mask, the keys up to each eod hidden from the queries after
    it, and position ids that, for --reset-position-ids, drop after each eod by the length of
    the document it ends. Returns (allowed [b, 1, t, t], True where a query may attend;
    position_ids [b, t])."""
    b, t = data.shape
    allowed = torch.ones(b, 1, t, t, dtype=torch.bool).tril()
    position_ids = torch.arange(t).unsqueeze(0).repeat(b, 1)
    for s in range(b):
        prev_index = 0
        for i in (data[s] == VOCAB - 1).nonzero().flatten().tolist():
            if reset_attention_mask:
                allowed[s, 0, i + 1:, :i + 1] = False
            if reset_position_ids:
                position_ids[s, i + 1:] -= i + 1 - prev_index
                prev_index = i + 1
    return allowed, position_ids


def megatron_lr(step, warmup, decay, lr, min_lr):
    """Megatron's cosine schedule with linear warm-up, all in samples."""
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if step > decay:
        return min_lr
    ratio = (step - warmup) / (decay - warmup)
    return min_lr + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (lr - min_lr)


# ---- commands ----------------------------------------------------------------------------

def cmd_init(a):
    import os
    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "model.safetensors"), init_params(a.layers, a.hidden, a.positions, a.seed))
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": a.activation,
              "layer_norm_epsilon": 1e-5, "n_layer": a.layers, "n_head": a.heads, "n_embd": a.hidden,
              "n_positions": a.positions, "n_ctx": a.positions, "vocab_size": VOCAB, "tie_word_embeddings": True}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def cmd_train(a):
    import os
    torch.manual_seed(0)
    config = json.load(open(os.path.join(a.hf, "config.json")))
    model = GPT2(read_safetensors(os.path.join(a.hf, "model.safetensors")), config["n_layer"], config["n_head"],
                 config["activation_function"])
    wte = model.w("wte.weight")
    own_rate = a.decoupled_lr is not None  # the word embedding in a group of its own
    decay = [p for p in model.p.values() if p.dim() == 2 and not (own_rate and p is wte)]  # matrices, embeddings
    no_decay = [p for p in model.p.values() if p.dim() != 2]  # LayerNorm gains, biases
    groups = [{"params": decay, "weight_decay": a.weight_decay, "max_lr": a.lr, "min_lr": a.min_lr},
              {"params": no_decay, "weight_decay": 0.0, "max_lr": a.lr, "min_lr": a.min_lr}]
    if own_rate:
        groups.append({"params": [wte], "weight_decay": a.weight_decay, "max_lr": a.decoupled_lr,
                       "min_lr": a.min_lr if a.decoupled_min_lr is None else a.decoupled_min_lr})
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    data, maps = IndexedDataset(a.data), IndexMaps(a.index_map)
    g = a.global_batch
    masked = 0
    for it in range(1, a.iters + 1):
        batch = np.stack([maps.sample(data, i, a.seq_length) for i in range((it - 1) * g, it * g)])
        tokens = torch.from_numpy(batch)
        if a.reset_position_ids or a.reset_attention_mask:
            logits = model(tokens[:, :-1], *ltor_masks_and_position_ids(tokens[:, :-1], a.reset_position_ids,
                                                                        a.reset_attention_mask))
        else:
            logits = model(tokens[:, :-1])
        if a.eod_mask_loss:
            # Megatron's loss_mask: no loss where the input token is <|endoftext|>; each
            # micro-batch's loss the mean over the tokens it keeps, the micro-batches' mean
            # trained on; the logged loss the mean over the batch's kept tokens.
            losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1),
                                     reduction="none").view(g, -1)
            mask = (tokens[:, :-1] != VOCAB - 1).to(losses.dtype)
            masked += int((mask == 0).sum())
            loss = ((losses * mask).sum() / mask.sum()).detach()
            if a.per_token_loss:
                # Megatron-core's --calculate-per-token-loss: the batch's kept losses summed,
                # divided by their count, whatever micro-batch holds them.
                trained = (losses * mask).sum() / mask.sum()
            else:
                mb = a.micro_batch
                trained = sum((losses[m:m + mb] * mask[m:m + mb]).sum() / mask[m:m + mb].sum()
                              for m in range(0, g, mb)) / (g // mb)
        else:
            trained = loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        trained.backward()
        params = [p for p in model.p.values()]
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params)).item()
        coeff = a.clip_grad / (norm + 1e-6)
        if a.clip_grad > 0 and coeff < 1.0:
            for p in params:
                p.grad.mul_(coeff)
        for group in opt.param_groups:
            group["lr"] = megatron_lr((it - 1) * g, a.warmup_iters * g, (a.decay_iters or a.iters) * g,
                                      group["max_lr"], group["min_lr"])
        opt.step()
        print(f"{it} {loss.item():.9e} {norm:.9e}", flush=True)
    if a.eod_mask_loss:
        print(f"masked {masked} of {a.iters * g * a.seq_length} targets", file=sys.stderr)


def gpt2_byte_decoder():
    """GPT-2's byte-level alphabet: the printable Latin-1 bytes stand for themselves, the
    others for code points 256 + k in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def cmd_generate(a):
    import os
    config = json.load(open(os.path.join(a.hf, "config.json")))
    model = GPT2(read_safetensors(os.path.join(a.hf, "model.safetensors")), config["n_layer"], config["n_head"],
                 config["activation_function"])
    tokens = [VOCAB - 1]  # <|endoftext|>
    with torch.no_grad():
        for _ in range(a.tokens):
            tokens.append(int(model(torch.tensor([tokens]))[0, -1].argmax()))
    id_to_piece = {i: piece for piece, i in json.load(open(a.vocab)).items()}
    to_byte = gpt2_byte_decoder()
    data = bytes(to_byte[c] for t in tokens[1:] for c in id_to_piece[t])
    print(json.dumps(data.decode("utf-8", errors="replace")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("init")
    i.add_argument("out")
    i.add_argument("--layers", type=int, required=True)
    i.add_argument("--hidden", type=int, required=True)
    i.add_argument("--heads", type=int, required=True)
    i.add_argument("--positions", type=int, required=True)
    i.add_argument("--seed", type=int, default=1234)
    i.add_argument("--activation", choices=["gelu_new", "gelu"], default="gelu_new")
    t = sub.add_parser("train")
    t.add_argument("hf")
    t.add_argument("data")
    t.add_argument("index_map")
    for name, typ in [("iters", int), ("global-batch", int), ("seq-length", int), ("lr", float), ("min-lr", float),
                      ("warmup-iters", int), ("weight-decay", float), ("clip-grad", float)]:
        t.add_argument("--" + name, type=typ, required=True)
    t.add_argument("--decay-iters", type=int, help="the schedule's length when it is not --iters (a run cut short)")
    t.add_argument("--eod-mask-loss", action="store_true")
    t.add_argument("--decoupled-lr", type=float)
    t.add_argument("--decoupled-min-lr", type=float)
    t.add_argument("--reset-position-ids", action="store_true")
    t.add_argument("--reset-attention-mask", action="store_true")
    t.add_argument("--micro-batch", type=int, help="with --eod-mask-loss: the samples each loss mean covers")
    t.add_argument("--per-token-loss", action="store_true",
                   help="with --eod-mask-loss: one mean over the batch's kept targets (Megatron-core's "
                        "--calculate-per-token-loss) instead of the micro-batches' means")
    gen = sub.add_parser("generate")
    gen.add_argument("hf")
    gen.add_argument("vocab")
    gen.add_argument("--tokens", type=int, required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    {"init": cmd_init, "train": cmd_train, "generate": cmd_generate}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
