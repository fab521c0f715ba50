// The `loom` command (docs/cli.md): cli/dispatch.cpp parses the flags and runs
// the subcommand they name, one file per subcommand (cli/*_command.cpp); here
// only what escapes a command becomes an exit code.
#include <iostream>
#include <new>

#include "loom/cli/command.h"
#include "loom/error.h"

// fuzz/cli_main.cpp defines this to abort, so that an exception other than
// loom::Error reaching main is a crash the fuzzer reports, not an exit 2.
#ifndef LOOM_ON_INTERNAL_ERROR
#define LOOM_ON_INTERNAL_ERROR()
#endif

int main(int argc, char** argv) {
  try {
    return loom::cli::Dispatch(argc, argv);
  } catch (const loom::Error& e) {  // bad input: said, exit 2
    std::cerr << "loom: error: " << e.what() << "\n";
    return 2;
  } catch (const loom::cli::ExitStatus& e) {  // the command said why itself
    return e.code;
  } catch (const loom::Interrupted& e) {  // SIGINT, SIGTERM, SIGHUP: passed on to the workers
    std::cerr << "loom: " << e.what() << "\n";
    return 128 + e.signal();
  } catch (const std::bad_alloc&) {  // rule 4: nothing aborts
    std::cerr << "loom: error: out of memory: the problem is larger than this machine holds (cluster, global batch, "
                 "iterations or model size)\n";
    return 2;
  } catch (const std::exception& e) {
    LOOM_ON_INTERNAL_ERROR();
    std::cerr << "loom: error: internal error (a bug; please report it with the command): " << e.what() << "\n";
    return 2;
  }
}
