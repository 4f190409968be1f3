#include "core/session/session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/io/atomic_file.h"
#include "core/io/regular_file.h"
#include "core/io/hdf5_file.h"
#include "core/plan/layer_names.h"
#include "kernels/common/error.h"

namespace qs {

namespace {

constexpr const char* kFormatTag = "quantscope-session";

std::string layerGroup(size_t i) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "/calibration/layers/%04zu", i);
  return buf;
}

hsize_t hs(size_t n) { return hsize_t(n); }

// ---- writing ------------------------------------------------------------------------------

void writeChannelStats(h5::File& f, const std::string& g, const ChannelStats& s) {
  f.createGroup(g);
  const hsize_t n = hs(size_t(s.channels()));
  f.setAttr(g, "values", uint64_t(s.values));
  f.write(g + "/min", {n}, s.min.data());
  f.write(g + "/max", {n}, s.max.data());
  f.write(g + "/sum", {n}, s.sum.data());
  f.write(g + "/sum_sq", {n}, s.sumSq.data());
  f.write(g + "/nan", {n}, s.nan.data());
}

void writeHistogram(h5::File& f, const std::string& g, const Histogram& h) {
  f.createGroup(g);
  f.setAttr(g, "lo", double(h.lo));
  f.setAttr(g, "hi", double(h.hi));
  f.setAttr(g, "underflow", uint64_t(h.underflow));
  f.setAttr(g, "overflow", uint64_t(h.overflow));
  f.setAttr(g, "nan", uint64_t(h.nan));
  f.write(g + "/counts", {hs(h.counts.size())}, h.counts.data());
}

void writeLayerRefAttrs(h5::File& f, const std::string& g, const LayerRef& r) {
  if (!r.name.empty()) f.setAttr(g, "name", r.name);
  f.setAttr(g, "weight_name", r.weightName);
  f.setAttr(g, "role", r.role);
  f.setAttr(g, "block", int64_t(r.block));
  f.setAttr(g, "out_features", r.outFeatures);
  f.setAttr(g, "in_features", r.inFeatures);
  f.setAttr(g, "parameters", uint64_t(r.parameters));
}

void writeCalibration(h5::File& f, const CalibrationResult& c) {
  f.createGroup("/calibration/layers");
  f.setAttr("/calibration", "tokens", c.tokens);
  f.setAttr("/calibration", "windows", c.windows);
  f.setAttr("/calibration", "context", c.context);
  f.setAttr("/calibration", "text_source", c.textSource);
  f.setAttr("/calibration", "protocol", c.protocol);
  f.setAttr("/calibration", "layer_count", int64_t(c.layers.size()));
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const LayerCalibration& l = c.layers[i];
    const std::string g = layerGroup(i);
    f.createGroup(g);
    writeLayerRefAttrs(f, g, l.layer);
    writeChannelStats(f, g + "/activations", l.activations);
    writeHistogram(f, g + "/activation_hist", l.activationHist);
    writeHistogram(f, g + "/activation_abs_hist", l.activationAbsHist);
    writeChannelStats(f, g + "/weight_rows", l.weightRows);
    writeHistogram(f, g + "/weight_hist", l.weightHist);
  }
}

// g/layers/{weight_name, role, block, out_features, in_features, parameters} and g/formats.
void writeLayerTable(h5::File& f, const std::string& g, const std::vector<LayerRef>& layers,
                     const std::vector<QuantFormat>& fmts) {
  const size_t L = layers.size();
  f.createGroup(g + "/layers");
  std::vector<std::string> canonical, names, roles, formats;
  std::vector<int64_t> block, out, in;
  std::vector<uint64_t> params;
  bool named = true;
  for (const LayerRef& r : layers) {
    canonical.push_back(r.name);
    named = named && !r.name.empty();
    names.push_back(r.weightName);
    roles.push_back(r.role);
    block.push_back(r.block);
    out.push_back(r.outFeatures);
    in.push_back(r.inFeatures);
    params.push_back(r.parameters);
  }
  for (const QuantFormat& q : fmts) formats.push_back(formatToString(q));
  if (named && L > 0) f.writeStrings(g + "/layers/name", canonical);
  f.writeStrings(g + "/layers/weight_name", names);
  f.writeStrings(g + "/layers/role", roles);
  f.write(g + "/layers/block", {hs(L)}, block.data());
  f.write(g + "/layers/out_features", {hs(L)}, out.data());
  f.write(g + "/layers/in_features", {hs(L)}, in.data());
  f.write(g + "/layers/parameters", {hs(L)}, params.data());
  f.writeStrings(g + "/formats", formats);
}

