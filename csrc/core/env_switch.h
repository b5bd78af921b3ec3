// On/off settings from the environment (TRIDENT_ATTN_SAVE_MASK, the CUDA kernels'
// TRIDENT_ATTN_*_WGMMA, ...), read on every call so that one process can time or test each.
#pragma once

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace trident {

// 1 for "1", 0 for "0", -1 when unset or empty (the caller's default applies); any other
// value is a ConfigError naming the variable and the value.
inline int env_switch(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return -1;
  if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
    throw ConfigError(detail::concat(name, "=", v, " must be 0 or 1"));
  return v[0] == '1' ? 1 : 0;
}

}  // namespace trident
