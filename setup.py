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


# Direct dependencies, pinned to the set proven to install and work together on Python 3.10
# here; requirements/lock.txt pins the whole resolved tree (the set-up scripts install it).
INSTALL_REQUIRES = [
    # Newest TFX installable on glibc 2.36: 1.17+ needs ml-metadata/tfx-bsl wheels built for
    # glibc 2.39. `kfp` extra -> kfp 2.5.0 for KubeflowV2DagRunner. Brings TF 2.16.2.
    "tfx[kfp]==1.16.0",
    # Keras 2, the only Keras that TFX 1.16's Transform supports.
    "tf-keras==2.16.0",
    "tensorflow==2.16.2",
    # Newer Beam no longer depends on dill, which tfx_bsl.beam imports (ModuleNotFoundError at
    # the first TFX component import). 2.59 brings dill 0.3.1.1 and runs TFX 1.16's components.
    "apache-beam[gcp]==2.59.0",
    # keras-tuner 1.4.6-1.4.8 reject tf-keras models with FatalTypeError (keras-tuner
    # issue 1039: they `import keras`, which is Keras 3); 1.4.5 works with tf-keras 2.16.
    "keras-tuner==1.4.5",
]

setup(
    name="ga-tfx",
    version="0.1.0",
    description="Gradient accumulation as a first-class citizen of TensorFlow Extended",
    packages=_packages(),
    package_dir=dict(NAMESPACED_FOLDERS),
    package_data={"ga_tfx.pipelines": ["data/digits/*.csv"]},  # the shipped pipeline data
    python_requires=">=3.10,<3.11",  # TFX 1.16 supports 3.9-3.10; the stack is proven on 3.10
    install_requires=INSTALL_REQUIRES,
    extras_require={"test": ["pytest==9.2.0"]},
    entry_points={"console_scripts": ["ga-tfx=ga_tfx.pipelines.cli:main"]},
)
