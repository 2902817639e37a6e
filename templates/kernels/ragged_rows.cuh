// Ragged rows: rows of any length, starting anywhere (K::kRagged), in 16-byte accesses.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "finish.cuh"
#include "ragged.cuh"

namespace normgen {

// A ragged row's vectors as loaded (x, or h after the fused prologue), held in registers
// or, staged, in the block's shared memory (once h is there, each thread reads back only
// what it wrote).
template <class K, int P, int V, bool kStaged> struct RaggedHeld {
  using X = typename K::X;
  static constexpr int kWords = chunk_words<X, V>();
  Packed<X, kStaged ? 1 : P, V> regs;  // (staged: unused)
  __device__ __forceinline__ uint4* slot(int i) const {
    extern __shared__ uint4 stage_words[];
    return stage_words + i * K::kThreadsPerRow + threadIdx.x;  // conflict-free
  }
  __device__ __forceinline__ void put(int i, const uint32_t (&w)[kWords]) {
    if constexpr (kStaged) {
      *slot(i) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
#pragma unroll
      for (int k = 0; k < kWords; ++k) regs.w[i * kWords + k] = w[k];
    }
  }
  __device__ __forceinline__ void get(int i, float (&d)[V]) const {
    if constexpr (kStaged) {
      Packed<X, 1, V> v;
      v.load(0, reinterpret_cast<const X*>(slot(i)));
      v.get(0, d);
    } else {
      regs.get(i, d);
    }
  }
};

// h of one vector (x, with the fused x-bias and residual; words of x's precision): the sum
// rounded as the unfused sequence rounds it (fuse), zeros past the row.
template <class K, int V>
__device__ __forceinline__ void ragged_fuse(uint32_t (&x)[chunk_words<typename K::X, V>()],
                                            const uint32_t (&r)[chunk_words<typename K::X, V>()], const Params& p,
                                            int col, int count) {
  if constexpr (K::kFusedAdd != 0 || K::kXBias) {
    Packed<typename K::X, 1, V> px, pr;
#pragma unroll
    for (int k = 0; k < chunk_words<typename K::X, V>(); ++k) {
      px.w[k] = x[k];
      pr.w[k] = r[k];
    }
    Columns<K, 1, V> c;
    if constexpr (K::kXBias) c.load_part_of(c.bias, 0, static_cast<const typename K::X*>(p.x_bias), col, count, 0.f);
    fuse<K, 1, V, 1>(px, pr, 0, c, 0, nullptr);
#pragma unroll
    for (int k = 0; k < chunk_words<typename K::X, V>(); ++k) x[k] = px.w[k];
  }
}

// A vector's floats from its chunk's words of X (h in registers).
template <class X, int V>
__device__ __forceinline__ void chunk_floats(const uint32_t (&h)[chunk_words<X, V>()], float (&d)[V]) {
  Packed<X, 1, V> v;
#pragma unroll
  for (int k = 0; k < chunk_words<X, V>(); ++k) v.w[k] = h[k];
  v.get(0, d);
}

// LayerNorm's shift for a ragged row: the mean of h over its first V columns (all of them if
// fewer), which every thread reads itself (the same two chunks: a broadcast), as Pilot does.
template <class K, int V>
__device__ __forceinline__ float ragged_shift(const Params& p, const RaggedIn<typename K::X, V>& xs,
                                              const RaggedIn<typename K::X, V>& rs, int n, bool live) {
  uint32_t x[chunk_words<typename K::X, V>()], r[chunk_words<typename K::X, V>()];
  const int count = n < V ? n : V;
  xs.vector(0, live, x);
  if constexpr (K::kFusedAdd != 0) rs.vector(0, live, r);
  ragged_fuse<K, V>(x, r, p, 0, count);
  Packed<typename K::X, 1, V> h;
#pragma unroll
  for (int k = 0; k < chunk_words<typename K::X, V>(); ++k) h.w[k] = x[k];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < V; ++j) s += h.get(0, j);  // past the row: zeros
  return count == V ? s * (1.f / V) : s / static_cast<float>(count);
}

// fn(i) for i in 0 .. P - 1, unrolled U at a time (registers indexed at compile time need
// U = P; a loop over a staged row bounds the loads issued ahead of their use).
template <int P, int U, class Fn>
__device__ __forceinline__ void each_vector(const Fn& fn) {
  static_assert(P % U == 0, "whole steps");
#pragma unroll 1
  for (int i0 = 0; i0 < P; i0 += U) {
#pragma unroll
    for (int b = 0; b < U; ++b) fn(i0 + b);
  }
}

