#pragma once
// Where the bundled data lives: $QS_DATASETS if set, else the source tree's datasets/ (compiled
// in), else ../share/quantscope/datasets next to the executable (an installed layout).
#include <string>

namespace qs {

std::string datasetsDir();
// datasets/models/stories260K/stories260K.bin and its tokenizer
std::string defaultModelPath();
std::string defaultTokenizerPath();

}  // namespace qs
