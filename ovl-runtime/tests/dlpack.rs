//! DLPack import and export: round trips of every dtype, the producer's deleter called once,
//! legacy and versioned tensors, strides in place or copied, every refusal, and a compiled
//! program run on imported memory in place.

use ovl_ir::ir;
use ovl_ir::{DType, HostTensor};
use ovl_runtime::dlpack::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY, K_DL_BOOL, K_DL_CPU, K_DL_CUDA,
    K_DL_CUDA_HOST, K_DL_FLOAT, K_DL_INT,
};
use ovl_runtime::dlpack::{
    export_legacy, export_versioned, to_dl, Device, DlpackError, DlpackTensor,
};
use ovl_runtime::plan::{Input, Kernel, Output, Plan};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What a test producer hands over: its memory (8-byte aligned words), shape and strides,
/// and a count of its deleter's calls.
struct Held {
    _words: Vec<u64>,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    deleted: Arc<AtomicUsize>,
}

/// A hand-made producer's tensor, as NumPy or PyTorch would export it.
struct Spec {
    dtype: DLDataType,
    device: DLDevice,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    bytes: Vec<u8>,
    byte_offset: u64,
    null_data: bool,
    flags: u64,
    version: DLPackVersion,
    ndim: Option<i32>,
}

const CPU: DLDevice = DLDevice {
    device_type: K_DL_CPU,
    device_id: 0,
};

fn dl(code: u8, bits: u8) -> DLDataType {
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

impl Spec {
    /// A host tensor of `dtype` and `shape` (NULL strides) holding `bytes`.
    fn new(dtype: DLDataType, shape: &[i64], bytes: Vec<u8>) -> Spec {
        Spec {
            dtype,
            device: CPU,
            shape: shape.to_vec(),
            strides: None,
            bytes,
            byte_offset: 0,
            null_data: false,
            flags: 0,
            version: DLPackVersion { major: 1, minor: 0 },
            ndim: None,
        }
    }

    fn f32(shape: &[i64], values: &[f32]) -> Spec {
        Spec::new(
            dl(K_DL_FLOAT, 32),
            shape,
            values.iter().flat_map(|v| v.to_ne_bytes()).collect(),
        )
    }

    fn strides(mut self, strides: &[i64]) -> Spec {
        self.strides = Some(strides.to_vec());
        self
    }

    /// The DLTensor and what it points into, counting deletions in `deleted`.
    fn parts(self, deleted: &Arc<AtomicUsize>) -> (DLTensor, Box<Held>) {
        let mut words = vec![0u64; self.bytes.len().div_ceil(8).max(1)];
        // SAFETY: `words` has room for the bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.bytes.as_ptr(),
                words.as_mut_ptr().cast::<u8>(),
                self.bytes.len(),
            )
        };
        let mut held = Box::new(Held {
            _words: words,
            shape: self.shape,
            strides: self.strides,
            deleted: deleted.clone(),
        });
        let data = if self.null_data {
            std::ptr::null_mut()
        } else {
            held._words.as_mut_ptr().cast::<c_void>()
        };
        let tensor = DLTensor {
            data,
            device: self.device,
            ndim: self.ndim.unwrap_or(held.shape.len() as i32),
            dtype: self.dtype,
            shape: held.shape.as_mut_ptr(),
            strides: held
                .strides
                .as_mut()
                .map_or(std::ptr::null_mut(), |s| s.as_mut_ptr()),
            byte_offset: self.byte_offset,
        };
        (tensor, held)
    }

    /// A versioned managed tensor, and its deleter's count of calls.
    fn versioned(self) -> (*mut DLManagedTensorVersioned, Arc<AtomicUsize>) {
        let deleted = Arc::new(AtomicUsize::new(0));
        let (version, flags) = (self.version, self.flags);
        let (dl_tensor, held) = self.parts(&deleted);
        let managed = Box::new(DLManagedTensorVersioned {
            version,
            manager_ctx: Box::into_raw(held).cast(),
            deleter: Some(delete_versioned),
            flags,
            dl_tensor,
        });
        (Box::into_raw(managed), deleted)
    }

    /// A legacy managed tensor, and its deleter's count of calls.
    fn legacy(self) -> (*mut DLManagedTensor, Arc<AtomicUsize>) {
        let deleted = Arc::new(AtomicUsize::new(0));
        let (dl_tensor, held) = self.parts(&deleted);
        let managed = Box::new(DLManagedTensor {
            dl_tensor,
            manager_ctx: Box::into_raw(held).cast(),
            deleter: Some(delete_legacy),
        });
        (Box::into_raw(managed), deleted)
    }

    /// Imported as a versioned tensor (the count of deleter calls alongside).
    fn import(self) -> (Result<DlpackTensor, DlpackError>, Arc<AtomicUsize>) {
        let (p, deleted) = self.versioned();
        // SAFETY: a managed tensor just made, handed over once.
        (unsafe { DlpackTensor::from_versioned(p) }, deleted)
    }

    fn import_legacy(self) -> (Result<DlpackTensor, DlpackError>, Arc<AtomicUsize>) {
        let (p, deleted) = self.legacy();
        // SAFETY: a managed tensor just made, handed over once.
        (unsafe { DlpackTensor::from_legacy(p) }, deleted)
    }
}