// fn(i, true) for the steps i whose vectors lie inside the row in every lane (of the
// segment: RaggedCols), fn(i, false) for the step holding the row's end where it is taken;
// nothing for the steps past it. The branches are the same in every lane of a warp.
template <int P, int U, class Cols, class Fn>
__device__ __forceinline__ void each_step(const Cols& cols, const Fn& fn) {
  each_vector<P, U>([&](int i) {
    if (i < cols.whole) {
      fn(i, true);
    } else if (cols.ends(i)) {
      fn(i, false);
    }
  });
}

// A ragged row's chunks as loaded (RaggedIn::fetch), for P vectors of x and the residual.
template <class K, int P, int V> struct RaggedRaw {
  static constexpr int kW = chunk_words<typename K::X, V>();
  static constexpr bool kAdd = K::kFusedAdd != 0;
  uint32_t x[P][kW], r[kAdd ? P : 1][kW];
  uint32_t xb[P][kW], rb[kAdd ? P : 1][kW];  // the last lane's next chunks (RaggedIn::after)

  // Vectors i0 .. i0 + P - 1 of a row (steps as each_step's), of the row segments of W lanes.
  template <int W, class Cols>
  __device__ __forceinline__ void fetch(const RaggedIn<typename K::X, V>& xs, const RaggedIn<typename K::X, V>& rs,
                                        const Cols& cols, int i0, int l, bool live) {
#pragma unroll
    for (int b = 0; b < P; ++b) {
      const int i = i0 + b;
      if (i < cols.whole) {
        xs.template fetch<true>(cols(i), live, x[b]);
        if constexpr (kAdd) rs.template fetch<true>(cols(i), live, r[b]);
      } else if (cols.ends(i)) {
        xs.template fetch<false>(cols(i), live, x[b]);
        if constexpr (kAdd) rs.template fetch<false>(cols(i), live, r[b]);
      }
    }
#pragma unroll
    for (int b = 0; b < P; ++b) {
      xs.template after<W>(cols(i0 + b), l, live && cols.takes(i0 + b), xb[b]);
      if constexpr (kAdd) rs.template after<W>(cols(i0 + b), l, live && cols.takes(i0 + b), rb[b]);
    }
  }
};

// Waits until at most n of this thread's cp.async groups are in flight (n < 8; known at
// compile time where the caller is unrolled, which folds the switch).
__device__ __forceinline__ void wait_copies_but(int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
}

