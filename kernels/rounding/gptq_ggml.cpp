// GPTQ for the ggml block types (gptq.h, runGgmlGptq): GPTQ's column loop with a ggml block as
// the group. Built with -ffp-contract=off, like gptq_cpu.cpp and the ggml codecs, so the lattice
// values it rounds to are the dequantizer's bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/common/error.h"
#include "kernels/common/parallel.h"
#include "kernels/ggml/ggml_lattice.h"
#include "kernels/ggml/ggml_types.h"
#include "kernels/rounding/gptq.h"

namespace qs {

GptqResult runGgmlGptq(GptqPrepared& p, const std::vector<float>& u, double lambda, const std::string& note,
                       std::string_view name) {
  const int64_t rows = p.rows, cols = p.cols, B = p.blockSize;
  const DType type = quantKindTraits(p.spec.kind).dtype;
  const auto* tr = ggml::ggmlTraitsForDType(type);
  if (!tr) throw Error(ErrorKind::Internal, "runGgmlGptq: no ggml type for " + weightSpecToString(p.spec));
  const int64_t E = tr->blockElems, BB = tr->blockBytes, nBlocks = cols / E;
  if (p.groupSize != E || B % E != 0)
    throw Error(ErrorKind::Internal, "runGgmlGptq: GPTQ blocks of " + std::to_string(B) + " columns for " +
                                         std::to_string(E) + "-value ggml blocks");
  const ggml::LatticeRange lr = ggml::latticeRange(type);
  const std::span<const float> importance = p.importance;
  std::vector<std::byte> blocks(size_t(rows * nBlocks * BB));
  auto blockAt = [&](int64_t r, int64_t b) { return blocks.data() + (r * nBlocks + b) * BB; };

  // Act-order: every block's scales from the original W, fixed before the loop, and the lattice
  // of every value (original column order).
  std::vector<float> mulAll, addAll;
  if (p.staticScales) {
    std::vector<float> original(p.w.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        original[size_t(r * cols + (p.perm.empty() ? j : p.perm[size_t(j)]))] = p.w[size_t(r * cols + j)];
    ggml::quantizeRows(type, original, blocks, cols, importance);
    mulAll.resize(original.size());
    addAll.resize(original.size());
    parallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t b = 0; b < nBlocks; ++b)
          ggml::blockLattice(type, blockAt(r, b), {mulAll.data() + r * cols + b * E, size_t(E)},
                             {addAll.data() + r * cols + b * E, size_t(E)});
    });
  }

  std::vector<float>& W = p.w;
  std::vector<float> Q(W.size());
  std::vector<int> codes(W.size());  // original column order
  std::vector<float> err;
  std::vector<double> rowLoss(size_t(rows), 0.0);
  for (int64_t b0 = 0; b0 < cols; b0 += B) {
    const int64_t b1 = std::min(cols, b0 + B), nb = b1 - b0;
    err.assign(size_t(rows * nb), 0.0f);
    parallelFor(rows, std::max<int64_t>(1, 4096 / nb), [&](int64_t r0, int64_t r1) {
      std::vector<float> mul(static_cast<size_t>(E)), add(static_cast<size_t>(E));
      for (int64_t r = r0; r < r1; ++r) {
        float* wr = W.data() + r * cols;
        for (int64_t j = b0; j < b1; ++j) {
          const int64_t col = p.perm.empty() ? j : p.perm[size_t(j)];
          float m, a;
          if (p.staticScales) {
            m = mulAll[size_t(r * cols + col)];
            a = addAll[size_t(r * cols + col)];
          } else {
            if (j % E == 0) {  // the block's scales from the row as it stands now
              std::byte* blk = blockAt(r, j / E);
              ggml::quantizeBlockOfRow(type, {wr, size_t(cols)}, j / E, {blk, size_t(BB)}, importance);
              ggml::blockLattice(type, blk, mul, add);
            }
            m = mul[size_t(j % E)];
            a = add[size_t(j % E)];
          }
          const float x = wr[j];
          const int c = ggml::nearestLatticeCode(x, m, a, lr);
          const float q = ggml::latticeValue(m, a, c, lr.bias);
          codes[size_t(r * cols + col)] = c;
          Q[size_t(r * cols + j)] = q;
          gptqFeedColumnError(wr, x, q, u, cols, j, b1, err[size_t(r * nb + (j - b0))], rowLoss[size_t(r)]);
        }
      }
    });
    gptqUpdateLaterColumns(W, err, u, rows, cols, b0, b1);
  }

  QuantizedTensor qt = blankQuantizedTensor(p.spec, rows, cols, name);
  if (qt.payload.size() != blocks.size())
    throw Error(ErrorKind::Internal, "runGgmlGptq: " + std::to_string(blocks.size()) + " block bytes for a payload of " +
                                         std::to_string(qt.payload.size()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nBlocks; ++b)
      ggml::setBlockCodes(type, blockAt(r, b), {codes.data() + r * cols + b * E, size_t(E)});
  std::memcpy(qt.payload.data(), blocks.data(), blocks.size());

  GptqResult res;
  res.dequantized = dequantizeWeight(qt);
  // The loop rounded with the lattice's arithmetic; the file is read by ggml's dequantizer. They
  // must agree on every value, or the error fed forward was not the file's.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t col = p.perm.empty() ? j : p.perm[size_t(j)];
      if (!(res.dequantized[size_t(r * cols + col)] == Q[size_t(r * cols + j)]))
        throw Error(ErrorKind::Internal, "GPTQ " + weightSpecToString(p.spec) + ": lattice value " +
                                             std::to_string(Q[size_t(r * cols + j)]) + " at [" + std::to_string(r) +
                                             ", " + std::to_string(col) + "] decodes as " +
                                             std::to_string(res.dequantized[size_t(r * cols + col)]));
    }
  res.quantized = std::move(qt);
  res.dampingUsed = lambda;
  res.deadColumns = p.deadColumns;
  double loss = 0;
  for (double l : rowLoss) loss += l;
  res.gptqLoss = loss / 2;
  res.note = note;
  return res;
}

}  // namespace qs
