// Agent sessions through the serving engine: when a session request's last
// event arrives, the engine's stats already show its blocks protected (a
// client scraping /metrics right after its answer saw the old count before
// the engine published stats ahead of the last event).
// Skipped when the model file is absent (failed under CI).
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "../ci_required.h"
#include "agentkv/serving.h"
#include "runtime/engine_client.h"
#include "serving_util.h"

namespace agentkv {
namespace {

using namespace agentkv::testing;

TEST(Sessions, StatsShowTheProtectionWhenTheAnswerArrives) {
  AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  ServingOptions o;
  o.model_path = model_path();
  o.n_threads = 2;
  o.block_size = 16;
  o.kv_cache_mb = 64;
  o.max_model_len = 512;
  auto eng = create_serving_engine(o);
  ASSERT_TRUE(eng.is_ok()) << eng.status().message();
  // 12 sessions of 5 blocks: within the default share (half of 64 MB of blocks).
  for (int turn = 0; turn < 12; ++turn) {  // a race shows in some turns, not all
    ServeRequest r;
    r.prompt = doc(100 + turn, 80);
    r.max_tokens = 2;
    r.sampling.temperature = 0;
    r.session_id = "agent-" + std::to_string(turn);
    r.session_retention_s = 60;
    Result<ServeEvent> last = serve_one(**eng, std::move(r));
    ASSERT_TRUE(last.is_ok()) << last.status().message();
    const ServingStats st = (*eng)->stats();
    EXPECT_EQ(st.live_sessions, turn + 1) << "turn " << turn;
    EXPECT_GE(st.protected_blocks, (turn + 1) * (80 / 16)) << "turn " << turn;
  }
}

}  // namespace
}  // namespace agentkv
