#!/usr/bin/env bash
# Apache Superset against weir: installs Superset from PyPI into a virtual
# environment (once; ~5 minutes), prepares its metadata database, starts a
# fresh weir and runs tests/drivers/superset_check.py. Not part of `cargo
# test` (Superset's install is large); its output is kept in
# docs/bi-tools.md. Usage: tests/drivers/superset_check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/weir-target}"
venv="${SUPERSET_VENV:-/var/tmp/weir-superset-venv}"
port="${WEIR_PORT:-5611}"
work="$(mktemp -d /tmp/weir-superset.XXXXXX)"
trap 'kill "${weir_pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT

if [ ! -x "$venv/bin/superset" ]; then
    echo "== installing Apache Superset into $venv"
    python3 -m venv "$venv"
    # Superset 6.1.0's own metadata leaves out rich and cachetools, and
    # Flask-Caching 2.4+ passes an argument its cache class refuses.
    "$venv/bin/pip" install -q --disable-pip-version-check \
        apache-superset==6.1.0 psycopg2-binary rich cachetools flask-caching==2.3.1
fi

echo "== preparing Superset's metadata database"
cat > "$work/superset_config.py" <<EOF
SECRET_KEY = "weir-superset-check-not-secret-0123456789"
SQLALCHEMY_DATABASE_URI = "sqlite:///$work/superset.db"
WTF_CSRF_ENABLED = False
TALISMAN_ENABLED = False
EOF
export SUPERSET_CONFIG_PATH="$work/superset_config.py"
"$venv/bin/superset" db upgrade > "$work/setup.log" 2>&1
"$venv/bin/superset" fab create-admin --username admin --firstname Ad --lastname Min \
    --email admin@example.com --password admin >> "$work/setup.log" 2>&1
"$venv/bin/superset" init >> "$work/setup.log" 2>&1

echo "== starting weir on port $port"
cargo build -q
"$CARGO_TARGET_DIR/debug/weir" --listen "127.0.0.1:$port" --data-dir "$work/data" \
    > "$work/weir.log" 2>&1 &
weir_pid=$!
for _ in $(seq 50); do
    if (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.2
done

echo "== Superset $("$venv/bin/pip" show apache-superset | sed -n 's/^Version: //p') against weir"
"$venv/bin/python" tests/drivers/superset_check.py "$port" 2> "$work/superset.log" || {
    tail -40 "$work/superset.log"
    exit 1
}
