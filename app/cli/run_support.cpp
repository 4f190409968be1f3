#include "app/cli/run_support.h"

#include <fstream>
#include <sstream>

#include "kernels/common/error.h"
#include "kernels/ops/cpu_transformer_ops.h"

namespace qs::cli {

std::string readTextFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorKind::BadInput, "cannot open text file", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error(ErrorKind::BadInput, "cannot read text file", path);
  return ss.str();
}

RunnableModel loadRunnable(const std::string& path, const std::string& tokenizer,
                           bool requireTokenizer, TerminalProgress& progress, int64_t maxSeq) {
  RunnableModel r;
  r.model = loadModel(path, tokenizer, requireTokenizer);
  r.ops = createCpuTransformerOps();
  JobContext ctx;
  ctx.onProgress = [&progress](double f, std::string_view stage) { progress.update(f, stage); };
  RuntimeOptions opt;
  opt.maxSeq = maxSeq;
  r.runtime = std::make_unique<Runtime>(*r.model.file, r.model.graph, *r.ops, opt, &ctx);
  return r;
}

RunnableModel loadRunnable(Backend& backend, const std::string& path, const std::string& tokenizer,
                           bool requireTokenizer, TerminalProgress& progress, int64_t maxSeq) {
  RunnableModel r;
  r.model = loadModel(path, tokenizer, requireTokenizer);
  JobContext ctx;
  ctx.onProgress = [&progress](double f, std::string_view stage) { progress.update(f, stage); };
  RuntimeOptions opt;
  opt.maxSeq = maxSeq;
  r.runtime = std::make_unique<Runtime>(*r.model.file, r.model.graph, backend, opt, &ctx);
  return r;
}

}  // namespace qs::cli
