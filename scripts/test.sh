#!/usr/bin/env bash
# The test command. Sets up the environments if needed (scripts/bootstrap.sh), runs the lint step
# when it is on, then pytest once per environment; extra arguments go to every pytest run:
#   tfx    .venv/       the TFX stack this machine runs natively (TFX 1.16 on glibc < 2.39,
#                       TFX 1.21 on glibc >= 2.39; GA_TFX_STACK overrides): the whole suite
#   lib    .venv-lib/   Python 3.12, TF 2.21, no TFX: the library tier's tests that read the
#                       source files, -m "not tfx and not slow and source_tree" (its other fast
#                       tests run in the wheel environment)
#   other  the other TFX stack: -m "tfx and (not slow or stack)", the TFX-marked fast tests and
#          the slow tests whose code differs between stacks (marker `stack`: the main job, the
#          pipeline end to end, the Kubeflow compile). Where glibc < 2.39 it is TFX 1.21 in a
#          Debian 13 root (scripts/debian13_root.sh, cached outside the clone; it is made, and
#          TFX 1.21 installed in it, in the background while the other runs go on); elsewhere
#          TFX 1.16 in .venv-tfx-1.16/ (Python 3.10).
#   container  .venv/ driving Docker: -m "container and not container_extra", the compiled
#          Kubeflow job's steps in containers of the image (scripts/build_image.sh, built in the
#          background from the start: Docker installed and started where missing, as root), one
#          test at a time: the whole job once in the kfp mode (and TFX's stock entry point failing
#          at StatisticsGen), the vertex mode's two-worker Trainer on that run's outputs, the
#          retry policy, the kfp Trainer stopped and resubmitted, killed and retried (~6 min).
#          The extra ones (the vertex job in schemas 2.1 and 2.0, the local-run comparison,
#          vertex's SIGTERM resume, the tuned job, the Tuner as three containers, the killed
#          worker) add ~19 min: -m container runs them.
#          The tfx run leaves these tests out (-m "not container").
#   wheel  the built wheel in a new venv outside the clone (scripts/wheel_check.sh: Python 3.12
#          and uv of .venv-lib/, requirements/lock-lib.txt's versions): `ga-tfx --version` and
#          -m "not tfx and not slow and not source_tree" against the installed package, from a
#          copy of the clone without its source packages; oneDNN's kernels on (the tfx run
#          covers Eigen's).
#   keras3 the built wheel as a Keras 3 user installs it: `ga-tfx[keras3]` with its dependencies
#          in a new venv outside the clone (scripts/wheel_check.sh, GA_TFX_WHEEL_ENV=keras3:
#          Python 3.12 and uv of .venv-keras3/, offline, requirements/lock-keras3.txt's versions:
#          keras 3.15.1, TF 2.21, JAX 0.12, keras-tuner 1.4.8), checked to hold no tf-keras;
#          -m keras3, the Keras 3 front-end's tests (ga_tfx.keras3) and docs examples, from a
#          copy of the clone without its source packages, twice in that one venv: with
#          KERAS_BACKEND=tensorflow (report keras3-tensorflow) and KERAS_BACKEND=jax
#          (keras3-jax); a test for one backend only is deselected in the other's run
#          (tests/conftest.py). The other tiers do not collect these modules.
# A -m expression given here is combined with each tier's own ("not tfx" for lib, the other
# stack's above). GA_TFX_TEST_ENVS picks the environments ("tfx wheel keras3 other container" by
# default, lib on request; e.g. GA_TFX_TEST_ENVS=tfx for a TFX-only file).
# Exit status: 0 only when every run passed; a run that collects no test (pytest's 5) fails, and
# so does a run that collects fewer tests than the committed floor (tests/collection_floor.json:
# per environment, in all and per marker; checked when no -m, -k or test path is given here).
# Each run prints what it collected per marker. A TFX environment in which TFX does not import
# fails at once (tests/conftest.py), instead of leaving out the modules marked tfx.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The lint step (scripts/lint.sh: ruff check, ruff format --check, mypy on the public API) runs
# first; a finding fails the test command. GA_TFX_LINT=0 skips it for one run.
LINT_DEFAULT=1
# What the other stack runs (see above).
OTHER_MARKER="tfx and (not slow or stack)"
# pytest-xdist workers per run (GA_TFX_TEST_WORKERS; 1: none). Two on two cores: the slow tier
# is mostly pipelines whose components run one after the other in one Python thread (Beam's
# DirectRunner, ML Metadata, process starts), so two workers keep both cores busy: the whole
# suite took 37 min with -n 2 beside a second suite's run, where serially it took 41-49 min
# alone. Each worker's TensorFlow computes on one thread (tests/conftest.py).
# --dist worksteal: a worker that runs out of tests takes pending ones from the other, so the
# tier does not end with one core idle behind a queue of the other's long pipeline tests.
workers="${GA_TFX_TEST_WORKERS:-2}"
xdist=()
[ "$workers" = 1 ] || xdist=(-n "$workers" --dist worksteal)

