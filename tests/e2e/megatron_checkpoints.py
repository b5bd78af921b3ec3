#!/usr/bin/env python3
"""Writes GPT checkpoints as Megatron-LM and Megatron-DeepSpeed save them (torch.save), from
one set of random GPT-2 weights that is also written as a Hugging Face folder, for
tests/e2e/megatron_import.sh. Written from Megatron's documented layouts, not from trident:

  * legacy model: {'language_model': {'embedding': {'word_embeddings': {'weight'},
    'position_embeddings': {'weight'}}, 'encoder' (older: 'transformer'): {'layers.N.<module>.*',
    'final_layernorm.*'}}, 'word_embeddings_for_head': {'weight'}} (last stage of a pipeline);
  * Megatron-core: flat 'embedding.*', 'decoder.layers.N.*', 'decoder.final_layernorm.*',
    'output_layer.weight' (the tied copy on a last stage that is not the first), '_extra_state';
  * tensor parallelism: word embedding (padded vocabulary), QKV and dense_h_to_4h split by rows;
    attention dense and dense_4h_to_h weights by columns; the rest replicated;
  * QKV rows per rank: [heads][q,k,v][head_dim] (checkpoint_version >= 2), [heads][head_dim][q,k,v]
    (1.0), [q,k,v][heads][head_dim] (0, the key absent);
  * pipelines: local layer numbers on every stage; with virtual chunks 'model0', 'model1', chunk v
    of stage p holding layers v * L / vp + p * L / (pp * vp) onwards;
  * Megatron-DeepSpeed: global_stepN/ with layer_XX-model_TT-model_states.pt per layer (DeepSpeed's
    pipeline) or mp_rank_TT_model_states.pt with the model under 'module'.

Usage: megatron_checkpoints.py OUT   (prints one line per case: NAME HF-REFERENCE VOCAB EXTRA-FLAGS)
       megatron_checkpoints.py check-export MEGATRON-DIR HF-DIR TP PP DTYPE layernorm|norm|mcore TOKENIZER
           torch.load's view of trident's --to megatron export against the state dicts built here
       megatron_checkpoints.py check-dist-export MEGATRON-DIR HF-DIR TP PP DTYPE TOKENIZER
           trident's --to megatron --ckpt-format torch_dist export (dcp_reader.py) against
           megatron_dist's folder of the same weights
"""
import argparse
import collections
import enum
import io
import json
import os
import re
import struct
import sys

import torch

import dcp_writer

L, C, HEADS, P = 4, 32, 4, 32
HD = C // HEADS


class PositionEmbeddingType(enum.Enum):  # Megatron-DeepSpeed's, pickled as an enum member
    rotary = 1
    absolute = 2
    alibi = 3


# Args as microsoft/Megatron-DeepSpeed saves them: a list of experts, its own spellings.
MICROSOFT_ARGS = {"num_experts": [1], "normalization": "layernorm",
                  "position_embedding_type": PositionEmbeddingType.absolute}


