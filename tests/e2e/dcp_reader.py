"""Reads a folder of PyTorch's distributed checkpoint format (torch.distributed.checkpoint, "DCP")
whole, for the checks of trident-convert's torch_dist export: written from torch 2.x's public
definitions (torch/distributed/checkpoint/metadata.py and filesystem.py), not from trident.

DIR/.metadata is unpickled with the checkpoint classes as plain records (their pickled state kept
as it is: a dict of fields, or TensorProperties' tuple (dtype, layout, requires_grad,
memory_format, pin_memory)), as Debian's torch 1.13 has no torch.distributed.checkpoint; each item
is torch.load'ed from its recorded byte range of its file. read() assembles every tensor from its
chunks and checks that they tile it exactly once."""
import enum
import io
import os
import pickle

import torch

_CLASSES = {("torch.distributed.checkpoint.metadata", n) for n in (
    "Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "TensorProperties", "BytesStorageMetadata",
    "MetadataIndex", "StorageMeta")} | {("torch.distributed.checkpoint.filesystem", "_StorageInfo")}


class Record:
    """A checkpoint class's instance: `cls` its name, `state` what it pickled (BUILD's)."""
    state = None

    @property
    def cls(self):
        return type(self).__name__

    def __setstate__(self, state):
        self.state = state

    def get(self, field):
        return self.state.get(field) if isinstance(self.state, dict) else None


_RECORDS = {name: type(name, (Record,), {}) for _, name in _CLASSES}


class _MEM_FORMAT_ENCODING(enum.Enum):  # pickled by value (Python < 3.11) or by name (getattr)
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _CLASSES:
            return _RECORDS[name]
        if (module, name) == ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"):
            return _MEM_FORMAT_ENCODING
        return super().find_class(module, name)


def metadata(folder):
    with open(os.path.join(folder, ".metadata"), "rb") as f:
        return _Unpickler(f).load()


def _item(folder, info, tensor):
    """An item's torch.load: a tensor as DCP's FileSystemReader loads it (weights_only), an object
    whole (Transformer Engine's extra state holds a buffer)."""
    with open(os.path.join(folder, info.get("relative_path")), "rb") as f:
        f.seek(info.get("offset"))
        blob = f.read(info.get("length"))
    assert len(blob) == info.get("length"), (folder, info.state)
    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=tensor)


def read(folder):
    """({key: tensor} assembled whole, {key: object}, the Metadata record)."""
    m = metadata(folder)
    assert m.cls == "Metadata", m.cls
    where = {}
    for index, info in m.get("storage_data").items():
        offset = index.get("offset")
        where[(index.get("fqn"), None if offset is None else tuple(offset))] = info
    tensors, objects = {}, {}
    for key, entry in m.get("state_dict_metadata").items():
        if entry.cls == "BytesStorageMetadata":
            objects[key] = _item(folder, where[(key, None)], tensor=False)
            continue
        assert entry.cls == "TensorStorageMetadata", (key, entry.cls)
        props = entry.get("properties")
        dtype = props.state[0] if isinstance(props.state, tuple) else props.get("dtype")
        size = tuple(entry.get("size"))
        full = torch.zeros(size, dtype=dtype)
        covered = torch.zeros(size, dtype=torch.int32)
        for chunk in entry.get("chunks"):
            offsets, sizes = tuple(chunk.get("offsets")), tuple(chunk.get("sizes"))
            piece = _item(folder, where[(key, offsets)], tensor=True)
            assert piece.dtype == dtype and tuple(piece.shape) == sizes, (key, offsets, piece.dtype, piece.shape)
            box = tuple(slice(o, o + n) for o, n in zip(offsets, sizes))
            full[box] = piece
            covered[box] += 1
        assert bool((covered == 1).all()), (key, "chunks do not tile the tensor exactly once")
        tensors[key] = full
    return tensors, objects, m
