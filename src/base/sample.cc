#include "wds/base/sample.h"

#include <algorithm>

#include "base/value_kind.h"
#include "wds/internal/base/strings.h"

namespace wds {

const Value* Sample::Find(std::string_view name) const {
  for (const Field& f : fields_) {
    if (f.first == name) return &f.second;
  }
  return nullptr;
}

Value* Sample::Find(std::string_view name) {
  return const_cast<Value*>(static_cast<const Sample*>(this)->Find(name));
}

const Buffer* Sample::GetBytes(std::string_view name) const {
  const Value* v = Find(name);
  return v == nullptr ? nullptr : std::get_if<Buffer>(v);
}

const std::string* Sample::GetString(std::string_view name) const {
  const Value* v = Find(name);
  return v == nullptr ? nullptr : std::get_if<std::string>(v);
}

const Array* Sample::GetArray(std::string_view name) const {
  const Value* v = Find(name);
  return v == nullptr ? nullptr : std::get_if<Array>(v);
}

std::optional<int64_t> Sample::GetInt(std::string_view name) const {
  const Value* v = Find(name);
  if (v == nullptr) return std::nullopt;
  if (const int64_t* i = std::get_if<int64_t>(v)) return *i;
  return std::nullopt;
}

void Sample::Set(std::string name, Value value) {
  if (Value* v = Find(name)) {
    *v = std::move(value);
  } else {
    fields_.emplace_back(std::move(name), std::move(value));
  }
}

bool Sample::Erase(std::string_view name) {
  auto it =
      std::find_if(fields_.begin(), fields_.end(), [&](const Field& f) { return f.first == name; });
  if (it == fields_.end()) return false;
  fields_.erase(it);
  return true;
}

std::string_view Sample::key() const {
  const std::string* s = GetString(kKeyField);
  return s == nullptr ? std::string_view() : std::string_view(*s);
}

std::string_view Sample::url() const {
  const std::string* s = GetString(kUrlField);
  return s == nullptr ? std::string_view() : std::string_view(*s);
}

std::string_view ValueKindName(const Value& value) {
  struct Namer {
    std::string_view operator()(const Buffer&) const { return "bytes"; }
    std::string_view operator()(const std::string&) const { return "text"; }
    std::string_view operator()(int64_t) const { return "an integer"; }
    std::string_view operator()(double) const { return "a float"; }
    std::string_view operator()(const Array&) const { return "an array"; }
    std::string_view operator()(const TextList&) const { return "a list of texts"; }
    std::string_view operator()(const BytesList&) const { return "a list of bytes"; }
    std::string_view operator()(const ObjectRef&) const { return "an object"; }
  };
  return std::visit(Namer{}, value);
}

bool IsMetadataField(std::string_view name) {
  return name.size() >= 4 && StartsWith(name, "__") && EndsWith(name, "__");
}

}  // namespace wds
