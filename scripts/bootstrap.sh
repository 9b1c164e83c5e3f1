#!/usr/bin/env bash
# Set up everything `make demo`, `make test` and `make bench` need, in this checkout:
#
#   1. .venv made with python3.11 (or python3 when it is 3.11+)
#   2. msgcask installed editable with its `dev`, `bench` and `spark` extras
#      (PySpark comes as a source package that pip builds: about a minute and
#      1 GB of temporary space the first time)
#   3. a Java 17+ runtime (for the Spark pipeline): installed with apt-get when
#      `java` is missing and we are root or have passwordless sudo; otherwise we
#      say what to install and go on (the Spark tests then fail, saying so).
#
# Idempotent. When nothing changed it returns in milliseconds: a stamp file in
# .venv records a hash of pyproject.toml, this script and the checkout's path, and
# steps 1-2 are skipped while it matches. Delete .venv (or `make clean`) to start over.
#
# Environment:
#   MSGCASK_PYTHON=/path/to/python   use this interpreter for the venv (3.11+, else we
#                                    stop; a .venv made with another one is rebuilt)
#   MSGCASK_SKIP_JAVA=1              do not look for or install Java
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
VENV="$ROOT/.venv"
STAMP="$VENV/.msgcask-bootstrap"
EXTRAS="dev,bench,spark"
JAVA_PKG="openjdk-17-jre-headless"

say() { printf 'bootstrap: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Two `make` runs at once (say `make demo` and `make test` in two terminals) must
# not build the same venv together: hold a lock on this script while we work.
if command -v flock >/dev/null 2>&1; then
    exec 9<"$SELF"
    flock 9
fi

stamp_key() {
    {
        printf 'path=%s\nextras=%s\npython=%s\n' "$ROOT" "$EXTRAS" "${MSGCASK_PYTHON:-}"
        sha256sum pyproject.toml "$SELF" | cut -d' ' -f1
    } | sha256sum | cut -d' ' -f1
}

# --------------------------------------------------------------------------- java

java_step() {
    [[ "${MSGCASK_SKIP_JAVA:-}" == 1 ]] && return 0
    if command -v java >/dev/null 2>&1; then
        return 0
    fi
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            say "warning: no 'java' on PATH. The Spark pipeline needs Java 17+;"
            say "         install it with: sudo apt-get install -y $JAVA_PKG"
            return 0
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        say "warning: no 'java' on PATH and no apt-get here; install a Java 17+ runtime by hand."
        return 0
    fi
    say "installing $JAVA_PKG (no 'java' on PATH) ..."
    # Slim Debian images lack this directory, and the JRE's postinst fails without it.
    "${sudo[@]}" mkdir -p /usr/share/man/man1
    if "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "$JAVA_PKG" </dev/null >/dev/null; then
        hash -r
        say "java: $(java -version 2>&1 | head -n1)"
    else
        say "warning: could not install $JAVA_PKG; the Spark pipeline and its tests need it."
    fi
}

java_version_check() {
    [[ "${MSGCASK_SKIP_JAVA:-}" == 1 ]] && return 0
    command -v java >/dev/null 2>&1 || return 0
    local line major
    line="$(java -version 2>&1 | head -n1)"
    major="$(sed -E 's/.*version "([0-9]+)(\.([0-9]+))?.*/\1 \3/' <<<"$line")"
    # Java 8 and older report "1.8.0_x": the major version is the second number.
    if [[ "$major" == "1 "* ]]; then major="${major#1 }"; else major="${major%% *}"; fi
    if [[ "$major" =~ ^[0-9]+$ ]] && ((major < 17)); then
        say "warning: $line; the Spark pipeline needs Java 17+ ($JAVA_PKG)."
    fi
}

# --------------------------------------------------------------------------- fast path

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$(stamp_key)" ]]; then
    java_step
    exit 0
fi

start=$SECONDS

# --------------------------------------------------------------------------- python

is_py311_plus() {
    "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1
}

find_python() {
    local cand
    for cand in python3.11 python3; do
        if command -v "$cand" >/dev/null 2>&1 && is_py311_plus "$cand"; then
            command -v "$cand"
            return 0
        fi
    done
    return 1
}

if [[ -n "${MSGCASK_PYTHON:-}" ]]; then
    # Asked for by name: that one or none, never another without a word.
    command -v "$MSGCASK_PYTHON" >/dev/null 2>&1 ||
        die "MSGCASK_PYTHON=$MSGCASK_PYTHON: no such interpreter; unset it or name a Python 3.11+"
    is_py311_plus "$MSGCASK_PYTHON" ||
        die "MSGCASK_PYTHON=$MSGCASK_PYTHON is older than 3.11 (or does not run); name a Python 3.11+"
    PY="$(command -v "$MSGCASK_PYTHON")"
else
    PY="$(find_python)" || die "need Python 3.11+ (python3.11, or python3 at 3.11 or newer) on PATH;
           on Debian/Ubuntu: apt-get install -y python3 python3-venv"
fi

# A venv that does not run, or that was made for another checkout path (its scripts'
# #! lines point there), is rebuilt from scratch.
if [[ -d "$VENV" ]]; then
    if ! is_py311_plus "$VENV/bin/python"; then
        say "removing broken or pre-3.11 .venv"
        rm -rf "$VENV"
    elif [[ -f "$VENV/.msgcask-path" && "$(cat "$VENV/.msgcask-path")" != "$ROOT" ]]; then
        say "removing .venv made for another path ($(cat "$VENV/.msgcask-path"))"
        rm -rf "$VENV"
    elif [[ -n "${MSGCASK_PYTHON:-}" && "$(cat "$VENV/.msgcask-python" 2>/dev/null)" != "$PY" ]]; then
        say "removing .venv made with another interpreter (MSGCASK_PYTHON=$MSGCASK_PYTHON)"
        rm -rf "$VENV"
    fi
fi

if [[ ! -d "$VENV" ]]; then
    say "creating .venv with $PY ($("$PY" -V 2>&1))"
    if ! "$PY" -m venv "$VENV"; then
        rm -rf "$VENV"
        # Debian's python3 ships venv's pip bootstrap in a separate package.
        if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
            say "installing python3-venv ..."
            DEBIAN_FRONTEND=noninteractive apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv </dev/null >/dev/null
            "$PY" -m venv "$VENV" || die "could not create .venv with $PY"
        else
            die "could not create .venv with $PY; install python3-venv (Debian/Ubuntu) and retry"
        fi
    fi
fi

printf '%s\n' "$ROOT" >"$VENV/.msgcask-path"
[[ -f "$VENV/.msgcask-python" ]] || printf '%s\n' "$PY" >"$VENV/.msgcask-python"

# --------------------------------------------------------------------------- install

say "installing msgcask (editable) with extras [$EXTRAS] ..."
"$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -qq \
    -e ".[$EXTRAS]" </dev/null ||
    die "pip install failed (see above)"

# Prove the install before stamping it.
for tool in ruff mypy pytest; do
    [[ -x "$VENV/bin/$tool" ]] || die "$tool missing from .venv after install"
done

java_step
java_version_check

stamp_key >"$STAMP"
say "ready in $((SECONDS - start))s: $("$VENV/bin/python" -V), $("$VENV/bin/ruff" --version), $("$VENV/bin/mypy" --version | cut -d' ' -f1-2)"
