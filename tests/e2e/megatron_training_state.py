#!/usr/bin/env python3
"""Writes a trident checkpoint's training state as Megatron-LM saves it with --ckpt-format torch and
its non-distributed optimizer (model_optim_rng.pt of every tp x pp rank), for
tests/e2e/megatron_resume.sh. Written from Megatron-LM's and apex's sources, not from trident's
importer:

  * 'model' (or 'model0', 'model1', ... per virtual chunk): the model state dict as
    megatron_checkpoints.py builds it (legacy or Megatron-core names);
  * 'optimizer': optimizer.state_dict() of
      - FP32Optimizer (fp32): the inner optimizer's {'state', 'param_groups'};
      - Float16OptimizerWithFloat16Params (fp16, bf16): {'optimizer': inner, 'grad_scaler':
        DynamicGradScaler's {'scale': tensor([s]), 'growth_tracker', 'hysteresis_tracker'} (fp16),
        'fp32_from_fp16_params': [[master per parameter] per group]};
    the inner state_dict of apex's FusedAdam ('step' an int in each param group) or torch's Adam
    (a 0-d float tensor 'step' in each parameter's state); parameter indices counted through
    the groups, and the groups as Megatron's get_param_groups makes them: the model chunks'
    named_parameters() in order, the 2-D weights (weight decay) in the first group, the biases
    and LayerNorm parameters (1-D, no weight decay) in the second;
  * 'opt_param_scheduler': OptimizerParamScheduler.state_dict() (steps counted in samples);
  * 'iteration', 'checkpoint_version' 3.0, 'args' with consumed_train_samples,
    consumed_valid_samples, seed, global_batch_size, use_distributed_optimizer.

With OPTIMIZER distributed-* (--use-distributed-optimizer), 'optimizer' holds the inner state
dict without 'state' and its groups without 'params' ('step' in each group), and each rank
folder's distrib_optim.pt the parameters' fp32 'param', 'exp_avg' and 'exp_avg_sq' in each model
chunk's gradient buffer, laid out as Megatron's (ParamAndGradBuffer, save_parameter_state):
the chunk's parameters in reverse named_parameters() order, buckets closed after the parameter
that reaches BUCKET elements, data-parallel size DP (5, args.data_parallel_size), and by version:
  distributed-whole      2023: one tensor of the whole buffer (no buckets), packed, padded to a
                         multiple of dp;
  distributed-buckets    late 2023: a list of tensors per bucket, each padded to a multiple of dp,
                         with 'bucket_sizes';
  distributed-coalesced  Megatron-core 0.13.1 on: parameters at multiples of 64 elements from their
                         bucket's start, buckets padded to lcm(dp, 128), the shared embedding in a
                         bucket of its own (pp > 1: the bucket before closed at its aligned start),
                         saved as one tensor of the buckets without their end padding, keyed
                         (param dtype, grad dtype), 'buckets_coalesced';
  distributed-coalesced-v08  Megatron-core 0.8 to 0.13.0: the same, but a shared embedding whose
                         aligned start is no multiple of dp moved to a multiple of lcm(dp, 128).
Padding holds noise (torch.empty) except in the coalesced format (zeros).

With LAYOUT torch_dist-* the checkpoint is Megatron-core's --ckpt-format torch_dist (write_torch_dist):
indexed (the non-distributed optimizer), fully-reshardable, model-space (fully_sharded_model_space),
dp-reshardable (the distributed optimizer's buckets as they are in memory: dp_reshardable below),
dp-zero (its dp_zero_gather_scatter: the same, gathered per rank into one object).
MODEL mcore-te (torch_dist only): Megatron-core with Transformer Engine's layer spec.

Usage: megatron_training_state.py TRIDENT_ITER_DIR OUT fp32|fp16|bf16 TP PP VP apex|torch legacy|mcore|mcore-te
                                  [LAYOUT] [MUTATION]
  LAYOUT: indexed (default), distributed-whole, distributed-buckets, distributed-coalesced,
  distributed-coalesced-v08, deepspeed-pipeline, deepspeed-module, deepspeed0-pipeline, deepspeed0-module,
  torch_dist-indexed,
  torch_dist-fully-reshardable, torch_dist-model-space, torch_dist-dp-reshardable, torch_dist-dp-zero.
  TRIDENT_ITER_DIR: a tp1 x pp1 trident checkpoint of a 4-layer, 32-wide, 4-head, 32-position model.
  MUTATION: decoupled (a --decoupled-lr run's groups as Megatron-core 0.12 to 0.15 make them),
  decoupled-sorted (as newer Megatron-core makes them: group_kinds), lr-override (decoupled-sorted's
  groups in a run without --decoupled-lr: another override of a group's rate, as muP's), bucket-space (torch_dist: common.pt says fully_sharded_bucket_space, which trident does not read), swapped (two LayerNorm weights' states exchanged within their group: indexed), betas (Adam's
  betas saved as (0.9, 0.95), where the run had (0.9, 0.999)), no-optimizer
  (saved with --no-save-optim), no-distrib-file (distributed, without distrib_optim.pt), moved (distributed:
  a parameter's master one element off); first-stage-1, embedding-loss-counted, layout-chunks (Megatron's
  uneven pipeline stages: UNEVEN below).
"""
import collections
import math
import json
import os
import struct
import sys
import types

import numpy
import torch

import dcp_writer
import megatron_checkpoints as mc


def read_safetensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = blob[8 + n + b:8 + n + e]
        if info["dtype"] == "F32":
            a = numpy.frombuffer(raw, dtype=numpy.float32).copy()
        elif info["dtype"] == "F16":
            a = numpy.frombuffer(raw, dtype=numpy.float16).astype(numpy.float32)
        elif info["dtype"] == "BF16":
            a = (numpy.frombuffer(raw, dtype=numpy.uint16).astype(numpy.uint32) << 16).view(numpy.float32)
        else:
            raise ValueError(info["dtype"])
        out[name] = torch.from_numpy(a).reshape(info["shape"])
    return out