# lib is not in the default set: its run is the source_tree tests, which read files (the same
# on both stacks) and run in the tfx run too; the library without TFX on TF 2.21 is the wheel
# run's (80 s of CI saved; GA_TFX_TEST_ENVS="tfx lib ..." still runs it).
read -r -a envs <<< "${GA_TFX_TEST_ENVS:-tfx wheel keras3 other container}"
wants() { [[ " ${envs[*]} " == *" $1 "* ]]; }
reports="$(mktemp -d)"
setup_pid=""
image_pid=""
cleanup() {
  [ -z "$setup_pid" ] || kill "$setup_pid" 2>/dev/null || true
  [ -z "$image_pid" ] || kill "$image_pid" 2>/dev/null || true
  rm -rf "$reports"
}
trap cleanup EXIT

# The Debian 13 root, where the other stack or the container stage needs it, is made first:
# both use it (the other stack runs in it; the image's base is imported from it).
other_where=""
if wants other; then read -r _ other_stack other_where <<< "$(bash "$root/scripts/bootstrap.sh" which)"; fi
if [ "$other_where" = root ] || wants container; then bash "$root/scripts/debian13_root.sh" build; fi
# The container stage's image is built in the background too (scripts/build_image.sh: Docker
# installed and started where missing; mostly downloads): its tests find it built and cached.
if wants container; then
  echo "== [container] the image built in the background: $reports/container.setup.log"
  bash "$root/scripts/build_image.sh" > "$reports/container.setup.log" 2>&1 &
  image_pid=$!
fi
# The other stack is set up in the background (downloads and installs, mostly waiting on the
# network), while this stack's environments are set up and tested.
if wants other; then
  echo "== [other] TFX $other_stack ($other_where) set up in the background: $reports/other.setup.log"
  # Each stack's set-up ends with the resolve check: a user's `pip install "ga-tfx[tfx]"`
  # beside that TFX resolves (bootstrap.sh check), shown in this log.
  if [ "$other_where" = root ]; then
    bash "$root/scripts/debian13_root.sh" run bash -c \
      "bash scripts/bootstrap.sh && bash scripts/bootstrap.sh check" \
      > "$reports/other.setup.log" 2>&1 &
  else
    bash -c "bash '$root/scripts/bootstrap.sh' other && bash '$root/scripts/bootstrap.sh' check other" \
      > "$reports/other.setup.log" 2>&1 &
  fi
  setup_pid=$!
fi
this_envs=()
for name in "${envs[@]}"; do
  case "$name" in
    other) ;;
    container) [[ " ${this_envs[*]} " == *" tfx "* ]] || this_envs+=(tfx) ;;  # the harness's kfp
    wheel) [[ " ${this_envs[*]} " == *" lib "* ]] || this_envs+=(lib) ;;  # its uv and Python
    *) [[ " ${this_envs[*]} " == *" $name "* ]] || this_envs+=("$name") ;;
  esac
done
[ "${#this_envs[@]}" = 0 ] || bash "$root/scripts/bootstrap.sh" "${this_envs[@]}"
if wants tfx; then bash "$root/scripts/bootstrap.sh" check; fi
cd "$root"

if [ "${GA_TFX_LINT:-$LINT_DEFAULT}" = 1 ]; then
  bash "$root/scripts/lint.sh"
fi

# The arguments of the tiers that add their own marker: every -m EXPR (or -mEXPR) becomes
# -m "(EXPR) and (TIER)". Without -m, lib is the library's fast tier, "not tfx and not slow":
# the slow multi-process runs of the library are the same code on both stacks and run once, in
# the TFX environment (this keeps CI, installation included, inside its time).
plain_args=() user_marker="" expect_marker=0
for arg in "$@"; do
  if [ "$expect_marker" = 1 ]; then user_marker="$arg"; expect_marker=0
  elif [ "$arg" = "-m" ]; then expect_marker=1
  elif [[ "$arg" == -m?* ]]; then user_marker="${arg#-m}"
  else plain_args+=("$arg"); fi
