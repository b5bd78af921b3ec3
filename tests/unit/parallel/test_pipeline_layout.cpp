// Megatron-core's --pipeline-model-parallel-layout: layer counts read back from layouts spelt
// out here in several ways, Megatron's own examples, and its refusals. The unrolled texts
// below are what Python's re.sub gives for Megatron's two patterns (PipelineParallelLayerLayout.
// parse_str_to_list), quirks included.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "parallel/pipeline_layout.h"
#include "parallel/pipeline_split.h"

namespace trident {
namespace {

using Counts = std::vector<std::vector<int>>;

// The layout of counts[stage][chunk], virtual stage i being chunk i / P of stage i % P:
// spelling 0 writes every 't'; 1 writes "t*n" and cosmetic commas; 2 also folds runs of equal
// middle virtual stages into "(...|)*r".
std::string spell(const Counts& counts, int spelling) {
  const int P = static_cast<int>(counts.size()), V = static_cast<int>(counts[0].size());
  std::vector<int> per;
  for (int i = 0; i < P * V; ++i) per.push_back(counts[i % P][i / P]);
  const auto ts = [&](int c) {
    if (spelling == 0 || c < 2) return std::string(c, 't');
    return "t*" + std::to_string(c);
  };
  const size_t n = per.size();
  const auto body = [&](size_t i) {
    std::string b = i == 0 ? "E" : "";
    b += ts(per[i]);
    if (i + 1 == n) b += "L";
    return b;
  };
  std::string s;
  for (size_t i = 0; i < n;) {
    size_t run = 1;
    if (spelling == 2 && i > 0)
      while (i + run < n - 1 && per[i + run] == per[i]) ++run;
    if (run > 1) {  // "(tt|)*3," stands for "tt|tt|tt|"; the next virtual stage follows it directly
      s += '(';
      s += body(i);
      s += "|)*" + std::to_string(run) + ",";
      i += run;
      continue;
    }
    s += body(i) + (i + 1 < n ? "|" : "") + (spelling == 1 ? "," : "");
    ++i;
  }
  return s;
}

TEST(PipelineLayout, CountsReadBackFromEverySpelling) {
  EXPECT_EQ(spell({{1, 2}, {0, 3}}, 0), "Et||tt|tttL");
  EXPECT_EQ(spell({{1, 2}, {0, 3}}, 1), "Et|,|,t*2|,t*3L,");
  EXPECT_EQ(spell({{2, 2}, {2, 1}}, 2), "Et*2|(t*2|)*2,tL");
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int P = 1 + static_cast<int>(rng() % 5), V = 1 + static_cast<int>(rng() % 3) * (P > 1);
    Counts counts(P, std::vector<int>(V));
    int layers = 0;
    for (auto& stage : counts)
      for (int& c : stage) layers += c = static_cast<int>(rng() % 4);
    if (layers == 0) counts[0][0] = layers = 1;
    for (int spelling = 0; spelling < 3; ++spelling) {
      const std::string text = spell(counts, spelling);
      std::string why;
      EXPECT_EQ(pipeline_layout_counts(text, P, layers, why), counts) << text;
      EXPECT_EQ(why, "") << text;
      const PipelineSplit split{layers, P, V, UnevenPipeline{0, 0, false, false, text}};
      EXPECT_EQ(pipeline_split_error(split), "") << text;
      if (pipeline_split_error(split).empty()) {
        EXPECT_EQ(pipeline_layer_counts(split), counts) << text;
      }
    }
  }
}

TEST(PipelineLayout, MegatronsExamples) {
  // The documentation's DeepSeek-V3 layout at PP16 VPP2, its MTP layer 'm' made a 't'.
  std::string why;
  const Counts c = pipeline_layout_counts("Et*3|(tt|)*29,t|L", 16, 62, why);
  ASSERT_EQ(why, "");
  ASSERT_EQ(c.size(), 16u);
  EXPECT_EQ(c[0], (std::vector<int>{3, 2}));
  for (int p = 1; p < 14; ++p) EXPECT_EQ(c[p], (std::vector<int>{2, 2})) << p;
  EXPECT_EQ(c[14], (std::vector<int>{2, 1}));
  EXPECT_EQ(c[15], (std::vector<int>{2, 0}));
  // The docstring's "(|ab)*2,cd" -> "|ab|abcd", and "Ettt|(tt|)*29,m|L".
  EXPECT_EQ(pipeline_layout_virtual_stages("E(|tt)*2,tL", why), (std::vector<std::string>{"E", "tt", "tttL"}));
  EXPECT_EQ(pipeline_layout_virtual_stages("E|*2t*2L", why), (std::vector<std::string>{"E", "", "ttL"}));
  EXPECT_EQ(pipeline_layout_virtual_stages("Et*0|tL", why), (std::vector<std::string>{"E", "tL"}));
  EXPECT_EQ(pipeline_layout_virtual_stages("E(t|)*0tL", why), (std::vector<std::string>{"EtL"}));
  EXPECT_EQ(pipeline_layout_virtual_stages("E(t*2|)*2L", why), (std::vector<std::string>{"Ett", "tt", "L"}));
  // Counts as Python's int() reads them; a repeat after a group's; a group after a repeat.
  EXPECT_EQ(pipeline_layout_virtual_stages("Et*0000000001|tL", why), (std::vector<std::string>{"Et", "tL"}));
  EXPECT_EQ(pipeline_layout_virtual_stages("E(t|)*02,tL", why), (std::vector<std::string>{"Et", "t", "tL"}));
  EXPECT_EQ(pipeline_layout_virtual_stages("E(t|t)*2*2L", why), (std::vector<std::string>{"Et", "tt", "ttL"}));
  EXPECT_EQ(pipeline_layout_virtual_stages("Et*2(t)*2|L", why), (std::vector<std::string>{"Etttt", "L"}));
  EXPECT_EQ(why, "");
  // Long layouts (a recursive regular expression overflowed the stack on these).
  const std::string many(30000, 't');
  const Counts long_layout = pipeline_layout_counts("E(" + many + ")*1|L", 2, 30000, why);
  EXPECT_EQ(why, "");
  EXPECT_EQ(long_layout, (Counts{{30000}, {0}}));
}

std::string error_of(const std::string& text, int stages, int layers) {
  std::string why;
  EXPECT_TRUE(pipeline_layout_counts(text, stages, layers, why).empty()) << text;
  return why;
}

TEST(PipelineLayout, RefusesWhatMegatronRefuses) {
  const std::string flag = "--pipeline-model-parallel-layout ";
  EXPECT_EQ(error_of("Ett|tL", 3, 3), flag + "\"Ett|tL\": its 2 stages must be a multiple of "
                                             "--pipeline-model-parallel-size (3)");
  EXPECT_EQ(error_of("tt|EL", 2, 2), flag + "\"tt|EL\": it must begin with the embedding, E");
  EXPECT_EQ(error_of("Ett|t", 2, 3), flag + "\"Ett|t\": it must end with the loss, L");
  EXPECT_EQ(error_of("EtL|EtL", 2, 2), flag + "\"EtL|EtL\": it must hold E and L once each");
  EXPECT_EQ(error_of("Ett|tL", 2, 4), flag + "\"Ett|tL\": it holds 3 transformer layers (t), --num-layers is 4");
  EXPECT_EQ(error_of("Et|m|tL", 3, 2), flag + "\"Et|m|tL\": 'm' (a multi-token prediction layer) is not part of GPT-2");
  EXPECT_EQ(error_of("Et t|tL", 2, 3), flag + "\"Et t|tL\": ' ' is not a layer: E (embedding), t (transformer "
                                              "layer), L (loss), '|' between stages, X*n and (...)*n to repeat");
  // Parentheses do not nest (Megatron's pattern leaves "E(t(t))|L"), "t*3*2" leaves a '*', an
  // empty group is no group ("E()*2" leaves "E())"), and a group of a '(' repeats it ("E((").
  EXPECT_NE(error_of("E((t)*2)*2|L", 2, 4).find(": '(' is not a layer"), std::string::npos);
  EXPECT_NE(error_of("Et*3*2|L", 2, 6).find(": '*' is not a layer"), std::string::npos);
  EXPECT_NE(error_of("E()*2|tL", 2, 1).find(": '(' is not a layer"), std::string::npos);
  EXPECT_NE(error_of("E(()*2|tL", 2, 1).find(": '(' is not a layer"), std::string::npos);
  const std::string unclosed = "E(" + std::string(50000, 't') + "|L";
  EXPECT_EQ(error_of(unclosed, 2, 50000), flag + "\"" + unclosed.substr(0, 80) + "...\": '(' is not a layer: E "
                                                "(embedding), t (transformer layer), L (loss), '|' between stages, X*n "
                                                "and (...)*n to repeat");
  EXPECT_NE(error_of("Et*99999999999|L", 2, 1).find("unrolls to more than"), std::string::npos);
  EXPECT_NE(error_of("E(t|)*2000000L", 2, 1).find("unrolls to more than"), std::string::npos);
}

TEST(PipelineLayout, InTheSplit) {
  // Chunks come from the layout; the other uneven flags and a one-stage pipeline of chunks are refused.
  EXPECT_EQ(pipeline_split_error(PipelineSplit{4, 2, 2, UnevenPipeline{0, 0, false, false, "Et|t|t|tL"}}), "");
  EXPECT_EQ(pipeline_split_error(PipelineSplit{4, 2, 1, UnevenPipeline{0, 0, false, false, "Et|t|t|tL"}}),
            "--pipeline-model-parallel-layout \"Et|t|t|tL\" makes 2 model chunks a stage, not 1");
  EXPECT_EQ(pipeline_split_error(PipelineSplit{2, 1, 2, UnevenPipeline{0, 0, false, false, "Et|tL"}}),
            "--pipeline-model-parallel-layout \"Et|tL\": its 2 stages would be model chunks of one stage: they need "
            "--pipeline-model-parallel-size above 1");
  EXPECT_EQ(pipeline_split_error(PipelineSplit{2, 2, 1, UnevenPipeline{1, 0, false, false, "Et|tL"}}),
            "--pipeline-model-parallel-layout cannot be given with --decoder-first/last-pipeline-num-layers or "
            "--account-for-embedding/loss-in-pipeline-split");
  // A middle stage with nothing at all, and where each layer lands.
  const PipelineSplit empty_middle{3, 3, 1, UnevenPipeline{0, 0, false, false, "Ett||tL"}};
  EXPECT_EQ(pipeline_split_text(empty_middle), "stages of 2, 0 and 1 layers");
  EXPECT_EQ(pipeline_stage_of_layer(empty_middle, 2), 2);
  const PipelineSplit chunks{5, 2, 2, UnevenPipeline{0, 0, false, false, "E|tt|t|ttL"}};
  EXPECT_EQ(pipeline_split_text(chunks), "stages of [0, 1] and [2, 2] layers");
  EXPECT_EQ(pipeline_chunk_layers(chunks, 1)[1].begin, 3);
  EXPECT_EQ(pipeline_stage_of_layer(chunks, 2), 0);
}

}  // namespace
}  // namespace trident
