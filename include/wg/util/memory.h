// Memory accounting. On CPU a counting allocator, installed once through
// c10::SetCPUAllocator, sees every CPU tensor allocation (not oneDNN/BLAS
// scratch mallocs) and keeps current and peak bytes. On CUDA the caching
// allocator's own statistics are used. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <string>

namespace wg {

struct MemorySnapshot {
  int64_t current_bytes = 0;   // allocated now
  int64_t peak_bytes = 0;      // allocated peak since the last reset
  // What the allocator held from the system at most: CUDA: the caching
  // allocator's reserve (what runs out); CPU: the process's resident memory
  // now (tensors, freed memory malloc keeps for the next step, and the rest
  // of the process), at least peak_bytes.
  int64_t reserved_peak_bytes = 0;
  int64_t capacity_bytes = 0;  // device memory (CPU: physical memory)
  int64_t available_bytes = 0; // free for this process now, its own tensors included
};

// Installs the counting CPU allocator (idempotent, thread-safe). Must run
// before tensors that should be counted are allocated.
void install_counting_allocator();
bool counting_allocator_installed();
// A hard limit on counted CPU bytes (0: none): an allocation that would pass
// it throws c10::OutOfMemoryError, like a full GPU. For testing and for
// cpu_memory_limit_gib.
void set_cpu_memory_limit(int64_t bytes);

// Keeps freed CPU memory in the process for the next step, up to `bytes`
// (at most 2 GiB - 1: glibc's trim threshold), and takes large blocks from
// the heap rather than from mmap, so that a step does not return its
// activations to the system and fault them back in the next (measured at
// cpu_small: 20 % of a step). 0: glibc's defaults. Returns false where the
// C library does not take the settings.
bool keep_freed_cpu_memory(int64_t bytes);

// device: "cpu" or "cuda:N".
MemorySnapshot memory_snapshot(const std::string& device);
void reset_peak_memory(const std::string& device);

}  // namespace wg
