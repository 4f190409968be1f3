#pragma once
// The integer lattice of a ggml block: once a block's scales (and minimums) are fixed, each of
// its values can take exactly the values
//     mul[j] · float(q − bias) + add[j],   q an integer code in [qmin, qmax],
// where mul and add come from the block's header and sub-block scales. This is what GPTQ rounds
// to for a ggml type (kernels/rounding): it fixes a block's scales with ggml's own search at the
// block's first column, then rounds column by column to this lattice, feeding each error forward,
// and finally writes its codes into the block (setBlockCodes), keeping the scales.
//
// The value formula is the dequantizer's, operation for operation (kernels/ggml/ggml_quants.cpp,
// built like this file with -ffp-contract=off), so latticeValue(mul, add, q) equals the decoded
// value bit for bit (tested for every type).
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/common/dtype.h"

namespace qs::ggml {

struct LatticeRange {
  int qmin = 0, qmax = 0;  // the codes a value may take
  int bias = 0;            // value = mul · float(q − bias) + add
};

// The code range of a decodable block type (Q4_0 … Q6_K; not Q8_1 / Q8_K, which are activation
// formats). Throws ErrorKind::Unsupported for any other dtype.
LatticeRange latticeRange(DType type);

// mul[j] and add[j] for the blockElems values of one block (`block`: its blockBytes bytes).
void blockLattice(DType type, const std::byte* block, std::span<float> mul, std::span<float> add);

// The codes of the block's values (q in [qmin, qmax]), and their inverse: setBlockCodes writes
// codes into the block and leaves its scales as they are.
void blockCodes(DType type, const std::byte* block, std::span<int> codes);
void setBlockCodes(DType type, std::byte* block, std::span<const int> codes);

inline float latticeValue(float mul, float add, int q, int bias) { return mul * float(q - bias) + add; }

// The code whose lattice value is nearest to x (ties: the lower code); mul = 0 gives the code
// nearest the bias (every code has the value `add` then).
int nearestLatticeCode(float x, float mul, float add, const LatticeRange& r);

}  // namespace qs::ggml
