// How much disk a checkpoint of a run takes, and whether its directory has room for one: a
// save that meets a full disk ends the run at its first save, hours in, so the start says so.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "train/options.h"

namespace trident {

// The bytes one save writes, all ranks together (the tensors; headers and metadata.json are a
// few KiB): every rank's parameter slices in the model's dtype (the padded vocabulary's rows
// included; the parameters that tensor-parallel ranks replicate once per rank; the tied word
// embedding twice under pipeline parallelism, on the first and the last stage) and, unless
// --no-save-optim, their fp32 master weights and Adam's two moments (12 bytes).
int64_t checkpoint_bytes(const TrainOptions& o);

// The bytes free to this process in the file system holding `dir` (statvfs; a `dir` not made
// yet: its nearest existing parent's), or nullopt when it cannot be asked. (A test sets them
// with TRIDENT_TEST_FREE_BYTES.)
std::optional<uint64_t> free_bytes(const std::string& dir);

// Which file system `dir` (or its nearest existing parent) lies on, on this host: processes with
// the same key write to the same disk. 0 when it cannot be told.
uint64_t file_system_key(const std::string& dir);

// The bytes of the regular files under `dir` (0 for none or an unreadable one).
uint64_t bytes_under(const std::filesystem::path& dir);

// "1.5 GB" (10^9 bytes, three significant digits), as the space messages say it.
std::string gigabytes(uint64_t bytes);

// "" when `dir` (named by `flag`) has room for a checkpoint of `o`, else a warning line: the
// size, the space free, and that the first save will fail unless space is freed.
std::string checkpoint_space_warning(const TrainOptions& o, const std::string& dir, const std::string& flag);

}  // namespace trident
