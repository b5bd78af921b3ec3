// On/off settings of the CUDA kernels from the environment (TRIDENT_ATTN_*_WGMMA,
// TRIDENT_LN_FWD_RING, ...): core/env_switch.h's, with the op that reads them named in errors.
#pragma once

#include "core/env_switch.h"
#include "core/error.h"

namespace trident::cuda {

// 1 for "1", 0 for "0", -1 when unset or empty (the caller's default applies); anything
// else is a ConfigError naming `op` and the variable.
inline int env_switch(const char* name, const char* op) {
  try {
    return trident::env_switch(name);
  } catch (const ConfigError& e) {
    throw ConfigError(detail::concat(op, ": ", e.what()));
  }
}

}  // namespace trident::cuda
