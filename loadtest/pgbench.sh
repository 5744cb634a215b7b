#!/usr/bin/env bash
# The database's own limit for the service's booking statement (issue 15: "measure our exact
# booking statement with pgbench"), and what each part of it costs, on a database seeded by
# `clinic-loadtest seed` with a wide set (capacity 2e9) whose slot ids are LO..HI:
#
#   DB=postgres://postgres@127.0.0.1:55432/lt LO=… HI=… loadtest/pgbench.sh
#
# Rows, each SECONDS_EACH (20) at CLIENTS ("8 32 64"):
#   book            the statement as the service sends it (src/db/book_pg.rs)
#   no-outbox       without its outbox insert
#   no-lock         without the patient's advisory lock (the overlap rule's deadlock guard)
#   no-exclusion    as sent, with the overlap exclusion constraint dropped (a copy database)
#   commit-delay    as sent, with commit_delay=200 (µs) and commit_siblings=4 for its sessions
# The copy database is dropped at the end.
set -euo pipefail
cd "$(dirname "$0")"
DB=${DB:?set DB to the seeded database URL}
LO=${LO:?set LO and HI to the slot ids of the wide set}
HI=${HI:?}
SECONDS_EACH=${SECONDS_EACH:-20}  # not SECONDS: bash counts its own seconds in it
CLIENTS=${CLIENTS:-8 32 64}
server=${DB%/*}
name=${DB##*/}

bench() { # label url script [extra PGOPTIONS]
  local label=$1 url=$2 script=$3
  for c in $CLIENTS; do
    local tps
    tps=$(PGOPTIONS="${4:-}" pgbench -n -M prepared -c "$c" -j 2 -T "$SECONDS_EACH" -D lo="$LO" -D hi="$HI" \
      -f "pgbench/$script" "$url" 2>&1 | awk '/^tps/ {print int($3)}')
    printf '%-14s c=%-3s %8s tps\n' "$label" "$c" "$tps"
  done
}

bench book "$DB" book.sql
bench no-outbox "$DB" book_no_outbox.sql
bench no-lock "$DB" book_no_lock.sql
bench commit-delay "$DB" book.sql "-c commit_delay=200 -c commit_siblings=4"
copy="${name}_noexcl"
psql -X -q "$server/postgres" -c "DROP DATABASE IF EXISTS $copy WITH (FORCE)" -c "CREATE DATABASE $copy TEMPLATE $name"
psql -X -q "$server/$copy" -c "ALTER TABLE appointment DROP CONSTRAINT ex_appointment_patient_overlap"
bench no-exclusion "$server/$copy" book.sql
psql -X -q "$server/postgres" -c "DROP DATABASE IF EXISTS $copy WITH (FORCE)"
