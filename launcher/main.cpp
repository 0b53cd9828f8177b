// main.cpp: the gtrain executable: start-up tuning, then the CLI; the only place errors are caught.
#include <iostream>

#include <c10/util/Exception.h>

#include "launcher/cli.h"
#include "runtime/common/errors.h"
#include "runtime/common/startup.h"

int main(int argc, char** argv) {
  gtrain::tune_malloc();
  try {
    return gtrain::cli_main(argc, argv);
  } catch (const gtrain::Error& e) {
    std::cerr << gtrain::format_error(e) << std::endl;
    return e.exit_code();
  } catch (const c10::Error& e) {
    std::cerr << "gtrain: torch error: " << e.what_without_backtrace() << std::endl;
    return gtrain::kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "gtrain: error: " << e.what() << std::endl;
    return gtrain::kExitFailure;
  }
}
