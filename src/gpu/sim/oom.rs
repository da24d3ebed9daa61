//! What a PyTorch training script prints when the CUDA caching allocator
//! cannot get memory, with the simulated GPU's numbers.
//!
//! The daemon recognises OOM crashes by signatures in a job's stderr, so a
//! fake job must fail the way real ones do: a Python traceback ending in
//! `torch.OutOfMemoryError` with the message of recent PyTorch (2.5 and
//! later, `c10/cuda/CUDACachingAllocator.cpp`), word for word, sizes
//! formatted as PyTorch's `format_size` does.

use super::state::SimGpu;

const BYTES_PER_MIB: u64 = 1024 * 1024;

/// The frames above the failing allocation: a convolution in the forward
/// pass, where most training OOMs happen.
const TRACEBACK: &str = r#"Traceback (most recent call last):
  File "/workspace/train.py", line 112, in <module>
    main()
  File "/workspace/train.py", line 97, in main
    output = model(images)
             ^^^^^^^^^^^^^
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1751, in _wrapped_call_impl
    return self._call_impl(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1762, in _call_impl
    return forward_call(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/conv.py", line 554, in forward
    return self._conv_forward(input, self.weight, self.bias)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/conv.py", line 549, in _conv_forward
    return F.conv2d(
           ^^^^^^^^^
"#;

/// The traceback of a process that tried to allocate `tried_mib` on `gpu`,
/// which it knows as device `ordinal` (CUDA numbers the visible GPUs from
/// 0, whatever their index on the machine). The process holds nothing yet,
/// so only the other processes on the GPU are listed, as NVML shows them to
/// PyTorch.
pub fn traceback(tried_mib: u64, ordinal: usize, gpu: &SimGpu) -> String {
    let others: String = gpu
        .claims
        .iter()
        .map(|claim| {
            format!(
                "Process {} has {} memory in use. ",
                claim.process.pid,
                format_size(claim.mib * BYTES_PER_MIB)
            )
        })
        .collect();
    format!(
        "{TRACEBACK}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. \
         GPU {ordinal} has a total capacity of {total} of which {free} is free. {others}\
         Of the allocated memory {none} is allocated by PyTorch, and {none} is reserved by \
         PyTorch but unallocated. If reserved but unallocated memory is large try setting \
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
         documentation for Memory Management  \
         (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n",
        tried = format_size(tried_mib * BYTES_PER_MIB),
        total = format_size(gpu.total_mib * BYTES_PER_MIB),
        free = format_size(gpu.free_mib() * BYTES_PER_MIB),
        none = format_size(0),
    )
}

/// PyTorch's size formatting: two decimals, binary units, each unit up to
/// and including 1024 of itself (so exactly 1 GiB prints as `1024.00 MiB`).
fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = KIB * KIB;
    const GIB: u64 = MIB * KIB;
    let b = bytes as f64;
    if bytes <= KIB {
        format!("{bytes} bytes")
    } else if bytes <= MIB {
        format!("{:.2} KiB", b / KIB as f64)
    } else if bytes <= GIB {
        format!("{:.2} MiB", b / MIB as f64)
    } else {
        format!("{:.2} GiB", b / GIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::state::Claim;
    use crate::procfs::ProcessId;

    #[test]
    fn sizes_print_as_pytorch_prints_them() {
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(1 << 30), "1024.00 MiB");
        assert_eq!(format_size(6 << 30), "6.00 GiB");
        assert_eq!(format_size(2500 * BYTES_PER_MIB), "2.44 GiB");
    }

    #[test]
    fn the_message_names_the_request_the_gpu_and_its_neighbours() {
        let gpu = SimGpu {
            device: "0".into(),
            total_mib: 40960,
            claims: vec![Claim {
                process: ProcessId {
                    pid: 4242,
                    start_time: 1,
                },
                mib: 38912,
                smact: 0.5,
            }],
        };
        let text = traceback(6144, 0, &gpu);
        assert!(text.starts_with("Traceback (most recent call last):\n"));
        let last = text.lines().last().unwrap();
        assert_eq!(
            last,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. \
             GPU 0 has a total capacity of 40.00 GiB of which 2.00 GiB is free. \
             Process 4242 has 38.00 GiB memory in use. Of the allocated memory 0 bytes \
             is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. \
             If reserved but unallocated memory is large try setting \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  \
             See documentation for Memory Management  \
             (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        );
    }
}
