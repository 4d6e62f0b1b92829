#pragma once
// The loss curve of a run as an SVG picture, drawn from its metrics file.
#include <string>

namespace bmt_train {

// Reads `metrics_jsonl` (one JSON object per step with "step" and "loss", and "eval_loss" on some
// steps) and writes `svg_path`. Throws bmt::Error if the file cannot be read or written.
void plot_loss_curve(const std::string& metrics_jsonl, const std::string& svg_path, const std::string& title,
                     double floor = -1.0);

}  // namespace bmt_train
