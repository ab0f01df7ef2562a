#!/usr/bin/env bash
# Services the full test suite uses beyond Python: PostgreSQL (the audit log's optional
# backend) and Chromium (the dashboard's browser test), from Debian packages.
# Idempotent. Prints the export line for MNEMOSCOPE_TEST_PG_URL; source-safe:
#   eval "$(bash scripts/ci_services.sh)"
set -euo pipefail
log() { echo "[ci_services] $*" >&2; }
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
need=()
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
VER="$(ls /usr/lib/postgresql | sort -V | tail -1)"
if ! pg_lsclusters -h 2>/dev/null | grep -q "^$VER main"; then
  $SUDO pg_createcluster "$VER" main >&2
fi
if ! pg_lsclusters -h | grep -q "^$VER main .* online"; then
  $SUDO pg_ctlcluster "$VER" main start >&2
fi
PORT="$(pg_lsclusters -h | awk -v v="$VER" '$1==v && $2=="main" {print $3}')"
$SUDO su postgres -c "psql -q -p $PORT -tc \"SELECT 1 FROM pg_roles WHERE rolname='mnemoscope'\" | grep -q 1 || psql -q -p $PORT -c \"CREATE ROLE mnemoscope LOGIN SUPERUSER PASSWORD 'mnemoscope'\"" >&2
$SUDO su postgres -c "psql -q -p $PORT -tc \"SELECT 1 FROM pg_database WHERE datname='mnemoscope_test'\" | grep -q 1 || createdb -p $PORT -O mnemoscope mnemoscope_test" >&2
log "PostgreSQL $VER on port $PORT, Chromium $(/usr/bin/chromium --version 2>/dev/null | head -1)"
echo "export MNEMOSCOPE_TEST_PG_URL=postgresql://mnemoscope:mnemoscope@127.0.0.1:$PORT/mnemoscope_test"
