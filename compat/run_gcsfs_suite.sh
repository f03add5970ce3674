#!/usr/bin/env bash
# gcsfs's own test suite run twice against `fluxfs serve`: with plain gcsfs.core.GCSFileSystem, then with
# fluxfs.FluxFileSystem substituted (flux_subst.py). Prints the tests that pass with gcsfs and fail with
# fluxfs (compare.py); exits 1 if one of them is not in the allow file. `make compat` runs it.
#
# Usage, from the project root:  compat/run_gcsfs_suite.sh [ALLOW_FILE] [-- PYTEST_ARGS...]
#   PYTHON=.venv/bin/python (default) must have fluxfs installed (make venv builds it).
#   ALLOW_FILE: test ids that may fail with fluxfs by design, one per line, '#' reason
#     (tests/compat/gcsfs_allow.txt).
#   WORK: scratch folder (default /tmp/fluxfs-gcsfs-suite); downloads are cached there.
#
# gcsfs's tests are not in its sdist or wheel: they are fetched from GitHub at commit $GCSFS_TESTS_COMMIT
# (the suite this allow file was written against) on first use and cached under $WORK. Offline, point
# GCSFS_TESTS_TARBALL at a .tar.gz of gcsfs's source at that commit (or of just its gcsfs/tests folder),
# e.g. one made on a connected machine with
#   curl -L -o gcsfs-tests.tar.gz https://codeload.github.com/fsspec/gcsfs/tar.gz/20c58d0
# The suite's own test-only dependencies come from the package index once (cached under $WORK).
# Takes ~5 minutes on 2 cores. Skips: zonal/HNS tests (need real GCS), test_prefetcher.py (it imports
# gcsfs.prefetcher, which the installed gcsfs no longer has), perf/.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-.venv/bin/python}
GCSFS_TESTS_COMMIT=${GCSFS_TESTS_COMMIT:-20c58d0}
ALLOW=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  if [ -f "$1" ]; then ALLOW=$(cd "$(dirname "$1")" && pwd)/$(basename "$1"); else echo "no allow file $1: none used"; fi
  shift
fi
[ "${1:-}" = "--" ] && shift
WORK=${WORK:-/tmp/fluxfs-gcsfs-suite}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
"$PY" -c "import fluxfs, gcsfs" || { echo "$PY lacks fluxfs or gcsfs: run make venv first"; exit 2; }
GCSFS_DIR=$("$PY" -c 'import gcsfs, os; print(os.path.dirname(gcsfs.__file__))')

# gcsfs's tests at the pinned commit: a given tarball, else a cached or fresh download from GitHub.
TARBALL=${GCSFS_TESTS_TARBALL:-$WORK/gcsfs-$GCSFS_TESTS_COMMIT.tar.gz}
if [ ! -s "$TARBALL" ]; then
  URL=https://codeload.github.com/fsspec/gcsfs/tar.gz/$GCSFS_TESTS_COMMIT
  echo "fetching gcsfs's tests at $GCSFS_TESTS_COMMIT from $URL"
  FETCH='
import sys, urllib.request
try:
    data = urllib.request.urlopen(sys.argv[1], timeout=60).read()
except OSError as exc:
    sys.exit(f"download failed: {exc}")
open(sys.argv[2], "wb").write(data)'
  if ! "$PY" -c "$FETCH" "$URL" "$TARBALL.part"; then
    rm -f "$TARBALL.part"
    echo "could not download gcsfs's tests: set GCSFS_TESTS_TARBALL to a .tar.gz of gcsfs's source at commit" \
         "$GCSFS_TESTS_COMMIT (see this script's header)"
    exit 2
  fi
  mv "$TARBALL.part" "$TARBALL"
fi
SRC=$WORK/gcsfs-src
rm -rf "$SRC"; mkdir -p "$SRC"
tar -xzf "$TARBALL" -C "$SRC" || { echo "cannot unpack $TARBALL"; exit 2; }
TESTS=$(find "$SRC" -maxdepth 3 -type d -path '*gcsfs/tests' | head -n1)
[ -n "$TESTS" ] || { echo "$TARBALL holds no gcsfs/tests folder"; exit 2; }

RUN=$WORK/run
rm -rf "$RUN"; mkdir -p "$RUN"
cp -r "$GCSFS_DIR" "$RUN/gcsfs"                       # the installed gcsfs ...
rm -rf "$RUN/gcsfs/tests"
cp -r "$TESTS" "$RUN/gcsfs/tests"                     # ... plus its test suite
find "$RUN" -name __pycache__ -prune -exec rm -rf {} +
printf '%s\n' '[pytest]' 'addopts = -p no:cacheprovider' 'markers =' \
  '    requires_real_gcs: needs real GCS' '    requires_hns: needs HNS' '    requires_rapid: needs zonal buckets' > "$RUN/pytest.ini"
EXTRA=$WORK/extra-deps
[ -d "$EXTRA/pytest_asyncio" ] || "$PY" -m pip install -q --no-deps --target "$EXTRA" \
  pytest-asyncio==1.5.0 pytest-subtests==0.15.0 crcmod==1.7 ujson==6.1.0 || { echo "could not install test deps"; exit 2; }
"$PY" -c "import pytest_timeout" 2>/dev/null || "$PY" -m pip install -q --target "$EXTRA" pytest-timeout >/dev/null

export GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false NO_GCE_CHECK=true
unset FSSPEC_FLUX FSSPEC_FLUX_TOKEN
SERVER_PID=""
stop() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; SERVER_PID=""; }
trap stop EXIT INT TERM
run() {  # $1 = gcsfs | flux, then extra pytest args
  local kind=$1; shift
  local out=$WORK/server-$kind.out URL=""
  "$(dirname "$PY")/fluxfs" serve --host 127.0.0.1 --port 0 > "$out" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 100); do URL=$(head -n1 "$out" 2>/dev/null); [ -n "$URL" ] && break; sleep 0.1; done
  [ -n "${URL:-}" ] || { echo "fluxfs serve did not start: $(cat "$out")"; exit 2; }
  local plugin=(); [ "$kind" = flux ] && plugin=(-p flux_subst)
  echo "== gcsfs suite with $kind against $URL"
  (cd "$RUN" && STORAGE_EMULATOR_HOST=$URL PYTHONPATH=$EXTRA:$HERE \
     GOOGLE_APPLICATION_CREDENTIALS=$RUN/gcsfs/tests/fake-service-account-credentials.json \
     timeout 3000 "$PY" -m pytest "${plugin[@]}" -q -rfE --timeout=120 \
       --ignore=gcsfs/tests/test_prefetcher.py --ignore=gcsfs/tests/perf \
       --junitxml="$WORK/$kind.xml" "$@" gcsfs/tests) > "$WORK/$kind.log" 2>&1
  echo "   $(tail -n1 "$WORK/$kind.log")"
  stop
}
run gcsfs "$@"
run flux "$@"
"$PY" "$HERE/compare.py" "$WORK/gcsfs.xml" "$WORK/flux.xml" $ALLOW
