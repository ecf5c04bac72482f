"""Settings (pure): flag > environment > config file > default; unknown keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from neffcache.config import load_settings, parse_config_file, redact_url
from neffcache.errors import ConfigError

ENV = {"HOME": "/home/u"}


def test_defaults_live_under_home() -> None:
    s = load_settings(ENV)
    assert s.home == Path("/home/u/.cache/neffcache")
    assert s.store_url == "/home/u/.cache/neffcache/store"
    assert s.index_url == "sqlite:////home/u/.cache/neffcache/index.db"
    assert not s.index_explicit
    s = load_settings({"NEFFCACHE_HOME": "/srv/nc", **ENV})
    assert s.store_url == "/srv/nc/store"


def test_precedence_flag_env_file_default() -> None:
    file = {"store": "s3://file/p", "index": "sqlite:///file.db"}
    env = {**ENV, "NEFFCACHE_STORE": "s3://env/p", "NEFFCACHE_INDEX": "sqlite:///env.db"}
    assert load_settings(ENV, file).store_url == "s3://file/p"
    assert load_settings(env, file).store_url == "s3://env/p"
    assert load_settings(env, file, store="s3://flag/p").store_url == "s3://flag/p"
    assert load_settings(ENV, file).index_url == "sqlite:///file.db"
    assert load_settings(env, file).index_url == "sqlite:///env.db"
    s = load_settings(env, file, index="postgresql+psycopg://u@h/db")
    assert s.index_url == "postgresql+psycopg://u@h/db"
    assert s.index_explicit and load_settings(ENV, file).index_explicit


def test_config_file_errors_name_the_file_and_key() -> None:
    with pytest.raises(ConfigError, match=r"^c.toml: unknown key 'stroe'"):
        parse_config_file('stroe = "x"', "c.toml")
    with pytest.raises(ConfigError, match=r"^c.toml: store: expected a non-empty string"):
        parse_config_file("store = 3", "c.toml")
    with pytest.raises(ConfigError, match=r"^c.toml: not valid TOML"):
        parse_config_file("store = ", "c.toml")
    assert parse_config_file('store = "/x"', "c.toml") == {"store": "/x"}


def test_bad_index_url_is_refused_without_leaking_a_password() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(ENV, index="mysql://u:secret@h/db")
    assert "secret" not in str(info.value)
    assert redact_url("postgresql+psycopg://u:pw@h/db") == "postgresql+psycopg://u:***@h/db"
    assert redact_url("sqlite:///x.db") == "sqlite:///x.db"


def test_retire_table_is_read_and_checked() -> None:
    from neffcache.config import load_settings, parse_config_file
    from neffcache.errors import ConfigError

    values = parse_config_file('[retire]\nkeep_sdk_versions = 2\nkeep_matrices = ["a.toml"]\n'
                               'keep_restored_days = 7\n', "c.toml")
    settings = load_settings({"NEFFCACHE_HOME": "/tmp/h"}, values)
    assert dict(settings.retire) == {"keep_sdk_versions": 2, "keep_matrices": ("a.toml",),
                                     "keep_restored_days": 7}
    for bad in ('[retire]\nkeep_sdk_versions = 0\n', '[retire]\nkeep_days = 3\n',
                '[retire]\nkeep_restored_days = 0\n', '[retire]\nkeep_restored_days = "7"\n',
                'retire = "x"\n'):
        with pytest.raises(ConfigError):
            parse_config_file(bad, "c.toml")


def test_each_value_knows_its_source() -> None:
    file = {"store": "s3://file/p", "mirrors": "s3://m/p"}
    env = {**ENV, "NEFFCACHE_STORE": "s3://env/p", "NEFFCACHE_SIGNING_KEY": "PEM"}
    src = dict(load_settings(env, file, file_source="/etc/nc.toml", python="/py").sources)
    assert src["store"] == "NEFFCACHE_STORE" and src["mirrors"] == "/etc/nc.toml"
    assert src["python"] == "flag" and src["signing_key_pem"] == "NEFFCACHE_SIGNING_KEY"
    assert src["index"] == "default" and src["home"] == "default"
    assert dict(load_settings(ENV, file, file_source="/etc/nc.toml").sources)["store"] == \
        "/etc/nc.toml"


def test_a_named_config_file_must_exist(tmp_path: Path) -> None:
    from neffcache.config import read_settings

    with pytest.raises(ConfigError, match="NEFFCACHE_CONFIG=.*nope.toml: no such file"):
        read_settings({**ENV, "NEFFCACHE_CONFIG": str(tmp_path / "nope.toml")})
    # the default file ($NEFFCACHE_HOME/config.toml) may be absent
    assert read_settings({**ENV, "NEFFCACHE_HOME": str(tmp_path)}).config_file is None
    (tmp_path / "c.toml").write_text('store = "/s"\n')
    s = read_settings({**ENV, "NEFFCACHE_CONFIG": str(tmp_path / "c.toml")})
    assert s.store_url == "/s" and s.config_file == str(tmp_path / "c.toml")


@pytest.mark.parametrize("url,masked", [
    ("s3://AKIA:se/cr+et@bucket/neff", "s3://AKIA:***@bucket/neff"),
    ("s3://bucket/neff?X-Amz-Credential=AKIA&X-Amz-Signature=abc",
     "s3://bucket/neff?X-Amz-Credential=***&X-Amz-Signature=***"),
    ("postgresql+psycopg://u:pw@h/db", "postgresql+psycopg://u:***@h/db"),
    ("/local/path", "/local/path"),
])
def test_redact_url_masks_passwords_and_queries(url: str, masked: str) -> None:
    assert redact_url(url) == masked