def hf_layout(canonical, vocab):
    """trident's canonical tensors ([out, in] weights, wte padded) -> the Hugging Face names and
    Conv1D layout ([in, out]) that megatron_checkpoints.py's builders take."""
    w = {"wte": canonical["wte"][:vocab], "wpe": canonical["wpe"],
         "ln_f.weight": canonical["ln_f.weight"], "ln_f.bias": canonical["ln_f.bias"]}
    names = {"ln_1.weight": "ln_1.weight", "ln_1.bias": "ln_1.bias", "attn.c_attn.weight": "attn.qkv.weight",
             "attn.c_attn.bias": "attn.qkv.bias", "attn.c_proj.weight": "attn.proj.weight",
             "attn.c_proj.bias": "attn.proj.bias", "ln_2.weight": "ln_2.weight", "ln_2.bias": "ln_2.bias",
             "mlp.c_fc.weight": "mlp.fc.weight", "mlp.c_fc.bias": "mlp.fc.bias",
             "mlp.c_proj.weight": "mlp.proj.weight", "mlp.c_proj.bias": "mlp.proj.bias"}
    for i in range(mc.L):
        for hf, tr in names.items():
            t = canonical[f"h.{i}.{tr}"]
            w[f"h.{i}.{hf}"] = t.t() if t.dim() == 2 else t
    return w


def flat(d, prefix=""):
    """A nested state dict's tensors under dotted keys, in order (torch's named_parameters order)."""
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, prefix + k + ".")
        elif isinstance(v, torch.Tensor) and not k.endswith("_extra_state"):
            yield prefix + k, v


DP, BUCKET = 5, 100  # small buckets, so that they close after weights and biases alike