unsafe extern "C" fn delete_versioned(p: *mut DLManagedTensorVersioned) {
    // SAFETY: made by `Spec::versioned`: both boxes leaked there.
    let (managed, held) = unsafe {
        let managed = Box::from_raw(p);
        let held = Box::from_raw(managed.manager_ctx.cast::<Held>());
        (managed, held)
    };
    held.deleted.fetch_add(1, Ordering::SeqCst);
    drop((managed, held));
}

unsafe extern "C" fn delete_legacy(p: *mut DLManagedTensor) {
    // SAFETY: made by `Spec::legacy`: both boxes leaked there.
    let (managed, held) = unsafe {
        let managed = Box::from_raw(p);
        let held = Box::from_raw(managed.manager_ctx.cast::<Held>());
        (managed, held)
    };
    held.deleted.fetch_add(1, Ordering::SeqCst);
    drop((managed, held));
}

/// A tensor of `dtype` with distinct, sign-mixed values.
fn sample(dtype: DType, shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let i = || (0..n).map(|k| k as i64 - 3);
    match dtype {
        DType::F32 => HostTensor::from_vec(shape, i().map(|k| k as f32 * 0.75).collect()),
        DType::F64 => HostTensor::from_vec(shape, i().map(|k| k as f64 * -1.5).collect()),
        DType::I8 => HostTensor::from_vec(shape, i().map(|k| k as i8).collect()),
        DType::I16 => HostTensor::from_vec(shape, i().map(|k| (k * 300) as i16).collect()),
        DType::I32 => HostTensor::from_vec(shape, i().map(|k| (k * 70000) as i32).collect()),
        DType::I64 => HostTensor::from_vec(shape, i().map(|k| k << 40).collect()),
        DType::U8 => HostTensor::from_vec(shape, i().map(|k| (k + 250) as u8).collect()),
        DType::U16 => HostTensor::from_vec(shape, i().map(|k| (k * 999) as u16).collect()),
        DType::U32 => HostTensor::from_vec(shape, i().map(|k| (k * 99999) as u32).collect()),
        DType::U64 => HostTensor::from_vec(shape, i().map(|k| (k as u64) << 50).collect()),
        DType::Bool => HostTensor::from_vec(shape, i().map(|k| k % 3 == 0).collect()),
        DType::F16 => HostTensor::from_vec(
            shape,
            i().map(|k| ovl_core::half::f16::from_f32(k as f32 * 0.375))
                .collect(),
        ),
        DType::BF16 => HostTensor::from_vec(
            shape,
            i().map(|k| ovl_core::half::bf16::from_f32(k as f32 * -2.5e30))
                .collect(),
        ),
    }
    .expect("the sample's length")
}

