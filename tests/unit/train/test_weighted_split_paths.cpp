// BigScience's --train/--valid/--test-weighted-split-paths and their -path files: the groups
// parsed (names, normalised weights, fractions, prefixes), every malformed form refused with
// one line naming the flag (or file) and the group, the file rule of parse_data_paths_path
// (one line of quoted groups ended by a newline), and the flags against the other data flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "parse_options.h"
#include "train/weighted_split_paths.h"

namespace trident {
namespace {

const std::string kValid = "--valid-weighted-split-paths";

std::string parse_error(const std::vector<std::string>& words, bool one_group = false) {
  try {
    parse_weighted_split_paths(words, kValid, one_group);
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "accepted: " << (words.empty() ? "" : words[0]);
  return "";
}

std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / ("trident-wsp-" + name)).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(WeightedSplitPaths, GroupsParseAsBigScienceReadsThem) {
  const auto groups = parse_weighted_split_paths(
      {"WIKI: 0.6 0.6:0.8 /d/a, 0.3 0:1 /d/b,0.1 0:1 /d/c", " BOOKS :  2 0.25:0.5   /d/e "}, kValid, false);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].name, "WIKI");
  EXPECT_EQ(groups[0].blend.prefixes, (std::vector<std::string>{"/d/a", "/d/b", "/d/c"}));
  ASSERT_EQ(groups[0].blend.weights.size(), 3u);
  EXPECT_DOUBLE_EQ(groups[0].blend.weights[0], 0.6);  // already summing to 1
  EXPECT_DOUBLE_EQ(groups[0].blend.weights[1], 0.3);
  EXPECT_DOUBLE_EQ(groups[0].blend.weights[2], 0.1);
  EXPECT_DOUBLE_EQ(groups[0].blend.fractions[0].start, 0.6);
  EXPECT_DOUBLE_EQ(groups[0].blend.fractions[0].end, 0.8);
  EXPECT_DOUBLE_EQ(groups[0].blend.fractions[2].start, 0);
  EXPECT_DOUBLE_EQ(groups[0].blend.fractions[2].end, 1);
  EXPECT_EQ(groups[0].blend.flag, kValid + " group WIKI");
  EXPECT_EQ(groups[1].name, "BOOKS");  // the spaces around the name dropped
  EXPECT_EQ(groups[1].blend.prefixes, (std::vector<std::string>{"/d/e"}));
  EXPECT_DOUBLE_EQ(groups[1].blend.weights[0], 1.0);  // a lone weight normalised too (unused)
  EXPECT_DOUBLE_EQ(groups[1].blend.fractions[0].start, 0.25);
  // Weights normalised: 1 and 3 -> 0.25 and 0.75; a prefix with a colon stays whole.
  const auto w = parse_weighted_split_paths({"T: 1 0:0.5 /x/a:b, 3 0.5:1 /x/c"}, "--train-weighted-split-paths", true);
  EXPECT_DOUBLE_EQ(w[0].blend.weights[0], 0.25);
  EXPECT_DOUBLE_EQ(w[0].blend.weights[1], 0.75);
  EXPECT_EQ(w[0].blend.prefixes[0], "/x/a:b");
}

