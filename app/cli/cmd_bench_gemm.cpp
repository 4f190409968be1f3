// quantscope-cli bench gemm: our quantized GEMM/GEMV kernels against cuBLAS FP16, cuBLASLt FP8
// and INT8 and the device copy bandwidth, all measured in the same run (method: the first
// lines printed, and kernels/gemm/gemm_bench.h). Last line: the headline ratio.
#include <cmath>
#include <optional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "app/cli/commands.h"
#include "app/cli/text_table.h"
#include "kernels/common/error.h"
#include "kernels/gemm/gemm_bench.h"
#include "kernels/ops/gemm_spelling.h"

namespace qs::cli {
namespace {

int64_t parsePositive(const std::string& text, const std::string& flag) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 1) throwBadInput("", flag, "'" + text + "' is not a positive integer");
  return v;
}

std::pair<int64_t, int64_t> parseShape(const std::string& text) {
  const auto x = text.find('x');
  try {
    if (x != std::string::npos)
      return {parsePositive(text.substr(0, x), "--shapes"), parsePositive(text.substr(x + 1), "--shapes")};
  } catch (const Error&) {
  }
  throwBadInput("", "--shapes", "'" + text + "' is not NxK with positive N and K (e.g. 4096x14336)");
}

// A result row's kernel as people read it: our schemes in the format spelling (int4-g128-sym),
// the baselines (cublas-fp16, cublasLt-fp8 …) as they are.
// "1980", or "1410-1980" where the clock moved during the row's replays, then NVML's reasons for
// holding it down if any ("1410-1980 power-cap"); "-" where it was not read.
std::string smClockText(const GemmBenchRow& row) {
  if (row.smClockMaxMHz <= 0) return "-";
  std::string s = row.smClockMinMHz == row.smClockMaxMHz
                      ? std::to_string(row.smClockMaxMHz)
                      : std::to_string(row.smClockMinMHz) + "-" + std::to_string(row.smClockMaxMHz);
  return row.clockEvents.empty() ? s : s + " " + row.clockEvents;
}

std::string kernelText(const std::string& kernel) {
  for (const GemmScheme& s : GemmScheme::all())
    if (s.name() == kernel) return schemeSpelling(s);
  return kernel;
}

// "int4-g128-sym at m=1: 3.41x over cuBLAS FP16 (geo-mean of 4 shapes, min 3.12x), 78% of copy
// bandwidth (min 76%)"
std::string headline(const GemmBenchResult& r, const GemmBenchOptions& o) {
  const GemmScheme w4{GemmWeightType::Int4, GemmActivationType::F16, 128, false};
  std::optional<GemmScheme> scheme;
  for (const auto& s : o.schemes)
    if (s == w4) scheme = s;
  if (!scheme && !o.schemes.empty()) scheme = o.schemes.front();
  if (!scheme) return "headline: no quantized scheme was measured";
  const std::string name = schemeSpelling(*scheme);
  int64_t m = *std::min_element(o.batches.begin(), o.batches.end());
  double logSum = 0, minSpeed = 1e30, pctSum = 0, minPct = 1e30, floorSum = 0, minFloor = 1e30;
  int count = 0, floors = 0;
  for (const auto& row : r.rows)
    if (row.kernel == scheme->name() && row.m == m && row.speedup > 0) {
      logSum += std::log(row.speedup);
      minSpeed = std::min(minSpeed, row.speedup);
      pctSum += row.pctCopy;
      minPct = std::min(minPct, row.pctCopy);
      ++count;
      // --read-floor: the share of the read floor's speed (floor time / our time), same shape and m
      const double floorUs = readFloorMicros(r, scheme->name(), row.n, row.k, m);
      if (floorUs > 0 && row.us > 0) {
        floorSum += 100.0 * floorUs / row.us;
        minFloor = std::min(minFloor, 100.0 * floorUs / row.us);
        ++floors;
      }
    }
  if (!count) return "headline: " + name + " at m=" + std::to_string(m) + " was not measured";
  return "headline: " + name + " at m=" + std::to_string(m) + ": " + fixedPoint(std::exp(logSum / count), 2) +
         "x over cuBLAS FP16 (geo-mean of " + std::to_string(count) + " shapes, min " + fixedPoint(minSpeed, 2) +
         "x), " + fixedPoint(pctSum / count, 0) + "% of copy bandwidth (min " + fixedPoint(minPct, 0) + "%)" +
         (floors ? ", " + fixedPoint(floorSum / floors, 0) + "% of the read floor's speed (min " + fixedPoint(minFloor, 0) + "%)"
                 : std::string());
}

}  // namespace

