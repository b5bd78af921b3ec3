// Megatron's tools/preprocess_data.py reads each JSONL line with Python's json.loads, which
// takes number forms that strict JSON parsers (simdjson) refuse: NaN, Infinity and -Infinity
// (what json.dumps writes for a float NaN or inf, as exports from pandas do), integers of any
// size, and numbers beyond a double's range (read as inf). Megatron then reads only the
// --json-keys fields, so such a value elsewhere in a document does not stop it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trident {

// The line with every value outside strings that Python reads as a number (NaN, Infinity,
// -Infinity, and JSON's number grammar) replaced by 0, or nothing when it has none. A line
// that strict parsing refused and that parses after this is one json.loads reads; a text
// value that is such a number stays a number.
std::optional<std::string> zero_python_numbers(std::string_view line);

}  // namespace trident
