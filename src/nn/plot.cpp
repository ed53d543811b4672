// Training curves as a PNG, drawn by gnuplot (Debian's gnuplot-nox): the
// script and its data go down a pipe, nothing is written but the picture.
// No C++ plotting library is packaged in Debian 12 that writes PNG without a
// display stack; gnuplot is the field's usual tool for this.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/nn/callbacks.h"

namespace tensorgrad::nn {

namespace {
bool gnuplot_installed() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start);
    const std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && access((dir + "/gnuplot").c_str(), X_OK) == 0) return true;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

std::string quoted(const std::string& s) {  // gnuplot single quotes: '' is a quote
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('\'');
  for (char c : s) {
    out.push_back(c);
    if (c == '\'') out.push_back('\'');
  }
  out.push_back('\'');
  return out;
}

std::string number(double v) {
  if (!std::isfinite(v)) return "NaN";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// gnuplot widens an empty range itself but warns on stderr ("empty x range"
// after one epoch, "empty y range" for a constant series) and refuses a
// series without a finite value; explicit ranges in those cases keep the
// plot silent and drawn.
std::string panel_ranges(const History& history, const std::vector<double>& train, const std::vector<double>* val) {
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (size_t e = 0; e < train.size(); ++e) {
    const double epoch = e < history.epoch.size() ? history.epoch[e] + 1 : double(e) + 1;
    x_lo = std::min(x_lo, epoch);
    x_hi = std::max(x_hi, epoch);
    for (const double v : {train[e], val && e < val->size() ? (*val)[e] : NAN})
      if (std::isfinite(v)) {
        y_lo = std::min(y_lo, v);
        y_hi = std::max(y_hi, v);
      }
  }
  std::string s;
  if (!(x_lo < x_hi)) {
    const double x = std::isfinite(x_lo) ? x_lo : 1.0;
    s += "set xrange [" + number(x - 1) + ":" + number(x + 1) + "]\n";
  } else {
    s += "set autoscale x\n";
  }
  if (!(y_lo <= y_hi)) {
    s += "set yrange [-1:1]\n";
  } else if (y_lo == y_hi) {
    const double pad = y_lo == 0 ? 1.0 : std::abs(y_lo) * 0.05;
    s += "set yrange [" + number(y_lo - pad) + ":" + number(y_hi + pad) + "]\n";
  } else {
    s += "set autoscale y\n";
  }
  return s;
}
}  // namespace

std::string history_gnuplot_script(const History& history, const std::string& png_path) {
  std::vector<std::string> panels;
  if (history.has("loss")) panels.push_back("loss");
  for (const auto& [k, v] : history.history)
    if (k != "loss" && k.rfind("val_", 0) != 0) panels.push_back(k);
  for (const auto& [k, v] : history.history)  // validation keys without a training twin
    if (k.rfind("val_", 0) == 0 && !history.has(k.substr(4))) panels.push_back(k);
  const size_t n = std::max<size_t>(panels.size(), 1);
  // noenhanced: a key such as learning_rate is text, not "learning" with a
  // subscript "rate" (enhanced mode's markup).
  std::string s = "set terminal pngcairo noenhanced size 900," + std::to_string(240 * n + 40) + " font ',10'\n";
  s += "set output " + quoted(png_path) + "\n";
  s += "set multiplot layout " + std::to_string(n) + ",1\nset grid\nset key outside right\nset xlabel 'epoch'\n";
  for (size_t p = 0; p < panels.size(); ++p) {
    const std::string& key = panels[p];
    const std::vector<double>& train = history.history.at(key);
    const std::string val_key = "val_" + key;
    const bool has_val = key.rfind("val_", 0) != 0 && history.has(val_key);
    const std::string block = "$d" + std::to_string(p);
    s += block + " << EOD\n";
    for (size_t e = 0; e < train.size(); ++e) {
      const int epoch = e < history.epoch.size() ? history.epoch[e] + 1 : int(e) + 1;
      s += std::to_string(epoch);
      s += ' ';
      s += number(train[e]);
      if (has_val) {
        s += ' ';
        s += number(e < history[val_key].size() ? history[val_key][e] : NAN);
      }
      s += '\n';
    }
    s += "EOD\nset title " + quoted(key) + "\n";
    s += panel_ranges(history, train, has_val ? &history[val_key] : nullptr);
    s += "plot " + block + " using 1:2 with linespoints title " + quoted(key.rfind("val_", 0) == 0 ? "validation" : "training");
    if (has_val) s += ", " + block + " using 1:3 with linespoints title 'validation'";
    s += "\n";
  }
  s += "unset multiplot\nset output\n";
  return s;
}

