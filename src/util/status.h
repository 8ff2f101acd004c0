// The error type is public (agentkv/status.h); the macros that propagate it
// are the engine's own.
#pragma once

#include "agentkv/status.h"

#define AKV_CONCAT_INNER(a, b) a##b
#define AKV_CONCAT(a, b) AKV_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` failed.
#define AKV_RETURN_IF_ERROR(expr)                \
  do {                                           \
    ::agentkv::Status _akv_st = (expr);          \
    if (!_akv_st.is_ok()) return _akv_st;        \
  } while (0)

// AKV_ASSIGN_OR_RETURN(auto x, f()) : x = f().value(), or return its Status.
#define AKV_ASSIGN_OR_RETURN(lhs, expr) \
  AKV_ASSIGN_OR_RETURN_IMPL(AKV_CONCAT(_akv_res_, __LINE__), lhs, expr)
#define AKV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.is_ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