void writeSpeed(h5::File& f, const SpeedTable& t) {
  const std::string g = "/speed";
  f.createGroup(g);
  f.setAttr(g, "device", t.device);
  writeLayerTable(f, g, t.layers, t.formats);
  const size_t LF = t.layers.size() * t.formats.size(), M = t.tokenCounts.size();
  f.write(g + "/token_counts", {hs(M)}, t.tokenCounts.data());
  std::vector<double> kernel, baseline;
  for (const SpeedEntry& e : t.entries) {
    kernel.push_back(e.kernelMicros);
    baseline.push_back(e.baselineMicros);
  }
  f.write(g + "/kernel_us", {hs(LF), hs(M)}, kernel.data());
  f.write(g + "/baseline_us", {hs(LF), hs(M)}, baseline.data());
}

void writeSensitivity(h5::File& f, const SensitivityTable& t) {
  const std::string g = "/sensitivity";
  f.createGroup(g);
  f.setAttr(g, "model_hash", t.modelHash);
  f.setAttr(g, "tokens", t.tokens);
  f.setAttr(g, "context", t.context);
  f.setAttr(g, "base_perplexity", t.basePerplexity);
  f.setAttr(g, "text_source", t.textSource);
  const size_t L = t.layers.size(), F = t.formats.size();
  writeLayerTable(f, g, t.layers, t.formats);
  auto matrix = [&](const char* name, double SensitivityEntry::*m) {
    std::vector<double> v;
    for (const SensitivityEntry& e : t.entries) v.push_back(e.*m);
    f.write(g + "/" + name, {hs(L), hs(F)}, v.data());
  };
  matrix("weight_sqnr_db", &SensitivityEntry::weightSqnrDb);
  matrix("weighted_error", &SensitivityEntry::weightedError);
  matrix("output_error", &SensitivityEntry::outputError);
  matrix("kl", &SensitivityEntry::kl);
  matrix("perplexity", &SensitivityEntry::perplexity);
  matrix("top1_agreement", &SensitivityEntry::top1Agreement);
  std::vector<uint8_t> app;
  for (const SensitivityEntry& e : t.entries) app.push_back(e.applicable ? 1 : 0);
  f.write(g + "/applicable", {hs(L), hs(F)}, app.data());
  std::vector<uint8_t> source;
  for (const SensitivityEntry& e : t.entries) source.push_back(uint8_t(e.klSource));
  f.write(g + "/kl_source", {hs(L), hs(F)}, source.data());
}

void writeRun(h5::File& f, const std::string& name, const RunTrace& run) {
  const std::string g = "/runs/" + name;
  const AccumulationResult& r = run.result;
  f.createGroup(g);
  f.setAttr(g, "tokens", r.tokens);
  f.setAttr(g, "windows", r.windows);
  f.setAttr(g, "context", r.context);
  f.setAttr(g, "scored_positions", r.scoredPositions);
  f.setAttr(g, "batches", r.batchesDone);
  f.setAttr(g, "kl", r.kl);
  f.setAttr(g, "perplexity", r.perplexity);
  f.setAttr(g, "base_perplexity", r.basePerplexity);
  f.setAttr(g, "top1_agreement", r.top1Agreement);
  f.setAttr(g, "protocol", r.protocol);
  f.writeString(g + "/plan", run.planJson);
  f.writeStrings(g + "/layer_formats", r.layerFormats);
  const size_t B = r.blocks.size();
  std::vector<double> l2, cos;
  for (const BlockError& b : r.blocks) {
    l2.push_back(b.relL2);
    cos.push_back(b.cosine);
  }
  f.write(g + "/block_rel_l2", {hs(B)}, l2.data());
  f.write(g + "/block_cosine", {hs(B)}, cos.data());
  l2.clear();
  cos.clear();
  for (const auto& batch : r.batches) {
    if (batch.size() != B) throw Error(ErrorKind::Internal, "run trace with ragged batches", {}, g);
    for (const BlockError& b : batch) {
      l2.push_back(b.relL2);
      cos.push_back(b.cosine);
    }
  }
  f.write(g + "/batch_rel_l2", {hs(r.batches.size()), hs(B)}, l2.data());
  f.write(g + "/batch_cosine", {hs(r.batches.size()), hs(B)}, cos.data());
}