def buffer_layout(params, fmt, shared, bucket_size=BUCKET):
    """Megatron's gradient buffer of one chunk: [(bucket start, unpadded end, padded end,
    [(key, start, end)])], `params` [(key, numel)] in named_parameters() order; buckets closed
    after the parameter that reaches bucket_size elements (None: one bucket)."""
    coalesced = fmt.startswith("distributed-coalesced")
    align, bucket_pad = (64, math.lcm(DP, 128)) if coalesced else (1, DP)
    # 2023's buffer had no buckets; v08's are large enough that the shared embedding comes into
    # a bucket that holds parameters already (as Megatron's 40M-element buckets do).
    bucket_size = {"distributed-whole": None, "distributed-coalesced-v08": 30 * BUCKET}.get(fmt, bucket_size)
    pad = lambda x, m: -(-x // m) * m
    buckets, items, bucket_start, cursor = [], [], 0, 0

    def close(end):
        nonlocal bucket_start, cursor, items
        buckets.append((bucket_start, end, pad(end, bucket_pad), items))
        bucket_start = cursor = pad(end, bucket_pad)
        items = []

    for key, n in reversed(params):
        start = bucket_start + pad(cursor - bucket_start, align)
        own = coalesced and key in shared  # the shared embedding's bucket of its own
        if own:
            if fmt == "distributed-coalesced-v08" and start % DP:  # 0.8 to 0.13.0: moved to lcm(dp, 128)
                start = bucket_start + pad(start - bucket_start, math.lcm(DP, 128))
            if items:
                close(start)  # the padding before it counted in the bucket before
            start = bucket_start
        items.append((key, start, start + n))
        cursor = start + n
        if (bucket_size and cursor - bucket_start >= bucket_size) or own:
            close(cursor)
    if items:
        close(items[-1][2])
    return buckets


def distrib_state(chunks, fmt, dtype, noise, pipeline):
    """distrib_optim.pt's object for one rank: chunks[v] = [(key, {"param"|"exp_avg"|"exp_avg_sq": tensor})]
    in named_parameters() order; with a pipeline, the tied embedding and head are 'shared_embedding'."""
    coalesced = fmt.startswith("distributed-coalesced")
    out = {"buckets_coalesced": True} if coalesced else {}
    for v, chunk in enumerate(chunks):
        shared = {k for k, _ in chunk if pipeline and k.endswith(("word_embeddings.weight", "output_layer.weight",
                                                                   "word_embeddings_for_head.weight"))}
        values = dict(chunk)
        buckets = buffer_layout([(k, x["param"].numel()) for k, x in chunk], fmt, shared)
        tensors = {}
        for key in ("param", "exp_avg", "exp_avg_sq"):
            per_bucket = []
            for start, end, padded, items in buckets:
                size = end - start if coalesced else padded - start
                b = torch.zeros(size) if coalesced else torch.randn(size, generator=noise) * 3
                for k, a, e in items:
                    b[a - start:e - start] = values[k][key].flatten()
                per_bucket.append(b)
            tensors[key] = per_bucket if fmt == "distributed-buckets" else torch.cat(per_bucket)
        if fmt == "distributed-buckets":
            out["bucket_sizes"] = [padded - start for start, _, padded, _ in buckets]
        if coalesced:
            tensors["numel_unpadded"] = sum(end - start for start, end, _, _ in buckets)
            out[v] = {(dtype, torch.float32): tensors}
        else:
            out[v] = {torch.float32: tensors}
    return out


def torch_dist(folder, states, vocab, tp, pp, dtype, layout, te=False, extra=None, uneven=None):
    """Megatron-core's --ckpt-format torch_dist of the weights and the optimizer's state by name:
    states maps '' (the weights, in `dtype`) and 'exp_avg', 'exp_avg_sq', 'master' to tensors in
    Hugging Face layout; keys 'optimizer.state.<exp_avg|exp_avg_sq|fp32_param>.<model key>'
    (fully_reshardable: the master under 'param'), the layers stacked, each tensor-parallel piece
    saved by one rank (replicated ones by TP rank 0; the tied head not saved), and the linear layers'
    '_extra_state' objects. The distributed
    optimizer's fully_sharded_model_space saves each piece as two data-parallel ranks' halves of
    its flattened elements, reformulated as Megatron-core's torch_dist strategy does: global
    shape (fragments per axis..., piece numel), a half at (the piece's fragment coordinates...,
    its start), and Metadata.mcore_data[key]['nd_reformulated_orig_global_shape'] the shape.
    te: Transformer Engine's layer spec (its extra states); the norms are keyed as its
    ('self_attention.linear_qkv.layer_norm_*') with either spec.
    extra(writer): adds more items before the index is written. uneven: mc.layer_ranges's
    keywords for Megatron's uneven stages."""
    wr = dcp_writer.Writer(folder)
    padded = mc.padded_size(vocab, tp)
    stage_layers = collections.defaultdict(list)  # every chunk's layers (a layout has its own chunks)
    for (_, s), layers in mc.layer_ranges(pp, 1, **(uneven or {})).items():
        stage_layers[s] += layers
    mcore = {}
    master = "param" if layout == "torch_dist-fully-reshardable" else "fp32_param"
    prefixes = {"": "", "exp_avg": "optimizer.state.exp_avg.", "exp_avg_sq": "optimizer.state.exp_avg_sq.",
                "master": f"optimizer.state.{master}."}

    def put(rank, key, size, offsets, x, optimizer):
        if not (optimizer and layout == "torch_dist-model-space"):
            wr.add_tensor(rank, key, size, offsets, x)
            mcore[key] = {}
            return
        frag = [g // n for g, n in zip(size, x.shape)]
        coords = [o // n for o, n in zip(offsets, x.shape)]
        flat = x.flatten()
        half = flat.numel() // 2 + 1
        for d, (a, b) in enumerate([(0, half), (half, flat.numel())]):
            wr.add_tensor(2 * rank + d, key, frag + [flat.numel()], coords + [a],
                          flat[a:b].clone().reshape([1] * len(frag) + [b - a]))
        mcore[key] = {"nd_reformulated_orig_global_shape": torch.Size(size)}

    for state, w in states.items():
        dt = dtype if state == "" else torch.float32
        if state == "master" and layout == "torch_dist-indexed" and dtype == torch.float32:
            continue  # FP32Optimizer: the weights are the masters
        for s in range(pp):
            for t in range(tp):
                rank = s * tp + t
                key = lambda k: prefixes[state] + k
                if s == 0:
                    emb = mc.embedding_rows(w["wte"], torch.zeros(2048, mc.C), padded, tp, t, dt)
                    put(rank, key("embedding.word_embeddings.weight"), [padded, mc.C], [t * emb.shape[0], 0], emb, state)
                    if t == 0:
                        put(rank, key("embedding.position_embeddings.weight"), [mc.P, mc.C], [0, 0], w["wpe"].to(dt), state)
                for g in stage_layers[s]:
                    for k, x in mc.megatron_layer(w, g, tp, t, 3.0, dt).items():
                        axis = mc.SPLIT_AXIS.get(k)
                        if axis is None and t > 0:
                            continue
                        # Transformer Engine's norm names with either spec (the local spec's
                        # sharded_state_dict_keys_map).
                        (name,) = mc.rename({k: x}, mc.MCORE_LOCAL, te=True).keys()
                        size, offsets = list(x.shape), [0] * x.dim()
                        if axis is not None:
                            size[axis] *= tp
                            offsets[axis] = t * x.shape[axis]
                        put(rank, key("decoder.layers." + name), [mc.L] + size, [g] + offsets, x.unsqueeze(0), state)
                    if state == "" and t == 0:
                        mc.linear_extra_states(wr, rank, g, te)
                if s == pp - 1 and t == 0:
                    for wb in ("weight", "bias"):
                        put(rank, key("decoder.final_layernorm." + wb), [mc.C], [0], w["ln_f." + wb].to(dt), state)
    if extra:
        extra(wr)
    wr.finish(mcore_data=mcore)


def chunk_params(w, padded, tp, pp, vp, t, s, v, te, uneven):
    """Model chunk v's parameters on TP rank t of stage s (fp32, Megatron's layout) in Megatron-core's
    named_parameters() order, which is the order modules are built in: GPTModel's embedding
    (word, position), decoder layers, final norm, output layer (a copy of the tied embedding on a
    later stage); in a layer input_layernorm, self_attention (Attention builds linear_proj, then
    SelfAttention its linear_qkv), pre_mlp_layernorm, mlp.linear_fc1, mlp.linear_fc2; Transformer
    Engine's LayerNormLinear holds the fused norm's layer_norm_weight and _bias before its own."""
    first, last = s == 0 and v == 0, s == pp - 1 and v == vp - 1
    emb = mc.embedding_rows(w["wte"], torch.zeros(2048, mc.C), padded, tp, t, torch.float32)
    out = []
    if first:
        out += [("embedding.word_embeddings.weight", emb), ("embedding.position_embeddings.weight", w["wpe"])]
    order = ["dense", "ln_1", "qkv", "ln_2", "fc1", "fc2"] if te else ["ln_1", "dense", "qkv", "ln_2", "fc1", "fc2"]
    for j, g in enumerate(mc.layer_ranges(pp, vp, **uneven)[(v, s)]):
        layer = mc.megatron_layer(w, g, tp, t, 3.0, torch.float32)
        out += [(f"decoder.layers.{j}.{m}.{wb}", layer[f"{m}.{wb}"]) for m in order for wb in ("weight", "bias")]
    if last:
        out += [("decoder.final_layernorm.weight", w["ln_f.weight"]), ("decoder.final_layernorm.bias", w["ln_f.bias"])]
        if not first:
            out.append(("output_layer.weight", emb.clone()))
    return out


def dp_reshardable(wr, states, vocab, tp, pp, vp, dtype, te, groups, scaler, noise, mutation, zero=False, uneven=None):
    """The distributed optimizer's dp_reshardable format (DistributedOptimizer.sharded_state_dict),
    or with `zero` its dp_zero_gather_scatter format (the rank's state gathered into one object
    '<group>.param_state' holding distrib_optim.pt's coalesced dict, distrib_state above).
    dp_reshardable:
    per model-parallel rank g = stage * tp + TP rank, model chunk v and bucket b (Megatron-core's
    coalesced layout, DP ranks, BUCKET-element buckets) a flat tensor per state
    'optimizer.distributed.dp_group_idx_<g>.gbuf_idx_<v>.dtype_<(param, grad dtype)>.bucket_idx_<b>.<K>'
    of the bucket without its end padding, each DP rank saving its shard's parameter pieces and
    the gaps between them (torch.empty: noise) as chunks; and the state dict's other entries as
    objects '<group>.optimizer' ({'param_groups'}), '<group>.grad_scaler' (fp16),
    '<group>.per_bucket_numel' and '_unpadded', each saved as [datum] under '<key>/shard_0_1'."""
    padded = mc.padded_size(vocab, tp)
    for s in range(pp):
        for t in range(tp):
            g = s * tp + t
            group = f"optimizer.distributed.dp_group_idx_{g}"
            numel, unpadded, gathered = [], [], []
            buffer = -1  # Megatron builds a gradient buffer for each chunk with parameters alone
            for v in range(vp):
                chunks = {k: chunk_params(states[k], padded, tp, pp, vp, t, s, v, te, uneven or {})
                          for k in ("master", "exp_avg", "exp_avg_sq")}
                if not chunks["master"]:
                    continue
                buffer += 1
                names = [n for n, _ in chunks["master"]]
                shared = {n for n in names if pp > 1 and n in ("embedding.word_embeddings.weight", "output_layer.weight")}
                # Buckets that each data-parallel rank has parameters in (Megatron refuses to save
                # an empty one): one a chunk (Megatron's default without --overlap-grad-reduce), or
                # of 1000 elements in fp16 runs.
                buckets = buffer_layout([(n, x.numel()) for n, x in chunks["master"]], "distributed-coalesced", shared,
                                        10 * BUCKET if dtype == torch.float16 else None)
                if mutation == "moved" and g == 0 and v == 0:  # one master off by an element: found nowhere
                    n, x = chunks["master"][3]
                    chunks["master"][3] = (n, torch.roll(x.flatten(), 1).reshape(x.shape))
                gathered.append([(n, {"param": x, "exp_avg": dict(chunks["exp_avg"])[n],
                                      "exp_avg_sq": dict(chunks["exp_avg_sq"])[n]}) for n, x in chunks["master"]])
                for b, (start, end, padded_end, items) in enumerate(buckets if not zero else []):
                    local = (padded_end - start) // DP
                    key = f"{group}.gbuf_idx_{buffer}.dtype_{(dtype, torch.float32)}.bucket_idx_{b}"
                    for k, K in (("master", "param"), ("exp_avg", "exp_avg"), ("exp_avg_sq", "exp_avg_sq")):
                        flat_state = torch.randn(end - start, generator=noise) * 3
                        values = dict(chunks[k])
                        for n, a, e in items:
                            flat_state[a - start:e - start] = values[n].flatten()
                        cuts = {a - start for _, a, _ in items} | {e - start for _, _, e in items}
                        for r in range(DP):
                            lo, hi = r * local, min((r + 1) * local, end - start)
                            edges = sorted({lo, hi} | {x for x in cuts if lo < x < hi})
                            for x, y in zip(edges, edges[1:]):
                                wr.add_tensor(100 + g * DP + r, f"{key}.{K}", [end - start], [x], flat_state[x:y].clone())
                numel.append({(dtype, torch.float32): [p - a for a, _, p, _ in buckets]})
                unpadded.append({(dtype, torch.float32): [e - a for a, e, _, _ in buckets]})
            objects = {"optimizer": {"param_groups": groups}, "per_bucket_numel": numel,
                       "per_bucket_numel_unpadded": unpadded}
            if zero:
                objects["param_state"] = distrib_state(gathered, "distributed-coalesced", dtype, noise, pp > 1)
            if scaler is not None:
                objects["grad_scaler"] = scaler
            for name, datum in objects.items():
                wr.add_object(100 + g * DP, f"{group}.{name}/shard_0_1", [datum])


def scheduler_state(sched):
    """OptimizerParamScheduler.state_dict() of the run whose state trident saved as `sched`."""
    return {"max_lr": sched["max_lr"], "lr_warmup_steps": int(sched["lr_warmup_steps"]),
            "num_steps": int(sched["num_steps"]), "lr_decay_style": sched["lr_decay_style"],
            "lr_decay_steps": int(sched["lr_decay_steps"]), "min_lr": sched["min_lr"], "start_wd": sched["start_wd"],
            "end_wd": sched["end_wd"], "wd_incr_style": sched["wd_incr_style"],
            "wd_incr_steps": int(sched["wd_incr_steps"])}


def annealing_lr_state(sched):
    """Megatron-DeepSpeed's AnnealingLR.state_dict() (megatron/learning_rates.py), counted in samples."""
    return {"max_lr": sched["max_lr"], "warmup_steps": int(sched["lr_warmup_steps"]), "num_steps": int(sched["num_steps"]),
            "warmup_tokens": 0, "num_tokens": 0, "decay_style": sched["lr_decay_style"],
            "decay_steps": int(sched["lr_decay_steps"]), "min_lr": sched["min_lr"]}


def param_groups(steps, step_style, with_params=None, kinds=("W", "N"), sched=None, mutation=""):
    """Megatron's groups of `kinds` (group_kinds: W the decayed weights, N the rest, D a
    --decoupled-lr run's): with their parameter indices, or (sharded state dicts, the distributed
    optimizer) without."""
    groups = []
    for g, kind in enumerate(kinds):
        group = {"lr": 1e-3, "weight_decay": 0.0 if kind == "N" else 0.01, "betas": (0.9, 0.999), "eps": 1e-8,
                 "bias_correction": True, "wd_mult": 0.0 if kind == "N" else 1.0, "lr_mult": 1.0}
        if has_decoupled_groups(mutation):
            group.update(decoupled_fields(kind, sched, mutation))
        if with_params is not None:
            group["params"] = with_params[g]
        if step_style == "apex":
            group["step"] = steps
        groups.append(group)
    return groups


EMBEDDING_OR_OUTPUT = ("word_embeddings.weight", "output_layer.weight")


def group_kinds(keys, shape, mutation):
    """A rank's param groups, each (kind, its parameters (chunk, key) in named_parameters()
    order): W the decayed weights, N the biases and LayerNorms, and with --decoupled-lr (MUTATION
    decoupled*, Megatron-core's model) D the word embedding and output layer, which Megatron-core
    marks is_embedding_or_output_parameter. Without it [W, N], as newer Megatron-core sorts
    them; decoupled: Megatron-core 0.12 to 0.15's order, each group where its first parameter
    lies on the rank, then the groups only other ranks have (all_gather_object's: rank 0's
    order, D W N), empty; decoupled-sorted (and lr-override): newer Megatron-core's sorted W D N."""
    decoupled = has_decoupled_groups(mutation)

    def kind(vk):
        if decoupled and vk[1].endswith(EMBEDDING_OR_OUTPUT):
            return "D"
        return "W" if len(shape[vk]) == 2 else "N"
    order = ["W", "D", "N"] if decoupled else ["W", "N"]
    if mutation == "decoupled":
        order = []
        for vk in keys:
            if kind(vk) not in order:
                order.append(kind(vk))
        order += [k for k in "DWN" if k not in order]
    return [(k, [vk for vk in keys if kind(vk) == k]) for k in order]


def has_decoupled_groups(mutation):
    """Whether MUTATION writes a third group of its own rate (decoupled*, lr-override)."""
    return mutation.startswith("decoupled") or mutation == "lr-override"


def shared_group_kinds(mutation):
    """The groups of a file every rank shares (torch_dist's common.pt and objects): rank 0's
    (group_kinds of the first stage: D W N in Megatron-core 0.12 to 0.15), or newer
    Megatron-core's sorted W D N."""
    if mutation == "decoupled":
        return ("D", "W", "N")
    return ("W", "D", "N") if has_decoupled_groups(mutation) else ("W", "N")


def decoupled_fields(kind, sched, mutation):
    """The keys by which a --decoupled-lr run's groups differ: Megatron-core 0.12 to 0.15 mark the
    embedding's is_decoupled_lr (_update_min_and_max_lr_in_param_groups sets every group's max_lr
    and min_lr); newer versions override its max_lr and min_lr, default_config False."""
    own = kind == "D"
    out = {"is_expert_parallel": False, "is_decoupled_lr": own and mutation == "decoupled",
           "max_lr": sched["decoupled_lr"] if own else sched["max_lr"],
           "min_lr": sched["decoupled_min_lr"] if own else sched["min_lr"]}
    if mutation in ("decoupled-sorted", "lr-override"):
        out["default_config"] = not own
    out["lr"] = out["max_lr"]  # the scheduler's rate when saved; its peak, as elsewhere here
    return out


def write_torch_dist(out, meta, params, state, vocab, tp, pp, vp, dtype, layout, step_style, te, args, mutation):
    """The torch_dist checkpoint: the DCP folder (torch_dist above) and common.pt, whose
    'optimizer' is the sharded state dict's non-tensor rest: the Float16 optimizer's
    {'optimizer': {'param_groups'[, 'state': {'common_step'}]}, 'grad_scaler'}, FP32Optimizer's
    {'param_groups'[, 'state']}, the distributed optimizer's {'optimizer': ..., 'grad_scaler',
    'param_state_sharding_type'}."""
    st = meta["trainer_state"]
    folder = os.path.join(out, f"iter_{meta['iteration']:07d}")
    states = {"": params, "exp_avg": state["exp_avg"], "exp_avg_sq": state["exp_avg_sq"], "master": state["master"]}
    states = {k: hf_layout(v, vocab) for k, v in states.items()}
    scaler = None
    if dtype == torch.float16:
        ls = st["loss_scaler"]
        scaler = {"scale": torch.tensor([float(ls["scale"])]), "growth_tracker": ls["growth_tracker"],
                  "hysteresis_tracker": ls["hysteresis_tracker"]}
    extra = None
    bucket_format = {"torch_dist-dp-reshardable": "dp_reshardable", "torch_dist-dp-zero": "dp_zero_gather_scatter"}
    if layout in bucket_format:  # the state in buckets, the rest as objects
        # DistributedOptimizer.state_dict(): 'step' per group
        groups = param_groups(st["optimizer_steps"], "apex", None, shared_group_kinds(mutation), st["opt_param_scheduler"],
                              mutation)
        optimizer_states = states
        extra = lambda wr: dp_reshardable(wr, optimizer_states, vocab, tp, pp, vp, dtype, te, groups, scaler,
                                          torch.Generator().manual_seed(9), mutation, layout == "torch_dist-dp-zero",
                                          UNEVEN.get(mutation))
        states = {"": states[""]}
    torch_dist(folder, states, vocab, tp, pp, dtype, layout, te, extra, UNEVEN.get(mutation))
    distributed = layout != "torch_dist-indexed"
    # The distributed optimizer keeps the step in each group whatever its Adam
    # (DistributedOptimizer.state_dict); the others torch's Adam's once, as 'common_step'.
    kinds = shared_group_kinds(mutation)
    inner = {"param_groups": param_groups(st["optimizer_steps"], "apex" if distributed else step_style, None, kinds,
                                          st["opt_param_scheduler"], mutation)}
    if step_style == "torch" and not distributed:
        inner["state"] = {"common_step": torch.tensor(float(st["optimizer_steps"]))}
    optimizer = inner if dtype == torch.float32 and not distributed else {"optimizer": inner}
    if scaler is not None:
        optimizer["grad_scaler"] = scaler
    if distributed:
        optimizer["param_state_sharding_type"] = {"torch_dist-fully-reshardable": "fully_reshardable",
                                                  "torch_dist-model-space": "fully_sharded_model_space"}.get(layout)
    if layout in bucket_format:  # the groups and scaler are objects in the DCP files
        optimizer = {"param_state_sharding_type": bucket_format[layout]}
    if mutation == "bucket-space":  # the deprecated fully_sharded_bucket_space (not read)
        optimizer = {"param_state_sharding_type": "fully_sharded_bucket_space"}
    args.ckpt_format = "torch_dist"
    torch.save({"args": args, "checkpoint_version": 3.0, "iteration": meta["iteration"],
                "opt_param_scheduler": scheduler_state(st["opt_param_scheduler"]), "optimizer": optimizer,
                "num_floating_point_operations_so_far": 1e12,
                "content_metadata": {"distrib_optim_sharding_type": optimizer.get("param_state_sharding_type"),
                                     "singleton_local_shards": False, "chained_optim_avoid_prefix": True}},
               os.path.join(folder, "common.pt"))
    with open(os.path.join(folder, "metadata.json"), "w") as f:
        json.dump({"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
                   "common_backend_version": 1}, f)
    mc.write_tracker(out, meta["iteration"])


# Mutations that split the pipeline as Megatron's uneven-stage flags do: mc.layer_ranges's
# keywords, and the args Megatron saves for them.
# layout-chunks: --pipeline-model-parallel-layout at pp2 x 3 chunks, stage 0's first chunk the
# embedding alone, stage 1's second nothing at all (no gradient buffer) and its last the loss
# alone (chunks of [0, 2, 1] and [1, 0, 0] layers).
UNEVEN = {"first-stage-1": {"first": 1}, "embedding-loss-counted": {"embedding": True, "loss": True},
          "layout-chunks": {"layout": "E|t|tt||t|L"}}
UNEVEN_ARGS = {"first-stage-1": {"decoder_first_pipeline_num_layers": 1},
               "embedding-loss-counted": {"account_for_embedding_in_pipeline_split": True,
                                          "account_for_loss_in_pipeline_split": True},
               "layout-chunks": {"pipeline_model_parallel_layout": "E|t|tt||t|L"}}


class DynamicLossScaler:
    """A stand-in for DeepSpeed's deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler, which the
    ZeRO optimizer's state dict pickles whole (its __dict__)."""


def _register_deepspeed_classes():
    name = "deepspeed.runtime.fp16.loss_scaler"
    for m in ("deepspeed", "deepspeed.runtime", "deepspeed.runtime.fp16", name):
        sys.modules.setdefault(m, types.ModuleType(m))
    DynamicLossScaler.__module__ = name
    sys.modules[name].DynamicLossScaler = DynamicLossScaler


def stage0_optimizer(named, w, groups, t, s, steps, step_style, st, it, dtype):
    """ZeRO stage 0's optimizer state, saved in the model states (deepspeed/runtime/fp16/
    fused_optimizer.py): fp16's FP16_Optimizer.state_dict() (the loss scale, 'fp32_groups_flat'
    each group's masters flattened without padding, the inner Adam's state dict over those flat
    tensors keyed by group) or, with torch's Adam (STEPS torch), FP16_UnfusedOptimizer's
    ('fp32_groups': a master per parameter; the inner state by parameter index), or fp32's bare
    Adam state dict (the state by parameter index, counted through the groups; DeepSpeed gives a
    parameter without a gradient, as the last stage's position-embedding copy, zeros first, so
    every parameter has state)."""
    state = {k: dict(named(w[k], torch.float32, t, s)) for k in ("master", "exp_avg", "exp_avg_sq")}
    step_of = lambda: {"step": torch.tensor(float(steps))} if step_style == "torch" else {}
    ids = [list(range(len(groups[0]))), list(range(len(groups[0]), len(groups[0]) + len(groups[1])))]
    by_index = {i: dict(exp_avg=state["exp_avg"][n].clone(), exp_avg_sq=state["exp_avg_sq"][n].clone(), **step_of())
                for g in range(2) for i, n in zip(ids[g], groups[g])}
    if dtype == torch.float16 and step_style == "torch":
        ls = st["loss_scaler"]
        return {"dynamic_loss_scale": True, "cur_scale": float(ls["scale"]), "cur_iter": it,
                "last_overflow_iter": it - 1 - ls["growth_tracker"], "scale_factor": 2.0, "scale_window": 2,
                "optimizer_state_dict": {"state": by_index, "param_groups": param_groups(steps, step_style, ids)},
                "fp32_groups": [[state["master"][n].clone() for n in g] for g in groups]}
    if dtype == torch.float16:
        flat = {k: [torch.cat([state[k][n].flatten() for n in g]) for g in groups] for k in state}
        ls = st["loss_scaler"]
        return {"dynamic_loss_scale": True, "cur_scale": float(ls["scale"]), "cur_iter": it,
                "last_overflow_iter": it - 1 - ls["growth_tracker"], "scale_factor": 2.0, "scale_window": 2,
                "optimizer_state_dict": {
                    "state": {g: dict(exp_avg=flat["exp_avg"][g], exp_avg_sq=flat["exp_avg_sq"][g], **step_of())
                              for g in range(2)},
                    "param_groups": param_groups(steps, step_style, [[0], [1]])},
                "fp32_groups_flat": flat["master"], "clip_grad": 1.0}
    return {"state": by_index, "param_groups": param_groups(steps, step_style, ids)}


def write_deepspeed(out, meta, params, state, vocab, tp, pp, dtype, layout, step_style, args, mutation):
    """Megatron-DeepSpeed's checkpoint as DeepSpeed's engine saves it at ZeRO stage 1 (BigScience's
    recipe; deepspeed/runtime/engine.py, zero/stage_1_and_2.py) in global_stepN/, DP data-parallel
    ranks:
      * the weights: GPTModelPipe's layer files layer_<index>-model_TT-model_states.pt (the
        embedding at index 1, layer g at 3 + g, the final norm at L + 4; LAYOUT deepspeed-pipeline)
        or GPTModel's 'module' in mp_rank_TT_model_states.pt (deepspeed-module);
      * mp_rank_XX_model_states.pt per model-parallel rank XX = stage * tp + TP rank: Megatron's
        client state (args, iteration, checkpoint_version), 'param_shapes' (per param group the
        engine module's parameter names and shapes in flattening order), global_steps, ...;
      * [bf16_]zero_pp_rank_<dp>_mp_rank_XX_optim_states.pt: {'optimizer_state_dict':
        {'single_partition_of_fp32_groups', 'base_optimizer_state' (the inner Adam's state dict
        over the flat partitions), 'loss_scaler' (a pickled DynamicLossScaler), ...}}.
    Megatron-DeepSpeed's groups (_get_params_for_weight_decay_optimization over modules() in
    pre-order): the weights of modules other than LayerNorms, then the LayerNorms' parameters and
    every bias; on a stage holding the tied embedding, GPTModelPipe's tied_modules come first in
    named_parameters() (the last stage's copy too). Each group is flattened in that order, padded
    with zeros to a multiple of 2 x DP and split into DP partitions; the last rank's master leaves
    its padding out (not BF16_Optimizer's, bf16). fp32 runs save the elastic form (elastic_checkpoint:
    base_optimizer_state a list of per-group states without padding, 'base_optimizer_state_step'
    the step). Adam's step is saved as the run's (DeepSpeed from 2024 takes no extra
    initial step). LAYOUT deepspeed0-*: ZeRO stage 0 (stage0_optimizer). MUTATION moved: a master
    one element off; no-optimizer: saved without the optimizer's state; init-step:
    Adam's step one more (DeepSpeed before 2024, whose optimizer took a zero-gradient step when
    built)."""
    _register_deepspeed_classes()
    zero0 = layout.startswith("deepspeed0")  # ZeRO stage 0: the optimizer in the model states
    assert not (zero0 and dtype == torch.bfloat16), "bf16 at ZeRO stage 0 runs DeepSpeed's BF16_Optimizer, ZeRO-like"
    st = meta["trainer_state"]
    steps = st["optimizer_steps"] + (1 if mutation == "init-step" else 0)
    it = meta["iteration"]
    folder = os.path.join(out, f"global_step{it}")
    os.makedirs(folder, exist_ok=True)
    pipeline = layout.endswith("-pipeline")
    padded = mc.padded_size(vocab, tp)
    w = {k: hf_layout(v, vocab) for k, v in
         {"": params, "master": state["master"], "exp_avg": state["exp_avg"], "exp_avg_sq": state["exp_avg_sq"]}.items()}
    first_layer, final_norm, per = 3, mc.L + 4, mc.L // pp

    def named(x, dt, t, s):
        """TP rank t of stage s: its parameters in named_parameters() order, under the engine's names."""
        emb = mc.embedding_rows(x["wte"], torch.zeros(2048, mc.C), padded, tp, t, dt)
        layers = [(g, mc.rename(mc.megatron_layer(x, g, tp, t, 3.0, dt), mc.LEGACY_NAMES)) for g in range(s * per, (s + 1) * per)]
        ln_f = [("weight", x["ln_f.weight"].to(dt)), ("bias", x["ln_f.bias"].to(dt))]
        if not pipeline:
            lm = "language_model."
            return ([(lm + "embedding.word_embeddings.weight", emb), (lm + "embedding.position_embeddings.weight", x["wpe"].to(dt))]
                    + [(f"{lm}encoder.layers.{g}.{k}", v) for g, layer in layers for k, v in layer.items()]
                    + [(f"{lm}encoder.final_layernorm.{k}", v) for k, v in ln_f])
        out = []
        if s == 0 or s == pp - 1:  # the tied embedding, and the last stage's copy of it
            out += [("tied_modules.embed.word_embeddings.weight", emb),
                    ("tied_modules.embed.position_embeddings.weight", x["wpe"].to(dt))]
        out += [(f"{first_layer + g}.{k}", v) for g, layer in layers for k, v in layer.items()]
        if s == pp - 1:
            out += [(f"{final_norm}.{k}", v) for k, v in ln_f]
        return out

    is_norm_or_bias = lambda n: n.endswith(".bias") or "layernorm" in n or n.startswith(f"{final_norm}.")
    client = {"args": args, "iteration": it, "checkpoint_version": 3.0, "tokens": 12345, "global_steps": it,
              "global_samples": meta["consumed_samples"], "skipped_steps": 0, "dp_world_size": DP,
              "mp_world_size": tp * pp, "ds_version": "0.12.6", "optimizer": None,
              "lr_scheduler": annealing_lr_state(st["opt_param_scheduler"])}
    for s in range(pp):
        for t in range(tp):
            mp = s * tp + t
            weights = named(w[""], dtype, t, s)
            groups = [[n for n, _ in weights if not is_norm_or_bias(n)], [n for n, _ in weights if is_norm_or_bias(n)]]
            shapes = [collections.OrderedDict((n, dict(weights)[n].shape) for n in g) for g in groups]
            ms = dict(client, param_shapes=None if zero0 else shapes, module=None)
            if not pipeline:
                ms["module"] = collections.OrderedDict(weights)
            if zero0 and mutation != "no-optimizer":
                ms["optimizer"] = stage0_optimizer(named, w, groups, t, s, steps, step_style, st, it, dtype)
            mc.save(ms, os.path.join(folder, f"mp_rank_{mp:02d}_model_states.pt"))
            if pipeline:
                by_file = collections.defaultdict(collections.OrderedDict)
                for n, v in weights:
                    if n.startswith("tied_modules.embed."):
                        if s == 0:
                            by_file[1][n[len("tied_modules.embed."):]] = v
                    else:
                        idx, rest = n.split(".", 1)
                        by_file[int(idx)][rest] = v
                for idx, d in by_file.items():
                    mc.save(d, os.path.join(folder, f"layer_{idx:02d}-model_{t:02d}-model_states.pt"))
            if zero0 or mutation == "no-optimizer":
                continue
            flat = {}
            for k in ("master", "exp_avg", "exp_avg_sq"):
                values = dict(named(w[k], torch.float32, t, s))
                flat[k] = [torch.cat([values[n].flatten() for n in g]) for g in groups]
            if mutation == "moved" and mp == 0:
                flat["master"][0] = torch.roll(flat["master"][0], 1)
            sizes = [x.numel() for x in flat["master"]]
            aligned = [-(-n // (2 * DP)) * (2 * DP) for n in sizes]
            part = [a // DP for a in aligned]
            scaler = None
            if dtype == torch.float16:
                ls = st["loss_scaler"]
                scaler = DynamicLossScaler()
                scaler.__dict__.update(cur_scale=float(ls["scale"]), cur_iter=it, scale_factor=2.0, scale_window=2,
                                       min_scale=1, delayed_shift=2, cur_hysteresis=ls["hysteresis_tracker"],
                                       consecutive_hysteresis=False, last_overflow_iter=it - 1 - ls["growth_tracker"])
            for d in range(DP):
                cut = lambda k, g: torch.nn.functional.pad(flat[k][g], (0, aligned[g] - sizes[g]))[d * part[g]:(d + 1) * part[g]].clone()
                unpadded = lambda x, g: x[:part[g] - (aligned[g] - sizes[g])].clone() if d == DP - 1 else x
                masters = [cut("master", g) for g in range(2)]
                if dtype != torch.bfloat16:  # ZeRO's _get_groups_without_padding (BF16_Optimizer keeps it)
                    masters = [unpadded(m, g) for g, m in enumerate(masters)]
                state_ = {g: {"exp_avg": cut("exp_avg", g), "exp_avg_sq": cut("exp_avg_sq", g)} for g in range(2)}
                param_groups_ = param_groups(steps, step_style, [[0], [1]])
                if step_style == "torch":
                    for g in range(2):
                        state_[g]["step"] = torch.tensor(float(steps))
                base = {"state": state_, "param_groups": param_groups_}
                osd = {"loss_scaler": scaler, "dynamic_loss_scale": scaler is not None, "overflow": False,
                       "clip_grad": 1.0, "base_optimizer_state": base,
                       "single_partition_of_fp32_groups": masters, "zero_stage": 1,
                       "group_paddings": [aligned[g] - sizes[g] if d == DP - 1 else 0 for g in range(2)],
                       "partition_count": [DP, DP], "ds_version": "0.12.6"}
                if dtype == torch.float32:  # elastic_checkpoint: the state per group without padding, its step apart
                    osd["base_optimizer_state"] = [{k: unpadded(v, g) for k, v in state_[g].items() if k != "step"}
                                                   for g in range(2)]
                    osd["base_optimizer_state_step"] = steps
                prefix = "bf16_" if dtype == torch.bfloat16 else ""
                mc.save({"optimizer_state_dict": osd, "ds_config": {"zero_optimization": {"stage": 1}},
                         "ds_version": "0.12.6"},
                        os.path.join(folder, f"{prefix}zero_pp_rank_{d}_mp_rank_{mp:02d}_optim_states.pt"))
    with open(os.path.join(out, "latest"), "w") as f:
        f.write(f"global_step{it}")
    mc.write_tracker(out, it)


def main():
    src, out, dtype_name, tp, pp, vp, step_style, model_kind = sys.argv[1:9]
    layout = sys.argv[9] if len(sys.argv) > 9 else "indexed"
    mutation = sys.argv[10] if len(sys.argv) > 10 else ""
    distributed = layout.startswith("distributed") or layout in ("torch_dist-fully-reshardable", "torch_dist-model-space",
                                                                 "torch_dist-dp-reshardable", "torch_dist-dp-zero")
    noise = torch.Generator().manual_seed(5)
    tp, pp, vp = int(tp), int(pp), int(vp)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    meta = json.load(open(os.path.join(src, "metadata.json")))
    vocab = meta["model"]["vocab_size"]
    st = meta["trainer_state"]
    params = read_safetensors(os.path.join(src, "mp_rank_00", "model.safetensors"))
    optim = read_safetensors(os.path.join(src, "mp_rank_00", "optim_dp0000.safetensors"))
    state = {s: {n: optim[f"{n}|{s}|0"].reshape(params[n].shape) for n in params}
             for s in ("master", "exp_avg", "exp_avg_sq")}
    steps = st["optimizer_steps"]
    padded = mc.padded_size(vocab, tp)
    pad = torch.full((2048, mc.C), 7.0)  # Megatron's padding rows: never read back
    names = mc.MCORE_LOCAL if model_kind == "mcore" else mc.LEGACY_NAMES
    build = lambda w, dt: mc.rank_models(hf_layout(w, vocab), pad, padded, tp, pp, t, s, dt, 3.0, names,
                                         mcore=model_kind == "mcore", vp=vp, uneven=UNEVEN.get(mutation))
    sched = st["opt_param_scheduler"]
    extra_args = {}
    if model_kind.startswith("mcore"):  # the layer spec, which orders a layer's parameters
        extra_args["transformer_impl"] = "transformer_engine" if model_kind == "mcore-te" else "local"
        # Megatron-core's args.decoupled_lr and decoupled_min_lr (None without --decoupled-lr;
        # lr-override: a group's own rate that is not --decoupled-lr's, as muP's)
        dlr = mutation.startswith("decoupled")
        extra_args["decoupled_lr"] = sched["decoupled_lr"] if dlr else None
        extra_args["decoupled_min_lr"] = sched["decoupled_min_lr"] if dlr else None
    args = mc.megatron_args(padded, tp, pp, dtype, "NullTokenizer", vp if vp > 1 else None, **extra_args,
                            consumed_train_samples=meta["consumed_samples"],
                            consumed_valid_samples=st["consumed_valid_samples"], seed=st["dropout_seed"],
                            global_batch_size=st["global_batch_size"],
                            use_distributed_optimizer=distributed, data_parallel_size=DP,
                            **UNEVEN_ARGS.get(mutation, {}))
    if layout.startswith("deepspeed"):  # Megatron-DeepSpeed's args count the tokens too
        args.consumed_train_tokens = st.get("consumed_train_tokens", meta["consumed_samples"] * mc.P) + \
            (1000 if mutation == "init-step" else 0)
        write_deepspeed(out, meta, params, state, vocab, tp, pp, dtype, layout, step_style, args, mutation)
        return
    if layout.startswith("torch_dist"):
        write_torch_dist(out, meta, params, state, vocab, tp, pp, vp, dtype, layout, step_style, model_kind == "mcore-te",
                         args, mutation)
        return
    for t in range(tp):
        for s in range(pp):
            models = build(params, dtype)
            moments = {m: build(state[m], torch.float32) for m in ("exp_avg", "exp_avg_sq")}
            masters = build(state["master"], torch.float32)
            # named_parameters() order over the chunks, split into Megatron's groups.
            keys = [(v, k) for v, m in enumerate(models) for k, _ in flat(m)]
            shape = {(v, k): x.shape for v, m in enumerate(models) for k, x in flat(m)}
            kinds, groups = zip(*group_kinds(keys, shape, mutation))
            if mutation == "swapped":  # two LayerNorm weights exchanged: another order than Megatron's
                ln = [i for i, (v, k) in enumerate(groups[1]) if k.endswith("layernorm.weight")]
                groups[1][ln[0]], groups[1][ln[1]] = groups[1][ln[1]], groups[1][ln[0]]
            tensor = lambda d, vk: dict(flat(d[vk[0]]))[vk[1]]
            inner_state, saved_groups, index = {}, [], 0
            for g, members in enumerate(groups):
                ids = list(range(index, index + len(members)))
                for i, vk in zip(ids, members):
                    inner_state[i] = {"exp_avg": tensor(moments["exp_avg"], vk).clone(),
                                      "exp_avg_sq": tensor(moments["exp_avg_sq"], vk).clone()}
                    if step_style == "torch":
                        inner_state[i]["step"] = torch.tensor(float(steps))
                group = param_groups(steps, step_style, [ids], [kinds[g]], sched, mutation)[0]
                if mutation == "betas":
                    group["betas"] = (0.9, 0.95)
                saved_groups.append(group)
                index += len(members)
            inner = {"state": inner_state, "param_groups": saved_groups}
            rank = f"mp_rank_{t:02d}" + (f"_{s:03d}" if pp > 1 else "")
            folder = os.path.join(out, f"iter_{meta['iteration']:07d}", rank)
            if distributed:  # DistributedOptimizer.state_dict(): no 'state', groups without 'params'
                for group in saved_groups:
                    del group["params"]
                    group["step"] = steps
                optimizer = {"optimizer": {"param_groups": saved_groups}}
                # A buffer for each chunk with parameters, numbered in turn.
                chunks = [[(k, {"param": tensor(masters, (v, k)), "exp_avg": tensor(moments["exp_avg"], (v, k)),
                                "exp_avg_sq": tensor(moments["exp_avg_sq"], (v, k))}) for k, _ in flat(m)]
                          for v, m in enumerate(models) if list(flat(m))]
                if mutation == "moved":  # one master off by an element: found nowhere
                    chunks[0][3][1]["param"] = torch.roll(chunks[0][3][1]["param"].flatten(), 1)
                if mutation != "no-distrib-file":
                    mc.save(distrib_state(chunks, layout, dtype, noise, pp > 1), os.path.join(folder, "distrib_optim.pt"))
            elif dtype == torch.float32:
                optimizer = inner
            else:
                optimizer = {"optimizer": inner,
                             "fp32_from_fp16_params": [[tensor(masters, vk).clone() for vk in m] for m in groups]}
            if dtype == torch.float16:
                ls = st["loss_scaler"]
                optimizer["grad_scaler"] = {"scale": torch.tensor([float(ls["scale"])]),
                                            "growth_tracker": ls["growth_tracker"],
                                            "hysteresis_tracker": ls["hysteresis_tracker"]}
            ckpt = {"args": args, "checkpoint_version": 3.0, "iteration": meta["iteration"],
                    "opt_param_scheduler": {
                        "max_lr": sched["max_lr"], "lr_warmup_steps": int(sched["lr_warmup_steps"]),
                        "num_steps": int(sched["num_steps"]), "lr_decay_style": sched["lr_decay_style"],
                        "lr_decay_steps": int(sched["lr_decay_steps"]), "min_lr": sched["min_lr"],
                        "start_wd": sched["start_wd"], "end_wd": sched["end_wd"],
                        "wd_incr_style": sched["wd_incr_style"], "wd_incr_steps": int(sched["wd_incr_steps"])},
                    "rng_state": [{"random_rng_state": (3, (1, 2), None)}]}
            if mutation != "no-optimizer":
                ckpt["optimizer"] = optimizer
            if vp == 1:
                ckpt["model"] = models[0]
            else:
                for v, m in enumerate(models):
                    ckpt[f"model{v}"] = m
            mc.save(ckpt, os.path.join(folder, "model_optim_rng.pt"))
    mc.write_tracker(out, meta["iteration"])


if __name__ == "__main__":
    main()
