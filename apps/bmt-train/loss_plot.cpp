#include "loss_plot.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <vector>

#include <bmtrain/runtime/error.hpp>

#include "output_files.hpp"

namespace bmt_train {

namespace {
struct Point {
  double x, y;
};

std::string polyline(const std::vector<Point>& pts, double x0, double x1, double y0, double y1, const char* color,
                     double width) {
  std::ostringstream os;
  os << "<polyline fill='none' stroke='" << color << "' stroke-width='" << width << "' points='";
  for (const auto& p : pts) {
    const double px = 70 + (p.x - x0) / std::max(1e-12, x1 - x0) * 600;
    const double py = 330 - (p.y - y0) / std::max(1e-12, y1 - y0) * 300;
    os << px << ',' << py << ' ';
  }
  os << "'/>\n";
  return os.str();
}
}  // namespace

void plot_loss_curve(const std::string& metrics_jsonl, const std::string& svg_path, const std::string& title,
                     double floor) {
  std::ifstream in(metrics_jsonl);
  BMT_REQUIRE(in, "loss plot: cannot read '" << metrics_jsonl << "'");
  std::vector<Point> train, eval;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step")) continue;
    const double step = j["step"].get<double>();
    if (j.contains("loss") && j["loss"].is_number()) train.push_back({step, j["loss"].get<double>()});
    if (j.contains("eval_loss") && j["eval_loss"].is_number()) eval.push_back({step, j["eval_loss"].get<double>()});
  }
  BMT_REQUIRE(!train.empty(), "loss plot: expected steps with a loss in '" << metrics_jsonl << "', found none");
  double x0 = train.front().x, x1 = train.back().x, y0 = 1e300, y1 = -1e300;
  for (const auto* v : {&train, &eval})
    for (const auto& p : *v) {
      y0 = std::min(y0, p.y);
      y1 = std::max(y1, p.y);
      x1 = std::max(x1, p.x);
    }
  if (floor >= 0) y0 = std::min(y0, floor);
  const double pad = 0.05 * std::max(1e-6, y1 - y0);
  y0 -= pad;
  y1 += pad;

  std::ostringstream out;
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='720' height='380' font-family='sans-serif' font-size='12'>\n"
      << "<rect width='720' height='380' fill='white'/>\n"
      << "<text x='360' y='18' text-anchor='middle' font-size='14'>" << title << "</text>\n"
      << "<line x1='70' y1='330' x2='670' y2='330' stroke='black'/><line x1='70' y1='30' x2='70' y2='330' stroke='black'/>\n";
  for (int k = 0; k <= 4; ++k) {
    const double y = y0 + (y1 - y0) * k / 4, py = 330 - 300.0 * k / 4;
    const double x = x0 + (x1 - x0) * k / 4, px = 70 + 600.0 * k / 4;
    out << "<text x='64' y='" << py + 4 << "' text-anchor='end'>" << std::setprecision(4) << y << "</text>\n"
        << "<text x='" << px << "' y='346' text-anchor='middle'>" << static_cast<long long>(x) << "</text>\n";
  }
  out << "<text x='370' y='370' text-anchor='middle'>step</text>\n"
      << "<text x='16' y='180' transform='rotate(-90 16 180)' text-anchor='middle'>loss (nats/token)</text>\n";
  out << polyline(train, x0, x1, y0, y1, "#1f77b4", 1.5);
  if (!eval.empty()) out << polyline(eval, x0, x1, y0, y1, "#d62728", 2.0);
  if (floor >= 0) {
    const double py = 330 - (floor - y0) / (y1 - y0) * 300;
    out << "<line x1='70' x2='670' y1='" << py << "' y2='" << py << "' stroke='gray' stroke-dasharray='4 3'/>\n"
        << "<text x='668' y='" << py - 4 << "' text-anchor='end' fill='gray'>lowest achievable " << floor << "</text>\n";
  }
  out << "<text x='80' y='46' fill='#1f77b4'>train loss</text>";
  if (!eval.empty()) out << "<text x='160' y='46' fill='#d62728'>eval loss</text>";
  out << "\n</svg>\n";
  write_output_file("--plot", svg_path, "the loss curve", out.str());
}

}  // namespace bmt_train
