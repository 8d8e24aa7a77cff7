// The C++ CPU kernel of DynamicLib: TensorFlow's buffers and dimensions handed to the bridge
// library (ovl-tf-bridge/src/cc_kernel.rs) without the C API's tensor wrappers, and a cheap
// program reported as cheap to TensorFlow's executor (IsExpensive).
//
// ovl_tf compiles this file against TensorFlow's own headers (tf.sysconfig) into the operator
// cache and loads it after the bridge library, which registered the op and its C-API kernel;
// this kernel is registered at a higher priority, so TensorFlow picks it for every DynamicLib
// node constructed after the load. The bridge's entry points are handed over by
// ovl_tf_kernel_connect (called through ctypes), so this library links only TensorFlow.

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace {

// ovl-tf-bridge/src/compute.rs: RawInput.
struct OvlInput {
  const void* data;
  const int64_t* dims;
  int rank;
  int dtype;
};

using AllocateFn = int (*)(void* ctx, int k, const int64_t* dims, int rank, void** data);
using NewFn = void* (*)(const uint8_t* node_def, size_t len, int* expensive, int* code,
                        char* error, size_t error_len);
using ComputeFn = int (*)(const void* kernel, const OvlInput* inputs, int n_in, int n_out,
                          AllocateFn allocate, void* ctx, char* error, size_t error_len);
using DeleteFn = void (*)(void* kernel);

std::atomic<NewFn> g_new{nullptr};
std::atomic<ComputeFn> g_compute{nullptr};
std::atomic<DeleteFn> g_delete{nullptr};

constexpr size_t kErrorLen = 4096;

absl::Status Failure(int code, const char* message) {
  auto c = static_cast<absl::StatusCode>(code);
  if (code <= 0 || code > 16) c = absl::StatusCode::kInternal;
  return absl::Status(c, message);
}

class DynamicLibOp : public tensorflow::OpKernel {
 public:
  explicit DynamicLibOp(tensorflow::OpKernelConstruction* ctx) : tensorflow::OpKernel(ctx) {
    NewFn make = g_new.load();
    compute_ = g_compute.load();
    delete_ = g_delete.load();
    if (make == nullptr || compute_ == nullptr || delete_ == nullptr) {
      ctx->CtxFailure(absl::FailedPreconditionError(
          "DynamicLib `" + name() +
          "`: the C++ kernel of ovl_tf is loaded but not connected to the bridge library "
          "(load it through ovl_tf.load_library)"));
      return;
    }
    std::string bytes;
    def().SerializeToString(&bytes);
    int expensive = 1;
    int code = 0;
    char error[kErrorLen];
    error[0] = 0;
    kernel_ = make(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &expensive,
                   &code, error, sizeof error);
    if (kernel_ == nullptr) {
      ctx->CtxFailure(Failure(code, error));
      return;
    }
    cheap_ = expensive == 0;
  }

  ~DynamicLibOp() override {
    if (kernel_ != nullptr) delete_(kernel_);
  }

  bool IsExpensive() override { return !cheap_; }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const int n = ctx->num_inputs();
    absl::InlinedVector<OvlInput, 8> inputs(n);
    absl::InlinedVector<int64_t, 32> dims;
    int total = 0;
    for (int k = 0; k < n; ++k) total += ctx->input(k).dims();
    dims.resize(total);
    int at = 0;
    for (int k = 0; k < n; ++k) {
      const tensorflow::Tensor& t = ctx->input(k);
      const int rank = t.dims();
      for (int d = 0; d < rank; ++d) dims[at + d] = t.dim_size(d);
      inputs[k] = OvlInput{t.data(), dims.data() + at, rank, static_cast<int>(t.dtype())};
      at += rank;
    }
    char error[kErrorLen];
    error[0] = 0;
    const int code = compute_(kernel_, inputs.data(), n, ctx->num_outputs(), &Allocate, ctx,
                              error, sizeof error);
    // An allocation TensorFlow refused has set the context's status already.
    if (code != 0 && ctx->status().ok()) ctx->CtxFailure(Failure(code, error));
  }

 private:
  static int Allocate(void* c, int k, const int64_t* dims, int rank, void** data) {
    auto* ctx = static_cast<tensorflow::OpKernelContext*>(c);
    tensorflow::TensorShape shape;
    absl::Status s = tensorflow::TensorShapeUtils::MakeShape(dims, rank, &shape);
    tensorflow::Tensor* out = nullptr;
    if (s.ok()) s = ctx->allocate_output(k, shape, &out);
    if (!s.ok()) {
      ctx->CtxFailure(s);
      return 1;
    }
    *data = out->data();
    return 0;
  }

  void* kernel_ = nullptr;
  bool cheap_ = false;
  ComputeFn compute_ = nullptr;
  DeleteFn delete_ = nullptr;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("DynamicLib").Device(tensorflow::DEVICE_CPU).Priority(1),
                        DynamicLibOp);

extern "C" __attribute__((visibility("default"))) void ovl_tf_kernel_connect(void* make,
                                                                             void* compute,
                                                                             void* free) {
  g_compute.store(reinterpret_cast<ComputeFn>(compute));
  g_delete.store(reinterpret_cast<DeleteFn>(free));
  g_new.store(reinterpret_cast<NewFn>(make));
}
