#include "train/checkpoint_space.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "core/dtype.h"
#include "core/process_id.h"
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

namespace {

// A directory not made yet is on the file system of the nearest one that exists.
std::filesystem::path nearest_existing(const std::string& dir) {
  std::filesystem::path p = std::filesystem::absolute(dir);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  return p;
}

}  // namespace

std::optional<uint64_t> free_bytes(const std::string& dir) {
  if (const char* test = std::getenv("TRIDENT_TEST_FREE_BYTES")) return std::strtoull(test, nullptr, 10);
  struct statvfs s {};
  if (::statvfs(nearest_existing(dir).c_str(), &s) != 0) return std::nullopt;
  return static_cast<uint64_t>(s.f_bavail) * static_cast<uint64_t>(s.f_frsize);
}

uint64_t file_system_key(const std::string& dir) {
  struct stat st {};
  if (::stat(nearest_existing(dir).c_str(), &st) != 0) return 0;
  return std::hash<std::string>{}(host_name()) ^ (static_cast<uint64_t>(st.st_dev) * 0x9E3779B97F4A7C15ull);
}

uint64_t bytes_under(const std::filesystem::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) bytes += it->file_size(ec);
  return bytes;
}

std::string gigabytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g GB", static_cast<double>(bytes) / 1e9);
  return text;
}

std::string checkpoint_space_warning(const TrainOptions& o, const std::string& dir, const std::string& flag) {
  const std::optional<uint64_t> free = free_bytes(dir);
  const auto need = static_cast<uint64_t>(checkpoint_bytes(o));
  if (!free || *free >= need) return "";
  return flag + " " + dir + ": a checkpoint of this run takes " + gigabytes(need) + " and the file system has " +
         gigabytes(*free) + " free: the first save will fail unless space is freed";
}

}  // namespace trident
