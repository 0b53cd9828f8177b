// test_safetensors.cpp: the safetensors reader and writer (runtime/checkpoint/safetensors.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/errors.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

// A damaged or foreign safetensors file is refused naming the file and what is wrong.
TEST(Cli, SafetensorsReaderRefusesDamagedFiles) {
  test::TempDir dir;
  const std::string path = dir.file("a.safetensors");
  write_safetensors(path, {{"a", torch::kFloat32, {2, 3}}, {"b", torch::kInt64, {}}}, {{"k", "v"}}, [](size_t i) {
    return i == 0 ? torch::arange(6, torch::kFloat32).reshape({2, 3}) : torch::tensor(7L);
  });
  SafetensorsReader ok(path);
  EXPECT_TRUE(torch::equal(ok.read("a"), torch::arange(6, torch::kFloat32).reshape({2, 3})));
  EXPECT_EQ(ok.read("b").item<int64_t>(), 7);
  EXPECT_EQ(ok.metadata().at("k"), "v");
  const std::string good = test::read_file(path);
  const auto refused = [&](const std::string& bytes, const std::string& expect) {
    test::write_file(path, bytes);
    try {
      SafetensorsReader bad(path);
      ADD_FAILURE() << "accepted; expected: " << expect;
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  };
  refused(good.substr(0, good.size() - 1), "do not hold its");                 // truncated data
  refused(good + "x", "the tensors hold 32 bytes, the file 33");               // a trailing byte
  refused(good.substr(0, 5), "shorter than its 8-byte header length");         // no header
  refused(std::string(8, '\xff') + good.substr(8), "not a safetensors file");  // absurd header length
  std::string holes = good;
  const size_t at = holes.find("[24,32]");
  ASSERT_NE(at, std::string::npos) << good.substr(8, 120);
  refused(std::string(holes).replace(at, 7, "[25,33]"), "do not hold its");  // past the end
  refused(holes.replace(at, 7, "[16,24]"), "starts at byte 16 of the data, not at 24 (a hole or an overlap)");
  std::string dtype = good;
  dtype.replace(dtype.find("\"I64\""), 5, "\"U64\"");
  refused(dtype, "dtype 'U64' is not one gtrain reads");
}

}  // namespace
}  // namespace gtrain
