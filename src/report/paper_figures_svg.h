// The figures of the paper page (Figures 2, 4, 5 and the thresholding sweep) as inline SVG, from a
// fca-paper-v2 document: fca's figure per corpus with its interval, the paper's value beside it.
#pragma once
#include <string>

#include "core/json.h"

namespace fca {

std::string paper_figures_html(const nlohmann::json& paper);

}  // namespace fca
