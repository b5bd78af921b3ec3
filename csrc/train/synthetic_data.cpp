#include "train/synthetic_data.h"

#include "core/philox.h"

namespace trident {

void SyntheticSource::get(uint64_t i, int32_t* tokens) const {
  // t[k+1] = (5 t[k] + 3) mod A, replaced by a random token with probability 1/8.
  auto rnd = [&](uint64_t k) {
    return philox4x32_10(Philox4{{static_cast<uint32_t>(k), static_cast<uint32_t>(i),
                                  static_cast<uint32_t>(i >> 32), 0x5157u}},
                         static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32));
  };
  int64_t t = rnd(0).v[0] % alphabet_;
  for (int k = 0; k <= seq_; ++k) {
    tokens[k] = static_cast<int32_t>(t);
    const Philox4 r = rnd(k + 1);
    t = (r.v[0] & 7u) == 0 ? r.v[1] % alphabet_ : (5 * t + 3) % alphabet_;
  }
}

}  // namespace trident
