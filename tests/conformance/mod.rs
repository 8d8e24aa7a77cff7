//! The conformance suite: one definition, instantiated per backend by
//! [`conformance_suite!`] (see `conformance_interpreter.rs`, `conformance_cpu.rs`).
//! Expected values come from independent Rust computations, never from another backend.

#![allow(dead_code)]

pub mod arithmetic;
pub mod casts;
pub mod control;
pub mod math;
pub mod paper;
pub mod random;
pub mod support;

/// Instantiates every conformance test for the backend selected by `$options`.
#[macro_export]
macro_rules! conformance_suite {
    ($options:expr) => {
        $crate::conformance_suite!(@tests $options;
            arithmetic_f32 => $crate::conformance::arithmetic::check::<f32>,
            arithmetic_f64 => $crate::conformance::arithmetic::check::<f64>,
            arithmetic_f16 => $crate::conformance::arithmetic::check::<ovl::half::f16>,
            arithmetic_bf16 => $crate::conformance::arithmetic::check::<ovl::half::bf16>,
            arithmetic_i8 => $crate::conformance::arithmetic::check::<i8>,
            arithmetic_i16 => $crate::conformance::arithmetic::check::<i16>,
            arithmetic_i32 => $crate::conformance::arithmetic::check::<i32>,
            arithmetic_i64 => $crate::conformance::arithmetic::check::<i64>,
            arithmetic_u8 => $crate::conformance::arithmetic::check::<u8>,
            arithmetic_u16 => $crate::conformance::arithmetic::check::<u16>,
            arithmetic_u32 => $crate::conformance::arithmetic::check::<u32>,
            arithmetic_u64 => $crate::conformance::arithmetic::check::<u64>,
            literal_coercion => $crate::conformance::arithmetic::literals,
            casts_from_f32 => $crate::conformance::casts::check::<f32>,
            casts_from_f64 => $crate::conformance::casts::check::<f64>,
            casts_from_f16 => $crate::conformance::casts::check::<ovl::half::f16>,
            casts_from_bf16 => $crate::conformance::casts::check::<ovl::half::bf16>,
            casts_to_halves => $crate::conformance::casts::to_halves,
            casts_from_i8 => $crate::conformance::casts::check::<i8>,
            casts_from_i16 => $crate::conformance::casts::check::<i16>,
            casts_from_i32 => $crate::conformance::casts::check::<i32>,
            casts_from_i64 => $crate::conformance::casts::check::<i64>,
            casts_from_u8 => $crate::conformance::casts::check::<u8>,
            casts_from_u16 => $crate::conformance::casts::check::<u16>,
            casts_from_u32 => $crate::conformance::casts::check::<u32>,
            casts_from_u64 => $crate::conformance::casts::check::<u64>,
            casts_from_bool => $crate::conformance::casts::check_bool,
            casts_saturate => $crate::conformance::casts::float_limits,
            math_unary_f32 => $crate::conformance::math::unary_f32,
            math_unary_f64 => $crate::conformance::math::unary_f64,
            math_binary_f32 => $crate::conformance::math::binary_f32,
            math_binary_f64 => $crate::conformance::math::binary_f64,
            math_limits => $crate::conformance::math::limit_constants,
            compare_f32 => $crate::conformance::control::comparisons::<f32>,
            compare_f64 => $crate::conformance::control::comparisons::<f64>,
            compare_f16 => $crate::conformance::control::comparisons::<ovl::half::f16>,
            compare_bf16 => $crate::conformance::control::comparisons::<ovl::half::bf16>,
            compare_i8 => $crate::conformance::control::comparisons::<i8>,
            compare_i64 => $crate::conformance::control::comparisons::<i64>,
            compare_u8 => $crate::conformance::control::comparisons::<u8>,
            compare_u64 => $crate::conformance::control::comparisons::<u64>,
            bool_logic => $crate::conformance::control::bool_logic,
            if_else_chain => $crate::conformance::control::if_else_chain,
            staged_for_cumsum_cumprod => $crate::conformance::control::cumsum_and_cumprod,
            staged_for_forms => $crate::conformance::control::loop_forms,
            staged_while => $crate::conformance::control::while_loop,
            trace_time_control => $crate::conformance::control::trace_time_control,
            local_tensors => $crate::conformance::control::local_tensors,
            multi_dim_workgroup => $crate::conformance::control::multi_dim_workgroup,
            data_dependent_index => $crate::conformance::control::data_dependent_index,
            out_of_bounds_error => $crate::conformance::control::out_of_bounds_is_an_error,
            helpers_and_constants => $crate::conformance::control::helpers_and_constants,
            chained_operators => $crate::conformance::control::chained_operators,
            paper_log1p_expm1 => $crate::conformance::paper::log1p_and_expm1,
            paper_triangle_counting => $crate::conformance::paper::triangle_counting,
            paper_convolution_1d => $crate::conformance::paper::convolution_1d,
            bitwise_i8 => $crate::conformance::random::bitwise::<i8>,
            bitwise_i16 => $crate::conformance::random::bitwise::<i16>,
            bitwise_i32 => $crate::conformance::random::bitwise::<i32>,
            bitwise_i64 => $crate::conformance::random::bitwise::<i64>,
            bitwise_u8 => $crate::conformance::random::bitwise::<u8>,
            bitwise_u16 => $crate::conformance::random::bitwise::<u16>,
            bitwise_u32 => $crate::conformance::random::bitwise::<u32>,
            bitwise_u64 => $crate::conformance::random::bitwise::<u64>,
            philox_known_answers => $crate::conformance::random::philox_known_answers,
            random_streams => $crate::conformance::random::streams
        );
    };
    (@tests $options:expr; $($name:ident => $check:path),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $check(&$options);
            }
        )*
    };
}
