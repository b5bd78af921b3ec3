// trident-merge-datasets: Megatron's tools/merge_datasets.py. The .bin/.idx pairs of a folder
// (e.g. the shards of a corpus that several trident-preprocess runs tokenized at once), in the
// sorted order of their names, become one dataset:
//   trident-merge-datasets --input shards/ --output-prefix data/corpus_text_document
#include <cxxopts.hpp>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "data/dataset_merge.h"
#include "data/indexed_dataset.h"
#include "tools/cxxopts_flags.h"
#include "tools/tool_main.h"

namespace {

int merge_main(int argc, char** argv) {
  using trident::ConfigError;
  namespace fs = std::filesystem;
  cxxopts::Options o("trident-merge-datasets",
                     "Merge the .bin/.idx pairs of a folder, in the sorted order of their names, into one dataset");
  o.add_options()
      ("input", "folder of .bin/.idx pairs (files of other extensions are left out)", cxxopts::value<std::string>())
      ("output-prefix", "output prefix: {prefix}.bin and {prefix}.idx", cxxopts::value<std::string>())
      ("multimodal", "Megatron's multimodal datasets (sequence modes): not supported")
      ("h,help", "show this help");
  const cxxopts::ParseResult r = trident::parse_flags(o, argc, argv);
  if (r.count("help")) {
    std::printf("%s\n", o.help().c_str());
    return 0;
  }
  const std::string input = trident::required_flag(r, "input");
  const std::string output = trident::required_flag(r, "output-prefix");
  if (r.count("multimodal")) throw ConfigError("--multimodal: multimodal datasets (sequence modes) are not supported");
  const std::vector<std::string> prefixes = trident::dataset_prefixes_in(input);
  std::error_code out_ec;
  const fs::path out = fs::weakly_canonical(output, out_ec);
  for (const std::string& p : prefixes) {
    std::error_code ec;
    if (!out_ec && fs::weakly_canonical(p, ec) == out && !ec)
      throw ConfigError("--output-prefix: " + output + " is one of the inputs (" + trident::idx_path(p) + ")");
  }
  for (const std::string& stale : trident::remove_stale_builder_temps(output))
    std::fprintf(stderr, "trident-merge-datasets: removed %s (left by an interrupted run)\n", stale.c_str());
  const trident::MergedDataset m = trident::merge_indexed_datasets(prefixes, output);
  std::printf("trident-merge-datasets: %zu datasets of %s -> %s.bin/.idx: %llu documents, %llu items, %llu tokens\n",
              prefixes.size(), input.c_str(), output.c_str(), static_cast<unsigned long long>(m.documents),
              static_cast<unsigned long long>(m.items), static_cast<unsigned long long>(m.tokens));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return trident::run_tool("trident-merge-datasets", [&] { return merge_main(argc, argv); });
}
