"""Writes a folder of PyTorch's distributed checkpoint format (torch.distributed.checkpoint, "DCP")
as torch 2.x's FileSystemWriter lays it out, for tests/e2e/megatron_checkpoints.py. Written from
torch's public definitions (torch/distributed/checkpoint/metadata.py and filesystem.py), not from
trident:

  * DIR/.metadata: pickle.dump of Metadata(state_dict_metadata, planner_data, storage_data,
    storage_meta, version); state_dict_metadata maps each key to TensorStorageMetadata(properties,
    size, chunks=[ChunkStorageMetadata(offsets, sizes)]) or BytesStorageMetadata(); storage_data
    maps MetadataIndex(fqn, offset) to _StorageInfo(relative_path, offset, length);
    TensorProperties pickles as the tuple (dtype, layout, requires_grad, _MEM_FORMAT_ENCODING
    member, pin_memory) of its __getstate__, MetadataIndex leaves a None offset out of its state,
    _StorageInfo its None fields;
  * DIR/__R_0.distcp per writing rank R: each item torch.save'd at its recorded byte range (a
    tensor piece as the tensor, views included: torch.save keeps the whole storage).

Debian's torch 1.13 cannot import its own torch.distributed._shard under Python 3.11 and has no
torch.distributed.checkpoint, so the classes are stand-ins registered under torch 2.x's module
names with its fields (a torch that has the module uses its real classes).
"""
import dataclasses
import enum
import os
import pathlib
import pickle
import sys
import types
from typing import Any, Optional

import torch

_META = "torch.distributed.checkpoint.metadata"
_FS = "torch.distributed.checkpoint.filesystem"


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


@dataclasses.dataclass
class TensorProperties:
    dtype: Any = None
    layout: Any = torch.strided
    requires_grad: bool = False
    memory_format: Any = torch.contiguous_format
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad, _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT,
                self.pin_memory)


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: list


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@dataclasses.dataclass
class StorageMeta:
    checkpoint_id: Any = None
    save_id: Optional[str] = None
    load_id: Optional[str] = None
    modules: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: Any = None
    storage_data: Any = None
    storage_meta: Optional[StorageMeta] = None
    version: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: Optional[torch.Size] = None
    index: Optional[int] = dataclasses.field(hash=False, compare=False, default=None)

    def __init__(self, fqn, offset=None, index=None):
        object.__setattr__(self, "fqn", fqn)
        object.__setattr__(self, "index", index)
        if offset is not None:
            object.__setattr__(self, "offset", torch.Size(offset))


@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int
    transform_descriptors: Optional[list] = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if v is not None}


def _classes():
    """The classes to pickle: torch's own when it has them, else the stand-ins above."""
    try:
        import torch.distributed.checkpoint.metadata as meta  # noqa: F401
        import torch.distributed.checkpoint.filesystem as fs
        return meta, fs
    except ImportError:
        pass
    for name in ("torch.distributed.checkpoint", _META, _FS):
        sys.modules.setdefault(name, types.ModuleType(name))
    meta, fs = sys.modules[_META], sys.modules[_FS]
    for cls in (_MEM_FORMAT_ENCODING, ChunkStorageMetadata, TensorProperties, TensorStorageMetadata,
                BytesStorageMetadata, StorageMeta, Metadata, MetadataIndex):
        cls.__module__ = _META
        setattr(meta, cls.__name__, cls)
    _StorageInfo.__module__ = _FS
    fs._StorageInfo = _StorageInfo
    return meta, fs


class Writer:
    """Collects the items ranks save, then writes the folder: add_tensor / add_object, finish."""

    def __init__(self, out):
        self.out = out
        self.sdm, self.storage, self.files = {}, {}, {}
        os.makedirs(out, exist_ok=True)

    def _file(self, rank):
        if rank not in self.files:
            name = f"__{rank}_0.distcp"
            self.files[rank] = (name, open(os.path.join(self.out, name), "wb"))
        return self.files[rank]

    def _write(self, rank, obj):
        name, f = self._file(rank)
        start = f.tell()
        torch.save(obj, f)
        return name, start, f.tell() - start

    def add_tensor(self, rank, fqn, global_size, offsets, piece):
        """Rank `rank` saves `piece`, the chunk of tensor `fqn` (global_size) at `offsets`."""
        assert len(offsets) == len(global_size) == piece.dim(), (fqn, offsets, global_size, piece.shape)
        meta, fs = _classes()
        if fqn not in self.sdm:
            self.sdm[fqn] = meta.TensorStorageMetadata(properties=meta.TensorProperties(dtype=piece.dtype),
                                                       size=torch.Size(global_size), chunks=[])
        self.sdm[fqn].chunks.append(meta.ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=piece.shape))
        name, start, length = self._write(rank, piece)
        self.storage[meta.MetadataIndex(fqn, offsets)] = fs._StorageInfo(name, start, length)

    def add_object(self, rank, fqn, obj):
        meta, fs = _classes()
        self.sdm[fqn] = meta.BytesStorageMetadata()
        name, start, length = self._write(rank, obj)
        self.storage[meta.MetadataIndex(fqn)] = fs._StorageInfo(name, start, length)

    def finish(self, **extra_attributes):
        """Writes .metadata; extra_attributes are set on the Metadata object (Megatron-core adds
        mcore_data)."""
        meta, _ = _classes()
        for _, f in self.files.values():
            f.close()
        m = meta.Metadata(state_dict_metadata=self.sdm, storage_data=self.storage,
                          storage_meta=meta.StorageMeta(checkpoint_id=pathlib.Path(self.out), save_id="test"), version="1.0.0")
        for k, v in extra_attributes.items():
            setattr(m, k, v)
        with open(os.path.join(self.out, ".metadata"), "wb") as f:
            pickle.dump(m, f)