def gpt2_weights(vocab, seed):
    """GPT2LMHeadModel tensors (Conv1D weights [in, out]) and extra padding rows of wte."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g) * 0.5
    w = {"wte": r(vocab, C), "wpe": r(P, C), "ln_f.weight": r(C), "ln_f.bias": r(C)}
    for i in range(L):
        for n, s in [("ln_1.weight", (C,)), ("ln_1.bias", (C,)), ("attn.c_attn.weight", (C, 3 * C)),
                     ("attn.c_attn.bias", (3 * C,)), ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                     ("ln_2.weight", (C,)), ("ln_2.bias", (C,)), ("mlp.c_fc.weight", (C, 4 * C)),
                     ("mlp.c_fc.bias", (4 * C,)), ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))]:
            w[f"h.{i}.{n}"] = r(*s)
    return w, r(2048, C)


def write_hf(path, w, vocab):
    os.makedirs(path, exist_ok=True)
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in w.items():
        raw = t.float().contiguous().numpy().tobytes()
        hf_name = "transformer." + (name + ".weight" if name in ("wte", "wpe") else name)
        header[hf_name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    json.dump({"model_type": "gpt2", "n_layer": L, "n_embd": C, "n_head": HEADS, "n_positions": P, "vocab_size": vocab,
               "activation_function": "gelu_new"}, open(os.path.join(path, "config.json"), "w"))


def megatron_args(vocab_padded, tp, pp, dtype, tokenizer, vp=None, **extra):
    a = argparse.Namespace(
        num_layers=L, hidden_size=C, ffn_hidden_size=4 * C, num_attention_heads=HEADS, kv_channels=HD,
        max_position_embeddings=P, seq_length=P, padded_vocab_size=vocab_padded, make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vp,
        fp16=dtype == torch.float16, bf16=dtype == torch.bfloat16, params_dtype=dtype, tokenizer_type=tokenizer,
        layernorm_epsilon=1e-5, bias_gelu_fusion=True, openai_gelu=False, untie_embeddings_and_output_weights=False,
        position_embedding_type="learned_absolute", normalization="LayerNorm", swiglu=False, add_bias_linear=True,
        hidden_dropout=0.1, attention_dropout=0.1, init_method_std=0.02, consumed_train_samples=640)
    for k, v in extra.items():
        setattr(a, k, v)
    return a


def qkv_shard(t, tp, rank, version):
    """Rank `rank`'s rows of a [3C(, C)] QKV tensor in trident/HF order, in Megatron's order."""
    rest = t.shape[1:]
    heads = HEADS // tp
    x = t.reshape(3, HEADS, HD, *rest)[:, rank * heads:(rank + 1) * heads]  # [3][heads][hd]
    if version >= 2.0:
        x = x.transpose(0, 1)  # [heads][3][hd]
    elif version >= 1.0:
        x = x.permute(1, 2, 0, *range(3, x.dim()))  # [heads][hd][3]
    y = x.reshape(3 * heads * HD, *rest).contiguous()
    # Megatron's forward views the rank's QKV output as [heads][3 * hd] (>= 2.0): check the
    # layout against that view once, so the fixture says what Megatron computes.
    if version >= 2.0:
        q = y.reshape(heads, 3, HD, *rest)[:, 0]
        assert torch.equal(q.reshape(heads * HD, *rest), t[rank * heads * HD:(rank + 1) * heads * HD])
    return y


def megatron_layer(w, i, tp, rank, version, dtype):
    """One transformer layer's tensors of TP rank `rank` under canonical module names."""
    rows = lambda t: t.chunk(tp, 0)[rank]
    cols = lambda t: t.chunk(tp, 1)[rank]
    p = lambda n: w[f"h.{i}.{n}"]
    out = {
        "ln_1.weight": p("ln_1.weight"), "ln_1.bias": p("ln_1.bias"),
        "qkv.weight": qkv_shard(p("attn.c_attn.weight").t(), tp, rank, version),
        "qkv.bias": qkv_shard(p("attn.c_attn.bias"), tp, rank, version),
        "dense.weight": cols(p("attn.c_proj.weight").t()), "dense.bias": p("attn.c_proj.bias"),
        "ln_2.weight": p("ln_2.weight"), "ln_2.bias": p("ln_2.bias"),
        "fc1.weight": rows(p("mlp.c_fc.weight").t()), "fc1.bias": rows(p("mlp.c_fc.bias")),
        "fc2.weight": cols(p("mlp.c_proj.weight").t()), "fc2.bias": p("mlp.c_proj.bias"),
    }
    return {k: v.to(dtype).clone() for k, v in out.items()}


LEGACY_NAMES = {"ln_1": "input_layernorm", "qkv": "self_attention.query_key_value", "dense": "self_attention.dense",
                "ln_2": "post_attention_layernorm", "fc1": "mlp.dense_h_to_4h", "fc2": "mlp.dense_4h_to_h"}
OLD_NAMES = dict(LEGACY_NAMES, qkv="attention.query_key_value", dense="attention.dense")
NORM_NAMES = dict(LEGACY_NAMES, ln_1="input_norm", ln_2="post_attention_norm")
MCORE_LOCAL = {"ln_1": "input_layernorm", "qkv": "self_attention.linear_qkv", "dense": "self_attention.linear_proj",
               "ln_2": "pre_mlp_layernorm", "fc1": "mlp.linear_fc1", "fc2": "mlp.linear_fc2"}


# Megatron-core's order of a layer's modules (its state dict's and named_parameters()'):
# Attention builds linear_proj before SelfAttention its linear_qkv; with Transformer Engine's
# spec the input norm is linear_qkv's (LayerNormLinear's layer_norm_* first).
MCORE_ORDER = {False: ["ln_1", "dense", "qkv", "ln_2", "fc1", "fc2"], True: ["dense", "ln_1", "qkv", "ln_2", "fc1", "fc2"]}


def rename(layer, names, te=False):
    out = collections.OrderedDict()
    for k, v in layer.items():
        mod, wb = k.split(".")
        if te and mod in ("ln_1", "ln_2"):  # Transformer Engine fuses the norms into the next linear
            out[("self_attention.linear_qkv" if mod == "ln_1" else "mlp.linear_fc1") + ".layer_norm_" + wb] = v
        else:
            out[names[mod] + "." + wb] = v
    return out


