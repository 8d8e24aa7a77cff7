#pragma once
#include <cstddef>
#include <cstdint>
namespace highwayhash {
template <unsigned Target> class HighwayHashCatT {
 public:
  HighwayHashCatT() = default;
 private:
  alignas(32) unsigned char state_[256];
};
}
