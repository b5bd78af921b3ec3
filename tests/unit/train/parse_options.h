// trident-train's command line in tests: the options it parses to, or the one-line error.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "train/options.h"

namespace trident {

// The options of `trident-train args...` (a failed parse throws the ConfigError).
inline TrainOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "trident-train");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  TrainOptions o;
  EXPECT_TRUE(parse_train_options(static_cast<int>(argv.size()), argv.data(), o));
  return o;
}

// The ConfigError message for `args`, or "" when they parse.
inline std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The ConfigError message of `args`, which must fail with one line.
inline std::string must_fail(std::vector<std::string> args) {
  const std::string msg = error_of(std::move(args));
  EXPECT_NE(msg, "") << "should fail";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "more than one line: " << msg;
  return msg;
}

}  // namespace trident