// ---- reading ------------------------------------------------------------------------------

ChannelStats readChannelStats(const h5::File& f, const std::string& g, int64_t channels) {
  const std::vector<hsize_t> n{hsize_t(channels)};
  ChannelStats s;
  s.values = f.attrUInt(g, "values");
  s.min = f.readFloats(g + "/min", n);
  s.max = f.readFloats(g + "/max", n);
  s.sum = f.readDoubles(g + "/sum", n);
  s.sumSq = f.readDoubles(g + "/sum_sq", n);
  s.nan = f.readUInts(g + "/nan", n);
  for (size_t c = 0; c < s.nan.size(); ++c)
    if (s.nan[c] > s.values) f.fail(g + "/nan", "channel " + std::to_string(c) + " counts more NaNs than values");
  return s;
}

Histogram readHistogram(const h5::File& f, const std::string& g) {
  const double lo = f.attrDouble(g, "lo"), hi = f.attrDouble(g, "hi");
  std::vector<hsize_t> dims;
  std::vector<uint64_t> counts = f.readUInts(g + "/counts", {}, &dims, 1);
  if (counts.empty() || counts.size() > (1u << 24)) f.fail(g + "/counts", "bad bin count " + std::to_string(counts.size()));
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo < hi)) f.fail(g, "bad range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  Histogram h(int(counts.size()), float(lo), float(hi));
  h.counts = std::move(counts);
  h.underflow = f.attrUInt(g, "underflow");
  h.overflow = f.attrUInt(g, "overflow");
  h.nan = f.attrUInt(g, "nan");
  return h;
}

LayerRef readLayerRefAttrs(const h5::File& f, const std::string& g) {
  LayerRef r;
  if (f.hasAttr(g, "name")) r.name = f.attrString(g, "name");
  r.weightName = f.attrString(g, "weight_name");
  r.role = f.attrString(g, "role");
  r.block = int(f.attrInt(g, "block"));
  r.outFeatures = f.attrInt(g, "out_features");
  r.inFeatures = f.attrInt(g, "in_features");
  r.parameters = f.attrUInt(g, "parameters");
  // Shapes size the reads below: bound them by the file before anything is allocated.
  if (r.outFeatures < 1 || r.inFeatures < 1 || uint64_t(r.outFeatures) > f.size() ||
      uint64_t(r.inFeatures) > f.size())
    f.fail(g, "bad layer shape [" + std::to_string(r.outFeatures) + ", " + std::to_string(r.inFeatures) + "]");
  return r;
}

CalibrationResult readCalibration(const h5::File& f) {
  CalibrationResult c;
  const std::string g = "/calibration";
  c.tokens = f.attrInt(g, "tokens");
  c.windows = f.attrInt(g, "windows");
  c.context = f.attrInt(g, "context");
  c.textSource = f.attrString(g, "text_source");
  c.protocol = f.attrString(g, "protocol");
  const int64_t n = f.attrInt(g, "layer_count");
  if (n < 0 || uint64_t(n) > f.size() / 64) f.fail(g, "bad layer_count " + std::to_string(n));
  if (int64_t(f.children(g + "/layers").size()) != n)
    f.fail(g + "/layers", "holds " + std::to_string(f.children(g + "/layers").size()) + " layers, layer_count says " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i) {
    const std::string lg = layerGroup(size_t(i));
    LayerCalibration l;
    l.layer = readLayerRefAttrs(f, lg);
    l.activations = readChannelStats(f, lg + "/activations", l.layer.inFeatures);
    l.activationHist = readHistogram(f, lg + "/activation_hist");
    l.activationAbsHist = readHistogram(f, lg + "/activation_abs_hist");
    l.weightRows = readChannelStats(f, lg + "/weight_rows", l.layer.outFeatures);
    l.weightHist = readHistogram(f, lg + "/weight_hist");
    c.layers.push_back(std::move(l));
  }
  return c;
}

