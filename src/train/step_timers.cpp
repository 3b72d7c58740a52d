#include "train/step_timers.hpp"

#include "core/log.hpp"

#include <Kokkos_Core.hpp>

#include <numeric>

namespace trident {

const char* step_part_name(StepPart p) {
  static const char* names[] = {"fwd", "bwd", "opt", "bubble", "data", "ckpt", "eval"};
  return names[static_cast<int>(p)];
}

const char* comm_axis_name(CommAxis a) {
  static const char* names[] = {"dp", "tp", "pp", "world"};
  return names[static_cast<int>(a)];
}

CommAxis comm_axis_of(const std::string& label) {
  if (label == "dp" || label.rfind("dp_", 0) == 0) return CommAxis::dp;
  if (label == "tp" || label.rfind("tp_", 0) == 0) return CommAxis::tp;
  if (label == "pp" || label.rfind("pp_", 0) == 0) return CommAxis::pp;
  return CommAxis::world;
}

std::string step_breakdown_columns() {
  std::string s = "t_step";
  for (StepPart p : {StepPart::fwd, StepPart::bwd, StepPart::opt}) s += std::string(",t_") + step_part_name(p);
  for (int a = 0; a < kCommAxes; ++a) {
    const std::string n = comm_axis_name(static_cast<CommAxis>(a));
    s += ",t_comm_" + n + "_exposed,t_comm_" + n + "_hidden";
  }
  for (StepPart p : {StepPart::bubble, StepPart::data, StepPart::ckpt, StepPart::eval})
    s += std::string(",t_") + step_part_name(p);
  return s + ",t_other";
}

std::string StepBreakdown::csv_fields() const {
  std::vector<double> v;
  v.push_back(step);
  for (StepPart p : {StepPart::fwd, StepPart::bwd, StepPart::opt}) v.push_back(part[static_cast<size_t>(p)]);
  for (int a = 0; a < kCommAxes; ++a) {
    v.push_back(exposed[static_cast<size_t>(a)]);
    v.push_back(hidden[static_cast<size_t>(a)]);
  }
  for (StepPart p : {StepPart::bubble, StepPart::data, StepPart::ckpt, StepPart::eval})
    v.push_back(part[static_cast<size_t>(p)]);
  v.push_back(other);
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    if (on) s += log::format("%.4f", v[i] * 1e3);  // ms, 0.1 us resolution
  }
  return s;
}

void StepTimers::watch(Communicator& c) {
  if (!on() || c.size() <= 1) return;
  c.set_timing(true);
  comms_.emplace_back(comm_axis_of(c.axis()), &c);
}

std::array<double, kCommAxes> StepTimers::exposed_now() const {
  std::array<double, kCommAxes> e{};
  for (const auto& [axis, c] : comms_) e[static_cast<size_t>(axis)] += c->times().exposed;
  return e;
}

std::array<double, kCommAxes> StepTimers::hidden_now() const {
  std::array<double, kCommAxes> h{};
  for (const auto& [axis, c] : comms_) h[static_cast<size_t>(axis)] += c->times().hidden;
  return h;
}

void StepTimers::fence() const {
  if (mode_ == TimerMode::fine) Kokkos::fence();
}

void StepTimers::start() {
  if (!on()) return;
  fence();
  part_ = {};
  claimed_ = {};
  exposed0_ = exposed_now();
  hidden0_ = hidden_now();
  start_ = Clock::now();
}

StepBreakdown StepTimers::lap() {
  StepBreakdown b;
  if (!on()) return b;
  fence();
  const Clock::time_point now = Clock::now();
  const std::array<double, kCommAxes> ex = exposed_now(), hid = hidden_now();
  b.on = true;
  b.step = std::chrono::duration<double>(now - start_).count();
  b.part = part_;
  double sum = std::accumulate(part_.begin(), part_.end(), 0.0);
  for (size_t a = 0; a < static_cast<size_t>(kCommAxes); ++a) {
    b.exposed[a] = std::max(0.0, ex[a] - exposed0_[a] - claimed_[a]);
    b.hidden[a] = hid[a] - hidden0_[a];
    sum += b.exposed[a];
  }
  b.other = b.step - sum;
  part_ = {};
  claimed_ = {};
  exposed0_ = ex;
  hidden0_ = hid;
  start_ = now;
  return b;
}