def embedding_rows(wte, pad, vocab_padded, tp, rank, dtype):
    full = torch.cat([wte, pad[:vocab_padded - wte.shape[0]]])
    return full.chunk(tp, 0)[rank].to(dtype).clone()


def layout_ranges(layout, pp):
    """(chunk, stage) -> global layer numbers of Megatron-core's --pipeline-model-parallel-layout
    (PipelineParallelLayerLayout): parse_str_to_list's two patterns unrolled, virtual stage i
    being chunk i // pp of stage i % pp, and the 't's numbered in the list's order."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    ranges, first = {}, 0
    for i, stage in enumerate(text.split("|")):
        ranges[(i // pp, i % pp)] = list(range(first, first + stage.count("t")))
        first += stage.count("t")
    return ranges


def layer_ranges(pp, vp, first=0, last=0, embedding=False, loss=False, layout=None):
    """(chunk, stage) -> global layer numbers: Megatron-core's get_num_layers_to_build and
    get_transformer_layer_offset, with its uneven stages (--decoder-first/last-pipeline-num-layers
    as first/last, 0 for None; --account-for-embedding/loss-in-pipeline-split;
    --pipeline-model-parallel-layout, which sets the chunks too)."""
    if layout:
        return layout_ranges(layout, pp)
    if first or last:
        middle_stages, middle = pp - bool(first) - bool(last), L - first - last
        def count(v, s):
            return (first if s == 0 and first else last if s == pp - 1 and last else middle // middle_stages) // vp

        def offset(v, s):
            first_chunk, middle_chunk = first // vp, middle // vp
            total = first_chunk + middle_chunk + last // vp
            middle_rank = s - 1 if first else s
            return v * total + (0 if s == 0 else first_chunk + middle_rank * (middle_chunk // max(middle_stages, 1)))
    else:
        counted = L + embedding + loss
        per = counted // (pp * vp)
        def count(v, s):
            return per - (embedding and s == 0 and v == 0) - (loss and s == pp - 1 and v == vp - 1)

        def offset(v, s):
            return v * (counted // vp) + s * per - (embedding and not (s == 0 and v == 0))
    return {(v, s): list(range(offset(v, s), offset(v, s) + count(v, s))) for v in range(vp) for s in range(pp)}


def write_tracker(out, iteration):
    """Megatron's latest_checkpointed_iteration.txt: an iteration or 'release'."""
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))


def save(obj, path, legacy_format=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy_format)


def rank_models(w, pad, vocab_padded, tp, pp, t, s, dtype, version, names, mcore=False, te=False, vp=1,
                head_noise=False, outer="encoder", linear_extra_state=False, uneven=None):
    """The model state dicts (one per virtual chunk) of TP rank t on pipeline stage s.
    linear_extra_state: Megatron-core's parallel linear layers' '_extra_state' (None) after
    each one's bias, as GPTModel.state_dict() of the local layer spec holds them. uneven:
    layer_ranges's keywords for Megatron's uneven stages."""
    ranges = layer_ranges(pp, vp, **(uneven or {}))
    models = []
    for v in range(vp):
        first, last = s == 0 and v == 0, s == pp - 1 and v == vp - 1
        emb = embedding_rows(w["wte"], pad, vocab_padded, tp, t, dtype)
        if mcore:
            m = collections.OrderedDict()
            if first:
                m["embedding.word_embeddings.weight"] = emb
                m["embedding.position_embeddings.weight"] = w["wpe"].to(dtype)
            for j, g in enumerate(ranges[(v, s)]):
                layer = megatron_layer(w, g, tp, t, version, dtype)
                layer = {f"{mod}.{wb}": layer[f"{mod}.{wb}"] for mod in MCORE_ORDER[te] for wb in ("weight", "bias")}
                for k, x in rename(layer, names, te).items():
                    m[f"decoder.layers.{j}.{k}"] = x
                    if linear_extra_state and k.endswith(".bias") and "linear_" in k:
                        m[f"decoder.layers.{j}.{k[:-len('bias')]}_extra_state"] = None
                if te:
                    m[f"decoder.layers.{j}.self_attention.linear_qkv._extra_state"] = io.BytesIO(b"fp8")
                    m[f"decoder.layers.{j}.mlp.linear_fc2._extra_state"] = None
            if last:
                m["decoder.final_layernorm.weight"] = w["ln_f.weight"].to(dtype)
                m["decoder.final_layernorm.bias"] = w["ln_f.bias"].to(dtype)
                if not first:
                    m["output_layer.weight"] = emb.clone()
                m["output_layer._extra_state"] = None
        else:
            enc = collections.OrderedDict()
            for j, g in enumerate(ranges[(v, s)]):
                for k, x in rename(megatron_layer(w, g, tp, t, version, dtype), names).items():
                    enc[f"layers.{j}.{k}"] = x
            lm = {}
            if first:
                lm["embedding"] = {"word_embeddings": {"weight": emb},
                                   "position_embeddings": {"weight": w["wpe"].to(dtype)}}
            if last:
                final = "final_norm" if names is NORM_NAMES else "final_layernorm"  # renamed with the layers' norms
                enc[final + ".weight"] = w["ln_f.weight"].to(dtype)
                enc[final + ".bias"] = w["ln_f.bias"].to(dtype)
            lm[outer] = enc
            m = {"language_model": lm}
            if last and not first:
                head = emb.clone()
                if head_noise:
                    head[0, 0] += 1
                m["word_embeddings_for_head"] = {"weight": head}
        models.append(m)
    return models


