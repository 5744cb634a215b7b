#!/usr/bin/env bash
# The database's own limit for the slot search (issue 31): the service's findSlots statements
# (loadtest/pgbench/find_slots.sql) on a database seeded by `clinic-loadtest seed`:
#
#   DB=postgres://postgres@127.0.0.1:55432/lt loadtest/pgbench-find.sh
#
# Rows, each SECONDS_EACH (20) at CLIENTS ("8 32 64"): `find` (a random specialty and start
# day, 14 days, first 20) and `find-worst` (rheumatology from the first day: its first 13 days
# are booked out). pgbench reports latency average and the tps; -r per statement.
set -euo pipefail
cd "$(dirname "$0")"
DB=${DB:?set DB to the seeded database URL}
SECONDS_EACH=${SECONDS_EACH:-20}  # not SECONDS: bash counts its own seconds in it
CLIENTS=${CLIENTS:-8 32 64}

bench() { # label worst
  local label=$1 worst=$2
  for c in $CLIENTS; do
    local out tps lat
    out=$(pgbench -n -M prepared -c "$c" -j 2 -T "$SECONDS_EACH" -D worst="$worst" -f pgbench/find_slots.sql "$DB" 2>&1)
    tps=$(awk '/^tps/ {print int($3)}' <<<"$out")
    lat=$(awk '/latency average/ {print $4}' <<<"$out")
    printf '%-11s c=%-3s %8s tps  %8s ms average\n' "$label" "$c" "$tps" "$lat"
  done
}

bench find 0
bench find-worst 1
