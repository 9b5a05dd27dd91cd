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


# Two proven stacks (README "Support matrix"), each locked in full under requirements/:
#   library only: Python 3.12, TensorFlow 2.21.0 + tf-keras 2.21.0 (requirements/lock-lib.txt);
#   library + TFX: Python 3.10, TFX 1.16 with TensorFlow 2.16.2 + tf-keras 2.16.0 (lock.txt).
# `pip install ga-tfx` installs the library (ga_tfx: engine, optimizer wrapper, BN, AGC) only;
# the TFX components and pipelines (ga_tfx.components, ga_tfx.pipelines) need the `tfx` extra.
INSTALL_REQUIRES = [
    # Keras 2 comes from tf-keras, whose minor version must match TensorFlow's. The range spans
    # the two proven ends: 2.16 (the newest TFX here brings it) and 2.21 (the newest served).
    "tensorflow>=2.16.2,<2.22",
    "tf-keras>=2.16.0,<2.22",
]

EXTRAS_REQUIRE = {
    # The TFX stack, exact: it is proven only as a whole, on Python 3.10 (lock.txt).
    "tfx": [
        # Newest TFX installable on glibc 2.36: 1.17+ needs ml-metadata/tfx-bsl wheels built for
        # glibc 2.39. `kfp` extra -> kfp 2.5.0 for KubeflowV2DagRunner. TFX 1.16 supports only
        # Python 3.9-3.10 and brings TF 2.16.2.
        "tfx[kfp]==1.16.0",
        # Keras 2 for TF 2.16, the only Keras that TFX 1.16's Transform supports.
        "tf-keras==2.16.0",
        "tensorflow==2.16.2",
        # Newer Beam no longer depends on dill, which tfx_bsl.beam imports (ModuleNotFoundError
        # at the first TFX component import). 2.59 brings dill 0.3.1.1 and runs TFX 1.16's
        # components.
        "apache-beam[gcp]==2.59.0",
        # The plot of `ga-tfx run --tune`'s tuning report (pipelines/tuning_report.py).
        "matplotlib==3.10.9",
    ],
    # ga_tfx.tuning (Keras Tuner). keras-tuner 1.4.6-1.4.8 reject tf-keras models with
    # FatalTypeError (keras-tuner issue 1039: they `import keras`, which is Keras 3); 1.4.5 works
    # with tf-keras 2.16 (Python 3.10) and 2.21 (Python 3.12), proven by tests/test_tuning.py.
    # keras-tuner imports tensorboard in every trial but does not require it: TensorFlow brought
    # it with 2.16 (lock.txt); TF 2.21 does not (ModuleNotFoundError in Tuner.run_trial).
    "tuner": ["keras-tuner==1.4.5", "tensorboard>=2.16.2"],
    # The test suite; scikit-learn is the digits data of `ga-tfx demo` (tests/test_demo.py).
    # pytest-xdist runs the fast tier on both cores (`-n 2`, README "Tests").
    "test": ["pytest==9.2.0", "pytest-xdist==3.8.0", "scikit-learn>=1.5.1"],
    # Linter/formatter and type checker of scripts/lint.sh (config in pyproject.toml); exact, so
    # that a new release cannot fail CI on unchanged code.
    "dev": ["ruff==0.17.6", "mypy==2.4.1"],
}

setup(
    name="ga-tfx",
    version="0.1.0",
    description="Gradient accumulation as a first-class citizen of TensorFlow Extended",
    packages=_packages(),
    package_dir=dict(NAMESPACED_FOLDERS),
    package_data={"ga_tfx.pipelines": ["data/digits/*.csv", "data/*.pbtxt"]},  # data, schema
    # 3.10: the TFX stack (TFX 1.16 supports 3.9-3.10); 3.12: the library stack. 3.11 is not
    # proven here, 3.13 not yet (nothing on it is tested).
    python_requires=">=3.10,<3.13",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={"console_scripts": ["ga-tfx=ga_tfx.pipelines.cli:main"]},
)
