// A row held on chip after its statistics: its dynamic scale, outputs and statistics.
// Params: the generated normgen_fwd.cuh defines it before it includes forward.cuh.
#pragma once
#include "quant.cuh"

namespace normgen {

// A row held on chip, after its statistics: the dynamic quant scale (a row reduction every
// thread takes part in, live row or not), then this thread's outputs and the row's stats.
// kKeep (K::kKeepOutputs): the outputs computed for the absolute maximum are put in `keep`
// (RegisterFloats or SharedFloats: where `load` reads the row from) for the stores, instead
// of computed again (the normalize chain is most of a 16-bit row's instructions).
// kCentred: `load` gives the row minus st.shift. U: the outputs' vectors at a time in both
// passes (see for_each_output).
template <class K, int P, int V, bool kHeld, bool kKeep, bool kCentred, int T, int R, int C, int U, class Load,
          class Cols, class Held, class Keep, class Early = EarlyColumns<K, 0, V>, int kPush = 0>
__device__ __forceinline__ void finish_row(const Params& p, const Stats& st, const Load& load, const Cols& cols,
                                           const Held& c, ReduceScratch<T, R, 1, kPush>& sh_max,
                                           Keep&& keep, float qmul, i64 row, bool live, bool leader,
                                           const Early& early = Early{}) {
  if constexpr (merged_max<K>()) {
    qmul = dynamic_scale<K>(p, st.amax, row, live && leader);
  } else if constexpr (K::kQuant == Quant::DYNAMIC) {
    float m[1] = {0.f};
    for_each_output<K, P, V, kHeld, kCentred, U>(p, st, load, cols, c, [&](int i, const float (&out)[V]) {
      if constexpr (kKeep) keep.put(i, out);
#pragma unroll
      for (int j = 0; j < V; ++j) m[0] = max_nan(m[0], fabsf(out[j]));
    }, early);
    row_reduce<Max, T, R, C, 1>(m, sh_max);
    qmul = dynamic_scale<K>(p, m[0], row, live && leader);
  }
  if (live) {
    if (leader) save_stats<K>(p, row, st);  // first: the mean's terms need no register past here
    if constexpr (kKeep && K::kQuant == Quant::DYNAMIC) {
#pragma unroll
      for (int i = 0; i < P; ++i) {
        if (cols.inside(i)) {
          float out[V];
          keep.get(i, out);
#pragma unroll
          for (int j = 0; j < V; ++j) out[j] *= qmul;
          store_vec<typename K::Y, V>(static_cast<typename K::Y*>(p.y) + row * p.n + cols(i), out);
        }
      }
    } else {
      normalize_row<K, P, V, kHeld, kCentred, U>(p, st, load, cols, c, qmul, row * p.n, early);
    }
  }
}

}  // namespace normgen