void readLayerTable(const h5::File& f, const std::string& g, std::vector<LayerRef>& layers,
                    std::vector<QuantFormat>& formats) {
  const std::vector<std::string> names = f.readStrings(g + "/layers/weight_name");
  const int64_t L = int64_t(names.size());
  // Canonical names: sessions written since session 10; older ones key rows by weight name only.
  const std::vector<std::string> canonical =
      f.exists(g + "/layers/name") ? f.readStrings(g + "/layers/name", L) : std::vector<std::string>(size_t(L));
  const std::vector<std::string> roles = f.readStrings(g + "/layers/role", L);
  const std::vector<hsize_t> l1{hsize_t(L)};
  const auto block = f.readInts(g + "/layers/block", l1), out = f.readInts(g + "/layers/out_features", l1),
             in = f.readInts(g + "/layers/in_features", l1);
  const auto params = f.readUInts(g + "/layers/parameters", l1);
  for (int64_t i = 0; i < L; ++i) {
    LayerRef r;
    r.name = canonical[size_t(i)];
    r.weightName = names[size_t(i)];
    r.role = roles[size_t(i)];
    r.block = int(block[size_t(i)]);
    r.outFeatures = out[size_t(i)];
    r.inFeatures = in[size_t(i)];
    r.parameters = params[size_t(i)];
    layers.push_back(std::move(r));
  }
  for (const std::string& s : f.readStrings(g + "/formats")) {
    try {
      formats.push_back(parseQuantFormat(s));
    } catch (const Error& e) {
      f.fail(g + "/formats", e.message());
    }
  }
}

SpeedTable readSpeed(const h5::File& f) {
  SpeedTable t;
  const std::string g = "/speed";
  t.device = f.attrString(g, "device");
  readLayerTable(f, g, t.layers, t.formats);
  t.tokenCounts = f.readInts(g + "/token_counts", {});
  const std::vector<hsize_t> dims{hsize_t(t.layers.size() * t.formats.size()), hsize_t(t.tokenCounts.size())};
  const auto kernel = f.readDoubles(g + "/kernel_us", dims), baseline = f.readDoubles(g + "/baseline_us", dims);
  for (size_t i = 0; i < kernel.size(); ++i) t.entries.push_back({kernel[i], baseline[i]});
  return t;
}

SensitivityTable readSensitivity(const h5::File& f) {
  SensitivityTable t;
  const std::string g = "/sensitivity";
  t.modelHash = f.attrString(g, "model_hash");
  t.tokens = f.attrInt(g, "tokens");
  t.context = f.attrInt(g, "context");
  t.basePerplexity = f.attrDouble(g, "base_perplexity");
  t.textSource = f.attrString(g, "text_source");
  readLayerTable(f, g, t.layers, t.formats);
  const int64_t L = int64_t(t.layers.size());
  const std::vector<hsize_t> lf{hsize_t(L), hsize_t(t.formats.size())};
  // The table is sized by its data, never by the lists alone: 5000 layer names × 5000 format
  // names fit in 300 KB and would claim 25M entries. The first matrix is read (its extent
  // checked against the file's size) before anything is allocated for the others.
  if (L > 0 && t.formats.size() > kMaxTableCells / uint64_t(L))
    f.fail(g + "/formats", std::to_string(L) + " layers x " + std::to_string(t.formats.size()) +
                               " formats exceed the limit of " + std::to_string(kMaxTableCells) + " table cells");
  std::vector<double> first = f.readDoubles(g + "/weight_sqnr_db", lf);
  t.entries.resize(size_t(L) * t.formats.size());
  auto matrix = [&](const char* name, double SensitivityEntry::*m) {
    const auto v = first.empty() ? f.readDoubles(g + "/" + name, lf) : std::move(first);
    first.clear();
    for (size_t i = 0; i < v.size(); ++i) t.entries[i].*m = v[i];
  };
  matrix("weight_sqnr_db", &SensitivityEntry::weightSqnrDb);
  matrix("weighted_error", &SensitivityEntry::weightedError);
  matrix("output_error", &SensitivityEntry::outputError);
  matrix("kl", &SensitivityEntry::kl);
  matrix("perplexity", &SensitivityEntry::perplexity);
  matrix("top1_agreement", &SensitivityEntry::top1Agreement);
  const auto app = f.readUInts(g + "/applicable", lf);
  for (size_t i = 0; i < app.size(); ++i) t.entries[i].applicable = app[i] != 0;
  // kl_source (KlSource) came with the estimate mode; before it every KL was measured.
  if (f.exists(g + "/kl_source")) {
    const auto source = f.readUInts(g + "/kl_source", lf);
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] > uint64_t(KlSource::Estimated))
        f.fail(g + "/kl_source", "unknown KL source " + std::to_string(source[i]));
      t.entries[i].klSource = KlSource(source[i]);
    }
  }
  for (SensitivityEntry& e : t.entries)
    if (e.klSource == KlSource::None && std::isfinite(e.kl)) e.klSource = KlSource::Measured;
  return t;
}

