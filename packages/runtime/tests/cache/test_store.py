"""ArtifactCache: round trips, sharing with other processes, damage handling, concurrent writers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ember.runtime import ArtifactCache, CacheKeyError, artifact_key, default_cache_root

KEY = artifact_key(b"graph", {"opt": 3}, {"ember-inductor": "0.1.0"})
PAYLOAD = b"\x7fELF compiled artifact" + bytes(range(256)) * 64


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=_child_env(),
        check=True,
        timeout=120,
    )


def test_round_trip(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    assert cache.get(KEY) is None
    assert cache.put(KEY, PAYLOAD)
    assert cache.get(KEY) == PAYLOAD
    assert (cache.stats.hits, cache.stats.misses, cache.stats.writes) == (1, 1, 1)
    assert cache.path(KEY).is_relative_to(tmp_path)
    cache.reset()
    assert cache.stats.hits == 0
    assert ArtifactCache(tmp_path).get(KEY) == PAYLOAD  # another instance, same directory


def test_overwrite_and_clear(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    cache.put(KEY, b"first")
    cache.put(KEY, b"second")
    assert cache.get(KEY) == b"second"
    cache.clear()
    assert cache.get(KEY) is None
    assert cache.put(KEY, b"third")  # the directory is recreated on demand
    assert cache.get(KEY) == b"third"


def test_default_directory_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "ember-cache"))
    assert default_cache_root() == tmp_path / "ember-cache"
    assert ArtifactCache().root == tmp_path / "ember-cache"
    monkeypatch.delenv("EMBER_CACHE_DIR")
    assert default_cache_root() == Path.home() / ".cache" / "ember"


def test_keys_that_are_not_digests_are_rejected(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    for bad in ("../../etc/passwd", KEY.upper(), KEY[:-1], ""):
        with pytest.raises(CacheKeyError):
            cache.get(bad)
        with pytest.raises(CacheKeyError):
            cache.put(bad, b"x")


def test_a_second_process_reads_what_the_first_wrote(tmp_path: Path) -> None:
    _python(
        """
        import sys
        from ember.runtime import ArtifactCache
        assert ArtifactCache(sys.argv[1]).put(sys.argv[2], bytes(range(256)) * 100)
        """,
        str(tmp_path),
        KEY,
    )
    assert ArtifactCache(tmp_path).get(KEY) == bytes(range(256)) * 100
    ArtifactCache(tmp_path).put(KEY, PAYLOAD)
    child = _python(
        """
        import sys
        from ember.runtime import ArtifactCache
        print(ArtifactCache(sys.argv[1]).get(sys.argv[2]).hex())
        """,
        str(tmp_path),
        KEY,
    )
    assert bytes.fromhex(child.stdout.strip()) == PAYLOAD


def _damage(path: Path, how: str) -> None:
    blob = path.read_bytes()
    if how == "truncated":
        path.write_bytes(blob[: len(blob) // 2])
    elif how == "corrupted":
        flipped = bytearray(blob)
        flipped[len(blob) - 100] ^= 0x01
        path.write_bytes(bytes(flipped))
    elif how == "garbage":
        path.write_bytes(os.urandom(len(blob)))
    elif how == "empty":
        path.write_bytes(b"")


@pytest.mark.parametrize("how", ["truncated", "corrupted", "garbage", "empty"])
def test_damaged_entries_are_misses_deleted_and_rebuilt(tmp_path: Path, how: str) -> None:
    cache = ArtifactCache(tmp_path)
    cache.put(KEY, PAYLOAD)
    _damage(cache.path(KEY), how)

    assert cache.get(KEY) is None
    assert cache.stats.corrupt == 1
    assert not cache.path(KEY).exists(), "a damaged entry is deleted"
    cache.put(KEY, PAYLOAD)  # what a compiler does after a miss
    assert cache.get(KEY) == PAYLOAD


def test_a_directory_in_place_of_an_entry_is_a_miss(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    cache.path(KEY).mkdir(parents=True)
    assert cache.get(KEY) is None
    assert not cache.put(KEY, PAYLOAD)  # cannot replace a directory: reported, not raised
    assert cache.stats.write_errors == 1
    assert [p.name for p in cache.path(KEY).parent.iterdir()] == [KEY], "no temporary left"


def test_a_killed_writer_leaves_no_visible_entry(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    shard = cache.path(KEY).parent
    shard.mkdir(parents=True)
    # What a writer killed mid-write leaves: a partial temporary file, never the entry itself.
    (shard / f".{KEY[:16]}.abc123.tmp").write_bytes(PAYLOAD[:100])
    assert cache.get(KEY) is None
    cache.put(KEY, PAYLOAD)
    assert cache.get(KEY) == PAYLOAD
    cache.clear()
    assert not shard.exists()


_WRITER = """
import sys, time
from pathlib import Path
from ember.runtime import ArtifactCache
directory, key, tag, count = sys.argv[1:]
cache = ArtifactCache(directory)
payload = tag.encode() * 65536
Path(directory, f"ready-{tag}").touch()
while not Path(directory, "go").exists():  # start together, after both imported torch
    time.sleep(0.005)
for _ in range(int(count)):
    assert cache.put(key, payload)
"""


@pytest.mark.slow
def test_concurrent_writers_of_one_key_never_expose_a_damaged_entry(tmp_path: Path) -> None:
    valid = {b"A" * 65536, b"B" * 65536}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), KEY, tag, "40"], env=_child_env()
        )
        for tag in ("A", "B")
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{tag}").exists() for tag in "AB"):
        assert time.monotonic() < deadline and all(w.poll() is None for w in writers)
        time.sleep(0.01)
    (tmp_path / "go").touch()
    reader = ArtifactCache(tmp_path)
    reads = 0
    while any(w.poll() is None for w in writers) and time.monotonic() < deadline:
        got = reader.get(KEY)
        assert got is None or got in valid
        reads += 1
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    assert reader.stats.corrupt == 0
    assert reader.get(KEY) in valid
    leftovers = [p.name for p in reader.path(KEY).parent.iterdir() if p.name != KEY]
    assert leftovers == [], "writers left temporary files behind"
    assert reads > 0
