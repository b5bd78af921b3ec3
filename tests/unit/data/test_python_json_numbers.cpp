// zero_python_numbers: the values Python's json.loads reads as numbers (NaN, Infinity,
// -Infinity, JSON's number grammar at any magnitude) become 0 outside strings; strings
// (escaped quotes and backslashes included), true/false/null and forms Python refuses stay.
#include <gtest/gtest.h>

#include "data/python_json_numbers.h"

namespace trident {
namespace {

TEST(PythonJsonNumbers, ZeroesPythonNumbersOutsideStrings) {
  EXPECT_EQ(zero_python_numbers(R"({"a": NaN, "b": [Infinity,-Infinity], "c":1e400})"),
            R"({"a": 0, "b": [0,0], "c":0})");
  EXPECT_EQ(zero_python_numbers("{\"n\":123456789012345678901234567890}"), "{\"n\":0}");
  EXPECT_EQ(zero_python_numbers("[-0.5e+3,0,-0,2E-9]"), "[0,0,0,0]");
  // Strings untouched, also after escaped quotes and backslashes.
  EXPECT_EQ(zero_python_numbers(R"({"t": "NaN \" 12 \\", "u": 7, "v": "1e400"})"),
            R"({"t": "NaN \" 12 \\", "u": 0, "v": "1e400"})");
  EXPECT_EQ(zero_python_numbers(R"({"k": true, "l": null, "m": false, "x": 1})"),
            R"({"k": true, "l": null, "m": false, "x": 0})");
  // Forms Python refuses are left for the parser to refuse.
  EXPECT_EQ(zero_python_numbers("[nan, +Infinity, 01, 1., .5, 1e, -, NaN1, 3]"),
            "[nan, +Infinity, 01, 1., .5, 1e, -, NaN1, 0]");
  // Nothing to replace: nothing returned (the strict parser's error stands).
  EXPECT_EQ(zero_python_numbers(R"({"text": "a",})"), std::nullopt);
  EXPECT_EQ(zero_python_numbers(R"({"text": "unterminated 12)"), std::nullopt);
  EXPECT_EQ(zero_python_numbers(""), std::nullopt);
}

}  // namespace
}  // namespace trident
