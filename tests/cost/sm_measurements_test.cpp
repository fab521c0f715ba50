// The green-context measurements `loom fit-sm` fits (cost/sm_measurements.h):
// a value no GPU can have measured is refused at its file, row and field, as
// is an empty file or a path that is not the folder (audit A5-07, A5-08: a
// negative alone time turned the interference coefficients around, 100000
// SMs on a 132-SM H100 and `[]` files were fitted with exit 0).
#include "loom/cost/sm_measurements.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/spec/gpu.h"
#include "test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

// A copy of tests/data/h100 with `file`'s row 0 field `key` set to `value`
// (or the whole file replaced by `value` where key is empty).
std::string MutatedCopy(const std::string& file, const std::string& key, const nlohmann::json& value) {
  static int copies = 0;
  const fs::path dir =
      fs::temp_directory_path() / "loom_tests" / ("sm_" + std::to_string(::getpid()) + "_" + std::to_string(copies++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f :
       {"sm_surface_small.json", "sm_scaling_large.json", "colocation_small.json", "colocation_large.json"}) {
    fs::copy_file(fs::path(LOOM_TEST_DATA) / "h100" / f, dir / f);
  }
  nlohmann::json rows = nlohmann::json::parse(std::ifstream(dir / file));
  if (key.empty()) {
    rows = value;
  } else {
    rows[0][key] = value;
  }
  std::ofstream(dir / file) << rows.dump();
  return dir.string();
}

TEST(SmMeasurements, ValuesNoGpuMeasuredAreRefusedAtTheirRowAndField) {
  const GpuSpec h100 = FindGpu("h100");
  const struct {
    std::string file, key;
    nlohmann::json value;
    std::string says;
  } cases[] = {
      {"colocation_small.json", "alone_a_s", -1,
       "colocation_small.json: row 0: field 'alone_a_s' is -1; valid: a "
       "finite number > 0"},
      {"colocation_small.json", "together_b_s", 0, "row 0: field 'together_b_s' is 0; valid: a finite number > 0"},
      {"colocation_small.json", "reps_a", 0, "row 0: field 'reps_a' is 0"},
      {"sm_surface_small.json", "sms", 100000,
       "sm_surface_small.json: row 0: field 'sms' is 100000; valid: a whole number of SMs from 1 to 132 (the "
       "h100's"},
      {"sm_scaling_large.json", "sms", 8.5, "sm_scaling_large.json: row 0: field 'sms' is 8.5; valid: a whole number"},
      {"colocation_large.json", "sms_b", 0, "colocation_large.json: row 0: field 'sms_b' is 0"},
      {"sm_surface_small.json", "hidden", 0, "row 0: field 'hidden' is 0; valid: a whole number from 1"},
      {"sm_scaling_large.json", "", nlohmann::json::array(),
       "sm_scaling_large.json: no rows; expected a non-empty "
       "list"},
      {"colocation_large.json", "", nlohmann::json::object(), "colocation_large.json: not a list"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file + " " + c.key);
    const std::string dir = MutatedCopy(c.file, c.key, c.value);
    test::ExpectError([&] { FitSmSharing(dir, h100); }, {c.says});
  }
  // Measured on the H100's 132 SMs, fitted as an A40 (84): the first row past 84 is named.
  test::ExpectError([&] { FitSmSharing(std::string(LOOM_TEST_DATA) + "/h100", FindGpu("a40")); },
                    {"valid: a whole number of SMs from 1 to 84 (the a40's; --gpu names the GPU"});
}

TEST(SmMeasurements, APathThatIsNotTheFolderIsNamed) {
  const GpuSpec h100 = FindGpu("h100");
  test::ExpectError([&] { FitSmSharing("", h100); }, {"measurements: empty; valid: a folder holding"});
  test::ExpectError([&] { FitSmSharing("/no/such/folder", h100); }, {"/no/such/folder: no such folder"});
  const std::string file = test::WriteTemp("sm-not-a-folder.txt", "x");
  test::ExpectError([&] { FitSmSharing(file, h100); }, {file + ": not a folder; valid: a folder holding"});
}

}  // namespace
}  // namespace loom
