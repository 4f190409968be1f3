#pragma once
// The lab definitions, split by theme; lab_catalog.cpp puts them in chapter order.
#include <vector>

#include "app/labs/lab_types.h"

namespace qs::labs {
void addWeightLabs(std::vector<LabDef>& labs);      // 1, 2, 5, 6, 11, 13
void addActivationLabs(std::vector<LabDef>& labs);  // 3, 4, 7, 15, 18
void addKernelLabs(std::vector<LabDef>& labs);      // 8, 9, 10, 12, 14, 16, 17
}  // namespace qs::labs
