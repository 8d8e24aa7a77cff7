// The C++ kernel of ovl's PyTorch ops (`ovl.torch`), for the CPU and CUDA, compiled at run
// time against the installed torch's headers (ovl/_torch_cpp.py) and registered per op by
// `ovl_torch_register`: a boxed kernel that hands each input's data pointer, shape, dtype match
// and device to ovl's native module (`ovl_torch_run`, a C function of ovl._native, given as an
// address) and allocates the outputs (and, on CUDA, the scratch) with at::empty on the inputs'
// device when it asks. On CUDA the run is queued on torch's current stream of that device
// (read here, `OVL_TORCH_CUDA`: built where the CUDA runtime's headers are found), memory from
// torch's caching allocator, nothing synchronizing the host. No Python runs in a call.
// `ovl_torch_register_autograd` adds the op's autograd kernel: below autograd at once when no
// input needs a gradient, else a C++ autograd function whose backward calls the gradient
// program's op.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#ifdef OVL_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

// Mirrors `TorchInput` in ovl-py/src/torch.rs.
struct OvlTorchInput {
  const void* data;
  const int64_t* shape;
  size_t rank;
  int32_t dtype_ok;
  int32_t place;  // -1 CPU, a CUDA device ordinal, -2 another device
  const char* dtype_name;
  const char* device;
};

// Mirrors `TorchStream` in ovl-py/src/torch.rs.
struct OvlTorchStream {
  uintptr_t stream;
  int32_t known;
};

using AllocFn = void* (*)(void* ctx, size_t k, const int64_t* shape, size_t rank);
using RunFn = int32_t (*)(const void* kernel, const OvlTorchInput* inputs, size_t n,
                          const OvlTorchStream* stream, void* ctx, AllocFn alloc, char* message,
                          size_t message_len);

// torch's name of a dtype, as Python prints it.
const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    case at::kUInt16: return "torch.uint16";
    case at::kUInt32: return "torch.uint32";
    case at::kUInt64: return "torch.uint64";
    default: return "another dtype";
  }
}

bool parse_dtype(const std::string& name, at::ScalarType* out) {
  static const std::pair<const char*, at::ScalarType> table[] = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"int32", at::kInt},
      {"int64", at::kLong},    {"int16", at::kShort},    {"int8", at::kChar},
      {"uint8", at::kByte},    {"bool", at::kBool},      {"uint16", at::kUInt16},
      {"uint32", at::kUInt32}, {"uint64", at::kUInt64},
  };
  for (const auto& [n, t] : table) {
    if (name == n) {
      *out = t;
      return true;
    }
  }
  return false;
}

struct Outputs {
  const std::vector<at::ScalarType>* dtypes;
  c10::Device device;
  c10::SmallVector<at::Tensor, 4> tensors;
  at::Tensor scratch;  // a CUDA call's, freed (in stream order) when the call returns
};

// Called by ovl_torch_run per output, in order, and for a CUDA call's scratch (k = SIZE_MAX,
// shape[0] bytes); on the inputs' device; never lets an exception into Rust.
void* allocate(void* ctx, size_t k, const int64_t* shape, size_t rank) noexcept {
  auto* outs = static_cast<Outputs*>(ctx);
  try {
    const bool scratch = k == SIZE_MAX;
    at::Tensor t = at::empty(c10::IntArrayRef(shape, rank),
                             at::TensorOptions()
                                 .dtype(scratch ? at::kByte : (*outs->dtypes)[k])
                                 .device(outs->device));
    void* p = t.data_ptr();
    if (scratch) {
      outs->scratch = std::move(t);
    } else {
      outs->tensors.push_back(std::move(t));
    }
    return p ? p : reinterpret_cast<void*>(alignof(std::max_align_t));
  } catch (...) {
    return nullptr;
  }
}

// Where a tensor is, as OvlTorchInput::place says.
int32_t place_of(const at::Tensor& t) {
  if (t.device().is_cpu()) return -1;
  if (t.device().is_cuda()) return t.device().index();
  return -2;
}

// The current stream of CUDA device `index` (torch's, what its own ops run on).
OvlTorchStream current_stream(int32_t index) {
#ifdef OVL_TORCH_CUDA
  return {reinterpret_cast<uintptr_t>(c10::cuda::getCurrentCUDAStream(index).stream()), 1};
#else
  (void)index;
  return {0, 0};
#endif
}

