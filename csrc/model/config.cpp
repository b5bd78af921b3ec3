#include "model/config.h"

#include <string>

#include "core/error.h"

namespace trident {

int64_t ModelConfig::padded_vocab_size(int tp) const {
  const int64_t multiple = static_cast<int64_t>(make_vocab_size_divisible_by) * tp;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int64_t ModelConfig::num_parameters(int tp) const {
  const int64_t C = hidden_size, L = num_layers;
  const int64_t per_layer = 4 * C                  // two LayerNorms
                            + 3 * C * C + 3 * C    // QKV
                            + C * C + C            // attention output
                            + 4 * C * C + 4 * C    // MLP up
                            + 4 * C * C + C;       // MLP down
  return padded_vocab_size(tp) * C + static_cast<int64_t>(max_position_embeddings) * C +
         L * per_layer + 2 * C;
}

void ModelConfig::validate(int tp) const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw ConfigError(msg);
  };
  need(num_layers > 0, "--num-layers must be positive");
  need(hidden_size > 0, "--hidden-size must be positive");
  // Bounds far above any GPT (GPT-3 175B: 96 layers, hidden 12288) that keep every size
  // derived from them (parameter counts, padded vocabulary, embedding tables) inside int64.
  need(num_layers <= kMaxLayers, "--num-layers (" + std::to_string(num_layers) + ") must be at most " +
                                     std::to_string(kMaxLayers));
  need(hidden_size <= kMaxHiddenSize, "--hidden-size (" + std::to_string(hidden_size) + ") must be at most " +
                                          std::to_string(kMaxHiddenSize));
  need(max_position_embeddings <= kMaxPositions, "--max-position-embeddings (" +
                                                     std::to_string(max_position_embeddings) +
                                                     ") must be at most " + std::to_string(kMaxPositions));
  need(vocab_size <= kMaxVocabSize, "vocabulary size (" + std::to_string(vocab_size) + ") must be at most " +
                                        std::to_string(kMaxVocabSize) + " (token ids are int32)");
  need(make_vocab_size_divisible_by <= kMaxVocabDivisor, "--make-vocab-size-divisible-by (" +
                                                             std::to_string(make_vocab_size_divisible_by) +
                                                             ") must be at most " + std::to_string(kMaxVocabDivisor));
  need(num_attention_heads > 0, "--num-attention-heads must be positive");
  need(hidden_size % num_attention_heads == 0,
       "--num-attention-heads (" + std::to_string(num_attention_heads) + ") must divide --hidden-size (" +
           std::to_string(hidden_size) + ")");
  need(seq_length > 0, "--seq-length must be positive");
  need(max_position_embeddings >= seq_length,
       "--max-position-embeddings (" + std::to_string(max_position_embeddings) +
           ") must be at least --seq-length (" + std::to_string(seq_length) + ")");
  need(vocab_size > 1, "vocabulary size must be above 1");
  need(make_vocab_size_divisible_by > 0, "--make-vocab-size-divisible-by must be positive");
  need(init_method_std > 0, "--init-method-std must be positive");
  need(embedding_init_method_std >= 0, "--embedding-init-method-std must be positive");
  need(hidden_dropout >= 0 && hidden_dropout < 1, "--hidden-dropout must be in [0, 1)");
  need(attention_dropout >= 0 && attention_dropout < 1, "--attention-dropout must be in [0, 1)");
  need(tp > 0 && num_attention_heads % tp == 0,
       "--num-attention-heads (" + std::to_string(num_attention_heads) +
           ") must be divisible by --tensor-model-parallel-size (" + std::to_string(tp) + ")");
}

double model_flops_per_iteration(const ModelConfig& c, int64_t global_batch, int tp) {
  const double B = static_cast<double>(global_batch), s = c.seq_length, l = c.num_layers,
               h = c.hidden_size, V = static_cast<double>(c.padded_vocab_size(tp));
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double megatron_flops_per_iteration(const ModelConfig& c, int64_t global_batch, int tp) {
  const double B = static_cast<double>(global_batch), s = c.seq_length, l = c.num_layers,
               h = c.hidden_size, V = static_cast<double>(c.padded_vocab_size(tp));
  return 72.0 * B * s * l * h * h * (1.0 + s / (12.0 * h) + V / (12.0 * l * h));
}

}  // namespace trident
