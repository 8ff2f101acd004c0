// The lineage and weight rules of the exact schemes (docs/design.md §2), on
// in-memory adapters: no weights are needed to decide who shares what.
#include "sharing/scheme.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "unit/sharing/test_adapter.h"

namespace agentkv {
namespace {

using test_support::make_adapter;

SeqSharing plan(const char* scheme, const Adapter* a, const std::vector<int32_t>& prompt) {
  const SharingScheme* s = sharing_scheme_get(scheme);
  EXPECT_NE(s, nullptr);
  Result<SeqSharing> r = s->plan(a, prompt);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return *r;
}

TEST(SharingScheme, UnknownNameIsNull) {
  EXPECT_EQ(sharing_scheme_get("fullshared"), nullptr);
  EXPECT_EQ(sharing_scheme_get(""), nullptr);
  EXPECT_EQ(sharing_scheme_names().size(), 12u);
}

TEST(SharingScheme, BaseIsBaseUnderEveryScheme) {
  for (const char* name : sharing_scheme_names()) {
    SeqSharing s = plan(name, nullptr, {1, 2, 3});
    EXPECT_EQ(s.weights_from, kNever) << name;
    EXPECT_EQ(s.lineage_from, kNever) << name;
    EXPECT_FALSE(s.decoder_row) << name;
  }
}

TEST(SharingScheme, NoneGivesEveryAdapterItsOwnLineage) {
  Adapter lora = make_adapter(AdapterKind::kLora);
  Adapter alora = make_adapter(AdapterKind::kAlora, {7, 8});
  Adapter icarus = make_adapter(AdapterKind::kIcarus);
  const std::vector<int32_t> prompt = {1, 2, 7, 8, 3, 7, 8, 4};
  SeqSharing s = plan("none", &lora, prompt);
  EXPECT_EQ(s.weights_from, 0);
  EXPECT_EQ(s.lineage_from, 0);
  s = plan("none", &alora, prompt);
  EXPECT_EQ(s.weights_from, 5);  // the LAST occurrence of the invocation
  EXPECT_EQ(s.lineage_from, 0);
  s = plan("none", &icarus, prompt);
  EXPECT_EQ(s.weights_from, kNever);
  EXPECT_EQ(s.lineage_from, 0);
  EXPECT_TRUE(s.decoder_row);
}

TEST(SharingScheme, AloraSharesBeforeTheInvocationOnly) {
  Adapter alora = make_adapter(AdapterKind::kAlora, {7, 8});
  SeqSharing s = plan("alora", &alora, {1, 2, 3, 4, 5, 7, 8});
  EXPECT_STREQ(s.scheme, "alora");
  EXPECT_EQ(s.weights_from, 5);
  EXPECT_EQ(s.lineage_from, 5);
  // A plain LoRA gains nothing from the alora scheme.
  Adapter lora = make_adapter(AdapterKind::kLora);
  s = plan("alora", &lora, {1, 2, 3});
  EXPECT_STREQ(s.scheme, "none");
  EXPECT_EQ(s.lineage_from, 0);
}

TEST(SharingScheme, AloraWithoutInvocationIsAnError) {
  Adapter alora = make_adapter(AdapterKind::kAlora, {7, 8});
  for (const char* name : {"none", "alora"}) {
    Result<SeqSharing> r = sharing_scheme_get(name)->plan(&alora, std::vector<int32_t>{1, 7, 2, 8});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("invocation"), std::string::npos);
  }
}

TEST(SharingScheme, IcarusWritesOnlyBaseLineage) {
  Adapter icarus = make_adapter(AdapterKind::kIcarus);
  SeqSharing s = plan("icarus", &icarus, {1, 2, 3});
  EXPECT_STREQ(s.scheme, "icarus");
  EXPECT_EQ(s.weights_from, kNever);
  EXPECT_EQ(s.lineage_from, kNever);
  EXPECT_TRUE(s.decoder_row);
}

TEST(SharingScheme, FindLastOccurrence) {
  const std::vector<int32_t> hay = {1, 2, 1, 2, 1};
  EXPECT_EQ(find_last_occurrence(hay, std::vector<int32_t>{1, 2}), 2);
  EXPECT_EQ(find_last_occurrence(hay, std::vector<int32_t>{1}), 4);
  EXPECT_EQ(find_last_occurrence(hay, std::vector<int32_t>{2, 2}), -1);
  EXPECT_EQ(find_last_occurrence(hay, std::vector<int32_t>{}), -1);
  EXPECT_EQ(find_last_occurrence(std::vector<int32_t>{1}, std::vector<int32_t>{1, 1}), -1);
  EXPECT_EQ(find_last_occurrence(hay, hay), 0);
}

TEST(SharingRows, DenseChunkWithSampleHasLogitsOnTheLastRowOnly) {
  SeqSharing s;  // base
  std::vector<RowSpec> rows;
  sharing_rows(s, 4, 3, /*sample=*/true, &rows);
  ASSERT_EQ(rows.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i].index, 4 + i);
    EXPECT_FALSE(rows[i].adapter);
    EXPECT_TRUE(rows[i].write_kv);
    EXPECT_EQ(rows[i].logits, i == 2);
  }
  rows.clear();
  sharing_rows(s, 0, 2, /*sample=*/false, &rows);
  EXPECT_FALSE(rows[0].logits || rows[1].logits);
}

TEST(SharingRows, AloraSwitchesWeightsAtTheInvocation) {
  SeqSharing s;
  s.weights_from = 2;
  std::vector<RowSpec> rows;
  sharing_rows(s, 0, 4, true, &rows);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_FALSE(rows[1].adapter);
  EXPECT_TRUE(rows[2].adapter);
  EXPECT_TRUE(rows[3].adapter && rows[3].logits);
}

TEST(SharingRows, IcarusPairsEncoderAndDecoderRowsAtTheSampledPosition) {
  SeqSharing s;
  s.decoder_row = true;
  std::vector<RowSpec> rows;
  sharing_rows(s, 0, 3, true, &rows);
  ASSERT_EQ(rows.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(!rows[i].adapter && rows[i].write_kv && !rows[i].logits);
  EXPECT_EQ(rows[3].index, 2);
  EXPECT_TRUE(rows[3].adapter && !rows[3].write_kv && rows[3].logits);
  // A prefill chunk that does not reach the end has no decoder row.
  rows.clear();
  sharing_rows(s, 0, 3, false, &rows);
  EXPECT_EQ(rows.size(), 3u);
  // Decode: one token, the pair.
  rows.clear();
  sharing_rows(s, 9, 1, true, &rows);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].write_kv && !rows[0].logits && !rows[0].adapter);
  EXPECT_TRUE(!rows[1].write_kv && rows[1].logits && rows[1].adapter);
}

}  // namespace
}  // namespace agentkv
