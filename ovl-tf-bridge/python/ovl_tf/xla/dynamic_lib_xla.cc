// The XLA side of the DynamicLib op: a tf2xla kernel that lowers DynamicLib to an XLA custom
// call, and the custom call target that runs the op's program through the bridge library.
//
// Compiled against TensorFlow's own headers (tf.sysconfig) by ovl_tf/_xla.py, not by cargo: the
// bridge itself builds without TensorFlow. The bridge's functions are handed over at load time
// (ovl_tf_xla_connect, called through ctypes), so this library links only TensorFlow.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tensorflow/compiler/tf2xla/type_util.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "xla/ffi/api/ffi.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/shape_util.h"

namespace xla::ffi {
// Exported by libtensorflow_cc (xla/ffi/ffi_api.h, not included: it clashes with api/ffi.h).
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi

namespace {

// The bridge's functions (ovl-tf-bridge/src/xla.rs in the repository documents them).
typedef int (*PrepareFn)(const uint8_t* program, size_t program_len, size_t n_in,
                         const int* dtypes, const uint32_t* ranks, const int64_t* dims,
                         uint64_t* key, uint8_t** text, size_t* text_len, char* error,
                         size_t error_len);
typedef void (*FreeFn)(uint8_t* text, size_t text_len);
typedef int (*OutputFn)(uint64_t key, const uint8_t* text, size_t text_len, size_t k,
                        int* dtype, uint32_t* rank, int64_t* dims, size_t dims_cap);
typedef int (*RunFn)(uint64_t key, const uint8_t* text, size_t text_len,
                     const void* const* inputs, void* const* outputs, char* error,
                     size_t error_len);

PrepareFn prepare_fn = nullptr;
FreeFn free_fn = nullptr;
OutputFn output_fn = nullptr;
RunFn run_fn = nullptr;

constexpr size_t kErrorLen = 4096;
constexpr size_t kMaxTensors = 64;

std::vector<int64_t> DescendingLayout(int64_t rank) {
  std::vector<int64_t> minor_to_major(rank);
  for (int64_t d = 0; d < rank; ++d) minor_to_major[d] = rank - 1 - d;
  return minor_to_major;
}

class DynamicLibXlaOp : public tensorflow::XlaOpKernel {
 public:
  explicit DynamicLibXlaOp(tensorflow::OpKernelConstruction* ctx) : XlaOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("program", &program_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("out_types", &out_types_));
  }

  void Compile(tensorflow::XlaOpKernelContext* ctx) override {
    const std::string node = "DynamicLib `" + name() + "`";
    OP_REQUIRES(ctx, prepare_fn != nullptr,
                absl::FailedPreconditionError(
                    node + ": the XLA kernel of ovl_tf is loaded but not connected to the bridge "
                           "library; load it with ovl_tf.enable_xla()"));
    OP_REQUIRES(ctx, ctx->num_inputs() <= static_cast<int>(kMaxTensors) &&
                         out_types_.size() <= kMaxTensors,
                absl::InvalidArgumentError(node + ": more than 64 inputs or outputs"));
    std::vector<xla::XlaOp> operands;
    std::vector<xla::Shape> operand_shapes;
    std::vector<int> dtypes;
    std::vector<uint32_t> ranks;
    std::vector<int64_t> dims;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      auto shape = ctx->InputXlaShape(i);
      OP_REQUIRES_OK(ctx, shape.status());
      OP_REQUIRES(ctx, shape->is_static(),
                  absl::InvalidArgumentError(
                      node + ": input " + std::to_string(i) +
                      " has a size XLA knows only at run time; ovl's XLA custom call needs "
                      "static shapes"));
      dtypes.push_back(static_cast<int>(ctx->input_type(i)));
      ranks.push_back(shape->dimensions().size());
      for (int64_t d : shape->dimensions()) dims.push_back(d);
      operands.push_back(ctx->Input(i));
      operand_shapes.push_back(xla::ShapeUtil::MakeShapeWithDenseLayout(
          shape->element_type(), shape->dimensions(), DescendingLayout(ranks.back())));
    }
    uint64_t key = 0;
    uint8_t* text = nullptr;
    size_t text_len = 0;
    std::vector<char> error(kErrorLen, 0);
    int rc = prepare_fn(reinterpret_cast<const uint8_t*>(program_.data()), program_.size(),
                        ranks.size(), dtypes.data(), ranks.data(), dims.data(), &key, &text,
                        &text_len, error.data(), error.size());
    OP_REQUIRES(ctx, rc == 0, absl::InvalidArgumentError(node + ": " + error.data()));
    // The bridge finds a prepared program by its key and its text (hexadecimal), both.
    const std::string hex(reinterpret_cast<const char*>(text), text_len);
    free_fn(text, text_len);
    const uint8_t* hex_data = reinterpret_cast<const uint8_t*>(hex.data());
    // The attributes of the typed FFI call, as an MLIR dictionary.
    std::string config = "{ovl_key = " + std::to_string(static_cast<int64_t>(key)) +
                         " : i64, ovl_program = \"" + hex + "\"}";
    std::vector<xla::Shape> out_shapes;
    for (size_t k = 0; k < out_types_.size(); ++k) {
      int dtype = 0;
      uint32_t rank = 0;
      int64_t out_dims[64];
      OP_REQUIRES(ctx,
                  output_fn(key, hex_data, hex.size(), k, &dtype, &rank, out_dims, 64) == 0 &&
                      dtype == static_cast<int>(out_types_[k]),
                  absl::InvalidArgumentError(
                      node + ": the attributes declare other outputs than the program makes "
                             "(output " + std::to_string(k) + ")"));
      xla::PrimitiveType type;
      OP_REQUIRES_OK(ctx, tensorflow::DataTypeToPrimitiveType(out_types_[k], &type));
      out_shapes.push_back(xla::ShapeUtil::MakeShapeWithDenseLayout(
          type, absl::Span<const int64_t>(out_dims, rank), DescendingLayout(rank)));
    }
    int dtype = 0;
    uint32_t rank = 0;
    int64_t out_dims[64];
    OP_REQUIRES(ctx,
                output_fn(key, hex_data, hex.size(), out_types_.size(), &dtype, &rank, out_dims,
                          64) != 0,
                absl::InvalidArgumentError(
                    node + ": the program makes more outputs than the attributes declare"));
    xla::Shape tuple = xla::ShapeUtil::MakeTupleShape(out_shapes);
    xla::XlaOp call = xla::CustomCallWithLayout(
        ctx->builder(), "ovl_dynamic_lib", operands, tuple, operand_shapes, config,
        /*has_side_effect=*/false, /*output_operand_aliasing=*/{}, /*literal=*/nullptr,
        xla::CustomCallSchedule::SCHEDULE_NONE,
        xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
    for (size_t k = 0; k < out_shapes.size(); ++k) {
      ctx->SetOutput(k, xla::GetTupleElement(call, k));
    }
  }

