// The normgen forward kernel family: LayerNorm and RMSNorm, one-pass and two-pass.
// Generated from templates/norm_fwd.cuh.j2 by generate.py; do not edit.
// Each instance .cu defines a Traits struct (the spec, spelled in C++) and calls
// norm_fwd<Traits> (templates/kernels/forward.cuh); every choice there is a compile-time
// switch on those traits. The kernel headers are plain files in templates/kernels/; this one
// adds the launch's Params struct, whose fields follow normgen/params.py.
#pragma once
#include "kernels/base.cuh"

namespace normgen {

struct Params {
  const void* x;
  const void* residual;
  const void* x_bias;
  const void* gamma;
  const void* beta;
  const void* smooth;
  const void* qscale;
  void* y;
  void* res_out;
  void* yscale;
  void* mean;
  void* rstd;
  long long rows;
  long long inner;
  long long x_so;
  long long x_si;
  long long r_so;
  long long r_si;
  int n;
  float eps;
  float weight_offset;
  int pad_;
};

}  // namespace normgen

#include "kernels/forward.cuh"
