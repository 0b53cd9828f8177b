// shard_gather.cpp: shard placement and the gather to rank 0 (a size, a JSON header, then data).
#include "runtime/train/shard_gather.h"

#include <nlohmann/json.hpp>

#include "runtime/common/errors.h"

namespace gtrain {

void place_shard(std::map<std::string, torch::Tensor>& full, const TensorShard& s) {
  torch::NoGradGuard ng;
  auto it = full.find(s.name);
  if (it == full.end()) {
    it = full.emplace(s.name, torch::zeros(s.global_shape, s.data.options())).first;
  }
  auto region = it->second;
  for (size_t d = 0; d < s.region_shape.size(); ++d) {
    region = region.narrow(static_cast<int64_t>(d), s.region_offsets[d], s.region_shape[d]);
  }
  auto flat = region.contiguous().view({-1});
  flat.narrow(0, s.flat_begin, s.data.numel()).copy_(s.data.reshape({-1}));
  region.copy_(flat.view(region.sizes()));
}

namespace {

bool is_optimizer_name(const std::string& n) {
  for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".momentum_buffer"}) {
    const std::string sx(suffix);
    if (n.size() > sx.size() && n.compare(n.size() - sx.size(), sx.size(), sx) == 0) return true;
  }
  return n == "optimizer.step";
}

}  // namespace

std::map<std::string, torch::Tensor> gather_shards(const std::vector<TensorShard>& mine, Communicator& world,
                                                   bool parameters_only) {
  std::vector<const TensorShard*> send;
  for (const auto& s : mine) {
    if (s.write && !(parameters_only && is_optimizer_name(s.name))) send.push_back(&s);
  }
  std::map<std::string, torch::Tensor> full;
  if (world.rank() != 0) {
    nlohmann::json h = nlohmann::json::array();
    for (const auto* s : send) {
      h.push_back({s->name, s->global_shape, s->region_offsets, s->region_shape, s->flat_begin, s->data.numel(),
                   s->data.scalar_type() == torch::kLong});
    }
    const std::string text = h.dump();
    auto size = torch::tensor({static_cast<int64_t>(text.size())}, torch::kLong);
    world.send(size, 0, 1);
    auto bytes = torch::from_blob(const_cast<char*>(text.data()), {static_cast<int64_t>(text.size())}, torch::kUInt8);
    world.send(bytes, 0, 1);
    for (const auto* s : send) world.send(s->data.contiguous(), 0, 1);
    return full;
  }
  for (const auto* s : send) place_shard(full, *s);
  for (int r = 1; r < world.size(); ++r) {
    auto size = torch::zeros({1}, torch::kLong);
    world.recv(size, r, 1);
    auto bytes = torch::empty({size.item<int64_t>()}, torch::kUInt8);
    world.recv(bytes, r, 1);
    auto h = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data_ptr()), bytes.numel()));
    for (const auto& e : h) {
      TensorShard s;
      s.name = e[0].get<std::string>();
      s.global_shape = e[1].get<std::vector<int64_t>>();
      s.region_offsets = e[2].get<std::vector<int64_t>>();
      s.region_shape = e[3].get<std::vector<int64_t>>();
      s.flat_begin = e[4].get<int64_t>();
      s.data = torch::empty({e[5].get<int64_t>()}, e[6].get<bool>() ? torch::kLong : torch::kFloat);
      world.recv(s.data, r, 1);
      place_shard(full, s);
    }
  }
  return full;
}

}  // namespace gtrain
