#pragma once
#include <cstdint>
namespace highwayhash { using HHResult64 = uint64_t; using HHKey = uint64_t[4]; }