def padded_size(vocab, tp):
    return -(-vocab // (128 * tp)) * 128 * tp


def megatron_lm(out, w, pad, vocab, tp, pp, dtype, version, names, folder="iter_0000007", tracker="7",
                legacy_format=False, tokenizer="NullTokenizer", args_extra=None, vp=1, no_args=False, **model_kw):
    args = megatron_args(padded_size(vocab, tp), tp, pp, dtype, tokenizer, vp if vp > 1 else None, **(args_extra or {}))
    for t in range(tp):
        for s in range(pp):
            models = rank_models(w, pad, padded_size(vocab, tp), tp, pp, t, s, dtype, version, names, vp=vp, **model_kw)
            state = {"args": args, "iteration": 7, "optimizer": {"state": {}}, "rng_state": [{"x": 1}]}
            if no_args:  # NVIDIA's released GPT-2 345M holds only the model
                state = {}
            if version:
                state["checkpoint_version"] = version
            if vp == 1:
                state["model"] = models[0]
            else:
                for v, m in enumerate(models):
                    state[f"model{v}"] = m
            rank = f"mp_rank_{t:02d}" + (f"_{s:03d}" if pp > 1 else "")
            save(state, os.path.join(out, folder, rank, "model_optim_rng.pt"), legacy_format)
    write_tracker(out, tracker)


def megatron_deepspeed(out, w, pad, vocab, tp, dtype, pipeline, microsoft=False):
    vocab_padded = padded_size(vocab, tp)
    args = megatron_args(vocab_padded, tp, 1, dtype, "NullTokenizer", **(MICROSOFT_ARGS if microsoft else {}))
    step = os.path.join(out, "global_step5")
    for t in range(tp):
        emb = embedding_rows(w["wte"], pad, vocab_padded, tp, t, dtype)
        layers = [rename(megatron_layer(w, i, tp, t, 3.0, dtype), LEGACY_NAMES) for i in range(L)]
        ln_f = collections.OrderedDict(weight=w["ln_f.weight"].to(dtype), bias=w["ln_f.bias"].to(dtype))
        client = {"args": args, "iteration": 5, "checkpoint_version": 3.0, "tokens": 12345}
        if pipeline:  # GPTModelPipe's numbering: embedding 1, layers 3.. (microsoft: 2..), final norm L + 4 (L + 2)
            first_layer, final_norm = (2, L + 2) if microsoft else (3, L + 4)
            save(collections.OrderedDict([("word_embeddings.weight", emb), ("position_embeddings.weight", w["wpe"].to(dtype))]),
                 os.path.join(step, f"layer_01-model_{t:02d}-model_states.pt"))
            for i, layer in enumerate(layers):
                save(layer, os.path.join(step, f"layer_{i + first_layer:02d}-model_{t:02d}-model_states.pt"))
            save(ln_f, os.path.join(step, f"layer_{final_norm:02d}-model_{t:02d}-model_states.pt"))
            for s in range(2):  # DeepSpeed's model-states files of a 2-stage pipeline: rank s * tp + t
                save(dict(client, module=None, dp_world_size=1, mp_world_size=tp, ds_version="0.9.0"),
                     os.path.join(step, f"mp_rank_{s * tp + t:02d}_model_states.pt"))
        else:
            enc = collections.OrderedDict()
            for i, layer in enumerate(layers):
                for k, x in layer.items():
                    enc[f"layers.{i}.{k}"] = x
            enc.update({"final_layernorm." + k: v for k, v in ln_f.items()})
            module = {"language_model": {"embedding": {"word_embeddings": {"weight": emb},
                                                       "position_embeddings": {"weight": w["wpe"].to(dtype)}},
                                         "encoder": enc}}
            save(dict(client, module=module, dp_world_size=1, mp_world_size=tp, ds_version="0.9.0"),
                 os.path.join(step, f"mp_rank_{t:02d}_model_states.pt"))
    with open(os.path.join(out, "latest"), "w") as f:
        f.write("global_step5")
    write_tracker(out, "5")


SPLIT_AXIS = {"qkv.weight": 0, "qkv.bias": 0, "fc1.weight": 0, "fc1.bias": 0, "dense.weight": 1, "fc2.weight": 1}


def as_view(x, axis):
    """x as a view into a larger storage (torch.save keeps the whole storage): at a storage
    offset, and strided when its split axis is 1."""
    if axis == 1:
        wide = torch.zeros(x.shape[0], 2 * x.shape[1], dtype=x.dtype)
        wide[:, x.shape[1]:] = x
        return wide[:, x.shape[1]:]
    big = torch.zeros(2 * x.numel() + 3, dtype=x.dtype)
    big[3:3 + x.numel()] = x.flatten()
    return big[3:3 + x.numel()].view(x.shape)


LINEAR_MODULES = ("self_attention.linear_proj", "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2")


def linear_extra_states(wr, rank, g, te):
    """Layer g's parallel linear layers' '_extra_state' ShardedObjects at their place on the
    stacked layer axis, saved by TP rank 0 as the list of the one datum: Transformer Engine's
    (a buffer of its FP8 metadata) or the local spec's (None)."""
    for module in LINEAR_MODULES:
        wr.add_object(rank, f"decoder.layers.{module}._extra_state/shard_{g}_{L}", [io.BytesIO(b"fp8") if te else None])


def megatron_dist(out, w, pad, vocab, tp, pp, dtype, te=False, stacked=True, views=False, drop_chunk=None,
                  overlap_chunk=None, complex_key=None):
    """Megatron-core's --ckpt-format torch_dist: iter_0000007/ holding metadata.json, common.pt
    (args, iteration, checkpoint_version, the optimizer's param groups) and the DCP files of the
    tp x pp ranks' pieces (dcp_writer.py). Each tensor is keyed whole: the layers stacked under
    'decoder.layers.<module>' with a first axis of L, a piece at its layer's global number, or
    (stacked False, heterogeneous models) 'decoder.layers.N.<module>'; pieces split as tensor
    parallelism splits them, a replicated one saved by TP rank 0 only; the tied head not saved;
    the linear layers' '_extra_state' (Transformer Engine's or the local spec's) and 'rng_state' as
    pickled objects; Adam's exp_avg of the
    fc1 weights under 'optimizer.state.exp_avg.<key>'. views: pieces saved as views of larger
    storages. drop_chunk, overlap_chunk: a key whose last piece is left out of .metadata, or
    overlaps the one before; complex_key: a key saved as complex64 (broken files). The norms'
    keys are Transformer Engine's ('self_attention.linear_qkv.layer_norm_weight') with either
    layer spec: the local spec maps its own to them (sharded_state_dict_keys_map)."""
    vocab_padded = padded_size(vocab, tp)
    folder = os.path.join(out, "iter_0000007")
    wr = dcp_writer.Writer(folder)
    per = L // pp
    for s in range(pp):
        for t in range(tp):
            rank = s * tp + t
            if s == 0:
                emb = embedding_rows(w["wte"], pad, vocab_padded, tp, t, dtype)
                wr.add_tensor(rank, "embedding.word_embeddings.weight", (vocab_padded, C), (t * emb.shape[0], 0), emb)
                if t == 0:
                    wr.add_tensor(rank, "embedding.position_embeddings.weight", (P, C), (0, 0), w["wpe"].to(dtype))
            for g in range(s * per, (s + 1) * per):
                for k, x in megatron_layer(w, g, tp, t, 3.0, dtype).items():
                    axis = SPLIT_AXIS.get(k)
                    if axis is None and t > 0:
                        continue
                    # Sharded keys name the norms as Transformer Engine does whatever the spec
                    # (the local spec's sharded_state_dict_keys_map).
                    (name,) = rename({k: x}, MCORE_LOCAL, te=True).keys()
                    size, offsets = list(x.shape), [0] * x.dim()
                    if axis is not None:
                        size[axis] *= tp
                        offsets[axis] = t * x.shape[axis]
                    if views:
                        x = as_view(x, axis)
                    if stacked:
                        key, size, offsets, x = "decoder.layers." + name, [L] + size, [g] + offsets, x.unsqueeze(0)
                    else:
                        key = f"decoder.layers.{g}.{name}"
                    wr.add_tensor(rank, key, size, offsets, x.to(torch.complex64) if key == complex_key else x)
                    if k == "fc1.weight":  # optimizer state, skipped: Adam's moment, and one in a dtype
                        # trident does not read (complex here, as float8 would be)
                        wr.add_tensor(rank, "optimizer.state.exp_avg." + key, size, offsets, torch.zeros(x.shape))
                        wr.add_tensor(rank, "optimizer.state.odd." + key, size, offsets,
                                      torch.zeros(x.shape, dtype=torch.complex64))
                if stacked and t == 0:
                    linear_extra_states(wr, rank, g, te)
            if s == pp - 1 and t == 0:
                for wb in ("weight", "bias"):
                    wr.add_tensor(rank, "decoder.final_layernorm." + wb, (C,), (0,), w["ln_f." + wb].to(dtype))
            wr.add_object(rank, f"rng_state/shard_{s}.{t}_{pp}.{tp}", [{"random_rng_state": (3, (1, 2), None)}])
    if drop_chunk:
        wr.sdm[drop_chunk].chunks.pop()
    if overlap_chunk:  # its last piece moved one row up, onto the one before
        chunk = wr.sdm[overlap_chunk].chunks[-1]
        info = wr.storage.pop(next(k for k in wr.storage if k.fqn == overlap_chunk and k.offset == chunk.offsets))
        moved = list(chunk.offsets)
        moved[-2] -= 1
        chunk.offsets = torch.Size(moved)
        wr.storage[type(next(iter(wr.storage)))(overlap_chunk, moved)] = info
    wr.finish(mcore_data={k: {"nd_reformulated_orig_global_shape": None} for k in wr.sdm})
    args = megatron_args(vocab_padded, tp, pp, dtype, "NullTokenizer", ckpt_format="torch_dist")
    torch.save({"args": args, "checkpoint_version": 3.0, "iteration": 7, "num_floating_point_operations_so_far": 1e12,
                "opt_param_scheduler": {"max_lr": 1e-3, "num_steps": 7 * 64},
                "optimizer": {"param_groups": [{"lr": 1e-3, "weight_decay": 0.1, "params": []}]}},
               os.path.join(folder, "common.pt"))
    with open(os.path.join(folder, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
                   "common_backend_version": 1}, f)
    write_tracker(out, "7")


def read_hf(path):
    """A Hugging Face folder's F32 tensors under the names gpt2_weights uses."""
    import numpy
    blob = open(os.path.join(path, "model.safetensors"), "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    w = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        t = torch.from_numpy(numpy.frombuffer(blob[8 + n + b:8 + n + e], dtype=numpy.float32).copy())
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        w[name[:-len(".weight")] if name in ("wte.weight", "wpe.weight") else name] = t.reshape(info["shape"])
    return w


def expect_same(got, want, where):
    if want is None:
        assert got is None, where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (where, list(got), list(want))
        for k in want:
            expect_same(got[k], want[k], f"{where}.{k}")
    else:
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), where


def check_export(out, hf, tp, pp, dtype_name, norm, tokenizer):
    """torch.load every file of trident's Megatron export and compare it with the legacy model's
    state dict built here from the Hugging Face folder (padding rows zero, version 3.0, the
    LayerNorms named '*_layernorm' or, with norm == 'norm', '*_norm'; with norm == 'mcore'
    Megatron-core's GPTModel of the local layer spec), and its args with what Megatron's
    load_checkpoint reads."""
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    names = {"norm": NORM_NAMES, "layernorm": LEGACY_NAMES, "mcore": MCORE_LOCAL}[norm]
    mcore = norm == "mcore"
    w = read_hf(hf)
    vocab = w["wte"].shape[0]
    assert open(os.path.join(out, "latest_checkpointed_iteration.txt")).read() == "release"
    for t in range(tp):
        for s in range(pp):
            rank = f"mp_rank_{t:02d}" + (f"_{s:03d}" if pp > 1 else "")
            state = torch.load(os.path.join(out, "release", rank, "model_optim_rng.pt"))
            want = rank_models(w, torch.zeros(2048, C), padded_size(vocab, tp), tp, pp, t, s, dtype, 3.0, names,
                               mcore=mcore, linear_extra_state=mcore)
            expect_same(state["model"], want[0], rank)
            a = state["args"]
            got = (a.num_layers, a.hidden_size, a.num_attention_heads, a.num_key_value_heads, a.kv_channels,
                   a.ffn_hidden_size, a.padded_vocab_size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size,
                   a.pipeline_model_parallel_size, a.params_dtype, a.max_position_embeddings, a.tokenizer_type,
                   a.consumed_train_samples, a.hidden_dropout, a.attention_dropout, a.init_method_std,
                   a.untie_embeddings_and_output_weights, a.position_embedding_type, a.add_position_embedding)
            assert got == (L, C, HEADS, HEADS, HD, 4 * C, padded_size(vocab, tp), 128, tp, pp, dtype, P, tokenizer, 0,
                           0.1, 0.1, 0.02, False, "learned_absolute", True), got
            assert (a.use_legacy_models, a.transformer_impl) == (not mcore, "local"), a
            assert (a.bias_gelu_fusion, a.openai_gelu) == (True, False), a  # the tanh GELU (an erf model: False, False)
            assert state["checkpoint_version"] == 3.0
    print(f"check-export: {tp * pp} files as {'Megatron-core' if mcore else 'Megatron-LM legacy'} GPT model")


def same_tensors(ours, ref, vocab, where):
    """Two DCP folders' assembled tensors (dcp_reader.read) are the same keys, dtypes and shapes,
    and the same values but for the word embedding's padding rows (past VOCAB)."""
    assert sorted(ours) == sorted(ref), (where, sorted(set(ours) ^ set(ref)))
    for k, want in ref.items():
        got = ours[k]
        assert got.dtype == want.dtype and got.shape == want.shape, (where, k, got.dtype, got.shape, want.dtype, want.shape)
        if k.endswith("word_embeddings.weight"):
            got, want = got[:vocab], want[:vocab]
        assert torch.equal(got, want), (where, k)


def check_dist_export(out, hf, tp, pp, dtype_name, tokenizer):
    """trident's --ckpt-format torch_dist export of the Hugging Face folder's weights: its model
    tensors and linear layers' extra states equal megatron_dist's (Megatron-core's sharded state
    dict, written here), and its common.pt, metadata.json and tracker what Megatron reads."""
    import tempfile
    import dcp_reader
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    w = read_hf(hf)
    vocab = w["wte"].shape[0]
    with tempfile.TemporaryDirectory() as ref_dir:
        megatron_dist(ref_dir, {k: v.to(dtype).float() for k, v in w.items()}, torch.zeros(2048, C), vocab, tp, pp, dtype)
        ref, ref_objects, _ = dcp_reader.read(os.path.join(ref_dir, "iter_0000007"))
    assert open(os.path.join(out, "latest_checkpointed_iteration.txt")).read() == "release"
    folder = os.path.join(out, "release")
    ours, objects, _ = dcp_reader.read(folder)
    same_tensors(ours, {k: v for k, v in ref.items() if not k.startswith("optimizer.")}, vocab, "model")
    extra = sorted(k for k in ref_objects if "_extra_state" in k)
    assert sorted(objects) == extra, (sorted(objects), extra)
    assert all(v == [None] for v in objects.values()), objects
    common = torch.load(os.path.join(folder, "common.pt"), weights_only=False)
    a = common["args"]
    got = (a.num_layers, a.hidden_size, a.num_attention_heads, a.padded_vocab_size, a.tensor_model_parallel_size,
           a.pipeline_model_parallel_size, a.params_dtype, a.tokenizer_type, a.ckpt_format, a.use_legacy_models)
    assert got == (L, C, HEADS, padded_size(vocab, tp), tp, pp, dtype, tokenizer, "torch_dist", False), got
    assert (common["checkpoint_version"], common["iteration"]) == (3.0, 0), common
    with open(os.path.join(folder, "metadata.json")) as f:
        assert json.load(f) == {"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                                "common_backend": "torch", "common_backend_version": 1}
    print(f"check-dist-export: {len(ours)} tensors and {len(objects)} extra states as Megatron-core's sharded "
          f"state dict saves them")


def main():
    if sys.argv[1] == "check-export":
        check_export(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), *sys.argv[6:9])
        return
    if sys.argv[1] == "check-dist-export":
        check_dist_export(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), *sys.argv[6:8])
        return
    out = sys.argv[1]
    cases = []
    refs = {}

    def weights(dtype, vocab):
        """The weights rounded to `dtype` (as the checkpoint holds them) and their HF folder."""
        w, pad = gpt2_weights(vocab, seed=vocab)
        w = {k: v.to(dtype).float() for k, v in w.items()}
        name = f"hf-{str(dtype).split('.')[1]}-{vocab}"
        if name not in refs:
            write_hf(os.path.join(out, name), w, vocab)
            refs[name] = True
        return w, pad, name

    def case(name, dtype, vocab, flags, fn, **kw):
        w, pad, ref = weights(dtype, vocab)
        fn(os.path.join(out, name), w, pad, vocab, dtype=dtype, **kw)
        cases.append(f"{name} {ref} {vocab} {flags}")

    f16, bf16, f32 = torch.float16, torch.bfloat16, torch.float32
    case("lm-tp2-pp2", f16, 1000, "--vocab-size 1000", megatron_lm, tp=2, pp=2, version=3.0, names=LEGACY_NAMES)
    case("lm-release-old", f32, 50257, "", megatron_lm, tp=2, pp=1, version=0, names=OLD_NAMES, folder="release",
         tracker="release", legacy_format=True, tokenizer="GPT2BPETokenizer", outer="transformer")
    case("lm-v1-norm", f32, 1000, "--vocab-size 1000", megatron_lm, tp=2, pp=1, version=1.0, names=NORM_NAMES)
    case("mcore-te-vpp", bf16, 1000, "--vocab-size 1000", megatron_lm, tp=2, pp=2, version=3.0, names=MCORE_LOCAL,
         mcore=True, te=True, vp=2)
    case("mcore-local", f32, 1000, "--vocab-size 1000", megatron_lm, tp=1, pp=1, version=3.0, names=MCORE_LOCAL,
         mcore=True)
    case("ds-pipeline", bf16, 1000, "--vocab-size 1000", megatron_deepspeed, tp=2, pipeline=True)
    case("ds-module", f16, 1000, "--vocab-size 1000", megatron_deepspeed, tp=2, pipeline=False)
    case("ds-microsoft", f32, 1000, "--vocab-size 1000", megatron_deepspeed, tp=1, pipeline=True, microsoft=True)
    case("dist-te-tp2-pp2", bf16, 1000, "--vocab-size 1000", megatron_dist, tp=2, pp=2, te=True, views=True)
    case("dist-layers-tp2", f16, 1000, "--vocab-size 1000", megatron_dist, tp=2, pp=1, stacked=False)
    # Without the fused bias-GELU Megatron computes the exact (erf) GELU: the legacy model's
    # F.gelu, and Megatron-core's whatever openai_gelu says (the legacy model's tanh GELU).
    case("lm-erf-gelu", f32, 1000, "--vocab-size 1000", megatron_lm, tp=1, pp=1, version=3.0, names=LEGACY_NAMES,
         args_extra={"bias_gelu_fusion": False})
    case("mcore-erf-gelu", f32, 1000, "--vocab-size 1000", megatron_lm, tp=1, pp=1, version=3.0, names=MCORE_LOCAL,
         mcore=True, args_extra={"bias_gelu_fusion": False, "openai_gelu": True, "use_legacy_models": False})
    case("lm-no-args", f16, 50257, "--num-attention-heads 4", megatron_lm, tp=1, pp=1, version=0, names=OLD_NAMES,
         folder="release", tracker="release", legacy_format=True, outer="transformer", no_args=True)
    # Models trident cannot represent, and a tied head that differs.
    w, pad, _ = weights(f32, 1000)
    megatron_lm(os.path.join(out, "bad-untied"), w, pad, 1000, 1, 1, f32, 3.0, LEGACY_NAMES,
                args_extra={"untie_embeddings_and_output_weights": True})
    megatron_lm(os.path.join(out, "bad-swiglu"), w, pad, 1000, 1, 1, f32, 3.0, LEGACY_NAMES, args_extra={"swiglu": True})
    megatron_lm(os.path.join(out, "bad-head"), w, pad, 1000, 1, 2, f32, 3.0, LEGACY_NAMES, head_noise=True)
    megatron_lm(os.path.join(out, "bad-rotary"), w, pad, 1000, 1, 1, f32, 3.0, LEGACY_NAMES,
                args_extra=dict(MICROSOFT_ARGS, position_embedding_type=PositionEmbeddingType.rotary))
    megatron_dist(os.path.join(out, "bad-dist-chunk"), w, pad, 1000, 2, 1, f32,
                  drop_chunk="decoder.layers.mlp.linear_fc1.weight")
    megatron_dist(os.path.join(out, "bad-dist-overlap"), w, pad, 1000, 2, 1, f32,
                  overlap_chunk="decoder.layers.self_attention.linear_qkv.weight")
    megatron_dist(os.path.join(out, "bad-dist-dtype"), w, pad, 1000, 1, 1, f32,
                  complex_key="decoder.layers.mlp.linear_fc2.weight")
    megatron_dist(os.path.join(out, "bad-dist-zarr"), w, pad, 1000, 1, 1, f32)
    with open(os.path.join(out, "bad-dist-zarr", "iter_0000007", "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "zarr", "sharded_backend_version": 1}, f)
    print("\n".join(cases))


if __name__ == "__main__":
    main()
