// The callbacks that write files (io/callbacks.h).
#include "tensorgrad/io/callbacks.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "io/training_state.h"
#include "nn/callback_state.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/io/saving.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::io {

namespace {

void check_save_freq(const SaveFreq& f, const char* who) {
  if (f.batches)
    throw ValueError(std::string(who) + ": save_freq = " + std::to_string(*f.batches) +
                     " (every N batches) is not implemented in tensorgrad; give save_freq = \"epoch\"");
  if (f.when != "epoch")
    throw ValueError(std::string(who) + ": save_freq must be \"epoch\" (a number of batches is not implemented); "
                     "got \"" + f.when + "\"");
}

void make_folder(const std::filesystem::path& folder, const char* who) {
  if (folder.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec)
    throw IOError(std::string(who) + ": cannot create the folder '" + folder.string() + "': " + ec.message() +
                  "; check the path and its permissions");
}

// ---- the filepath's placeholders (a subset of Python's str.format) ----

// One piece of a filepath: literal text, or a {key:spec} placeholder.
struct Piece {
  std::string text;  // the literal, or the key
  bool placeholder = false;
  std::string sign;  // "", "+", " "
  bool zero = false;
  int width = 0, precision = -1;
  char type = 0;  // 0 (none), 'd', 'f', 'F', 'e', 'E', 'g', 'G', '%'
};

Piece parse_spec(const std::string& key, const std::string& spec, const std::string& filepath) {
  Piece p;
  p.placeholder = true;
  p.text = key;
  size_t i = 0;
  auto bad = [&] {
    return ValueError("ModelCheckpoint: the format spec '" + spec + "' of {" + key + "} in '" + filepath +
                      "' is not supported; give [sign][0][width][.precision][type] with type d, f, e, g or % "
                      "(as \"{epoch:02d}\" or \"{val_loss:.4f}\")");
  };
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) {
    if (spec[i] != '-') p.sign = spec.substr(i, 1);
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    p.zero = true;
    ++i;
  }
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) && p.width < 1000)
    p.width = p.width * 10 + (spec[i++] - '0');
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    if (i == spec.size() || !std::isdigit(static_cast<unsigned char>(spec[i]))) throw bad();
    p.precision = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) && p.precision < 100)
      p.precision = p.precision * 10 + (spec[i++] - '0');
  }
  if (i < spec.size() && std::string("dfFeEgG%").find(spec[i]) != std::string::npos) p.type = spec[i++];
  if (i != spec.size() || (p.type == 'd' && p.precision >= 0)) throw bad();
  return p;
}

std::vector<Piece> parse_filepath(const std::string& filepath) {
  std::vector<Piece> pieces(1);
  for (size_t i = 0; i < filepath.size(); ++i) {
    const char c = filepath[i];
    if ((c == '{' || c == '}') && i + 1 < filepath.size() && filepath[i + 1] == c) {
      pieces.back().text += c;  // "{{" and "}}"
      ++i;
    } else if (c == '}') {
      throw ValueError("ModelCheckpoint: a single '}' at character " + std::to_string(i) + " of '" + filepath +
                       "'; write '}}' for a literal brace");
    } else if (c == '{') {
      const size_t close = filepath.find('}', i);
      if (close == std::string::npos)
        throw ValueError("ModelCheckpoint: the '{' at character " + std::to_string(i) + " of '" + filepath +
                         "' is not closed; write '{{' for a literal brace");
      const std::string field = filepath.substr(i + 1, close - i - 1);
      const size_t colon = field.find(':');
      const std::string key = field.substr(0, colon);
      if (key.empty() || key.find('{') != std::string::npos)
        throw ValueError("ModelCheckpoint: the placeholder '{" + field + "}' in '" + filepath +
                         "' names no key; give a log key or epoch, as {epoch} or {val_loss:.4f}");
      pieces.push_back(parse_spec(key, colon == std::string::npos ? "" : field.substr(colon + 1), filepath));
      pieces.emplace_back();
      i = close;
    } else {
      pieces.back().text += c;
    }
  }
  return pieces;
}

// Python's str() of a float: the shortest digits that read back, fixed
// notation for exponents -4 .. 15, else d.ddde+XX; "1.0" for whole numbers.
std::string python_str(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // "-1.2345e-05"
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1);
  char tail[16];
  std::snprintf(tail, sizeof tail, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + tail;
}

std::string pad(std::string s, const Piece& p) {
  if (!p.sign.empty() && s[0] != '-') s = p.sign + s;
  if (int(s.size()) >= p.width) return s;
  const size_t fill = size_t(p.width) - s.size();
  if (!p.zero) return std::string(fill, ' ') + s;
  const size_t after_sign = (s[0] == '-' || s[0] == '+' || s[0] == ' ') ? 1 : 0;
  return s.insert(after_sign, fill, '0');
}

