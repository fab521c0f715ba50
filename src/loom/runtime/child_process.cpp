#include "loom/runtime/child_process.h"

#include "loom/runtime/launcher_signals.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace loom::runtime {

void DieWithParent(pid_t parent) {
  RestoreDefaultSignals();  // the launcher's handlers would keep a forwarded SIGTERM from ending it
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have ended between the fork and the prctl: then this
  // process was re-parented already and no signal will come.
  if (getppid() != parent) _exit(9);
}

}  // namespace loom::runtime
