// ScopedEnv: an environment variable set for one scope, then restored, for tests of settings
// read from the environment.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace trident::test {

// An environment variable set to `value` (nullptr: unset) for one scope, then restored to
// what it was; a null name does nothing. The kernels' settings (TRIDENT_ATTN_*,
// TRIDENT_LN_FWD_*) are read on every call, so a test can switch them per scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (name_ == nullptr) return;
    if (const char* old = std::getenv(name_)) old_ = old;
    set(value);
  }
  ~ScopedEnv() {
    if (name_ != nullptr) set(old_ ? old_->c_str() : nullptr);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void set(const char* v) {
    if (v == nullptr)
      ::unsetenv(name_);
    else
      ::setenv(name_, v, 1);
  }
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace trident::test