done
# tier_marker TIER: TIER, or "(USER) and (TIER)".
tier_marker() {
  if [ -n "$user_marker" ]; then echo "($user_marker) and ($1)"; else echo "$1"; fi
}
# The library tier's own run is the tests that read the source files (marker source_tree); the
# rest of its fast tier runs in the wheel environment, against the installed package on the
# same stack (Python 3.12, TF 2.21), so CI runs those tests once, not twice. A -m given here
# selects from the whole library tier.
lib_marker="$(tier_marker "not tfx")"
[ -n "$user_marker" ] || lib_marker="not tfx and not slow and source_tree"

# A selection given here (a -m or -k expression, a test path or node id) runs a part of the
# suite: the floor is then not checked, the counts are still printed.
custom_selection=0
for arg in "$@"; do
  case "$arg" in
    -m|-m?*|-k|-k?*|--deselect*|--lf|--last-failed|--ff|--failed-first|tests|tests/*|*.py|*::*)
      custom_selection=1 ;;
  esac
done

# The Keras 3 tier is two runs, one per backend (each its own reports).
runs=()
for name in "${envs[@]}"; do
  if [ "$name" = keras3 ]; then runs+=(keras3-tensorflow keras3-jax); else runs+=("$name"); fi
done

status=0
for name in "${runs[@]}"; do
  run_env=(GA_TFX_COLLECTION_REPORT="$reports/$name.collection.json")
  runner=()  # the command that runs pytest: "$python" -m pytest unless the case says
  case "$name" in
    tfx) python="$root/.venv/bin/python"
         args=("${xdist[@]}" -m "$(tier_marker "not container")" "${plain_args[@]}") ;;
    # The compiled Kubeflow job in Docker containers (tests/test_container_job.py), one test at
    # a time: its containers use both cores.
    container) python="$root/.venv/bin/python"
         args=(-m "$(tier_marker "container and not container_extra")" "${plain_args[@]}") ;;
    # The library tier keeps TensorFlow's oneDNN kernels on (tests/conftest.py turns them off
    # unless told): the tfx run covers the Eigen kernels, this one oneDNN's.
    lib) python="$root/.venv-lib/bin/python"
         args=("${xdist[@]}" -m "$lib_marker" "${plain_args[@]}")
         run_env+=(TF_ENABLE_ONEDNN_OPTS=1) ;;
    other) args=("${xdist[@]}" -m "$(tier_marker "$OTHER_MARKER")" "${plain_args[@]}")
         python="$root/.venv-tfx-$other_stack/bin/python" ;;
    # The wheel in a new venv (its Python is .venv-lib/'s); without -m here the script's own
    # selection, the library's fast tier less the tests that read the source files.
    wheel) python="$root/.venv-lib/bin/python"
         runner=(bash "$root/scripts/wheel_check.sh")
         args=("${xdist[@]}" "${plain_args[@]}")
         run_env+=(TF_ENABLE_ONEDNN_OPTS=1)  # oneDNN's kernels, as the library tier had them
         [ -z "$user_marker" ] || args+=(-m "$(tier_marker "not tfx and not source_tree")") ;;
    # The wheel's Keras 3 environment, made by the first backend's run in $reports and reused
    # by the second's.
    keras3-*) python="$root/.venv-keras3/bin/python"
         runner=(bash "$root/scripts/wheel_check.sh")
         args=("${xdist[@]}" -m "$(tier_marker keras3)" "${plain_args[@]}")
         run_env+=(KERAS_BACKEND="${name#keras3-}" GA_TFX_WHEEL_ENV=keras3
                   GA_TFX_WHEEL_DIR="$reports/keras3-wheel") ;;
    *) echo "error: unknown environment '$name' in GA_TFX_TEST_ENVS (allowed: tfx, lib, wheel, keras3, other, container)" >&2; exit 2 ;;
  esac
  [ "${#runner[@]}" -gt 0 ] || runner=("$python" -m pytest)
  if [ "$name" = container ]; then
    rc=0; wait "$image_pid" || rc=$?
    image_pid=""
    grep -E '^\[image\]|image OK' "$reports/container.setup.log" || true
    if [ "$rc" != 0 ]; then
      tail -40 "$reports/container.setup.log"
      echo "== [container] FAILED: building the image exited $rc =="
      status=1; continue
    fi
  fi
  if [ "$name" = other ]; then
    rc=0; wait "$setup_pid" || rc=$?
    setup_pid=""
    if [ "$rc" != 0 ]; then
      tail -40 "$reports/other.setup.log"
      echo "== [other] FAILED: setting up TFX $other_stack ($other_where) exited $rc =="
      status=1; continue
    fi
    grep -E '^\[(bootstrap|debian13)\]' "$reports/other.setup.log" || true
  fi
  rc=0
  if [ "$name" = other ] && [ "$other_where" = root ]; then
    # In the root: the copy's .venv/ is TFX 1.21; its reports come back through the root's /srv.
    rootdir="$(bash "$root/scripts/debian13_root.sh" path)"
    rm -rf "$rootdir/srv/ga-tfx-reports" && mkdir -p "$rootdir/srv/ga-tfx-reports"
    echo "== [other] TFX $other_stack in the Debian 13 root $rootdir =="
    bash "$root/scripts/debian13_root.sh" run env \
      GA_TFX_COLLECTION_REPORT=/srv/ga-tfx-reports/other.collection.json \
      .venv/bin/python -m pytest --junitxml=/srv/ga-tfx-reports/other.xml "${args[@]}" || rc=$?
    cp "$rootdir"/srv/ga-tfx-reports/other.* "$reports/" 2>/dev/null || true
  else
    echo "== [$name] $("$python" -c 'import platform; print("Python", platform.python_version())') =="
    env "${run_env[@]}" "${runner[@]}" --junitxml="$reports/$name.xml" "${args[@]}" || rc=$?
  fi
  echo "== [$name] pytest exit status $rc$([ "$rc" = 5 ] && echo ' (no test collected)') =="
  [ "$rc" = 0 ] || status=1
done

# What each run collected, per marker, against the committed floor; then one closing line for
# both runs, from their JUnit reports.
"$root/.venv/bin/python" - "$reports" "$custom_selection" "$root/tests/collection_floor.json" \
  "${runs[@]}" <<'EOF' || status=1
import json
import sys
import xml.etree.ElementTree as ET

folder, custom, floor_file, names = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4:]
with open(floor_file) as f:
    floors = json.load(f)
short = False
selected = {}  # per environment: the tests its collection report counts
for name in names:
    try:
        with open(f"{folder}/{name}.collection.json") as f:
            report = json.load(f)
    except (OSError, ValueError):
        print(f"[{name}] no collection report: pytest stopped before collecting")
        short = True
        continue
    counts = dict(report["by_marker"], selected=report["selected"])
    selected[name] = report["selected"]
    print(
        f"[{name}] collected {counts['selected']} tests ({report['deselected']} deselected): "
        f"{counts['tfx']} tfx, {counts['slow']} slow ({counts.get('stack', 0)} of them stack), "
        f"{counts['neither']} neither"
    )
    if report["tfx_modules_not_collected"] and name == "tfx":
        left_out = report["tfx_modules_not_collected"]
        print(f"[{name}] FAILED: modules marked tfx not collected: {left_out}")
        short = True
    if custom:
        print(f"[{name}] floor not checked: a selection was given")
        continue
    floor = floors.get(name)
    if floor is None:  # a tier new since the floor was committed (the lead adds it)
        print(f"[{name}] no committed floor yet")
        continue
    below = [f"{key} {counts[key]} < {floor[key]}" for key in floor if counts[key] < floor[key]]
    if below:
        print(
            f"[{name}] FAILED: fewer tests than the committed floor ({', '.join(below)}; "
            "tests/collection_floor.json): if tests were removed on purpose, lower the floor "
            "in the same commit"
        )
        short = True
    else:
        print(f"[{name}] floor {floor['selected']} tests: met")
# The report must count the tests this run ran: one written by another pytest (a test that
# starts one) would check the floor against the wrong collection.
total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for name in names:
    try:
        suite = ET.parse(f"{folder}/{name}.xml").getroot().find("testsuite")
    except (OSError, ET.ParseError):
        print(f"[{name}] no JUnit report")
        sys.exit(1)
    for key in total:
        total[key] += int(suite.get(key, 0))
    ran = int(suite.get("tests", 0))
    if name in selected and ran != selected[name] and not int(suite.get("errors", 0)):
        print(
            f"[{name}] FAILED: the collection report counts {selected[name]} tests but the "
            f"run reported {ran}: the floor was checked against another collection"
        )
        short = True
failed = total["failures"] + total["errors"]
passed = total["tests"] - failed - total["skipped"]
print(f"total: {passed} passed, {failed} failed, {total['skipped']} skipped")
sys.exit(1 if short else 0)
EOF
exit "$status"
