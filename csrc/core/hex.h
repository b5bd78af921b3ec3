// A 64-bit value as the 16 lower-case hex digits that name cache files and show checksums.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace trident {

inline std::string hex64(uint64_t h) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace trident
