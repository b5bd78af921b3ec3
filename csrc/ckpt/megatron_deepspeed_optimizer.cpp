#include "ckpt/megatron_deepspeed_optimizer.h"

#include <tuple>

#include "ckpt/megatron_deepspeed_files.h"
#include "core/error.h"
#include "core/tensor.h"

namespace trident::megatron {

namespace deepspeed {

namespace {

using pickle::Kind;
using pickle::Value;

using Parts = std::vector<std::pair<const TorchFile*, const TorchTensor*>>;

// A group's flat state over the data-parallel ranks: the partitions joined, `numel` long. Only
// the end padding to a multiple of 2 x dp is dropped (zero_to_fp32's check).
std::vector<float> joined(const Import& im, const Parts& parts, int64_t numel, const std::string& what) {
  std::vector<float> out;
  for (const auto& [f, t] : parts) {
    const std::vector<float> v = f->read_f32(*t, what);
    out.insert(out.end(), v.begin(), v.end());
  }
  const int64_t align = 2 * static_cast<int64_t>(parts.size()), padded = (numel + align - 1) / align * align;
  if (static_cast<int64_t>(out.size()) < numel || static_cast<int64_t>(out.size()) > padded)
    throw IoError(im.c.dir.string() + ": " + what + " holds " + std::to_string(out.size()) + " elements over the " +
                  std::to_string(parts.size()) + " data-parallel ranks, its parameters " + std::to_string(numel) +
                  " (padded to " + std::to_string(padded) + "): not DeepSpeed's partitions of param_shapes' group");
  out.resize(static_cast<size_t>(numel));
  return out;
}

// The groups with Adam's hyperparameters, and the fp16 loss scaler: DeepSpeed's
// DynamicLossScaler object, in the terms of trident's dynamic scaler (Megatron's rules, which
// DeepSpeed's equal: the scale grows on the window-th clean step since the last overflow or
// growth, hysteresis counts overflows down).
void read_common(Import& im, const TorchFile& z, const Value& osd, const Value& base) {
  im.read_schedule_and_groups(z, base.kind == Kind::Dict ? base.get("param_groups") : nullptr);
  const Value* scaler = osd.get("loss_scaler");
  if (im.dtype != DType::F16 || !scaler || scaler->kind == Kind::None) return;
  const Value* scale = scaler->get("cur_scale");
  const std::optional<double> value = scale ? scalar_value(z, *scale, "loss_scaler cur_scale") : std::nullopt;
  if (!value || !(*value > 0))
    throw IoError(z.path() + ": 'loss_scaler' is " + scaler->describe() + ", not DeepSpeed's loss scaler");
  const Value* iter = scaler->get("cur_iter");
  const Value* last = scaler->get("last_overflow_iter");
  const Value* window = scaler->get("scale_window");
  if (!iter || !last || !window || iter->kind != Kind::Int || last->kind != Kind::Int || window->kind != Kind::Int ||
      window->integer < 1) {
    im.out.loss_scaler = {{"scale", *value}, {"growth_tracker", 0}, {"hysteresis_tracker", 0}};  // a static scaler
    return;
  }
  if (true_arg(*scaler, "consecutive_hysteresis"))
    throw ConfigError("--with-optimizer: " + z.path() + ": the loss scaler ran with consecutive_hysteresis, which "
                      "Megatron's rules, trident's, do not have");
  const Value* hysteresis = scaler->get("cur_hysteresis");
  im.out.loss_scaler = {{"scale", *value},
                      {"growth_tracker", (iter->integer - last->integer - 1) % window->integer},
                      {"hysteresis_tracker", hysteresis && hysteresis->kind == Kind::Int ? hysteresis->integer : 1}};
}

}  // namespace

void read_zero_rank(Import& im, int mp) {
  const int t = mp % im.c.tp, s = mp / im.c.tp;
  const RankFiles& files = im.ranks[static_cast<size_t>(mp)];
  const TorchFile& ms = *files.model_states;
  const Value& shapes = field(ms, ms.root(), "param_shapes", "the model states");
  if (shapes.kind != Kind::List) throw IoError(ms.path() + ": 'param_shapes' is " + shapes.describe());
  // Per group: the masters' and the moments' partitions over the data-parallel ranks.
  const size_t groups = shapes.items.size();
  std::vector<Parts> parts[3];
  for (auto& p : parts) p.resize(groups);
  for (const auto& zf : files.zero) {
    const TorchFile& z = *zf;
    const Value& osd = field(z, z.root(), "optimizer_state_dict", "the ZeRO file");
    const Value& masters = field(z, osd, "single_partition_of_fp32_groups", "'optimizer_state_dict'");
    if (masters.kind != Kind::List || masters.items.size() != groups)
      throw IoError(z.path() + ": 'single_partition_of_fp32_groups' is not a list of " + std::to_string(groups) +
                    " groups' masters (" + ms.path() + "'s param_shapes)");
    const Value& base = field(z, osd, "base_optimizer_state", "'optimizer_state_dict'");
    if (osd.get("param_alignment_paddings"))
      throw ConfigError("--with-optimizer: " + z.path() + ": its parameters are aligned within their groups "
                        "(param_alignment_paddings), which trident does not read");
    if (const Value* count = osd.get("partition_count"); count && count->kind == Kind::List)
      for (const auto& n : count->items)
        if (n->kind == Kind::Int && n->integer != static_cast<int64_t>(files.zero.size()))
          throw IoError(z.path() + ": partitioned over " + std::to_string(n->integer) + " data-parallel ranks, but " +
                        std::to_string(files.zero.size()) + " ZeRO files are there");
    for (size_t g = 0; g < groups; ++g) {
      const std::string what = "group " + std::to_string(g);
      parts[0][g].push_back({&z, &flat_tensor(z, *masters.items[g], "the masters of " + what)});
      const Value& st = im.group_state(z, base, g);
      parts[1][g].push_back({&z, &flat_tensor(z, field(z, st, "exp_avg", what + "'s state"), what + " 'exp_avg'")});
      parts[2][g].push_back(
          {&z, &flat_tensor(z, field(z, st, "exp_avg_sq", what + "'s state"), what + " 'exp_avg_sq'")});
      im.note_step(z, base, st, g, osd.get("base_optimizer_state_step"));
    }
    if (&zf == &files.zero.front() && mp == 0) read_common(im, z, osd, base);
  }
  for (size_t g = 0; g < groups; ++g) {
    const Value& group = *shapes.items[g];
    if (group.kind != Kind::Dict)
      throw IoError(ms.path() + ": param_shapes[" + std::to_string(g) + "] is " + group.describe());
    std::vector<std::tuple<std::string, std::vector<int64_t>, int64_t>> params;  // name, shape, offset
    int64_t numel = 0;
    for (const auto& [k, v] : group.entries) {
      if (!k->is_str() || (v->kind != Kind::Tuple && v->kind != Kind::List))
        throw IoError(ms.path() + ": param_shapes[" + std::to_string(g) + "] maps " + k->describe() + " to " +
                      v->describe());
      std::vector<int64_t> shape;
      for (const auto& d : v->items) {
        if (d->kind != Kind::Int || d->integer < 0)
          throw IoError(ms.path() + ": param_shapes[" + std::to_string(g) + "] gives '" + k->text + "' the shape " +
                        v->describe());
        shape.push_back(d->integer);
      }
      params.emplace_back(k->text, shape, numel);
      numel += numel_of(shape);
    }
    const std::string what = "model-parallel rank " + std::to_string(mp) + " group " + std::to_string(g);
    std::vector<float> flat[3];
    for (int k = 0; k < 3; ++k) flat[k] = joined(im, parts[k][g], numel, what);
    for (const auto& [name, shape, at] : params) {
      const std::optional<std::pair<const Shard*, std::string>> where = im.resolve(name, t, s, ms.path());
      if (!where) continue;
      std::array<HostTensor, 3> state;
      for (int k = 0; k < 3; ++k)
        state[static_cast<size_t>(k)] = {shape, std::vector<float>(flat[k].begin() + at,
                                                                   flat[k].begin() + at + numel_of(shape))};
      im.take(*where->first, where->second, std::move(state), name, what);
    }
  }
}

}  // namespace deepspeed

OptimizerState read_deepspeed_optimizer_state(const Checkpoint& c, DType model_dtype) {
  OptimizerState out;
  deepspeed::Import im(c, model_dtype, out);
  std::map<int, size_t> next_layer;
  for (size_t mp = 0; mp < im.ranks.size(); ++mp) {
    if (im.stage0) deepspeed::read_stage0_rank(im, static_cast<int>(mp), next_layer);
    else deepspeed::read_zero_rank(im, static_cast<int>(mp));
  }
  for (const auto& [t, used] : next_layer)  // ZeRO stage 0's stages must hold every layer
    if (im.pipeline && used != im.layer_shards(t).size())
      throw IoError(c.dir.string() + ": the stages' optimizers hold " + std::to_string(used) + " of tensor-parallel "
                    "rank " + std::to_string(t) + "'s " + std::to_string(im.layer_shards(t).size()) +
                    " transformer layers");
  out.moments = true;
  return out;
}

}  // namespace trident::megatron
