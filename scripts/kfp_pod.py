"""Stand-ins for the two processes between a KFP v2 pod's first process and the user command,
for the harness's kfp mode (mounted into the container; a test device, not product code):

    kfp_pod.py emissary -- kfp_pod.py launcher -- python -m ga_tfx.pipelines.kubeflow ...

``emissary``: Argo's emissary executor, the main container's first process
(argoproj/argo-workflows ``cmd/argoexec/commands/emissary.go``): starts its command as the
leader of a new process group (``workflow/executor/osspecific/command_unix.go``,
``StartCommand``: ``Setpgid``), catches every signal and forwards it to that group
(``cmd/argoexec/commands/signal.go``, ``forwardSignals``; ``osspecific/signal_darwin.go``,
``Kill``: ``syscall.Kill(-pgid, s)``; SIGCHLD and SIGURG ignored, ``CanIgnoreSignal``), reaps
children once a second until its command is gone (``signal_darwin.go``, ``Wait``:
``Wait4(-1, WNOHANG)`` then ``time.Sleep(time.Second)``), and exits with its command's code,
128 + the signal where a signal ended it (``Wait``; ``emissary.go``, ``exitCodeFromErr``).
When it exits, the kernel kills whatever is left in the container's PID namespace.

``launcher``: KFP's launcher (kubeflow/pipelines ``backend/src/v2/component/launcher_v2.go``,
``execute``): ``exec.Command(cmd, args...)`` then ``command.Run()``: the user command its child,
in the launcher's own process group, the launcher handling no signal (a Go program without
``signal.Notify`` dies of SIGTERM: Python's default for SIGTERM does the same); a failed
command fails the launcher (exit 1, its error logged).
"""

import os
import signal
import subprocess
import sys
import time

IGNORED = {signal.SIGCHLD, signal.SIGURG}


def emissary(command):
    child = subprocess.Popen(command, preexec_fn=os.setpgrp)

    def forward(signum, _frame):
        try:
            os.killpg(os.getpgid(child.pid), signum)
        except ProcessLookupError:
            os.kill(child.pid, signum)

    for sig in signal.valid_signals():
        if sig in IGNORED or sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, forward)
        except (OSError, ValueError):
            pass
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 1
        if pid == child.pid:
            if os.WIFSIGNALED(status):
                return 128 + os.WTERMSIG(status)
            return os.WEXITSTATUS(status)
        time.sleep(1.0)


def launcher(command):
    code = subprocess.call(command)
    if code != 0:
        print(f"launcher: the user command failed: exit status {code}", file=sys.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) < 3 or argv[0] not in ("emissary", "launcher") or argv[1] != "--":
        print("usage: kfp_pod.py emissary|launcher -- COMMAND...", file=sys.stderr)
        return 2
    return (emissary if argv[0] == "emissary" else launcher)(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
