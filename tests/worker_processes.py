"""Local worker processes for tests on 127.0.0.1: MultiWorkerMirroredStrategy clusters and
distributed Keras Tuner searches (a chief oracle and its workers).

Stdlib only (no TensorFlow, no TFX), so that any test module can import it.
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_ports(n):
    """``n`` TCP ports free on 127.0.0.1 right now."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@contextlib.contextmanager
def workers_running(tmp_path, module, args_for, count=2, timeout_s=420, tail_lines=30):
    """Starts ``python -m module *args_for(index)`` as ``count`` workers of one cluster; the
    ``with`` body runs while they do (e.g. a reference training in this process).

    Each worker gets its ``TF_CONFIG``, no GPU, ``TMPDIR=tmp_path/tmp<index>`` (so what it leaves
    in temporary directories can be checked) and logs to ``tmp_path/worker<index>.log``. Leaving
    the body waits for all of them, up to ``timeout_s`` after the start; the first failure or the
    timeout ends the wait, kills the rest and raises an ``AssertionError`` with the last
    ``tail_lines`` lines of every log. If the body raises, the workers are killed.
    """
    deadline = time.monotonic() + timeout_s
    cluster = [f"127.0.0.1:{port}" for port in free_ports(count)]
    procs = []
    try:
        for index in range(count):
            temp_dir = tmp_path / f"tmp{index}"
            temp_dir.mkdir()
            env = dict(
                os.environ,
                PYTHONPATH=ROOT,
                CUDA_VISIBLE_DEVICES="",
                TF_CPP_MIN_LOG_LEVEL="2",
                TMPDIR=str(temp_dir),
                TF_CONFIG=json.dumps(
                    {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}
                ),
            )
            with open(tmp_path / f"worker{index}.log", "w") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", module, *[str(a) for a in args_for(index)]],
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        yield procs
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in procs]
    if codes != [0] * count:
        tails = "\n".join(
            f"--- worker {i} (exit {code}):\n"
            + "".join(open(tmp_path / f"worker{i}.log").readlines()[-tail_lines:])
            for i, code in enumerate(codes)
        )
        raise AssertionError(f"{module}: multi-worker run failed, exit codes {codes}:\n{tails}")


def run_workers(tmp_path, module, args_for, count=2, timeout_s=420, tail_lines=30):
    """Runs the workers of :func:`workers_running` and waits for them (same arguments)."""
    with workers_running(tmp_path, module, args_for, count, timeout_s, tail_lines):
        pass


def start_tuner(module, tuner_id, port, log, args):
    """One process of a distributed Keras Tuner search: ``python -m module *args`` with
    ``KERASTUNER_TUNER_ID=tuner_id`` and the chief oracle at ``127.0.0.1:port``; its output
    goes to the open file ``log``."""
    env = dict(
        os.environ,
        KERASTUNER_TUNER_ID=tuner_id,
        KERASTUNER_ORACLE_IP="127.0.0.1",
        KERASTUNER_ORACLE_PORT=str(port),
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_NUM_INTRAOP_THREADS="1",
        TF_NUM_INTEROP_THREADS="1",
        PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]),
    )
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def stop_all(processes, logs):
    """Kills the processes still running (e.g. after a failed assertion) and closes the logs."""
    for process in processes.values():
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    for log in logs.values():
        log.close()
