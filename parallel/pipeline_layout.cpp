#include "parallel/pipeline_layout.h"

#include <algorithm>

#include "core/error.h"

namespace trident {
namespace {

constexpr size_t kMaxUnrolled = size_t{1} << 20;  // characters: far beyond any model's layers

std::string n(int64_t v) { return std::to_string(v); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Megatron's two patterns, r'\(([^)]+)\)\*(\d+)' and r'(.)\*(\d+)', replaced left to right
// without overlaps (Python's re.sub) by the group repeated as often as the count says. Scanned
// by hand: std::regex recurses per character and overflows the stack on long layouts. Where a
// match begins is where the regular expression's would: the group's text runs up to the first
// ')' (it may hold '('), so no shorter match exists; the count takes every digit that follows.
class Unroller {
 public:
  explicit Unroller(std::string& why) : why_(why) {}

  // Pass `grouped` (the first pattern) or not (the second) over `text`; false past kMaxUnrolled.
  bool pass(std::string& text, bool grouped) {
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
      size_t unit_begin = i, unit_end = i + 1, star = i + 1;
      bool match = false;
      if (grouped) {
        const size_t close = text[i] == '(' ? text.find(')', i + 1) : std::string::npos;
        if (close != std::string::npos && close > i + 1) {
          unit_begin = i + 1, unit_end = close, star = close + 1;
          match = true;
        }
      } else {
        match = text[i] != '\n';
      }
      size_t digits_end = star + 1;
      while (digits_end < text.size() && is_digit(text[digits_end])) ++digits_end;
      if (!match || star >= text.size() || text[star] != '*' || digits_end == star + 1) {
        out += text[i++];
        continue;
      }
      const int64_t times = count(text.substr(star + 1, digits_end - star - 1));
      const size_t unit = unit_end - unit_begin;
      if (times < 0 || out.size() + unit * static_cast<size_t>(times) > kMaxUnrolled) {
        // concat, not operator+ on a literal: GCC 12 warns falsely (-Wrestrict) on that chain.
        why_ = detail::concat("'", text.substr(i, std::min<size_t>(digits_end - i, 40)), "' unrolls to more than ",
                              kMaxUnrolled, " characters");
        return false;
      }
      for (int64_t k = 0; k < times; ++k) out.append(text, unit_begin, unit);
      i = digits_end;
    }
    text = std::move(out);
    return true;
  }

 private:
  // The count Python's int() reads from `digits` (leading zeros allowed); -1 past kMaxUnrolled.
  static int64_t count(const std::string& digits) {
    int64_t v = 0;
    for (char c : digits) {
      v = v * 10 + (c - '0');
      if (v > static_cast<int64_t>(kMaxUnrolled)) return -1;
    }
    return v;
  }

  std::string& why_;
};

}  // namespace

std::vector<std::string> pipeline_layout_virtual_stages(const std::string& text, std::string& why) {
  std::string s;
  std::copy_if(text.begin(), text.end(), std::back_inserter(s), [](char c) { return c != ','; });
  Unroller unroller(why);
  if (!unroller.pass(s, true) || !unroller.pass(s, false)) return {};
  std::vector<std::string> stages(1);
  for (char c : s) {
    if (c == '|') {
      stages.emplace_back();
    } else if (c == 'E' || c == 'L' || c == 't') {
      stages.back() += c;
    } else if (c == 'm') {
      why = "'m' (a multi-token prediction layer) is not part of GPT-2";
      return {};
    } else {
      why = detail::concat("'", c,
                           "' is not a layer: E (embedding), t (transformer layer), L (loss), '|' between stages, "
                           "X*n and (...)*n to repeat");
      return {};
    }
  }
  return stages;
}

std::string pipeline_layout_flag(const std::string& text) {
  return "--pipeline-model-parallel-layout \"" + (text.size() <= 80 ? text : text.substr(0, 80) + "...") + "\"";
}

int pipeline_layout_chunks(const std::string& text, int stages) {
  std::string why;
  const size_t virtual_stages = pipeline_layout_virtual_stages(text, why).size();
  const size_t P = static_cast<size_t>(std::max(stages, 1));
  return why.empty() && virtual_stages % P == 0 && virtual_stages > P ? static_cast<int>(virtual_stages / P) : 1;
}

std::vector<std::vector<int>> pipeline_layout_counts(const std::string& text, int stages, int num_layers,
                                                     std::string& why) {
  const std::string flag = pipeline_layout_flag(text) + ": ";
  const std::vector<std::string> virtual_stages = pipeline_layout_virtual_stages(text, why);
  if (!why.empty()) {
    why = flag + why;
    return {};
  }
  const int V = static_cast<int>(virtual_stages.size());
  std::string flat;
  for (const std::string& v : virtual_stages) flat += v;
  const auto count = [&](char c) { return static_cast<int>(std::count(flat.begin(), flat.end(), c)); };
  if (stages < 1 || V % stages != 0)
    why = "its " + n(V) + " stages must be a multiple of --pipeline-model-parallel-size (" + n(stages) + ")";
  else if (flat.empty() || flat.front() != 'E')
    why = "it must begin with the embedding, E";
  else if (flat.back() != 'L')
    why = "it must end with the loss, L";
  else if (count('E') != 1 || count('L') != 1)
    why = "it must hold E and L once each";
  else if (count('t') != num_layers)
    why = "it holds " + n(count('t')) + " transformer layers (t), --num-layers is " + n(num_layers);
  if (!why.empty()) {
    why = flag + why;
    return {};
  }
  std::vector<std::vector<int>> counts(stages, std::vector<int>(V / stages));
  for (int i = 0; i < V; ++i)
    counts[i % stages][i / stages] =
        static_cast<int>(std::count(virtual_stages[i].begin(), virtual_stages[i].end(), 't'));
  return counts;
}

}  // namespace trident
