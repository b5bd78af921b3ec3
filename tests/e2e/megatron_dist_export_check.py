#!/usr/bin/env python3
"""Compares trident-convert --to megatron --with-optimizer --ckpt-format torch_dist's checkpoint
(OURS) with the same training state written by megatron_training_state.py as Megatron-core saves it
(REF, its torch_dist-indexed or torch_dist-fully-reshardable layout): the tracker; every tensor of
the distributed checkpoint, read whole with dcp_reader.py (the model's and the optimizer's by name:
keys, dtypes, shapes and values, the word embedding's padding rows past VOCAB left out), each
assembled from pieces that tile it; the objects (the linear layers' extra states); and common.pt:
the iteration and checkpoint version, the optimizer's non-tensor part (REF's fields, the loss
scaler's tensor, param_state_sharding_type), the scheduler, the content metadata's sharding type
and the args' consumed samples, format and optimizer kind.
Usage: megatron_dist_export_check.py OURS REF ITERATION VOCAB"""
import os
import sys

import torch

import dcp_reader
from megatron_checkpoints import same_tensors
from megatron_export_check import both_at


def same_fields(got, want, where, more_ok=False):
    """got holds want's fields with equal values (tensors equal); only a param group (more_ok)
    may hold more keys (Megatron's own: amsgrad, max_lr, ...)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), (where, type(got))
        assert more_ok or set(got) == set(want), (where, "keys", sorted(got), sorted(want))
        for k, v in want.items():
            assert k in got, (where, k, "missing")
            same_fields(got[k], v, f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (where, got, want)
        for i, (x, y) in enumerate(zip(got, want)):
            same_fields(x, y, f"{where}[{i}]", more_ok=where.endswith("param_groups"))
    elif torch.is_tensor(want):
        assert torch.is_tensor(got) and got.dtype == want.dtype and torch.equal(got, want), (where, got, want)
    else:
        assert got == want, (where, got, want)


def main():
    ours, ref, iteration, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    folder = both_at(ours, ref, iteration)
    a_tensors, a_objects, _ = dcp_reader.read(os.path.join(ours, folder))
    b_tensors, b_objects, _ = dcp_reader.read(os.path.join(ref, folder))
    same_tensors(a_tensors, b_tensors, vocab, "tensors")
    assert sorted(a_objects) == sorted(b_objects), (sorted(set(a_objects) ^ set(b_objects)))
    a = torch.load(os.path.join(ours, folder, "common.pt"), map_location="cpu", weights_only=False)
    b = torch.load(os.path.join(ref, folder, "common.pt"), map_location="cpu", weights_only=False)
    assert (a["iteration"], a["checkpoint_version"]) == (b["iteration"], b["checkpoint_version"]) == (iteration, 3.0)
    same_fields(a["optimizer"], b["optimizer"], "optimizer")
    assert a["opt_param_scheduler"] == b["opt_param_scheduler"], (a["opt_param_scheduler"], b["opt_param_scheduler"])
    sharding = b["content_metadata"].get("distrib_optim_sharding_type")
    # The sharding type is absent for the non-distributed optimizer (REF: None).
    want = {k: v for k, v in b["content_metadata"].items() if v is not None}
    assert a["content_metadata"] == want, (a["content_metadata"], want)
    assert getattr(a["args"], "no_save_rng") is True, "args.no_save_rng: Megatron would ask for the RNG state"
    for key in ("consumed_train_samples", "consumed_valid_samples", "use_distributed_optimizer", "ckpt_format"):
        assert getattr(a["args"], key) == getattr(b["args"], key), (key, getattr(a["args"], key), getattr(b["args"], key))
    optimizer = sum(k.startswith("optimizer.") for k in b_tensors)
    print(f"{len(b_tensors) - optimizer} model and {optimizer} optimizer tensors, {len(b_objects)} objects and "
          f"common.pt equal to Megatron-core's ({sharding or 'non-distributed optimizer'})")


if __name__ == "__main__":
    main()
