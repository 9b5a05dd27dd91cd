"""Seeded bugs in ga_tfx.compat: gradient-accumulator's arguments mapped onto ga-tfx's."""

from .mutation import COMPAT, Mutation

MUTATIONS = [
    Mutation(
        "compat.agc_alias_ignored",
        COMPAT,
        "        )\n    return agc\n",
        "        )\n    return use_agc\n",
        ("tests/test_compat_gradient_accumulator.py", "-k", "agc_clips"),
    ),
    Mutation(
        "compat.eps_not_passed_on",
        COMPAT,
        "            agc_eps=eps,\n",
        "            agc_eps=PACKAGE_EPS,\n",
        ("tests/test_compat_gradient_accumulator.py", "-k", "agc_clips"),
    ),
    Mutation(
        "compat.clip_keywords_dropped",
        COMPAT,
        "            _set_clipping(self.optimizer, key, value)\n",
        "            pass\n",
        ("tests/test_compat_gradient_accumulator.py", "-k", "clipping_keywords_clip"),
    ),
    Mutation(
        "compat.bn_own_window_one_call_late",  # the layer's own windows: K + 1 calls each
        "ga_tfx/compat/gradient_accumulator/layers.py",
        "steps >= self.accum_steps, self._apply_own_window",
        "steps > self.accum_steps, self._apply_own_window",
        ("tests/test_batchnorm.py", "-k", "compat_own_windows"),
    ),
]
