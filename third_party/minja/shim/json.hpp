// minja includes <json.hpp> (llama.cpp's vendored nlohmann/json); Debian's nlohmann-json3-dev
// installs it as <nlohmann/json.hpp>. This shim is ours, not part of minja.
#pragma once
#include <nlohmann/json.hpp>
