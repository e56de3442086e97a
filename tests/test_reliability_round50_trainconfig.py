"""Round 50: aspire.train.config cross-field rules (mix.mode without tasks; a task's ACL keys without the acl source)."""

import glob

import pytest

from aspire.config import ConfigError, load_config
from aspire.train.config import Config


def test_mix_mode_without_tasks_is_refused():
    for mode in ("alternating", "sequential"):
        with pytest.raises(ConfigError, match=f"mix.mode={mode} without tasks"):
            load_config(Config, None, [f"mix.mode={mode}"])
    assert load_config(Config, None, ["mix.mode=mixed"]).mix.mode == "mixed"
    cfg = load_config(Config, None, ["mix.mode=alternating", "tasks=[{name: cocite}]"])
    assert cfg.mix.mode == "alternating"


@pytest.mark.parametrize("name", ["crop", "title", "author"])
def test_acl_keys_without_acl_source_are_refused(name):
    with pytest.raises(ConfigError, match=r"tasks\[\]\.max_papers=5 .*sources=\['cocite'\]"):
        load_config(Config, None, [f"tasks=[{{name: {name}, sources: [cocite], max_papers: 5}}]"])
    with pytest.raises(ConfigError, match=r"tasks\[\]\.acl_path='x.jsonl'"):
        load_config(Config, None, [f"tasks=[{{name: {name}, sources: [cocite], acl_path: x.jsonl}}]"])
    sources = "[acl]" if name == "author" else "[cocite, acl]"  # an author task reads the acl source alone
    cfg = load_config(Config, None, [f"tasks=[{{name: {name}, sources: {sources}, max_papers: 5, acl_path: x.jsonl}}]"])
    assert cfg.tasks[0].max_papers == 5 and cfg.tasks[0].acl_path == "x.jsonl"


def test_shipped_training_configs_still_load():
    loaded = 0
    for path in sorted(glob.glob("configs/*.yaml")):
        try:
            load_config(Config, path)
            loaded += 1
        except ConfigError as err:
            assert "unknown config key" in str(err), (path, err)  # another command's config, not a training one
    assert loaded >= 30
