// The documents inside one training sample, as Megatron's get_ltor_masks_and_position_ids
// finds them for --reset-position-ids and --reset-attention-mask: a document ends with each
// end-of-document token of the sample's input (the token is its document's last), and the
// next token begins another. A sample's first token begins a document whatever precedes it.
#pragma once

#include <cstdint>

namespace trident {

// starts[t] = the first position of the document holding token t of tokens[0, T): 0, or one
// past the last `eod` before t. Position ids restarted in each document are t - starts[t].
void document_starts(const int32_t* tokens, int T, int32_t eod, int32_t* starts);

}  // namespace trident