TEST(WeightedSplitPaths, EveryMalformedGroupIsOneLineNamingTheFlagAndTheGroup) {
  const std::string form = "expected \"NAME: WEIGHT START:END PREFIX, WEIGHT START:END PREFIX, ...\"";
  EXPECT_EQ(parse_error({"WIKI 1 A"}), kValid + ": group \"WIKI 1 A\": no ':' after its name; " + form);
  // The name's colon missing, the range's taken for it.
  EXPECT_EQ(parse_error({"WIKI 1 0:1 A"}),
            kValid + ": group \"WIKI 1 0:1 A\": dataset \"1 A\" is not WEIGHT START:END PREFIX (the name \"WIKI 1 0\" "
                     "has spaces: is the ':' after the group's name missing?)");
  EXPECT_EQ(parse_error({" : 1 0:1 A"}), kValid + ": group \" : 1 0:1 A\": an empty name; " + form);
  EXPECT_EQ(parse_error({"W: 1 A"}), kValid + ": group \"W: 1 A\": dataset \"1 A\" is not WEIGHT START:END PREFIX");
  EXPECT_EQ(parse_error({"W: 1 0:1 A,"}), kValid + ": group \"W: 1 0:1 A,\": dataset \"\" is not WEIGHT START:END PREFIX");
  EXPECT_EQ(parse_error({"W: 1 0:1"}), kValid + ": group \"W: 1 0:1\": dataset \"1 0:1\" is not WEIGHT START:END PREFIX");
  // A group given unquoted, as several words: its first word has nothing after the name.
  EXPECT_EQ(parse_error({"W:", "1", "0:1", "A"}),
            kValid + ": group \"W:\": no dataset after the name: quote each group as one word, \"NAME: WEIGHT "
                     "START:END PREFIX, ...\"");
  EXPECT_EQ(parse_error({"W: x 0:1 A"}), kValid + ": group \"W: x 0:1 A\": \"x\" is not a non-negative weight");
  EXPECT_EQ(parse_error({"W: -1 0:1 A"}), kValid + ": group \"W: -1 0:1 A\": \"-1\" is not a non-negative weight");
  EXPECT_EQ(parse_error({"W: 0 0:1 A, 0 0:1 B"}), kValid + ": group \"W: 0 0:1 A, 0 0:1 B\": weights sum to zero");
  EXPECT_EQ(parse_error({"W: 1 0-1 A"}),
            kValid + ": group \"W: 1 0-1 A\": \"0-1\" is not a document range START:END (fractions, as 0:0.9)");
  EXPECT_EQ(parse_error({"W: 1 0:1:1 A"}),
            kValid + ": group \"W: 1 0:1:1 A\": \"0:1:1\" is not a document range START:END (fractions, as 0:0.9)");
  const std::string range = "\": expected 0 <= START < END <= 1 (fractions of the documents)";
  EXPECT_EQ(parse_error({"W: 1 0.5:0.5 A"}), kValid + ": group \"W: 1 0.5:0.5 A\": \"0.5:0.5" + range);
  EXPECT_EQ(parse_error({"W: 1 0.8:0.2 A"}), kValid + ": group \"W: 1 0.8:0.2 A\": \"0.8:0.2" + range);
  EXPECT_EQ(parse_error({"W: 1 0:1.5 A"}), kValid + ": group \"W: 1 0:1.5 A\": \"0:1.5" + range);
  EXPECT_EQ(parse_error({"W: 1 -0.1:1 A"}), kValid + ": group \"W: 1 -0.1:1 A\": \"-0.1:1" + range);
  EXPECT_EQ(parse_error({"W: 1 0:1 A", "W: 1 0:1 B"}),
            kValid + ": two groups named \"W\": each is reported under its name, give them different ones");
  EXPECT_EQ(parse_error({}), kValid + ": no group; " + form);
  EXPECT_EQ(parse_error({"T: 1 0:1 A", "U: 1 0:1 B"}, /*one_group=*/true),
            kValid + ": 2 groups (\"U: 1 0:1 B\" the second): the training takes one; quote each group as one word");
}

TEST(WeightedSplitPaths, FileIsOneLineOfQuotedGroups) {
  const std::string flag = "--valid-weighted-split-paths-path";
  const std::string good = write_text("good", "\"WIKI: 1 0:0.5 A, 1 0.5:1 B\" \"BOOKS: 1 0:1 C\"\n");
  EXPECT_EQ(read_weighted_split_paths_file(good, flag),
            (std::vector<std::string>{"WIKI: 1 0:0.5 A, 1 0.5:1 B", "BOOKS: 1 0:1 C"}));
  const std::string crlf = write_text("crlf", "\"T: 1 0:1 A\"\r\n");  // Python's universal newlines
  EXPECT_EQ(read_weighted_split_paths_file(crlf, flag), (std::vector<std::string>{"T: 1 0:1 A"}));
  const auto error = [&](const std::string& name, const std::string& text) {
    const std::string path = write_text(name, text);
    std::string msg;
    try {
      read_weighted_split_paths_file(path, flag);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    std::filesystem::remove(path);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind(flag + " " + path + ": ", 0), 0u) << msg;  // names the flag and the file
    return msg.substr(flag.size() + path.size() + 3);
  };
  const std::string groups = " of quoted groups: \"NAME: W S:E PREFIX, ...\" \"NAME2: ...\"";
  EXPECT_EQ(error("no_newline", "\"T: 1 0:1 A\""), "expected one line ended by a newline" + groups);
  EXPECT_EQ(error("empty", ""), "expected one line ended by a newline" + groups);
  EXPECT_EQ(error("two_lines", "\"T: 1 0:1 A\"\n\"U: 1 0:1 B\"\n"), "expected one line, found more" + groups);
  EXPECT_EQ(error("unquoted", "T: 1 0:1 A\n"),
            "the line must start and end with '\"': \"NAME: W S:E PREFIX, ...\" \"NAME2: ...\"");
  EXPECT_EQ(error("half_quoted", "\"T: 1 0:1 A\n"),
            "the line must start and end with '\"': \"NAME: W S:E PREFIX, ...\" \"NAME2: ...\"");
  EXPECT_EQ(error("trailing_space", "\"T: 1 0:1 A\" \n"),
            "the line must start and end with '\"': \"NAME: W S:E PREFIX, ...\" \"NAME2: ...\"");
  try {
    read_weighted_split_paths_file("/nonexistent/groups", flag);
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(flag + " /nonexistent/groups", 0), 0u) << e.what();
  }
  std::filesystem::remove(good);
  std::filesystem::remove(crlf);
}