std::string format_value(const Piece& p, double value, bool integer) {
  if (!std::isfinite(value) && p.type != 'd') {
    // printf pads inf and nan with spaces whatever the '0' flag says, and
    // prints a NaN's sign; Python's str.format pads them with zeros as it
    // pads numbers and never shows a NaN's sign ("00000inf" for 08.3f).
    std::string s = std::isnan(value) ? "nan" : value < 0 ? "-inf" : "inf";
    if (p.type == 'F' || p.type == 'E' || p.type == 'G')
      for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    if (p.type == '%') s += '%';
    return pad(s, p);
  }
  if (p.type == 0) {
    if (integer) return pad(std::to_string(int64_t(value)), p);
    return pad(python_str(value), p);
  }
  std::string printf_spec = "%";  // appended, not "%" + ...: GCC 12 warns falsely (-Wrestrict) on that form
  printf_spec.append(p.sign).append(p.zero ? "0" : "").append(p.width ? std::to_string(p.width) : "");
  char buf[512];
  if (p.type == 'd') {
    if (!integer)
      throw ValueError("ModelCheckpoint: {" + p.text + ":...d} formats a whole number, but '" + p.text +
                       "' is a metric (a float); use f, e or g, as {" + p.text + ":.4f}");
    std::snprintf(buf, sizeof buf, (printf_spec + "lld").c_str(), static_cast<long long>(value));
    return buf;
  }
  const int precision = p.precision >= 0 ? p.precision : 6;
  const char type = p.type == '%' ? 'f' : p.type;
  const double shown = p.type == '%' ? value * 100.0 : value;
  if (p.type == '%' && p.width > 0) printf_spec = "%" + p.sign + (p.zero ? "0" : "") + std::to_string(p.width - 1);
  std::snprintf(buf, sizeof buf, (printf_spec + "." + std::to_string(precision) + type).c_str(), shown);
  return std::string(buf) + (p.type == '%' ? "%" : "");
}

}  // namespace

// ---- BackupAndRestore ----

BackupAndRestore::BackupAndRestore(const BackupAndRestoreOptions& options)
    : backup_dir_(options.backup_dir), delete_checkpoint_(options.delete_checkpoint) {
  if (backup_dir_.empty()) throw ValueError("BackupAndRestore: backup_dir is empty; give the folder for the backup");
  check_save_freq(options.save_freq, "BackupAndRestore");
}

std::string BackupAndRestore::backup_path() const {
  return (std::filesystem::path(backup_dir_) / "backup.gguf").string();
}

std::vector<nn::Callback*> BackupAndRestore::kept_callbacks(const char* call) const {
  const std::vector<nn::Callback*>& all = fit_callbacks();
  const auto me = std::find(all.begin(), all.end(), this);
  if (me == all.end())
    throw StateError(std::string("BackupAndRestore::") + call + ": the callback is not in a fit (only fit calls it)");
  for (auto later = me + 1; later != all.end(); ++later)
    if ((*later)->keeps_state())
      throw ValueError("BackupAndRestore: the " + detail::callback_type_name(**later) + " at position " +
                       std::to_string(later - all.begin()) +
                       " of fit's callbacks keeps state between epochs but comes after BackupAndRestore (position " +
                       std::to_string(me - all.begin()) +
                       "), so its state would be restored before it resets it and saved before it updates it. "
                       "Put BackupAndRestore after it in the callbacks");
  return {all.begin(), me};
}

void BackupAndRestore::on_train_begin(nn::Logs&) {
  const std::vector<nn::Callback*> kept = kept_callbacks("on_train_begin");
  std::error_code ec;
  if (!std::filesystem::exists(backup_path(), ec)) return;
  try {
    model().set_initial_epoch(load_checkpoint(model(), backup_path(), kept));
  } catch (const ValueError& e) {
    throw ValueError(std::string(e.what()) + "\nBackupAndRestore: the backup in '" + backup_dir_ +
                     "' is of another fit (a crashed run of other code?); delete it, or give this fit another "
                     "backup_dir, to start afresh");
  }
}

void BackupAndRestore::on_epoch_end(int epoch, nn::Logs&) {
  const std::vector<nn::Callback*> kept = kept_callbacks("on_epoch_end");
  if (rank() != 0) return;  // data-parallel: rank 0 writes the backup every rank resumes from
  make_folder(backup_dir_, "BackupAndRestore");
  save_checkpoint(model(), backup_path(), epoch + 1, kept);
}