class OvlKernel final : public c10::OperatorKernel {
 public:
  OvlKernel(const void* kernel, RunFn run, std::vector<at::ScalarType> in,
            std::vector<at::ScalarType> out)
      : kernel_(kernel), run_(run), in_(std::move(in)), out_(std::move(out)) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t n = in_.size();
    c10::SmallVector<at::Tensor, 8> held;
    c10::SmallVector<OvlTorchInput, 8> inputs;
    c10::SmallVector<std::string, 8> devices;
    devices.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      at::Tensor t = torch::jit::peek(*stack, k, n).toTensor();
      OvlTorchInput in{nullptr, t.sizes().data(), static_cast<size_t>(t.dim()),
                       t.scalar_type() == in_[k], place_of(t),
                       dtype_name(t.scalar_type()), "cpu"};
      if (in.place != -2 && in.dtype_ok) {
        if (!t.is_contiguous()) {
          t = t.contiguous();
        }
        if (reinterpret_cast<uintptr_t>(t.data_ptr()) % t.element_size() != 0) {
          t = t.clone(at::MemoryFormat::Contiguous);  // a fresh, aligned buffer
        }
        in.data = t.data_ptr();
        in.shape = t.sizes().data();
      }
      if (in.place != -1) {
        devices.push_back(t.device().str());
        in.device = devices.back().c_str();
      }
      held.push_back(std::move(t));
      inputs.push_back(in);
    }
    // A CUDA call runs on the first input's device (the others are checked to be there):
    // its current stream, outputs and scratch allocated there.
    const int32_t place = n > 0 ? inputs[0].place : -1;
    OvlTorchStream stream{0, 0};
    c10::Device device(c10::kCPU);
    std::optional<c10::DeviceGuard> guard;
    if (place >= 0) {
      device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(place));
      guard.emplace(device);
      stream = current_stream(place);
    }
    Outputs outs{&out_, device, {}, {}};
    char message[2048] = {0};
    const int32_t rc = run_(kernel_, inputs.data(), n, &stream, &outs, &allocate, message,
                            sizeof(message));
    switch (rc) {
      case 0: break;
      case 1: TORCH_CHECK_TYPE(false, message);
      case 2: TORCH_CHECK_VALUE(false, message);
      case 4: TORCH_CHECK_WITH(OutOfMemoryError, false, message);
      default: TORCH_CHECK(false, message);
    }
    torch::jit::drop(*stack, n);
    for (auto& t : outs.tensors) {
      torch::jit::push(*stack, std::move(t));
    }
  }

 private:
  const void* kernel_;
  RunFn run_;
  std::vector<at::ScalarType> in_;
  std::vector<at::ScalarType> out_;
};

std::vector<std::unique_ptr<torch::Library>>& libraries() {
  static auto* libs = new std::vector<std::unique_ptr<torch::Library>>();
  return *libs;
}

bool dtypes(const char* list, std::vector<at::ScalarType>* out) {
  std::string s(list);
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    at::ScalarType t;
    if (!parse_dtype(s.substr(start, end - start), &t)) return false;
    out->push_back(t);
    start = end + 1;
  }
  return true;
}

// What an op's autograd kernel needs: the op, its gradient op (if any), which inputs are
// floating point (the others get no gradient), and the message of a missing gradient.
struct AutogradInfo {
  c10::OperatorHandle op;
  std::optional<c10::OperatorHandle> gradient;
  std::vector<bool> floating;
  std::vector<bool> output_floating;
  std::string no_gradient;
};

// The autograd function of a call that needs gradients: forward runs the op below autograd
// and saves the inputs; backward runs the gradient op on the inputs and the outputs' gradients.
struct OvlFunction : public torch::autograd::Function<OvlFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs,
                                                const AutogradInfo* info) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["info"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(info));
    torch::jit::Stack stack(inputs.begin(), inputs.end());
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      info->op.callBoxed(&stack);
    }
    torch::autograd::variable_list outs;
    outs.reserve(stack.size());
    for (auto& v : stack) outs.push_back(v.toTensor());
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!info->output_floating[k]) ctx->mark_non_differentiable({outs[k]});
    }
    return outs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* info = reinterpret_cast<const AutogradInfo*>(
        static_cast<intptr_t>(ctx->saved_data["info"].toInt()));
    TORCH_CHECK(info->gradient.has_value(), info->no_gradient);
    auto inputs = ctx->get_saved_variables();
    torch::jit::Stack stack(inputs.begin(), inputs.end());
    for (auto& g : grads) stack.emplace_back(g);
    info->gradient->callBoxed(&stack);
    torch::autograd::variable_list out;
    out.reserve(inputs.size() + 1);
    for (size_t k = 0; k < inputs.size(); ++k) {
      out.push_back(info->floating[k] ? stack[k].toTensor() : at::Tensor());
    }
    out.emplace_back();  // the `info` argument
    return out;
  }
};