TEST(WeightedSplitPaths, OptionsTakeTheFlagsAndTheFilesAgainstTheOtherDataFlags) {
  const std::vector<std::string> vocab = {"--vocab-file", "v.json", "--merge-file", "m.txt"};
  auto with_vocab = [&](std::vector<std::string> a) {
    a.insert(a.end(), vocab.begin(), vocab.end());
    return a;
  };
  TrainOptions o = parse(with_vocab({"--train-weighted-split-paths", "T: 1 0:0.9 A, 1 0:0.9 B",
                                     "--valid-weighted-split-paths", "VA: 1 0.9:1 A", "VB: 1 0.9:1 B"}));
  EXPECT_TRUE(o.has_data());
  ASSERT_EQ(o.weighted_split_groups[0].size(), 1u);
  EXPECT_EQ(o.weighted_split_groups[0][0].name, "T");
  ASSERT_EQ(o.weighted_split_groups[1].size(), 2u);
  EXPECT_EQ(o.weighted_split_groups[1][1].name, "VB");
  EXPECT_TRUE(o.weighted_split_groups[2].empty());

  const std::string file = write_text("options", "\"TA: 1 0.9:1 A\" \"TB: 1 0.9:1 B\"\n");
  o = parse(with_vocab({"--train-weighted-split-paths", "T: 1 0:1 A", "--test-weighted-split-paths-path", file}));
  ASSERT_EQ(o.weighted_split_groups[2].size(), 2u);
  EXPECT_EQ(o.weighted_split_groups[2][0].name, "TA");
  EXPECT_EQ(o.weighted_split_paths_flags[2], "--test-weighted-split-paths-path " + file);
  // The file's groups are named by the file in errors, and the training's file takes one group.
  EXPECT_EQ(must_fail(with_vocab({"--train-weighted-split-paths-path", file})),
            "--train-weighted-split-paths-path " + file +
                ": 2 groups (\"TB: 1 0.9:1 B\" the second): the training takes one; quote each group as one word");
  const std::string bad = write_text("options_bad", "\"TA 1 0.9 A\"\n");
  EXPECT_EQ(must_fail(with_vocab({"--valid-weighted-split-paths-path", bad})),
            "--valid-weighted-split-paths-path " + bad + ": group \"TA 1 0.9 A\": no ':' after its name; expected "
            "\"NAME: WEIGHT START:END PREFIX, WEIGHT START:END PREFIX, ...\"");
  // Two groups for the training on the command line (unquoted words are groups of their own).
  EXPECT_NE(must_fail(with_vocab({"--train-weighted-split-paths", "T: 1 0:1 A", "U: 1 0:1 B"})).find("takes one"),
            std::string::npos);
  // Mode 2 against mode 1 and the other ways of giving data.
  EXPECT_NE(must_fail(with_vocab({"--train-weighted-split-paths", "T: 1 0:1 A", "--data-path", "A"}))
                .find("--train-weighted-split-paths and --data-path are alternatives"),
            std::string::npos);
  EXPECT_NE(must_fail(with_vocab({"--valid-weighted-split-paths", "V: 1 0:1 A", "--split", "98,2,0"}))
                .find("--valid-weighted-split-paths and --split are alternatives"),
            std::string::npos);
  EXPECT_NE(must_fail(with_vocab({"--train-weighted-split-paths", "T: 1 0:1 A", "--valid-data-path", "B"}))
                .find("--train-weighted-split-paths and --valid-data-path are alternatives"),
            std::string::npos);
  EXPECT_NE(must_fail(with_vocab({"--train-weighted-split-paths", "T: 1 0:1 A", "--train-weighted-split-paths-path",
                                  file}))
                .find("both give the train groups"),
            std::string::npos);
  EXPECT_EQ(must_fail({"--train-weighted-split-paths", "T: 1 0:1 A", "--mock-data", "--vocab-file", "v.json"}),
            "--mock-data and --train/--valid/--test-weighted-split-paths are alternatives: give one");
  EXPECT_NE(must_fail(with_vocab({"--train-weighted-split-paths", "T: 1 0:1 A", "--valid-weighted-split-paths",
                                  "V: 1 0:1 A", "--multiple-validation-sets"}))
                .find("each group is a validation set already"),
            std::string::npos);
  // A config file's plain string is one group; the command line's --data-path replaces the
  // file's groups, and its groups the file's --data-path.
  const std::string yaml = write_text("config.yaml",
                                      "valid-weighted-split-paths: \"V: 1 0:1 A, 1 0:1 B\"\n"
                                      "train-weighted-split-paths: [\"T: 1 0:1 A\"]\nvocab-file: v.json\n");
  o = parse({"--config", yaml});
  ASSERT_EQ(o.weighted_split_groups[1].size(), 1u);
  EXPECT_EQ(o.weighted_split_groups[1][0].blend.prefixes, (std::vector<std::string>{"A", "B"}));
  o = parse({"--config", yaml, "--data-path", "C"});
  EXPECT_FALSE(o.has_weighted_split_paths());
  EXPECT_EQ(o.data_path, (std::vector<std::string>{"C"}));
  const std::string data_yaml = write_text("data.yaml", "data-path: C\nsplit: 98,2,0\nvocab-file: v.json\n");
  o = parse({"--config", data_yaml, "--train-weighted-split-paths", "T: 1 0:1 A"});
  EXPECT_TRUE(o.data_path.empty());
  EXPECT_EQ(o.weighted_split_groups[0][0].name, "T");
  for (const std::string& f : {file, bad, yaml, data_yaml}) std::filesystem::remove(f);
}

}  // namespace
}  // namespace trident
