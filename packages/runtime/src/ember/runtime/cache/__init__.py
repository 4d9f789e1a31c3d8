"""The on-disk compiled-artifact cache: keys, the entry format, and the store.

`key` hashes what an artifact depends on, `entry` frames an artifact with a checked header,
and `store` (`ArtifactCache`) writes entries atomically and reads them back safely.
"""
