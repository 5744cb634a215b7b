#!/usr/bin/env bash
# The load benchmark of BENCHMARKS.md, end to end: a fresh database, the 1.12 M-slot seed, the
# release server, the opening morning (open model) and the maximum-throughput runs (closed
# model), each ending with the database invariant check.
#
#   PG=postgres://postgres@127.0.0.1:55432 REDIS=redis://127.0.0.1:56379/4 loadtest/run-all.sh
#
# Settings (environment): PG (server URL without database), DB (database name, default lt),
# REDIS (Redis URL; empty: single-process mode), PORT (18080), OPENING_RATE (5000),
# OPENING_READ_RATE (500), OPENING_SECONDS (30), OPENING_WARMUP (3), MAX_SECONDS (15), CONNECTIONS (64),
# SERVER_ENV (extra K=V words for the server). Uses target/release binaries (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DB=${DB:-lt}
REDIS=${REDIS-redis://127.0.0.1:6379/4}
PORT=${PORT:-18080}
OUT=${OUT:-target/loadtest}
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef}
mkdir -p "$OUT"
psql -X -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
[ -n "$REDIS" ] && redis-cli -u "$REDIS" FLUSHDB > /dev/null
DATABASE_URL="$PG/$DB"
target/release/clinic-loadtest seed --database-url "$DATABASE_URL" --out "$OUT/seed.json"

read -ra extra <<< "${SERVER_ENV:-}"
env DATABASE_URL="$DATABASE_URL" ${REDIS:+REDIS_URL="$REDIS"} BIND_ADDR="127.0.0.1:$PORT" RUST_LOG=warn \
  "${extra[@]}" target/release/clinic-booking serve > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.2; done
curl -s "http://127.0.0.1:$PORT/readyz"; echo

run() { target/release/clinic-loadtest run --url "http://127.0.0.1:$PORT" --seed "$OUT/seed.json" \
          --database-url "$DATABASE_URL" "$@" || true; echo; }
run --scenario opening --rate "${OPENING_RATE:-5000}" --read-rate "${OPENING_READ_RATE:-500}" --duration "${OPENING_SECONDS:-30}" \
  --warmup "${OPENING_WARMUP:-3}" --timeline
for s in reads reject success mix; do
  run --scenario "$s" --connections "${CONNECTIONS:-64}" --duration "${MAX_SECONDS:-15}"
done
