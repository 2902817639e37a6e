// The forward kernels' entry: norm_fwd<Traits, E> checks an instance's traits against one
// another and runs the pipeline they name, for the rows that entry E serves. An instance
// file (templates/instance.cu.j2) defines the Traits and a kernel that calls norm_fwd; the
// generated normgen_fwd.cuh defines Params and includes this file.
#pragma once
#include "framed_rows.cuh"
#include "ragged_rows.cuh"
#include "register_rows.cuh"
#include "staged_rows.cuh"
#include "streamed_rows.cuh"
#include "two_pass_rows.cuh"

namespace normgen {

// Which rows a kernel serves (normgen.types.Entry): every row of the instance; rows of exactly
// the bucket's length (staged and streamed rows, n a constant); framed rows whose row
// tensors all start at x's row's element of their 16 bytes.
enum class Entry { ANY, WHOLE, ALIKE };

template <class K, Entry E>
__device__ __forceinline__ void norm_fwd(const Params& p) {
  constexpr bool kFull = E == Entry::WHOLE;
  static_assert(E != Entry::ALIKE || K::kFramed, "only framed rows have a kernel for rows that start alike");
  static_assert(!K::kFloatColumns || (K::kPipeline == Pipeline::ONE_PASS && !K::kStaged && !K::kStreamed &&
                                      !K::kRagged && K::kCluster == 1 && !K::kPackColumns &&
                                      (K::kFusedAdd == 0 || K::kFramed) && !K::kXBias && !K::kSmooth),
                "float columns: register rows of one block without a prologue, framed rows without an x-bias, neither with a smooth scale");
  static_assert(!K::kPackColumns || (K::kPipeline == Pipeline::ONE_PASS && !K::kStaged),
                "only register-held one-pass rows hold columns, packed or not");
  static_assert(!K::kKeepOutputs || (K::kPipeline == Pipeline::ONE_PASS && K::kQuant == Quant::DYNAMIC &&
                                     !merged_max<K>()),
                "outputs are kept only by one-pass rows, between a dynamic quant's maximum and the stores");
  static_assert(!kFull || (K::kPipeline == Pipeline::ONE_PASS && (K::kStaged || K::kStreamed)),
                "only staged and streamed rows have whole-row kernels");
  static_assert(K::kRepeat % K::kOutputStep == 0, "output passes take a thread's vectors in whole steps");
  static_assert(K::kColumnPrefetch <= K::kRepeat && (K::kColumnPrefetch == 0 || K::kStaged),
                "staged rows prefetch some of their vectors' columns");
  static_assert(K::kColumnRegisters <= K::kOutputStep && (K::kColumnRegisters == 0 || K::kStaged),
                "staged rows load some of their first output step's columns early");
  static_assert(!K::kFoldShift || (K::kPipeline == Pipeline::ONE_PASS && (K::kStaged || K::kStreamed) &&
                                   K::kNorm == Norm::LAYERNORM && (K::kStreamed || !K::kKeepOutputs)),
                "staged or streamed LayerNorm rows fold their shift into the output passes' chain");
  static_assert(!K::kLean || (K::kPipeline == Pipeline::ONE_PASS && !K::kStaged),
                "only register-held one-pass rows are built lean");
  static_assert(K::kRowImages == 0 || (K::kRagged && !K::kStaged && K::kRowsPerBlock == 1 && K::kThreadsPerRow >= 32 &&
                                       K::kRowImages <= 2),
                "a row image of one or two rows serves ragged rows in registers, one row of whole warps a block");
  static_assert(K::kResidualBatch == 1 || (K::kRagged && K::kStaged && K::kFusedAdd != 0 && K::kRepeat % K::kResidualBatch == 0),
                "only staged ragged rows with a fused add load their residual in rounds of several vectors");
  static_assert(!K::kSegmentSteps || K::kRagged, "only ragged rows count their steps per warp segment");
  static_assert(!K::kSumsWhileStaging || (K::kRagged && K::kStaged),
                "only staged ragged rows take their sums as they stage the row");
  static_assert(!K::kStageGroups || (K::kRagged && K::kStaged && K::kFusedAdd == 0),
                "only staged ragged rows without a fused add wait for their copies step by step");
  static_assert(!K::kStreamed || (K::kPipeline == Pipeline::ONE_PASS && !K::kStaged && !K::kLean &&
                                  K::kRowsPerBlock == 1 && K::kFusedAdd == 0 && !K::kXBias &&
                                  !K::kSmooth && sizeof(typename K::W) == sizeof(typename K::X) &&
                                  K::kVec * sizeof(typename K::X) == 16),
                "streamed rows: one row a block, of whole 16-byte vectors, gamma and beta of x's precision");
  static_assert(K::kRowCache == Cache::NORMAL || K::kPipeline == Pipeline::ONE_PASS,
                "only one-pass rows choose where their loads of x leave their lines");
  static_assert(!K::kRagged || (K::kPipeline == Pipeline::ONE_PASS && !K::kStreamed && !kFull &&
                                 K::kVec * sizeof(typename K::X) == 16 && !K::kPackColumns && !K::kKeepOutputs &&
                                 K::kColumnAhead == 0),
                "ragged rows: one-pass, in registers or staged, of 16-byte vectors");
  static_assert(!K::kFramed || (K::kPipeline == Pipeline::ONE_PASS && !K::kRagged && !K::kStaged && !K::kStreamed &&
                                 K::kCluster == 1 && !kFull && K::kVec * sizeof(typename K::X) == 16 &&
                                 !K::kPackColumns && K::kColumnAhead == 0 && K::kRowImages == 0),
                "framed rows: one-pass, in registers over one block, of 16-byte vectors");
  if constexpr (K::kFramed) {
    framed_rows<K, E == Entry::ALIKE>(p);
  } else if constexpr (K::kRagged) {
    ragged_rows<K>(p);
  } else if constexpr (K::kPipeline == Pipeline::ONE_PASS && (K::kStaged || kFull)) {
    Params q = p;  // in a whole-row kernel n is a compile-time constant everywhere (counts, offsets)
    if constexpr (kFull) q.n = K::kThreadsPerRow * K::kCluster * K::kRepeat * K::kVec;
    if constexpr (K::kStaged) {
      staged_rows<K, kFull>(q);
    } else {
      streamed_rows<K, kFull>(q);
    }
  } else if constexpr (K::kPipeline == Pipeline::ONE_PASS && K::kStreamed) {
    streamed_rows<K, false>(p);
  } else if constexpr (K::kPipeline == Pipeline::ONE_PASS) {
    register_rows<K>(p);
  } else {
    two_pass_rows<K>(p);
  }
}

}  // namespace normgen
