// An in-memory adapter for the scheme tests: no weights are needed to
// decide who shares what.
#pragma once

#include <string>
#include <vector>

#include "adapter/adapter.h"

namespace agentkv::test_support {

inline Adapter make_adapter(AdapterKind kind, std::vector<int32_t> invocation = {}) {
  Adapter a;
  // From std::string, not a literal: g++ 12 warns falsely (-Wrestrict) on
  // assigning short literals to members of an inlined Adapter.
  a.name = std::string("x");
  a.id = std::string("id-x");
  a.kind = kind;
  a.invocation_tokens = std::move(invocation);
  return a;
}

}  // namespace agentkv::test_support