#[test]
fn every_dtype_round_trips_in_place_versioned_and_legacy() {
    for dtype in DType::ALL {
        for legacy in [false, true] {
            let original = sample(dtype, &[2, 3]);
            let data = original.data.as_ptr();
            let t = if legacy {
                // SAFETY: an export just made, handed over once.
                unsafe { DlpackTensor::from_legacy(export_legacy(original.clone())) }
            } else {
                // SAFETY: as above.
                unsafe { DlpackTensor::from_versioned(export_versioned(original.clone(), 0)) }
            }
            .unwrap_or_else(|e| panic!("{dtype}: {e}"));
            assert_eq!(t.is_versioned(), !legacy);
            assert_eq!(
                (t.dtype(), t.shape(), t.device()),
                (dtype, &[2, 3][..], Device::Cpu)
            );
            assert_eq!(
                t.strides(),
                Some(&[3, 1][..]),
                "ovl exports explicit strides"
            );
            assert!(t.is_contiguous() && !t.is_read_only());
            assert_eq!(t.to_host().unwrap(), original, "{dtype}");
            // The export is the clone's memory, not this one's, but has its values.
            assert_ne!(t.host_ptr().unwrap().cast::<u8>(), data);
        }
    }
}

#[test]
fn an_export_is_used_in_place() {
    let original = sample(DType::I32, &[4]);
    let data = original.data.as_ptr();
    let managed = export_versioned(original, DLPACK_FLAG_BITMASK_IS_COPIED);
    // SAFETY: an export just made; only read here, not through the DLPack tensor.
    let (version, flags, dl_tensor) =
        unsafe { ((*managed).version, (*managed).flags, (*managed).dl_tensor) };
    assert_eq!((version.major, version.minor), (1, 1));
    assert_eq!(flags, DLPACK_FLAG_BITMASK_IS_COPIED);
    assert_eq!(dl_tensor.dtype, to_dl(DType::I32));
    assert_eq!(dl_tensor.data.cast::<u8>().cast_const(), data, "no copy");
    // SAFETY: handed over once.
    let t = unsafe { DlpackTensor::from_versioned(managed) }.unwrap();
    assert!(t.is_copied());
    assert_eq!(t.host_ptr().unwrap().cast::<u8>(), data);
}

#[test]
fn bool_exports_as_kdlbool_of_8_bits_and_scalars_and_empties_round_trip() {
    let b = HostTensor::from_vec(&[3], vec![true, false, true]).unwrap();
    let managed = export_legacy(b.clone());
    // SAFETY: an export just made, read before it is handed over.
    let dtype = unsafe { (*managed).dl_tensor.dtype };
    assert_eq!((dtype.code, dtype.bits, dtype.lanes), (K_DL_BOOL, 8, 1));
    // SAFETY: handed over once.
    let t = unsafe { DlpackTensor::from_legacy(managed) }.unwrap();
    assert_eq!(t.to_host().unwrap(), b);

    for shape in [&[][..], &[0][..], &[2, 0, 3][..]] {
        let x = sample(DType::F64, shape);
        // SAFETY: an export just made, handed over once.
        let t = unsafe { DlpackTensor::from_versioned(export_versioned(x.clone(), 0)) }.unwrap();
        assert_eq!(t.shape(), shape);
        assert_eq!(t.to_host().unwrap(), x);
        assert!(!t.host_ptr().unwrap().is_null());
    }
}

