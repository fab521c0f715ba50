// What every process the runtime forks does first: it dies with the process
// that forked it. A scheduler or supervisor that kills or stops `loom run`
// (SIGKILL, or SIGTERM and SIGINT, whose default action ends the launcher)
// signals the launcher alone; its workers must not train on with no parent
// (issue 45). Torch-free.
#pragma once

#include <sys/types.h>

namespace loom::runtime {

// In a child just forked from `parent` (the launcher's getpid() before the
// fork): the kernel sends it SIGKILL when its parent ends
// (prctl PR_SET_PDEATHSIG); a parent already gone ends it at once. The
// signals the launcher passes on (launcher_signals.h) get their default action.
void DieWithParent(pid_t parent);

}  // namespace loom::runtime
