// Shared main() wrapper: every tool reports a user error as one line,
// `trident-<tool>: error: <what>`, and exits 2; a bug (InternalError) exits 3.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>

#include "core/error.h"

namespace trident {

inline int run_tool(const char* tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return 3;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return 2;
  }
}

}  // namespace trident
