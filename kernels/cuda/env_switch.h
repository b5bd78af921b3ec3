// On/off settings of the CUDA kernels from the environment (TRIDENT_ATTN_*_WGMMA,
// TRIDENT_LN_FWD_RING, ...), read on every call so that one process can time each setting.
#pragma once

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace trident::cuda {

// 1 for "1", 0 for "0", -1 when unset or empty (the caller's default applies); anything
// else is an error naming `op` and the variable.
inline int env_switch(const char* name, const char* op) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return -1;
  TRIDENT_CHECK(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0, op, ": ", name, "=", v, " must be 0 or 1");
  return v[0] == '1' ? 1 : 0;
}

}  // namespace trident::cuda
