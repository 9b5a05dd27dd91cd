"""What the built wheel brought into the keras3 wheel environment (scripts/wheel_check.sh).

Run with that environment's Python after `uv pip install "ga-tfx[keras3]" ... -c LOCK`: every
installed distribution but ga-tfx must be one of LOCK's pins, at its version (so nothing the lock
does not list came with the wheel's dependencies, such as tf-keras), and tf_keras must not be
importable. Prints one line; exits non-zero naming what is wrong.

Usage: python scripts/wheel_env_check.py LOCK
"""

import importlib.metadata
import importlib.util
import re
import sys


def _name(name):
    """PEP 503's normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def main(lock):
    pins = {}
    with open(lock, encoding="utf-8") as f:
        for line in f:
            match = re.match(r"^([\w.-]+)==(\S+)", line)
            if match:
                pins[_name(match[1])] = match[2]
    installed = {_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    if "ga-tfx" not in installed:
        return "error: ga-tfx is not installed in this environment"
    del installed["ga-tfx"]
    unlocked = sorted(f"{n}=={v}" for n, v in installed.items() if pins.get(n) != v)
    if unlocked:
        return f"error: the wheel brought packages that {lock} does not pin so: {unlocked}"
    if importlib.util.find_spec("tf_keras") is not None:
        return "error: tf_keras is importable in the keras3 environment"
    left = sorted(set(pins) - set(installed))
    print(
        f"[wheel] {len(installed)} packages besides ga-tfx, each the lock's; tf_keras not "
        f"importable (the lock's not needed here: {', '.join(left) or 'none'})"
    )
    return None


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/wheel_env_check.py LOCK")
    sys.exit(main(sys.argv[1]))
