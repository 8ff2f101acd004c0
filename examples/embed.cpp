// agentkv embedded in a program of one's own: the serving engine from the
// installed library (find_package(agentkv), agentkv::engine), a base model
// and two aLoRA adapters on it under one scheme, alora, in which each
// adapter reads the K/V the base wrote for the shared context. It checks
// what the scheme promises: the adapters' prompts are served from the base's
// cache (cached tokens), and their greedy answers are the same tokens as
// without any sharing. Exit status 0 when both hold.
//
//   embed MODEL.gguf ADAPTER_A ADAPTER_B [THREADS]
//
// The adapters are aLoRA directories whose invocation is " Answer:", e.g.
//   agentkv synth-adapter -m MODEL.gguf -o /tmp/a --seed 1 --alora-invocation " Answer:"
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/serving.h"
#include "agentkv/text.h"

namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text, scheme, error;
  int32_t prompt_tokens = 0, cached_tokens = 0;
  agentkv::ServeFinish finish = agentkv::ServeFinish::kNone;
};

// Submits one request and waits for its last event. The sink runs on the
// engine's thread: it only gathers.
Outcome run(agentkv::ServingEngine& engine, agentkv::ServeRequest req) {
  auto out = std::make_shared<Outcome>();
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  agentkv::Result<agentkv::ServeId> id = engine.submit(std::move(req), [out, done](agentkv::ServeEvent&& ev) {
    for (const agentkv::SampleResult& s : ev.samples) out->tokens.push_back(s.id);
    out->text += ev.text;
    if (ev.prompt_tokens > 0) {
      out->prompt_tokens = ev.prompt_tokens;
      out->cached_tokens = ev.cached_tokens;
      out->scheme = ev.kv_sharing;
    }
    if (ev.finish != agentkv::ServeFinish::kNone) {
      out->finish = ev.finish;
      out->error = ev.error;
      done->set_value();
    }
  });
  if (!id.is_ok()) {
    out->finish = agentkv::ServeFinish::kError;
    out->error = id.status().message();
    return *out;
  }
  finished.wait();
  return *out;
}

agentkv::ServeRequest greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  agentkv::ServeRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;  // the same length every time, to compare token for token
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf ADAPTER_A ADAPTER_B [THREADS]\n", argv[0]);
    return 2;
  }
  agentkv::ServingOptions opts;
  opts.model_path = argv[1];
  opts.n_threads = argc == 5 ? std::atoi(argv[4]) : 2;
  opts.kv_cache_mb = 64;
  opts.kv_sharing = "alora";  // the scheme every request runs unless it names another
  opts.adapters = {{"planner", argv[2], ""}, {"critic", argv[3], ""}};
  agentkv::Result<std::unique_ptr<agentkv::ServingEngine>> made = agentkv::create_serving_engine(opts);
  if (!made.is_ok()) {
    std::fprintf(stderr, "embed: %s\n", made.status().message().c_str());
    return 1;
  }
  agentkv::ServingEngine& engine = **made;
  for (const agentkv::ServedModel& m : engine.models())
    std::printf("model %-8s kind %s\n", m.name.empty() ? "(base)" : m.name.c_str(), m.kind.c_str());

  // The shared context, in the model's own chat template; the base reads it
  // first, then each adapter is invoked on it.
  agentkv::Result<std::vector<int32_t>> context = agentkv::encode_chat(
      engine, R"([{"role":"user","content":"Three agents share one growing context: a planner writes the )"
              R"(steps, a coder follows them, and a critic checks the result. Which agent checks the result?"}])");
  if (!context.is_ok()) {
    std::fprintf(stderr, "embed: %s\n", context.status().message().c_str());
    return 1;
  }
  const Outcome base = run(engine, greedy(*context, 8));
  if (base.finish == agentkv::ServeFinish::kError) {
    std::fprintf(stderr, "embed: base: %s\n", base.error.c_str());
    return 1;
  }
  std::printf("base    : %d prompt tokens, %d cached: %s\n", base.prompt_tokens, base.cached_tokens,
              base.text.c_str());

  std::vector<int32_t> invoked = *context;
  const std::vector<int32_t> invocation = agentkv::encode_text(engine, " Answer:", /*add_special=*/false);
  invoked.insert(invoked.end(), invocation.begin(), invocation.end());
  bool ok = true;
  for (const char* name : {"planner", "critic"}) {
    agentkv::ServeRequest shared = greedy(invoked, 8);
    shared.adapter = name;
    const Outcome got = run(engine, shared);
    // The same request with no sharing, in a cache namespace of its own.
    agentkv::ServeRequest alone = shared;
    alone.kv_sharing = "none";
    alone.cache_salt = std::string("alone-") + name;
    const Outcome ref = run(engine, alone);
    if (got.finish == agentkv::ServeFinish::kError || ref.finish == agentkv::ServeFinish::kError) {
      std::fprintf(stderr, "embed: %s: %s%s\n", name, got.error.c_str(), ref.error.c_str());
      return 1;
    }
    const bool same = got.tokens == ref.tokens;
    std::printf("%-8s: scheme %s, %d of %d prompt tokens from the base's cache, %s without sharing: %s\n", name,
                got.scheme.c_str(), got.cached_tokens, got.prompt_tokens, same ? "same tokens as" : "DIFFERENT from",
                got.text.c_str());
    ok = ok && same && got.scheme == "alora" && got.cached_tokens > 0 && ref.cached_tokens == 0;
  }
  engine.drain(10.0);
  std::printf("%s\n", ok ? "ok" : "FAILED: an adapter did not read the base's cache, or read it inexactly");
  return ok ? 0 : 1;
}
