// Thread-block clusters: a row's threads over the C blocks of a cluster, which read and
// write each other's shared memory; and how a pipeline's rows span blocks (SpanOf).
#pragma once
#include "base.cuh"

namespace normgen {

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_index() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_count() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}
// All threads of all blocks of the cluster; orders the first warp's memory accesses before
// it with every thread's after it. Only a block's first warp writes what other blocks read
// or reads theirs (row_reduce), so only it arrives with release semantics; the others arrive
// relaxed, sparing them the fence's wait for their outstanding stores (the rows' outputs).
__device__ __forceinline__ void cluster_sync() {
  if (threadIdx.x < 32) {  // (a whole warp: `aligned` holds)
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  } else {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The shared-memory address of a generic pointer into this block's shared memory.
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// The address in the shared memory of block `rank` of this cluster of what `p` points to here.
__device__ __forceinline__ unsigned cluster_address(const void* p, unsigned rank) {
  unsigned at;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(at) : "r"(shared_address(p)), "r"(rank));
  return at;
}
// A float in the shared memory of block `rank` of this cluster, at the address `p` has here.
__device__ __forceinline__ float load_cluster(const float* p, unsigned rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(cluster_address(p, rank)) : "memory");
  return v;
}
// v into the shared memory of block `rank` of this cluster, at the address `slot` has here,
// completing there on the mbarrier at the address `barrier` has here.
__device__ __forceinline__ void push_cluster(const float* slot, const unsigned long long* barrier, unsigned rank,
                                             float v) {
  const unsigned at = cluster_address(slot, rank), bar = cluster_address(barrier, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
               ::"r"(at), "r"(__float_as_uint(v)), "r"(bar) : "memory");
}
// Waits for the phase of the given parity of this block's mbarrier at shared address
// `barrier`; kCluster: and sees what other blocks of the cluster wrote with it.
template <bool kCluster = false>
__device__ __forceinline__ void wait_parity(unsigned barrier, unsigned parity) {
  unsigned done;
  do {
    if constexpr (kCluster) {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                   "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    } else {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(barrier), "r"(parity) : "memory");
    }
  } while (!done);
}

// How a pipeline's row spans blocks: the threads of one block (BlockSpan), or of the C
// blocks of a cluster (ClusterSpan), which a row group's index and count then name, and
// whose blocks must not exit while another reads their shared memory (finish).
struct BlockSpan {
  __device__ __forceinline__ static unsigned rank() { return 0u; }
  __device__ __forceinline__ static unsigned group() { return blockIdx.x; }
  __device__ __forceinline__ static unsigned groups() { return gridDim.x; }
  __device__ __forceinline__ static void finish() {}
};
struct ClusterSpan {
  __device__ __forceinline__ static unsigned rank() { return cluster_rank(); }
  __device__ __forceinline__ static unsigned group() { return cluster_index(); }
  __device__ __forceinline__ static unsigned groups() { return cluster_count(); }
  __device__ __forceinline__ static void finish() { cluster_sync(); }
};
template <class K> using SpanOf = typename Pick<(K::kCluster > 1), ClusterSpan, BlockSpan>::type;

}  // namespace normgen
