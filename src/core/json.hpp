// core/json.hpp: the two JSON text helpers Trident's hand-written JSON files need (safetensors
// headers and index, Hugging Face config.json).
//
// Layer: core. Local, pure. RFC 8259 string escapes; numbers as the shortest decimal that reads
// back bit-exactly (callers pass finite values: JSON has no NaN or infinity).
#pragma once

#include <string>

namespace trident {

/// JSON string literal of `s`, quotes included.
std::string json_str(const std::string& s);

/// Shortest decimal (up to 17 significant digits) that reads back as `v`.
std::string json_num(double v);

}  // namespace trident