void registerBenchGemm(CLI::App& bench, CliContext& ctx) {
  auto* cmd = bench.add_subcommand(
      "gemm", "Quantized GEMM/GEMV kernels vs cuBLAS FP16, cuBLASLt FP8/INT8 and copy bandwidth (CUDA)");
  struct Args {
    std::vector<std::string> shapes{"8192x8192", "4096x4096", "14336x4096", "4096x14336"};
    std::vector<std::string> batches{"1", "16", "128", "4096"};
    std::vector<std::string> formats{"int4-g128-sym", "int8-ch-sym", "fp8e4m3-ch", "int8-ch-sym:int8-tok",
                                     "fp8e4m3-ch:fp8e4m3-tok"};
    int repeats = 15;
    bool noLt = false;
    bool readFloor = false;
    bool paired = false;
    int copies = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--shapes", args->shapes, "Weight shapes NxK (N out, K in), comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--batch", args->batches, "Batch sizes m (tokens), comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--formats", args->formats,
                  "Formats, comma-separated, as plans spell them: fp16, int4-g{32,64,128}-{sym,asym}, "
                  "int4-ch-sym, int8-{ch,g32,g64,g128}-sym, int8-ch-sym:int8-tok, fp8e4m3-{ch,t}[:fp8e4m3-tok], "
                  "fp8e5m2-{ch,t}[:fp8e4m3-tok] (the kernels' scheme names, e.g. w4a16-g128, are accepted too)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--repeats", args->repeats, "Timed graph replays per measurement (median)")
      ->check(CLI::Range(3, 1000))
      ->capture_default_str();
  cmd->add_flag("--no-cublaslt", args->noLt, "Skip the cuBLASLt FP8/INT8 baselines");
  cmd->add_flag("--read-floor", args->readFloor,
                "Also time two kernels that only read each weight's bytes, the same way: 'read-floor' "
                "(grid-stride) and 'read-streams' (the skinny GEMVs' own access pattern and occupancy: what "
                "their weight stream alone costs). The faster of the two is the floor: its 'x fp16' is the "
                "ceiling of that format's speedup");
  cmd->add_flag("--paired", args->paired,
                "Time each format's graph in alternation with cuBLAS FP16's of the same shape and m (ABBA) and "
                "give 'x fp16' from that window's two medians ('fp16 us'): both sides see the same clock windows "
                "(the H200's SM clock dips for fractions of a second under dense tensor-core load)");
  cmd->add_option("--copies", args->copies,
                  "Weight copies each kernel's launches rotate through; 0 (default): enough that no launch finds "
                  "its weight in L2 (max(4, 3 x L2 / weight bytes)). 1 reuses one weight, as llama.cpp's "
                  "test-backend-ops perf does: weights that fit in L2 then read from it")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the results as JSON on stdout");

  cmd->callback([args, &ctx] {
    GemmBenchOptions o;
    for (const auto& s : args->shapes) o.shapes.push_back(parseShape(s));
    for (const auto& b : args->batches) o.batches.push_back(parsePositive(b, "--batch"));
    for (const auto& f : args->formats) o.schemes.push_back(parseSchemeText(f, "--formats"));
    if (o.shapes.empty() || o.batches.empty()) throwBadInput("", "--shapes/--batch", "need at least one of each");
    o.repeats = args->repeats;
    o.cublasLtBaselines = !args->noLt;
    o.readFloor = args->readFloor;
    o.paired = args->paired;
    o.weightCopies = args->copies;
    const bool tty = isatty(STDERR_FILENO);
    o.progress = [&ctx, tty](const std::string& line) {
      if (tty) ctx.err << "\r\033[K" << line << std::flush;
    };
    const GemmBenchResult r = runGemmBench(o);
    if (tty) ctx.err << "\r\033[K" << std::flush;

    if (args->json) {
      nlohmann::ordered_json j;
      j["device"] = r.device;
      j["copy_gbps"] = r.copyGBps;
      j["l2_bytes"] = r.l2Bytes;
      j["method"] = r.method;
      auto& rows = j["rows"] = nlohmann::ordered_json::array();
      for (const auto& row : r.rows)
        rows.push_back({{"kernel", kernelText(row.kernel)}, {"impl", row.impl}, {"n", row.n}, {"k", row.k}, {"m", row.m},
                        {"us", row.us}, {"tflops", row.tflops}, {"gbps", row.gbps}, {"pct_copy", row.pctCopy},
                        {"speedup_vs_cublas_fp16", row.speedup}, {"paired_fp16_us", row.pairedFp16Us},
                        {"weight_bytes", row.weightBytes}, {"copies", row.copies},
                        {"sm_clock_min_mhz", row.smClockMinMHz}, {"sm_clock_max_mhz", row.smClockMaxMHz},
                        {"sm_clock_events", row.clockEvents},
                        {"path", row.path}});
      j["headline"] = headline(r, o);
      ctx.out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
      return;
    }
    ctx.out << "Device:          " << r.device << '\n';
    ctx.out << "Copy bandwidth:  " << fixedPoint(r.copyGBps, 0) << " GB/s (device-to-device, read + write)\n";
    ctx.out << "Method:          " << r.method << "\n\n";
    // "fp16 us": cuBLAS FP16 in the window this row was timed in alternation with ("x fp16" is
    // its ratio); "-" where the row was timed alone.
    TextTable t({"shape NxK", "m", "kernel", "implementation", "us", "TFLOPS", "GB/s", "% copy", "x fp16",
                 "fp16 us", "copies", "SM MHz", "path"},
                {false, true, false, false, true, true, true, true, true, true, true, true, false});
    for (const auto& row : r.rows)
      t.addRow({std::to_string(row.n) + "x" + std::to_string(row.k), std::to_string(row.m), kernelText(row.kernel), row.impl,
                row.us > 0 ? fixedPoint(row.us, 1) : "-", row.us > 0 ? fixedPoint(row.tflops, 1) : "-",
                row.us > 0 ? fixedPoint(row.gbps, 0) : "-", row.us > 0 ? fixedPoint(row.pctCopy, 0) : "-",
                row.speedup > 0 ? fixedPoint(row.speedup, 2) : "-", row.pairedFp16Us > 0 ? fixedPoint(row.pairedFp16Us, 1) : "-",
                std::to_string(row.copies), smClockText(row), row.path});
    t.print(ctx.out);
    ctx.out << headline(r, o) << '\n';
  });
}

}  // namespace qs::cli
