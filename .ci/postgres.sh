#!/usr/bin/env bash
# Makes sure PostgreSQL 15's server programs (initdb, pg_ctl) exist: the
# structured-data tests start a throwaway server with them (see
# test/harness/postgres.go). Idempotent: does nothing when they are there.
set -euo pipefail
if command -v initdb >/dev/null 2>&1 || [ -x /usr/lib/postgresql/15/bin/initdb ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq postgresql-15 >/dev/null
test -x /usr/lib/postgresql/15/bin/initdb
