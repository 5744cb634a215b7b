#!/usr/bin/env bash
# Issue 11's mass expiry alone: a fresh database seeded with the 1.12 M-slot grid, one release
# server on it, COUNT (100000) holds whose expiry moves to the same second, then the time until
# the server has released them all, and the invariant check (`clinic-loadtest life --scenario
# expiry`; features.sh runs the same step after the others).
#
#   PG=postgres://postgres@127.0.0.1:55432 REDIS=redis://127.0.0.1:56379/4 BIN=… loadtest/expiry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DB=${DB:-lt_expiry}
REDIS=${REDIS-redis://127.0.0.1:6379/4}
PORT=${PORT:-18083}
OUT=${OUT:-target/loadtest-expiry}
BIN=${BIN:-target/release/clinic-booking}
LT=${LT:-target/release/clinic-loadtest}
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef}
mkdir -p "$OUT"
psql -X -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
[ -n "$REDIS" ] && redis-cli -u "$REDIS" FLUSHDB > /dev/null
env DATABASE_URL="$PG/$DB" ${REDIS:+REDIS_URL="$REDIS"} BIND_ADDR="127.0.0.1:$PORT" RUST_LOG=warn \
  "$BIN" serve > "$OUT/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.2; done
"$LT" seed --no-migrate --database-url "$PG/$DB" --out "$OUT/seed.json"
"$LT" life --scenario expiry --connections "${CONNECTIONS:-64}" --count "${COUNT:-100000}" \
  --url "http://127.0.0.1:$PORT" --seed "$OUT/seed.json" --database-url "$PG/$DB"
