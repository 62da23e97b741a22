#!/bin/sh
# Entry point of tarn-test/postgres (built by scripts/images.sh from the machine's own Postgres
# binaries). It runs as the unprivileged postgres user: creates a cluster on first start, lets
# every host in with POSTGRES_HOST_AUTH_METHOD (default trust: a test image), then runs the
# server with the settings passed as arguments, like the postgres image:
#   postgres -c wal_level=logical -c max_wal_senders=20 ...
set -e
if [ "$1" = postgres ]; then
	shift
fi
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	initdb -D "$PGDATA" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
	# initdb trusts only loopback; connections through a published port come from the bridge.
	printf 'host all all all %s\nhost replication all all %s\n' \
		"${POSTGRES_HOST_AUTH_METHOD:-trust}" "${POSTGRES_HOST_AUTH_METHOD:-trust}" >>"$PGDATA/pg_hba.conf"
fi
# docker stop sends SIGTERM, which Postgres takes as a smart shutdown that waits for every client
# to leave; pass it on as SIGINT (fast shutdown), as the postgres image's STOPSIGNAL does.
postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp "$@" &
pid=$!
trap 'kill -INT "$pid"' TERM INT
# wait returns early when a trapped signal arrives: wait again for the server to finish.
wait "$pid" || true
wait "$pid"
