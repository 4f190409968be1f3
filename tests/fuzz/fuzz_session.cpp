// libFuzzer target: the session (.qsession, HDF5) reader on arbitrary bytes, in this process
// (loadSessionInProcess: loadSession runs the same parse in a child process, whose coverage and
// crashes the fuzzer would not see). It checks the file and the HDF5 open policy, then reads every section (calibration, sensitivity, speed,
// plans, runs) with its types and extents. The plans a session holds are parsed as plans (what
// the GUI does with them). A session it accepts must save (or be refused with a qs::Error, e.g.
// a plan name the writer does not allow) and what was saved must load again. After every input
// no HDF5 object may be left open (a handle the reader forgot to close, on any path).
#include <hdf5.h>

#include "core/plan/plan.h"
#include "core/session/session.h"
#include "tests/fuzz/fuzz_common.h"

namespace {
int check(int result) {
  if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0) __builtin_trap();
  return result;
}
int one(const uint8_t* data, size_t size);
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return check(one(data, size)); }

namespace {
int one(const uint8_t* data, size_t size) {
  const std::string& path = qs::fuzz::scratchPath("session");
  if (!qs::fuzz::writeScratch(path, data, size)) return 0;
  qs::Session s;
  try {
    s = qs::loadSessionInProcess(path);
  } catch (const qs::Error& e) {
    qs::fuzz::refused(e);
    return 0;  // refused: the expected outcome for most inputs
  }
  for (const auto& [name, json] : s.plans) {
    try {
      (void)qs::planFromJson(json, path);
    } catch (const qs::Error&) {
    }
  }
  static const std::string saved = qs::fuzz::scratchPath("session_saved");
  try {
    qs::saveSession(s, saved);
  } catch (const qs::Error& e) {
    if (e.kind() != qs::ErrorKind::BadInput) __builtin_trap();  // only a name the writer refuses
    return 0;
  }
  try {
    (void)qs::loadSessionInProcess(saved);
  } catch (const qs::Error&) {
    __builtin_trap();  // we wrote it, we must read it
  }
  return 0;
}
}  // namespace
