// The two GELUs a model may compute, apart from the Backend seam that computes them, so that
// a model's configuration can name one without the whole seam.
#pragma once

#include <cstdint>
#include <type_traits>

namespace trident {

// The GELU of an op (ModelConfig::gelu picks the model's):
//   Tanh: the tanh approximation ("gelu_new" / "gelu_fast": GPT-2's, Megatron's fused bias-GELU)
//         gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   Erf:  the exact GELU (torch's F.gelu, HF's "gelu", Megatron's without its bias-GELU fusion)
//         gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) = x Phi(x),  gelu'(x) = Phi(x) + x phi(x)
// They differ by up to 4.7e-4 an activation, so a model trains, loads and generates with its own.
enum class Gelu : uint8_t { Tanh, Erf };
// "tanh" or "erf": metadata.json's spelling, and messages'.
constexpr const char* gelu_name(Gelu g) { return g == Gelu::Erf ? "erf" : "tanh"; }
// f(std::integral_constant<Gelu, form>{}): an op's runtime form as its loops' or kernels'
// template parameter, turned in this one place.
template <typename F>
void dispatch_gelu(Gelu form, F&& f) {
  if (form == Gelu::Erf)
    f(std::integral_constant<Gelu, Gelu::Erf>{});
  else
    f(std::integral_constant<Gelu, Gelu::Tanh>{});
}

}  // namespace trident
