// Reading the optional fields of a request's JSON object, each check's failure an ApiError
// with the caller's message (text_generation_request.cpp, completions_request.cpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "infer/text_generation_request.h"

namespace trident::json_fields {

using nlohmann::json;

// `text` as a JSON object; ApiError when it is not one.
inline json parse_object(const std::string& text) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::exception& e) {
    throw ApiError(std::string("the request body is not JSON: ") + e.what());
  }
  if (!body.is_object()) throw ApiError("the request body is not a JSON object");
  return body;
}

// The field `key` of `body`, or null when absent.
inline const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() ? nullptr : &*it;
}

inline bool boolean(const json& body, const char* key, bool fallback, const std::string& type_error) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) throw ApiError(type_error);
  return v->get<bool>();
}

// A number field (an integer or not); `type_error` when it is not a number.
inline double number(const json& body, const char* key, double fallback, const std::string& type_error) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number()) throw ApiError(type_error);
  return v->get<double>();
}

// Whether `v` is a JSON integer that fits int64.
inline bool is_int64(const json& v) {
  return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX);
}

// An integer field; `type_error` when it is not a JSON integer (5.0 included).
inline std::optional<int64_t> integer(const json& body, const char* key, const std::string& type_error) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!is_int64(*v)) throw ApiError(type_error);
  return v->get<int64_t>();
}

}  // namespace trident::json_fields
