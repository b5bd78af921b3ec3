// A checkpoint whose files are being written: what its commit needs. With --async-save the
// files are written by a thread of their own from a copy of the state in host memory (the
// snapshot) while training goes on, and the checkpoint is committed once every rank's writer
// is done (Trainer::finish_save); without it the files are written in place and committed at
// once.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/metadata.h"
#include "ckpt/safetensors.h"

namespace trident {

// Host memory for --async-save's copies of the state, kept from one save to the next: fresh
// memory costs a page fault a page (in a VM often a host fault: 2 GB took 5-10 s on a 2-vCPU
// VM), so it is mapped once, in huge pages where the kernel gives them, page-locked for the
// device's copies where the backend can (Backend::pin_host_memory: pageable memory would go
// through the driver's staging buffer), and reused while the state fits.
class Backend;
class SnapshotArena {
 public:
  explicit SnapshotArena(Backend* device = nullptr) : device_(device) {}
  ~SnapshotArena();
  SnapshotArena(const SnapshotArena&) = delete;
  SnapshotArena& operator=(const SnapshotArena&) = delete;
  // At least `bytes` bytes (contents undefined); throws IoError when they cannot be mapped.
  char* reserve(size_t bytes);
  bool pinned() const { return pinned_; }

 private:
  void release();
  Backend* device_;
  char* base_ = nullptr;
  size_t capacity_ = 0;
  bool pinned_ = false;
};

struct PendingSave {
  struct File {
    std::string rel;  // path in the checkpoint directory
    std::vector<StTensorRef> tensors;
  };
  int64_t iteration = 0;
  bool persistent = true;                     // false: a non-persistent save (Megatron's)
  bool local = false;                         // a local non-persistent save: each rank's own (local_checkpoint.h)
  std::filesystem::path root;                 // the folder of its iter_NNNNNNN
  std::filesystem::path temp;                 // the temporary directory the files go to
  std::optional<TempIterationDir> temp_dir;   // rank 0 (local: each rank): held until the commit
  std::optional<CheckpointMetadata> metadata; // the same ranks': the state at the save (files to come)
  std::chrono::steady_clock::time_point start;
  double waited_s = 0;                        // what training waited for (the snapshot, with --async-save)
  std::vector<File> files;                    // this rank's
  std::map<std::string, std::string> file_metadata;
  int rank = 0;
  bool sole_writer = false;  // a world of one, or local: no other rank writes into `temp`
  std::string token;         // the save's (checkpoint_dir.h), one for every rank
  // The writer's results: "path size xxh3" lines and their bytes, or the error that stopped it.
  std::string records;
  uint64_t bytes = 0;
  std::exception_ptr error;  // rethrown as it was thrown: a full disk stays a StorageError
  std::atomic<bool> written{false};
  std::thread writer;

  PendingSave() = default;
  PendingSave(const PendingSave&) = delete;
  PendingSave& operator=(const PendingSave&) = delete;
  // A save that failed, or a run that stops with a save not committed: a process that writes
  // the checkpoint alone removes the temporary directory it holds, so a failed save (a full
  // disk) leaves nothing behind. With more ranks, others may still write into it: it stays,
  // locked, and the next save removes it as a dead writer's. (A run that stops for an error
  // while the writer still runs does not get here: ~Trainer leaves the writer be.)
  ~PendingSave() {
    if (writer.joinable()) writer.join();
    if (temp_dir && sole_writer) temp_dir->discard();
  }
  // Copies every tensor into `arena` and points the files at the copies.
  void take_snapshot(SnapshotArena& arena);
  // Writes the files (throws IoError naming a file that cannot be written).
  void write_files();
};

}  // namespace trident