bool plot_history(const History& history, const std::string& png_path) {
  if (!gnuplot_installed()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log_message(LogLevel::Warning, "plot: gnuplot is not installed (Debian's gnuplot-nox; scripts/setup.sh --plot "
                                     "installs it); no picture is written, training goes on");
    return false;
  }
  if (history.history.empty()) throw ValueError("plot: the history is empty; train at least one epoch first");
  const std::string script = history_gnuplot_script(history, png_path);
  std::FILE* pipe = popen("gnuplot", "w");
  if (!pipe) throw IOError("plot: could not start gnuplot");
  const bool written = std::fwrite(script.data(), 1, script.size(), pipe) == script.size();
  const int status = pclose(pipe);
  if (!written || status != 0)
    throw IOError("plot: gnuplot failed (exit status " + std::to_string(status) + ") writing '" + png_path +
                  "'; check that its directory exists and is writable");
  if (std::FILE* f = std::fopen(png_path.c_str(), "rb")) {
    std::fclose(f);
    return true;
  }
  throw IOError("plot: gnuplot wrote no file at '" + png_path + "'; check that its directory exists and is writable");
}

bool History::plot(const std::string& png_path) const { return plot_history(*this, png_path); }

PlotHistory::PlotHistory(std::string png_path) : path_(std::move(png_path)) {}

void PlotHistory::on_train_begin(Logs& logs) { recorded_.on_train_begin(logs); }

void PlotHistory::on_epoch_end(int epoch, Logs& logs) {
  recorded_.on_epoch_end(epoch, logs);
  if (rank() == 0) plot_history(recorded_, path_);  // data-parallel: rank 0 writes
}

CallbackState PlotHistory::get_state() const {
  CallbackState s;
  for (size_t i = 0; i < recorded_.epoch.size(); ++i) s.values["epoch/" + std::to_string(i)] = recorded_.epoch[i];
  for (const auto& [key, values] : recorded_.history)
    for (size_t i = 0; i < values.size(); ++i) s.values[key + "/" + std::to_string(i)] = values[i];
  return s;
}

void PlotHistory::set_state(const CallbackState& state) {
  if (!state.tensors.empty())
    throw ValueError("PlotHistory.set_state: the state has tensors ('" + state.tensors.front().first +
                     "', ...) but PlotHistory keeps none; give a state from PlotHistory.get_state()");
  History h;
  std::map<std::string, std::map<size_t, double>> by_key;
  for (const auto& [name, value] : state.values) {
    const size_t slash = name.rfind('/');
    size_t index = 0;
    const char* digits = slash == std::string::npos ? nullptr : name.c_str() + slash + 1;
    char* end = nullptr;
    if (digits && *digits >= '0' && *digits <= '9') index = std::strtoul(digits, &end, 10);
    if (!end || *end != '\0' || slash == 0)
      throw ValueError("PlotHistory.set_state: key '" + name +
                       "' is not '<log key>/<index>'; give a state from PlotHistory.get_state()");
    by_key[name.substr(0, slash)][index] = value;
  }
  for (const auto& [key, values] : by_key) {
    size_t expected = 0;
    for (const auto& [index, value] : values) {
      if (index != expected++)
        throw ValueError("PlotHistory.set_state: '" + key + "/" + std::to_string(expected - 1) +
                         "' is missing (the indices of a key count from 0 without gaps)");
      if (key == "epoch") h.epoch.push_back(int(value));
      else h.history[key].push_back(value);
    }
  }
  recorded_ = std::move(h);
}

}  // namespace tensorgrad::nn
