// rmsnorm_fwd_fp32_nb65536_1p_r4
// Generated from templates/instance.cu.j2 by generate.py; do not edit.
#include "normgen_fwd.cuh"

namespace {
struct Traits {
  using X = float;
  using W = float;
  using Y = float;
  using SM = float;  // smooth-scale precision (unused without kSmooth)
  using SY = float;  // per-row scale precision (dynamic quant)
  static constexpr normgen::Norm kNorm = normgen::Norm::RMSNORM;
  static constexpr normgen::Pipeline kPipeline = normgen::Pipeline::ONE_PASS;
  static constexpr int kFusedAdd = 0;
  static constexpr bool kXBias = false;
  static constexpr normgen::Quant kQuant = normgen::Quant::NONE;
  static constexpr bool kSmooth = false;
  static constexpr bool kSaveStats = false;
  static constexpr int kThreadsPerRow = 1024;
  static constexpr int kRowsPerBlock = 1;
  static constexpr int kVec = 4;
  static constexpr int kRepeat = 8;
  static constexpr int kCluster = 2;
  static constexpr bool kStaged = true;
  static constexpr bool kStreamed = false;
  static constexpr bool kLean = false;
  static constexpr bool kRagged = true;
  static constexpr bool kFramed = false;
  static constexpr bool kPackColumns = false;
  static constexpr bool kKeepOutputs = false;
  static constexpr normgen::Cache kRowCache = normgen::Cache::NORMAL;
  static constexpr int kOutputStep = 8;
  static constexpr int kColumnPrefetch = 0;
  static constexpr int kColumnRegisters = 0;
  static constexpr int kColumnAhead = 0;
  static constexpr bool kFoldShift = false;
  static constexpr int kRowImages = 0;
  static constexpr int kResidualBatch = 1;
  static constexpr bool kSegmentSteps = true;
  static constexpr bool kSumsWhileStaging = true;
  static constexpr bool kStageGroups = true;
  static constexpr int kColumnBytes = 0;  // held columns' float copy a block (FloatColumns)
  static constexpr bool kFloatColumns = kColumnBytes > 0;
};
}  // namespace

// __launch_bounds__' residency target (devices.launch_blocks): sm_90's, or fewer blocks where
// an SM's shared memory holds fewer; a build that spills registers at it defines a lower one
// (compile.compile_unspilled)
#ifndef NORMGEN_MIN_BLOCKS
#define NORMGEN_MIN_BLOCKS 1
#endif

extern "C" __global__ void __launch_bounds__(1024, NORMGEN_MIN_BLOCKS)
__cluster_dims__(2, 1, 1)
rmsnorm_fwd_fp32_nb65536_1p_r4(const normgen::Params p) {
  normgen::norm_fwd<Traits, normgen::Entry::ANY>(p);
}
