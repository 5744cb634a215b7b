#!/usr/bin/env bash
# What the slot search's specialty index costs the booking statement: the last-seat booking
# (loadtest/pgbench/book.sql, capacity-1 slots of the seed) with and without
# ix_time_slot_open_specialty, alternating, each run on a fresh range of 100,000 slots (ids from
# 200,000), the index dropped and re-created between runs:
#
#   DB=postgres://postgres@127.0.0.1:55432/lt loadtest/index-cost.sh
#
# Settings (environment): DB (a database seeded by `clinic-loadtest seed`), ROUNDS (3),
# CLIENTS (32), SECONDS_EACH (10). It leaves the index in place.
set -euo pipefail
cd "$(dirname "$0")"
DB=${DB:?set DB to the seeded database URL}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-32}
SECONDS_EACH=${SECONDS_EACH:-10}
INDEX="CREATE INDEX IF NOT EXISTS ix_time_slot_open_specialty ON time_slot (specialty, start_at, doctor_id, id) WHERE open"
run() {
  pgbench -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_EACH" -D lo="$1" -D hi=$(($1 + 99999)) \
    -f pgbench/book.sql "$DB" 2>&1 | awk '/^tps/ {print int($3)}'
}
lo=200000
for r in $(seq "$ROUNDS"); do
  with=$(run $lo)
  lo=$((lo + 100000))
  psql -X -q "$DB" -c "DROP INDEX ix_time_slot_open_specialty"
  without=$(run $lo)
  lo=$((lo + 100000))
  psql -X -q "$DB" -c "$INDEX"
  echo "round $r: with the index $with tps, without $without tps"
done