#[test]
fn the_deleter_runs_once_on_drop_and_not_before() {
    let (t, deleted) = Spec::f32(&[2], &[1.0, 2.0]).import();
    let t = t.unwrap();
    assert_eq!(
        t.to_host().unwrap().as_slice::<f32>(),
        Some(&[1.0f32, 2.0][..])
    );
    let held = std::thread::spawn(move || {
        let _input = t.input().unwrap();
        assert_eq!(deleted.load(Ordering::SeqCst), 0, "not while held");
        drop(t); // on another thread: DlpackTensor is Send
        deleted
    })
    .join()
    .unwrap();
    assert_eq!(held.load(Ordering::SeqCst), 1);

    let (t, deleted) = Spec::f32(&[2], &[1.0, 2.0]).import_legacy();
    let t = t.unwrap();
    assert!(!t.is_versioned() && !t.is_read_only());
    assert_eq!(deleted.load(Ordering::SeqCst), 0);
    drop(t);
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
}

#[test]
fn a_refused_tensor_is_given_back_once() {
    // An 8-bit float: no ovl dtype.
    let mut f8 = Spec::f32(&[2], &[1.0, 2.0]);
    f8.dtype = dl(K_DL_FLOAT, 8);
    let (err, deleted) = f8.import();
    assert!(matches!(err, Err(DlpackError::UnsupportedDtype { .. })));
    assert_eq!(deleted.load(Ordering::SeqCst), 1);

    let mut f8 = Spec::f32(&[2], &[1.0, 2.0]);
    f8.dtype = dl(K_DL_FLOAT, 8);
    let (err, deleted) = f8.import_legacy();
    assert!(matches!(err, Err(DlpackError::UnsupportedDtype { .. })));
    assert_eq!(deleted.load(Ordering::SeqCst), 1);
}

#[test]
fn null_strides_are_row_major_in_place() {
    let values: Vec<u8> = (0..6i32).flat_map(|v| v.to_ne_bytes()).collect();
    let (t, _) = Spec::new(dl(K_DL_INT, 32), &[2, 3], values).import();
    let t = t.unwrap();
    assert_eq!(t.strides(), None);
    assert!(t.is_contiguous());
    t.host_ptr().unwrap();
    assert_eq!(
        t.to_host().unwrap(),
        HostTensor::from_vec(&[2, 3], (0..6).collect::<Vec<i32>>()).unwrap()
    );
}

#[test]
fn any_stride_of_a_unit_axis_is_in_place() {
    let values: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let (t, _) = Spec::f32(&[2, 1, 3], &values).strides(&[3, 99, 1]).import();
    let mut t = t.unwrap();
    assert!(t.is_contiguous());
    t.host_mut_ptr().unwrap();
    assert_eq!(t.to_host().unwrap().as_slice::<f32>(), Some(&values[..]));
}