class OvlAutogradKernel final : public c10::OperatorKernel {
 public:
  explicit OvlAutogradKernel(std::unique_ptr<AutogradInfo> info) : info_(std::move(info)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const size_t n = info_->floating.size();
    bool needed = false;
    if (c10::GradMode::is_enabled()) {
      for (size_t k = 0; k < n && !needed; ++k) {
        needed = torch::jit::peek(*stack, k, n).toTensor().requires_grad();
      }
    }
    if (!needed) {
      at::AutoDispatchBelowADInplaceOrView guard;
      op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
      return;
    }
    std::vector<at::Tensor> inputs;
    inputs.reserve(n);
    for (size_t k = 0; k < n; ++k) inputs.push_back(torch::jit::peek(*stack, k, n).toTensor());
    torch::jit::drop(*stack, n);
    auto outs = OvlFunction::apply(at::TensorList(inputs), info_.get());
    for (auto& t : outs) torch::jit::push(*stack, std::move(t));
  }

 private:
  std::unique_ptr<AutogradInfo> info_;
};

std::vector<bool> mask(const char* text) {
  std::vector<bool> out;
  for (const char* c = text; *c; ++c) out.push_back(*c == '1');
  return out;
}

}  // namespace

// Registers the autograd kernel of `ns::name`: `gradient` names its gradient op (in `ns`), or
// is empty when there is none (then backward raises `no_gradient`); `floating` and
// `output_floating` hold a '1' per floating-point input and output. 0 on success, else 1 with
// `error` filled.
extern "C" int ovl_torch_register_autograd(const char* ns, const char* name,
                                           const char* gradient, const char* floating,
                                           const char* output_floating,
                                           const char* no_gradient, char* error,
                                           size_t error_len) {
  try {
    auto& dispatcher = c10::Dispatcher::singleton();
    const std::string prefix = std::string(ns) + "::";
    auto info = std::unique_ptr<AutogradInfo>(new AutogradInfo{
        dispatcher.findSchemaOrThrow((prefix + name).c_str(), ""), std::nullopt,
        mask(floating), mask(output_floating), no_gradient});
    if (gradient && *gradient) {
      info->gradient = dispatcher.findSchemaOrThrow((prefix + gradient).c_str(), "");
    }
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns,
                                                c10::DispatchKey::Autograd, __FILE__, __LINE__);
    lib->impl(name, torch::CppFunction::makeFromBoxedFunctor(
                        std::make_unique<OvlAutogradKernel>(std::move(info))));
    libraries().push_back(std::move(lib));
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_len, "%s", e.what());
    return 1;
  }
}

// Registers the kernel of op `ns::name` for `dispatch_key` ("CPU", "CUDA"): `kernel` is the
// address of the native module's TorchKernel, `run` of its `ovl_torch_run`; the dtypes are
// comma-separated NumPy names. 0 on success, else 1 with `error` filled.
extern "C" int ovl_torch_register(const char* ns, const char* name, const char* dispatch_key,
                                  const void* kernel, const void* run, const char* in_dtypes,
                                  const char* out_dtypes, char* error, size_t error_len) {
  try {
    std::vector<at::ScalarType> in, out;
    if (!dtypes(in_dtypes, &in) || !dtypes(out_dtypes, &out)) {
      std::snprintf(error, error_len, "unknown dtype in '%s' -> '%s'", in_dtypes, out_dtypes);
      return 1;
    }
    const c10::DispatchKey key = c10::parseDispatchKey(dispatch_key);
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, key, __FILE__,
                                                __LINE__);
    lib->impl(name, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<OvlKernel>(
                        kernel, reinterpret_cast<RunFn>(const_cast<void*>(run)),
                        std::move(in), std::move(out))));
    libraries().push_back(std::move(lib));
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_len, "%s", e.what());
    return 1;
  }
}
