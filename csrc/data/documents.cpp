#include "data/documents.h"

namespace trident {

void document_starts(const int32_t* tokens, int T, int32_t eod, int32_t* starts) {
  int32_t start = 0;
  for (int t = 0; t < T; ++t) {
    starts[t] = start;
    if (tokens[t] == eod) start = t + 1;
  }
}

}  // namespace trident
