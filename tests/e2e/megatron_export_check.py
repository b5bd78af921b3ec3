#!/usr/bin/env python3
"""Compares trident-convert --to megatron --with-optimizer's checkpoint (OURS) with the same
training state written by megatron_training_state.py as Megatron-LM saves it (REF), loaded with
torch: the tracker, and in every mp_rank_* file the model's tensors (their keys in REF's order,
Megatron's named_parameters() order, which the optimizer's indices follow; dtype, values), each
parameter's optimizer state (Adam's moments, the fp32 master, the step count where REF keeps it:
in the groups or in each state), the groups' Adam betas and epsilon and weight-decay
multipliers and the keys Megatron matches groups by (a --decoupled-lr group's rates too), the loss scaler, the scheduler's fields
and the args' iteration, consumed samples and pipeline split. With virtual pipeline chunks a
file's models are 'model0', 'model1', ..., whose parameters the optimizer's indices walk in turn. The word embedding's padding rows (past VOCAB:
Megatron never reads them) are left out.
Usage: megatron_export_check.py OURS REF ITERATION VOCAB"""
import os
import sys

import torch


def tensors(d, prefix=""):
    """A (nested) state dict's tensors, in order, under dotted keys."""
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += tensors(v, prefix + k + ".")
        elif torch.is_tensor(v):
            out.append((prefix + k, v))
    return out


def model_tensors(ck):
    """The model's tensors in named_parameters() order: 'model', or with virtual pipeline chunks
    'model0', 'model1', ... in turn (their keys prefixed with the chunk's)."""
    if "model" in ck:
        return tensors(ck["model"])
    chunks = sorted((k for k in ck if k.startswith("model") and k[5:].isdigit()), key=lambda k: int(k[5:]))
    assert chunks, list(ck)
    return [x for k in chunks for x in tensors(ck[k], k + ".")]


def step_of(x):
    return None if x is None else int(x.item()) if torch.is_tensor(x) else int(x)


def group_kind(group):
    """A param group's kind: 'D' a --decoupled-lr run's word embedding and output layer
    (is_decoupled_lr; newer Megatron-core: default_config False), 'N' without weight decay (1-D
    parameters), 'W' the other weights."""
    if group.get("is_decoupled_lr") or group.get("default_config") is False:
        return "D"
    return "N" if group.get("wd_mult", 1.0) == 0.0 or group["weight_decay"] == 0.0 else "W"


def per_parameter(ck, where):
    """Parameter key -> (exp_avg, exp_avg_sq, master, step) from Megatron's non-distributed
    optimizer state: its groups' indices walk the parameters of one kind (group_kind) in order."""
    model = model_tensors(ck)
    opt = ck["optimizer"]
    inner = opt.get("optimizer", opt)
    masters = opt.get("fp32_from_fp16_params")
    decoupled = any(group_kind(g) == "D" for g in inner["param_groups"])
    own = lambda k: decoupled and k.endswith(EMBEDDINGS)
    by_kind = {"D": [k for k, x in model if own(k)], "W": [k for k, x in model if x.dim() == 2 and not own(k)],
               "N": [k for k, x in model if x.dim() == 1]}
    values = dict(model)
    out = {}
    for g, group in enumerate(inner["param_groups"]):
        kind = group_kind(group)
        for i, index in enumerate(group["params"]):
            key = by_kind[kind].pop(0)
            state = inner["state"].get(index, {})
            master = masters[g][i] if masters is not None else values[key]
            assert master.shape == values[key].shape, (where, key)
            out[key] = (state.get("exp_avg"), state.get("exp_avg_sq"), master.float(),
                        (step_of(state.get("step")), step_of(group.get("step"))))
    assert not any(by_kind.values()), (where, "parameters without optimizer state", by_kind)
    return out


def same(a, b):
    return a is None and b is None or a is not None and b is not None and a.dtype == b.dtype and torch.equal(a, b)


EMBEDDINGS = ("word_embeddings.weight", "word_embeddings_for_head.weight", "output_layer.weight")


def real_rows(key, x, t, vocab):
    """x without the padding rows when it is tensor-parallel rank t's shard of the word embedding."""
    if x is None or not key.endswith(EMBEDDINGS):
        return x
    n = x.shape[0]
    return x[:max(0, min(n, vocab - t * n))]


