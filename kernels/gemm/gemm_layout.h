#pragma once
// The kernel layout of a quantized weight, and the one conversion boundary between the formats'
// container (QuantizedTensor, kernels/quant/weight_codec.h) and it:
//     packWeightForKernel(tensor, activation) → PackedGemmWeight
//     unpackWeightFromKernel(packed)          → tensor     (its inverse; the CPU op-set and the
//                                                           tests use it)
// and the correspondence of weight specs and GEMM schemes it relies on.
//
// Layout (see docs/gemm.md for the picture). The kernels feed weights to the tensor cores as the
// A operand of mma.sync (16 output rows x k), so the packed codes are stored in exactly the
// order in which the 32 lanes of a warp hold A fragments: one 16-byte load per lane per "chunk"
// gives the lane its fragments for chunkK values of k, with no shuffles and no shared memory.
//
//   codes (A16 schemes):  [rowTile = nPad/16][chunk = kPad/chunkK][lane 0..31][16 bytes]
//           lane = 4*g + t (g = lane/4 "group", t = lane%4 "thread in group"); the lane holds
//           rows r0 = 16*rowTile + g and r1 = r0 + 8.
//   INT4 (A16, chunkK = 64): word j (j = 0..3) covers k in [16j, 16j+16) of the chunk, in the
//           m16n8k16 fragment order, as 8 nibbles (bit 4i..4i+3 = nibble i):
//             n0 = (r0, 2t)   n1 = (r1, 2t)   n2 = (r0, 2t+8)  n3 = (r1, 2t+8)
//             n4 = (r0, 2t+1) n5 = (r1, 2t+1) n6 = (r0, 2t+9)  n7 = (r1, 2t+9)
//           so (w & 0x000F000F) holds the pair (r0, 2t..2t+1) in the two 16-bit halves,
//           (w & 0x00F000F0) the pair of r1, and w >> 8 the next two pairs: four LOP3s turn a
//           word into four FP16x2 fragment registers. Nibble = code + 8 (symmetric) or the
//           code itself (asymmetric).
//   8-bit, A16 (INT8/FP8 weights, FP16 mma, chunkK = 32): words (2v, 2v+1) cover k in
//           [16v, 16v+16): word 2v = bytes (r0,2t) (r0,2t+1) (r0,2t+8) (r0,2t+9), word 2v+1 the
//           same for r1. INT8 is stored biased (code + 128) so a PRMT with 0x64 makes 1024+u.
//   8-bit, A8 (W8A8, chunkK = 64): plain row-major codes [nPad][kPad] (INT8 two's complement,
//           FP8 raw), because cuBLASLt (the large-m core) reads that layout and one copy of the
//           weight is enough: the skinny kernel loads 16 contiguous bytes of rows r0 and r1 per
//           lane (k in [16t, 16t+16) of a 64-wide chunk) and feeds them to m16n8k32 with a
//           permuted k order, reading the activations in the same permuted order.
//   INT4, A8 (W4A8, chunkK = 64): row-major nibbles [nPad][kPad / 2] (two's complement, low
//           nibble = even k). The CUDA op-set widens them to the W8A8 layout (INT8 or E4M3 codes,
//           exact) in a scratch before each product and runs the W8A8 kernels on that.
//   groupScales: [rowTile][groupsPad][g 0..7][2] FP16 = (scale(r0), scale(r1)) per lane group,
//           grouped INT formats only (one 4-byte load per lane per group).
//   groupZeros:  [rowTile][groupsPad][g 0..7][2] bytes = (zero(r0), zero(r1)), asymmetric INT4;
//           per-channel asymmetric uses groupsPad = 1.
//   channelScales: [nPad] FP32, per-channel and per-tensor formats (applied in the epilogue).
// Padding: rows n..nPad and columns k..kPad hold codes that dequantize to exactly 0, their
// scales are 0, so the kernels never need a bounds check on the weight side.
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "kernels/gemm/gemm_types.h"
#include "kernels/quant/weight_codec.h"

namespace qs {

struct PackedGemmWeight {
  GemmScheme scheme;
  int64_t n = 0, k = 0;        // true sizes
  int64_t nPad = 0, kPad = 0;  // nPad: multiple of 16; kPad: multiple of chunkK
  int chunkK = 0;              // 64 (INT4, and 8-bit A8) or 32 (8-bit A16); 0 for FP16
  int64_t groupsPad = 0;       // scale groups per row in groupScales (kPad / groupSize)

  std::vector<uint8_t> codes;
  std::vector<uint16_t> groupScales;
  std::vector<uint8_t> groupZeros;
  std::vector<float> channelScales;
  std::vector<uint16_t> f16;  // FP16 baseline: the plain [n, k] weight, unchanged

  int64_t rowTiles() const { return nPad / 16; }
  int64_t chunks() const { return chunkK ? kPad / chunkK : 0; }
  uint64_t bytes() const;  // everything a kernel reads for the weight
};

// The scheme (with FP16 activations) that runs weights of `spec`, or nullopt: INT4 symmetric or
// asymmetric and symmetric INT8, per channel or in groups of 32, 64 or 128; FP8 per channel or
// per tensor; FP16. A per-tensor INT weight maps to the per-channel scheme (its one scale
// repeated per row: the same values).
std::optional<GemmScheme> gemmWeightSchemeFor(const WeightSpec& spec);
// The weight spec a scheme's weights have (absmax scales): what unpackWeightFromKernel gives
// and the test data generators make.
WeightSpec weightSpecOf(const GemmScheme& scheme);

// Validates q (validateQuantizedTensor) and packs it for the kernels of (its scheme,
// activation). Throws ErrorKind::Unsupported naming the tensor when its spec has no scheme
// (gemmWeightSchemeFor), BadInput when q is malformed or the activation does not go with it.
// The packed values are the container's exactly: the FP16 group scales are copied, the
// per-channel / per-tensor scales widened to FP32.
PackedGemmWeight packWeightForKernel(const QuantizedTensor& q, GemmActivationType activation,
                                     std::string_view tensorName = {});
// The tensor of weightSpecOf(p.scheme) that packs to p. A per-tensor INT weight comes back
// per channel; every value is the same.
QuantizedTensor unpackWeightFromKernel(const PackedGemmWeight& p);

}  // namespace qs
