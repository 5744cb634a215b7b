#!/usr/bin/env bash
# One day's horizon roll for every doctor (2,000 x 40 = 80,000 slots) while the opening morning
# runs (issue 30): the bookings' p99 over the seconds the roll ran, against the same seconds of
# the same load without it, rounds alternating.
#
#   PG=postgres://postgres@127.0.0.1:55432 REDIS=redis://127.0.0.1:56379/4 loadtest/roll-under-load.sh
#
# The 1.12 M-slot seed (days 1-14, 08:00-18:00 UTC) gets working hours from day 15 on (40
# fifteen-minute slots a day); round k's roll is `clinic-booking roll-horizon` (the pass every
# instance runs) with SCHEDULE_HORIZON_DAYS=14+k, so it makes exactly day 14+k: what a day passing
# makes. It starts ROLL_AT seconds into the measured load.
#
# Settings (environment): PG, DB (roll_load), REDIS, PORT (18080), ROUNDS (2), OPENING_RATE
# (5000), READ_RATE (500), OPENING_SECONDS (30), ROLL_AT (8), BIN, LT (as in run-all.sh);
# SCHEDULE_ROLL_SHARE_PERCENT reaches the roll (the pace of the daily roll, as on the server).
set -euo pipefail
cd "$(dirname "$0")/.."
PG=${PG:-postgres://postgres@127.0.0.1:5432}
DB=${DB:-roll_load}
REDIS=${REDIS-redis://127.0.0.1:6379/4}
PORT=${PORT:-18080}
OUT=${OUT:-target/loadtest}
ROUNDS=${ROUNDS:-2}
ROLL_AT=${ROLL_AT:-8}
BIN=${BIN:-target/release/clinic-booking}
LT=${LT:-target/release/clinic-loadtest}
export JWT_SECRET=${JWT_SECRET:-loadtest-secret-0123456789abcdef} RUST_LOG=warn
mkdir -p "$OUT"
psql -X -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
[ -n "$REDIS" ] && redis-cli -u "$REDIS" FLUSHDB > /dev/null
export DATABASE_URL="$PG/$DB"
env ${REDIS:+REDIS_URL="$REDIS"} BIND_ADDR="127.0.0.1:$PORT" "$BIN" serve > "$OUT/roll-server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.2; done
"$LT" seed --no-migrate --database-url "$DATABASE_URL" --out "$OUT/seed.json"

. loadtest/pattern.sh
WEEK=$(forty_slot_week)
psql -X -q "$DATABASE_URL" -c "INSERT INTO working_hours (doctor_id, valid_from, weekly, created_at)
  SELECT id, to_char(now() AT TIME ZONE 'UTC' + interval '15 days', 'YYYY-MM-DD'), '$WEEK', now() FROM doctor"
# Earlier passes made days 0-14 (the seed's slots): each round's roll is the daily one.
psql -X -q "$DATABASE_URL" -c "INSERT INTO schedule_horizon (doctor_id, scheduled_through, updated_at)
  SELECT id, to_char(now() AT TIME ZONE timezone + interval '14 days', 'YYYY-MM-DD'), now() FROM doctor"
psql -X -q "$DATABASE_URL" -c "VACUUM ANALYZE"

opening() { # csv
  "$LT" run --url "http://127.0.0.1:$PORT" --seed "$OUT/seed.json" --database-url "$DATABASE_URL" \
    --scenario opening --rate "${OPENING_RATE:-5000}" --read-rate "${READ_RATE:-500}" \
    --duration "${OPENING_SECONDS:-30}" --warmup 3 --latencies "$1" | grep -E '^(op|book|read|check)'
}
# p99 in ms of one op's answers sent from FROM to TO ms after the run's first send.
window_p99() { # csv op from to
  awk -F, -v op="$2" 'NR == 1 || $2 < t0 { t0 = $2 } { a[NR] = $0 } END { for (i in a) print t0 "," a[i] }' "$1" |
    awk -F, -v op="$2" -v from="$3" -v to="$4" '$2 == op && $3 - $1 >= from && $3 - $1 < to { print $4 }' |
    sort -n | awk '{ v[NR] = $1 } END { i = int(NR * 0.99 + 0.999); if (i < 1) i = 1;
                                         printf "%.2f ms (%d answers)", v[i] / 1000, NR }'
}
for round in $(seq "$ROUNDS"); do
  echo "== round $round: without the roll"
  opening "$OUT/roll-base-$round.csv"
  echo "== round $round: with the roll of day $((14 + round)) from ${ROLL_AT}s"
  opening "$OUT/roll-with-$round.csv" &
  LOAD=$!
  sleep $((3 + ROLL_AT + 1))
  t0=$(date +%s%3N)
  SCHEDULE_HORIZON_DAYS=$((14 + round)) "$BIN" roll-horizon
  t1=$(date +%s%3N)
  wait $LOAD
  first=$(awk -F, 'NR == 1 || $2 < m { m = $2 } END { print m }' "$OUT/roll-with-$round.csv")
  from=$((t0 - first)) to=$((t1 - first))
  echo "roll ran ${from}-${to} ms into the measured load"
  for op in book read; do
    echo "  $op p99 in that window: without $(window_p99 "$OUT/roll-base-$round.csv" $op $from $to)," \
         "with $(window_p99 "$OUT/roll-with-$round.csv" $op $from $to)"
  done
done
psql -X -q -t "$DATABASE_URL" -c "SELECT count(*) || ' pattern slots' FROM time_slot WHERE from_pattern"