def both_at(ours, ref, iteration):
    """Both checkpoints' trackers name ITERATION; its folder name."""
    for d in (ours, ref):
        with open(os.path.join(d, "latest_checkpointed_iteration.txt")) as f:
            assert f.read().strip() == str(iteration), d
    return f"iter_{iteration:07d}"


def main():
    ours, ref, iteration, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    folder = both_at(ours, ref, iteration)
    ranks = sorted(os.listdir(os.path.join(ref, folder)))
    assert ranks == sorted(os.listdir(os.path.join(ours, folder))), (ranks, os.listdir(os.path.join(ours, folder)))
    checked = 0
    for rank in ranks:
        t = int(rank.split("_")[2])  # mp_rank_TT[_PPP]
        a = torch.load(os.path.join(ours, folder, rank, "model_optim_rng.pt"), map_location="cpu", weights_only=False)
        b = torch.load(os.path.join(ref, folder, rank, "model_optim_rng.pt"), map_location="cpu", weights_only=False)
        ma, mb = dict(model_tensors(a)), dict(model_tensors(b))
        assert list(ma) == list(mb), (rank, list(ma), list(mb))
        for k in mb:
            assert same(real_rows(k, ma[k], t, vocab), real_rows(k, mb[k], t, vocab)), (rank, k)
        pa, pb = per_parameter(a, "ours " + rank), per_parameter(b, "reference " + rank)
        assert pa.keys() == pb.keys(), rank
        for k in pb:
            for what, x, y in zip(("exp_avg", "exp_avg_sq", "master"), pa[k][:3], pb[k][:3]):
                assert same(real_rows(k, x, t, vocab), real_rows(k, y, t, vocab)), (rank, k, what)
            assert pa[k][3] == pb[k][3], (rank, k, "steps (in the state, in the group)", pa[k][3], pb[k][3])
        ga = a["optimizer"].get("optimizer", a["optimizer"])["param_groups"]
        gb = b["optimizer"].get("optimizer", b["optimizer"])["param_groups"]
        sched = a["opt_param_scheduler"]
        identity = {"lr_mult": 1.0, "is_expert_parallel": False, "is_decoupled_lr": False, "default_config": True,
                    "bias_correction": True, "max_lr": sched["max_lr"], "min_lr": sched["min_lr"]}
        # The groups in REF's order (torch's load pairs them by position): Megatron-LM's sorted W N,
        # or a --decoupled-lr run's as Megatron-core 0.12 to 0.15 order and mark them.
        kinds = [group_kind(x) for x in ga]
        assert kinds == [group_kind(y) for y in gb], (rank, kinds, [group_kind(y) for y in gb])
        for x, y in zip(ga, gb):
            for key in ("betas", "eps", "wd_mult"):
                assert x[key] == y[key], (rank, key, x[key], y[key])
            want = dict(identity)
            if group_kind(x) == "D":
                want.update(is_decoupled_lr=True, default_config=False, max_lr=y["max_lr"], min_lr=y["min_lr"])
            for key, value in want.items():
                assert x.get(key) == value, (rank, group_kind(x), key, x.get(key), value)
        sa, sb = a["optimizer"].get("grad_scaler"), b["optimizer"].get("grad_scaler")
        assert (sa is None) == (sb is None), (rank, "grad_scaler")
        if sb is not None:
            assert torch.equal(sa["scale"], sb["scale"]) and sa["growth_tracker"] == sb["growth_tracker"] and \
                sa["hysteresis_tracker"] == sb["hysteresis_tracker"], (rank, sa, sb)
        for key, value in b["opt_param_scheduler"].items():
            assert a["opt_param_scheduler"][key] == value, (rank, key, a["opt_param_scheduler"][key], value)
        assert a["iteration"] == b["iteration"] == iteration, rank
        for key in ("consumed_train_samples", "consumed_valid_samples", "virtual_pipeline_model_parallel_size",
                    "decoder_first_pipeline_num_layers", "pipeline_model_parallel_layout", "decoupled_lr",
                    "decoupled_min_lr"):
            assert getattr(a["args"], key, None) == getattr(b["args"], key, None), (rank, key)
        checked += len(pb)
    print(f"{len(ranks)} rank files, {checked} parameters' model and optimizer state equal to Megatron's")


if __name__ == "__main__":
    main()
