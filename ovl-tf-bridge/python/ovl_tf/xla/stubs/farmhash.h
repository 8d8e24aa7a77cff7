#pragma once
// Stub declarations: TensorFlow's pip package lacks farmhash.h; tsl/platform/fingerprint.h
// calls these from inline functions ovl never calls.
#include <cstddef>
#include <cstdint>
#include "absl/numeric/int128.h"
namespace farmhash {
uint64_t Fingerprint64(const char* s, size_t len);
uint32_t Fingerprint32(const char* s, size_t len);
absl::uint128 Fingerprint128(const char* s, size_t len);
}
namespace util {
uint64_t Fingerprint64(const char* s, size_t len);
uint32_t Fingerprint32(const char* s, size_t len);
absl::uint128 Fingerprint128(const char* s, size_t len);
inline uint64_t Uint128Low64(absl::uint128 x) { return absl::Uint128Low64(x); }
inline uint64_t Uint128High64(absl::uint128 x) { return absl::Uint128High64(x); }
}
