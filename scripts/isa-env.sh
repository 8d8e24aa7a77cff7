# Sourced by the benchmark scripts: `source scripts/isa-env.sh avx2|native` holds ovl and its
# peers to one instruction set (issue 51). With `avx2`: ovl through OVL_CPU_ISA=avx2 (its
# run-time dispatch and the C++ compiler's target, see ovl_ir::isa), XLA (JAX, TensorFlow's
# XLA) through --xla_cpu_max_isa=AVX2, oneDNN (TensorFlow, PyTorch) through
# ONEDNN_MAX_CPU_ISA=AVX2, PyTorch's own kernels through ATEN_CPU_CAPABILITY=avx2, and NumPy's
# OpenBLAS through NUMPY_ISA_ENV (OPENBLAS_CORETYPE=Haswell, for `env` in the NumPy command
# alone). Sets ISA_SUFFIX ("-avx2" or "") for the output directories.
case "${1:-native}" in
    avx2)
        export OVL_CPU_ISA=avx2
        export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_cpu_max_isa=AVX2"
        export ONEDNN_MAX_CPU_ISA=AVX2
        export ATEN_CPU_CAPABILITY=avx2
        NUMPY_ISA_ENV="OPENBLAS_CORETYPE=Haswell"
        ISA_SUFFIX="-avx2"
        ;;
    native)
        unset OVL_CPU_ISA
        NUMPY_ISA_ENV=""
        ISA_SUFFIX=""
        ;;
    *)
        echo "unknown instruction set '$1': avx2 or native" >&2
        exit 2
        ;;
esac
