#pragma once
// The one spelling people see for what a GEMM kernel runs: the format's (kernels/quant's
// formatToString, as in plans and the CLI's --format) — "int4-g128-sym", "int8-ch-sym:int8-tok",
// "fp8e4m3-ch". The kernels' own scheme names ("w4a16-g128", GemmScheme::name()) stay internal
// keys and are accepted on input as aliases only.
#include <string>
#include <vector>

#include "kernels/gemm/gemm_types.h"
#include "kernels/quant/quant_format.h"

namespace qs {

// The format that runs as `scheme` (gemmSchemeFor(formatOfScheme(s)) == s for every scheme).
QuantFormat formatOfScheme(const GemmScheme& scheme);
// Its spelling: formatToString(formatOfScheme(scheme)).
std::string schemeSpelling(const GemmScheme& scheme);

// A scheme from what a person typed: a format spelling (any form parseQuantFormat reads) or a
// kernel scheme name. Throws ErrorKind::BadInput naming `field` and listing the spellings when
// the text is neither or no kernel runs the format.
GemmScheme parseSchemeText(const std::string& text, const std::string& field);

}  // namespace qs