StepTimers::Scope::Scope(StepTimers* t, StepPart part, bool claim) : t_(t), part_(part), claim_(claim) {
  if (!t_) return;
  t_->fence();
  ex0_ = t_->exposed_now();
  t0_ = Clock::now();
}

void StepTimers::Scope::stop() {
  if (!t_) return;
  t_->fence();
  const double wall = std::chrono::duration<double>(Clock::now() - t0_).count();
  const std::array<double, kCommAxes> ex = t_->exposed_now();
  double inside = 0.0;
  for (size_t a = 0; a < static_cast<size_t>(kCommAxes); ++a) {
    const double d = ex[a] - ex0_[a];
    inside += d;
    if (claim_) t_->claimed_[a] += d;
  }
  // A part's own time never goes below zero: the clock reads of the communicator and of the scope
  // differ by nanoseconds.
  t_->part_[static_cast<size_t>(part_)] += claim_ ? wall : std::max(0.0, wall - inside);
  t_ = nullptr;
}

void BreakdownSummary::add(std::int64_t step, const StepBreakdown& b) {
  if (!b.on) return;
  if (n_ == 0) {
    first_ = b;
    first_step_ = step;
  } else {
    sum_.on = true;
    sum_.step += b.step;
    sum_.other += b.other;
    for (size_t i = 0; i < sum_.part.size(); ++i) sum_.part[i] += b.part[i];
    for (size_t i = 0; i < sum_.exposed.size(); ++i) {
      sum_.exposed[i] += b.exposed[i];
      sum_.hidden[i] += b.hidden[i];
    }
  }
  last_step_ = step;
  ++n_;
}

std::string BreakdownSummary::line(const std::string& note) const {
  if (n_ == 0) return "";
  const bool only_first = n_ == 1;
  const StepBreakdown& s = only_first ? first_ : sum_;
  const double k = only_first ? 1e3 : 1e3 / static_cast<double>(n_ - 1);
  auto ms = [&](double v) { return log::format("%.2f", v * k); };
  std::string out = only_first ? log::format("step-time breakdown (ms, step %lld only%s): ",
                                             static_cast<long long>(first_step_), note.c_str())
                               : log::format("step-time breakdown (ms/step, mean of steps %lld-%lld%s; step %lld "
                                             "left out as warm-up): ",
                                             static_cast<long long>(first_step_ + 1),
                                             static_cast<long long>(last_step_), note.c_str(),
                                             static_cast<long long>(first_step_));
  out += "step " + ms(s.step) + " = fwd " + ms(s.part[0]) + " + bwd " + ms(s.part[1]) + " + opt " + ms(s.part[2]);
  for (int a = 0; a < kCommAxes; ++a)
    out += std::string(" + ") + comm_axis_name(static_cast<CommAxis>(a)) + " exposed " + ms(s.exposed[static_cast<size_t>(a)]);
  for (StepPart p : {StepPart::bubble, StepPart::data, StepPart::ckpt, StepPart::eval})
    out += std::string(" + ") + step_part_name(p) + " " + ms(s.part[static_cast<size_t>(p)]);
  out += " + other " + ms(s.other) + " | hidden (overlapped, upper bound):";
  for (int a = 0; a < kCommAxes; ++a)
    out += std::string(" ") + comm_axis_name(static_cast<CommAxis>(a)) + " " + ms(s.hidden[static_cast<size_t>(a)]);
  return out;
}

}  // namespace trident
