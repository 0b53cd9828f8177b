// run_records.cpp: the fields of each metrics.jsonl / restarts.jsonl record, and their reading.
#include "runtime/core/run_dir/run_records.h"

#include "runtime/core/run_dir/run_files.h"

namespace gtrain {

const char* record_kind_name(RecordKind k) {
  switch (k) {
#define GTRAIN_RECORD_CASE(name) \
  case RecordKind::name:         \
    return #name;
    GTRAIN_RECORD_KINDS(GTRAIN_RECORD_CASE)
#undef GTRAIN_RECORD_CASE
  }
  return "?";
}

std::optional<RecordKind> record_kind_from_name(const std::string& name) {
#define GTRAIN_RECORD_MATCH(n) \
  if (name == #n) return RecordKind::n;
  GTRAIN_RECORD_KINDS(GTRAIN_RECORD_MATCH)
#undef GTRAIN_RECORD_MATCH
  return std::nullopt;
}

std::optional<RecordKind> record_kind(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find("kind");
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return record_kind_from_name(it->get<std::string>());
}

std::optional<int64_t> record_step(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find("step");
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

double record_time(const nlohmann::json& j) {
  if (!j.is_object()) return 0;
  const auto it = j.find("time");
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

bool is_record_axis(const std::string& key) {
  return key == "step" || key == "time";
}

std::vector<RecordKind> all_record_kinds() {
  return {
#define GTRAIN_RECORD_LIST(name) RecordKind::name,
      GTRAIN_RECORD_KINDS(GTRAIN_RECORD_LIST)
#undef GTRAIN_RECORD_LIST
  };
}

namespace {

// Writes each field: always (v), omitted when empty (opt; a string: when ""), null when empty
// (nullable), only when true (flag).
struct Writer {
  nlohmann::json& out;
  template <class T>
  void operator()(const char* key, const T& value) {
    out[key] = value;
  }
  template <class T>
  void opt(const char* key, const std::optional<T>& value) {
    if (value) out[key] = *value;
  }
  void opt(const char* key, const std::string& value) {
    if (!value.empty()) out[key] = value;
  }
  template <class T>
  void nullable(const char* key, const std::optional<T>& value) {
    out[key] = value ? nlohmann::json(*value) : nlohmann::json();
  }
  void flag(const char* key, bool value) {
    if (value) out[key] = true;
  }
};

// Reads each field it finds with the right type; anything else leaves the default.
struct Reader {
  const nlohmann::json& in;
  const nlohmann::json* find(const char* key) const {
    const auto it = in.find(key);
    return it == in.end() ? nullptr : &*it;
  }
  static bool take(const nlohmann::json& j, double& v) {
    if (!j.is_number()) return false;
    v = j.get<double>();
    return true;
  }
  static bool take(const nlohmann::json& j, int64_t& v) {
    if (!j.is_number_integer()) return false;
    v = j.get<int64_t>();
    return true;
  }
  static bool take(const nlohmann::json& j, int& v) {
    if (!j.is_number_integer()) return false;
    v = j.get<int>();
    return true;
  }
  static bool take(const nlohmann::json& j, bool& v) {
    if (!j.is_boolean()) return false;
    v = j.get<bool>();
    return true;
  }
  static bool take(const nlohmann::json& j, std::string& v) {
    if (!j.is_string()) return false;
    v = j.get<std::string>();
    return true;
  }
  static bool take(const nlohmann::json& j, nlohmann::json& v) {
    if (!j.is_object()) return false;
    v = j;
    return true;
  }
  template <class T>
  void operator()(const char* key, T& value) {
    if (const auto* j = find(key)) take(*j, value);
  }
  template <class T>
  void opt(const char* key, std::optional<T>& value) {
    T v{};
    if (const auto* j = find(key); j && take(*j, v)) value = v;
  }
  void opt(const char* key, std::string& value) { (*this)(key, value); }
  template <class T>
  void nullable(const char* key, std::optional<T>& value) {
    opt(key, value);
  }
  void flag(const char* key, bool& value) { (*this)(key, value); }
};

}  // namespace

template <class V>
void TrainRecord::fields(V& v) {
  v("step", step), v("loss", loss), v("lr", lr), v.nullable("grad_norm", grad_norm);
  v("samples_per_s", samples_per_s), v("step_time_s", step_time_s), v("data_wait_s", data_wait_s);
  v("consumed_samples", consumed_samples), v("elapsed_s", elapsed_s), v("time", time);
  v.opt("tokens_per_s", tokens_per_s), v.opt("est_step_s", est_step_s), v.opt("mfu", mfu), v.flag("skipped", skipped);
  v("param_mb", param_mb), v("grad_mb", grad_mb), v("opt_state_mb", opt_state_mb);
  v.opt("host_state_mb", host_state_mb), v.opt("step_tensor_peak_mb", step_tensor_peak_mb);
  v.opt("loss_scale", loss_scale);
  v.opt("cpu_util", cpu_util), v.opt("gpu_util", gpu_util), v.opt("gpu_mem_used_mb", gpu_mem_used_mb);
  v.opt("peak_mem_mb", peak_mem_mb);
}

template <class V>
void EvalRecord::fields(V& v) {
  v("step", step), v("loss", loss), v("accuracy", accuracy), v("samples", samples), v("eval_s", eval_s);
  v("time", time);
}

template <class V>
void EvalStoppedRecord::fields(V& v) {
  v("step", step), v("reason", reason);
}

template <class V>
void EstimateRecord::fields(V& v) {
  v("step", step), v("est_step_s", est_step_s), v("measured_step_s", measured_step_s), v("error", error);
  v("profile", profile);
}

template <class V>
void StageEndRecord::fields(V& v) {
  v("step", step), v("reason", reason), v.opt("detail", detail);
}

template <class V>
void ThreadsRecord::fields(V& v) {
  v("step", step), v("threads", threads), v("measured", measured);
}

template <class V>
void FinalRecord::fields(V& v) {
  v("step", step), v("train_loss", train_loss), v.nullable("eval_loss", eval_loss);
  v.nullable("eval_accuracy", eval_accuracy), v("seconds", seconds), v("samples_per_s", samples_per_s);
  v("data_wait_s", data_wait_s), v("save_stall_s", save_stall_s);
}

template <class V>
void CheckpointRecord::fields(V& v) {
  v("step", step), v("stall_s", stall_s), v("async", async), v("time", time);
  v.opt("previous_write_s", previous_write_s);
}

template <class V>
void ResumeRecord::fields(V& v) {
  v("step", step), v("path", path), v("probe_loss", probe_loss), v("probe_loss_saved", probe_loss_saved);
  v("plan", plan);
}

template <class V>
void RestartRecord::fields(V& v) {
  v("restart", restart), v("unix", unix), v("detected_unix", detected_unix), v("cause", cause);
  v("step_reached", step_reached), v("resume_step", resume_step), v("steps_lost", steps_lost);
  v("step_gained", step_gained), v("allocation", allocation), v.opt("host", host), v.opt("left_out", left_out);
  v.opt("ranks", ranks), v.opt("plan", plan);
}

template <class V>
void RecoveredRecord::fields(V& v) {
  v("restart", restart), v.opt("step", step), v.opt("seconds", seconds);
}

namespace {

// The train record's device figures beyond the typed ones: every other key of the record.
bool typed_train_key(const std::string& key) {
  static const nlohmann::json keys = [] {
    TrainRecord r;
    r.grad_norm = r.tokens_per_s = r.est_step_s = r.mfu = r.host_state_mb = r.step_tensor_peak_mb = 0.0;
    r.loss_scale = r.cpu_util = r.gpu_util = r.gpu_mem_used_mb = r.peak_mem_mb = 0.0;
    r.skipped = true;
    nlohmann::json j = {{"kind", "train"}};
    Writer w{j};
    r.fields(w);
    return j;
  }();
  return keys.contains(key);
}

}  // namespace

template <class R>
nlohmann::json record_to_json(const R& r) {
  nlohmann::json j = nlohmann::json::object();
  if constexpr (std::is_same_v<R, TrainRecord>) j = r.device.is_object() ? r.device : nlohmann::json::object();
  j["kind"] = record_kind_name(R::kKind);
  Writer w{j};
  const_cast<R&>(r).fields(w);  // fields() only reads through a Writer
  return j;
}

template <class R>
R record_from_json(const nlohmann::json& j) {
  R r;
  if (!j.is_object()) return r;
  Reader rd{j};
  r.fields(rd);
  if constexpr (std::is_same_v<R, TrainRecord>) {
    for (const auto& [key, value] : j.items())
      if (!typed_train_key(key)) r.device[key] = value;
  }
  return r;
}

#define GTRAIN_RECORD_INSTANTIATE(R)                   \
  template nlohmann::json record_to_json<R>(const R&); \
  template R record_from_json<R>(const nlohmann::json&);
GTRAIN_RECORD_INSTANTIATE(TrainRecord)
GTRAIN_RECORD_INSTANTIATE(EvalRecord)
GTRAIN_RECORD_INSTANTIATE(EvalStoppedRecord)
GTRAIN_RECORD_INSTANTIATE(EstimateRecord)
GTRAIN_RECORD_INSTANTIATE(StageEndRecord)
GTRAIN_RECORD_INSTANTIATE(ThreadsRecord)
GTRAIN_RECORD_INSTANTIATE(FinalRecord)
GTRAIN_RECORD_INSTANTIATE(CheckpointRecord)
GTRAIN_RECORD_INSTANTIATE(ResumeRecord)
GTRAIN_RECORD_INSTANTIATE(RestartRecord)
GTRAIN_RECORD_INSTANTIATE(RecoveredRecord)
#undef GTRAIN_RECORD_INSTANTIATE

std::vector<RunRecord> read_run_records(const std::string& path) {
  std::vector<RunRecord> out;
  for (auto& j : read_json_lines(path)) {
    const auto kind = record_kind(j);
    if (kind) out.push_back({*kind, std::move(j)});
  }
  return out;
}

bool has_final_record(const std::string& path, int64_t step) {
  for (const auto& r : read_run_records(path))
    if (r.is<FinalRecord>() && r.json.contains("step") && r.as<FinalRecord>().step == step) return true;
  return false;
}

}  // namespace gtrain