// A staged row's h put into `held`, and (K::kFusedAdd == 1) stored to res_out: x's chunks
// copied into held's slots as they lie, the chunk after each warp's last lane's into
// edge[0] (cp.async: every copy in flight at once, in no registers), the residual's chunks
// loaded into registers meanwhile, RB vectors a round (the chunk after the last lane's into
// edge[1]); then each lane joins its chunk and the next, fuses, and writes its vector back
// once its warp has read. issued() runs once every copy is in flight (the shift's loads
// wait beside them), taken(i, h) on each vector put, in order (the row's sums, from h in
// registers rather than from the stage again). K::kStageGroups (no fused add): each step's
// copies are a cp.async group of their own, and a step is joined once its group has landed,
// while the later steps' copies are still in flight; else once every copy has.
template <class K, int P, int V, int W, int RB, int kIn, class Cols, class Issued, class Taken>
__device__ __forceinline__ void stage_ragged(RaggedHeld<K, P, V, true>& held,
                                             uint4 (&edge)[kIn][P][K::kThreadsPerRow / 32],
                                             const RaggedIn<typename K::X, V>& xs, const RaggedIn<typename K::X, V>& rs,
                                             const RaggedOut<typename K::X, V>& res_out, const Params& p,
                                             const Cols& cols, int l, bool live, const Issued& issued,
                                             const Taken& taken) {
  constexpr bool kAdd = K::kFusedAdd != 0;
  static_assert(W == 32 && kIn == 1 + kAdd, "warps of one row; an edge for x and the residual");
  static_assert(P % RB == 0 && (kAdd || RB == 1), "the residual's vectors in whole rounds");
  constexpr int kW = chunk_words<typename K::X, V>();
  const int warp = threadIdx.x / 32;
  uint32_t r[RB][kW];  // the residual's vectors of a round
  auto fetch = [&](int i, int b) {  // the residual's vector i into r[b]
    if (i < cols.whole) {
      rs.template fetch<true>(cols(i), live, r[b]);
    } else if (cols.ends(i)) {
      rs.template fetch<false>(cols(i), live, r[b]);
    }
    if (cols.takes(i) && l == W - 1 && rs.s != 0) rs.copy_chunk(&edge[kIn - 1][i][warp], cols(i) + V, live);
  };
  constexpr bool kGroups = K::kStageGroups;
  static_assert(!kGroups || P <= 8, "steps waited for one at a time (wait_copies_but): at most eight");
  // x's chunks, and the first round's residual vectors beside them
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (cols.takes(i)) {
      xs.copy_chunk(held.slot(i), cols(i), live);
      if (l == W - 1 && xs.s != 0) xs.copy_chunk(&edge[0][i][warp], cols(i) + V, live);
    }
    if constexpr (kAdd) {
      if (i < RB) fetch(i, i);
    }
    if constexpr (kGroups) asm volatile("cp.async.commit_group;" ::: "memory");
  }
  issued();
  // a round: the residual's vectors i0 .. i0 + RB - 1 (loaded here after the first round),
  // joined with x's, fused and put (without a fused add, all of x's vectors: a loop, not P
  // copies of its body)
  auto round = [&](int i0) {
    if constexpr (kAdd) {
      if (i0 > 0) {
#pragma unroll
        for (int b = 0; b < RB; ++b) fetch(i0 + b, b);
      }
    }
    if constexpr (!kGroups) {
      asm volatile("cp.async.wait_all;" ::: "memory");
      __syncwarp();
    }
    // (registers indexed at compile time: unrolled where it reads the residual's, and where
    // each step waits for its own group)
    each_vector<kAdd ? RB : P, kAdd ? RB : kGroups ? P : 1>([&](int b) {
      const int i = i0 + b;
      if constexpr (kGroups) {
        wait_copies_but(P - 1 - i);  // this lane's steps up to i landed; the warp's, after:
        __syncwarp();
      }
      if (!cols.takes(i)) return;
      uint32_t h[kW], rr[kW] = {};
      xs.join(held.slot(i), l == W - 1 ? &edge[0][i][warp] : held.slot(i) + 1, h);
      if constexpr (kAdd) {
        uint32_t rb[kW] = {};
        if (l == W - 1 && rs.s != 0) {
          const uint4 q = edge[kIn - 1][i][warp];
          rb[0] = q.x; rb[1] = q.y; rb[2] = q.z; rb[3] = q.w;
        }
        rs.template realign<W>(l, r[b], rb, rr);
      }
      __syncwarp();
      ragged_fuse<K, V>(h, rr, p, cols(i), cols.count(i));
      if constexpr (K::kFusedAdd == 1) res_out.template store_step<W>(i < cols.whole, cols(i), l, live, h);
      held.put(i, h);
      taken(i, h);
    });
  };
  if constexpr (kAdd && RB < P) {
#pragma unroll 1
    for (int i0 = 0; i0 < P && cols.takes(i0); i0 += RB) round(i0);
  } else {
    round(0);
  }
}

// A row's chunks copied as they lie into a shared-memory image (cp.async, waited for with
// the row's others): slot t + t / 32 holds thread t's chunk, the slot after a warp's last
// lane's the chunk after it, so that every lane's vector starts in its slot and ends in the
// next. Steps whose vectors all lie inside the segment's part of the row copy whole chunks;
// the step holding the row's end, and the chunk after the last lane's, only the row's bytes.
template <class K, int P, int V, int S2, class Cols>
__device__ __forceinline__ void image_row(uint4 (&im)[P][S2], const RaggedIn<typename K::X, V>& xs, const Cols& cols,
                                          int l) {
  using X = typename K::X;
  const unsigned to = shared_address(&im[0][threadIdx.x + threadIdx.x / 32]);
  const X* from = xs.base + cols(0);  // step i's chunk at from + i * kStep: immediate offsets
  constexpr unsigned kStepBytes = S2 * sizeof(uint4);
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const X* chunk = from + i * Cols::kStep;
    if (i < cols.whole) {
      xs.template copy_async<true>(to + i * kStepBytes, chunk);
    } else if (cols.ends(i)) {
      xs.template copy_async<false>(to + i * kStepBytes, chunk, xs.bytes_in(cols(i)));
    }
    if (cols.takes(i) && l == 31 && xs.s != 0)
      xs.template copy_async<false>(to + i * kStepBytes + 16, chunk + V, xs.bytes_in(cols(i) + V));
  }
}

