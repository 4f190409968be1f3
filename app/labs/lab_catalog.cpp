#include <algorithm>
#include <cstdio>

#include "app/labs/labs_internal.h"

namespace qs::labs {

const std::vector<LabDef>& labCatalog() {
  static const std::vector<LabDef> labs = [] {
    std::vector<LabDef> v;
    addWeightLabs(v);
    addActivationLabs(v);
    addKernelLabs(v);
    std::sort(v.begin(), v.end(), [](const LabDef& a, const LabDef& b) { return a.number < b.number; });
    return v;
  }();
  return labs;
}

std::string labTextResource(int number) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ":/labs/ch%02d.md", number);
  return buf;
}

}  // namespace qs::labs
