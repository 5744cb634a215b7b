#!/usr/bin/env bash
# The load benchmark of BENCHMARKS.md, end to end: a fresh database, the 1.12 M-slot seed, the
# release server, the opening morning (open model) and the maximum-throughput runs (closed
# model), each ending with the database invariant check.
#
#   PG=postgres://postgres@127.0.0.1:55432 REDIS=redis://127.0.0.1:56379/4 loadtest/run-all.sh
#
# Settings (environment): PG (server URL without database), DB (database name, default lt),
# REDIS (Redis URL; empty: single-process mode), PORT (18080), OPENING_RATE (5000),
# OPENING_READ_RATES ("500 5000": one opening run per read rate), OPENING_SECONDS (30), OPENING_WARMUP (3),
# MAX_SECONDS (15), CONNECTIONS (64), SERVER_ENV (extra K=V words for the server), BIN (the server
# binary, default target/release/clinic-booking: an older build measures a baseline, since the server
# migrates the database itself before the seed) and LT (target/release/clinic-loadtest).
# Which runs: OPENING_READ_RATES, CLOSED_SCENARIOS ("reads reject success mix") and FIND_SCENARIOS
# ("find-slots find-worst find-one"); an empty one skips its runs, so the slot search alone is
#   OPENING_READ_RATES= CLOSED_SCENARIOS= PG=… REDIS=… loadtest/run-all.sh
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
BIN=${BIN:-target/release/clinic-booking}
LT=${LT:-target/release/clinic-loadtest}

read -ra extra <<< "${SERVER_ENV:-}"
env DATABASE_URL="$DATABASE_URL" ${REDIS:+REDIS_URL="$REDIS"} BIND_ADDR="127.0.0.1:$PORT" RUST_LOG=warn \
  "${extra[@]}" "$BIN" serve > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.2; done
curl -s "http://127.0.0.1:$PORT/readyz"; echo
# The server migrated the empty database with its own migrations; the seed only loads rows.
"$LT" seed --no-migrate --database-url "$DATABASE_URL" --out "$OUT/seed.json"

run() { "$LT" run --url "http://127.0.0.1:$PORT" --seed "$OUT/seed.json" \
          --database-url "$DATABASE_URL" "$@" || true; echo; }
for reads in ${OPENING_READ_RATES-500 5000}; do
  run --scenario opening --rate "${OPENING_RATE:-5000}" --read-rate "$reads" --duration "${OPENING_SECONDS:-30}" \
    --warmup "${OPENING_WARMUP:-3}"
done
for s in ${CLOSED_SCENARIOS-reads reject success mix}; do
  run --scenario "$s" --connections "${CONNECTIONS:-64}" --duration "${MAX_SECONDS:-15}"
done
# The slot search (builds from before findSlots answer BAD_REQUEST: FIND_SCENARIOS= skips it).
for s in ${FIND_SCENARIOS-find-slots find-worst find-one}; do
  run --scenario "$s" --connections "${CONNECTIONS:-64}" --duration "${MAX_SECONDS:-15}"
done
# The queueing of each runtime over the whole run (a histogram per lane; the booking lane's when
# the server has one).
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^lane_wait_seconds(_sum|_count)?\{' || true