 private:
  std::string program_;
  std::vector<tensorflow::DataType> out_types_;
};

// Registered as the op's kernel on the XLA CPU compilation device directly, rather than through
// REGISTER_XLA_OP: TensorFlow copies REGISTER_XLA_OP registrations to the compilation devices
// once per process (at its first XLA compilation), which would miss a library loaded later.
REGISTER_KERNEL_BUILDER(Name("DynamicLib").Device(tensorflow::DEVICE_CPU_XLA_JIT),
                        DynamicLibXlaOp);

namespace ffi = xla::ffi;

// The custom call's handler: runs the prepared program on XLA's buffers.
ffi::Error OvlDynamicLib(int64_t key, std::string_view program, ffi::RemainingArgs args,
                         ffi::RemainingRets rets) {
  if (args.size() > kMaxTensors || rets.size() > kMaxTensors) {
    return ffi::Error::InvalidArgument("DynamicLib: more than 64 inputs or outputs");
  }
  const void* inputs[kMaxTensors];
  void* outputs[kMaxTensors];
  for (size_t i = 0; i < args.size(); ++i) {
    auto buffer = args.get<ffi::AnyBuffer>(i);
    if (buffer.has_error()) return buffer.error();
    inputs[i] = buffer->untyped_data();
  }
  for (size_t k = 0; k < rets.size(); ++k) {
    auto buffer = rets.get<ffi::AnyBuffer>(k);
    if (buffer.has_error()) return buffer.error();
    outputs[k] = (*buffer)->untyped_data();
  }
  char error[kErrorLen] = {0};
  int rc = run_fn(static_cast<uint64_t>(key), reinterpret_cast<const uint8_t*>(program.data()),
                  program.size(), inputs, outputs, error, sizeof(error));
  if (rc != 0) return ffi::Error::Internal(std::string(error, strnlen(error, sizeof(error))));
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(OvlDynamicLibHandler, OvlDynamicLib,
                              ffi::Ffi::Bind()
                                  .Attr<int64_t>("ovl_key")
                                  .Attr<std::string_view>("ovl_program")
                                  .RemainingArgs()
                                  .RemainingRets());

XLA_FFI_REGISTER_HANDLER(ffi::GetXlaFfiApi(), "ovl_dynamic_lib", "Host", OvlDynamicLibHandler);

}  // namespace

// Called once by ovl_tf (ctypes) with the bridge library's functions.
extern "C" __attribute__((visibility("default"))) void ovl_tf_xla_connect(void* prepare,
                                                                          void* free_text,
                                                                          void* output,
                                                                          void* run) {
  prepare_fn = reinterpret_cast<PrepareFn>(prepare);
  free_fn = reinterpret_cast<FreeFn>(free_text);
  output_fn = reinterpret_cast<OutputFn>(output);
  run_fn = reinterpret_cast<RunFn>(run);
}
