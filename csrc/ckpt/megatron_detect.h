// Telling a Megatron checkpoint from trident's own, for the messages of the tools that read
// trident's (megatron_files.cpp holds the definition, beside the import's reading of the same
// folders).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace trident::megatron {

// When `iteration_dir` holds a Megatron checkpoint: its format ("Megatron-LM",
// "Megatron-core torch_dist", "Megatron-DeepSpeed"); nullopt otherwise, also for trident's own
// (its metadata.json decides: its rank folders share Megatron-LM's mp_rank_* names).
std::optional<std::string> megatron_format_of(const std::filesystem::path& iteration_dir);

}  // namespace trident::megatron