RunTrace readRun(const h5::File& f, const std::string& name) {
  const std::string g = "/runs/" + name;
  RunTrace run;
  AccumulationResult& r = run.result;
  r.tokens = f.attrInt(g, "tokens");
  r.windows = f.attrInt(g, "windows");
  r.context = f.attrInt(g, "context");
  r.scoredPositions = f.attrInt(g, "scored_positions");
  r.batchesDone = f.attrInt(g, "batches");
  r.kl = f.attrDouble(g, "kl");
  r.perplexity = f.attrDouble(g, "perplexity");
  r.basePerplexity = f.attrDouble(g, "base_perplexity");
  r.top1Agreement = f.attrDouble(g, "top1_agreement");
  r.protocol = f.attrString(g, "protocol");
  run.planJson = f.readString(g + "/plan");
  r.layerFormats = f.readStrings(g + "/layer_formats");
  std::vector<hsize_t> dims;
  const auto l2 = f.readDoubles(g + "/block_rel_l2", {}, &dims, 1);
  const auto cos = f.readDoubles(g + "/block_cosine", dims);
  const size_t B = l2.size();
  for (size_t b = 0; b < B; ++b) r.blocks.push_back({l2[b], cos[b]});
  std::vector<hsize_t> bd;
  const auto bl2 = f.readDoubles(g + "/batch_rel_l2", {}, &bd, 2);
  if (bd[1] != hsize_t(B)) f.fail(g + "/batch_rel_l2", "has " + std::to_string(bd[1]) + " blocks, block_rel_l2 " + std::to_string(B));
  const auto bcos = f.readDoubles(g + "/batch_cosine", bd);
  for (hsize_t i = 0; i < bd[0]; ++i) {
    std::vector<BlockError> row;
    for (size_t b = 0; b < B; ++b) row.push_back({bl2[size_t(i) * B + b], bcos[size_t(i) * B + b]});
    r.batches.push_back(std::move(row));
  }
  return run;
}

}  // namespace

void checkSessionName(const std::string& name, const std::string& what) {
  bool ok = !name.empty() && name.size() <= 200 && name != "." && name != "..";
  for (unsigned char c : name)
    if (c == '/' || c < 0x20 || c == 0x7f) ok = false;
  if (!ok)
    throw Error(ErrorKind::BadInput,
                "'" + name + "' cannot name a " + what +
                    " (1-200 bytes, no '/' or control characters, not '.' or '..')",
                {}, what + " name");
}

