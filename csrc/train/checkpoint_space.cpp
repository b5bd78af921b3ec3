#include "train/checkpoint_space.h"

#include <sys/statvfs.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/dtype.h"
#include "model/param_spec.h"

namespace trident {

int64_t checkpoint_bytes(const TrainOptions& o) {
  const int tp = o.tensor_model_parallel_size;
  int64_t elements = 0;  // all ranks' slices
  for (const ParamSpec& spec : gpt2_param_specs(o.model, tp)) {
    const int64_t copies = (spec.shard == ShardRule::Replicated ? tp : 1) *
                           (spec.name == "wte" && o.pipeline_model_parallel_size > 1 ? 2 : 1);  // the LM head's stage
    elements += spec.shape.numel() * copies;
  }
  return elements * (static_cast<int64_t>(dtype_size(o.model.dtype)) + (o.no_save_optim ? 0 : 12));
}

std::optional<uint64_t> free_bytes(const std::string& dir) {
  if (const char* test = std::getenv("TRIDENT_TEST_FREE_BYTES")) return std::strtoull(test, nullptr, 10);
  // A directory not made yet: the file system of the nearest one that exists.
  std::filesystem::path p = std::filesystem::absolute(dir);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  struct statvfs s {};
  if (::statvfs(p.c_str(), &s) != 0) return std::nullopt;
  return static_cast<uint64_t>(s.f_bavail) * static_cast<uint64_t>(s.f_frsize);
}

std::string checkpoint_space_warning(const TrainOptions& o, const std::string& dir, const std::string& flag) {
  const std::optional<uint64_t> free = free_bytes(dir);
  const auto need = static_cast<uint64_t>(checkpoint_bytes(o));
  if (!free || *free >= need) return "";
  char line[512];
  std::snprintf(line, sizeof line,
                "%s %s: a checkpoint of this run takes %.3g GB and the file system has %.3g GB free: the first save "
                "will fail unless space is freed",
                flag.c_str(), dir.c_str(), static_cast<double>(need) / 1e9, static_cast<double>(*free) / 1e9);
  return line;
}

}  // namespace trident
