// plan_lora.cpp: the LoRA suggestion of `gtrain plan` (plan_lora.h).
#include "launcher/commands/plan_lora.h"

#include <cmath>

#include "launcher/commands/plan_layouts.h"
#include "runtime/core/adapter_shapes.h"
#include "runtime/core/format.h"

namespace gtrain {
namespace {

constexpr size_t kShownLayouts = 5;

std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}

std::string rpad(const std::string& s, size_t w) {
  return s.size() >= w ? " " + s : std::string(w - s.size(), ' ') + s;
}

std::string targets_toml(const std::vector<std::string>& targets) {
  std::string out = "[";
  for (size_t i = 0; i < targets.size(); ++i) out += (i ? ", \"" : "\"") + targets[i] + "\"";
  return out + "]";
}

// "8 x 24.0 GiB GPUs", "2 ranks".
std::string devices(const std::string& unit, int64_t world, double memory) {
  std::string s = std::to_string(world) + " x ";
  if (memory > 0 && !std::isinf(memory)) s += format_gib(memory, 1) + " GiB ";
  return s + unit + (world == 1 ? "" : "s");
}

}  // namespace

AdapterConfig suggested_lora(bool gpu) {
  AdapterConfig a;
  a.kind = "lora";
  a.rank = 16;
  a.alpha = 32.0;
  a.targets = {"all"};
  a.base_dtype = gpu ? "bf16" : "fp32";
  return a;
}

bool lora_suggestion_applies(const JobConfig& cfg) {
  return !cfg.adapter.lora() && !lora_projections(cfg.model).empty() && cfg.model.plugin.empty();
}

LoraSuggestion plan_lora_suggestion(const JobConfig& cfg, const AdapterConfig& adapter,
                                    const std::function<PlannerInput(const JobConfig&)>& input_for) {
  LoraSuggestion s;
  s.adapter = adapter;
  JobConfig with = cfg;
  with.adapter = adapter;
  s.adapter_params = lora_parameter_count(with.model, adapter);
  const std::vector<RankedPlan> all = plan_candidates(input_for(with));
  for (const auto& c : all) {
    if (c.feasible) s.fits.push_back(c);
  }
  if (s.fits.empty()) {
    for (const auto& c : all) {
      if (!c.structural) {
        s.closest = c.why + " (" + short_layout(c.plan) + ")";
        break;
      }
    }
  }
  return s;
}

std::string lora_keys_toml(const AdapterConfig& a) {
  return "[adapter]\nkind = \"lora\"\nrank = " + std::to_string(a.rank) + "\nalpha = " + strf("%g", a.alpha) +
         "\ntargets = " + targets_toml(a.targets) + "\nbase_dtype = \"" + a.base_dtype + "\"\n";
}

nlohmann::json lora_keys_json(const AdapterConfig& a) {
  return {{"kind", a.kind}, {"rank", a.rank}, {"alpha", a.alpha}, {"targets", a.targets}, {"base_dtype", a.base_dtype}};
}

void render_lora_suggestion(const LoraSuggestion& s, const std::string& unit, int64_t world, double memory,
                            std::ostream& out) {
  out << "\nNo full fine-tune fits " << devices(unit, world, memory) << ".";
  if (s.fits.empty()) {
    out << " LoRA (rank " << s.adapter.rank << ", every projection) does not fit either"
        << (s.closest.empty() ? std::string(".") : ": " + s.closest) << "\n";
    return;
  }
  out << " With LoRA (" << strf("%.1f", static_cast<double>(s.adapter_params) / 1e6)
      << "M trained adapter parameters on the frozen base) these fit:\n";
  out << "  " << pad("#", 4) << pad("layout", 32) << rpad("GiB/" + unit, 10) << rpad("s/step", 10)
      << "   frozen base + adapters (weights, grads, optimizer) + activations\n";
  for (size_t i = 0; i < s.fits.size() && i < kShownLayouts; ++i) {
    const RankedPlan& c = s.fits[i];
    const MemoryEstimate& m = c.memory;
    const double adapters = m.params + m.grads + m.grad_accumulators + m.optimizer;
    out << "  " << pad(std::to_string(i + 1), 4) << pad(short_layout(c.plan), 32) << rpad(format_gib(m.total()), 10)
        << rpad(strf("%.4g", c.time.total()), 10) << "   " << format_bytes(m.frozen + m.gathered) << " + "
        << format_bytes(adapters) << " + " << format_bytes(m.activations) << "\n";
  }
  if (s.fits.size() > kShownLayouts) out << "  (" << s.fits.size() - kShownLayouts << " more fit)\n";
  out << "To train adapters instead of every weight, add to the config:\n";
  std::string keys = lora_keys_toml(s.adapter);
  for (size_t start = 0; start < keys.size();) {
    const size_t end = keys.find('\n', start);
    out << "  " << keys.substr(start, end - start) << "\n";
    start = end + 1;
  }
}

nlohmann::json lora_suggestion_json(const LoraSuggestion& s) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const auto& c : s.fits) candidates.push_back(candidate_json(c));
  return {{"keys", lora_keys_json(s.adapter)},
          {"adapter_params", s.adapter_params},
          {"candidates", candidates},
          {"closest", s.closest.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.closest)}};
}

}  // namespace gtrain