void BackupAndRestore::on_train_end(nn::Logs&) {
  if (!delete_checkpoint_ || rank() != 0) return;
  std::error_code ec;
  std::filesystem::remove(backup_path(), ec);
  if (std::filesystem::is_empty(backup_dir_, ec) && !ec) std::filesystem::remove(backup_dir_, ec);
}

// ---- ModelCheckpoint ----

ModelCheckpoint::ModelCheckpoint(const ModelCheckpointOptions& options)
    : filepath_(options.filepath),
      monitor_(options.monitor),
      verbose_(options.verbose),
      save_best_only_(options.save_best_only),
      save_weights_only_(options.save_weights_only),
      maximize_(nn::monitor_maximizes(monitor_, options.mode)),
      best_(options.initial_value_threshold) {
  if (filepath_.empty()) throw ValueError("ModelCheckpoint: filepath is empty; give the file to save to");
  if (verbose_ < 0 || verbose_ > 1)
    throw ValueError("ModelCheckpoint: verbose must be 0 (silent) or 1 (a line per action); got " +
                     std::to_string(verbose_));
  check_save_freq(options.save_freq, "ModelCheckpoint");
  parse_filepath(filepath_);  // malformed placeholders fail here, not after the first epoch
}

std::string ModelCheckpoint::file_path(int epoch, const nn::Logs& logs) const {
  std::string out;
  for (const Piece& p : parse_filepath(filepath_)) {
    if (!p.placeholder) {
      out += p.text;
    } else if (p.text == "epoch") {
      out += format_value(p, double(epoch + 1), true);
    } else if (auto it = logs.find(p.text); it != logs.end()) {
      out += format_value(p, it->second, false);
    } else {
      std::string keys = "epoch";
      for (const auto& [k, v] : logs) keys += ", " + k;
      throw ValueError("ModelCheckpoint: the filepath '" + filepath_ + "' has the placeholder {" + p.text +
                       "}, which is not a key of the epoch's logs; the keys are: " + keys);
    }
  }
  return out;
}

void ModelCheckpoint::on_train_begin(nn::Logs&) { warned_ = false; }

void ModelCheckpoint::on_epoch_end(int epoch, nn::Logs& logs) {
  const std::string path = file_path(epoch, logs);
  const std::string head = "Epoch " + std::to_string(epoch + 1) + ": ";
  auto say = [&](const std::string& line) {
    if (verbose_ > 0 && rank() == 0) std::printf("\n%s%s\n", head.c_str(), line.c_str()), std::fflush(stdout);
  };
  if (save_best_only_) {
    auto it = logs.find(monitor_);
    if (it == logs.end()) {
      if (!warned_) {
        warned_ = true;
        std::string keys;
        for (const auto& [k, v] : logs) keys += (keys.empty() ? "" : ", ") + k;
        log_message(LogLevel::Warning, "ModelCheckpoint: can save best model only with " + monitor_ +
                                           " available (the logs have: " + keys + "); skipping");
      }
      return;
    }
    const double current = it->second;
    char best_text[64] = "None", current_text[64];
    if (best_) std::snprintf(best_text, sizeof best_text, "%.5f", *best_);
    std::snprintf(current_text, sizeof current_text, "%.5f", current);
    // NaN never improves (Keras compares with a best that starts at +-inf).
    const bool improved = !std::isnan(current) && (!best_ || (maximize_ ? current > *best_ : current < *best_));
    if (!improved) {
      say(monitor_ + " did not improve from " + best_text);
      return;
    }
    say(monitor_ + " improved from " + best_text + " to " + current_text + ", saving model to " + path);
  } else {
    say("saving model to " + path);
  }
  // data-parallel: rank 0 saves (best_ is kept on every rank alike). The
  // best moves only once its model is in the file: a save that throws
  // leaves the file and the best of the model before.
  if (rank() == 0) {
    make_folder(std::filesystem::path(path).parent_path(), "ModelCheckpoint");
    if (save_weights_only_) save_weights(model(), path);
    else save_model(model(), path);
  }
  if (save_best_only_) best_ = logs.at(monitor_);
  if (rank() == 0) say("finished saving model to " + path);
}

nn::CallbackState ModelCheckpoint::get_state() const {
  nn::CallbackState s;
  if (best_) s.values["best"] = *best_;
  return s;
}

void ModelCheckpoint::set_state(const nn::CallbackState& state) {
  nn::detail::StateReader r(state, "ModelCheckpoint");
  const std::optional<double> best = r.optional("best");
  r.done();
  best_ = best;
}

}  // namespace tensorgrad::io