// Rows of any alignment and length on the one-pass tiles: a block serves R rows at a time
// with T threads each, or a cluster's C blocks one row; thread `lane` of a row holds the
// P vectors at columns (i*C*T + lane)*V, as the aligned pipelines do, in registers or
// (K::kStaged) in shared memory. The W lanes of a warp's row segment load (RaggedIn) and
// store (RaggedOut) neighbouring chunks together, so every step that moves memory runs in
// all of them, for rows past the end (!live) too. Steps whose vectors all lie inside the
// row take no masks; the step holding the row's end (each_step) counts its columns, and
// its sums and maxima leave the rest out. Rows held in registers load the next row's
// chunks before this row's reductions. LayerNorm shifts by the row's first columns
// (ragged_shift).
template <class K>
__device__ __forceinline__ void ragged_rows(const Params& p) {
  using X = typename K::X;
  using Y = typename K::Y;
  using Span = SpanOf<K>;
  constexpr int T = K::kThreadsPerRow, R = K::kRowsPerBlock, C = K::kCluster;
  constexpr int V = K::kVec, P = K::kRepeat;
  constexpr int W = T < 32 ? T : 32;
  constexpr bool kLN = K::kNorm == Norm::LAYERNORM;
  constexpr bool kAdd = K::kFusedAdd != 0;
  constexpr bool kStaged = K::kStaged;
  // rows in registers load through a shared-memory image of x (and of the residual) where
  // the recipe says so (K::kRowImages: of one or two rows; the next row's copies in flight
  // while this one is reduced, in no registers); the others load the next row's chunks
  // before this row's reductions where they fit beside it (16 words of x alone, as
  // register_rows' kPrefetchRow)
  constexpr int kImages = K::kRowImages;
  constexpr bool kImage = kImages > 0;
  constexpr bool kAhead = !kImage && !kStaged && !kAdd && P * chunk_words<X, V>() <= 16;
  // vectors loaded at a time by rows in registers without an image: all of them ahead, or
  // two with a fused add, four without (staged rows: stage_ragged)
  constexpr int kBatch = kAhead ? P : kAdd ? 2 : 4;
  constexpr int B = P < kBatch ? P : kBatch;
  constexpr int U = K::kOutputStep;  // output vectors at a time (Recipe.output_step)
  constexpr int kXW = chunk_words<X, V>(), kYW = chunk_words<Y, V>();
  static_assert(!kStaged || R == 1, "staged tiles serve one row per block");
  constexpr int S = scratch_sets<K>();
  __shared__ ReduceScratch<T, R, 1> sh_max[S];
  __shared__ ReduceScratch<T, R, stat_values<K>()> sh_stats[S], sh_again[S];
  constexpr int kIn = 1 + kAdd;  // inputs moved as chunks: x, and the residual
  __shared__ uint4 edge[kStaged ? kIn : 1][kStaged ? P : 1][kStaged ? T / 32 : 1];  // (stage_ragged)
  // the row images (Recipe.image_bytes), in dynamic shared memory: one row of a fused add
  // of 16384 passes the 48 KB a block may declare statically
  extern __shared__ uint4 stage_words[];
  using Images = uint4[kImage ? kImages : 1][kImage ? kIn : 1][kImage ? P : 1][kImage ? T + T / 32 : 1];
  Images& img = *reinterpret_cast<Images*>(stage_words);
  int buf = 0;  // the image holding this row
  const int l = threadIdx.x % W;
  const int lane = Span::rank() * T + threadIdx.x % T;
  const int sub = threadIdx.x / T;
  const int n = p.n;
  const RaggedCols<C * T, V, W, K::kSegmentSteps> cols(lane, l, n);
  const float qmul = static_qmul<K>(p);
  const i64 stride = Span::groups() * static_cast<i64>(R);
  auto x_of = [&](i64 at) { return RaggedIn<X, V>(static_cast<const X*>(p.x) + row_offset(at, p.inner, p.x_so, p.x_si), n); };
  auto r_of = [&](i64 at) {
    return RaggedIn<X, V>(kAdd ? static_cast<const X*>(p.residual) + row_offset(at, p.inner, p.r_so, p.r_si)
                               : static_cast<const X*>(p.x), n);
  };
  i64 base = Span::group() * static_cast<i64>(R);
  RaggedRaw<K, B, V> raw;
  // a block's row copied into image b (x's, then the residual's), one cp.async group a row;
  // a block of images serves one row (Recipe.row_images), copied only while it is live
  static_assert(!kImage || R == 1, "row images: one row a block");
  auto image = [&](int b, i64 row) {
    if constexpr (kImage) {
      image_row<K, P, V>(img[b][0], x_of(row), cols, l);
      if constexpr (kAdd) image_row<K, P, V>(img[b][kIn - 1], r_of(row), cols, l);
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
  };
  if constexpr (kImage) {
    if (base < p.rows) image(0, base + sub);
  }
  if constexpr (kAhead) {
    const i64 at = base + sub < p.rows ? base + sub : 0;
    if (base < p.rows) raw.template fetch<W>(x_of(at), r_of(at), cols, 0, l, base + sub < p.rows);
  }
  for (int ph = 0; base < p.rows; base += stride, ph = (ph + 1) % S) {
    const i64 row = base + sub;
    const bool live = row < p.rows;
    const i64 at = live ? row : 0;  // rows past the end: addresses of row 0, never accessed
    const RaggedIn<X, V> xs = x_of(at), rs = r_of(at);
    const RaggedOut<X, V> res_out(K::kFusedAdd == 1 ? static_cast<X*>(p.res_out) + at * n : nullptr, n);
    const RaggedOut<Y, V> y(static_cast<Y*>(p.y) + at * n, n);

    // LayerNorm's shift, and the row's sums around it (columns past its end add nothing).
    // K::kSumsWhileStaging (Recipe.sums_while_staging): staged rows take the shift once
    // their copies are in flight and the sums as they put each vector, in the order of the
    // pass below, which sums the held vectors otherwise.
    constexpr bool kSumsWhileStaging = K::kSumsWhileStaging;
    float k = 0.f, s1 = 0.f, s2 = 0.f;
    if constexpr (kLN && !kSumsWhileStaging) k = ragged_shift<K, V>(p, xs, rs, n, live);
    auto add_sums = [&](int i, bool all, float (&d)[V]) {
      if (!all) {
        const int count = cols.count(i);
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] = j < count ? d[j] : k;
      }
      add_centred<V>(d, k, s1, s2);
    };
    RaggedHeld<K, P, V, kStaged> held;
    // h of this row's vectors from their chunks, into `held` (res_out too)
    auto take = [&](int i0) {
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const int i = i0 + b;
        if (cols.takes(i)) {
          uint32_t h[kXW], r[kXW];
          xs.template realign<W>(l, raw.x[b], raw.xb[b], h);
          if constexpr (kAdd) rs.template realign<W>(l, raw.r[b], raw.rb[b], r);
          ragged_fuse<K, V>(h, r, p, cols(i), cols.count(i));
          if constexpr (K::kFusedAdd == 1) res_out.template store_step<W>(i < cols.whole, cols(i), l, live, h);
          held.put(i, h);
        }
      }
    };
    if constexpr (kStaged) {
      auto issued = [&] {
        if constexpr (kLN && kSumsWhileStaging) k = ragged_shift<K, V>(p, xs, rs, n, live);
      };
      auto taken = [&](int i, const uint32_t (&h)[kXW]) {
        if constexpr (kSumsWhileStaging) {
          float d[V];
          chunk_floats<X, V>(h, d);
          add_sums(i, i < cols.whole, d);
        }
      };
      stage_ragged<K, P, V, W, K::kResidualBatch>(held, edge, xs, rs, res_out, p, cols, l, live, issued, taken);
    } else if constexpr (kImage) {
      // two images: the next row's copies go into the other (read by its lanes two rows
      // ago: the reductions' barriers since order them), and this row's, one group older,
      // are waited for; one: this row's are waited for and read, and the next row's then go
      // into the same slots, each warp's own (its lanes' reads ordered before them by
      // __syncwarp)
      const bool more = base + stride < p.rows;
      if constexpr (kImages == 2) {
        if (more) {
          image(buf ^ 1, base + stride + sub);
        } else {
          asm volatile("cp.async.commit_group;" ::: "memory");
        }
      }
      asm volatile("cp.async.wait_group %0;" ::"n"(kImages - 1) : "memory");
      __syncwarp();
      const int slot = threadIdx.x + threadIdx.x / 32;
      const auto& im = img[buf];
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (cols.takes(i)) {
          uint32_t h[kXW], r[kXW] = {};
          xs.join(&im[0][i][slot], &im[0][i][slot + 1], h);
          if constexpr (kAdd) rs.join(&im[kIn - 1][i][slot], &im[kIn - 1][i][slot + 1], r);
          ragged_fuse<K, V>(h, r, p, cols(i), cols.count(i));
          if constexpr (K::kFusedAdd == 1) res_out.template store_step<W>(i < cols.whole, cols(i), l, live, h);
          held.put(i, h);
        }
      }
      __syncwarp();
      if constexpr (kImages == 1) {
        if (more) image(0, base + stride + sub);
      }
      buf ^= kImages - 1;
    } else if constexpr (!kAhead) {
#pragma unroll
      for (int i0 = 0; i0 < P; i0 += B) {
        if (cols.takes(i0)) {
          raw.template fetch<W>(xs, rs, cols, i0, l, live);
          take(i0);
        }
      }
    } else {
      take(0);
      const i64 next = base + stride + sub;
      const i64 next_at = next < p.rows ? next : 0;
      if (base + stride < p.rows) raw.template fetch<W>(x_of(next_at), r_of(next_at), cols, 0, l, next < p.rows);
    }
    auto load = [&](int i, float (&d)[V]) { held.get(i, d); };
    // a far row's second sums, from held (its vectors by run-time index: from memory where
    // registers hold them, each thread on its own)
    auto again = [&](int i, float (&d)[V]) {
      if constexpr (kStaged) {
        held.get(i, d);
      } else {
        uint32_t hx[kXW], hr[kXW];
        xs.vector(cols(i), live, hx);
        if constexpr (kAdd) rs.vector(cols(i), live, hr);
        ragged_fuse<K, V>(hx, hr, p, cols(i), cols.count(i));
        chunk_floats<X, V>(hx, d);
      }
    };
    // The outputs of vector i (its values minus the shift); `all`: V columns inside the row.
    auto outputs_of = [&](int i, bool all, const Stats& st, float (&out)[V]) {
      float d[V];
      load(i, d);
#pragma unroll
      for (int j = 0; j < V; ++j) d[j] -= st.shift;
      Columns<K, 1, V> c;
      if (all) {
        c.load(p, 0, cols(i));
      } else {
        c.load_part_or_all(p, 0, cols(i), cols.count(i));
      }
      outputs<K, 1, V>(out, p, st, d, c, 0);
    };
    // The largest |output| of this thread's columns inside the row.
    auto row_absmax = [&](const Stats& st) {
      float m = 0.f;
      each_step<P, U>(cols, [&](int i, bool all) {
        float out[V];
        outputs_of(i, all, st, out);
        const int count = all ? V : cols.count(i);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (j < count) m = max_nan(m, fabsf(out[j]));
      });
      return m;
    };

    if constexpr (!kSumsWhileStaging) {
      each_step<P, U>(cols, [&](int i, bool all) {
        float d[V];
        load(i, d);
        add_sums(i, all, d);
      });
    }
    // merged_max: the outputs' maximum with rstd = 1 (exactly the unscaled products)
    const float m = merged_max<K>() ? row_absmax(Stats{0.f, 0.f, 1.f, 0.f, false}) : 0.f;
    const Stats st = share_stats<K, P, V, T, R, C>(p, k, s1, s2, m, again, cols, sh_stats[ph], sh_again[ph]);
    float mul = qmul;
    if constexpr (merged_max<K>()) {
      mul = dynamic_scale<K>(p, st.amax, row, live && lane == 0);
    } else if constexpr (K::kQuant == Quant::DYNAMIC) {
      float mx[1] = {row_absmax(st)};
      row_reduce<Max, T, R, C, 1>(mx, sh_max[ph]);
      mul = dynamic_scale<K>(p, mx[0], row, live && lane == 0);
    }
    if (live && lane == 0) save_stats<K>(p, row, st);
    each_step<P, U>(cols, [&](int i, bool all) {
      float out[V];
      outputs_of(i, all, st, out);
      if constexpr (K::kQuant != Quant::NONE) {
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] *= mul;
      }
      uint32_t w[kYW];
      to_words<Y, V>(out, w);
      y.template store_step<W>(all, cols(i), l, live, w);
    });
  }
  Span::finish();
}

}  // namespace normgen