#[test]
fn strides_are_copied_by_to_host_and_refused_in_place_naming_the_axis() {
    // A transposed 3x2 matrix: element (i, j) of the [2, 3] view is at i + 2j.
    let memory = [0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0];
    let (t, deleted) = Spec::f32(&[2, 3], &memory).strides(&[1, 2]).import();
    let mut t = t.unwrap();
    assert!(!t.is_contiguous());
    let err = t.host_ptr().unwrap_err();
    match &err {
        DlpackError::NotContiguous {
            axis,
            strides,
            stride,
            expected,
            ..
        } => assert_eq!(
            (*axis, &strides[..], *stride, *expected),
            (1, &[1, 2][..], 2, 1)
        ),
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("axis 1") && text.contains("[1, 2]"), "{text}");
    assert!(text.contains("to_host"), "{text}");
    assert!(matches!(t.input(), Err(DlpackError::NotContiguous { .. })));
    assert!(matches!(t.output(), Err(DlpackError::NotContiguous { .. })));
    let copy = t.to_host().unwrap();
    assert_eq!(copy.shape, [2, 3]);
    assert_eq!(
        copy.as_slice::<f32>(),
        Some(&[0.0f32, 2.0, 4.0, 1.0, 3.0, 5.0][..])
    );
    drop(t);
    assert_eq!(deleted.load(Ordering::SeqCst), 1);

    // Padded rows: axis 0's stride is 4, 3 expected.
    let (t, _) = Spec::f32(&[2, 3], &[0., 1., 2., 9., 4., 5., 6., 9.])
        .strides(&[4, 1])
        .import();
    let t = t.unwrap();
    assert!(matches!(
        t.host_ptr(),
        Err(DlpackError::NotContiguous { axis: 0, .. })
    ));
    assert_eq!(
        t.to_host().unwrap().as_slice::<f32>(),
        Some(&[0.0f32, 1., 2., 4., 5., 6.][..])
    );

    // Reversed (negative stride, the first element at the end) and broadcast (stride 0).
    let mut reversed = Spec::f32(&[3], &[1.0, 2.0, 3.0]).strides(&[-1]);
    reversed.byte_offset = 8;
    let (t, _) = reversed.import();
    let t = t.unwrap();
    assert!(t.host_ptr().is_err());
    assert_eq!(
        t.to_host().unwrap().as_slice::<f32>(),
        Some(&[3.0f32, 2.0, 1.0][..])
    );
    let (t, _) = Spec::f32(&[2, 2], &[7.0, 8.0]).strides(&[0, 1]).import();
    assert_eq!(
        t.unwrap().to_host().unwrap().as_slice::<f32>(),
        Some(&[7.0f32, 8.0, 7.0, 8.0][..])
    );
}

#[test]
fn misaligned_elements_are_copied_not_used_in_place() {
    let mut bytes = vec![0u8];
    bytes.extend([1.5f32, 2.5].iter().flat_map(|v| v.to_ne_bytes()));
    let mut spec = Spec::new(dl(K_DL_FLOAT, 32), &[2], bytes);
    spec.byte_offset = 1;
    let (t, _) = spec.import();
    let t = t.unwrap();
    let err = t.host_ptr().unwrap_err();
    assert!(
        matches!(err, DlpackError::Misaligned { align: 4, .. }),
        "{err}"
    );
    assert_eq!(
        t.to_host().unwrap().as_slice::<f32>(),
        Some(&[1.5f32, 2.5][..])
    );
}

#[test]
fn bool_bytes_other_than_one_read_as_true() {
    let (t, _) = Spec::new(dl(K_DL_BOOL, 8), &[3], vec![0, 1, 7]).import();
    assert_eq!(
        t.unwrap().to_host().unwrap().as_slice::<bool>(),
        Some(&[false, true, true][..])
    );
}