namespace {

// The session as an HDF5 file image, built in memory by the writer.
std::vector<std::byte> sessionImage(const Session& s, const std::string& path) {
  auto lock = h5::lock();
  std::vector<std::byte> image;
  h5::File f = h5::File::createInMemory(path);
  f.setAttr("/", "format", std::string(kFormatTag));
  f.setAttr("/", "schema_version", kSessionSchemaVersion);
  f.setAttr("/", "model_path", s.modelPath);
  f.setAttr("/", "model_hash", s.modelHash);
  f.setAttr("/", "written_by", std::string("quantscope ") + QS_VERSION);
  if (s.calibration) writeCalibration(f, *s.calibration);
  if (s.sensitivity) writeSensitivity(f, *s.sensitivity);
  if (s.speed) writeSpeed(f, *s.speed);
  if (!s.plans.empty()) f.createGroup("/plans");
  for (const auto& [name, json] : s.plans) f.writeString("/plans/" + name, json);
  if (!s.runs.empty()) f.createGroup("/runs");
  for (const auto& [name, run] : s.runs) writeRun(f, name, run);
  image = f.image();
  f.close();
  return image;
}

Session readSession(const h5::File& f) {
  Session s;
  if (!f.hasAttr("/", "format") || f.attrString("/", "format") != kFormatTag)
    f.fail("/@format", "not a Quantscope session (no format tag '" + std::string(kFormatTag) + "')");
  const int64_t version = f.attrInt("/", "schema_version");
  if (version != kSessionSchemaVersion)
    f.fail("/@schema_version", "schema version " + std::to_string(version) + " is not one this build reads (" +
                                   std::to_string(kSessionSchemaVersion) + ")");
  s.modelPath = f.attrString("/", "model_path");
  s.modelHash = f.attrString("/", "model_hash");
  if (f.exists("/calibration")) s.calibration = readCalibration(f);
  if (f.exists("/sensitivity")) s.sensitivity = readSensitivity(f);
  if (f.exists("/speed")) s.speed = readSpeed(f);
  if (f.exists("/plans"))
    for (const std::string& name : f.children("/plans")) s.plans[name] = f.readString("/plans/" + name);
  if (f.exists("/runs"))
    for (const std::string& name : f.children("/runs")) s.runs[name] = readRun(f, name);
  return s;
}


// ---- reading in a child process ---------------------------------------------------------------
// A session file may come from anyone, and libhdf5 1.10 (Debian 12) is not memory-safe on corrupt
// files: fuzz_session found copies from wild pointers and reads past buffers inside the library
// (SIGSEGV in `calibrate --session`), some of which no check of ours can prevent. So the file is
// parsed in a forked child. A crash there, or no answer in kReadSeconds, is BadInput naming the
// file; an Error is passed back as it was; what the child read is written back by our own
// writer as an HDF5 image through a pipe, and the parent reads that image, whose structure is
// ours. The parent holds the HDF5 lock across the fork, so no other thread is inside libhdf5.
constexpr int kReadSeconds = 30;

void putString(std::string& out, const std::string& v) {
  const uint32_t n = uint32_t(v.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += v;
}

bool getString(const std::string& in, size_t& pos, std::string& v) {
  uint32_t n = 0;
  if (pos + sizeof n > in.size()) return false;
  std::memcpy(&n, in.data() + pos, sizeof n);
  pos += sizeof n;
  if (n > in.size() - pos) return false;
  v.assign(in, pos, n);
  pos += n;
  return true;
}

[[noreturn]] void childRead(const std::string& path, int out) {
  h5::enterForkedReader();
  const int devNull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (devNull >= 0) ::dup2(devNull, STDERR_FILENO);  // a crash inside libhdf5 is reported by the parent
  std::string msg;
  try {
    const h5::File f = h5::File::openRead(path);
    const Session s = readSession(f);
    const std::vector<std::byte> image = sessionImage(s, path);
    msg = "S";
    msg.append(reinterpret_cast<const char*>(image.data()), image.size());
  } catch (const Error& e) {
    msg = "E";
    msg += char(e.kind());
    putString(msg, e.file());
    putString(msg, e.field());
    putString(msg, e.message());
  } catch (const std::exception& e) {
    msg = "X";
    msg += e.what();
  }
  size_t done = 0;
  while (done < msg.size()) {
    const ssize_t n = ::write(out, msg.data() + done, msg.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ::_exit(3);
    done += size_t(n);
  }
  ::_exit(0);  // no atexit handlers (libhdf5's own) in the child
}

}  // namespace

Session loadSessionInProcess(const std::string& path) {
  auto lock = h5::lock();
  const h5::File f = h5::File::openRead(path);
  return readSession(f);
}

Session loadSession(const std::string& path) {
  auto lock = h5::lock();
  // The regular-file check first, as openRead makes it (a FIFO must not block the child).
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(ErrorKind::BadInput, "cannot open the session file (" + std::string(std::strerror(errno)) + ")", path,
                "file");
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorKind::BadInput, "is " + fileKindName(unsigned(st.st_mode)) + ", not a regular session file", path,
                "file");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(ErrorKind::Internal, "cannot create a pipe", path, "file");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(ErrorKind::Internal, "cannot fork to read the session", path, "file");
  }
  if (pid == 0) {
    ::close(fds[0]);
    childRead(path, fds[1]);
  }
  ::close(fds[1]);
  std::string in;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kReadSeconds);
  bool timedOut = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timedOut = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, int(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;  // the deadline check above ends it
    char buf[65536];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    in.append(buf, size_t(n));
  }
  ::close(fds[0]);
  if (timedOut) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timedOut)
    throw Error(ErrorKind::BadInput, "reading it took over " + std::to_string(kReadSeconds) + " s (a corrupt file?)", path,
                "HDF5 structure");
  if (WIFSIGNALED(status))
    throw Error(ErrorKind::BadInput,
                "the HDF5 library crashed reading it (signal " + std::to_string(WTERMSIG(status)) + "): a corrupt file",
                path, "HDF5 structure");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || in.empty())
    throw Error(ErrorKind::BadInput, "the HDF5 library could not read it (the reader stopped): a corrupt file", path,
                "HDF5 structure");
  if (in[0] == 'E') {
    size_t pos = 2;
    std::string file, field, message;
    if (in.size() < 2 || !getString(in, pos, file) || !getString(in, pos, field) || !getString(in, pos, message))
      throw Error(ErrorKind::Internal, "garbled answer from the session reader", path, "file");
    throw Error(ErrorKind(in[1]), message, file, field);
  }
  if (in[0] != 'S') throw Error(ErrorKind::Internal, "the session reader failed: " + in.substr(1), path, "file");
  std::vector<std::byte> image(in.size() - 1);
  std::memcpy(image.data(), in.data() + 1, image.size());
  in.clear();
  const h5::File f = h5::File::openImage(path, image);
  return readSession(f);
}

