// Fused causal attention at odd sizes (B=2, T=7, H=3, D=12), with and without dropout on
// the probabilities (p = 0.1), with a head offset as under tensor parallelism:
// forward (out, lse) per dtype against a double reference; backward (dqkv, "=") against
// central differences of L = sum(out * R) on the double reference (same dropout mask).
// With documents (--reset-attention-mask): forward against the double reference of each
// document alone; backward against each document's own causal backward.
#include "core/attn_dropout_mask.h"
#include "kernel_test_util.h"
#include "naive_ref.h"
#include "tests/attn_mask_test_util.h"
#include "tests/scoped_env.h"

namespace trident::test {
namespace {

constexpr int kB = 2, kT = 7, kH = 3, kD = 12;

struct Case {
  DType dt;
  float p;
  int head_offset;
};

class Attention : public ::testing::TestWithParam<Case> {};

DropoutKey key(float p) { return DropoutKey{p, 1234, 4 * 2 + kDropAttnProbs, 40}; }

TEST_P(Attention, ForwardMatchesReference) {
  const Case c = GetParam();
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD;
  const auto qkv = randn(n, 1, 1.5f);
  const AttentionShape s{kB, kT, kH, kD, c.head_offset, kH + c.head_offset};
  Buffer QKV = upload(*be, qkv, Shape{kB, kT, 3 * kH * kD}, c.dt);
  Buffer out = be->empty(Shape{kB, kT, kH * kD}, c.dt), lse = be->empty(Shape{kB, kH, kT}, DType::F32);
  be->attention_forward(QKV, out, lse, s, key(c.p));
  Vec want_lse;
  const Vec want = ref::attention(rounded(qkv, c.dt), kB, kT, kH, kD, c.head_offset, key(c.p), &want_lse);
  const double tol = dtype_tol(c.dt);
  expect_close(download(*be, out), want, 4 * tol, tol, "out");
  expect_close(download(*be, lse), want_lse, 1e-5, 1e-5, "lse");
}

TEST_P(Attention, BackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD, no = int64_t{kB} * kT * kH * kD;
  const auto qkv = randn(n, 2), r = randn(no, 3);
  const Vec rq = rounded(qkv, c.dt), rr = rounded(r, c.dt);
  const AttentionShape s{kB, kT, kH, kD, c.head_offset, 0};
  Buffer QKV = upload(*be, qkv, Shape{kB * kT, 3 * kH * kD}, c.dt);
  Buffer out = be->empty(Shape{kB * kT, kH * kD}, c.dt), lse = be->empty(Shape{kB, kH, kT}, DType::F32);
  be->attention_forward(QKV, out, lse, s, key(c.p));
  Buffer R = upload(*be, r, Shape{kB * kT, kH * kD}, c.dt);
  Buffer dqkv = upload(*be, randn(n, 4), Shape{kB * kT, 3 * kH * kD}, c.dt);  // "=": overwritten
  be->attention_backward(R, QKV, out, lse, dqkv, s, key(c.p));
  const Vec want = fd_grad([&](const Vec& v) { return dot(ref::attention(v, kB, kT, kH, kD, c.head_offset, key(c.p)), rr); }, rq);
  const double tol = std::max(dtype_tol(c.dt), 1e-4);
  expect_close(download(*be, dqkv), want, 4 * tol, tol, "dqkv");
}

// Dropout changes the output (the mask is really applied) and depends on the head offset.
TEST(AttentionDropout, MaskIsAppliedAndGlobal) {
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD, no = int64_t{kB} * kT * kH * kD;
  Buffer QKV = upload(*be, randn(n, 5), Shape{n}, DType::F32);
  Buffer o0 = be->empty(Shape{no}, DType::F32), o1 = be->empty(Shape{no}, DType::F32), o2 = be->empty(Shape{no}, DType::F32);
  Buffer lse = be->empty(Shape{kB * kH * kT}, DType::F32);
  be->attention_forward(QKV, o0, lse, AttentionShape{kB, kT, kH, kD, 0, 0}, key(0.0f));
  be->attention_forward(QKV, o1, lse, AttentionShape{kB, kT, kH, kD, 0, 0}, key(0.1f));
  be->attention_forward(QKV, o2, lse, AttentionShape{kB, kT, kH, kD, 3, 6}, key(0.1f));
  EXPECT_NE(bytes(*be, o0), bytes(*be, o1));
  EXPECT_NE(bytes(*be, o1), bytes(*be, o2));
}

// Row 0 attends only to itself: out = v_0 exactly and lse = q_0.k_0 / sqrt(D).
TEST(AttentionCausal, FirstRowIsItsOwnValue) {
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD;
  const auto qkv = randn(n, 6);
  Buffer QKV = upload(*be, qkv, Shape{n}, DType::F32);
  Buffer out = be->empty(Shape{int64_t{kB} * kT * kH * kD}, DType::F32), lse = be->empty(Shape{kB * kH * kT}, DType::F32);
  be->attention_forward(QKV, out, lse, AttentionShape{kB, kT, kH, kD, 0, 0}, DropoutKey{});
  const Vec o = download(*be, out);
  for (int h = 0; h < kH; ++h)
    for (int d = 0; d < kD; ++d) EXPECT_NEAR(o[h * kD + d], qkv[(2 * kH + h) * kD + d], 1e-6);
}

// Documents of the two samples: [0, 3) [3, 4) [4, 7) and [0, 1) [1, 7) (first keys per position).
const std::vector<int32_t> kDocStarts = {0, 0, 0, 3, 4, 4, 4, /**/ 0, 1, 1, 1, 1, 1, 1};

// Rows [t0, t0 + len) of sample b of a [B, T, row] tensor, as one sample [1, len, row].
std::vector<float> rows_of(const std::vector<float>& v, int b, int t0, int len, int64_t row) {
  const auto first = v.begin() + (int64_t{b} * kT + t0) * row;
  return std::vector<float>(first, first + len * row);
}

// Attention with documents is each document's causal attention on its own: the forward
// against the double reference of every document as a sample of its own, the backward
// against the backend's backward of every document alone (itself checked above).
TEST(AttentionDocuments, EachDocumentIsItsOwnSequence) {
  auto be = make_cpu_backend();
  const int64_t row = 3 * kH * kD, orow = kH * kD, n = int64_t{kB} * kT * row, no = int64_t{kB} * kT * orow;
  const auto qkv = randn(n, 7), r = randn(no, 8);
  Buffer docs = upload_i32(*be, kDocStarts, Shape{kB * kT});
  AttentionShape s{kB, kT, kH, kD, 1, 0};
  s.document_starts = docs;
  Buffer QKV = upload(*be, qkv, Shape{n}, DType::F32), R = upload(*be, r, Shape{no}, DType::F32);
  Buffer out = be->empty(Shape{no}, DType::F32), lse = be->empty(Shape{kB * kH * kT}, DType::F32);
  Buffer dqkv = be->empty(Shape{n}, DType::F32);
  be->attention_forward(QKV, out, lse, s, DropoutKey{});
  be->attention_backward(R, QKV, out, lse, dqkv, s, DropoutKey{});
  const Vec got_out = download(*be, out), got_lse = download(*be, lse), got_dqkv = download(*be, dqkv);
  int documents = 0;
  for (int b = 0; b < kB; ++b)
    for (int t0 = 0; t0 < kT;) {
      int len = 1;
      while (t0 + len < kT && kDocStarts[b * kT + t0 + len] == t0) ++len;
      SCOPED_TRACE("sample " + std::to_string(b) + " document [" + std::to_string(t0) + ", " +
                   std::to_string(t0 + len) + ")");
      const std::vector<float> doc_qkv = rows_of(qkv, b, t0, len, row), doc_r = rows_of(r, b, t0, len, orow);
      Vec want_lse;
      const Vec want = ref::attention(Vec(doc_qkv.begin(), doc_qkv.end()), 1, len, kH, kD, 1, DropoutKey{}, &want_lse);
      const auto at = [&](const Vec& v, int64_t first, int64_t count) {
        return Vec(v.begin() + first, v.begin() + first + count);
      };
      expect_close(at(got_out, (int64_t{b} * kT + t0) * orow, len * orow), want, 1e-5, 1e-6, "out");
      for (int h = 0; h < kH; ++h)
        expect_close(at(got_lse, (int64_t{b} * kH + h) * kT + t0, len), at(want_lse, int64_t{h} * len, len), 1e-5,
                     1e-6, "lse");
      AttentionShape alone{1, len, kH, kD, 1, 0};
      Buffer q1 = upload(*be, doc_qkv, Shape{len * row}, DType::F32), r1 = upload(*be, doc_r, Shape{len * orow}, DType::F32);
      Buffer o1 = be->empty(Shape{len * orow}, DType::F32), l1 = be->empty(Shape{kH * len}, DType::F32);
      Buffer d1 = be->empty(Shape{len * row}, DType::F32);
      be->attention_forward(q1, o1, l1, alone, DropoutKey{});
      be->attention_backward(r1, q1, o1, l1, d1, alone, DropoutKey{});
      expect_close(at(got_dqkv, (int64_t{b} * kT + t0) * row, len * row), download(*be, d1), 1e-5, 1e-6, "dqkv");
      ++documents;
      t0 += len;
    }
  EXPECT_EQ(documents, 5);
}

// Starts that are not contiguous documents are refused: past their position, going back
// along a sample, or a window that slides.
TEST(AttentionDocuments, BadStartsAreRefused) {
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD, no = int64_t{kB} * kT * kH * kD;
  Buffer QKV = upload(*be, randn(n, 9), Shape{n}, DType::F32);
  Buffer out = be->empty(Shape{no}, DType::F32), lse = be->empty(Shape{kB * kH * kT}, DType::F32);
  // 1: sample 0's position 1 starting at 2; 9: sample 1's position 2 going back to 0; 8: sample
  // 1's position 1 at 0, which leaves position 2 (start 1) neither a start nor a continuation.
  for (int bad : {1, 9, 8}) {
    std::vector<int32_t> starts = kDocStarts;
    starts[bad] = bad == 1 ? 2 : 0;
    Buffer docs = upload_i32(*be, starts, Shape{kB * kT});
    AttentionShape s{kB, kT, kH, kD, 0, 0};
    s.document_starts = docs;
    EXPECT_THROW(be->attention_forward(QKV, out, lse, s, DropoutKey{}), InternalError) << "position " << bad;
  }
}

// The saved dropout mask (AttentionShape::dropout_mask): the forward writes attn_dropout_keep's
// decision at every element a query sees (T = 37: a partial 16 x 16 block; the second sample
// in two documents), its results are those of a forward without one, and the backward reads
// the bits: given another dropout seed, it still matches the backward of the first seed.
TEST(AttentionDropout, SavedMaskIsTheDrawnMask) {
  auto be = make_cpu_backend();
  constexpr int T = 37, H0 = 2;
  const int64_t n = int64_t{kB} * T * 3 * kH * kD, no = int64_t{kB} * T * kH * kD;
  std::vector<int32_t> starts(kB * T);
  for (int t = 0; t < T; ++t) starts[T + t] = t < 20 ? 0 : 20;
  Buffer docs = upload_i32(*be, starts, Shape{kB * T});
  Buffer QKV = upload(*be, randn(n, 11), Shape{n}, DType::BF16), R = upload(*be, randn(no, 12), Shape{no}, DType::BF16);
  Buffer lse = be->empty(Shape{kB * kH * T}, DType::F32);
  Buffer mask = upload_i32(*be, std::vector<int32_t>(attn_mask_words(kB, kH, T), 0x5A5AA5A5), Shape{attn_mask_words(kB, kH, T)});
  AttentionShape plain{kB, T, kH, kD, H0, 0}, saving = plain;
  plain.document_starts = saving.document_starts = docs;
  saving.dropout_mask = mask;
  const DropoutKey drop = key(0.3f);
  DropoutKey other = drop;
  other.seed += 1;
  auto run = [&](const AttentionShape& s, const DropoutKey& fwd, const DropoutKey& bwd) {
    Buffer out = be->empty(Shape{no}, DType::BF16), dqkv = be->empty(Shape{n}, DType::BF16);
    be->attention_forward(QKV, out, lse, s, fwd);
    be->attention_backward(R, QKV, out, lse, dqkv, s, bwd);
    return std::make_pair(bytes(*be, out), bytes(*be, dqkv));
  };
  const auto drawn = run(plain, drop, drop), saved = run(saving, drop, other);
  std::vector<int32_t> words(static_cast<size_t>(attn_mask_words(kB, kH, T)));
  be->copy_to_host(words.data(), mask);
  const auto* rows = reinterpret_cast<const uint16_t*>(words.data());
  EXPECT_EQ(test::count_visible(kB, kH, T, starts,
                                [&](int b, int h, int i, int j) {
                                  return attn_mask_kept(rows, attn_mask_blocks(T), b * kH + h, i, j) !=
                                         attn_dropout_keep(drop, drop.sample_base + b, H0 + h, T, i, j);
                                }),
            0)
      << "saved bits differing from attn_dropout_keep";
  EXPECT_EQ(saved.first, drawn.first) << "out";
  EXPECT_EQ(saved.second, drawn.second) << "dqkv: the backward read the saved bits";
  EXPECT_NE(run(plain, drop, other).second, drawn.second) << "the other seed draws another mask";
  Buffer small = be->empty(Shape{attn_mask_words(kB, kH, T) - 1}, DType::I32);
  saving.dropout_mask = small;
  Buffer out = be->empty(Shape{no}, DType::BF16);
  EXPECT_THROW(be->attention_forward(QKV, out, lse, saving, drop), InternalError);
}

// TRIDENT_ATTN_SAVE_MASK asks every backend to save the mask, and so does
// TRIDENT_ATTN_MASK_AHEAD (the CUDA backend's mask drawn ahead of the forward); other values
// than 0 and 1, and the two at odds, are refused with the variables' names.
TEST(AttentionDropout, SaveMaskVariable) {
  auto be = make_cpu_backend();
  auto saves = [&](const char* save, const char* ahead) {
    const test::ScopedEnv s("TRIDENT_ATTN_SAVE_MASK", save), a("TRIDENT_ATTN_MASK_AHEAD", ahead);
    return be->saves_attention_dropout_mask();
  };
  EXPECT_FALSE(saves(nullptr, nullptr));
  EXPECT_FALSE(saves("0", nullptr));
  EXPECT_FALSE(saves(nullptr, "0"));
  EXPECT_FALSE(saves("0", "0"));
  EXPECT_TRUE(saves("1", nullptr));
  EXPECT_TRUE(saves(nullptr, "1"));
  EXPECT_TRUE(saves("1", "1"));
  EXPECT_TRUE(saves("1", "0"));
  auto refused = [&](const char* save, const char* ahead, const std::string& named) {
    try {
      saves(save, ahead);
      auto shown = [](const char* v) { return v != nullptr ? v : "(unset)"; };
      ADD_FAILURE() << "TRIDENT_ATTN_SAVE_MASK=" << shown(save) << " TRIDENT_ATTN_MASK_AHEAD=" << shown(ahead)
                    << " was taken";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  refused("yes", nullptr, "TRIDENT_ATTN_SAVE_MASK=yes");
  refused(nullptr, "2", "TRIDENT_ATTN_MASK_AHEAD=2");
  refused("0", "1", "TRIDENT_ATTN_SAVE_MASK=0");
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (float p : {0.0f, 0.1f}) v.push_back({dt, p, p > 0 ? 2 : 0});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, Attention, ::testing::ValuesIn(cases()), [](const auto& info) {
  return std::string(dtype_name(info.param.dt)) + (info.param.p > 0 ? "_dropout" : "_nodrop");
});

}  // namespace
}  // namespace trident::test
