# Makes a bare device image run ember from the source tree: sourced by the device scripts
# (device_suite.sh) and usable on its own before any benchmark that starts ember processes:
#
#   source benchmarks/device_env.sh && python -m benchmarks.export_warm_start warm ...
#
# Carry `.whl/` (the `bytecode` wheel). Exports PYTHONPATH; PYTHON defaults to python3.
PYTHON="${PYTHON:-python3}"
# A bare device image has no `bytecode` (capture's one pure-Python dependency) and no ember:
# install a carried `.whl/` into a private folder, and put the source tree's packages on the
# path, so that a plain checkout runs (without them every case is `not_available`).
if ! "$PYTHON" -c 'import bytecode' 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    site="$(mktemp -d /tmp/ember-site.XXXXXX)"
    "$PYTHON" -m pip install -q --no-index --no-deps --target "$site" .whl/*.whl \
        && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PYTHON" -c 'import ember.capture' 2>/dev/null; then
    sources="$(printf '%s:' "$PWD"/packages/*/src)$PWD/src"
    export PYTHONPATH="$sources${PYTHONPATH:+:$PYTHONPATH}"
    echo "ember: the source tree on PYTHONPATH"
fi

# ember's backends are found through entry points ("ember.backends"), which a source tree on
# PYTHONPATH does not provide: without wheels, write their dist-info from the pyproject files.
if ! "$PYTHON" -c 'import sys, ember.capture as c; sys.exit("inductor" not in c.list_backends())' 2>/dev/null; then
    shim="$(mktemp -d /tmp/ember-entry-points.XXXXXX)"
    "$PYTHON" - "$shim" <<'PY'
import pathlib
import sys
import tomllib

root = pathlib.Path(sys.argv[1])
for pyproject in sorted(pathlib.Path("packages").glob("*/pyproject.toml")):
    project = tomllib.loads(pyproject.read_text())["project"]
    groups = project.get("entry-points", {})
    if not groups:
        continue
    name, version = project["name"], project.get("version", "0.0")
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in points.items()) + "\n"
            for group, points in groups.items()
        )
    )
PY
    export PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}"
    echo "ember: entry points from the source tree's pyproject files ($shim)"
fi