void saveSession(const Session& s, const std::string& path) {
  for (const auto& [name, _] : s.plans) checkSessionName(name, "plan");
  for (const auto& [name, _] : s.runs) checkSessionName(name, "run");
  // Built in memory, then written through AtomicFile: one write path (and one test hook) for
  // every file, and a SIGKILL mid-save leaves the previous session as it was.
  const std::vector<std::byte> image = sessionImage(s, path);
  AtomicFile out(path);
  out.writeAt(0, image);
  out.commit();
}

Session openSessionFor(const std::string& path, const std::string& modelPath,
                       const std::string& modelHash, const ModelGraph& graph) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    Session s;
    s.modelPath = modelPath;
    s.modelHash = modelHash;
    return s;
  }
  Session s = loadSession(path);
  if (s.modelHash != modelHash)
    throw Error(ErrorKind::BadInput,
                "the session was made for model " + s.modelHash + " (" + s.modelPath + "), not for " +
                    modelHash + " (" + modelPath + ")",
                path, "model_hash");
  s.modelPath = modelPath;
  if (s.calibration) {
    std::vector<LayerRef> rows;
    for (const LayerCalibration& l : s.calibration->layers) rows.push_back(l.layer);
    nameLayerRows(rows, graph, path, "/calibration/layers");
    for (size_t i = 0; i < rows.size(); ++i) s.calibration->layers[i].layer = std::move(rows[i]);
  }
  if (s.sensitivity) nameLayerRows(s.sensitivity->layers, graph, path, "/sensitivity/layers/weight_name");
  if (s.speed) nameLayerRows(s.speed->layers, graph, path, "/speed/layers/weight_name");
  return s;
}

}  // namespace qs