#[test]
fn unsupported_dtypes_name_code_bits_and_lanes() {
    for (code, bits, lanes) in [
        (2u8, 8u8, 1u16),
        (4, 32, 1),
        (2, 16, 2),
        (5, 64, 1),
        (2, 32, 4),
        (6, 1, 1),
    ] {
        let mut spec = Spec::f32(&[1], &[0.0]);
        spec.dtype = DLDataType { code, bits, lanes };
        let (err, deleted) = spec.import();
        let err = err.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, DlpackError::UnsupportedDtype { .. })
                && text.contains(&format!("code {code}"))
                && text.contains(&format!("{bits} bits"))
                && text.contains(&format!("{lanes} lanes")),
            "{text}"
        );
        assert_eq!(deleted.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn unsupported_devices_are_refused() {
    for (device_type, device_id) in [(4, 0), (10, 0), (13, 0), (K_DL_CUDA, -1)] {
        let mut spec = Spec::f32(&[1], &[0.0]);
        spec.device = DLDevice {
            device_type,
            device_id,
        };
        let (err, _) = spec.import();
        let err = err.unwrap_err();
        assert_eq!(
            err,
            DlpackError::UnsupportedDevice {
                device_type,
                device_id
            }
        );
        assert!(err.to_string().contains("kDLCPU (1), kDLCUDA (2)"), "{err}");
    }
    // Pinned host memory is host memory.
    let mut pinned = Spec::f32(&[1], &[4.0]);
    pinned.device.device_type = K_DL_CUDA_HOST;
    let (t, _) = pinned.import();
    let t = t.unwrap();
    assert_eq!(t.device(), Device::Cpu);
    assert_eq!(t.to_host().unwrap().as_slice::<f32>(), Some(&[4.0f32][..]));
}

#[test]
fn cuda_memory_gives_its_device_pointer_and_is_refused_on_the_host() {
    let mut spec = Spec::f32(&[2], &[0.0, 0.0]);
    spec.device = DLDevice {
        device_type: K_DL_CUDA,
        device_id: 1,
    };
    // The address is never dereferenced: CUDA memory is only passed on.
    let (t, deleted) = spec.import();
    let mut t = t.unwrap();
    assert_eq!(t.device(), Device::Cuda { ordinal: 1 });
    let (ptr, ordinal) = t.cuda_ptr().unwrap();
    assert!(ptr != 0 && ordinal == 1);
    for err in [
        t.host_ptr().unwrap_err(),
        t.to_host().unwrap_err(),
        t.input().err().unwrap(),
    ] {
        assert!(
            matches!(
                err,
                DlpackError::WrongDevice {
                    got: Device::Cuda { ordinal: 1 },
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("CUDA device 1 memory"), "{err}");
    }
    assert!(t.output().is_err());
    drop(t);
    assert_eq!(deleted.load(Ordering::SeqCst), 1);

    let (t, _) = Spec::f32(&[1], &[0.0]).import();
    let err = t.unwrap().cuda_ptr().unwrap_err();
    assert!(
        matches!(
            err,
            DlpackError::WrongDevice {
                got: Device::Cpu,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn other_major_versions_are_refused_and_given_back() {
    for major in [0, 2] {
        let mut spec = Spec::f32(&[1], &[0.0]);
        spec.version = DLPackVersion { major, minor: 3 };
        let (err, deleted) = spec.import();
        let err = err.unwrap_err();
        assert_eq!(
            err,
            DlpackError::UnsupportedVersion {
                major,
                minor: 3,
                supported: 1
            }
        );
        assert!(err.to_string().contains("max_version"), "{err}");
        assert_eq!(deleted.load(Ordering::SeqCst), 1);
    }
    // A newer minor version reads as 1.0.
    let mut spec = Spec::f32(&[1], &[0.0]);
    spec.version.minor = 9;
    assert!(spec.import().0.is_ok());
}

#[test]
fn malformed_tensors_are_refused() {
    let mut null = Spec::f32(&[2], &[1.0, 2.0]);
    null.null_data = true;
    let (err, deleted) = null.import();
    assert_eq!(err.unwrap_err(), DlpackError::NullData { elements: 2 });
    assert_eq!(deleted.load(Ordering::SeqCst), 1);

    // NULL data without elements is what DLPack asks for.
    let mut empty = Spec::f32(&[0, 4], &[]);
    empty.null_data = true;
    let (t, _) = empty.import();
    let t = t.unwrap();
    assert!(t.is_empty() && !t.host_ptr().unwrap().is_null());
    assert_eq!(t.to_host().unwrap(), HostTensor::zeros(DType::F32, &[0, 4]));

    let (err, _) = Spec::f32(&[2, -3], &[]).import();
    let err = err.unwrap_err();
    assert!(matches!(err, DlpackError::BadShape { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("axis 1 of shape [2, -3] has size -3"),
        "{err}"
    );

    let mut negative_ndim = Spec::f32(&[1], &[0.0]);
    negative_ndim.ndim = Some(-1);
    let (err, _) = negative_ndim.import();
    assert!(err.unwrap_err().to_string().contains("ndim is -1"));

    let (err, _) = Spec::f32(&[1 << 40, 1 << 40], &[]).import();
    assert!(err.unwrap_err().to_string().contains("overflows"));

    // SAFETY: NULL is allowed and refused.
    let err = unsafe { DlpackTensor::from_versioned(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(err, DlpackError::Null);
    // SAFETY: as above.
    let err = unsafe { DlpackTensor::from_legacy(std::ptr::null_mut()) }.unwrap_err();
    assert_eq!(err, DlpackError::Null);
}

#[test]
fn read_only_tensors_are_inputs_not_outputs() {
    let mut spec = Spec::f32(&[2], &[1.0, 2.0]);
    spec.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let (t, _) = spec.import();
    let mut t = t.unwrap();
    assert!(t.is_read_only() && !t.is_copied());
    assert!(matches!(t.input(), Ok(Input::Raw(_))));
    assert_eq!(t.host_mut_ptr().unwrap_err(), DlpackError::ReadOnly);
    let err = t.output().err().unwrap();
    assert_eq!(err, DlpackError::ReadOnly);
    assert!(err.to_string().contains("read-only"), "{err}");

    // ovl's own read-only export reads back read-only.
    let managed = export_versioned(sample(DType::U8, &[2]), DLPACK_FLAG_BITMASK_READ_ONLY);
    // SAFETY: an export just made, handed over once.
    let mut t = unsafe { DlpackTensor::from_versioned(managed) }.unwrap();
    assert!(t.is_read_only() && t.output().is_err());
}

/// A graph of the one operator `op`, its inputs the graph's, its outputs requested.
fn one_operator_graph(op: ir::ExpressionDag) -> ir::OperatorDag {
    use ir::value_ref::Source;
    let source = |s| ir::ValueRef { source: Some(s) };
    ir::OperatorDag {
        symbols: Vec::new(),
        version: ovl_ir::IR_VERSION,
        inputs: op.inputs.clone(),
        operator_inputs: vec![ir::OperatorInputs {
            inputs: (0..op.inputs.len() as u32)
                .map(|i| source(Source::GraphInput(i)))
                .collect(),
        }],
        outputs: (0..op.outputs.len() as u32)
            .map(|k| {
                source(Source::OpOutput(ir::OperatorOutput {
                    operator: 0,
                    output: k,
                }))
            })
            .collect(),
        operators: vec![op],
    }
}

#[test]
fn a_compiled_program_runs_on_imported_memory_in_place() {
    let (rows, cols) = (3usize, 5usize);
    let dag = ovl_ir::fixtures::add_2d(rows as u64, cols as u64);
    let cache = tempfile::tempdir().expect("a temporary directory");
    let options = ovl_codegen::CompileOptions::default().with_cache_dir(cache.path());
    let (op, outcome) =
        ovl_runtime::compile_with_outcome(&dag, &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome, ovl_codegen::CacheOutcome::Compiled);

    let n = rows * cols;
    let a: Vec<f32> = (0..n).map(|k| k as f32 * 0.5 - 2.0).collect();
    let b: Vec<f32> = (0..n).map(|k| 10.0 - k as f32 * 1.25).collect();
    let expected: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let shape = [rows as i64, cols as i64];

    // A read-only versioned input, a legacy input, and a versioned output of the producer's.
    let mut spec_a = Spec::f32(&shape, &a).strides(&[cols as i64, 1]);
    spec_a.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    let (x, x_deleted) = spec_a.import();
    let (y, y_deleted) = Spec::f32(&shape, &b).import_legacy();
    let (out, out_deleted) = Spec::f32(&shape, &vec![f32::NAN; n]).import();
    let (x, y, mut out) = (x.unwrap(), y.unwrap(), out.unwrap());

    // Through a plan: `Input::Raw` / `Output::Raw`, no copies.
    let plan = Plan::new(Arc::new(one_operator_graph(dag.clone()))).unwrap();
    let kernels = [Kernel::Cpu(op.clone())];
    let inputs = [x.input().unwrap(), y.input().unwrap()];
    let out_ptr = out.host_mut_ptr().unwrap();
    let mut outputs: [Output<'_>; 1] = [out.output().unwrap()];
    // SAFETY: the DLPack tensors were checked to be contiguous, aligned f32 host memory of the
    // graph's shapes; the output overlaps no input.
    unsafe { plan.run(&kernels, &inputs, &mut outputs, 1, None) }.unwrap();
    let got = out.to_host().unwrap();
    assert_eq!(got.as_slice::<f32>(), Some(&expected[..]));

    // Through the operator's raw entry.
    out.host_mut_ptr()
        .map(|p| {
            // SAFETY: as above: `n` writable f32.
            unsafe { std::slice::from_raw_parts_mut(p.cast::<f32>(), n) }.fill(0.0)
        })
        .unwrap();
    // SAFETY: as above.
    unsafe {
        op.run_raw(
            &[x.host_ptr().unwrap(), y.host_ptr().unwrap()],
            &[out_ptr],
            &[],
            2,
        )
    }
    .unwrap();
    assert_eq!(
        out.to_host().unwrap().as_slice::<f32>(),
        Some(&expected[..])
    );

    for d in [&x_deleted, &y_deleted, &out_deleted] {
        assert_eq!(d.load(Ordering::SeqCst), 0);
    }
    drop((x, y, out));
    for d in [&x_deleted, &y_deleted, &out_deleted] {
        assert_eq!(d.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn device_tensors_export_as_cuda_memory() {
    use ovl_runtime::cuda::{gpu_status, DeviceTensor};
    if let Err(e) = gpu_status() {
        eprintln!("dlpack.rs: no GPU here, the device tensor export did not run: {e}");
        return;
    }
    let x = sample(DType::F32, &[4, 2]);
    let d = DeviceTensor::upload(&x).unwrap();
    let ptr = d.ptr();
    // SAFETY: an export just made, handed over once.
    let t = unsafe { DlpackTensor::from_versioned(export_versioned(d.clone(), 0)) }.unwrap();
    assert_eq!(t.device(), Device::Cuda { ordinal: 0 });
    assert_eq!(t.cuda_ptr().unwrap(), (ptr, 0));
    assert!(t.to_host().is_err());
    drop(d); // the export still holds the memory
    drop(t);
}

/// The feeds of a run on a caller's stream: device pointers and the one device; tensors on two
/// devices, or host memory among them, are refused naming them.
#[test]
fn cuda_tensors_give_their_pointers_and_one_device_for_a_stream_run() {
    let on = |device_id: i32, device_type: i32| {
        let mut spec = Spec::f32(&[2], &[0.0, 0.0]);
        spec.device = DLDevice {
            device_type,
            device_id,
        };
        spec.import().0.unwrap()
    };
    let (a, b, c, h) = (
        on(1, K_DL_CUDA),
        on(1, K_DL_CUDA),
        on(0, K_DL_CUDA),
        on(0, K_DL_CPU),
    );
    let (ptrs, device) = DlpackTensor::cuda_pointers(&[&a, &b]).unwrap();
    assert_eq!(ptrs, vec![a.cuda_ptr().unwrap().0, b.cuda_ptr().unwrap().0]);
    assert_eq!(device, Some(1));
    assert_eq!(DlpackTensor::cuda_pointers(&[]).unwrap(), (vec![], None));
    let err = DlpackTensor::cuda_pointers(&[&a, &b, &c]).unwrap_err();
    assert_eq!(
        err,
        DlpackError::MixedDevices {
            first: 0,
            first_device: 1,
            index: 2,
            device: 0
        }
    );
    assert!(
        err.to_string().contains("tensor 2 is on CUDA device 0"),
        "{err}"
    );
    let err = DlpackTensor::cuda_pointers(&[&c, &h]).unwrap_err();
    assert!(matches!(err, DlpackError::WrongDevice { .. }), "{err}");
}
